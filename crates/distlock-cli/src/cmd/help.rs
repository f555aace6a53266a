//! `distlock completions SHELL` and `distlock man [SUBCOMMAND]`: what clap knows of the
//! arguments, as a shell completion script or a manual page (clap's own generators, so they
//! follow every flag as it is declared).

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;

use crate::EXIT_USAGE;

/// Arguments of `distlock completions`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    distlock completions bash > /etc/bash_completion.d/distlock\n  \
    distlock completions zsh > \"${fpath[1]}/_distlock\"\n  \
    distlock completions fish > ~/.config/fish/completions/distlock.fish")]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    shell: clap_complete::Shell,
}

/// Arguments of `distlock man`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    distlock man > distlock.1 && man ./distlock.1\n  \
    distlock man exec > distlock-exec.1")]
pub(crate) struct ManArgs {
    /// A subcommand whose own page to print (exec, status, …) [default: the distlock page].
    subcommand: Option<String>,
}

/// Writes the completion script of `C` for the shell asked.
pub(crate) fn completions<C: CommandFactory>(args: CompletionsArgs) -> ExitCode {
    let mut command = C::command();
    let name = command.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut out);
    print(&out)
}

/// Writes the manual page of `C`, or of its subcommand `args.subcommand`.
pub(crate) fn man<C: CommandFactory>(args: ManArgs) -> ExitCode {
    let mut command = C::command();
    // Built, subcommands know their full name (`distlock exec`) for the page's synopsis.
    command.build();
    let page = match &args.subcommand {
        None => clap_mangen::Man::new(command),
        Some(wanted) => {
            let Some(sub) = command.find_subcommand(wanted) else {
                let known: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
                eprintln!(
                    "distlock: no subcommand {wanted:?} (one of {}) (see --help)",
                    known.join(", ")
                );
                return ExitCode::from(EXIT_USAGE);
            };
            // The page's title: `distlock-exec(1)`, as git and cargo name theirs.
            let title = format!("{}-{}", command.get_name(), sub.get_name());
            clap_mangen::Man::new(sub.clone().version(env!("CARGO_PKG_VERSION"))).title(title)
        }
    };
    let mut out = Vec::new();
    if let Err(e) = page.render(&mut out) {
        eprintln!("distlock: cannot render the manual page: {e}");
        return ExitCode::from(70);
    }
    print(&out)
}

/// Writes `bytes` to stdout; a closed stdout (`| head`) is not an error worth more than a line.
fn print(bytes: &[u8]) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("distlock: cannot write to stdout: {e}");
            ExitCode::from(74)
        }
    }
}

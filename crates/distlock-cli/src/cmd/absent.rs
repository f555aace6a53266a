//! `distlock demo`, `bench` and `torture` in a build without the `tools` feature: each still
//! parses, so that asking for one says how to get it rather than "unrecognized subcommand".

use std::process::ExitCode;

use crate::EXIT_USAGE;

/// Whatever was given to a subcommand this build lacks: taken as it is, as it is never used.
#[derive(clap::Args, Debug)]
pub(crate) struct AbsentArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    ignored: Vec<String>,
}

/// Says that `subcommand` is not part of this build and how to install a build that has it.
pub(crate) fn run(subcommand: &str) -> ExitCode {
    eprintln!(
        "distlock: `{subcommand}` is not part of this build of distlock: it comes with the \
         `tools` cargo feature, on by default; install it with `cargo install distlock-cli` \
         (without --no-default-features)"
    );
    ExitCode::from(EXIT_USAGE)
}

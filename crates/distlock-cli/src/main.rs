//! `distlock`: run a command under a distributed lock, and more.
//!
//! Each subcommand lives in `cmd/<name>.rs` or `cmd/<name>/`; this file only parses arguments and
//! dispatches.

// Every unsafe block says why it is sound.
#![warn(clippy::undocumented_unsafe_blocks)]

mod cmd;
mod duration;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status of every subcommand for invalid arguments (EX_USAGE in sysexits.h), whether clap or
/// the subcommand finds them.
pub(crate) const EXIT_USAGE: u8 = 64;
/// Exit status of every subcommand when the store cannot be reached or fails, or `serve` cannot
/// listen (EX_UNAVAILABLE in sysexits.h): apart from 75, which says a lock is held by another.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;

/// `etcd` in `--version`'s list of stores, when the build has it.
#[cfg(feature = "etcd")]
macro_rules! etcd_store {
    () => {
        ", etcd"
    };
}
#[cfg(not(feature = "etcd"))]
macro_rules! etcd_store {
    () => {
        " (etcd: not in this build; `cargo install distlock-cli --features etcd`, needs protoc)"
    };
}

/// `demo`, `bench` and `torture` in `--version`, or how to get them.
#[cfg(feature = "tools")]
macro_rules! tools {
    () => {
        "demo, bench, torture"
    };
}
#[cfg(not(feature = "tools"))]
macro_rules! tools {
    () => {
        "not in this build (the `tools` feature, on by default)"
    };
}

/// What `--version` prints: the version, then what this build was built with, since cargo
/// features decide which stores and subcommands a `distlock` binary has.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nstores: sqlite, redis (rediss, redis-sentinel, redis-cluster), redlock, postgres, mysql, \
     zk, memcached, objectstore (s3, az)",
    etcd_store!(),
    "\ntools: ",
    tools!()
);

/// Distributed locks for scripts, cron jobs and services.
#[derive(Parser, Debug)]
#[command(
    name = "distlock",
    version,
    long_version = LONG_VERSION,
    about,
    long_about = None,
    after_help = "Environment:\n  \
        DISTLOCK_URL   the store of every subcommand not given --url [default: \
        sqlite:distlock.db in the working directory]\n  \
        DISTLOCK_LOG   what to log on stderr, as a tracing filter: error, warn, info, debug, \
        distlock=trace, … [default: error]\n  \
        Options have a variable of their own (DISTLOCK_LEASE, DISTLOCK_WAIT, DISTLOCK_JSON, …): \
        each subcommand's --help names it beside the option; the option wins over the variable. \
        Those that say which lock or what to do (NAME, COMMAND, -c, exec's --shared, --write, \
        --limit, --fair and --no-wait, release's --kind and --force, leader's --watch) have \
        none, so that a variable left set cannot change them.\n\
        COMMAND run by `exec` gets DISTLOCK_LOCK_NAME and DISTLOCK_FENCING_TOKEN; by `elect`, \
        DISTLOCK_ELECTION, DISTLOCK_LEADER_VALUE and DISTLOCK_TERM.\n\
        Exit status (every subcommand): 64 for invalid arguments, 69 if the store cannot be \
        reached or fails, 75 if a lock is held by another; see each subcommand's --help."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run COMMAND while holding lock NAME (like flock, for many machines).
    Exec(cmd::exec::ExecArgs),
    /// Run COMMAND only while leader of election NAME (stopped if leadership is lost).
    Elect(cmd::elect::ElectArgs),
    /// Print the current leader of election NAME, or follow every new one with --watch.
    Leader(cmd::elect::LeaderArgs),
    /// Show who holds lock NAME (or every lock under --prefix): holder pid, token, lease left.
    Status(cmd::status::StatusArgs),
    /// Take lock NAME from whoever holds it (--force), advancing its fencing token.
    Release(cmd::status::ReleaseArgs),
    /// Show overselling and lost updates under load, and every strategy that prevents them.
    #[cfg(feature = "tools")]
    Demo(cmd::demo::DemoArgs),
    /// Measure a store: lock cycles per second, hand-offs, wait times, and safety violations.
    #[cfg(feature = "tools")]
    Bench(cmd::bench::BenchArgs),
    /// Inject faults (kill, stop, slow or cut links) under a lock workload and check what held.
    #[cfg(feature = "tools")]
    Torture(cmd::torture::TortureArgs),
    /// Not in this build: the overselling demo comes with the `tools` feature.
    #[cfg(not(feature = "tools"))]
    Demo(cmd::absent::AbsentArgs),
    /// Not in this build: the store benchmark comes with the `tools` feature.
    #[cfg(not(feature = "tools"))]
    Bench(cmd::absent::AbsentArgs),
    /// Not in this build: fault injection comes with the `tools` feature.
    #[cfg(not(feature = "tools"))]
    Torture(cmd::absent::AbsentArgs),
    /// Serve a live lock status page, its JSON (/api/locks) and Prometheus metrics (/metrics).
    Serve(cmd::serve::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(cmd::help::CompletionsArgs),
    /// Print the manual page (roff) of distlock or of one subcommand on stdout.
    Man(cmd::help::ManArgs),
}

fn main() -> ExitCode {
    // rediss:// (redis-rs' TLS) uses rustls' process-wide crypto provider, which the library
    // leaves to the application to choose. Nothing else has installed one this early. ring builds
    // with no C toolchain beyond cc (aws-lc-rs needs cmake on some platforms); rustls 0.23.48
    // deprecates its provider for lacking post-quantum key exchange, which `cargo install`
    // (newest rustls, no lock file) would otherwise print as a warning to every user.
    #[allow(deprecated)]
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DISTLOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("distlock: cannot start the async runtime: {e}");
            return ExitCode::from(71);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Exec(args) => cmd::exec::run(args).await,
            Command::Elect(args) => cmd::elect::run_elect(args).await,
            Command::Leader(args) => cmd::elect::run_leader(args).await,
            Command::Status(args) => cmd::status::run_status(args).await,
            Command::Release(args) => cmd::status::run_release(args).await,
            #[cfg(feature = "tools")]
            Command::Demo(args) => cmd::demo::run(args).await,
            #[cfg(feature = "tools")]
            Command::Bench(args) => cmd::bench::run(args).await,
            #[cfg(feature = "tools")]
            Command::Torture(args) => cmd::torture::run(args).await,
            #[cfg(not(feature = "tools"))]
            Command::Demo(_) => cmd::absent::run("demo"),
            #[cfg(not(feature = "tools"))]
            Command::Bench(_) => cmd::absent::run("bench"),
            #[cfg(not(feature = "tools"))]
            Command::Torture(_) => cmd::absent::run("torture"),
            Command::Serve(args) => cmd::serve::run(args).await,
            Command::Completions(args) => cmd::help::completions::<Cli>(args),
            Command::Man(args) => cmd::help::man::<Cli>(args),
        }
    })
}

/// Prints clap's verdict on the arguments. `--help` and `--version` succeed; everything else is a
/// usage error, said in one line (clap's own exit status, 2, would read as COMMAND's to a script
/// running `distlock exec`).
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        // `distlock` or `distlock demo --internal` alone: the help is the message.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(EXIT_USAGE)
        }
        // clap's first line says only "the following required arguments were not provided:";
        // the arguments follow on lines of their own.
        ErrorKind::MissingRequiredArgument => {
            let missing = match e.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::Strings(args)) => args.join(", "),
                _ => "an argument".to_string(),
            };
            eprintln!("distlock: missing {missing} (see --help)");
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("distlock: {first} (see --help)");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

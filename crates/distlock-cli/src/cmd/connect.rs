//! Connecting to the store, for every subcommand that runs jobs or reads locks: riding out a store
//! that is still starting or restarting, and what to say of a store this build lacks.

use std::time::{Duration, Instant};

use distlock::ErrorKind;
use distlock::url::Scheme;

/// The first pause before trying an unreachable store again; each failure doubles it, up to
/// [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between tries: a store back up is found within this, and a store down for
/// hours costs one attempt (and one log line) per pause.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// How long to keep trying a store that cannot be reached.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Patience {
    /// One attempt: a mistyped URL fails at once rather than hanging a cron job.
    Once,
    /// Until this instant (`exec --wait`), then the last failure.
    Until(Instant),
    /// For as long as it takes (`elect`, which campaigns forever anyway).
    Forever,
}

impl Patience {
    /// Until `wait` from now, or once without a wait.
    pub(crate) fn within(wait: Option<Duration>) -> Self {
        match wait.and_then(|wait| Instant::now().checked_add(wait)) {
            Some(deadline) => Patience::Until(deadline),
            // A wait too long to represent is as good as forever.
            None if wait.is_some() => Patience::Forever,
            None => Patience::Once,
        }
    }

    /// How long may still be spent before the next attempt, at most `pause`: zero when the
    /// patience has run out.
    fn pause_left(self, pause: Duration) -> Duration {
        match self {
            Patience::Once => Duration::ZERO,
            Patience::Until(deadline) => {
                pause.min(deadline.saturating_duration_since(Instant::now()))
            }
            Patience::Forever => pause,
        }
    }
}

/// Connects to `url`. While the store cannot be reached (a [`ErrorKind::Connection`] error), tries
/// again with growing pauses as `patience` allows, calling `retrying` with each failure and the
/// pause before the next attempt; any other error (a bad URL, refused credentials) is answered at
/// once.
pub(crate) async fn connect(
    url: &str,
    patience: Patience,
    mut retrying: impl FnMut(&distlock::Error, Duration),
) -> distlock::Result<distlock::Client> {
    if let Some(lacking) = lacking(url) {
        return Err(lacking);
    }
    let mut pause = FIRST_PAUSE;
    loop {
        match distlock::connect(url).await {
            Err(e) if e.kind() == ErrorKind::Connection => {
                let next = patience.pause_left(pause);
                if next.is_zero() {
                    return Err(e);
                }
                retrying(&e, next);
                tokio::time::sleep(next).await;
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            connected => return connected,
        }
    }
}

/// The error for a URL whose store this build of the command lacks, saying how to install one
/// that has it (the library's own message speaks to a program depending on it, not to someone
/// who installed the command).
fn lacking(url: &str) -> Option<distlock::Error> {
    match Scheme::of(url) {
        // InvalidUrl (exit 64), which reads "invalid URL: …", rather than the library's
        // Unsupported, which speaks to a program that depends on the library.
        Ok(Scheme::Etcd) if !cfg!(feature = "etcd") => Some(distlock::Error::new(
            ErrorKind::InvalidUrl,
            "this build of the distlock command has no etcd store: install one that has it with \
             `cargo install distlock-cli --features etcd`, which needs protoc to build \
             (Debian/Ubuntu: `apt install protobuf-compiler libprotobuf-dev`; macOS: \
             `brew install protobuf`)",
        )),
        _ => None,
    }
}

//! The one error type every distlock call returns.
//!
//! Contention is not an error: `try_acquire` answers `Ok(None)` when the lock is taken. Errors are
//! for what the caller must act on: bad input, a deadline that passed, a lock that is not (or no
//! longer) ours, a store that could not be reached or refused the request.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong, as a value a caller can match on. New kinds may be added.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A lock name that is empty, longer than 512 bytes or contains control characters.
    InvalidName,
    /// A lease outside 10 ms ..= 24 h, or one this store cannot keep (the message names the
    /// bound): below its granularity or its server's minimum, shorter than the session that
    /// keeps a stopped holder's locks, not above twice Redis' `?wait_timeout`, or any lease
    /// set, and [`no_watchdog`](crate::Lock::no_watchdog), where only the connection's end
    /// frees a holding (SQL `?lock=session`).
    InvalidLease,
    /// A URL that is malformed or names an unknown scheme (a store this build lacks is
    /// [`Unsupported`](ErrorKind::Unsupported), naming the cargo feature to enable).
    InvalidUrl,
    /// Another argument that makes no sense (zero permits, an empty multi-lock, …).
    InvalidInput,
    /// The wait for a lock, a leadership or a latch reached its deadline.
    Timeout,
    /// [`Lock::release`](crate::Lock::release) for an owner that does not hold the lock, or
    /// with no owner set. (A [`Guard`](crate::Guard)'s release of a holding it lost answers
    /// `Ok(false)`, and re-entering one answers [`LeaseLost`](ErrorKind::LeaseLost).)
    NotHeld,
    /// The lease ended before the operation finished: someone else may hold the lock now.
    LeaseLost,
    /// This backend cannot do what was asked (a lock flavour, an operation), or the URL names a
    /// store this build of distlock lacks (the message names the cargo feature to enable).
    Unsupported,
    /// The store could not be reached, or the connection broke mid-call.
    Connection,
    /// The store answered with an error.
    Backend,
    /// Too few of a store's independent servers answered to decide (Redlock: fewer than a
    /// majority of its masters, or a majority only after the lease's validity), or too few
    /// replicas acknowledged a take (Redis `?wait_replicas=N`: the take was undone); the message
    /// says how many answered of how many, or how late.
    NoQuorum,
    /// A fenced write was refused: its fencing token is not above the last one the resource
    /// accepted, so a newer holder has written since (see [`crate::fence`]); likewise a
    /// leader's [`proclaim`](crate::Leadership::proclaim) once a newer term has begun.
    StaleToken,
}

impl ErrorKind {
    /// The kind in `snake_case` (`timeout`, `not_held`, `no_quorum`, …): a bounded value for
    /// metric labels and structured logs, stable across releases for the kinds that exist.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidLease => "invalid_lease",
            ErrorKind::InvalidUrl => "invalid_url",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::Timeout => "timeout",
            ErrorKind::NotHeld => "not_held",
            ErrorKind::LeaseLost => "lease_lost",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Connection => "connection",
            ErrorKind::Backend => "backend",
            ErrorKind::NoQuorum => "no_quorum",
            ErrorKind::StaleToken => "stale_token",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid lock name",
            ErrorKind::InvalidLease => "invalid lease",
            ErrorKind::InvalidUrl => "invalid URL",
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Timeout => "timed out waiting",
            ErrorKind::NotHeld => "lock not held",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::Unsupported => "not supported",
            ErrorKind::Connection => "connection failure",
            ErrorKind::Backend => "backend error",
            ErrorKind::NoQuorum => "no quorum",
            ErrorKind::StaleToken => "stale fencing token",
        }
    }
}

/// A distlock error: a [`kind`](Error::kind), the backend it came from, a message and maybe the
/// store's own error as [`source`](StdError::source).
///
/// `Display` shows the kind, backend and message, not the source: printing the chain (anyhow's
/// `{:#}`, or walking [`source`](StdError::source)) then shows each cause once. `Display` never
/// shows a password: URLs are redacted before they reach a message.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// use distlock::ErrorKind;
/// use std::time::Duration;
///
/// match client.lock("nightly-report").acquire_timeout(Duration::from_secs(5)).await {
///     Ok(guard) => { guard.release().await?; }
///     Err(e) if e.kind() == ErrorKind::Timeout => { /* another instance is on it */ }
///     Err(e) if e.is_retryable() => eprintln!("store unreachable: {}", distlock::error::chain(&e)),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
pub struct Error {
    kind: ErrorKind,
    backend: &'static str,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// `Result` with distlock's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with a message saying what and why.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            backend: "",
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error (a driver's, an I/O error).
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// [`with_source`](Error::with_source) for a cause already boxed.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "sqlite-fence")),
        allow(dead_code)
    )]
    pub(crate) fn with_boxed_source(mut self, source: Box<dyn StdError + Send + Sync>) -> Self {
        self.source = Some(source);
        self
    }

    /// Names the backend the error came from (`"sqlite"`, `"redis"`, …).
    pub fn with_backend(mut self, backend: &'static str) -> Self {
        self.backend = backend;
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The backend the error came from, or `""` when it came from the core (bad input).
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The message without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when trying again later may succeed: a timeout, a connection failure, or too few
    /// servers answering.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::NoQuorum
        )
    }

    /// True for [`ErrorKind::Timeout`].
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// True for [`ErrorKind::NotHeld`].
    pub fn is_not_held(&self) -> bool {
        self.kind == ErrorKind::NotHeld
    }

    /// True for [`ErrorKind::StaleToken`]: a newer holder has written; this holder must stop.
    pub fn is_stale_token(&self) -> bool {
        self.kind == ErrorKind::StaleToken
    }

    pub(crate) fn unsupported(backend: &'static str, what: impl fmt::Display) -> Self {
        Error::new(
            ErrorKind::Unsupported,
            format!("the {backend} backend does not support {what}"),
        )
        .with_backend(backend)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.describe())?;
        if !self.backend.is_empty() {
            write!(f, " ({})", self.backend)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("backend", &self.backend)
            .field("message", &self.message)
            .field("source", &self.source.as_ref().map(|s| s.to_string()))
            .finish()
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn StdError + 'static))
    }
}

/// `error: cause: cause's cause`, like anyhow's `{:#}`, but a cause whose text is already on the
/// line is left out: some drivers (redis-rs, sqlx) put their cause's text in their own message
/// and return that cause as `source()` too.
pub fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod chain_tests {
    use super::*;
    use std::error::Error;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn Error + 'static))
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let refused = Layer("Connection refused", None);
        let driver = Layer(
            "error communicating: Connection refused",
            Some(Box::new(refused)),
        );
        let ours = Layer(
            "connection failure: connecting to h",
            Some(Box::new(driver)),
        );
        assert_eq!(
            chain(&ours),
            "connection failure: connecting to h: error communicating: Connection refused"
        );
    }
}

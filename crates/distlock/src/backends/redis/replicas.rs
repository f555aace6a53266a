//! Replica acknowledgement: `?wait_replicas=N&wait_timeout=D` on `redis://`,
//! `redis-sentinel://` and `redis-cluster://`. A take (and a renewal) counts only once `N`
//! replicas acknowledged it: the script is followed by `WAIT N ms` on the same connection, in
//! the same write, so `WAIT` waits for exactly the replication offset of that take. Fewer acknowledgements undo the take
//! (released by its token) and the caller gets [`ErrorKind::NoQuorum`], never a guard.
//!
//! The pieces here know nothing of how a connection reaches the lock's master: on a cluster the
//! take and [`ReplicaAck::command`] go out as one pipeline, routed by the take's key to the
//! lock's master (`cluster.rs`), and `WAIT` counts that master's replicas only. Asking for more
//! replicas than the lock's master has is not refused up front (a replica may be added, or come
//! back, at any time): each take then answers [`ErrorKind::NoQuorum`].
//!
//! What it buys and costs is in docs.md ("Replica acknowledgement").

use std::time::Duration;

use ::redis::Cmd;

use crate::error::{Error, ErrorKind, Result};
use crate::types::LockName;
use crate::url::parse_duration;

/// The URL's `wait_replicas` parameter.
pub(crate) const WAIT_REPLICAS: &str = "wait_replicas";
/// The URL's `wait_timeout` parameter.
pub(crate) const WAIT_TIMEOUT: &str = "wait_timeout";
/// The longest `wait_timeout` accepted: a take that may block its connection longer than this
/// is a misconfiguration, not a safety margin (leases are seconds).
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// How many replicas must acknowledge a take, and how long to wait for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    /// At least 1 (`wait_replicas=0` means no acknowledgement: no `ReplicaAck` at all).
    pub(crate) replicas: u32,
    /// Above zero: Redis reads `WAIT n 0` as "wait forever", which a lock must never do.
    pub(crate) timeout: Duration,
}

impl ReplicaAck {
    /// The URL's `wait_replicas` and `wait_timeout` values read (absent: 0 and none), not yet
    /// judged together ([`ReplicaAck::new`] does). The error says what is wrong.
    pub(crate) fn parse(
        replicas: Option<&str>,
        timeout: Option<&str>,
    ) -> std::result::Result<(u32, Option<Duration>), String> {
        let replicas = match replicas {
            None => 0,
            Some(n) => n.parse::<u32>().map_err(|_| {
                format!("{WAIT_REPLICAS} is not a whole number of replicas (e.g. 1 or 2)")
            })?,
        };
        let timeout = timeout
            .map(|t| {
                parse_duration(t)
                    .ok_or_else(|| format!("{WAIT_TIMEOUT} is not a duration (e.g. 100ms, 1s)"))
            })
            .transpose()?;
        Ok((replicas, timeout))
    }

    /// The acknowledgement `replicas` and `timeout` ask for, `None` for none (`replicas` 0).
    /// The error says what is wrong.
    pub(crate) fn new(
        replicas: u32,
        timeout: Option<Duration>,
    ) -> std::result::Result<Option<Self>, String> {
        match (replicas, timeout) {
            (0, None) => Ok(None),
            (0, Some(_)) => Err(format!(
                "{WAIT_TIMEOUT} without {WAIT_REPLICAS}=N (N ≥ 1) means nothing"
            )),
            (_, None) => Err(format!(
                "{WAIT_REPLICAS} needs {WAIT_TIMEOUT} (e.g. {WAIT_TIMEOUT}=100ms): without one, \
                 a take would wait for replicas that may never answer"
            )),
            (_, Some(t)) if t.is_zero() => Err(format!(
                "{WAIT_TIMEOUT}=0 would make Redis wait forever (WAIT's 0); give a duration above \
                 zero"
            )),
            (_, Some(t)) if t > LONGEST_WAIT => Err(format!(
                "{WAIT_TIMEOUT} above {}s: a take would block its connection that long",
                LONGEST_WAIT.as_secs()
            )),
            (replicas, Some(timeout)) => Ok(Some(ReplicaAck { replicas, timeout })),
        }
    }

    /// `WAIT replicas timeout_ms`: sent right after the take on the same connection, it answers
    /// how many replicas have everything that connection wrote (the take included).
    pub(crate) fn command(&self) -> Cmd {
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        wait
    }

    /// Refuses a lease the wait could eat up: a take confirmed only after its lease ended is
    /// worthless, so the lease must outlast the wait (twice over, so a renewal at a third of
    /// the lease still has time to be acknowledged).
    pub(crate) fn check_lease(&self, name: &LockName, lease: Duration) -> Result<()> {
        if lease > self.timeout * 2 {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::InvalidLease,
            format!(
                "lock {name:?}: a lease of {lease:?} is not above twice the URL's \
                 {WAIT_TIMEOUT} ({:?}); a take could be acknowledged only after it ended",
                self.timeout
            ),
        )
        .with_backend(super::NAME))
    }

    /// `Ok` when `acked` (`WAIT`'s answer) reaches the count asked; otherwise the caller's
    /// error ([`ErrorKind::NoQuorum`], retryable), naming what was not acknowledged (`what`).
    pub(crate) fn judge(&self, acked: i64, name: &LockName, what: &str) -> Result<()> {
        if acked >= i64::from(self.replicas) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::NoQuorum,
            format!(
                "lock {name:?}: {what}: {acked} of the {} replicas asked for ({WAIT_REPLICAS}) \
                 acknowledged it within {:?}",
                self.replicas, self.timeout
            ),
        )
        .with_backend(super::NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(n: Option<&str>, t: Option<&str>) -> std::result::Result<Option<ReplicaAck>, String> {
        ReplicaAck::parse(n, t).and_then(|(n, t)| ReplicaAck::new(n, t))
    }

    #[test]
    fn values_that_mean_something_are_taken() {
        assert_eq!(parse(None, None), Ok(None));
        assert_eq!(parse(Some("0"), None), Ok(None));
        assert_eq!(
            parse(Some("2"), Some("150ms")),
            Ok(Some(ReplicaAck {
                replicas: 2,
                timeout: Duration::from_millis(150)
            }))
        );
        assert_eq!(
            parse(Some("1"), Some("1s")).unwrap().unwrap().timeout,
            Duration::from_secs(1)
        );
    }

    #[test]
    fn nonsense_is_refused_saying_why() {
        for (n, t, why) in [
            (Some("2"), None, "needs wait_timeout"),
            (Some("1"), Some("0"), "wait forever"),
            (Some("1"), Some("0ms"), "wait forever"),
            (Some("-1"), Some("1s"), "whole number"),
            (Some("two"), Some("1s"), "whole number"),
            (Some("1"), Some("soon"), "not a duration"),
            (Some("1"), Some("61s"), "above 60s"),
            (None, Some("1s"), "means nothing"),
            (Some("0"), Some("1s"), "means nothing"),
        ] {
            let err = parse(n, t).unwrap_err();
            assert!(err.contains(why), "{n:?} {t:?}: {err}");
        }
    }

    #[test]
    fn the_wait_command_and_the_verdict() {
        let ack = parse(Some("2"), Some("250ms")).unwrap().unwrap();
        assert_eq!(
            ack.command().get_packed_command(),
            b"*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$3\r\n250\r\n"
        );
        let name = LockName::new("a").unwrap();
        assert!(ack.judge(2, &name, "taking the lock").is_ok());
        assert!(ack.judge(3, &name, "taking the lock").is_ok());
        let err = ack.judge(1, &name, "taking the lock").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NoQuorum);
        assert!(err.to_string().contains("1 of the 2 replicas"), "{err}");
        assert!(ack.check_lease(&name, Duration::from_millis(501)).is_ok());
        let err = ack
            .check_lease(&name, Duration::from_millis(500))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidLease);
    }
}

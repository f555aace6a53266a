//! What `distlock serve` knows of the locks: the last status read from the store, shared by
//! `/api/locks` and `/metrics`, re-read when a request finds it older than `--refresh`.
//!
//! Reading on demand (rather than polling in the background) leaves the store alone while nobody
//! looks; the cache bounds the store's load to one read per refresh interval however many
//! browsers and scrapers ask.

use std::time::{Duration, Instant, SystemTime};

use distlock::{ErrorKind, LockKind, LockStatus};
use serde::Serialize;
use tokio::sync::Mutex;

use super::super::status::locks_json;

/// A status read that takes longer than this is reported as an error, so a hung store shows on
/// the page instead of hanging every request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The flavours the gauges report, by the names `distlock status` uses: every one is set at each
/// read (to 0 when none is held), so a flavour that was held once does not stay at its old value.
const KINDS: [&str; 5] = ["lock", "fair", "read", "write", "semaphore"];

/// A flavour's `kind` label: its `distlock status` name, every semaphore under one label whatever
/// its permit count (a label value per count would make a time series per count).
fn kind_label(kind: LockKind) -> String {
    match kind {
        LockKind::Permit { .. } => "semaphore".into(),
        other => other.short_name(),
    }
}

/// The body of `GET /api/locks`.
#[derive(Serialize, Clone, Debug)]
pub(crate) struct Report {
    /// The backend's short name (`sqlite`, `redis`, …).
    backend: &'static str,
    /// The store URL, its secrets masked by [`distlock::redact`].
    url: String,
    /// The name prefix the locks are selected by (`""`: every lock).
    prefix: String,
    /// How often the page asks again, and how old a read may be when served.
    refresh_ms: u64,
    /// When the store was read, by this server's clock (the page measures `since_ms` against it,
    /// not against the browser's clock).
    read_at_ms: u64,
    /// The locks as `distlock status --json` prints them.
    locks: serde_json::Value,
    /// Why the read failed; `locks` is then empty.
    error: Option<String>,
    /// What the store's configuration puts at risk ([`distlock::Client::warnings`]: a Redis
    /// that may evict lock keys), asked with each read; empty when nothing is known.
    warnings: Vec<String>,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The store, and its last status read.
pub(crate) struct Board {
    client: distlock::Client,
    url: String,
    prefix: String,
    refresh: Duration,
    /// The last report and when it was made. A mutex, not a lock for readers: the request that
    /// finds the report stale reads the store while the others wait for its answer, so the store
    /// sees one read per interval.
    last: Mutex<Option<(Instant, Report)>>,
}

impl Board {
    /// `url` is shown redacted; `prefix` selects the locks.
    pub(crate) fn new(
        client: distlock::Client,
        url: &str,
        prefix: String,
        refresh: Duration,
    ) -> Self {
        describe_gauges();
        Board {
            client,
            url: distlock::redact(url),
            prefix,
            refresh,
            last: Mutex::new(None),
        }
    }

    /// The current report: the cached one if it is younger than the refresh interval, else a
    /// fresh read (which also sets the gauges).
    pub(crate) async fn report(&self) -> Report {
        let mut last = self.last.lock().await;
        if let Some((at, report)) = last.as_ref()
            && at.elapsed() < self.refresh
        {
            return report.clone();
        }
        let report = self.read().await;
        *last = Some((Instant::now(), report.clone()));
        report
    }

    async fn read(&self) -> Report {
        let backend = self.client.backend_name();
        let read = tokio::time::timeout(READ_TIMEOUT, self.client.status_prefix(&self.prefix));
        let result = match read.await {
            Ok(Ok(locks)) => Ok(locks),
            // Not a failure of the store but of this backend (status comes to backends one by
            // one): said as such, so nobody goes looking for a broken server.
            Ok(Err(e)) if e.kind() == ErrorKind::Unsupported => Err(format!(
                "this store cannot report lock status: {}",
                distlock::error::chain(&e)
            )),
            Ok(Err(e)) => Err(format!(
                "reading the lock status failed: {}",
                distlock::error::chain(&e)
            )),
            Err(_) => Err(format!(
                "reading the lock status failed: no answer from the store within {}s",
                READ_TIMEOUT.as_secs()
            )),
        };
        // Not an error of the read: a store that cannot be asked gives none.
        let warnings = tokio::time::timeout(READ_TIMEOUT, self.client.warnings())
            .await
            .unwrap_or_default();
        set_gauges(backend, result.as_deref().ok());
        let (locks, error) = match result {
            Ok(locks) => (locks_json(&locks), None),
            Err(e) => (locks_json(&[]), Some(e)),
        };
        Report {
            backend,
            url: self.url.clone(),
            prefix: self.prefix.clone(),
            refresh_ms: self.refresh.as_millis() as u64,
            read_at_ms: unix_ms(SystemTime::now()),
            locks,
            error,
            warnings,
        }
    }
}

fn describe_gauges() {
    metrics::describe_gauge!(
        "distlock_status_up",
        "1 if the last lock status read from the store succeeded, else 0"
    );
    metrics::describe_gauge!(
        "distlock_status_locks_held",
        "Locks with at least one holding, by flavour, at the last status read"
    );
    metrics::describe_gauge!(
        "distlock_status_holdings",
        "Holdings (an exclusive lock's holder, each reader, each permit), by flavour, at the last status read"
    );
    metrics::describe_gauge!(
        "distlock_status_waiters",
        "Waiters the store keeps (fair-lock queues, ZooKeeper and etcd), by flavour, at the last status read"
    );
}

/// Sets the gauges from a status read; `None` for a failed read, which keeps the last counts
/// (they are stale, and `distlock_status_up` says so) rather than claiming nothing is held.
fn set_gauges(backend: &'static str, locks: Option<&[LockStatus]>) {
    metrics::gauge!("distlock_status_up", "backend" => backend).set(if locks.is_some() {
        1.0
    } else {
        0.0
    });
    let Some(locks) = locks else { return };
    for kind in KINDS {
        let of_kind = || locks.iter().filter(move |l| kind_label(l.kind) == kind);
        let held = of_kind().filter(|l| !l.holdings.is_empty()).count();
        let holdings: usize = of_kind().map(|l| l.holdings.len()).sum();
        let waiters: u64 = of_kind().filter_map(|l| l.waiters).sum();
        let labels = [("backend", backend), ("kind", kind)];
        metrics::gauge!("distlock_status_locks_held", &labels).set(held as f64);
        metrics::gauge!("distlock_status_holdings", &labels).set(holdings as f64);
        metrics::gauge!("distlock_status_waiters", &labels).set(waiters as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_a_bounded_label() {
        for kind in [
            LockKind::Mutex,
            LockKind::Fair,
            LockKind::Read,
            LockKind::Write,
            LockKind::Permit { permits: 0 },
            LockKind::Permit { permits: 7 },
        ] {
            assert!(KINDS.contains(&kind_label(kind).as_str()), "{kind:?}");
        }
    }
}

//! How long this client has seen each holding unchanged, by its own monotonic clock.
//!
//! An object has no TTL and the store no clock that ends a lease, so a waiter judges a holding
//! as Kubernetes' leader election judges a Lease: it notes when it first saw the object's
//! current version (the ETag), and takes over only once that version stayed the same for the
//! holder's lease and the drift allowance, by a write conditional on that very version. The
//! time noted is when the answer *arrived*, never when the request was sent: the holder wrote
//! that version before the store answered, so its lease began earlier still.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use object_store::UpdateVersion;
use object_store::path::Path;
use tokio::time::Instant;

/// More objects than this watched at once and those not seen for an hour are forgotten (a
/// forgotten one is judged from its next sighting, which only makes the wait longer).
const MAX_WATCHED: usize = 10_000;
const FORGET_AFTER: Duration = Duration::from_secs(3600);

#[derive(Default)]
pub(super) struct Watch {
    first_seen: Mutex<HashMap<Path, Sighting>>,
}

struct Sighting {
    version: UpdateVersion,
    since: Instant,
    last: Instant,
}

impl Watch {
    /// How long `path` has shown `version`, as this client saw it with an answer that
    /// arrived at `received`: zero when the version is new to it.
    pub(super) fn seen(&self, path: &Path, version: &UpdateVersion, received: Instant) -> Duration {
        let mut seen = super::lock(&self.first_seen);
        if seen.len() >= MAX_WATCHED && !seen.contains_key(path) {
            seen.retain(|_, s| received.saturating_duration_since(s.last) < FORGET_AFTER);
        }
        let sighting = seen.entry(path.clone()).or_insert_with(|| Sighting {
            version: version.clone(),
            since: received,
            last: received,
        });
        if sighting.version != *version {
            *sighting = Sighting {
                version: version.clone(),
                since: received,
                last: received,
            };
        }
        sighting.last = received;
        received.saturating_duration_since(sighting.since)
    }

    /// This client wrote `path`: what it saw there no longer matters.
    pub(super) fn forget(&self, path: &Path) {
        super::lock(&self.first_seen).remove(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(e: &str) -> UpdateVersion {
        UpdateVersion {
            e_tag: Some(e.to_string()),
            version: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_version_counts_from_its_first_sighting_and_restarts_on_change() {
        let w = Watch::default();
        let p = Path::from("locks/x");
        let t0 = Instant::now();
        assert_eq!(w.seen(&p, &version("a"), t0), Duration::ZERO);
        let t1 = t0 + Duration::from_secs(3);
        assert_eq!(w.seen(&p, &version("a"), t1), Duration::from_secs(3));
        // A renewal: a new version starts the count again.
        assert_eq!(w.seen(&p, &version("b"), t1), Duration::ZERO);
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(w.seen(&p, &version("b"), t2), Duration::from_secs(1));
        w.forget(&p);
        assert_eq!(w.seen(&p, &version("b"), t2), Duration::ZERO);
    }
}

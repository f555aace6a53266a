//! Seeing and managing locks in production: who holds a lock, since when, with which fencing
//! token and how much lease is left, who waits ([`Client::status`](crate::Client::status)); and
//! the way out when a holder is wedged: a forced release that also advances the lock's fencing
//! token ([`Client::force_release`](crate::Client::force_release)).
//!
//! Every take records who took it: the [`Holder`] (host, pid, process name, bounded in size)
//! and when, beside the holding in the store, by backends that can store it (see each backend's
//! `docs.md`). Re-entry is counted by the holding process, not in the store, so a status shows
//! holdings, not re-entry counts.
//!
//! With the `serde` feature, [`LockStatus`], [`Holding`], [`Holder`] and [`ForcedRelease`]
//! serialize in the shape `distlock status --json` prints: a kind as its
//! [`short_name`](LockKind::short_name), tokens as numbers, `since` as `since_ms` (milliseconds
//! since the Unix epoch) and `lease_left` as `lease_left_ms`, absent values as `null`.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use crate::types::{FencingToken, LockKind, LockName};

/// The most bytes of a host or process name a holding records (longer names are cut at a
/// character boundary), so the record stays small in every store.
pub const MAX_HOLDER_FIELD: usize = 64;

/// Who took a holding: the process, as it recorded itself at take.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Holder {
    /// The host name of the machine the holder ran on.
    pub host: String,
    /// Its process id on that machine.
    pub pid: u32,
    /// Its process name (the executable's file name).
    pub process: String,
}

impl Holder {
    /// This process, as its holdings record it.
    pub fn this_process() -> &'static Holder {
        &this_process().0
    }

    /// The record a backend stores beside a holding this process takes: `pid`, host and
    /// process name separated by tabs (which neither name can contain once cleaned), at most
    /// `10 + 2 × MAX_HOLDER_FIELD + 2` bytes.
    #[doc(hidden)] // for backends: not covered by semver
    pub fn this_process_record() -> &'static str {
        &this_process().1
    }

    /// Reads a record made by [`this_process_record`](Holder::this_process_record); `None` for
    /// anything else (a holding taken by a version that recorded nothing).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn from_record(record: &str) -> Option<Holder> {
        let mut fields = record.splitn(3, '\t');
        let pid = fields.next()?.parse().ok()?;
        let host = fields.next()?.to_string();
        let process = fields.next()?.to_string();
        Some(Holder { host, pid, process })
    }
}

fn this_process() -> &'static (Holder, String) {
    static THIS: OnceLock<(Holder, String)> = OnceLock::new();
    THIS.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let process = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let holder = Holder {
            host: clean(host.trim()),
            pid: std::process::id(),
            process: clean(&process),
        };
        let record = format!("{}\t{}\t{}", holder.pid, holder.host, holder.process);
        (holder, record)
    })
}

/// Control characters (tabs, newlines) become `?`; cut to [`MAX_HOLDER_FIELD`] bytes.
fn clean(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = if c.is_control() { '?' } else { c };
        if out.len() + c.len_utf8() > MAX_HOLDER_FIELD {
            break;
        }
        out.push(c);
    }
    out
}

/// One holding of a lock as the store sees it.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Holding {
    /// Its fencing token.
    pub token: FencingToken,
    /// Who took it, if the store recorded it.
    pub holder: Option<Holder>,
    /// When it was taken (re-taking its own holding does not move it), if the store knows.
    #[cfg_attr(feature = "serde", serde(rename = "since_ms", with = "unix_ms"))]
    pub since: Option<SystemTime>,
    /// How long its lease has left by the store's clock; `None` for holdings that are sessions
    /// (they last as long as the holder's connection or session).
    #[cfg_attr(feature = "serde", serde(rename = "lease_left_ms", with = "millis"))]
    pub lease_left: Option<Duration>,
}

impl Holding {
    /// A holding with `token` (for backends building their answers).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn new(token: FencingToken) -> Self {
        Holding {
            token,
            holder: None,
            since: None,
            lease_left: None,
        }
    }

    /// With the holder record a backend stored (see `Holder::from_record`).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn holder_record(mut self, record: Option<&str>) -> Self {
        self.holder = record.and_then(Holder::from_record);
        self
    }

    /// Taken at `unix_ms`, milliseconds since the Unix epoch.
    #[doc(hidden)] // for backends: not covered by semver
    pub fn since_unix_ms(mut self, unix_ms: Option<i64>) -> Self {
        self.since = unix_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        self
    }

    /// With `ms` milliseconds of lease left (negative: none).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn lease_left_ms(mut self, ms: i64) -> Self {
        self.lease_left = Some(Duration::from_millis(ms.max(0) as u64));
        self
    }
}

/// One lock (of one flavour) as the store sees it.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name.
    pub name: String,
    /// Its flavour. For a semaphore, `permits` is the count the holders asked for (0 where the
    /// store does not keep it).
    pub kind: LockKind,
    /// Its holdings: one for an exclusive lock, one per reader or permit.
    pub holdings: Vec<Holding>,
    /// How many wait for it, where the store keeps waiters (fair-lock queues, ZooKeeper
    /// children, etcd keys); `None` where it cannot tell.
    pub waiters: Option<u64>,
    /// The last fencing token the store handed out for it, where it keeps one apart from the
    /// holdings: the next holding's token is above it.
    pub last_token: Option<FencingToken>,
}

impl LockStatus {
    /// The status of `name` of flavour `kind`, with nothing held yet (for backends).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn new(name: impl Into<String>, kind: LockKind) -> Self {
        LockStatus {
            name: name.into(),
            kind,
            holdings: Vec::new(),
            waiters: None,
            last_token: None,
        }
    }
}

/// Which locks a status asks about.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Selection {
    /// The locks of every flavour with exactly this name.
    Name(LockName),
    /// Every lock whose name starts with this (the empty prefix: every lock).
    Prefix(String),
}

impl Selection {
    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Selection::Name(n) => n.as_str() == name,
            Selection::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// What a forced release did.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct ForcedRelease {
    /// The holdings it removed (empty if the lock was free).
    pub removed: Vec<Holding>,
    /// The lock's fencing counter after the release advanced it: every later holding's token is
    /// above it, and above every removed holding's.
    pub fence: FencingToken,
}

impl ForcedRelease {
    /// What a forced release removed and the token it advanced the counter to (for backends).
    #[doc(hidden)] // for backends: not covered by semver
    pub fn new(removed: Vec<Holding>, fence: FencingToken) -> Self {
        ForcedRelease { removed, fence }
    }
}

/// `Option<SystemTime>` as whole milliseconds since the Unix epoch (a time before it as `null`).
#[cfg(feature = "serde")]
mod unix_ms {
    use std::time::{Duration, SystemTime};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        time: &Option<SystemTime>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        time.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as u64)
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        let ms = Option::<u64>::deserialize(deserializer)?;
        Ok(ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)))
    }
}

/// `Option<Duration>` as whole milliseconds.
#[cfg(feature = "serde")]
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer>(
        left: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        left.map(|d| d.as_millis() as u64).serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_stay_small() {
        let me = Holder::this_process();
        assert_eq!(me.pid, std::process::id());
        let back = Holder::from_record(Holder::this_process_record()).unwrap();
        assert_eq!(&back, me);
        assert!(Holder::this_process_record().len() <= 10 + 2 * MAX_HOLDER_FIELD + 2);
        assert_eq!(clean("a\tb\nc"), "a?b?c");
        assert_eq!(clean(&"é".repeat(40)).len(), 64);
        assert!(Holder::from_record("not a record").is_none());
        assert!(Holder::from_record("").is_none());
    }

    #[test]
    fn selections_match_names() {
        let exact = Selection::Name(LockName::new("order:1").unwrap());
        assert!(exact.matches("order:1") && !exact.matches("order:10"));
        let prefix = Selection::Prefix("order:".into());
        assert!(prefix.matches("order:10") && !prefix.matches("orders"));
    }
}

//! The small value types of the API. Each validates on construction, so a backend never sees a
//! name or a lease it would have to second-guess.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// A lock name: 1 to 512 bytes of UTF-8 without control characters.
///
/// Names are opaque to distlock; backends store them byte for byte (as a bound parameter, a key,
/// a path segment after escaping), so `order:42` and `order:42 ` are different locks.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// The longest name accepted, in bytes.
    pub const MAX_LEN: usize = 512;

    /// Validates `name`.
    pub fn new(name: impl AsRef<str>) -> Result<Self> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidName,
                "a lock name cannot be empty",
            ));
        }
        if name.len() > Self::MAX_LEN {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "a lock name is at most {} bytes, this one has {}",
                    Self::MAX_LEN,
                    name.len()
                ),
            ));
        }
        if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "a lock name cannot contain control characters ({:?} at byte {at})",
                    c
                ),
            ));
        }
        Ok(LockName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How long a lock stays held without renewal: the time a crashed holder blocks others.
/// Between 10 ms and 24 h; 30 s by default.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Lease(Duration);

impl Lease {
    /// The shortest lease accepted.
    pub const MIN: Duration = Duration::from_millis(10);
    /// The longest lease accepted.
    pub const MAX: Duration = Duration::from_secs(24 * 3600);
    /// The lease used when none is given.
    pub const DEFAULT: Lease = Lease(Duration::from_secs(30));

    /// Validates `duration`.
    pub fn new(duration: Duration) -> Result<Self> {
        if duration < Self::MIN || duration > Self::MAX {
            return Err(Error::new(
                ErrorKind::InvalidLease,
                format!(
                    "a lease must be between 10ms and 24h, got {}",
                    crate::types::show_duration(duration)
                ),
            ));
        }
        Ok(Lease(duration))
    }

    /// The lease as a duration.
    pub fn duration(self) -> Duration {
        self.0
    }

    /// The lease in whole milliseconds (at least 10), the unit stores use.
    pub fn as_millis(self) -> u64 {
        self.0.as_millis() as u64
    }
}

impl Default for Lease {
    fn default() -> Self {
        Lease::DEFAULT
    }
}

pub(crate) fn show_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{d:?}")
    }
}

/// The secret that says who holds a lock: 128 random bits, written as 32 hex digits.
///
/// Only the holder knows it, so only the holder can extend or release. Acquisitions made with the
/// same token re-enter each other's lock (the hold count lives in the store). `Debug` and
/// `Display` show a short prefix only, so logs never carry a usable token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(Arc<str>);

impl OwnerToken {
    /// A fresh token from the operating system's random source.
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        // The OS random source failing is not something a lock library can recover from.
        getrandom::fill(&mut bytes).expect("the operating system's random source failed");
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (i, b) in bytes.iter().enumerate() {
            hex[2 * i] = DIGITS[usize::from(b >> 4)];
            hex[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        // Hex digits are ASCII.
        OwnerToken(std::str::from_utf8(&hex).unwrap_or_default().into())
    }

    /// The token as stored in the backend. Treat it as a secret.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", &self.0[..6])
    }
}

/// A number that strictly increases with each new holder of a lock name, across processes.
///
/// Hand it to the resource the lock protects; the resource remembers the largest token it has
/// seen and refuses writes that carry a smaller one. That closes the gap a lease cannot: a holder
/// paused past its lease can no longer overwrite the work of the holder after it.
///
/// With the `serde` feature it is written as its number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct FencingToken(pub(crate) u64);

impl FencingToken {
    /// The token whose number is `value`: one read back from where a resource stored it, to
    /// compare with a guard's.
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The token as a number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Which synchronizer a request is for. Backends say which they support.
#[non_exhaustive]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum LockKind {
    /// An exclusive, reentrant lock.
    Mutex,
    /// An exclusive lock served first come, first served.
    Fair,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
    /// One permit of a semaphore with `permits` permits in all.
    Permit {
        /// How many holders the semaphore admits at once.
        permits: u32,
    },
}

impl LockKind {
    /// Whether this is one of the five flavours distlock has (lock, fair lock, read, write,
    /// permit): the flavours of a store that keeps them all
    /// ([`Kinds::ALL`](crate::backend::Kinds::ALL)).
    pub fn is_any_flavour(self) -> bool {
        matches!(
            self,
            LockKind::Mutex
                | LockKind::Fair
                | LockKind::Read
                | LockKind::Write
                | LockKind::Permit { .. }
        )
    }
}

impl LockKind {
    /// Its short name, as the `distlock` command and the `serde` feature write it: `lock`,
    /// `fair`, `read`, `write`, `semaphore/N` (`semaphore` where the store does not keep the
    /// count: 0). [`str::parse`] reads it back.
    pub fn short_name(self) -> String {
        match self {
            LockKind::Mutex => "lock".into(),
            LockKind::Fair => "fair".into(),
            LockKind::Read => "read".into(),
            LockKind::Write => "write".into(),
            LockKind::Permit { permits: 0 } => "semaphore".into(),
            LockKind::Permit { permits } => format!("semaphore/{permits}"),
        }
    }
}

impl std::str::FromStr for LockKind {
    type Err = Error;

    /// Reads a [`short_name`](LockKind::short_name); [`ErrorKind::InvalidInput`] for
    /// anything else.
    fn from_str(name: &str) -> Result<Self> {
        let kind = match name {
            "lock" => LockKind::Mutex,
            "fair" => LockKind::Fair,
            "read" => LockKind::Read,
            "write" => LockKind::Write,
            "semaphore" => LockKind::Permit { permits: 0 },
            other => match other.strip_prefix("semaphore/").map(str::parse) {
                Some(Ok(permits)) => LockKind::Permit { permits },
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidInput,
                        format!(
                            "{other:?} is not a kind of lock (lock, fair, read, write, \
                             semaphore/N)"
                        ),
                    ));
                }
            },
        };
        Ok(kind)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for LockKind {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.short_name())
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for LockKind {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockKind::Mutex => f.write_str("locks"),
            LockKind::Fair => f.write_str("fair locks"),
            LockKind::Read => f.write_str("read locks"),
            LockKind::Write => f.write_str("write locks"),
            LockKind::Permit { .. } => f.write_str("semaphores"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(LockName::new("order:42").is_ok());
        assert!(LockName::new("ü'\"%_\\ 注文").is_ok());
        assert_eq!(
            LockName::new("").unwrap_err().kind(),
            ErrorKind::InvalidName
        );
        assert_eq!(
            LockName::new("a\nb").unwrap_err().kind(),
            ErrorKind::InvalidName
        );
        assert_eq!(
            LockName::new("a\0b").unwrap_err().kind(),
            ErrorKind::InvalidName
        );
        assert!(LockName::new("x".repeat(512)).is_ok());
        assert_eq!(
            LockName::new("x".repeat(513)).unwrap_err().kind(),
            ErrorKind::InvalidName
        );
    }

    #[test]
    fn leases_are_bounded() {
        assert!(Lease::new(Duration::from_millis(10)).is_ok());
        assert!(Lease::new(Duration::from_secs(86400)).is_ok());
        for bad in [0, 9] {
            let err = Lease::new(Duration::from_millis(bad)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidLease);
        }
        let err = Lease::new(Duration::from_secs(86401)).unwrap_err();
        assert!(err.to_string().contains("86401s"), "{err}");
    }

    #[test]
    fn owner_tokens_are_128_bits_and_redacted() {
        let a = OwnerToken::random();
        let b = OwnerToken::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(!format!("{a:?}").contains(a.as_str()));
    }
}

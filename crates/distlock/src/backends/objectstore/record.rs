//! What an object holds: a lock's holding (or that it is free, with its fencing counter), a
//! latch's count; and where each lives under the prefix.
//!
//! A record is a few `key value` lines, so an operator can read it with any S3 tool. Every
//! write of a holding changes its bytes (the renewal count goes up): S3 names an object's
//! version by the MD5 of its bytes, so a renewal that wrote the same bytes would keep its ETag,
//! and a waiter would take that unchanged ETag for a stopped holder.

use object_store::path::Path;
use sha2::{Digest, Sha256};

/// The first line of every lock record (a version, should the format change).
const LOCK_MAGIC: &str = "distlock-lock 1";
/// The first line of every latch record.
const LATCH_MAGIC: &str = "distlock-latch 1";

/// A lock's object: its holding, or free with the last token drawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LockRecord {
    /// The lock's name (the object's key may be a digest of it).
    pub(super) name: String,
    /// The last fencing token drawn for the name: the holder's when held.
    pub(super) token: u64,
    /// Who holds it; `None` when free.
    pub(super) held: Option<Held>,
}

/// A holding as its object records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Held {
    /// The holder's owner token.
    pub(super) owner: String,
    /// The lease of the holder's last write: a waiter takes over only after seeing the record
    /// unchanged this long, plus the drift allowance.
    pub(super) lease_ms: u64,
    /// Writes of this holding so far (its take is 0): changes the bytes of every renewal.
    pub(super) renewals: u64,
    /// When it was taken (the taker's wall clock, for status only).
    pub(super) since_unix_ms: i64,
    /// The holder's process (host, pid, program), for status only.
    pub(super) holder: String,
}

impl LockRecord {
    /// The object's bytes.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = format!("{LOCK_MAGIC}\nname {}\ntoken {}\n", self.name, self.token);
        if let Some(h) = &self.held {
            out.push_str(&format!(
                "owner {}\nlease_ms {}\nrenewals {}\nsince_unix_ms {}\nholder {}\n",
                h.owner, h.lease_ms, h.renewals, h.since_unix_ms, h.holder
            ));
        }
        out.into_bytes()
    }

    /// Reads an object's bytes; `None` for anything distlock did not write.
    pub(super) fn decode(bytes: &[u8]) -> Option<LockRecord> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != LOCK_MAGIC {
            return None;
        }
        let mut field = |key: &str| -> Option<&str> {
            let line = lines.next()?;
            line.strip_prefix(key)?.strip_prefix(' ')
        };
        let name = field("name")?.to_string();
        let token = field("token")?.parse().ok()?;
        let held = match field("owner") {
            None => None,
            Some(owner) => Some(Held {
                owner: owner.to_string(),
                lease_ms: field("lease_ms")?.parse().ok()?,
                renewals: field("renewals")?.parse().ok()?,
                since_unix_ms: field("since_unix_ms")?.parse().ok()?,
                holder: field("holder")?.to_string(),
            }),
        };
        Some(LockRecord { name, token, held })
    }
}

/// A latch's object: its count, and a nonce of this write. Two clients counting 4 down to 3
/// at once would otherwise write the same bytes, and the one whose condition failed would
/// find "its" bytes there and take them for its own write that landed.
pub(super) fn encode_latch(count: u64) -> Vec<u8> {
    let mut nonce = [0u8; 8];
    // Without randomness the nonce is zeros: only the lost-answer check gets weaker.
    let _ = getrandom::fill(&mut nonce);
    let nonce = u64::from_le_bytes(nonce);
    format!("{LATCH_MAGIC}\ncount {count}\nwrite {nonce:016x}\n").into_bytes()
}

/// A latch's count; `None` for anything distlock did not write.
pub(super) fn decode_latch(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    (lines.next()? == LATCH_MAGIC).then_some(())?;
    lines.next()?.strip_prefix("count ")?.parse().ok()
}

/// Where a store's objects live: `PREFIX/locks/NAME`, `PREFIX/latches/NAME`, and the connect
/// probe's `PREFIX/probe/…`.
#[derive(Clone, Debug)]
pub(super) struct Layout {
    prefix: String,
}

/// The longest encoded name kept as it is; a longer one is cut and followed by its digest, so
/// the key's last segment stays within 255 bytes (180 + `__` + 64): servers that keep objects as
/// files (RustFS, MinIO) refuse a longer file name.
const LONGEST_KEPT: usize = 180;

impl Layout {
    pub(super) fn new(prefix: &str) -> Self {
        Layout {
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    fn under(&self, folder: &str, leaf: &str) -> Path {
        let joined = match self.prefix.as_str() {
            "" => format!("{folder}/{leaf}"),
            prefix => format!("{prefix}/{folder}/{leaf}"),
        };
        Path::from(joined)
    }

    /// The object of lock `name`.
    pub(super) fn lock(&self, name: &str) -> Path {
        self.under("locks", &encode_name(name))
    }

    /// The object of latch `name`.
    pub(super) fn latch(&self, name: &str) -> Path {
        self.under("latches", &encode_name(name))
    }

    /// A fresh object for the connect probe.
    pub(super) fn probe(&self, nonce: &str) -> Path {
        self.under("probe", nonce)
    }

    /// What every lock object whose name starts with `prefix` starts with (a listing's prefix:
    /// the encoding keeps prefixes, up to where a long name is cut).
    pub(super) fn locks_listing(&self, prefix: &str) -> (Path, String) {
        let mut encoded = encode_name(prefix);
        encoded.truncate(LONGEST_KEPT);
        (self.under("locks", ""), encoded)
    }
}

/// A lock name as one segment of an object key: letters, digits and `-` as they are, every
/// other byte as `_XX` (characters no store or listing escapes: Azure lists a `~` as `%7E`).
/// Prefix-preserving (a name's prefix encodes to a prefix of its key), so a status by prefix
/// lists only the keys it needs; a name too long for a key is cut and followed by `__` and the
/// SHA-256 of the whole name.
pub(super) fn encode_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("_{b:02X}"));
        }
    }
    if out.len() > LONGEST_KEPT {
        out.truncate(LONGEST_KEPT);
        let digest = Sha256::digest(name.as_bytes());
        out.push_str("__");
        for b in digest {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> LockRecord {
        LockRecord {
            name: "order:42 ünïcode".to_string(),
            token: 1_733_000_000_000_123,
            held: Some(Held {
                owner: "0123abcd".to_string(),
                lease_ms: 30_000,
                renewals: 7,
                since_unix_ms: 1_733_000_000_000,
                holder: "42\thost\tprog with spaces".to_string(),
            }),
        }
    }

    #[test]
    fn records_round_trip() {
        let r = held();
        assert_eq!(LockRecord::decode(&r.encode()), Some(r.clone()));
        let free = LockRecord { held: None, ..r };
        assert_eq!(LockRecord::decode(&free.encode()), Some(free));
        assert_eq!(decode_latch(&encode_latch(3)), Some(3));
        assert_ne!(encode_latch(3), encode_latch(3));
        assert_eq!(LockRecord::decode(b"something else"), None);
        assert_eq!(LockRecord::decode(&encode_latch(3)), None);
        assert_eq!(decode_latch(b"distlock-latch 1\ncount x\n"), None);
    }

    #[test]
    fn every_renewal_changes_the_bytes() {
        let a = held();
        let mut b = a.clone();
        b.held.as_mut().unwrap().renewals += 1;
        assert_ne!(a.encode(), b.encode());
    }

    #[test]
    fn names_encode_to_safe_prefix_preserving_keys() {
        assert_eq!(encode_name("job-1a"), "job-1a");
        assert_eq!(encode_name("a/b.c~_"), "a_2Fb_2Ec_7E_5F");
        assert_eq!(encode_name(".."), "_2E_2E");
        for (name, prefix) in [("orders:42", "orders:"), ("ü-x", "ü")] {
            assert!(encode_name(name).starts_with(&encode_name(prefix)));
        }
        let long = "é".repeat(400);
        let key = encode_name(&long);
        assert!(key.len() <= 255, "{}", key.len());
        assert_ne!(key, encode_name(&"é".repeat(401)));
        let layout = Layout::new("/app/");
        assert_eq!(layout.lock("x").as_ref(), "app/locks/x");
        assert_eq!(Layout::new("").latch("x").as_ref(), "latches/x");
    }
}

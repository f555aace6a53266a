//! Where a lock lives in memcached: its two keys, and which server of the URL holds them.
//!
//! memcached keys are at most 250 bytes of printable ASCII without spaces, and the key is sent
//! inside the command line, so a name must never reach the wire as it is. A name becomes
//! `distlock:<role>:<escaped name>` (every byte outside `!`..`~`, and `%` itself, as `%XX`: one
//! name, one key, and nothing a name holds can end the command line) when that fits, and
//! `distlock:<role>#<SHA-256 of the name, hex>` when it does not. The `:` and `#` after the role
//! keep the two forms apart, so an escaped name never equals a digest; no role holds either, so
//! keys of different roles never meet. Roles: `lock` and `fence` (a lock), `elect`, `alive` and
//! `elog.<seq>` (an election), `latch` (a count-down latch).

use sha2::{Digest, Sha256};

use crate::types::LockName;

/// memcached's longest key.
pub(super) const MAX_KEY: usize = 250;

/// The keys of one lock.
pub(super) struct Keys {
    /// The lock item: `<owner> <token>` while held, `<owner> -` while its taker draws a token.
    pub(super) lock: String,
    /// The lock's fencing counter.
    pub(super) fence: String,
}

impl Keys {
    pub(super) fn new(name: &LockName) -> Self {
        Keys {
            lock: key("lock", name),
            fence: key("fence", name),
        }
    }
}

/// The keys of one election (named by the election's name, not its lock's): the head with the
/// latest entry, the item whose expiry says the leader is live, and one item per older entry.
pub(super) struct ElectionKeys<'a> {
    name: &'a LockName,
    pub(super) head: String,
    pub(super) alive: String,
}

impl<'a> ElectionKeys<'a> {
    pub(super) fn new(name: &'a LockName) -> Self {
        ElectionKeys {
            name,
            head: key("elect", name),
            alive: key("alive", name),
        }
    }

    /// The item of log entry `seq`.
    pub(super) fn log(&self, seq: u64) -> String {
        key(&format!("elog.{seq}"), self.name)
    }
}

/// The item of the count-down latch `name`.
pub(super) fn latch(name: &LockName) -> String {
    key("latch", name)
}

fn key(role: &str, name: &LockName) -> String {
    let name = name.as_str();
    let mut key = String::with_capacity(MAX_KEY);
    key.push_str("distlock:");
    key.push_str(role);
    key.push(':');
    for &b in name.as_bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            key.push(char::from(b));
        } else {
            key.push_str(&format!("%{b:02X}"));
        }
        if key.len() > MAX_KEY {
            break;
        }
    }
    if key.len() <= MAX_KEY {
        return key;
    }
    let digest = Sha256::digest(name.as_bytes());
    let mut key = format!("distlock:{role}#");
    for b in digest {
        key.push_str(&format!("{b:02x}"));
    }
    key
}

/// The lock name of a key `lru_crawler metadump` listed (URL-encoded by the server), if it is a
/// lock item's key in the escaped form; `None` for counters, other keys, and the digest form
/// (a SHA-256 cannot be read back: such names are not listed by prefix).
pub(super) fn name_of_dumped(dumped: &str) -> Option<String> {
    let key = String::from_utf8(percent_decode(dumped)?).ok()?;
    let escaped = key.strip_prefix("distlock:lock:")?;
    String::from_utf8(percent_decode(escaped)?).ok()
}

/// `%XX` → the byte; `None` if an escape is malformed.
fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Which of `servers` servers holds the lock `name`: a jump consistent hash (Lamping and Veach)
/// of the name's FNV-1a hash, so every client listing the same servers in the same order picks
/// the same one, and appending a server moves only about 1/n of the names.
pub(super) fn server_of(name: &LockName, servers: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_str().as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < servers as i64 {
        b = j;
        h = h.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((h >> 33) + 1) as f64)) as i64;
    }
    b.max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_key(name: &str) -> String {
        Keys::new(&LockName::new(name).unwrap()).lock
    }

    fn is_protocol_safe(key: &str) -> bool {
        key.len() <= MAX_KEY && key.bytes().all(|b| b.is_ascii_graphic())
    }

    #[test]
    fn keys_are_safe_and_distinct() {
        let long_a = format!("{}a", "n".repeat(300));
        let long_b = format!("{}b", "n".repeat(300));
        let max = "é".repeat(256);
        let names = [
            "order:42",
            "order 42",
            "order%2042",
            "order%20 42",
            "line\u{2028}sep",
            "注文",
            "%E6%B3%A8%E6%96%87",
            "trailing ",
            "trailing",
            long_a.as_str(),
            long_b.as_str(),
            max.as_str(),
        ];
        let keys: Vec<String> = names.iter().map(|n| lock_key(n)).collect();
        for (name, key) in names.iter().zip(&keys) {
            assert!(is_protocol_safe(key), "{name:?} → {key:?}");
        }
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
        // A short name and the counter of the same name are different keys.
        let k = Keys::new(&LockName::new("x").unwrap());
        assert_ne!(k.lock, k.fence);
    }

    #[test]
    fn election_and_latch_keys_are_their_own_families() {
        let long = "l".repeat(300);
        for name in ["x", "order 42", long.as_str()] {
            let name = LockName::new(name).unwrap();
            let (k, e) = (Keys::new(&name), ElectionKeys::new(&name));
            let all = [
                k.lock,
                k.fence,
                e.head.clone(),
                e.alive.clone(),
                e.log(1),
                e.log(11),
                e.log(u64::MAX),
                latch(&name),
            ];
            for key in &all {
                assert!(is_protocol_safe(key), "{key:?}");
            }
            // A status by prefix lists lock items only.
            for key in &all[1..] {
                assert_eq!(name_of_dumped(key), None, "{key:?} reads as a lock");
            }
            let mut unique = all.to_vec();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), all.len(), "{all:?}");
        }
        // The election's own lock (`distlock-election:<name>`) is a lock key, not a record key.
        let lock = Keys::new(&LockName::new("distlock-election:x").unwrap()).lock;
        let x = LockName::new("x").unwrap();
        assert!(![ElectionKeys::new(&x).head, latch(&x)].contains(&lock));
    }

    #[test]
    fn names_past_the_key_limit_differ_by_digest() {
        // Equal for the first 250 bytes and more.
        let a = format!("{}/a", "p".repeat(260));
        let b = format!("{}/b", "p".repeat(260));
        let (ka, kb) = (lock_key(&a), lock_key(&b));
        assert_ne!(ka, kb);
        assert!(ka.starts_with("distlock:lock#") && ka.len() == "distlock:lock#".len() + 64);
        // The longest name that still fits is kept as it is.
        let fits = "q".repeat(MAX_KEY - "distlock:fence:".len());
        assert_eq!(
            Keys::new(&LockName::new(&fits).unwrap()).fence,
            format!("distlock:fence:{fits}")
        );
    }

    #[test]
    fn dumped_keys_give_back_their_names() {
        // As memcached's metadump writes keys: every byte outside the unreserved set as %XX.
        let dumped = |key: &str| -> String {
            key.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect()
        };
        for name in ["order:42", "a b%c", "注文", "x/y"] {
            let k = Keys::new(&LockName::new(name).unwrap());
            assert_eq!(name_of_dumped(&dumped(&k.lock)).as_deref(), Some(name));
            assert_eq!(name_of_dumped(&dumped(&k.fence)), None);
        }
        assert_eq!(name_of_dumped("distlock%3Alock%3Abad%2"), None);
    }

    #[test]
    fn server_choice_is_stable_and_spread() {
        let mut counts = [0usize; 3];
        for i in 0..3000 {
            let name = LockName::new(format!("job:{i}")).unwrap();
            let s = server_of(&name, 3);
            assert_eq!(s, server_of(&name, 3));
            counts[s] += 1;
        }
        assert!(counts.iter().all(|c| *c > 700), "{counts:?}");
        let one = LockName::new("x").unwrap();
        assert_eq!(server_of(&one, 1), 0);
    }
}

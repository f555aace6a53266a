//! Where each lock lives in Redis: its keys and its channel, all under one hash tag, and which
//! of them each script takes (in its `KEYS` order).

use crate::types::{LockKind, LockName};

/// The keys and channel of one lock. Every key carries the hash tag `{name}`, so each script
/// touches one cluster slot.
pub(crate) struct Keys {
    kind: LockKind,
    base: String,
}

/// The families of lock keys, `distlock:<family>:{name}…` (elections and latches have others).
pub(crate) const FAMILIES: [&str; 4] = ["lock", "fair", "rw", "sem"];

/// The family of `kind`'s keys (one of [`FAMILIES`]).
pub(crate) fn family(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Fair => "fair",
        LockKind::Read | LockKind::Write => "rw",
        LockKind::Permit { .. } => "sem",
        _ => "lock",
    }
}

/// `name` as keys carry it: braces escaped so the tag is always the whole name, and `%` so the
/// escaping stays 1:1.
fn escape_into(out: &mut String, name: &str) {
    if !name.contains(['%', '{', '}']) {
        out.push_str(name);
        return;
    }
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// Whether `prefix` may come before every key and channel (`?prefix=` in the URL): 1 to 64 of
/// `A-Z a-z 0-9 : _ - .`. Braces would move the hash tag off the lock's name, and glob
/// characters would need escaping in every `SCAN` pattern, so neither is allowed.
pub(crate) fn check_prefix(prefix: &str) -> std::result::Result<(), &'static str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-' | '.');
    if prefix.is_empty() || prefix.len() > 64 || !prefix.chars().all(allowed) {
        return Err("prefix must be 1 to 64 of A-Z a-z 0-9 : _ - . (as in prefix=app1:)");
    }
    Ok(())
}

/// A `SCAN … MATCH` pattern for the lock keys (under `key_prefix`, the URL's `?prefix=`) of
/// every family whose name starts with `prefix`: the prefix escaped as keys carry it, then its
/// glob characters escaped so they match only themselves.
pub(crate) fn scan_pattern(key_prefix: &str, prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len() + 8);
    escape_into(&mut escaped, prefix);
    let mut pattern = String::with_capacity(key_prefix.len() + escaped.len() + 16);
    // `check_prefix` lets no glob character into a key prefix.
    pattern.push_str(key_prefix);
    pattern.push_str("distlock:*:{");
    for c in escaped.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// The family and lock name of a key `scan_pattern` found under `key_prefix`; `None` for keys
/// that are not a lock's (another family, or not distlock's).
pub(crate) fn parse_key(key_prefix: &str, key: &str) -> Option<(&'static str, String)> {
    let rest = key.strip_prefix(key_prefix)?.strip_prefix("distlock:")?;
    let (family, rest) = rest.split_once(":{")?;
    let family = FAMILIES.into_iter().find(|f| *f == family)?;
    // Names carry no '}' (escaped), so the first one closes the tag.
    let (escaped, _) = rest.split_once('}')?;
    let mut name = String::with_capacity(escaped.len());
    let mut chars = escaped.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '%' {
            name.push(c);
            continue;
        }
        let code = escaped.get(i + 1..i + 3)?;
        name.push(match code {
            "25" => '%',
            "7B" => '{',
            "7D" => '}',
            _ => return None,
        });
        chars.nth(1);
    }
    Some((family, name))
}

impl Keys {
    /// The keys of lock `name` of flavour `kind`, each after `prefix` (the URL's `?prefix=`, or
    /// empty).
    pub(crate) fn new(prefix: &str, kind: LockKind, name: &LockName) -> Self {
        let name = name.as_str();
        let mut base =
            String::with_capacity(prefix.len() + "distlock:rw:{}".len() + name.len() + 8);
        base.push_str(prefix);
        base.push_str("distlock:");
        base.push_str(family(kind));
        base.push_str(":{");
        escape_into(&mut base, name);
        base.push('}');
        Keys { kind, base }
    }

    fn key(&self, suffix: &str) -> String {
        let mut key = String::with_capacity(self.base.len() + suffix.len());
        key.push_str(&self.base);
        key.push_str(suffix);
        key
    }

    fn keys(&self, suffixes: &[&str]) -> Vec<String> {
        suffixes.iter().map(|s| self.key(s)).collect()
    }

    /// Where releases are announced (see `subscriber.rs` for the payloads).
    pub(crate) fn channel(&self) -> String {
        self.key(":free")
    }

    /// For `*acquire.lua`.
    pub(crate) fn acquire(&self) -> Vec<String> {
        match self.kind {
            LockKind::Fair => self.keys(&["", ":fence", ":queue", ":due"]),
            LockKind::Read | LockKind::Write => self.keys(&[
                ":writer",
                ":readers",
                ":reader-holds",
                ":writers-waiting",
                ":fence",
            ]),
            LockKind::Permit { .. } => self.keys(&[":holders", ":holds", ":fence", ":permits"]),
            _ => self.keys(&["", ":fence"]),
        }
    }

    /// For `*extend.lua`.
    pub(crate) fn extend(&self) -> Vec<String> {
        match self.kind {
            LockKind::Read | LockKind::Write => {
                self.keys(&[":writer", ":readers", ":reader-holds"])
            }
            LockKind::Permit { .. } => self.keys(&[":holders", ":holds"]),
            _ => self.keys(&[""]),
        }
    }

    /// For `*release.lua`.
    pub(crate) fn release(&self) -> Vec<String> {
        match self.kind {
            LockKind::Fair => self.keys(&["", ":queue"]),
            _ => self.extend(),
        }
    }

    /// For `*abandon.lua` (fair waiters, waiting writers).
    pub(super) fn abandon(&self) -> Vec<String> {
        match self.kind {
            LockKind::Fair => self.keys(&["", ":queue", ":due"]),
            _ => self.keys(&[":writers-waiting"]),
        }
    }

    /// For `status.lua` and `force_release.lua`: every key of the family, the counter last.
    pub(crate) fn inspect(&self) -> Vec<String> {
        match self.kind {
            LockKind::Fair => self.keys(&["", ":queue", ":due", ":fence"]),
            LockKind::Read | LockKind::Write => self.acquire(),
            LockKind::Permit { .. } => self.keys(&[":holders", ":holds", ":fence"]),
            _ => self.keys(&["", ":fence"]),
        }
    }

    /// For `sem_available.lua`: the holders and the semaphore's size.
    pub(super) fn sem_count(&self) -> Vec<String> {
        self.keys(&[":holders", ":permits"])
    }

    /// For `sem_set_permits.lua`: the semaphore's size.
    pub(super) fn sem_size(&self) -> Vec<String> {
        self.keys(&[":permits"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_whatever_the_name() {
        for name in ["order:42", "}x{", "a%7Db", "{}", "注文"] {
            let k = Keys::new("", LockKind::Mutex, &LockName::new(name).unwrap());
            let lock = k.key("");
            let open = lock.find('{').unwrap();
            let close = open + lock[open..].find('}').unwrap();
            let tag = &lock[open + 1..close];
            assert!(!tag.is_empty(), "{name}");
            assert_eq!(
                lock.len(),
                close + 1,
                "{name}: the tag must be the whole name"
            );
        }
        let a = Keys::new("", LockKind::Mutex, &LockName::new("a}").unwrap()).key("");
        let b = Keys::new("", LockKind::Mutex, &LockName::new("a%7D").unwrap()).key("");
        assert_ne!(a, b, "escaping must keep names apart");
    }

    #[test]
    fn scanned_keys_give_back_their_names() {
        for name in ["order:42", "}x{", "a%7Db", "{}", "注文", "a*b?[c]\\"] {
            let n = LockName::new(name).unwrap();
            for kind in [LockKind::Mutex, LockKind::Fair, LockKind::Read] {
                for key_prefix in ["", "app1:"] {
                    let k = Keys::new(key_prefix, kind, &n);
                    for key in [k.key(""), k.channel(), k.key(":fence")] {
                        assert!(key.starts_with(key_prefix), "{key}");
                        assert_eq!(
                            parse_key(key_prefix, &key),
                            Some((family(kind), name.to_string())),
                            "{key}"
                        );
                    }
                    // Another application's keys are not this one's.
                    let other = if key_prefix.is_empty() { "app2:" } else { "" };
                    assert_eq!(parse_key(other, &k.key("")), None, "{key_prefix}");
                }
            }
        }
        assert_eq!(parse_key("", "distlock:elect:{x}"), None);
        assert_eq!(parse_key("", "other"), None);
        assert_eq!(parse_key("", "distlock:lock:{a%zz}"), None);
        assert_eq!(scan_pattern("", "a*{"), "distlock:*:{a\\*%7B*");
        assert_eq!(scan_pattern("app1:", "a"), "app1:distlock:*:{a*");
    }

    #[test]
    fn prefixes_are_checked() {
        for good in ["app1:", "a", "svc.orders-2_x:"] {
            assert!(check_prefix(good).is_ok(), "{good}");
        }
        for bad in ["", "a{b}", "a*", "a b", "ü", &"x".repeat(65)] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }
}

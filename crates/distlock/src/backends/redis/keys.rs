//! Where each lock lives in Redis: its keys and its channel, all under one hash tag, and which
//! of them each script takes (in its `KEYS` order).

use crate::types::{LockKind, LockName};

/// The keys and channel of one lock. Every key carries the hash tag `{name}`, so each script
/// touches one cluster slot.
pub(crate) struct Keys {
    kind: LockKind,
    base: String,
}

impl Keys {
    pub(crate) fn new(kind: LockKind, name: &LockName) -> Self {
        let family = match kind {
            LockKind::Fair => "fair",
            LockKind::Read | LockKind::Write => "rw",
            LockKind::Permit { .. } => "sem",
            _ => "lock",
        };
        // Escape the braces so the tag is always the whole name (and `%` so it stays 1:1).
        let name = name.as_str();
        let mut base = String::with_capacity("distlock:rw:{}".len() + name.len() + 8);
        base.push_str("distlock:");
        base.push_str(family);
        base.push_str(":{");
        for c in name.chars() {
            match c {
                '%' => base.push_str("%25"),
                '{' => base.push_str("%7B"),
                '}' => base.push_str("%7D"),
                c => base.push(c),
            }
        }
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
            LockKind::Permit { .. } => self.keys(&[":holders", ":holds", ":fence"]),
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

    /// For `sem_available.lua`.
    pub(super) fn holders(&self) -> Vec<String> {
        self.keys(&[":holders"])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_whatever_the_name() {
        for name in ["order:42", "}x{", "a%7Db", "{}", "注文"] {
            let k = Keys::new(LockKind::Mutex, &LockName::new(name).unwrap());
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
        let a = Keys::new(LockKind::Mutex, &LockName::new("a}").unwrap()).key("");
        let b = Keys::new(LockKind::Mutex, &LockName::new("a%7D").unwrap()).key("");
        assert_ne!(a, b, "escaping must keep names apart");
    }
}

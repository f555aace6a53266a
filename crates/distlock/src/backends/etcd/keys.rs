//! Where a lock lives in etcd, and who holds it: every flavour is a queue of contender keys in
//! one key range, ordered by create revision, with a rule for "do I hold it?" over that order.
//!
//! The exclusive lock is etcd's own mutex layout, so `etcdctl lock NAME` and distlock's lock
//! `NAME` are one lock: each contender puts a key under `<prefix><name>/` (value: its owner
//! token and who put it, a [contender entry](crate::backends::queues::records)), attached to its session's lease; the key with the oldest create revision holds the
//! lock, and that revision is the fencing token. etcd names the key `<name>/<lease id in hex>`,
//! one per session; distlock adds `-<n>`, one per contender, so two owners of one client queue in
//! etcd in arrival order like everyone else instead of taking turns at one key.
//!
//! The other flavours live beside it, under `<name>%<flavour>/` (a `%` never follows an escaped
//! name, so no range holds another's keys): the fair lock is the same queue under its own name;
//! the read-write lock puts readers under `%rw/r/` and writers under `%rw/w/` (a reader holds
//! when no writer is older, a writer when nothing is older); a semaphore of N permits holds for
//! the N oldest keys, N the size kept in the key `<name>%sem` itself (no lease: it stays while
//! the semaphore is empty), which is a prefix of its range, so one watch sees both a release
//! and a resize.

use etcd_client::{GetOptions, KeyValue, SortOrder, SortTarget};

use crate::types::{LockKind, LockName};

/// Who holds, over the keys of a range in create order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// The oldest key holds; a waiter waits for the key just older than its own.
    Exclusive,
    /// Holds when no writer key is older; waits for the newest older writer.
    Shared,
    /// The `n` oldest keys hold; a waiter waits for any older key to go.
    Permits(u32),
}

/// The keys of one lock of one flavour.
#[derive(Clone, Debug)]
pub(super) struct LockKeys {
    /// Every contender of this lock (and flavour) has its key under this.
    range: String,
    /// Where this contender's key goes: `range`, or its reader / writer part.
    own: String,
    /// Where the keys that can keep this contender waiting are.
    blockers: String,
    rule: Rule,
    /// A semaphore's size key.
    size: Option<String>,
}

impl LockKeys {
    pub(super) fn new(url_prefix: &str, name: &LockName, kind: LockKind) -> Self {
        let name = format!("{url_prefix}{}", escape(name.as_str()));
        let size = matches!(kind, LockKind::Permit { .. }).then(|| format!("{name}%sem"));
        let (range, own, blockers, rule) = match kind {
            LockKind::Fair => {
                let range = format!("{name}%fair/");
                (range.clone(), range.clone(), range, Rule::Exclusive)
            }
            LockKind::Read => {
                let range = format!("{name}%rw/");
                let (own, blockers) = (format!("{range}r/"), format!("{range}w/"));
                (range, own, blockers, Rule::Shared)
            }
            LockKind::Write => {
                let range = format!("{name}%rw/");
                (range.clone(), format!("{range}w/"), range, Rule::Exclusive)
            }
            LockKind::Permit { permits } => {
                let range = format!("{name}%sem/");
                (range.clone(), range.clone(), range, Rule::Permits(permits))
            }
            // The exclusive lock, and any flavour to come, on etcd's own layout.
            _ => {
                let range = format!("{name}/");
                (range.clone(), range.clone(), range, Rule::Exclusive)
            }
        };
        LockKeys {
            range,
            own,
            blockers,
            rule,
            size,
        }
    }

    /// A semaphore's size key; `None` for other flavours.
    pub(super) fn size_key(&self) -> Option<&str> {
        self.size.as_deref()
    }

    /// A semaphore's rule with the size the store keeps, `permits`: the `permits` oldest keys
    /// hold.
    pub(super) fn with_permits(&mut self, permits: u32) {
        if let Rule::Permits(_) = self.rule {
            self.rule = Rule::Permits(permits);
        }
    }

    /// The permits of a semaphore's rule (0 for other flavours).
    pub(super) fn permits(&self) -> u32 {
        match self.rule {
            Rule::Permits(n) => n,
            _ => 0,
        }
    }

    /// The whole range of this lock's contenders.
    pub(super) fn range(&self) -> &str {
        &self.range
    }

    /// The key of contender number `n` of the client with session lease `lease`.
    pub(super) fn contender(&self, lease: i64, n: u64) -> String {
        format!("{}{lease:x}-{n:x}", self.own)
    }

    /// The read that tells whether a contender holds: the oldest keys that could keep it waiting.
    pub(super) fn holder_read(&self) -> (String, GetOptions) {
        let limit = match self.rule {
            Rule::Permits(n) => i64::from(n.max(1)),
            _ => 1,
        };
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(limit);
        (self.blockers.clone(), options)
    }

    /// Whether the contender whose key was created at `mine` holds, given [`holder_read`]'s
    /// answer from a read in which its key exists.
    pub(super) fn holds(&self, read: &[KeyValue], mine: i64) -> bool {
        match self.rule {
            Rule::Exclusive => read.first().is_none_or(|kv| kv.create_revision() == mine),
            Rule::Shared => read.first().is_none_or(|kv| kv.create_revision() > mine),
            Rule::Permits(_) => read.iter().any(|kv| kv.create_revision() == mine),
        }
    }

    /// This flavour's holders among `range` (the keys of [`range`](Self::range) in create order),
    /// by the rule [`holds`](Self::holds) applies, and how many of this flavour's keys wait.
    pub(super) fn holders<'a>(&self, range: &'a [KeyValue]) -> (Vec<&'a KeyValue>, u64) {
        let mut holders = Vec::new();
        let mut waiters = 0;
        let mut blockers = 0usize;
        for kv in range {
            let own = kv.key().starts_with(self.own.as_bytes());
            let blocker = kv.key().starts_with(self.blockers.as_bytes());
            let holds = match self.rule {
                // The oldest blocker holds (the write lock's blockers are the whole range).
                Rule::Exclusive => blockers == 0,
                Rule::Shared => blockers == 0,
                Rule::Permits(n) => blockers < n as usize,
            };
            if own {
                if holds {
                    holders.push(kv);
                } else {
                    waiters += 1;
                }
            }
            blockers += usize::from(blocker);
        }
        (holders, waiters)
    }

    /// The read, in the transaction that puts a contender's key, that finds the key it would
    /// wait for: the two newest blockers. The key just put is the newest of the range, so the
    /// newest blocker older than it ([`ahead_in`]) is among them. `None` for a semaphore.
    pub(super) fn ahead_of_new_read(&self) -> Option<(String, GetOptions)> {
        if let Rule::Permits(_) = self.rule {
            return None;
        }
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(2);
        Some((self.blockers.clone(), options))
    }

    /// The key to wait for, for a contender created at `mine` that does not hold: the newest
    /// blocker older than it. `None` for a semaphore, whose waiters watch the whole range.
    pub(super) fn ahead_read(&self, mine: i64) -> Option<(String, GetOptions)> {
        if let Rule::Permits(_) = self.rule {
            return None;
        }
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_max_create_revision(mine - 1)
            .with_limit(1);
        Some((self.blockers.clone(), options))
    }
}

/// The contender number a key of [`LockKeys::contender`] ends with.
pub(super) fn contender_number(key: &str) -> Option<u64> {
    let (_, n) = key.rsplit_once('-')?;
    u64::from_str_radix(n, 16).ok()
}

/// The key a contender created at `mine` waits for, in the answer to
/// [`LockKeys::ahead_read`] or [`LockKeys::ahead_of_new_read`] (newest first): the newest key older
/// than it; `None` when there is none.
pub(super) fn ahead_in(read: &[KeyValue], mine: i64) -> Option<Vec<u8>> {
    read.iter()
        .find(|kv| kv.create_revision() < mine)
        .map(|kv| kv.key().to_vec())
}

/// The lock ranges a key of a prefix read belongs to, found by parsing it: the lock's name and
/// flavour range, `None` for anything else (election and latch keys, keys distlock did not
/// make). `key` is without the URL's prefix.
pub(super) fn parse_key(key: &str) -> Option<(String, Range)> {
    let (head, _) = key.split_once('/')?;
    // After the escaped name, a `%` not starting an escape starts the flavour.
    let mut end = head.len();
    let mut i = 0;
    while let Some(at) = head[i..].find('%') {
        let at = i + at;
        let next = head.get(at + 1..at + 3);
        if matches!(next, Some("25" | "2F")) {
            i = at + 3;
        } else {
            end = at;
            break;
        }
    }
    let range = match &head[end..] {
        "" => Range::Mutex,
        "%fair" => Range::Fair,
        "%rw" => Range::ReadWrite,
        "%sem" => Range::Semaphore,
        _ => return None,
    };
    let name = head[..end].replace("%2F", "/").replace("%25", "%");
    (escape(&name) == head[..end]).then_some((name, range))
}

/// The lock name whose semaphore size `key` is (`<escaped name>%sem`, without the URL's
/// prefix); `None` for any other key.
pub(super) fn parse_size_key(key: &str) -> Option<String> {
    if key.contains('/') {
        return None;
    }
    match parse_key(&format!("{key}/"))? {
        (name, Range::Semaphore) => Some(name),
        _ => None,
    }
}

/// Which of a name's key ranges a key is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Range {
    Mutex,
    Fair,
    ReadWrite,
    Semaphore,
}

impl Range {
    /// The flavours whose keys are in this range (a semaphore's with its permit count).
    pub(super) fn kinds(self, permits: u32) -> Vec<LockKind> {
        match self {
            Range::Mutex => vec![LockKind::Mutex],
            Range::Fair => vec![LockKind::Fair],
            Range::ReadWrite => vec![LockKind::Read, LockKind::Write],
            Range::Semaphore => vec![LockKind::Permit { permits }],
        }
    }
}

/// A name as one key segment: `/` would let one lock's range hold another's keys (`a/` holds
/// `a/b/…`), so it becomes `%2F`, and `%` becomes `%25` so escaping stays one-to-one (and a `%`
/// after a name always starts a flavour). Every other name (letters, digits, `-_.:`, any
/// Unicode) is the key as written, as `etcdctl lock` uses it.
pub(super) fn escape(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(['/', '%']) {
        name.replace('%', "%25").replace('/', "%2F").into()
    } else {
        name.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prefix: &str, name: &str, kind: LockKind) -> LockKeys {
        LockKeys::new(prefix, &LockName::new(name).unwrap(), kind)
    }

    #[test]
    fn etcd_mutex_layout_and_no_range_holds_another_lock() {
        let plain = keys("", "orders:42", LockKind::Mutex);
        assert_eq!(plain.range(), "orders:42/");
        assert_eq!(plain.contender(0x694d9a1b2c, 10), "orders:42/694d9a1b2c-a");
        assert_eq!(
            contender_number(&keys("", "a-b", LockKind::Mutex).contender(0x694d, 0x1f)),
            Some(0x1f)
        );
        let nested = keys("app/", "a/b", LockKind::Mutex);
        assert_eq!(nested.range(), "app/a%2Fb/");
        let a = keys("", "a", LockKind::Mutex);
        assert!(!nested.range().starts_with(a.range()));
        assert_eq!(keys("", "a%2Fb", LockKind::Mutex).range(), "a%252Fb/");
        // Flavours: beside the mutex, never inside its range or another name's.
        let read = keys("", "a", LockKind::Read);
        assert_eq!(read.contender(1, 2), "a%rw/r/1-2");
        assert_eq!(keys("", "a", LockKind::Write).contender(1, 2), "a%rw/w/1-2");
        for kind in [
            LockKind::Fair,
            LockKind::Read,
            LockKind::Permit { permits: 2 },
        ] {
            let k = keys("", "a", kind);
            assert!(!k.range().starts_with(a.range()), "{kind:?}");
            assert!(
                !k.range()
                    .starts_with(keys("", "a%", LockKind::Mutex).range())
            );
        }
    }

    #[test]
    fn keys_parse_back_to_their_lock() {
        for (name, kind, range) in [
            ("orders:42", LockKind::Mutex, Range::Mutex),
            ("a/b%c", LockKind::Fair, Range::Fair),
            ("a%2Fb", LockKind::Read, Range::ReadWrite),
            ("x", LockKind::Write, Range::ReadWrite),
            ("x", LockKind::Permit { permits: 2 }, Range::Semaphore),
        ] {
            let key = keys("", name, kind).contender(0x694d, 3);
            assert_eq!(parse_key(&key), Some((name.to_string(), range)), "{key}");
        }
        assert_eq!(parse_key("a%elect/rec"), None);
        assert_eq!(parse_key("a%latch"), None);
        assert_eq!(parse_key("a%2/x"), None);
        let sem = keys("p/", "a/b", LockKind::Permit { permits: 2 });
        assert_eq!(sem.size_key(), Some("p/a%2Fb%sem"));
        assert!(sem.range().starts_with(sem.size_key().unwrap()));
        assert_eq!(parse_size_key("a%2Fb%sem"), Some("a/b".to_string()));
        assert_eq!(parse_key("a%2Fb%sem"), None);
        assert_eq!(parse_size_key("a%2Fb%sem/1-2"), None);
        assert_eq!(parse_size_key("a%latch"), None);
        assert_eq!(keys("", "a", LockKind::Mutex).size_key(), None);
    }
}

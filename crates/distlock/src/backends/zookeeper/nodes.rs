//! Where a lock lives in ZooKeeper, and who holds it: every flavour is a parent node whose
//! children are the contenders' ephemeral sequential nodes, with a rule over their sequence
//! order for "do I hold it?" — Curator's layout, so Curator's locks and distlock's on one path
//! are one lock.
//!
//! A contender's node is `<parent>/_c_<id>-<kind><sequence>`: `_c_<id>-` is Curator's
//! "protection" prefix (`id` is a random UUID-shaped string, one per contender, so a create
//! whose answer was lost is found again by name), `<kind>` is `lock-` (Curator's
//! `InterProcessMutex`), `__READ__` or `__WRIT__` (Curator's `InterProcessReadWriteLock`), and
//! ZooKeeper appends the 10-digit sequence. Like Curator, contenders sort by that sequence alone.
//!
//! The lock, the write lock and the read lock of one name share the parent `<chroot>/<name>`
//! (as Curator's mutex and read-write lock on one path do); the fair lock and the semaphore
//! live beside it, under `<name>%fair` and `<name>%sem` (a `%` in a name is escaped, so no
//! name reaches another's parent). A semaphore's size is the persistent node `<name>%permits`
//! (see [`size`](super::size)).

use crate::types::{LockKind, LockName};

/// Curator's kinds of contender node.
const MUTEX: &str = "lock-";
const READ: &str = "__READ__";
const WRITE: &str = "__WRIT__";

/// Who holds, over the children of a parent in sequence order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// The first child holds; a waiter waits for the child just before its own.
    Exclusive,
    /// Holds when no writer (any child but a reader) is before it; waits for the first writer.
    Shared,
    /// The first `n` children hold; a waiter waits for any change among the children.
    Permits(u32),
}

/// Where a waiter stands in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Standing {
    /// Its node is gone (its session ended, or someone deleted it).
    Gone,
    Holds,
    /// Waits for this child (its name) to go.
    WaitsFor(String),
    /// Waits for the first child (its name) to go, and holds once it has: no child can come
    /// before this one any more (new ones get larger sequences).
    NextAfter(String),
    /// Waits for any change among the children.
    WaitsForAnyChange,
}

/// The nodes of one lock of one flavour.
#[derive(Clone, Debug)]
pub(super) struct LockNodes {
    parent: String,
    kind: &'static str,
    rule: Rule,
    /// A semaphore's size node.
    size: Option<String>,
}

impl LockNodes {
    /// `prefix` is the URL's chroot (`/services/locks`, or empty).
    pub(super) fn new(prefix: &str, name: &LockName, kind: LockKind) -> Self {
        let name = escape(name.as_str());
        let (suffix, node_kind, rule) = match kind {
            LockKind::Fair => ("%fair", MUTEX, Rule::Exclusive),
            LockKind::Read => ("", READ, Rule::Shared),
            LockKind::Write => ("", WRITE, Rule::Exclusive),
            LockKind::Permit { permits } => ("%sem", MUTEX, Rule::Permits(permits)),
            // The lock, and any flavour to come, as Curator's InterProcessMutex.
            _ => ("", MUTEX, Rule::Exclusive),
        };
        let size = matches!(rule, Rule::Permits(_)).then(|| format!("{prefix}/{name}%permits"));
        LockNodes {
            parent: format!("{prefix}/{name}{suffix}"),
            kind: node_kind,
            rule,
            size,
        }
    }

    /// A semaphore's size node; `None` for other flavours.
    pub(super) fn size_node(&self) -> Option<&str> {
        self.size.as_deref()
    }

    /// A semaphore's rule with the size the store keeps, `permits`: the first `permits`
    /// contenders hold.
    pub(super) fn with_permits(&mut self, permits: u32) {
        if let Rule::Permits(_) = self.rule {
            self.rule = Rule::Permits(permits);
        }
    }

    /// The parent whose children are this lock's contenders.
    pub(super) fn parent(&self) -> &str {
        &self.parent
    }

    /// The path to create (ephemeral, sequential) for the contender `id`.
    pub(super) fn contender(&self, id: &str) -> String {
        format!("{}/_c_{id}-{}", self.parent, self.kind)
    }

    /// The child of contender `id` among `children`, if it is there.
    pub(super) fn find<'a>(&self, children: &'a [String], id: &str) -> Option<&'a str> {
        children.iter().map(String::as_str).find(|c| {
            c.strip_prefix("_c_")
                .and_then(|c| c.strip_prefix(id))
                .is_some_and(|c| c.starts_with('-'))
        })
    }

    /// This flavour's holders and waiters among `children` (names, any order), by the same rule
    /// [`standing`](Self::standing) applies: the holders' names in sequence order, the number of
    /// this flavour's other contenders, and the first contender in sequence order that does not
    /// hold (of any flavour on this parent: the next that may hold).
    pub(super) fn holders<'a>(
        &self,
        children: &'a [String],
    ) -> (Vec<&'a str>, u64, Option<&'a str>) {
        let mut holders = Vec::new();
        let mut waiters = 0;
        let mut next = None;
        let mut writer_seen = false;
        for (index, child) in in_sequence(children).into_iter().enumerate() {
            writer_seen |= !child.contains(READ);
            let holds = match self.rule {
                Rule::Exclusive => index == 0,
                Rule::Shared => !writer_seen,
                Rule::Permits(n) => index < n as usize,
            };
            if holds && self.is_own_kind(child) {
                holders.push(child);
            } else if !holds {
                waiters += u64::from(self.is_own_kind(child));
                next = next.or(Some(child));
            }
        }
        (holders, waiters, next)
    }

    /// Whether `child` is a contender of this flavour (the lock, the read lock and the write
    /// lock share a parent).
    fn is_own_kind(&self, child: &str) -> bool {
        child.contains(self.kind)
    }

    /// Where the contender whose node is `mine` stands among `children` (names, any order).
    pub(super) fn standing(&self, children: &[String], mine: &str) -> Standing {
        let queue = in_sequence(children);
        let Some(index) = queue.iter().position(|c| *c == mine) else {
            return Standing::Gone;
        };
        match self.rule {
            Rule::Exclusive if index == 0 => Standing::Holds,
            Rule::Exclusive if index == 1 => Standing::NextAfter(queue[0].to_string()),
            Rule::Exclusive => Standing::WaitsFor(queue[index - 1].to_string()),
            Rule::Shared => match queue[..index].iter().find(|c| !c.contains(READ)) {
                None => Standing::Holds,
                Some(writer) => Standing::WaitsFor(writer.to_string()),
            },
            Rule::Permits(n) if index < n as usize => Standing::Holds,
            Rule::Permits(_) => Standing::WaitsForAnyChange,
        }
    }
}

/// The parent of the sessions' beacons (`session.rs`), a child of the chroot.
pub(super) const SESSIONS: &str = "%sessions";

/// The lock parents `<name>`, `<name>%fair`, `<name>%sem` a status may find among the children
/// of the chroot: the lock's name and which parent it is, `None` for anything else (election
/// and latch nodes, names no escaping made).
pub(super) fn parse_parent(child: &str) -> Option<(String, Parent)> {
    let (escaped, parent) = if let Some(n) = child.strip_suffix("%fair") {
        (n, Parent::Fair)
    } else if let Some(n) = child.strip_suffix("%sem") {
        (n, Parent::Semaphore)
    } else if child.ends_with("%elect")
        || child.ends_with("%latch")
        || child.ends_with("%permits")
        || child == SESSIONS
    {
        return None;
    } else {
        (child, Parent::Shared)
    };
    let name = unescape(escaped)?;
    (escape(&name) == escaped).then_some((name, parent))
}

/// Which of a name's parents a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parent {
    /// The lock, the read lock and the write lock (Curator's path).
    Shared,
    Fair,
    Semaphore,
}

impl Parent {
    /// The flavours whose contenders share this parent (a semaphore's with its permit count).
    pub(super) fn kinds(self, permits: u32) -> Vec<LockKind> {
        match self {
            Parent::Shared => vec![LockKind::Mutex, LockKind::Read, LockKind::Write],
            Parent::Fair => vec![LockKind::Fair],
            Parent::Semaphore => vec![LockKind::Permit { permits }],
        }
    }
}

/// Undoes [`escape`]; `None` for text it cannot have made.
fn unescape(escaped: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// The oldest contender among `children`.
pub(super) fn first_in_sequence(children: &[String]) -> Option<&str> {
    in_sequence(children).first().copied()
}

/// The contenders among `children`, in sequence order.
fn in_sequence(children: &[String]) -> Vec<&str> {
    let mut queue: Vec<(u64, &str)> = children
        .iter()
        .filter_map(|c| Some((sequence(c)?, c.as_str())))
        .collect();
    queue.sort_unstable();
    queue.into_iter().map(|(_, c)| c).collect()
}

/// The sequence ZooKeeper appended to a child's name (10 digits, or 19 past 2^31); `None` for a
/// child that is no contender.
fn sequence(child: &str) -> Option<u64> {
    let digits = child.len() - child.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits < 10 {
        return None;
    }
    child[child.len() - digits.min(19)..].parse().ok()
}

/// A lock name as one node name: any name works, and none can reach another path. `/`, `%`,
/// the characters ZooKeeper refuses in paths (controls, the private-use and specials blocks,
/// and every character beyond the BMP: Java sees those as surrogate pairs, which it refuses
/// too) are `%XX`-escaped (UTF-8 bytes), so escaping stays one-to-one and a `%`
/// after a name always starts a flavour; `.`, `..` and `zookeeper` (ZooKeeper's own node at the
/// root) get their first character escaped. Plain names (letters, digits, `-_.:`, most
/// Unicode) stay as written, so Curator needs no escaping to share a lock.
pub(super) fn escape(name: &str) -> String {
    let refused = |c: char| matches!(c, '/' | '%' | '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..);
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.chars().enumerate() {
        let whole_is_special = matches!(name, "." | ".." | "zookeeper");
        if refused(c) || (i == 0 && whole_is_special) {
            let mut bytes = [0; 4];
            for b in c.encode_utf8(&mut bytes).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(prefix: &str, name: &str, kind: LockKind) -> LockNodes {
        LockNodes::new(prefix, &LockName::new(name).unwrap(), kind)
    }

    #[test]
    fn curator_layout_and_no_parent_holds_another_lock() {
        let plain = nodes("/C", "N", LockKind::Mutex);
        assert_eq!(plain.parent(), "/C/N");
        assert_eq!(plain.contender("abc"), "/C/N/_c_abc-lock-");
        assert_eq!(
            nodes("", "orders:42", LockKind::Mutex).parent(),
            "/orders:42"
        );
        assert_eq!(nodes("", "a/b", LockKind::Mutex).parent(), "/a%2Fb");
        assert_eq!(nodes("", "a%2Fb", LockKind::Mutex).parent(), "/a%252Fb");
        assert_eq!(nodes("", "..", LockKind::Mutex).parent(), "/%2E.");
        assert_eq!(nodes("", ".", LockKind::Mutex).parent(), "/%2E");
        assert_eq!(
            nodes("", "zookeeper", LockKind::Mutex).parent(),
            "/%7Aookeeper"
        );
        assert_eq!(
            nodes("", "x\u{fff5}y", LockKind::Mutex).parent(),
            "/x%EF%BF%B5y"
        );
        assert_eq!(
            nodes("", "\u{e000}", LockKind::Mutex).parent(),
            "/%EE%80%80"
        );
        assert_eq!(nodes("", "ünï", LockKind::Mutex).parent(), "/ünï");
        assert_eq!(nodes("", "🚀", LockKind::Mutex).parent(), "/%F0%9F%9A%80");
        // The read-write lock on Curator's path; the others beside it.
        assert_eq!(
            nodes("/C", "N", LockKind::Read).contender("i"),
            "/C/N/_c_i-__READ__"
        );
        assert_eq!(
            nodes("/C", "N", LockKind::Write).contender("i"),
            "/C/N/_c_i-__WRIT__"
        );
        assert_eq!(nodes("/C", "N", LockKind::Fair).parent(), "/C/N%fair");
        assert_eq!(
            nodes("/C", "N", LockKind::Permit { permits: 3 }).parent(),
            "/C/N%sem"
        );
    }

    #[test]
    fn rules_over_sequence_order() {
        let children: Vec<String> = [
            "_c_w2-__WRIT__0000000004",
            "_c_r1-__READ__0000000002",
            "_c_r0-__READ__0000000001",
            "_c_r3-__READ__0000000005",
            "junk",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let read = nodes("", "n", LockKind::Read);
        assert_eq!(read.standing(&children, &children[2]), Standing::Holds);
        assert_eq!(read.standing(&children, &children[1]), Standing::Holds);
        assert_eq!(
            read.standing(&children, &children[3]),
            Standing::WaitsFor(children[0].clone())
        );
        let write = nodes("", "n", LockKind::Write);
        assert_eq!(
            write.standing(&children, &children[0]),
            Standing::WaitsFor(children[1].clone())
        );
        assert_eq!(
            write.standing(&children, &children[1]),
            Standing::NextAfter(children[2].clone())
        );
        assert_eq!(write.standing(&children, "gone"), Standing::Gone);
        let sem = nodes("", "n", LockKind::Permit { permits: 2 });
        assert_eq!(sem.standing(&children, &children[1]), Standing::Holds);
        assert_eq!(
            sem.standing(&children, &children[0]),
            Standing::WaitsForAnyChange
        );
        assert_eq!(read.find(&children, "r1"), Some(children[1].as_str()));
        assert_eq!(read.find(&children, "r"), None);
        // Past 2^31 ZooKeeper writes 19 digits; order still holds.
        let big: Vec<String> = vec![
            "_c_b-lock-2147483648000".into(),
            "_c_a-lock-0000000009".into(),
        ];
        let mutex = nodes("", "n", LockKind::Mutex);
        assert_eq!(mutex.standing(&big, &big[1]), Standing::Holds);
    }

    #[test]
    fn holders_by_the_same_rules_and_parents_parse_back() {
        let children: Vec<String> = [
            "_c_r0-__READ__0000000001",
            "_c_r1-__READ__0000000002",
            "_c_w2-__WRIT__0000000004",
            "_c_r3-__READ__0000000005",
            "junk",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let read = nodes("", "n", LockKind::Read);
        assert_eq!(
            read.holders(&children),
            (
                vec![children[0].as_str(), children[1].as_str()],
                1,
                Some(children[2].as_str())
            )
        );
        let write = nodes("", "n", LockKind::Write);
        assert_eq!(
            write.holders(&children),
            (vec![], 1, Some(children[1].as_str()))
        );
        let sem = nodes("", "n", LockKind::Permit { permits: 3 });
        assert_eq!(sem.holders(&children).0.len(), 0, "no semaphore nodes here");
        assert_eq!(first_in_sequence(&children), Some(children[0].as_str()));
        for (name, kind, parent) in [
            ("orders:42", LockKind::Mutex, Parent::Shared),
            ("a/b%c", LockKind::Fair, Parent::Fair),
            (
                "zookeeper",
                LockKind::Permit { permits: 2 },
                Parent::Semaphore,
            ),
            ("🚀", LockKind::Read, Parent::Shared),
        ] {
            let path = nodes("", name, kind).parent().to_string();
            let child = path.trim_start_matches('/');
            assert_eq!(
                parse_parent(child),
                Some((name.to_string(), parent)),
                "{child}"
            );
        }
        assert_eq!(parse_parent("x%elect"), None);
        assert_eq!(parse_parent("x%latch"), None);
        assert_eq!(parse_parent("x%permits"), None);
        let sem = nodes("/C", "N", LockKind::Permit { permits: 2 });
        assert_eq!(sem.size_node(), Some("/C/N%permits"));
        assert_eq!(nodes("/C", "N", LockKind::Mutex).size_node(), None);
        assert_eq!(parse_parent("x%zz"), None);
    }
}

//! Where a lock lives in etcd: etcd's own mutex layout, so `etcdctl lock NAME` and distlock's
//! lock `NAME` are one lock. Each contender puts the key `<prefix><name>/<lease id in hex>`
//! (value: its owner token), attached to its session's lease; the key with the oldest create
//! revision holds the lock, and that revision is the fencing token.

use crate::types::LockName;

/// The key range of one lock: `<url prefix><escaped name>/`.
#[derive(Clone, Debug)]
pub(super) struct LockKeys {
    prefix: String,
}

impl LockKeys {
    pub(super) fn new(url_prefix: &str, name: &LockName) -> Self {
        LockKeys {
            prefix: format!("{url_prefix}{}/", escape(name.as_str())),
        }
    }

    /// Every contender's key starts with this.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of the contender with session lease `lease`.
    pub(super) fn contender(&self, lease: i64) -> String {
        format!("{}{lease:x}", self.prefix)
    }
}

/// A name as one key segment: `/` would let one lock's range hold another's keys (`a/` holds
/// `a/b/…`), so it becomes `%2F`, and `%` becomes `%25` so escaping stays one-to-one. Every other
/// name (letters, digits, `-_.:`, any Unicode) is the key as written, as `etcdctl lock` uses it.
fn escape(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(['/', '%']) {
        name.replace('%', "%25").replace('/', "%2F").into()
    } else {
        name.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_mutex_layout_and_no_range_holds_another_lock() {
        let plain = LockKeys::new("", &LockName::new("orders:42").unwrap());
        assert_eq!(plain.prefix(), "orders:42/");
        assert_eq!(plain.contender(0x694d9a1b2c), "orders:42/694d9a1b2c");
        let nested = LockKeys::new("app/", &LockName::new("a/b").unwrap());
        assert_eq!(nested.prefix(), "app/a%2Fb/");
        let a = LockKeys::new("", &LockName::new("a").unwrap());
        assert!(!nested.prefix().starts_with(a.prefix()));
        assert_eq!(
            LockKeys::new("", &LockName::new("a%2Fb").unwrap()).prefix(),
            "a%252Fb/"
        );
    }
}

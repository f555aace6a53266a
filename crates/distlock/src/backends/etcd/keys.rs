//! Where a lock lives in etcd: etcd's own mutex layout, so `etcdctl lock NAME` and distlock's
//! lock `NAME` are one lock. Each contender puts a key under `<prefix><name>/` (value: its owner
//! token), attached to its session's lease; the key with the oldest create revision holds the
//! lock, and that revision is the fencing token. etcd names the key `<name>/<lease id in hex>`,
//! one per session; distlock adds `-<n>`, one per contender, so two owners of one client queue
//! in etcd in arrival order like everyone else instead of taking turns at one key.

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

    /// The key of contender number `n` of the client with session lease `lease`.
    pub(super) fn contender(&self, lease: i64, n: u64) -> String {
        format!("{}{lease:x}-{n:x}", self.prefix)
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
        assert_eq!(plain.contender(0x694d9a1b2c, 10), "orders:42/694d9a1b2c-a");
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

//! The Lua scripts, one set per flavour. Each lives in `scripts/` with `prelude.lua` (server
//! clock, fencing counter, holding check) put in front.
//!
//! Which flavour runs which of them, with which arguments, is the table in `flavours.rs`.

use std::collections::HashMap;
use std::sync::LazyLock;

use ::redis::Script;

use super::flavours::Flavour;
use crate::types::LockKind;

/// One flavour's take, renew and release.
pub(crate) struct Ops {
    pub(crate) acquire: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
    /// `release`'s text, for `EVAL`: for a release that cannot wait for a `NOSCRIPT` answer and
    /// a second try (Redlock's undo of a failed take, `Server::send_unawaited`).
    // Only Redlock sends without awaiting.
    #[cfg_attr(not(feature = "redlock"), allow(dead_code))]
    pub(crate) release_text: String,
}

impl Ops {
    fn new(make: &mut Make, prelude: &str, acquire: &str, extend: &str, release: &str) -> Ops {
        let release_text = with_helpers(prelude, release);
        Ops {
            acquire: make(&with_helpers(prelude, acquire)),
            extend: make(&with_helpers(prelude, extend)),
            release: make(&release_text),
            release_text,
        }
    }
}

/// Makes a script of its text (`Script::new`, or that and more: see [`SHARDED`]).
type Make<'a> = dyn FnMut(&str) -> Script + 'a;

const PRELUDE: &str = include_str!("scripts/prelude.lua");

pub(crate) struct Scripts {
    mutex: Ops,
    fair: Ops,
    rw: Ops,
    sem: Ops,
    /// The exclusive lock's `extend` for many holdings in one call (the watchdog's batches).
    pub(super) extend_many: Script,
    pub(super) fair_abandon: Script,
    pub(super) rw_abandon: Script,
    pub(super) sem_available: Script,
    pub(super) sem_set_permits: Script,
    /// Every flavour's, after `holdings.lua` (for Redlock's masters too).
    pub(crate) status: Script,
    pub(crate) force_release: Script,
    /// Election records and count-down latches (`election.rs`, `latch.rs`): no prelude, they
    /// hold no lock.
    pub(super) elect_write: Script,
    pub(super) elect_read: Script,
    pub(super) latch: Script,
}

impl Scripts {
    /// The take, extend and release of `kind` (its row of [`Flavour`]), for Redlock's masters.
    #[cfg_attr(not(any(feature = "redlock", test)), allow(dead_code))]
    pub(crate) fn ops(&self, kind: LockKind) -> &Ops {
        (Flavour::of(kind).ops)(self)
    }

    pub(super) fn mutex(&self) -> &Ops {
        &self.mutex
    }

    pub(super) fn fair(&self) -> &Ops {
        &self.fair
    }

    pub(super) fn rw(&self) -> &Ops {
        &self.rw
    }

    pub(super) fn sem(&self) -> &Ops {
        &self.sem
    }
}

/// `body` with `prelude.lua` put in front (for Redlock's own script too): its constants and only
/// the helpers that `body` calls. Each `local function` is a closure made at every call of the
/// script, and what a call allocates the server's Lua garbage collector pays for again, so a
/// script carries no helper it does not call.
// Only Redlock's own script is built from outside this file.
#[cfg_attr(not(feature = "redlock"), allow(dead_code))]
pub(crate) fn script(body: &str) -> Script {
    Script::new(&with_helpers(PRELUDE, body))
}

/// `prelude` up to its first helper, then those of its helpers (`local function NAME(`) that
/// `body` calls, or that a helper it calls calls, in the prelude's order, then `body`.
fn with_helpers(prelude: &str, body: &str) -> String {
    let mut parts = prelude.split("\nlocal function ");
    let head = parts.next().unwrap_or_default();
    let helpers: Vec<(&str, &str)> = parts
        .map(|part| (part.split('(').next().unwrap_or_default().trim(), part))
        .collect();
    let calls = |text: &str, name: &str| text.contains(&format!("{name}("));
    let mut wanted: Vec<bool> = helpers.iter().map(|(name, _)| calls(body, name)).collect();
    // Helpers may call helpers defined before them: take those in too, until nothing changes.
    loop {
        let before = wanted.clone();
        for (i, (name, _)) in helpers.iter().enumerate() {
            wanted[i] |= helpers
                .iter()
                .zip(&before)
                .any(|((_, part), &taken)| taken && calls(part, name));
        }
        if wanted == before {
            break;
        }
    }
    let mut out = String::from(head);
    for ((_, part), _) in helpers.iter().zip(&wanted).filter(|(_, taken)| **taken) {
        out.push_str("\nlocal function ");
        out.push_str(part);
    }
    out.push('\n');
    out.push_str(body);
    out
}

/// `body` with `prelude` and `holdings.lua` put in front.
fn inspecting(make: &mut Make, prelude: &str, body: &str) -> Script {
    let body = format!("{}\n{body}", include_str!("scripts/holdings.lua"));
    make(&with_helpers(prelude, &body))
}

/// The scripts of `redis://`, `rediss://` and `redis-sentinel://`: every fencing token at least
/// the server's clock in µs (`prelude.lua`).
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts::with_prelude(PRELUDE));

/// The scripts of Redlock's masters: fencing tokens from the counter alone (`prelude.lua` says
/// why).
// Only Redlock uses them.
#[cfg_attr(not(feature = "redlock"), allow(dead_code))]
pub(crate) static COUNTER_SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    const CLOCK: &str = "local FENCE_FOLLOWS_CLOCK = true\n";
    assert!(
        PRELUDE.contains(CLOCK),
        "prelude.lua names FENCE_FOLLOWS_CLOCK"
    );
    Scripts::with_prelude(&PRELUDE.replacen(CLOCK, "local FENCE_FOLLOWS_CLOCK = false\n", 1))
});

impl Scripts {
    fn with_prelude(prelude: &str) -> Scripts {
        Self::made(prelude, &mut |text| Script::new(text))
    }

    fn made(prelude: &str, make: &mut Make) -> Scripts {
        Scripts {
            mutex: Ops::new(
                make,
                prelude,
                include_str!("scripts/acquire.lua"),
                include_str!("scripts/extend.lua"),
                include_str!("scripts/release.lua"),
            ),
            fair: Ops::new(
                make,
                prelude,
                include_str!("scripts/fair_acquire.lua"),
                include_str!("scripts/fair_extend.lua"),
                include_str!("scripts/fair_release.lua"),
            ),
            rw: Ops::new(
                make,
                prelude,
                include_str!("scripts/rw_acquire.lua"),
                include_str!("scripts/rw_extend.lua"),
                include_str!("scripts/rw_release.lua"),
            ),
            sem: Ops::new(
                make,
                prelude,
                include_str!("scripts/sem_acquire.lua"),
                include_str!("scripts/sem_extend.lua"),
                include_str!("scripts/sem_release.lua"),
            ),
            extend_many: make(&with_helpers(
                prelude,
                include_str!("scripts/extend_many.lua"),
            )),
            fair_abandon: make(&with_helpers(
                prelude,
                include_str!("scripts/fair_abandon.lua"),
            )),
            rw_abandon: make(&with_helpers(
                prelude,
                include_str!("scripts/rw_abandon.lua"),
            )),
            sem_available: make(&with_helpers(
                prelude,
                include_str!("scripts/sem_available.lua"),
            )),
            sem_set_permits: make(&with_helpers(
                prelude,
                include_str!("scripts/sem_set_permits.lua"),
            )),
            status: inspecting(make, prelude, include_str!("scripts/status.lua")),
            force_release: inspecting(make, prelude, include_str!("scripts/force_release.lua")),
            elect_write: make(include_str!("scripts/elect_write.lua")),
            elect_read: make(include_str!("scripts/elect_read.lua")),
            latch: make(include_str!("scripts/latch.lua")),
        }
    }
}

/// Redis Cluster's scripts: each script of [`SCRIPTS`], by its hash, with every `PUBLISH` made an `SPUBLISH` (sharded pub/sub: the message goes to the
/// lock's shard, its master and replicas, not to every node of the cluster; its channel carries
/// the lock's hash tag, so it is in the slot of the script's keys). Scripts without a `PUBLISH`
/// are there unchanged.
pub(crate) static SHARDED: LazyLock<HashMap<String, Script>> = LazyLock::new(|| {
    let mut sharded = HashMap::new();
    let mut make = |text: &str| {
        let script = Script::new(text);
        let spublish = text.replace("redis.call('PUBLISH',", "redis.call('SPUBLISH',");
        sharded.insert(script.get_hash().to_string(), Script::new(&spublish));
        script
    };
    Scripts::made(PRELUDE, &mut make);
    sharded
});

#[cfg(test)]
mod tests {
    use super::with_helpers;

    const PRELUDE: &str = "local LIMIT = 3\n\
                           local function a()\n  return 1\nend\n\
                           local function b(x)\n  return a() + x\nend\n\
                           local function c()\n  return 2\nend\n";

    #[test]
    fn a_script_gets_only_the_helpers_it_calls_and_theirs() {
        let only_c = with_helpers(PRELUDE, "return c()");
        assert!(only_c.starts_with("local LIMIT = 3"));
        assert!(only_c.contains("local function c()"));
        assert!(!only_c.contains("local function a()") && !only_c.contains("local function b("));

        let b_and_a = with_helpers(PRELUDE, "return b(LIMIT)");
        let (a, b) = (b_and_a.find("function a()"), b_and_a.find("function b("));
        assert!(a.is_some() && b.is_some() && a < b, "{b_and_a}");
        assert!(!b_and_a.contains("function c()"));

        let none = with_helpers(PRELUDE, "return LIMIT");
        assert!(!none.contains("local function"));
        assert!(none.ends_with("\nreturn LIMIT"));
    }
}

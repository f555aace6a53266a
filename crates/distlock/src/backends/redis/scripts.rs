//! The Lua scripts, one set per flavour. Each lives in `scripts/` with `prelude.lua` (server
//! clock, fencing counter, holding check) put in front.
//!
//! Argument order is the same for every flavour's extend (`owner, lease ms, token[, mode]`) and
//! release (`owner, channel, token or '', [mode]`), so those calls are written once.

use std::sync::LazyLock;

use ::redis::Script;

use crate::types::LockKind;

/// One flavour's take, renew and release.
pub(crate) struct Ops {
    pub(crate) acquire: Script,
    pub(crate) extend: Script,
    pub(crate) release: Script,
}

pub(crate) struct Scripts {
    mutex: Ops,
    fair: Ops,
    rw: Ops,
    sem: Ops,
    pub(super) fair_abandon: Script,
    pub(super) rw_abandon: Script,
    pub(super) sem_available: Script,
    /// Every flavour's, after `holdings.lua` (for Redlock's masters too).
    pub(crate) status: Script,
    pub(crate) force_release: Script,
}

impl Scripts {
    pub(crate) fn ops(&self, kind: LockKind) -> &Ops {
        match kind {
            LockKind::Fair => &self.fair,
            LockKind::Read | LockKind::Write => &self.rw,
            LockKind::Permit { .. } => &self.sem,
            _ => &self.mutex,
        }
    }
}

/// `body` with `prelude.lua` put in front (for Redlock's own script too).
pub(crate) fn script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("scripts/prelude.lua")))
}

/// `body` with `prelude.lua` and `holdings.lua` put in front.
fn inspecting(body: &str) -> Script {
    script(&format!("{}\n{body}", include_str!("scripts/holdings.lua")))
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    mutex: Ops {
        acquire: script(include_str!("scripts/acquire.lua")),
        extend: script(include_str!("scripts/extend.lua")),
        release: script(include_str!("scripts/release.lua")),
    },
    fair: Ops {
        acquire: script(include_str!("scripts/fair_acquire.lua")),
        extend: script(include_str!("scripts/fair_extend.lua")),
        release: script(include_str!("scripts/fair_release.lua")),
    },
    rw: Ops {
        acquire: script(include_str!("scripts/rw_acquire.lua")),
        extend: script(include_str!("scripts/rw_extend.lua")),
        release: script(include_str!("scripts/rw_release.lua")),
    },
    sem: Ops {
        acquire: script(include_str!("scripts/sem_acquire.lua")),
        extend: script(include_str!("scripts/sem_extend.lua")),
        release: script(include_str!("scripts/sem_release.lua")),
    },
    fair_abandon: script(include_str!("scripts/fair_abandon.lua")),
    rw_abandon: script(include_str!("scripts/rw_abandon.lua")),
    sem_available: script(include_str!("scripts/sem_available.lua")),
    status: inspecting(include_str!("scripts/status.lua")),
    force_release: inspecting(include_str!("scripts/force_release.lua")),
});

/// The fenced write of [`crate::fence::RedisFence`]: on the caller's connection, no prelude.
pub(crate) static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fence_write.lua")));

//! Each lock kind's way through Redis, in one table: the scripts it runs, the arguments its take
//! and release scripts get (in their order), and the shape of its take's answer. A call looks
//! its kind up once ([`Flavour::of`]) and reads the row; nothing else decides by kind.
//!
//! Every flavour's extend takes `owner, lease ms, token, mode` (the scripts that have no sides
//! ignore the mode), so that call needs no row of its own beyond `mode`.

use std::borrow::Cow;

use super::WAITER_TTL;
use super::keys::Keys;
use super::scripts::{Ops, Scripts};
use crate::backend::LockRequest;
use crate::status::Holder;
use crate::types::LockKind;

/// What a take script answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// One number (`acquire.lua`): the token when taken, else −1 − the ms the holder's lease has
    /// left. A pair costs the server a table per take, and this is the hot path.
    Number,
    /// `{1, token}` taken, `{0, ms left}` held, `{2, size}` a semaphore whose kept size is not
    /// the one asked.
    Pair,
}

/// How a release script is told which holding to free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Release {
    /// One argument, `owner:token` (`owner:` for whichever it has): the exclusive lock's value
    /// starts with it, so the script compares one prefix.
    Holding,
    /// `owner, channel, token or '', mode`.
    Parts,
}

/// One argument of a take script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    Owner,
    /// The lease in ms.
    Lease,
    /// `read` or `write`: the side of a read-write lock.
    Mode,
    /// How long a queued waiter's entry lives without the waiter asking again, in ms.
    WaiterTtl,
    /// Where the lock's releases are announced.
    Channel,
    /// `1` if the fair waiter already holds a place in line (its turns are being watched).
    InLine,
    /// [`Holder::this_process_record`], stored beside the holding for `status`.
    Record,
    /// The semaphore's size.
    Permits,
    /// `1` if the taker follows a resize of the semaphore ([`LockRequest::follows_resize`]).
    FollowsResize,
}

/// One lock kind's row.
pub(crate) struct Flavour {
    /// Its take, extend and release scripts, from a script set (the plain servers' or Redlock's
    /// masters').
    pub(crate) ops: fn(&Scripts) -> &Ops,
    pub(crate) answer: Answer,
    pub(crate) release: Release,
    /// The side of a read-write lock; `write` for the flavours without sides.
    pub(crate) mode: &'static str,
    /// What a take is, in errors.
    pub(crate) taking: &'static str,
    take: &'static [Arg],
}

const LOCK: Flavour = Flavour {
    ops: Scripts::mutex,
    answer: Answer::Number,
    release: Release::Holding,
    mode: "write",
    taking: "taking the lock",
    take: &[Arg::Owner, Arg::Lease, Arg::Record],
};

const FAIR: Flavour = Flavour {
    ops: Scripts::fair,
    answer: Answer::Pair,
    release: Release::Parts,
    mode: "write",
    taking: "taking a fair lock",
    take: &[
        Arg::Owner,
        Arg::Lease,
        Arg::WaiterTtl,
        Arg::Channel,
        Arg::InLine,
        Arg::Record,
    ],
};

const READ: Flavour = Flavour {
    mode: "read",
    ..WRITE
};

const WRITE: Flavour = Flavour {
    ops: Scripts::rw,
    answer: Answer::Pair,
    release: Release::Parts,
    mode: "write",
    taking: "taking a read-write lock",
    take: &[
        Arg::Owner,
        Arg::Lease,
        Arg::Mode,
        Arg::WaiterTtl,
        Arg::Record,
    ],
};

const PERMIT: Flavour = Flavour {
    ops: Scripts::sem,
    answer: Answer::Pair,
    release: Release::Parts,
    mode: "write",
    taking: "taking a semaphore permit",
    take: &[
        Arg::Owner,
        Arg::Lease,
        Arg::Permits,
        Arg::Record,
        Arg::FollowsResize,
    ],
};

impl Flavour {
    /// The row of `kind`.
    pub(crate) fn of(kind: LockKind) -> &'static Flavour {
        match kind {
            LockKind::Fair => &FAIR,
            LockKind::Read => &READ,
            LockKind::Write => &WRITE,
            LockKind::Permit { .. } => &PERMIT,
            _ => &LOCK,
        }
    }

    /// The take script's arguments for `req` (its keys `keys`), in order. `in_line`: a fair
    /// waiter's place in line is held (a one-off attempt never joins the line).
    pub(crate) fn take_args<'a>(
        &self,
        req: &'a LockRequest,
        keys: &Keys,
        in_line: bool,
    ) -> Vec<Cow<'a, str>> {
        self.take
            .iter()
            .map(|arg| match arg {
                Arg::Owner => Cow::Borrowed(req.owner.as_str()),
                Arg::Lease => Cow::Owned(req.lease.as_millis().to_string()),
                Arg::Mode => Cow::Borrowed(self.mode),
                Arg::WaiterTtl => Cow::Owned(WAITER_TTL.as_millis().to_string()),
                Arg::Channel => Cow::Owned(keys.channel()),
                Arg::InLine => Cow::Borrowed(if in_line { "1" } else { "0" }),
                // A static string, so nothing is built per call.
                Arg::Record => Cow::Borrowed(Holder::this_process_record()),
                Arg::Permits => Cow::Owned(match req.kind {
                    LockKind::Permit { permits } => permits.to_string(),
                    _ => String::new(),
                }),
                Arg::FollowsResize => Cow::Borrowed(if req.follows_resize { "1" } else { "" }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_the_row_of_its_scripts() {
        let scripts = &*super::super::scripts::SCRIPTS;
        let hash = |kind| (Flavour::of(kind).ops)(scripts).acquire.get_hash();
        assert_eq!(Flavour::of(LockKind::Mutex).answer, Answer::Number);
        assert_eq!(Flavour::of(LockKind::Mutex).release, Release::Holding);
        assert_eq!(hash(LockKind::Read), hash(LockKind::Write));
        assert_eq!(Flavour::of(LockKind::Read).mode, "read");
        assert_eq!(Flavour::of(LockKind::Write).mode, "write");
        let distinct: std::collections::HashSet<_> = [
            LockKind::Mutex,
            LockKind::Fair,
            LockKind::Write,
            LockKind::Permit { permits: 2 },
        ]
        .into_iter()
        .map(hash)
        .collect();
        assert_eq!(distinct.len(), 4, "each family runs its own scripts");
    }
}

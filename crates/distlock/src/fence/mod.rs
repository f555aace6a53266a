//! Fencing where the write lands: make a resource refuse a write whose fencing token is not
//! above the last one it accepted, in the same atomic step as the write.
//!
//! A lease cannot stop a holder that was paused (GC, SIGSTOP, swap, a slow disk) past its lease:
//! it resumes still believing it holds the lock and writes after the next holder. Every
//! [`Guard`](crate::Guard) carries a [`FencingToken`] that strictly increases per lock name;
//! these helpers make the store that is written to compare it, so the late write is refused
//! with [`ErrorKind::StaleToken`] instead of landing.
//!
//! | store | helper | the fence lives | atomic with the write by |
//! |---|---|---|---|
//! | PostgreSQL, MySQL/MariaDB, SQLite (sqlx) | [`SqlFence::check`] | a row per resource in `distlock_fences` | the caller's transaction: the fence row stays locked until it commits |
//! | the same, one statement | [`SqlFence::update`] | a column of the caller's own row | the statement's own `WHERE fence < token` |
//! | Redis | [`RedisFence`] (`set`, `hset`, `incr_by`) | a key per resource (`distlock:fence:<resource>`) | one Lua script: compare, write, raise the fence |
//!
//! Rules of use:
//! * One resource, one fence, one lock name: the tokens compared must come from one lock name
//!   (tokens of different names are not ordered).
//! * Accepted means *above*: a token equal to the last accepted one is refused too, so one
//!   holding writes once per check. Check once per transaction, which may hold many writes.
//! * A refused writer must stop: a newer holder has written. Its transaction should roll back.
//! * Read what you write back inside the checked transaction, after [`SqlFence::check`]. A
//!   fence shows a newer holder only once that holder has *written*: a stale holder whose
//!   late write lands between a newer holder's read and that holder's write is accepted, and
//!   the newer write then overwrites it from a read that missed it. Inside the checked
//!   transaction the fence row is locked, so the newer holder's check waits for the commit
//!   and reads after it. (The demo's pause scenario reads before its check; its newer holders
//!   read and write within milliseconds of taking the lock, seconds before the stopped holder
//!   resumes.)
//! * Fences are never deleted; a fence that were reset would let an old token in again.
//!
//! Cost: SQL, one `UPDATE` of a primary-key row per transaction (an `INSERT` on a resource's
//! first write), and the fence row is locked until commit, which serializes the writers of one
//! resource — they already are, under the lock. Redis, the write becomes one `EVALSHA` doing a
//! `GET` and a `SET` besides the write.

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite-fence"))]
pub mod sql;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "redis")]
pub use self::redis::RedisFence;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite-fence"))]
pub use self::sql::SqlFence;

use crate::error::{Error, ErrorKind};
use crate::types::FencingToken;

/// The refusal of a write by `token` to `resource`, whose fence is at `last` (when known).
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite-fence",
        feature = "redis"
    )),
    allow(dead_code)
)]
fn stale(backend: &'static str, resource: &str, token: FencingToken, last: Option<u64>) -> Error {
    let last = match last {
        Some(last) => format!(" the last accepted token is {last}"),
        None => " a newer holder has written".to_string(),
    };
    Error::new(
        ErrorKind::StaleToken,
        format!("write to {resource:?} with token {token} refused:{last}"),
    )
    .with_backend(backend)
}

//! Count-down latches in Redis (`scripts/latch.lua`): one key with the count, under the hash tag
//! `{name}`; the count-down that reaches 0 publishes `*` on the latch's channel, which wakes
//! every waiter of this client.

use super::election::tagged;
use super::invoke::Server;
use super::scripts::SCRIPTS;
use crate::backend::Wakeups;
use crate::error::Result;
use crate::types::LockName;

fn key(server: &Server, latch: &LockName) -> String {
    tagged(&server.prefix, "latch", latch)
}

fn channel(server: &Server, latch: &LockName) -> String {
    format!("{}:zero", key(server, latch))
}

/// See [`crate::backend::Latches::latch_set`].
pub(super) async fn set(server: &Server, latch: &LockName, count: u64) -> Result<bool> {
    let count = count.to_string();
    let set: i64 = server
        .run(
            &SCRIPTS.latch,
            &[key(server, latch)],
            &["set", &count],
            "setting the latch",
        )
        .await?;
    Ok(set == 1)
}

/// See [`crate::backend::Latches::latch_count_down`].
pub(super) async fn count_down(server: &Server, latch: &LockName) -> Result<u64> {
    let after: i64 = server
        .run(
            &SCRIPTS.latch,
            &[key(server, latch)],
            &["down", &channel(server, latch)],
            "counting the latch down",
        )
        .await?;
    Ok(after.max(0) as u64)
}

/// See [`crate::backend::Latches::latch_count`].
pub(super) async fn count(server: &Server, latch: &LockName) -> Result<u64> {
    let count: i64 = server
        .run(
            &SCRIPTS.latch,
            &[key(server, latch)],
            &["count"],
            "reading the latch",
        )
        .await?;
    Ok(count.max(0) as u64)
}

/// Wake-ups for the latch reaching 0.
pub(super) async fn watch(server: &Server, latch: &LockName) -> Wakeups {
    server.subscriber.watch(channel(server, latch), None).await
}

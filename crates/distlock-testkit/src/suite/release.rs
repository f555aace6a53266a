//! Release is exact about ownership: it never frees someone else's lock.

use std::time::Duration;

use distlock::{ErrorKind, OwnerToken};

use crate::suite::Ctx;
use crate::{Outcome, check};

pub(super) async fn by_other_is_not_held(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("owned");
    let guard = ctx
        .lock(&name)
        .owner(OwnerToken::random())
        .acquire()
        .await?;
    let stranger = ctx.lock(&name).owner(OwnerToken::random()).release().await;
    check!(
        matches!(&stranger, Err(e) if e.kind() == ErrorKind::NotHeld),
        "release by another owner answered {stranger:?}"
    );
    let other = ctx.contender(&name).try_acquire().await?;
    check!(
        other.is_none(),
        "the lock was freed by a stranger's release"
    );
    check!(guard.release().await?, "the holder lost its lock");
    Ok(())
}

pub(super) async fn double_release_keeps_next_holder(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("twice");
    let first = OwnerToken::random();
    let lock = ctx.lock(&name).owner(first.clone());
    let guard = lock.acquire().await?;
    guard.leak();
    lock.release().await?;
    let next = ctx
        .contender(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    let again = lock.release().await;
    check!(
        matches!(&again, Err(e) if e.kind() == ErrorKind::NotHeld),
        "second release answered {again:?}"
    );
    let third = ctx.contender(&name).try_acquire().await?;
    check!(
        third.is_none(),
        "the second release freed the next holder's lock"
    );
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

pub(super) async fn dropped_guard_releases(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("dropped");
    let guard = ctx.lock(&name).acquire().await?;
    drop(guard);
    // The drop queues the release; a waiter gets the lock long before the 30 s lease ends.
    let next = ctx
        .contender(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

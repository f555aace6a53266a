//! Release is exact about ownership: it never frees someone else's lock.

use std::time::Duration;

use distlock::{ErrorKind, OwnerToken};

use crate::suite::Ctx;
use crate::{Outcome, check, check_above, check_kind, within};

pub(super) async fn by_other_is_not_held(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("owned");
    let guard = ctx
        .lock(&name)
        .owner(OwnerToken::random())
        .acquire()
        .await?;
    let stranger = ctx.lock(&name).owner(OwnerToken::random());
    ctx.check_release_refused(&name, &stranger, "a release by another owner")
        .await?;
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
    let next = ctx.contender_takes(&name, Duration::from_secs(5)).await?;
    ctx.check_release_refused(&name, &lock, "a second release")
        .await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

pub(super) async fn dropped_guard_releases(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("dropped");
    let guard = ctx.lock(&name).acquire().await?;
    drop(guard);
    // The drop queues the release; a waiter gets the lock long before the 30 s lease ends.
    let next = ctx.contender_takes(&name, Duration::from_secs(5)).await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// Release and renewal name the exact holding (its fencing token) in the store itself, not only
/// in the guard: a guard in client A whose holding was freed by owner token and taken again by
/// the same owner in client B neither frees nor renews B's holding.
pub(super) async fn stale_holding_untouched_in_store(ctx: Ctx) -> Outcome {
    let owner = OwnerToken::random();
    let other_client = ctx.connect().await?;
    let in_b = |name: &str| (ctx.flavour.make)(&other_client, name).owner(owner.clone());

    // Release: A's guard is still live by its own clock when B has taken the lock again.
    let name = ctx.unique_name("release");
    let a = ctx.lock(&name).owner(owner.clone()).acquire().await?;
    in_b(&name).release().await?;
    let b = in_b(&name).acquire_timeout(Duration::from_secs(5)).await?;
    let whose = "B's new holding's token";
    check_above(whose, b.fencing_token(), a.fencing_token())?;
    ctx.check_stale_release(&name, a, "A's stale guard").await?;
    check!(b.release().await?, "B's holding was lost");

    // Renewal: A's watchdog renews with its own token, finds its holding gone and reports the
    // loss, while B's holding keeps its lease.
    let name = ctx.unique_name("extend");
    let lease = ctx.lease(Duration::from_millis(600));
    let a = ctx
        .lock(&name)
        .owner(owner.clone())
        .lease(lease)
        .acquire()
        .await?;
    in_b(&name).release().await?;
    let b = in_b(&name).lease(lease).no_watchdog().acquire().await?;
    let not_its_own = "A's watchdog finding the holding it renews is not its own";
    within(lease, a.lost(), not_its_own).await?;
    check!(!b.is_lost(), "B's holding was lost while A renewed");
    ctx.check_taken(&name, "B's holding ended early").await?;
    drop(b);
    Ok(())
}

/// In one client, after the owner's holding was freed by owner token and taken again, the old
/// guard (still live by its clock) neither re-enters nor frees the new holding. Applies to every
/// store, session stores included.
pub(super) async fn old_guard_after_retake_is_inert(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("retaken");
    let lock = ctx.lock(&name).owner(OwnerToken::random());
    let old = lock.acquire().await?;
    lock.release().await?;
    let again = old.reenter().await;
    check_kind(&again, ErrorKind::LeaseLost, "re-entering a freed holding")?;
    let new = lock.acquire_timeout(Duration::from_secs(5)).await?;
    let whose = "the new holding's token";
    check_above(whose, new.fencing_token(), old.fencing_token())?;
    ctx.check_stale_release(&name, old, "the old guard").await?;
    check!(new.release().await?, "the new holding was lost");
    Ok(())
}

/// Every hold of a holding that is gone reports it: an owner holds the lock three times, another
/// client frees the holding by owner token and a third owner takes the lock; each of the three
/// stale guards' releases answers `false` (the bool is how a caller learns that its work may have
/// overlapped another holder's), and none of them touches the new holder's lock.
pub(super) async fn stale_reentrant_holds_report_not_held(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("stale-holds");
    let owner = OwnerToken::random();
    let first = ctx.lock(&name).owner(owner.clone()).acquire().await?;
    let second = first.reenter().await?;
    let third = first.reenter().await?;
    // From another client where the store lets any client free a holding by its owner token
    // (leases), so that only the store can tell the stale guards; a session lock belongs to its
    // own client's connection, so there the owner's own client frees it.
    let leases = ctx.client.backend().capabilities().renews();
    let other_client = if leases {
        ctx.connect().await?
    } else {
        ctx.client.clone()
    };
    (ctx.flavour.make)(&other_client, &name)
        .owner(owner)
        .release()
        .await?;
    let next = (ctx.flavour.contender)(&other_client, &name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    let answers = [
        first.release().await?,
        second.release().await?,
        third.release().await?,
    ];
    check!(
        answers == [false, false, false],
        "the stale guards' releases answered {answers:?} (each should be false: the holding \
         was freed by owner token and another holder has the lock)"
    );
    ctx.check_taken(&name, "a stale guard's release freed the new holder's lock")
        .await?;
    check!(next.release().await?, "the new holder lost its lock");
    Ok(())
}

//! The watchdog keeps a live holder's lock past its lease; without it, the lease ends.

use std::time::{Duration, Instant};

use crate::suite::Ctx;
use crate::suite::support::{check_takes_and_releases, show};
use crate::{Outcome, check, check_above, check_kind, within};

pub(super) async fn keeps_lock_past_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("renewed");
    // 1 s, not 500 ms: a renewal is sent a third of a lease before the one before runs out,
    // and under the suite's own load on 2 cores PostgreSQL's `write` flavour once went 350 ms
    // without one landing (CI, 2026-12-07), as `read` did under load 44 before. The case is
    // about renewal keeping a lock, not about the machine's worst stall.
    let lease = ctx.lease(Duration::from_secs(1));
    let guard = ctx.leased(ctx.lock(&name), lease).acquire().await?;
    let started = Instant::now();
    let mut tries = 0;
    while started.elapsed() < lease * 3 {
        let after = started.elapsed();
        let took = format!("another owner took the lock after {after:?} (lease {lease:?})");
        ctx.check_taken(&name, &took).await?;
        tries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check!(tries > 5, "only {tries} tries in three leases");
    check!(!guard.is_lost(), "lost fired while renewal worked");
    check!(guard.release().await?, "the holder lost its lock");
    Ok(())
}

/// Without the watchdog a holding lasts one lease: `lost()` fires when it ends and the lock is
/// the next holder's — on a session store too, where the client ends its holding in the store
/// then. A store whose holdings end only with their connection (session locks of a SQL store)
/// cannot end one by time, and refuses `no_watchdog` up front with `InvalidLease`.
pub(super) async fn no_watchdog_lease_ends(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("unrenewed");
    let lease = ctx.lease(Duration::from_millis(300));
    let taken = ctx
        .leased(ctx.lock(&name), lease)
        .no_watchdog()
        .acquire()
        .await;
    if !ctx.holdings_end_by_time() {
        check_kind(
            &taken,
            distlock::ErrorKind::InvalidLease,
            "no_watchdog on a store whose holdings end only with their connection",
        )?;
        return Ok(());
    }
    let guard = taken?;
    let lease_ended = format!("lost firing once the {lease:?} lease ended (3 s slack)");
    within(lease + Duration::from_secs(3), guard.lost(), &lease_ended).await?;
    let next = ctx.contender_takes(&name, Duration::from_secs(3)).await?;
    check!(
        !guard.release().await?,
        "release reported holding a lock whose lease ended and was taken"
    );
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// The lease of the cases whose holding must run out.
fn short_lease(ctx: &Ctx) -> Duration {
    ctx.lease(Duration::from_millis(300))
}

/// A lock of a fixed owner, with a short lease and no renewal: it runs out unless re-taken.
fn unrenewed(ctx: &Ctx, name: &str) -> distlock::Lock {
    ctx.lock(name)
        .owner(distlock::OwnerToken::random())
        .lease(short_lease(ctx))
        .no_watchdog()
}

/// Re-entry after the lease ended is refused with `LeaseLost` and takes nothing (the issue: it
/// used to take a fresh holding that the old guard's release then freed).
pub(super) async fn reenter_after_lease_end_is_lost(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("reenter-late");
    let lock = unrenewed(&ctx, &name);
    let guard = lock.acquire().await?;
    tokio::time::sleep(short_lease(&ctx) * 2).await;
    check!(guard.is_lost(), "the guard does not know its lease ended");
    let again = guard.reenter().await;
    check_kind(
        &again,
        distlock::ErrorKind::LeaseLost,
        "re-entry after the lease ended",
    )?;
    let _other = ctx
        .check_free(&name, "the refused re-entry left the lock taken")
        .await?;
    ctx.check_stale_release(&name, guard, "the expired guard")
        .await?;
    Ok(())
}

/// A stale guard of an owner never releases that owner's newer holding (the first
/// defect): same owner, the first lease ends, the owner takes the lock again, then the first
/// guard is released.
pub(super) async fn stale_guard_keeps_newer_holding(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("stale");
    let lock = unrenewed(&ctx, &name);
    let stale = lock.acquire().await?;
    tokio::time::sleep(short_lease(&ctx) * 2).await;
    let fresh = lock.acquire_timeout(Duration::from_secs(5)).await?;
    let whose = "the new holding's token";
    check_above(whose, fresh.fencing_token(), stale.fencing_token())?;
    ctx.check_stale_release(&name, stale, "the stale guard")
        .await?;
    check!(!fresh.is_lost(), "the newer holding reports itself lost");
    check!(fresh.release().await?, "the newer holding was lost");
    Ok(())
}

/// On a session store a lease means what it means elsewhere (a holder that stops, crashed or
/// paused, blocks others at most that long) only if the session ends by then: a lease shorter
/// than the sessions' expiry, or any lease where sessions end only with their connection, is
/// refused with `InvalidLease` naming the bound, never taken and then ignored. A lease as long as
/// the expiry is taken, and so is the lock's default lease.
pub(super) async fn lease_shorter_than_session_is_refused(ctx: Ctx) -> Outcome {
    use distlock::backend::LeaseModel;
    let name = ctx.unique_name("short-lease");
    let expiry = match ctx.client.backend().capabilities().lease {
        LeaseModel::Session { expires_after, .. } => expires_after,
        other => return Err(crate::Failure(format!("not a session store: {other:?}"))),
    };
    let short = expiry.map_or(Duration::from_secs(1), |e| {
        (e / 2).max(Duration::from_millis(10))
    });
    for (lock, what) in [
        (ctx.lock(&name).lease(short), "renewed"),
        (ctx.lock(&name).lease(short).no_watchdog(), "unrenewed"),
    ] {
        let taken = lock.try_acquire().await;
        let Err(e) = &taken else {
            return Err(crate::Failure(format!(
                "a {what} {short:?} lease on a session store (expiry {expiry:?}) gave {taken:?}"
            )));
        };
        check!(
            e.kind() == distlock::ErrorKind::InvalidLease,
            "a {what} {short:?} lease gave {e}"
        );
        // The refusal says what bounds a stopped holder: the expiry, or the connection.
        let names_the_bound = match expiry {
            Some(expiry) => e.to_string().contains(&show(expiry)),
            None => e.to_string().contains("connection"),
        };
        check!(
            names_the_bound,
            "the refusal does not name the bound {expiry:?}: {e}"
        );
    }
    if let Some(expiry) = expiry {
        let expiry_lease = "a lease of the session's expiry";
        check_takes_and_releases(ctx.lock(&name).lease(expiry), expiry_lease).await?;
    }
    check_takes_and_releases(ctx.lock(&name), "the default lease").await
}

/// `max_hold` caps how long a live holder keeps the lock (issue #38 item 5): renewed past its
/// lease until the cap, then not renewed; `lost()` fires no sooner than the cap and within a
/// lease after it (on a session store the client frees the holding at the cap itself), saying
/// the cap ended it; the next holder gets the lock; the old guard's release says it was lost.
pub(super) async fn max_hold_caps_a_live_holder(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("capped");
    let lease = ctx.lease(Duration::from_millis(500));
    let cap = lease * 2;
    let started = Instant::now();
    let guard = ctx
        .leased(ctx.lock(&name), lease)
        .max_hold(cap)
        .acquire()
        .await?;
    tokio::time::sleep(lease * 3 / 2).await;
    check!(
        ctx.contender(&name).try_acquire().await?.is_none() && !guard.is_lost(),
        "the holding was not kept past its {lease:?} lease before its {cap:?} cap"
    );
    let bound = cap + ctx.freed_after_crash_within(lease) + Duration::from_secs(3);
    let capped = format!("lost firing {bound:?} after the take (cap {cap:?}, lease {lease:?})");
    let lost = within(
        bound.saturating_sub(started.elapsed()),
        guard.lost(),
        &capped,
    )
    .await?;
    let at = started.elapsed();
    check!(at >= cap, "lost fired after {at:?}, before the {cap:?} cap");
    check!(
        lost.kind() == distlock::ErrorKind::LeaseLost && lost.to_string().contains("max_hold"),
        "lost said {lost}, not the cap"
    );
    let freed_within = ctx.freed_after_crash_within(lease) + Duration::from_secs(3);
    let next = ctx.contender_takes(&name, freed_within).await?;
    check!(
        !guard.release().await?,
        "release reported holding a lock its cap had ended"
    );
    check!(next.release().await?, "the next holder lost its lock");
    let zero = ctx.lock(&name).max_hold(Duration::ZERO).try_acquire().await;
    check_kind(
        &zero,
        distlock::ErrorKind::InvalidInput,
        "a max_hold of zero",
    )?;
    Ok(())
}

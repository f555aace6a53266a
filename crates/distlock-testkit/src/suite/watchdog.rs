//! The watchdog keeps a live holder's lock past its lease; without it, the lease ends.

use std::time::{Duration, Instant};

use crate::suite::Ctx;
use crate::{Outcome, check};

pub(super) async fn keeps_lock_past_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("renewed");
    let lease = Duration::from_millis(500);
    let guard = ctx.lock(&name).lease(lease).acquire().await?;
    let started = Instant::now();
    let mut tries = 0;
    while started.elapsed() < lease * 3 {
        let other = ctx.contender(&name).try_acquire().await?;
        check!(
            other.is_none(),
            "another owner took the lock after {:?} (lease {lease:?})",
            started.elapsed()
        );
        tries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check!(tries > 5, "only {tries} tries in three leases");
    check!(!guard.is_lost(), "lost fired while renewal worked");
    check!(guard.release().await?, "the holder lost its lock");
    Ok(())
}

pub(super) async fn no_watchdog_lease_ends(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("unrenewed");
    let lease = Duration::from_millis(300);
    let guard = ctx.lock(&name).lease(lease).no_watchdog().acquire().await?;
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    check!(lost.is_ok(), "lost did not fire after the lease ended");
    let next = ctx
        .contender(&name)
        .acquire_timeout(Duration::from_secs(3))
        .await?;
    check!(
        !guard.release().await?,
        "release reported holding a lock whose lease ended and was taken"
    );
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

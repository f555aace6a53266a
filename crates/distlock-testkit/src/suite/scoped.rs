//! `Lock::run`: the work runs while the lock is held, the lock is free once it returns, and a
//! loss during the work stops the work and is the answer.

use std::time::Duration;

use distlock::ErrorKind;

use crate::suite::Ctx;
use crate::{Outcome, check, check_above, check_kind, within};

pub(super) async fn run_holds_then_frees(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("run");
    let contender = ctx.contender(&name);
    let (token, held_during) = ctx
        .lock(&name)
        .run(async |guard| {
            let other = contender.try_acquire().await;
            (guard.fencing_token(), matches!(other, Ok(None)))
        })
        .await?;
    check!(held_during, "another holder got the lock during run's work");
    let next = contender.try_acquire().await?;
    let Some(next) = next else {
        return Err(crate::Failure(
            "the lock was still held after run returned".into(),
        ));
    };
    check_above("the token after run's", next.fencing_token(), token)?;
    next.release().await?;
    Ok(())
}

pub(super) async fn run_stops_work_when_lost(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("run-lost");
    let lease = ctx.lease(Duration::from_millis(400));
    let lock = ctx.lock(&name).lease(lease).no_watchdog();
    let work = lock.run(async |_| {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    });
    let stopped = format!("run's work stopping once its lease of {lease:?} ended");
    let ran = within(lease + Duration::from_secs(10), work, &stopped).await?;
    check_kind(
        &ran,
        ErrorKind::LeaseLost,
        "run whose lease ended during the work",
    )?;
    Ok(())
}

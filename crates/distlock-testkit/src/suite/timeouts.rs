//! Not waiting, and waiting with a bound.

use std::time::{Duration, Instant};

use distlock::ErrorKind;

use crate::suite::Ctx;
use crate::{Outcome, acquiring, check, joined};

/// How long a released waiter may take to get in.
const TEN_S: Duration = Duration::from_secs(10);

pub(super) async fn try_acquire_on_held_is_none(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("held");
    let held = ctx.lock(&name).acquire().await?;
    let other = ctx.contender(&name).try_acquire().await?;
    check!(other.is_none(), "try_acquire took a held lock: {other:?}");
    check!(held.release().await?, "the holder lost its lock");
    let after = ctx.contender(&name).try_acquire().await?;
    check!(after.is_some(), "try_acquire failed on a released lock");
    Ok(())
}

pub(super) async fn acquire_timeout_times_out(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("held");
    let held = ctx.lock(&name).acquire().await?;
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let outcome = ctx.contender(&name).acquire_timeout(wait).await;
    let waited = started.elapsed();
    match outcome {
        Err(e) if e.kind() == ErrorKind::Timeout => {}
        other => return Err(crate::Failure(format!("expected a timeout, got {other:?}"))),
    }
    check!(waited >= wait, "gave up early, after {waited:?}");
    check!(
        waited < wait + Duration::from_secs(2),
        "gave up late, after {waited:?}"
    );
    check!(held.release().await?, "the holder lost its lock");
    Ok(())
}

/// A wait longer than the clock can represent (`Duration::MAX`, `u64::MAX` seconds) is a wait
/// without end: it neither panics nor gives up, on a free lock, a held one and a multi-lock.
pub(super) async fn huge_waits_wait_forever(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("forever");
    let free = ctx.lock(&name).acquire_timeout(Duration::MAX).await?;
    check!(free.release().await?, "the holder lost its lock");

    let held = ctx.contender(&name).acquire().await?;
    let waiter = acquiring(ctx.lock(&name), Duration::from_secs(u64::MAX));
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !waiter.is_finished(),
        "a wait without end ended while the lock was held: {:?}",
        waiter.await
    );
    check!(held.release().await?, "the holder lost its lock");
    let got = joined(TEN_S, waiter, "the waiter getting the released lock").await??;
    check!(got.release().await?, "the waiter lost its lock");

    let names = [ctx.unique_name("multi-a"), ctx.unique_name("multi-b")];
    let all = ctx
        .client
        .multi_lock(&names)
        .acquire_timeout(Duration::MAX)
        .await?;
    check!(all.release().await?, "the multi-lock lost a lock");

    // A multi-lock whose second lock is held waits for it, without end.
    let held = ctx.client.lock(&names[1]).acquire().await?;
    let waiter = tokio::spawn({
        let multi = ctx.client.multi_lock(&names);
        async move { multi.acquire_timeout(Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !waiter.is_finished(),
        "a multi-lock wait without end ended while a lock was held: {:?}",
        waiter.await.map(|r| r.map(|g| g.fencing_tokens()))
    );
    check!(held.release().await?, "the holder lost its lock");
    let all = joined(TEN_S, waiter, "the multi-lock waiter getting the locks").await??;
    check!(all.release().await?, "the multi-lock lost a lock");
    Ok(())
}

//! Not waiting, and waiting with a bound.

use std::time::{Duration, Instant};

use distlock::ErrorKind;

use crate::suite::Ctx;
use crate::{Outcome, check};

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

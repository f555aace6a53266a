//! A holder paused (SIGSTOP) past its lease (or its session's expiry): the next holder gets a larger fencing token, the
//! paused one learns it lost the lock when it resumes, and a resource that checks tokens refuses
//! its late write.

use std::time::Duration;

use crate::child::ChildProcess;
use crate::suite::Ctx;
use crate::suite::fenced_holder::FencedHolder;
use crate::{Failure, Outcome, check, check_above};

/// How long the holder process may take to answer a command.
const TEN_S: Duration = Duration::from_secs(10);

pub(super) async fn paused_holder_is_fenced(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("paused");
    let lease = ctx.lease(Duration::from_millis(600));
    let mut holder = FencedHolder::start(&ctx, &name, lease).await?;
    let paused_token = holder.token;

    let paused_for = ctx.freed_after_crash_within(lease) + Duration::from_millis(400);
    let next = taken_from_paused(&ctx, &name, &holder.process, paused_for).await?;
    let next_token = next.fencing_token().get();
    let whose = "the next holder's token, after the paused holder's";
    check_above(whose, next_token, paused_token)?;
    check!(
        holder.resource.write(next_token)?,
        "the next holder's write was refused"
    );

    holder.process.signal(libc::SIGCONT)?;
    let lost = holder.process.ask("lost 3000", TEN_S).await?;
    check!(
        lost["lost"] == true,
        "the paused holder's lost() did not fire after it resumed: {lost}"
    );
    let late_write = holder.write().await?;
    check!(
        late_write["accepted"] == false,
        "the resource accepted the paused holder's stale write: {late_write}"
    );
    release_paused(holder.process).await?;
    ctx.check_taken(
        &name,
        "the paused holder's release freed the next holder's lock",
    )
    .await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// A holder process paused past its lease knows it lost the lock the moment it resumes, from its
/// own clock: the first `is_lost()` after SIGCONT is already true and `lost()` is ready, before
/// any round trip to the store (the issue: one stale write got through in that window).
pub(super) async fn resumed_holder_knows_at_once(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("resumed");
    let lease = ctx.lease(Duration::from_millis(800));
    let (mut holder, _) = ctx.holder_process(&name, lease).await?;
    let before = holder.ask("check", TEN_S).await?;
    check!(
        before["is_lost"] == false && before["lost_ready"] == false,
        "a renewed holder reports itself lost: {before}"
    );
    let paused_for = ctx.freed_after_crash_within(lease) + lease * 2;
    let next = taken_from_paused(&ctx, &name, &holder, paused_for).await?;
    holder.signal(libc::SIGCONT)?;
    let after = holder.ask("check", TEN_S).await?;
    check!(
        after["is_lost"] == true && after["lost_ready"] == true,
        "right after resuming, the paused holder does not know it lost the lock: {after}"
    );
    release_paused(holder).await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// Pauses `holder` (SIGSTOP) for `paused_for`, past its lease, then has a contender take lock
/// `name` within 10 s. The holder stays paused, but is resumed if the take fails, so a failure
/// does not leave a stopped process.
async fn taken_from_paused(
    ctx: &Ctx,
    name: &str,
    holder: &ChildProcess,
    paused_for: Duration,
) -> Result<distlock::Guard, Failure> {
    holder.signal(libc::SIGSTOP)?;
    tokio::time::sleep(paused_for).await;
    match ctx.contender_takes(name, TEN_S).await {
        Ok(next) => Ok(next),
        Err(Failure(e)) => {
            holder.signal(libc::SIGCONT)?;
            Err(Failure(format!(
                "the lock of a holder paused past its lease did not free: {e}"
            )))
        }
    }
}

/// Has the resumed holder release its guard, which must not claim the lock, and exit.
async fn release_paused(mut holder: ChildProcess) -> Outcome {
    let released = holder.ask("release", TEN_S).await?;
    check!(
        released["held"] == false,
        "the paused holder's release claimed the lock: {released}"
    );
    holder.finish(TEN_S).await
}

//! A holder paused (SIGSTOP) past its lease (or its session's expiry): the next holder gets a larger fencing token, the
//! paused one learns it lost the lock when it resumes, and a resource that checks tokens refuses
//! its late write.

use std::time::Duration;

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::suite::fenced_holder::FencedHolder;
use crate::{Outcome, check};

pub(super) async fn paused_holder_is_fenced(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("paused");
    let lease = ctx.lease(Duration::from_millis(600));
    let mut holder = FencedHolder::start(&ctx, &name, lease).await?;
    let paused_token = holder.token;

    holder.process.signal(libc::SIGSTOP)?;
    tokio::time::sleep(ctx.freed_after_crash_within(lease) + Duration::from_millis(400)).await;
    let next = ctx
        .contender(&name)
        .acquire_timeout(Duration::from_secs(10))
        .await;
    // Resume the holder whatever happened, so a failure does not leave a stopped process.
    let next = match next {
        Ok(g) => g,
        Err(e) => {
            holder.process.signal(libc::SIGCONT)?;
            return Err(crate::Failure(format!(
                "the lock of a holder paused past its lease did not free: {e}"
            )));
        }
    };
    let next_token = next.fencing_token().get();
    check!(
        next_token > paused_token,
        "the next holder's token {next_token} is not above the paused holder's {paused_token}"
    );
    check!(
        holder.resource.write(next_token)?,
        "the next holder's write was refused"
    );

    holder.process.signal(libc::SIGCONT)?;
    holder.process.send("lost 3000").await?;
    let lost = holder.process.event(Duration::from_secs(10)).await?;
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
    let other = ctx.contender(&name).try_acquire().await?;
    check!(
        other.is_none(),
        "the paused holder's release freed the next holder's lock"
    );
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// A holder process paused past its lease knows it lost the lock the moment it resumes, from its
/// own clock: the first `is_lost()` after SIGCONT is already true and `lost()` is ready, before
/// any round trip to the store (the issue: one stale write got through in that window).
pub(super) async fn resumed_holder_knows_at_once(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("resumed");
    let lease = ctx.lease(Duration::from_millis(800));
    let mut holder = ChildProcess::spawn(&ctx.spec(Role::Hold {
        name: name.clone(),
        lease_ms: lease.as_millis() as u64,
    }))?;
    holder.event(Duration::from_secs(30)).await?;
    holder.send("check").await?;
    let before = holder.event(Duration::from_secs(10)).await?;
    check!(
        before["is_lost"] == false && before["lost_ready"] == false,
        "a renewed holder reports itself lost: {before}"
    );
    holder.signal(libc::SIGSTOP)?;
    tokio::time::sleep(ctx.freed_after_crash_within(lease) + lease * 2).await;
    let next = ctx
        .contender(&name)
        .acquire_timeout(Duration::from_secs(10))
        .await;
    holder.signal(libc::SIGCONT)?;
    let next = next.map_err(|e| {
        crate::Failure(format!(
            "the lock of a holder paused past its lease did not free: {e}"
        ))
    })?;
    holder.send("check").await?;
    let after = holder.event(Duration::from_secs(10)).await?;
    check!(
        after["is_lost"] == true && after["lost_ready"] == true,
        "right after resuming, the paused holder does not know it lost the lock: {after}"
    );
    release_paused(holder).await?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// Has the resumed holder release its guard, which must not claim the lock, and exit.
async fn release_paused(mut holder: ChildProcess) -> Outcome {
    holder.send("release").await?;
    let released = holder.event(Duration::from_secs(10)).await?;
    check!(
        released["held"] == false,
        "the paused holder's release claimed the lock: {released}"
    );
    holder.finish(Duration::from_secs(10)).await
}

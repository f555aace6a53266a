//! A process that returns from `main` with a guard dropped but not released (an early return or
//! `?`, a task that panicked, a plain thread) frees the lock before it exits, without calling
//! `Client::shutdown`: the next holder does not wait for the lease (30 s by default).

use std::time::{Duration, Instant};

use crate::child::{ChildProcess, DropPath, Role};
use crate::suite::Ctx;
use crate::{Outcome, check, check_above};

/// How soon after the holder's exit the lock must be free: the release's round trip and the
/// waiter's wake-up, with room for a loaded machine, far below the default lease.
const FREED_WITHIN: Duration = Duration::from_secs(2);

pub(super) async fn dropped_guard_freed_before_exit(ctx: Ctx) -> Outcome {
    for how in [
        DropPath::EarlyReturn,
        DropPath::PanickedTask,
        DropPath::PlainThread,
    ] {
        let name = ctx.unique_name(&format!("{how:?}"));
        let mut holder = ChildProcess::spawn(&ctx.spec(Role::DropAndExit {
            name: name.clone(),
            how,
        }))?;
        let event = holder.event(Duration::from_secs(30)).await?;
        let old_token = event["token"].as_u64().unwrap_or(u64::MAX);
        holder.finish(Duration::from_secs(30)).await?;
        let exited = Instant::now();
        let next = ctx
            .contender(&name)
            .acquire_timeout(FREED_WITHIN + Duration::from_secs(8))
            .await;
        let waited = exited.elapsed();
        let next = next.map_err(|e| {
            crate::Failure(format!(
                "{how:?}: the lock of a holder that returned from main was still held \
                 {waited:?} after it exited: {e}"
            ))
        })?;
        check!(
            waited <= FREED_WITHIN,
            "{how:?}: the lock of a holder that returned from main freed only {waited:?} after \
             it exited (bound {FREED_WITHIN:?})"
        );
        let token = next.fencing_token().get();
        let whose = format!("{how:?}: the token after the exited holder's");
        check_above(&whose, token, old_token)?;
        next.release().await?;
    }
    Ok(())
}

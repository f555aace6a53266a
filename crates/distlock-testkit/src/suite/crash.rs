//! A holder process killed with SIGKILL: its lock frees within the lease (plus a second); on a
//! store whose sessions outlive the client by a TTL, within that TTL.

use std::time::{Duration, Instant};

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::{Outcome, check};

pub(super) async fn killed_holder_frees_within_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("crash");
    let lease = Duration::from_secs(1);
    let mut holder = ChildProcess::spawn(&ctx.spec(Role::Hold {
        name: name.clone(),
        lease_ms: lease.as_millis() as u64,
    }))?;
    let event = holder.event(Duration::from_secs(30)).await?;
    let old_token = event["token"].as_u64().unwrap_or(u64::MAX);
    holder.signal(libc::SIGKILL)?;
    let killed = Instant::now();
    let guard = ctx
        .contender(&name)
        .acquire_timeout(ctx.freed_after_crash_within(lease) + Duration::from_secs(5))
        .await?;
    let waited = killed.elapsed();
    let bound = ctx.freed_after_crash_within(lease);
    check!(
        waited <= bound + Duration::from_secs(1),
        "the lock of a killed holder freed only after {waited:?} (bound {bound:?})"
    );
    check!(
        guard.fencing_token().get() > old_token,
        "token {} after a crashed holder's {old_token}",
        guard.fencing_token()
    );
    guard.release().await?;
    Ok(())
}

//! A holder process killed with SIGKILL: its lock frees within the lease (plus a second); on a
//! store whose sessions outlive the client by a TTL, within that TTL.

use std::time::{Duration, Instant};

use crate::suite::Ctx;
use crate::{Outcome, check, check_above};

pub(super) async fn killed_holder_frees_within_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("crash");
    let lease = Duration::from_secs(1);
    let (holder, old_token) = ctx.holder_process(&name, lease).await?;
    holder.signal(libc::SIGKILL)?;
    let killed = Instant::now();
    let bound = ctx.freed_after_crash_within(lease);
    let guard = ctx
        .contender_takes(&name, bound + Duration::from_secs(5))
        .await?;
    let waited = killed.elapsed();
    check!(
        waited <= bound + Duration::from_secs(1),
        "the lock of a killed holder freed only after {waited:?} (bound {bound:?})"
    );
    let token = guard.fencing_token().get();
    check_above("the token after a crashed holder's", token, old_token)?;
    guard.release().await?;
    Ok(())
}

//! The steps the cases share: a contender that takes the lock or finds it taken, a release that
//! must free nothing, a holder in a process of its own.

use std::time::Duration;

use distlock::{ErrorKind, Guard, Lock};

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::{Failure, Outcome, check, check_kind};

/// A duration as distlock's messages write it (`3s`, `1500ms`).
pub(super) fn show(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Takes `lock`, which must be free and accept its lease, and releases it, which must find the
/// holding still there; `what` names the lease in failures ("the server's minimum lease").
pub(super) async fn check_takes_and_releases(lock: Lock, what: &str) -> Outcome {
    let Some(guard) = lock.try_acquire().await? else {
        return Err(Failure(format!("{what} was not taken on a free lock")));
    };
    check!(guard.release().await?, "{what}'s holding was lost");
    Ok(())
}

impl Ctx {
    /// A contender's hold of lock `name`, taken within `within`.
    pub async fn contender_takes(&self, name: &str, within: Duration) -> Result<Guard, Failure> {
        Ok(self.contender(name).acquire_timeout(within).await?)
    }

    /// Fails saying `what` happened unless a contender finds lock `name` taken.
    pub async fn check_taken(&self, name: &str, what: &str) -> Outcome {
        crate::check_taken(&self.contender(name), what).await
    }

    /// A contender's hold of lock `name`, which must be free: fails saying `what` happened if
    /// it is taken.
    pub async fn check_free(&self, name: &str, what: &str) -> Result<Guard, Failure> {
        self.contender(name)
            .try_acquire()
            .await?
            .ok_or_else(|| Failure(what.to_string()))
    }

    /// Releases `stale`, a guard whose holding is gone while another holds lock `name`: the
    /// release must answer that it held nothing (`false`) and leave the lock taken. `whose`
    /// names the guard in failures ("the expired guard").
    pub async fn check_stale_release(&self, name: &str, stale: Guard, whose: &str) -> Outcome {
        check!(
            !stale.release().await?,
            "{whose}'s release reported holding the lock"
        );
        let freed = format!("{whose}'s release freed the lock of the holder after it");
        self.check_taken(name, &freed).await
    }

    /// A release through `lock`, whose owner holds nothing of lock `name` (a stranger, a second
    /// release), is refused as `NotHeld` and leaves the lock taken by its holder; `what` names
    /// the release in failures.
    pub async fn check_release_refused(&self, name: &str, lock: &Lock, what: &str) -> Outcome {
        let answer = lock.release().await;
        check_kind(&answer, ErrorKind::NotHeld, what)?;
        self.check_taken(name, &format!("{what} freed the lock its holder holds"))
            .await
    }

    /// A child process holding lock `name` with `lease` ([`Role::Hold`]: it obeys the commands
    /// there), once it has reported its holding, and the holding's fencing token.
    pub async fn holder_process(
        &self,
        name: &str,
        lease: Duration,
    ) -> Result<(ChildProcess, u64), Failure> {
        let mut holder = ChildProcess::spawn(&self.spec(Role::Hold {
            name: name.to_owned(),
            lease_ms: lease.as_millis() as u64,
        }))?;
        let acquired = holder.event(Duration::from_secs(30)).await?;
        Ok((holder, acquired["token"].as_u64().unwrap_or(u64::MAX)))
    }
}

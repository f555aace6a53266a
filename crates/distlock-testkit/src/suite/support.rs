//! The steps the cases share: a contender that takes the lock or finds it taken, a holder in a
//! process of its own.

use std::time::Duration;

use distlock::Guard;

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::{Failure, Outcome};

impl Ctx {
    /// A contender's hold of lock `name`, taken within `within`.
    pub async fn contender_takes(&self, name: &str, within: Duration) -> Result<Guard, Failure> {
        Ok(self.contender(name).acquire_timeout(within).await?)
    }

    /// Fails saying `what` happened unless a contender finds lock `name` taken.
    pub async fn check_taken(&self, name: &str, what: &str) -> Outcome {
        match self.contender(name).try_acquire().await? {
            None => Ok(()),
            Some(_) => Err(Failure(what.to_string())),
        }
    }

    /// A contender's hold of lock `name`, which must be free: fails saying `what` happened if
    /// it is taken.
    pub async fn check_free(&self, name: &str, what: &str) -> Result<Guard, Failure> {
        self.contender(name)
            .try_acquire()
            .await?
            .ok_or_else(|| Failure(what.to_string()))
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

//! Private Redlock masters: n independent private redis-servers, and the `redlock://` URL that
//! names them all.

use super::{Persistence, PrivateServer, PrivateStore, loopback_hosts, start_redis};
use crate::Failure;

/// `n` private Redis masters (each on its own free port and data directory).
pub struct RedlockMasters {
    /// The masters, in the URL's order; a test may kill, stop or restart any of them.
    pub masters: Vec<PrivateServer>,
}

/// Starts `n` private masters keeping what `persistence` says.
pub fn start_redlock(n: usize, persistence: Persistence) -> Result<RedlockMasters, Failure> {
    let masters = (0..n)
        .map(|_| start_redis(persistence))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RedlockMasters { masters })
}

/// `redlock://127.0.0.1:p1,…` over `ports`.
pub fn redlock_url(ports: impl IntoIterator<Item = u16>) -> String {
    format!("redlock://{}", loopback_hosts(ports))
}

impl PrivateStore for RedlockMasters {
    fn url(&self) -> String {
        redlock_url(self.masters.iter().map(PrivateServer::port))
    }
    fn keeps_data(&self) -> bool {
        self.masters.iter().all(PrivateStore::keeps_data)
    }
    fn stop(&mut self) -> Result<(), Failure> {
        self.masters.iter_mut().try_for_each(PrivateStore::stop)
    }
    fn start_again(&mut self) -> Result<(), Failure> {
        self.masters
            .iter_mut()
            .try_for_each(PrivateStore::start_again)
    }
}

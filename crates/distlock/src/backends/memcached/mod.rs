//! The memcached backend: an exclusive lock from `add`, check-and-set and an `incr` counter.
//! Its guarantees, and what memcached cannot promise, are below.
//!
//! * `config`: the URL (one or more servers; each lock lives on one of them).
//! * `keys`: a lock name → two protocol-safe keys, and the server that holds them.
//! * `conn`: a small connection pool per server and the meta-protocol commands.
//! * `ops`: take, extend and release, each a few of those commands (the algorithm of docs.md).
//!
#![doc = include_str!("docs.md")]

mod config;
mod conn;
mod keys;
mod ops;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{Attempt, Backend, Capabilities, Hold, LockRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::types::{FencingToken, LockName, show_duration};

use conn::{Server, Timeouts};
use keys::Keys;
use ops::{Extend, Release, Take, Taken, value};

const NAME: &str = "memcached";

// Defaults of `Options`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const NOT_SENT_RETRY_FOR: Duration = Duration::from_secs(5);

/// memcached keeps expiries in whole seconds.
const GRANULARITY: Duration = Duration::from_secs(1);
/// Expiries above 30 days are read as absolute Unix times, not durations.
const MAX_RELATIVE_TTL: u64 = 30 * 24 * 3600;

/// Locks in one or more memcached servers. Built by [`crate::connect`] from `memcached://`.
pub struct MemcachedBackend {
    servers: Vec<Arc<Server>>,
    shown_url: String,
}

impl std::fmt::Debug for MemcachedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemcachedBackend")
            .field("url", &self.shown_url)
            .finish()
    }
}

impl MemcachedBackend {
    /// Checks `url`; connections open at the first request (up to `max_connections` per server).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`] (each unset field keeps the default above).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let config = config::parse(url)?;
        let timeouts = Timeouts {
            connect: options.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
            response: options.response_timeout.unwrap_or(RESPONSE_TIMEOUT),
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
        };
        let servers = config
            .servers
            .into_iter()
            .map(|addr| Arc::new(Server::new(addr, config.max_connections, timeouts)))
            .collect();
        Ok(MemcachedBackend {
            servers,
            shown_url: config.redacted,
        })
    }

    fn server(&self, name: &LockName) -> &Server {
        &self.servers[keys::server_of(name, self.servers.len())]
    }
}

/// The expiry that keeps a lease of `lease`, and the validity it promises. memcached's clock
/// ticks once a second, so an item set with `T` seconds lives between `T - 1` and `T`: the lease
/// rounded up to whole seconds, plus one.
fn expiry(req: &LockRequest) -> Result<(u32, Duration)> {
    let secs = req.lease.duration().as_millis().div_ceil(1000) as u64;
    let ttl = secs + 1;
    if secs == 0 || ttl > MAX_RELATIVE_TTL {
        return Err(Error::new(
            ErrorKind::InvalidLease,
            format!(
                "memcached keeps leases of 1 s to 30 days in whole seconds, not {}",
                show_duration(req.lease.duration())
            ),
        )
        .with_backend(NAME));
    }
    Ok((ttl as u32, Duration::from_secs(secs)))
}

#[async_trait]
impl Backend for MemcachedBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases().granularity(GRANULARITY)
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let (ttl, valid_for) = expiry(req)?;
        let take = Take {
            k: Keys::new(&req.name),
            owner: req.owner.as_str(),
            ttl,
        };
        match self.server(&req.name).run("taking the lock", &take).await? {
            Taken::Yes(token) => Ok(Attempt::Acquired {
                token: FencingToken(token),
                hold: Hold::Lease { valid_for },
            }),
            Taken::Held(retry_after) => Ok(Attempt::Held { retry_after }),
        }
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        let (ttl, valid_for) = expiry(req)?;
        let extend = Extend {
            k: Keys::new(&req.name),
            ours: value(req.owner.as_str(), Some(token.get())),
            ttl,
        };
        let extended = self
            .server(&req.name)
            .run("extending the lease", &extend)
            .await?;
        Ok(extended.then_some(valid_for))
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let release = Release {
            k: Keys::new(&req.name),
            owner: req.owner.as_str(),
            token: token.map(FencingToken::get),
        };
        self.server(&req.name)
            .run("releasing the lock", &release)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Lease, LockKind, OwnerToken};

    fn request(lease: Duration) -> LockRequest {
        LockRequest::new(
            LockName::new("x").unwrap(),
            LockKind::Mutex,
            OwnerToken::random(),
            Lease::new(lease).unwrap(),
        )
    }

    #[test]
    fn leases_round_up_to_seconds_plus_the_tick() {
        let ms = Duration::from_millis;
        assert_eq!(expiry(&request(ms(1000))).unwrap(), (2, ms(1000)));
        assert_eq!(expiry(&request(ms(1001))).unwrap(), (3, ms(2000)));
        assert_eq!(expiry(&request(ms(30_000))).unwrap(), (31, ms(30_000)));
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(expiry(&request(day)).unwrap().1, day);
    }
}

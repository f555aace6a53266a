//! The memcached backend: an exclusive lock from `add`, check-and-set and an `incr` counter.
//! Its guarantees, and what memcached cannot promise, are below.
//!
//! * `config`: the URL (one or more servers; each lock lives on one of them).
//! * `keys`: a lock name → two protocol-safe keys, and the server that holds them.
//! * `conn`: a small connection pool per server and the meta-protocol commands.
//! * `ops`: take, extend and release, each a few of those commands (the algorithm of docs.md);
//!   status and forced release (docs.md, "Status and forced release").
//! * `election`, `latch`: election records and count-down latches, each a few check-and-set
//!   steps on the items of one server (docs.md, "Leader election and the count-down latch").
//!
#![doc = include_str!("docs.md")]

mod config;
mod conn;
mod election;
mod keys;
mod latch;
mod ops;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    Attempt, Backend, Capabilities, ElectionEntry, ElectionWrite, Elections, Hold, Inspection,
    Latches, LockRequest,
};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName, show_duration};

use crate::url::redact;
pub use config::MemcachedConfig;
use conn::{Item, Server, Timeouts};
use keys::{ElectionKeys, Keys};
use ops::{Dump, Extend, ForceRelease, Inspect, Release, Take, Taken, value};

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
        Ok(Self::open(
            MemcachedConfig::from_url(url)?,
            options,
            redact(url),
        ))
    }

    /// The servers `config` names, as [`connect_with`](Self::connect_with) for a URL;
    /// connections open at the first request.
    pub async fn connect_config(config: MemcachedConfig, options: &Options) -> Result<Self> {
        let shown = config.shown();
        config.check().map_err(|why| {
            Error::new(ErrorKind::InvalidInput, format!("{shown}: {why}")).with_backend(NAME)
        })?;
        Ok(Self::open(config, options, shown))
    }

    /// The backend of a checked `config`, shown in messages as `shown`.
    fn open(config: MemcachedConfig, options: &Options, shown: String) -> Self {
        let timeouts = Timeouts {
            connect: options.connect_timeout.unwrap_or(CONNECT_TIMEOUT),
            response: options.response_timeout.unwrap_or(RESPONSE_TIMEOUT),
            retry_for: options.retry_for.unwrap_or(NOT_SENT_RETRY_FOR),
        };
        let servers = config
            .addresses()
            .into_iter()
            .map(|addr| Arc::new(Server::new(addr, config.max_connections, timeouts)))
            .collect();
        MemcachedBackend {
            servers,
            shown_url: shown,
        }
    }

    fn server(&self, name: &LockName) -> &Server {
        &self.servers[keys::server_of(name, self.servers.len())]
    }

    /// The status of the lock `name` (none if neither its item nor its counter exists).
    async fn status_of(&self, name: &LockName) -> Result<Option<LockStatus>> {
        let inspect = Inspect { k: Keys::new(name) };
        let (item, counter) = self
            .server(name)
            .run("reading lock status", &inspect)
            .await?;
        if item.is_none() && counter.is_none() {
            return Ok(None);
        }
        let mut status = LockStatus::new(name.as_str(), LockKind::Mutex);
        status.holdings = item.as_ref().and_then(holding).into_iter().collect();
        status.last_token = counter.map(FencingToken);
        Ok(Some(status))
    }

    /// The names of every lock item on every server whose name starts with `prefix`.
    async fn names(&self, prefix: &str) -> Result<Vec<LockName>> {
        let mut names = Vec::new();
        for server in &self.servers {
            let Some(keys) = server.run("listing locks", &Dump).await? else {
                return Err(Error::unsupported(
                    NAME,
                    format!(
                        "a status by prefix (memcached at {} does not know `lru_crawler \
                         metadump`: version 1.4.31 or later, crawler enabled)",
                        server.addr
                    ),
                ));
            };
            names.extend(
                keys.iter()
                    .filter_map(|k| keys::name_of_dumped(k))
                    .filter(|n| n.starts_with(prefix))
                    .filter_map(|n| LockName::new(n).ok()),
            );
        }
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names.dedup_by(|a, b| a.as_str() == b.as_str());
        Ok(names)
    }
}

/// The holding a lock item shows: `None` while its taker draws its token (nothing is granted
/// yet). Its lease left is memcached's whole seconds less the tick the expiry adds (see
/// [`expiry`]).
fn holding(item: &Item) -> Option<Holding> {
    let (_, token) = ops::parse_value(&item.value).ok()?;
    let (since, record) = ops::parse_took(&item.value);
    let left_ms = item.ttl.saturating_sub(1).saturating_mul(1000);
    Some(
        Holding::new(FencingToken(token?))
            .holder_record(record)
            .since_unix_ms(since)
            .lease_left_ms(left_ms),
    )
}

/// The expiry of an election record that must stay live for `ttl`: as a lease's (see
/// [`expiry`]), whole seconds rounded up plus the tick, so it lives at least `ttl`.
fn record_expiry(ttl: Duration) -> Result<u32> {
    let secs = (ttl.as_millis().div_ceil(1000) as u64).max(1);
    let expiry = secs + 1;
    if expiry > MAX_RELATIVE_TTL {
        return Err(Error::new(
            ErrorKind::InvalidLease,
            format!(
                "memcached keeps election records live for up to 30 days, not {}",
                show_duration(ttl)
            ),
        )
        .with_backend(NAME));
    }
    Ok(expiry as u32)
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

    crate::backend::offers!(elections, latches, inspection);
}

#[async_trait]
impl Elections for MemcachedBackend {
    async fn elect_write(&self, write: ElectionWrite<'_>) -> Result<bool> {
        let record = election::Write {
            k: ElectionKeys::new(write.election),
            term: write.term.get(),
            value: write.value,
            ttl: record_expiry(write.ttl)?,
        };
        self.server(write.election)
            .run("writing the election record", &record)
            .await
    }

    async fn elect_current(&self, election: &LockName) -> Result<Option<ElectionEntry>> {
        let current = election::Current {
            k: ElectionKeys::new(election),
        };
        self.server(election)
            .run("reading the election's leader", &current)
            .await
    }

    async fn elect_log(
        &self,
        election: &LockName,
        after: Option<u64>,
    ) -> Result<Vec<ElectionEntry>> {
        let log = election::Log {
            k: ElectionKeys::new(election),
            after,
        };
        self.server(election)
            .run("reading the election's log", &log)
            .await
    }
}

#[async_trait]
impl Latches for MemcachedBackend {
    async fn latch_set(&self, name: &LockName, count: u64) -> Result<bool> {
        let set = latch::Set {
            key: keys::latch(name),
            count,
        };
        self.server(name).run("setting the latch", &set).await
    }

    async fn latch_count_down(&self, name: &LockName) -> Result<u64> {
        let down = latch::CountDown {
            key: keys::latch(name),
        };
        self.server(name)
            .run("counting the latch down", &down)
            .await
    }

    async fn latch_count(&self, name: &LockName) -> Result<u64> {
        let count = latch::Count {
            key: keys::latch(name),
        };
        self.server(name).run("reading the latch", &count).await
    }
}

#[async_trait]
impl Inspection for MemcachedBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        let names = match which {
            Selection::Name(name) => vec![name.clone()],
            Selection::Prefix(prefix) => self.names(prefix).await?,
        };
        let mut all = Vec::new();
        for name in &names {
            all.extend(self.status_of(name).await?);
        }
        Ok(all)
    }

    async fn force_release(&self, name: &LockName, _kind: LockKind) -> Result<ForcedRelease> {
        let force = ForceRelease { k: Keys::new(name) };
        let (item, fence) = self.server(name).run("forcing a release", &force).await?;
        let removed = item.as_ref().and_then(holding).into_iter().collect();
        Ok(ForcedRelease::new(removed, FencingToken(fence)))
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

    #[test]
    fn records_live_at_least_their_ttl() {
        let ms = Duration::from_millis;
        assert_eq!(record_expiry(ms(0)).unwrap(), 2);
        assert_eq!(record_expiry(ms(300)).unwrap(), 2);
        assert_eq!(record_expiry(ms(1000)).unwrap(), 2);
        assert_eq!(record_expiry(ms(2001)).unwrap(), 4);
        let too_long = Duration::from_secs(MAX_RELATIVE_TTL);
        assert_eq!(
            record_expiry(too_long).unwrap_err().kind(),
            ErrorKind::InvalidLease
        );
    }
}

//! The Redis backend: every synchronizer as a few Lua scripts, waiting by pub/sub.
//! See `docs.md` for its guarantees.
//!
//! * Commands from every task of a client share one multiplexed connection (redis-rs
//!   `ConnectionManager`, which also reconnects), so many acquires are pipelined on it instead of
//!   waiting for each other's round trips.
//! * Waiters share one pub/sub connection per client ([`subscriber`]).
//! * Each script lives in `scripts/`, with `prelude.lua` (server clock, fencing counter) put in
//!   front, and runs by SHA-1 (`EVALSHA`), loaded again after `NOSCRIPT` (a restarted server).
//! * All keys of one lock share the hash tag `{name}`, so each script touches one cluster slot.

mod config;
mod subscriber;

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::{FromRedisValue, RedisError, Script};
use async_trait::async_trait;

use crate::backend::{Attempt, Backend, Capabilities, LockRequest, Wakeups};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockKind, LockName};

use subscriber::Subscriber;

const NAME: &str = "redis";

/// How long a fair-lock or waiting-writer entry survives without its waiter asking again: the
/// longest a crashed waiter can hold up the ones behind it.
const WAITER_TTL: Duration = Duration::from_secs(6);
/// How long one command may take before the call fails (the watchdog retries within the lease).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// While the server is unreachable (restarting), requests that surely were not sent are retried
/// this long before the error reaches the caller.
const NOT_SENT_RETRY_FOR: Duration = Duration::from_secs(5);

struct Scripts {
    acquire: Script,
    extend: Script,
    release: Script,
    fair_acquire: Script,
    fair_release: Script,
    fair_abandon: Script,
    sem_acquire: Script,
    sem_extend: Script,
    sem_release: Script,
    sem_available: Script,
    rw_acquire: Script,
    rw_extend: Script,
    rw_release: Script,
    rw_abandon: Script,
}

fn script(body: &str) -> Script {
    Script::new(&format!("{}\n{body}", include_str!("scripts/prelude.lua")))
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: script(include_str!("scripts/acquire.lua")),
    extend: script(include_str!("scripts/extend.lua")),
    release: script(include_str!("scripts/release.lua")),
    fair_acquire: script(include_str!("scripts/fair_acquire.lua")),
    fair_release: script(include_str!("scripts/fair_release.lua")),
    fair_abandon: script(include_str!("scripts/fair_abandon.lua")),
    sem_acquire: script(include_str!("scripts/sem_acquire.lua")),
    sem_extend: script(include_str!("scripts/sem_extend.lua")),
    sem_release: script(include_str!("scripts/sem_release.lua")),
    sem_available: script(include_str!("scripts/sem_available.lua")),
    rw_acquire: script(include_str!("scripts/rw_acquire.lua")),
    rw_extend: script(include_str!("scripts/rw_extend.lua")),
    rw_release: script(include_str!("scripts/rw_release.lua")),
    rw_abandon: script(include_str!("scripts/rw_abandon.lua")),
});

/// Locks in one Redis server. Built by [`crate::connect`] from `redis://` or `rediss://`.
pub struct RedisBackend {
    conn: ConnectionManager,
    subscriber: Subscriber,
    shown_url: String,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("url", &self.shown_url)
            .finish()
    }
}

/// The keys and channel of one lock. Every key carries the hash tag `{name}`.
struct Keys {
    base: String,
}

impl Keys {
    fn new(kind: LockKind, name: &LockName) -> Self {
        let family = match kind {
            LockKind::Mutex => "lock",
            LockKind::Fair => "fair",
            LockKind::Read | LockKind::Write => "rw",
            LockKind::Permit { .. } => "sem",
        };
        // Escape the braces so the tag is always the whole name (and `%` so it stays 1:1).
        let mut tag = String::with_capacity(name.as_str().len());
        for c in name.as_str().chars() {
            match c {
                '%' => tag.push_str("%25"),
                '{' => tag.push_str("%7B"),
                '}' => tag.push_str("%7D"),
                c => tag.push(c),
            }
        }
        Keys {
            base: format!("distlock:{family}:{{{tag}}}"),
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }

    fn channel(&self) -> String {
        self.key(":free")
    }
}

impl RedisBackend {
    /// Connects to the server `url` names. The pub/sub connection opens at the first wait.
    pub async fn connect(url: &str) -> Result<Self> {
        let config = config::parse(url)?;
        if config.tls {
            // redis-rs leaves rustls without a crypto provider; another part of the program
            // may have installed one already, which is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = ::redis::Client::open(config.info).map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("{}: {:?}", config.shown, e.kind()),
            )
            .with_backend(NAME)
        })?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_millis(500));
        let conn = client
            .get_connection_manager_with_config(manager)
            .await
            .map_err(|e| {
                from_redis(&format!("connecting to {}", config.shown), e).with_hint(
                    "is redis-server running? (for the test servers: run scripts/services.sh)",
                )
            })?;
        Ok(RedisBackend {
            conn,
            subscriber: Subscriber::start(client),
            shown_url: config.shown,
        })
    }

    /// Runs `script` by hash (loading it after `NOSCRIPT`). A request that surely never reached
    /// the server (connection refused, or the write itself failed) is retried for a while, so a
    /// server restart is ridden out; an error after which the script may have run is returned
    /// (the caller cannot know whether it took effect).
    async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: &[&str],
        what: &str,
    ) -> Result<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        let give_up = tokio::time::Instant::now() + NOT_SENT_RETRY_FOR;
        let mut pause = Duration::from_millis(20);
        loop {
            match invocation.invoke_async(&mut conn).await {
                Ok(value) => return Ok(value),
                Err(e) if surely_not_sent(&e) && tokio::time::Instant::now() < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(from_redis(what, e)),
            }
        }
    }
}

/// True when the request cannot have reached the server: the connection was refused, or
/// writing it failed. (A reset or EOF while awaiting the answer is ambiguous, and not retried.)
/// redis-rs keeps the I/O error kind private, so a failed write is recognised by its text.
fn surely_not_sent(e: &RedisError) -> bool {
    if e.is_connection_refusal() {
        return true;
    }
    let text = e.to_string().to_ascii_lowercase();
    e.is_connection_dropped() && (text.contains("broken pipe") || text.contains("not connected"))
}

trait WithHint {
    fn with_hint(self, hint: &str) -> Self;
}

impl WithHint for Error {
    fn with_hint(self, hint: &str) -> Self {
        if self.kind() != ErrorKind::Connection {
            return self;
        }
        let message = format!("{}; {hint}", self.message());
        let mut out = Error::new(self.kind(), message).with_backend(NAME);
        if let Some(source) = std::error::Error::source(&self) {
            out = out.with_source(SourceText(source.to_string()));
        }
        out
    }
}

/// A source error kept as text (the original is not `Clone`).
#[derive(Debug)]
struct SourceText(String);

impl std::fmt::Display for SourceText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceText {}

/// A redis-rs error as a distlock error: transport trouble is `Connection`, the rest `Backend`.
/// redis-rs messages carry no URL, so no password can leak through them.
fn from_redis(what: &str, e: RedisError) -> Error {
    use ::redis::{ErrorKind as Redis, ServerErrorKind};
    if matches!(
        e.kind(),
        Redis::AuthenticationFailed | Redis::Server(ServerErrorKind::NoPerm)
    ) {
        return Error::new(
            ErrorKind::Backend,
            format!("{what}: the server refused the user or password in the URL, or its ACL forbids scripts"),
        )
        .with_backend(NAME)
        .with_source(e);
    }
    let kind = if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
    {
        ErrorKind::Connection
    } else {
        ErrorKind::Backend
    };
    Error::new(kind, what.to_string())
        .with_backend(NAME)
        .with_source(e)
}

fn lease_ms(req: &LockRequest) -> u64 {
    req.lease.as_millis()
}

fn mode(kind: LockKind) -> &'static str {
    if kind == LockKind::Read {
        "read"
    } else {
        "write"
    }
}

/// `{1, token}` or `{0, ms left}` from an acquire script.
fn attempt((status, value): (i64, i64), req: &LockRequest) -> Result<Attempt> {
    match status {
        1 => Ok(Attempt::Acquired {
            token: FencingToken(value as u64),
            session_lost: None,
        }),
        0 => Ok(Attempt::Held {
            retry_after: u64::try_from(value)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        }),
        _ => Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "lock {:?}: this owner holds the read lock; release it before taking the write \
                 lock (upgrading could deadlock two readers)",
                req.name
            ),
        )
        .with_backend(NAME)),
    }
}

fn sha1_hex(text: &str) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

#[async_trait]
impl Backend for RedisBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            notifies: true,
            renews: true,
            queues: true,
        }
    }

    fn supports(&self, kind: LockKind) -> bool {
        matches!(
            kind,
            LockKind::Mutex
                | LockKind::Fair
                | LockKind::Read
                | LockKind::Write
                | LockKind::Permit { .. }
        )
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        let k = Keys::new(req.kind, &req.name);
        let owner = req.owner.as_str();
        let lease = lease_ms(req).to_string();
        let waiter_ttl = WAITER_TTL.as_millis().to_string();
        let s = &*SCRIPTS;
        let answer: (i64, i64) = match req.kind {
            LockKind::Fair => {
                // Only a waiter that listens for its turn joins the queue: a try_acquire (or the
                // first attempt, made before subscribing) must leave no place behind.
                let channel = k.channel();
                let waiting = self.subscriber.is_watching(&channel, &sha1_hex(owner));
                self.run(
                    &s.fair_acquire,
                    &[k.key(""), k.key(":fence"), k.key(":queue"), k.key(":due")],
                    &[
                        owner,
                        &lease,
                        &waiter_ttl,
                        &channel,
                        if waiting { "1" } else { "0" },
                    ],
                    "taking a fair lock",
                )
                .await?
            }
            LockKind::Read | LockKind::Write => {
                self.run(
                    &s.rw_acquire,
                    &rw_keys(&k, true),
                    &[owner, &lease, mode(req.kind), &waiter_ttl],
                    "taking a read-write lock",
                )
                .await?
            }
            LockKind::Permit { permits } => {
                self.run(
                    &s.sem_acquire,
                    &[k.key(":holders"), k.key(":holds"), k.key(":fence")],
                    &[owner, &lease, &permits.to_string()],
                    "taking a semaphore permit",
                )
                .await?
            }
            _ => {
                self.run(
                    &s.acquire,
                    &[k.key(""), k.key(":fence")],
                    &[owner, &lease],
                    "taking the lock",
                )
                .await?
            }
        };
        attempt(answer, req)
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<bool> {
        let k = Keys::new(req.kind, &req.name);
        let owner = req.owner.as_str();
        let lease = lease_ms(req).to_string();
        let token = token.to_string();
        let s = &*SCRIPTS;
        let renewed: i64 = match req.kind {
            LockKind::Read | LockKind::Write => {
                self.run(
                    &s.rw_extend,
                    &rw_keys(&k, false),
                    &[owner, &lease, mode(req.kind), &token],
                    "extending a read-write lock",
                )
                .await?
            }
            LockKind::Permit { .. } => {
                self.run(
                    &s.sem_extend,
                    &[k.key(":holders"), k.key(":holds")],
                    &[owner, &lease, &token],
                    "extending a semaphore permit",
                )
                .await?
            }
            _ => {
                self.run(
                    &s.extend,
                    &[k.key("")],
                    &[owner, &lease, &token],
                    "extending the lease",
                )
                .await?
            }
        };
        Ok(renewed == 1)
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let k = Keys::new(req.kind, &req.name);
        let owner = req.owner.as_str();
        let channel = k.channel();
        // '' names whatever holding the owner has (release by owner token).
        let token = token.map(|t| t.to_string()).unwrap_or_default();
        let s = &*SCRIPTS;
        let freed: i64 = match req.kind {
            LockKind::Fair => {
                self.run(
                    &s.fair_release,
                    &[k.key(""), k.key(":queue")],
                    &[owner, &channel, &token],
                    "releasing a fair lock",
                )
                .await?
            }
            LockKind::Read | LockKind::Write => {
                self.run(
                    &s.rw_release,
                    &rw_keys(&k, false),
                    &[owner, mode(req.kind), &channel, &token],
                    "releasing a read-write lock",
                )
                .await?
            }
            LockKind::Permit { .. } => {
                self.run(
                    &s.sem_release,
                    &[k.key(":holders"), k.key(":holds")],
                    &[owner, &channel, &token],
                    "releasing a semaphore permit",
                )
                .await?
            }
            _ => {
                self.run(
                    &s.release,
                    &[k.key("")],
                    &[owner, &channel, &token],
                    "releasing the lock",
                )
                .await?
            }
        };
        Ok(freed == 1)
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        let k = Keys::new(req.kind, &req.name);
        // Fair-lock waiters are woken by name: the release publishes the SHA-1 of the first
        // waiter's owner token.
        let wake_key = (req.kind == LockKind::Fair).then(|| sha1_hex(req.owner.as_str()));
        Ok(self.subscriber.watch(k.channel(), wake_key).await)
    }

    async fn abandon(&self, req: &LockRequest) -> Result<()> {
        let k = Keys::new(req.kind, &req.name);
        let owner = req.owner.as_str();
        let channel = k.channel();
        let s = &*SCRIPTS;
        match req.kind {
            LockKind::Fair => {
                let _: i64 = self
                    .run(
                        &s.fair_abandon,
                        &[k.key(""), k.key(":queue"), k.key(":due")],
                        &[owner, &channel],
                        "leaving a fair lock's queue",
                    )
                    .await?;
            }
            LockKind::Write => {
                let _: i64 = self
                    .run(
                        &s.rw_abandon,
                        &[k.key(":writers-waiting")],
                        &[owner, &channel],
                        "leaving a read-write lock's writer queue",
                    )
                    .await?;
            }
            // Other waiters leave no trace in the store.
            _ => {}
        }
        Ok(())
    }

    async fn available_permits(&self, req: &LockRequest) -> Result<u32> {
        let LockKind::Permit { permits } = req.kind else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "available_permits is only for semaphores",
            )
            .with_backend(NAME));
        };
        let k = Keys::new(req.kind, &req.name);
        let free: i64 = self
            .run(
                &SCRIPTS.sem_available,
                &[k.key(":holders")],
                &[&permits.to_string()],
                "counting free permits",
            )
            .await?;
        Ok(free.clamp(0, i64::from(permits)) as u32)
    }
}

/// The read-write lock's keys, in the order of `rw_acquire.lua` (the fencing counter and the
/// writer queue only when `all`).
fn rw_keys(k: &Keys, all: bool) -> Vec<String> {
    let mut keys = vec![k.key(":writer"), k.key(":readers"), k.key(":reader-holds")];
    if all {
        keys.push(k.key(":writers-waiting"));
        keys.push(k.key(":fence"));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_hash_tag_whatever_the_name() {
        for name in ["order:42", "}x{", "a%7Db", "{}", "注文"] {
            let k = Keys::new(LockKind::Mutex, &LockName::new(name).unwrap());
            let lock = k.key("");
            let open = lock.find('{').unwrap();
            let close = open + lock[open..].find('}').unwrap();
            let tag = &lock[open + 1..close];
            assert!(!tag.is_empty(), "{name}");
            assert_eq!(
                lock.len(),
                close + 1,
                "{name}: the tag must be the whole name"
            );
        }
        let a = Keys::new(LockKind::Mutex, &LockName::new("a}").unwrap()).key("");
        let b = Keys::new(LockKind::Mutex, &LockName::new("a%7D").unwrap()).key("");
        assert_ne!(a, b, "escaping must keep names apart");
    }
}

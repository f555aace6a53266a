//! The fence in the caller's Redis: fenced `SET`, `HSET` and `INCRBY`, each one Lua script that
//! compares the token with the resource's fence key, writes, and raises the fence.
//!
//! ```no_run
//! # async fn demo(guard: distlock::Guard) -> distlock::Result<()> {
//! // Not run by the doctests: it needs a Redis server.
//! use distlock::fence::RedisFence;
//!
//! // Your own connection, from the redis crate distlock's `redis` feature uses (redis 1.x).
//! let client = redis::Client::open("redis://127.0.0.1:6379").expect("url");
//! let mut conn = client.get_multiplexed_async_connection().await.expect("connect");
//! let fence = RedisFence::new();
//! let token = guard.fencing_token();
//! // Refused with ErrorKind::StaleToken if a newer holder has written to "account:7".
//! fence.set(&mut conn, "account:7", token, "account:7:balance", 120).await?;
//! fence.incr_by(&mut conn, "account:7", token, "account:7:version", 1).await.ok();
//! # Ok(()) }
//! ```
//!
//! The fence of a resource is the key `<prefix><resource>` (prefix `distlock:fence:` unless
//! [`RedisFence::with_prefix`] says otherwise), holding the last accepted token and never
//! expiring. A resource may span several data keys; each write names the one it writes. On
//! Redis Cluster, the fence key and the data key must share a slot: put the same hash tag in
//! the resource name and the data key (`{account:7}` and `{account:7}:balance`).
//!
//! Tokens must stay below 2^53 (Lua numbers are doubles); every distlock backend's do until
//! the year 2255.

use std::sync::LazyLock;

use ::redis::aio::ConnectionLike;
use ::redis::{Script, ToRedisArgs, Value};
use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::redis_support::from_redis;
use crate::types::{FencingToken, LockName};

/// The fenced write: run on the caller's connection, alone (none of the lock scripts' prelude).
static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fence_write.lua")));

const BACKEND: &str = "redis";

/// The largest token a Lua number holds exactly.
const LARGEST_TOKEN: u64 = (1 << 53) - 1;

/// Fenced writes to a Redis server, on the caller's connection.
#[derive(Clone, Debug)]
pub struct RedisFence {
    prefix: String,
}

impl Default for RedisFence {
    fn default() -> Self {
        RedisFence::new()
    }
}

impl RedisFence {
    /// Fences at `distlock:fence:<resource>`.
    pub fn new() -> Self {
        RedisFence::with_prefix("distlock:fence:")
    }

    /// Fences at `<prefix><resource>`.
    pub fn with_prefix(prefix: impl Into<String>) -> Self {
        RedisFence {
            prefix: prefix.into(),
        }
    }

    /// The fence key of `resource` (its name follows the rules of lock names).
    pub fn key(&self, resource: &str) -> Result<String> {
        Ok(format!(
            "{}{}",
            self.prefix,
            LockName::new(resource)?.as_str()
        ))
    }

    /// `SET key value` if `token` is above `resource`'s fence; [`ErrorKind::StaleToken`]
    /// otherwise, and nothing is written.
    pub async fn set<C, V>(
        &self,
        conn: &mut C,
        resource: &str,
        token: FencingToken,
        key: &str,
        value: V,
    ) -> Result<()>
    where
        C: ConnectionLike + Send,
        V: ToRedisArgs,
    {
        self.write(conn, resource, token, key, "SET", value.to_redis_args())
            .await
            .map(|_| ())
    }

    /// `HSET key field value` under the fence; returns HSET's answer (1 if the field is new).
    pub async fn hset<C, V>(
        &self,
        conn: &mut C,
        resource: &str,
        token: FencingToken,
        key: &str,
        field: &str,
        value: V,
    ) -> Result<i64>
    where
        C: ConnectionLike + Send,
        V: ToRedisArgs,
    {
        let mut args = field.to_redis_args();
        args.extend(value.to_redis_args());
        self.write(conn, resource, token, key, "HSET", args).await
    }

    /// `INCRBY key delta` under the fence; returns the new value.
    pub async fn incr_by<C>(
        &self,
        conn: &mut C,
        resource: &str,
        token: FencingToken,
        key: &str,
        delta: i64,
    ) -> Result<i64>
    where
        C: ConnectionLike + Send,
    {
        self.write(conn, resource, token, key, "INCRBY", delta.to_redis_args())
            .await
    }

    /// The last token accepted for `resource`, if any.
    pub async fn last_token<C>(&self, conn: &mut C, resource: &str) -> Result<Option<FencingToken>>
    where
        C: ConnectionLike + Send,
    {
        let last: Option<u64> = ::redis::cmd("GET")
            .arg(self.key(resource)?)
            .query_async(conn)
            .await
            .map_err(|e| from_redis("reading the fence", e))?;
        Ok(last.map(FencingToken))
    }

    async fn write<C>(
        &self,
        conn: &mut C,
        resource: &str,
        token: FencingToken,
        key: &str,
        op: &str,
        args: Vec<Vec<u8>>,
    ) -> Result<i64>
    where
        C: ConnectionLike + Send,
    {
        let span = tracing::debug_span!(
            "distlock.fence_write",
            backend = BACKEND,
            resource,
            token = token.get(),
            op,
        );
        async move {
            if token.get() > LARGEST_TOKEN {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!("fencing token {token} is above 2^53, which Lua cannot compare"),
                )
                .with_backend(BACKEND));
            }
            let mut invocation = FENCED_WRITE.prepare_invoke();
            invocation
                .key(self.key(resource)?)
                .key(key)
                .arg(token.get())
                .arg(op);
            for arg in args {
                invocation.arg(arg);
            }
            let (accepted, reply): (i64, Value) = invocation
                .invoke_async(conn)
                .await
                .map_err(|e| from_redis("running the fenced write", e))?;
            let number = |v: Value| -> Option<i64> {
                match v {
                    Value::Int(n) => Some(n),
                    Value::BulkString(b) => std::str::from_utf8(&b).ok()?.parse().ok(),
                    _ => None,
                }
            };
            let reply = number(reply);
            if accepted == 1 {
                return reply.ok_or_else(|| {
                    Error::new(ErrorKind::Backend, "the fenced write answered a non-number")
                        .with_backend(BACKEND)
                });
            }
            Err(super::stale(
                BACKEND,
                resource,
                token,
                reply.map(|t| t as u64),
            ))
        }
        .instrument(span)
        .await
    }
}

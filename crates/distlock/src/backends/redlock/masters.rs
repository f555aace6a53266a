//! The masters: one single-Redis [`Server`] each (the Redis backend's connection, script runner
//! and subscriber), connected lazily, and every request bounded by the per-master timeouts.
//!
//! A master that is down when the client connects is connected at its first use after that; a
//! master that stops answering costs a request at most its timeout, never more, so a dead
//! master shortens an acquisition's validity by at most the timeout.

use std::time::Duration;

use futures_util::future::join_all;
use redis::{FromRedisValue, Script};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::backends::redis::invoke::Server;
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;

use super::NAME;
use super::config::Settings;
use crate::backends::redis::RedisConfig;

/// One script call, the same on every master.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub(super) script: &'a Script,
    pub(super) keys: &'a [String],
    pub(super) args: &'a [&'a str],
    /// What it does, for messages ("taking the lock").
    pub(super) what: &'a str,
}

impl<'a> Call<'a> {
    pub(super) fn new(
        script: &'a Script,
        keys: &'a [String],
        args: &'a [&'a str],
        what: &'a str,
    ) -> Self {
        Call {
            script,
            keys,
            args,
            what,
        }
    }
}

/// One independent Redis master.
pub(super) struct Master {
    /// The master's settings, password included: never shown.
    config: RedisConfig,
    /// `host:port`, for messages.
    pub(super) shown: String,
    options: Options,
    connect_timeout: Duration,
    server: OnceCell<Server>,
    /// Set when a request failed for want of a connection: until then, requests fail at once
    /// instead of each waiting out its timeout (a dead master would otherwise slow every round
    /// by the timeout); the first request after it tries the master again.
    resting_until: std::sync::Mutex<Option<Instant>>,
}

/// How long a master that could not be reached is left out before it is tried again.
const REST: Duration = Duration::from_millis(500);

impl Master {
    /// The masters `config` names, none connected yet.
    pub(super) fn all(config: &Settings) -> Vec<Master> {
        // A refused request is not retried on the same master: the quorum is the retry. Each
        // request is bounded by the response timeout here (`run`), so the connection itself
        // gives up on a master only after twice that: a take given up on keeps its place on the
        // connection, and the undo sent after it (`send_unawaited`) reaches the master behind it.
        let options = Options::default()
            .connect_timeout(config.connect_timeout)
            .response_timeout(config.response_timeout * 2)
            .retry_for(Duration::ZERO);
        config
            .masters
            .iter()
            .zip(&config.shown_masters)
            .map(|(master, shown)| Master {
                config: master.clone(),
                shown: shown.clone(),
                options: options.clone(),
                connect_timeout: config.connect_timeout,
                server: OnceCell::new(),
                resting_until: std::sync::Mutex::new(None),
            })
            .collect()
    }

    /// The connected server, connecting first if need be (within the connect timeout).
    pub(super) async fn server(&self) -> Result<&Server> {
        let connect = self
            .server
            .get_or_try_init(|| Server::connect_config(self.config.clone(), &self.options));
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(server)) => Ok(server),
            Ok(Err(e)) => Err(self.failed(e)),
            Err(_) => Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "master {}: no connection within {:?}",
                    self.shown, self.connect_timeout
                ),
            )
            .with_backend(NAME)),
        }
    }

    /// The server if it is connected already (no waiting).
    pub(super) fn connected(&self) -> Option<&Server> {
        self.server.get()
    }

    /// Makes `call` on this master; no answer within `limit` (connecting included) is an error.
    pub(super) async fn run<T: FromRedisValue>(
        &self,
        call: Call<'_>,
        limit: Duration,
    ) -> Result<T> {
        let Call {
            script,
            keys,
            args,
            what,
        } = call;
        let resting_until = *self.resting();
        if let Some(until) = resting_until.filter(|u| Instant::now() < *u) {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "master {}: {what}: unreachable a moment ago, tried again in {:?}",
                    self.shown,
                    until - Instant::now()
                ),
            )
            .with_backend(NAME));
        }
        let call = async {
            let server = self.server().await?;
            server
                .run(script, keys, args, what)
                .await
                .map_err(|e| self.failed(e))
        };
        let answer = match tokio::time::timeout(limit, call).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::new(
                ErrorKind::Connection,
                format!("master {}: {what}: no answer within {limit:?}", self.shown),
            )
            .with_backend(NAME)),
        };
        if matches!(&answer, Err(e) if e.kind() == ErrorKind::Connection) {
            *self.resting() = Some(Instant::now() + REST);
        }
        answer
    }

    /// Sends the script `text` now, behind whatever this client sent this master before,
    /// without awaiting the answer (see `Server::send_unawaited`), resting or not: false when
    /// nothing was sent.
    pub(super) fn send_unawaited(&self, text: &str, keys: &[String], args: &[&str]) -> bool {
        self.connected()
            .is_some_and(|server| server.send_unawaited(text, keys, args))
    }

    /// The keys matching `pattern` on this master (see `Server::scan`), within `limit`.
    pub(super) async fn scan(&self, pattern: &str, limit: Duration) -> Result<Vec<String>> {
        let what = "listing locks";
        let scan = async {
            let server = self.server().await?;
            server.scan(pattern, what).await.map_err(|e| self.failed(e))
        };
        tokio::time::timeout(limit, scan).await.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Connection,
                format!("master {}: {what}: no answer within {limit:?}", self.shown),
            )
            .with_backend(NAME))
        })
    }

    fn resting(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.resting_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A single server's error, as this master's.
    fn failed(&self, e: Error) -> Error {
        let message = format!("master {}: {}", self.shown, crate::error::chain(&e));
        Error::new(e.kind(), message).with_backend(NAME)
    }
}

/// Connects every master at once; fine if a majority answers (the others connect at their next
/// use). Otherwise the error says how many answered.
pub(super) async fn connect_all(masters: &[Master], quorum: usize) -> Result<()> {
    let answers = join_all(masters.iter().map(|m| m.server())).await;
    let failures: Vec<Error> = answers.into_iter().filter_map(|a| a.err()).collect();
    let answered = masters.len() - failures.len();
    if answered >= quorum {
        return Ok(());
    }
    let what = "connecting (are the masters running and listening on the addresses in the URL?)";
    Err(no_quorum(masters.len(), quorum, answered, what, &failures))
}

/// "Too few masters answered": how many of how many, and the first failures.
pub(super) fn no_quorum(
    n: usize,
    quorum: usize,
    answered: usize,
    what: &str,
    failures: &[Error],
) -> Error {
    let why: Vec<&str> = failures.iter().take(3).map(Error::message).collect();
    Error::new(
        ErrorKind::NoQuorum,
        format!(
            "{what}: {answered} of {n} masters answered, a majority needs {quorum}; {}",
            why.join("; ")
        ),
    )
    .with_backend(NAME)
}

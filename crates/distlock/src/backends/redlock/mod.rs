//! The Redlock backend: the exclusive lock over 3, 5 or 7 independent Redis masters, held while a
//! majority of them hold it. Its guarantees, and where they end, are below.
//!
//! * `config`: `redlock://…` → one `redis://` URL per master and the per-master timeouts, and
//!   the check that the masters are distinct servers;
//! * `masters`: each master is the Redis backend's single-server connection
//!   (`backends::redis::invoke::Server`: scripts by SHA-1, one multiplexed command
//!   connection, one subscriber), connected lazily, every request bounded by a timeout;
//! * `quorum`: the majority, the validity (lease − drift from the send), how long a loser waits;
//! * `wakeups`: the masters' release notices merged into one wake-up stream;
//! * `inspect`: lock status and forced release, the Redis backend's scripts on every master;
//! * `scripts/raise_fence.lua`: the only Lua of its own (the take, renew and release scripts are
//!   the Redis backend's, run on each master).
//!
#![doc = include_str!("docs.md")]

mod config;
mod inspect;
mod masters;
mod quorum;
mod wakeups;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use redis::Script;
use tokio::time::Instant;

use crate::backend::{Attempt, Backend, Capabilities, Hold, Inspection, LockRequest, Wakeups};
use crate::backends::redis::keys::Keys;
use crate::backends::redis::scripts::{COUNTER_SCRIPTS as SCRIPTS, script};
use crate::backends::redis::{exclusive_answer, named_holding};
use crate::error::{Error, ErrorKind, Result};
use crate::options::Options;
use crate::status::{ForcedRelease, Holder, LockStatus, Selection};
use crate::types::{FencingToken, LockKind, LockName, show_duration};

pub use config::RedlockConfig;
use masters::{Call, Master, connect_all, no_quorum};

const NAME: &str = "redlock";

/// How long a take or release that found no majority answering is tried again, by default.
const RETRY_FOR: Duration = Duration::from_secs(2);
/// The least a round waits for the masters still silent once a majority has answered (see
/// [`RedlockBackend::on_all_settled`]): healthy masters on one network answer within it.
const STRAGGLER_GRACE: Duration = Duration::from_millis(5);

static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| script(include_str!("scripts/raise_fence.lua")));

/// Locks held by a majority of independent Redis masters. Built by [`crate::connect`] from
/// `redlock://`.
pub struct RedlockBackend {
    masters: Vec<Master>,
    quorum: usize,
    response_timeout: Duration,
    /// How long a round that found no quorum is tried again.
    retry_for: Duration,
    /// How long a take round takes lately.
    round: Arc<quorum::RoundTime>,
    shown_url: String,
    /// Put before every key and channel (the URL's `?prefix=`), or empty.
    prefix: String,
}

impl std::fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("url", &self.shown_url)
            .finish()
    }
}

/// How the masters answered a script that answers 1 (done) or 0 (not ours).
#[derive(Default)]
struct Count {
    yes: usize,
    no: usize,
    failures: Vec<Error>,
}

/// One master's answer to a take.
enum Share {
    /// Taken (or the owner's own share confirmed) with this master's token.
    Won(u64),
    /// Someone else's; its lease has this long left, if known.
    Held(Option<Duration>),
    /// No answer.
    Failed(Error),
}

impl RedlockBackend {
    /// Connects to the masters `url` names (at least a majority must answer).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, &Options::default()).await
    }

    /// [`connect`](Self::connect) with [`Options`]: `connect_timeout` and `response_timeout`
    /// apply to each master (a URL's `?connect_timeout=` / `?response_timeout=` win).
    pub async fn connect_with(url: &str, options: &Options) -> Result<Self> {
        let config = RedlockConfig::from_url(url)?;
        Self::connect_config(config, options).await
    }

    /// Connects to the masters `config` names (at least a majority must answer), as
    /// [`connect_with`](Self::connect_with) does for a URL: `options`' timeouts apply to each
    /// master where `config` leaves them out.
    pub async fn connect_config(config: RedlockConfig, options: &Options) -> Result<Self> {
        let config = config.check(options).map_err(|why| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{}: {why}", config.shown()),
            )
            .with_backend(NAME)
        })?;
        config::check_distinct(&config).await?;
        let masters = Master::all(&config);
        let quorum = quorum::majority(masters.len());
        connect_all(&masters, quorum).await?;
        Ok(RedlockBackend {
            masters,
            quorum,
            response_timeout: config.response_timeout,
            retry_for: options.retry_for.unwrap_or(RETRY_FOR),
            round: Arc::default(),
            shown_url: config.shown,
            prefix: config.prefix,
        })
    }

    /// How long one master may take for one request of `req`: the response timeout, and never
    /// longer than the lease (an answer after that is worthless).
    fn limit(&self, req: &LockRequest) -> Duration {
        self.response_timeout.min(req.lease.duration())
    }

    /// Runs `script` on every master at once.
    async fn on_all<T: redis::FromRedisValue>(
        &self,
        call: Call<'_>,
        limit: Duration,
    ) -> Vec<Result<T>> {
        join_all(self.masters.iter().map(|m| m.run(call, limit))).await
    }

    /// Runs `call` on every master at once, like [`on_all`](Self::on_all), but once a majority
    /// has answered, the others get only as long again as that took (at least [`STRAGGLER_GRACE`]):
    /// a master that is cut off (its connection open, nothing answered) then costs a round
    /// milliseconds, not the response timeout, and no longer eats the lease of every take and
    /// renewal while a minority is unreachable. A master not waited for counts as failed; what
    /// it was sent may still happen there (as after a timeout), and lapses with the lease.
    async fn on_all_settled<T: redis::FromRedisValue>(
        &self,
        call: Call<'_>,
        limit: Duration,
    ) -> Vec<Result<T>> {
        use futures_util::StreamExt;
        let started = Instant::now();
        let mut pending: futures_util::stream::FuturesUnordered<_> = self
            .masters
            .iter()
            .enumerate()
            .map(|(i, m)| async move { (i, m.run(call, limit).await) })
            .collect();
        let mut answers: Vec<Option<Result<T>>> = self.masters.iter().map(|_| None).collect();
        let mut answered = 0;
        let mut cut_off: Option<Instant> = None;
        loop {
            let next = match cut_off {
                Some(at) => match tokio::time::timeout_at(at, pending.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => pending.next().await,
            };
            let Some((i, answer)) = next else { break };
            answered += usize::from(answer.is_ok());
            answers[i] = Some(answer);
            if cut_off.is_none() && answered >= self.quorum {
                cut_off = Some(Instant::now() + started.elapsed().max(STRAGGLER_GRACE));
            }
        }
        let waited = started.elapsed();
        answers
            .into_iter()
            .zip(&self.masters)
            .map(|(answer, master)| {
                answer.unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorKind::Connection,
                        format!(
                            "master {}: {}: no answer within {waited:?}, when a majority had \
                             answered",
                            master.shown, call.what
                        ),
                    )
                    .with_backend(NAME))
                })
            })
            .collect()
    }

    /// Runs a script that answers 1 or 0 on every master at once, and counts the answers.
    async fn count(&self, req: &LockRequest, call: Call<'_>) -> Count {
        let answers: Vec<Result<i64>> = self.on_all_settled(call, self.limit(req)).await;
        let mut count = Count::default();
        for answer in answers {
            match answer {
                Ok(1) => count.yes += 1,
                Ok(_) => count.no += 1,
                Err(e) => count.failures.push(e),
            }
        }
        count
    }

    /// The error of a round of `req` to which fewer than a majority answered.
    fn no_quorum(&self, req: &LockRequest, what: &str, count: Count) -> Error {
        let what = format!("{what} {:?}", req.name.as_str());
        let answered = count.yes + count.no;
        no_quorum(
            self.masters.len(),
            self.quorum,
            answered,
            &what,
            &count.failures,
        )
    }

    /// The error of a round of `req` that a majority granted only `elapsed` after its send, at
    /// or past the end of its validity: the grant is worthless. `NoQuorum` (no majority answered
    /// in time, retryable): a take that returned the grant would hand out a guard already lost.
    fn answered_too_late(&self, req: &LockRequest, what: &str, elapsed: Duration) -> Error {
        let lease = req.lease.duration();
        let valid_for = lease.saturating_sub(quorum::drift(lease));
        let elapsed = Duration::from_millis(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
        Error::new(
            ErrorKind::NoQuorum,
            format!(
                "{what} {:?}: a majority of the {} masters answered only {} after the send, past \
                 the {} the grant is valid for (the {} lease less the allowed clock drift), so \
                 it does not count; masters or a network this slow need a longer lease",
                req.name.as_str(),
                self.masters.len(),
                show_duration(elapsed),
                show_duration(valid_for),
                show_duration(lease),
            ),
        )
        .with_backend(NAME)
    }

    /// Makes the winners' shares carry `chosen`, the largest token they drew, and raises the
    /// counter of every other master that answered; answers how many shares carry `chosen` now.
    /// Nothing is sent when every winner drew `chosen` (the masters' counters agree, as they do
    /// after the first acquisition that reached them all).
    async fn raise_fence(
        &self,
        req: &LockRequest,
        keys: &[String],
        shares: &[Share],
        chosen: u64,
    ) -> usize {
        // What each master is asked: winners behind `chosen` move their share (naming the token
        // they drew), masters held by another only raise their counter ('').
        let asks: Vec<Option<String>> = shares
            .iter()
            .map(|share| match share {
                Share::Won(t) if *t == chosen => None,
                Share::Won(t) => Some(t.to_string()),
                Share::Held(_) => Some(String::new()),
                Share::Failed(_) => None,
            })
            .collect();
        let at_chosen = shares
            .iter()
            .filter(|s| matches!(s, Share::Won(t) if *t == chosen))
            .count();
        if asks.iter().all(Option::is_none) {
            return at_chosen;
        }
        let chosen_text = chosen.to_string();
        let owner = req.owner.as_str();
        let limit = self.limit(req);
        let calls = self.masters.iter().zip(&asks).filter_map(|(m, drew)| {
            let drew = drew.as_deref()?;
            let args = [owner, drew, chosen_text.as_str()];
            Some(async move {
                let done: Result<i64> = m
                    .run(
                        Call {
                            script: &RAISE_FENCE,
                            keys,
                            args: &args,
                            what: "raising the fencing counter",
                        },
                        limit,
                    )
                    .await;
                // Only a winner's share counts towards the majority that carries `chosen`.
                !drew.is_empty() && matches!(done, Ok(1))
            })
        });
        at_chosen + join_all(calls).await.into_iter().filter(|ok| *ok).count()
    }

    /// Frees whatever shares an attempt that did not win may have taken: on every master that
    /// won or did not answer in time (a take whose answer was given up on usually ran), by owner
    /// alone (the raise may or may not have moved a share's token). Each release is queued on
    /// its master's connection now, behind the take and ahead of whatever this client sends
    /// after, so it cannot free a later attempt's share, and is not awaited, so a master that
    /// does not answer costs the failed take no more time. It is sent as the script's text
    /// (`EVAL`): by hash, a master that never ran the release script (a new one, or one
    /// restarted) would answer `NOSCRIPT` and keep the share, and every later take of the same
    /// owner would renew it there (a take confirms the owner's own share) — with every contender
    /// in that state, nobody ever wins. Where nothing could be queued (a TLS connection), a
    /// share this take won is released and awaited; a master whose connection broke gets
    /// nothing: its share, if any, lapses with the lease.
    async fn undo(&self, req: &LockRequest, shares: &[Share]) {
        let k = Keys::new(&self.prefix, req.kind, &req.name);
        let keys = k.release();
        let named = named_holding(req.owner.as_str(), None);
        let args = [named.as_str()];
        let ops = SCRIPTS.ops(req.kind);
        let call = Call::new(
            &ops.release,
            &keys,
            &args,
            "undoing a share of a failed take",
        );
        let limit = self.limit(req);
        let mut awaited = Vec::new();
        for (master, share) in self.masters.iter().zip(shares) {
            if matches!(share, Share::Held(_)) {
                continue;
            }
            // Queued here, before this function first awaits anything.
            let queued = master.send_unawaited(&ops.release_text, &keys, &args);
            if !queued && matches!(share, Share::Won(_)) {
                awaited.push(master.run::<i64>(call, limit));
            }
        }
        join_all(awaited).await;
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::leases().notifying()
    }

    async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        // The core counts a grant from just before it called this; a round retried later
        // counts from its own send, so it says how much later that was.
        let asked = Instant::now();
        self.with_retries(|| self.take_once(req, asked)).await
    }

    async fn extend(&self, req: &LockRequest, token: FencingToken) -> Result<Option<Duration>> {
        self.extend_once(req, token).await
    }

    async fn release(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        self.with_retries(|| self.release_once(req, token)).await
    }

    async fn watch_free(&self, req: &LockRequest) -> Result<Wakeups> {
        let channel = Keys::new(&self.prefix, req.kind, &req.name).channel();
        Ok(wakeups::watch(&self.masters, self.quorum, &channel, self.round.clone()).await)
    }

    crate::backend::offers!(inspection);
}

#[async_trait]
impl Inspection for RedlockBackend {
    async fn status(&self, which: &Selection) -> Result<Vec<LockStatus>> {
        self.inspect_status(which).await
    }

    async fn force_release(&self, name: &LockName, _kind: LockKind) -> Result<ForcedRelease> {
        self.inspect_force(name).await
    }

    async fn warnings(&self) -> Vec<String> {
        // The masters connected now, each asked as one Redis server is; a master that does not
        // answer within the response timeout gives none.
        let asked = self
            .masters
            .iter()
            .filter_map(Master::connected)
            .map(|server| tokio::time::timeout(self.response_timeout, server.warnings()));
        join_all(asked)
            .await
            .into_iter()
            .flat_map(|warnings| warnings.unwrap_or_default())
            .collect()
    }
}

impl RedlockBackend {
    /// Runs `round` again while it answers "no quorum", for up to `retry_for`: a restarted
    /// master's broken connection, or a stall of this process, can fail one round with nothing
    /// wrong with the masters. (The watchdog's renewals retry by themselves, within the lease.)
    async fn with_retries<T, F, Fut>(&self, mut round: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let give_up = crate::core::deadline::instant_after(self.retry_for);
        let mut pause = Duration::from_millis(20);
        loop {
            match round().await {
                Err(e) if e.kind() == ErrorKind::NoQuorum && Instant::now() + pause < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                answer => return answer,
            }
        }
    }

    /// One round of Redlock's take: every master at once, then the verdict. A grant is valid
    /// for lease − drift from this round's send, stated as counted from `asked` (the start of
    /// the `try_take` this round belongs to).
    async fn take_once(&self, req: &LockRequest, asked: Instant) -> Result<Attempt> {
        let k = Keys::new(&self.prefix, req.kind, &req.name);
        let keys = k.acquire();
        let lease = req.lease.duration();
        let lease_ms = req.lease.as_millis().to_string();
        // Each master stores who took its share (status merges them).
        let record = Holder::this_process_record();
        let args = [req.owner.as_str(), lease_ms.as_str(), record];
        let sent = Instant::now();
        let answers: Vec<Result<i64>> = self
            .on_all_settled(
                Call::new(
                    &SCRIPTS.ops(req.kind).acquire,
                    &keys,
                    &args,
                    "taking the lock",
                ),
                self.limit(req),
            )
            .await;
        self.round.record(sent.elapsed());
        let shares: Vec<Share> = answers
            .into_iter()
            .map(|answer| match answer.map(exclusive_answer) {
                Ok((1, token)) => Share::Won(token as u64),
                Ok((_, pttl)) => Share::Held(
                    u64::try_from(pttl)
                        .ok()
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis),
                ),
                Err(e) => Share::Failed(e),
            })
            .collect();
        let won: Vec<u64> = shares
            .iter()
            .filter_map(|s| match s {
                Share::Won(t) => Some(*t),
                _ => None,
            })
            .collect();
        let chosen = won.iter().copied().max();
        // How long the answers took, when a majority granted the take only after its validity.
        let mut too_late = None;
        if let Some(chosen) = chosen.filter(|_| won.len() >= self.quorum) {
            let carried = self.raise_fence(req, &keys, &shares, chosen).await;
            // Judged after every answer (and the raise); the shares' leases started no earlier
            // than `sent`, so that is what the grant is counted from.
            let elapsed = sent.elapsed();
            match quorum::validity(lease, elapsed) {
                Some(valid_for) if carried >= self.quorum => {
                    return Ok(Attempt::Acquired {
                        token: FencingToken(chosen),
                        hold: Hold::Lease {
                            valid_for: valid_for + sent.duration_since(asked),
                        },
                    });
                }
                Some(_) => {}
                None => too_late = Some(elapsed),
            }
        }
        // Not won: give back every share taken, on every master at once.
        self.undo(req, &shares).await;
        if let Some(elapsed) = too_late {
            return Err(self.answered_too_late(req, "taking the lock", elapsed));
        }
        let answered = shares
            .iter()
            .filter(|s| !matches!(s, Share::Failed(_)))
            .count();
        if answered < self.quorum {
            let failures: Vec<Error> = shares
                .into_iter()
                .filter_map(|s| match s {
                    Share::Failed(e) => Some(e),
                    _ => None,
                })
                .collect();
            let count = Count {
                yes: answered,
                no: 0,
                failures,
            };
            return Err(self.no_quorum(req, "taking the lock", count));
        }
        let mut held: Vec<Option<Duration>> = shares
            .iter()
            .filter_map(|s| match s {
                Share::Held(left) => Some(*left),
                _ => None,
            })
            .collect();
        let retry_after = quorum::retry_after(
            self.masters.len(),
            lease,
            &mut held,
            quorum::split_pause(self.quorum, won.len(), self.round.get()),
        );
        Ok(Attempt::Held {
            retry_after: Some(retry_after),
        })
    }

    /// One round of renewal on every master at once.
    async fn extend_once(
        &self,
        req: &LockRequest,
        token: FencingToken,
    ) -> Result<Option<Duration>> {
        let k = Keys::new(&self.prefix, req.kind, &req.name);
        let lease_ms = req.lease.as_millis().to_string();
        let token = token.to_string();
        let args = [req.owner.as_str(), lease_ms.as_str(), token.as_str()];
        let sent = Instant::now();
        let what = "renewing the lock";
        let keys = k.extend();
        let call = Call::new(&SCRIPTS.ops(req.kind).extend, &keys, &args, what);
        let count = self.count(req, call).await;
        if count.yes >= self.quorum {
            // Counted from the send, as the core counts it (the renewed shares' leases started
            // no earlier than that).
            let elapsed = sent.elapsed();
            if let Some(valid_for) = quorum::validity(req.lease.duration(), elapsed) {
                return Ok(Some(valid_for));
            }
            // Renewed on a majority, but too late to count: the watchdog tries again.
            return Err(self.answered_too_late(req, what, elapsed));
        }
        if count.no > self.masters.len() - self.quorum {
            // A majority no longer lists this holding: it cannot be renewed on a majority.
            return Ok(None);
        }
        Err(self.no_quorum(req, what, count))
    }

    /// One round of release on every master at once: freed if a majority freed it.
    async fn release_once(&self, req: &LockRequest, token: Option<FencingToken>) -> Result<bool> {
        let k = Keys::new(&self.prefix, req.kind, &req.name);
        let named = named_holding(req.owner.as_str(), token);
        let args = [named.as_str()];
        let what = "releasing the lock";
        let keys = k.release();
        let call = Call::new(&SCRIPTS.ops(req.kind).release, &keys, &args, what);
        let count = self.count(req, call).await;
        if count.yes >= self.quorum {
            return Ok(true);
        }
        if count.yes + count.no < self.quorum {
            return Err(self.no_quorum(req, what, count));
        }
        Ok(false)
    }
}

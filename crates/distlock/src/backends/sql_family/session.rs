//! Session locks (`?lock=session`), written once for the SQL stores: a lock held by a connection
//! that does nothing else while the lock is held (`pg_advisory_lock`, `GET_LOCK`). The server
//! frees the lock when that connection ends, so a crashed holder frees it at once, with no lease
//! to guess. Each store supplies a [`SessionConn`]: try, unlock, ping, and "the socket ended".
//!
//! Each holding lives in its own task that owns the connection. The task tries the lock itself,
//! so a caller that gives up mid-request cannot leave a locked connection behind: the task sees
//! nobody took its answer and unlocks. While holding, the task waits for the connection to end
//! (where the driver can tell) and pings it every [`SessionConn::PING_EVERY`] (a ping that fails
//! or takes longer than the response timeout counts as the end); either way the holding's lost
//! signal fires.
//!
//! Holdings belong to this client: the same owner asking again gets its holding confirmed (same
//! token; re-entry is counted by the core); another client presenting the owner token is
//! "another session" and is refused. Release and the liveness check name the holding by its
//! token, so a guard of an earlier holding never touches a later one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot, watch};

use crate::backend::{Attempt, Hold, LockRequest, Signal};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockName, OwnerToken};

/// Why a session lock can keep no lease (for [`crate::Capabilities::sessions`]): a paused holder
/// keeps its connection open, and with it the lock, for as long as it is paused.
pub(crate) const NO_LEASE: &str = "they are held as long as their connection, which a paused \
     holder keeps open, so nothing ends a stopped holder's holding by time; for leases, use the \
     lease mode (the URL without ?lock=session)";

/// What the refusal of a fair lock, read-write lock or semaphore in session mode adds (for
/// [`crate::Capabilities::refusing_with`]): the setting that has them.
pub(crate) const SESSION_KINDS: &str = "with ?lock=session (a session lock is an exclusive lock \
     of one connection); use ?lock=lease, the default, which has fair locks, read-write locks \
     and semaphores";

/// Where session connections come from.
#[async_trait]
pub(crate) trait SessionPool: Send + Sync + 'static {
    /// The connection type.
    type Conn: SessionConn;
    /// The backend's name, for errors.
    const BACKEND: &'static str;
    /// A connection that holds no lock.
    async fn open(&self) -> Result<Self::Conn>;
}

/// One connection that can hold one session lock.
#[async_trait]
pub(crate) trait SessionConn: Send + 'static {
    /// How often a holding pings its connection.
    const PING_EVERY: Duration;
    /// Tries the lock of `name` without waiting; on success, draws its fencing token.
    async fn take(&mut self, name: &LockName) -> Result<Option<FencingToken>>;
    /// Frees the lock; `Ok(true)` if this connection held it. On `Err` the connection is
    /// discarded.
    async fn unlock(&mut self, name: &LockName) -> Result<bool>;
    /// One round trip; true if the connection answered.
    async fn ping(&mut self) -> bool;
    /// Resolves when the connection ended by itself; never, if the driver cannot tell (pings
    /// then find out). Must be cancel-safe: it is raced against commands.
    async fn ended(&mut self);
    /// The holding ended without a confirmed unlock: the connection must not be reused.
    fn discard(self);
}

/// How long a ping may take before the holding counts as lost, unless
/// [`crate::Options::response_timeout`] says otherwise.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How many connections one try may use when they die under it.
const TAKE_TRIES: u32 = 3;
/// The longest a waiter sleeps between tries: a holder that crashed sends no notice.
const RETRY_AFTER: Duration = Duration::from_millis(250);

enum Command {
    /// Unlock and end; answers whether the lock was still held.
    Release(oneshot::Sender<bool>),
    /// Answers whether the connection still answers.
    Ping(oneshot::Sender<bool>),
}

struct Holding {
    owner: OwnerToken,
    token: FencingToken,
    commands: mpsc::Sender<Command>,
    lost: watch::Receiver<bool>,
}

impl Holding {
    fn lost_signal(&self) -> Signal {
        let mut lost = self.lost.clone();
        Box::pin(async move {
            // An ended task without a verdict (released, backend dropped) never fires.
            if lost.wait_for(|l| *l).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The session holdings of one client.
pub(crate) struct Sessions<P> {
    pool: P,
    ping_timeout: Duration,
    held: Mutex<HashMap<LockName, Holding>>,
}

impl<P: SessionPool> Sessions<P> {
    pub(crate) fn new(pool: P, options: &crate::Options) -> Self {
        Sessions {
            pool,
            ping_timeout: options.response_timeout.unwrap_or(PING_TIMEOUT),
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Holding>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        {
            let mut held = self.held();
            if let Some(h) = held.get_mut(&req.name) {
                if *h.lost.borrow() {
                    held.remove(&req.name);
                } else if h.owner == req.owner {
                    return Ok(Attempt::Acquired {
                        token: h.token,
                        hold: Hold::Session {
                            ended: h.lost_signal(),
                            valid_until: None,
                        },
                    });
                } else {
                    return Ok(Attempt::Held {
                        retry_after: Some(RETRY_AFTER),
                    });
                }
            }
        }
        // A connection that dies while it tries the lock takes whatever it got with it (the
        // server frees a session's locks when the session ends), so the try is safe to repeat on
        // a fresh connection: a store restart or a killed connection costs a retry, not the
        // caller's wait. A store that cannot be reached at all fails at `open`.
        let mut tries = 0;
        let (token, commands_tx, lost) = loop {
            tries += 1;
            let conn = self.pool.open().await?;
            let (answer_tx, answer) = oneshot::channel();
            let (commands_tx, commands) = mpsc::channel(4);
            let (lost_tx, lost) = watch::channel(false);
            tokio::spawn(hold(
                conn,
                req.name.clone(),
                answer_tx,
                commands,
                lost_tx,
                self.ping_timeout,
            ));
            let answer = answer.await.map_err(|_| {
                Error::new(ErrorKind::Connection, "the session task ended unexpectedly")
                    .with_backend(P::BACKEND)
            })?;
            match answer {
                Err(e) if e.kind() == ErrorKind::Connection && tries < TAKE_TRIES => {
                    tracing::debug!(lock = %req.name, "session lock try lost its connection, trying again: {e}");
                }
                answer => break (answer?, commands_tx, lost),
            }
        };
        let Some(token) = token else {
            return Ok(Attempt::Held {
                retry_after: Some(RETRY_AFTER),
            });
        };
        let holding = Holding {
            owner: req.owner.clone(),
            token,
            commands: commands_tx,
            lost,
        };
        let session_lost = holding.lost_signal();
        self.held().insert(req.name.clone(), holding);
        Ok(Attempt::Acquired {
            token,
            hold: Hold::Session {
                ended: session_lost,
                valid_until: None,
            },
        })
    }

    /// Whether `req.owner` still holds the lock with the holding `token` names, through a live
    /// connection (asks the connection).
    pub(crate) async fn still_held(&self, req: &LockRequest, token: FencingToken) -> Result<bool> {
        let commands = {
            let held = self.held();
            match held.get(&req.name) {
                Some(h) if h.owner == req.owner && h.token == token && !*h.lost.borrow() => {
                    h.commands.clone()
                }
                _ => return Ok(false),
            }
        };
        let (tx, rx) = oneshot::channel();
        if commands.send(Command::Ping(tx)).await.is_err() {
            return Ok(false);
        }
        Ok(rx.await.unwrap_or(false))
    }

    /// Frees the lock if `req.owner` holds it (with the holding `token` names, when given).
    pub(crate) async fn release(
        &self,
        req: &LockRequest,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        let commands = {
            let mut held = self.held();
            match held.get(&req.name) {
                Some(h) if h.owner == req.owner && token.is_none_or(|t| t == h.token) => {
                    held.remove(&req.name).map(|h| h.commands)
                }
                _ => None,
            }
        };
        let Some(commands) = commands else {
            return Ok(false);
        };
        let (tx, rx) = oneshot::channel();
        if commands.send(Command::Release(tx)).await.is_err() {
            return Ok(false);
        }
        Ok(rx.await.unwrap_or(false))
    }
}

/// One holding, from the try to the unlock.
async fn hold<C: SessionConn>(
    mut conn: C,
    name: LockName,
    answer: oneshot::Sender<Result<Option<FencingToken>>>,
    mut commands: mpsc::Receiver<Command>,
    lost: watch::Sender<bool>,
    ping_timeout: Duration,
) {
    let took = conn.take(&name).await;
    let held = matches!(took, Ok(Some(_)));
    if took.is_err() {
        let _ = answer.send(took);
        conn.discard();
        return;
    }
    if answer.send(took).is_err() && held {
        // The caller gave up while we were taking the lock: nobody will release it.
        release(conn, &name, ping_timeout).await;
        return;
    }
    if !held {
        return;
    }
    let mut next_ping = tokio::time::Instant::now() + C::PING_EVERY;
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Release(reply)) => {
                    let _ = reply.send(release(conn, &name, ping_timeout).await);
                    return;
                }
                Some(Command::Ping(reply)) => {
                    let alive = ping(&mut conn, ping_timeout).await;
                    let _ = reply.send(alive);
                    if !alive {
                        break;
                    }
                    next_ping = tokio::time::Instant::now() + C::PING_EVERY;
                }
                // The backend is gone: free the lock with it.
                None => {
                    release(conn, &name, ping_timeout).await;
                    return;
                }
            },
            () = conn.ended() => break,
            () = tokio::time::sleep_until(next_ping) => {
                if !ping(&mut conn, ping_timeout).await {
                    break;
                }
                next_ping = tokio::time::Instant::now() + C::PING_EVERY;
            }
        }
    }
    let _ = lost.send(true);
    conn.discard();
}

async fn ping<C: SessionConn>(conn: &mut C, timeout: Duration) -> bool {
    matches!(tokio::time::timeout(timeout, conn.ping()).await, Ok(true))
}

/// Unlocks and gives the connection back, or throws it away if the unlock did not answer (a
/// closed connection frees the lock too).
async fn release<C: SessionConn>(mut conn: C, name: &LockName, timeout: Duration) -> bool {
    match tokio::time::timeout(timeout, conn.unlock(name)).await {
        Ok(Ok(released)) => released,
        Ok(Err(e)) => {
            tracing::debug!(lock = %name, "session unlock failed: {e}");
            conn.discard();
            false
        }
        Err(_) => {
            conn.discard();
            false
        }
    }
}

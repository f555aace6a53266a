//! Session locks (`?lock=session`): `pg_try_advisory_lock` on a connection that does nothing else
//! while the lock is held. PostgreSQL frees the lock when that connection ends, so a crashed
//! holder frees it at once, with no lease to guess.
//!
//! Each holding lives in its own task that owns the connection. The task tries the lock itself,
//! so a caller that gives up mid-request cannot leave a locked connection behind: the task sees
//! nobody took its answer and unlocks. While holding, the task waits on the connection's socket
//! (a server-side kill or a closed socket is noticed at once) and pings it every
//! [`PING_EVERY`] (a silent network is noticed within [`PING_TIMEOUT`] more); either way the
//! holding's lost signal fires.
//!
//! Holdings belong to this client: re-entry (same owner) counts holds here; another client
//! presenting the owner token is "another session" and is refused.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::{PgListener, PgPool};
use tokio::sync::{mpsc, oneshot, watch};

use crate::backend::{Attempt, LockRequest, Released, Signal};
use crate::backends::sqlx_error::from_sqlx;
use crate::error::{Error, ErrorKind, Result};
use crate::types::{FencingToken, LockName, OwnerToken};

/// How often an idle holding checks that its connection still answers.
const PING_EVERY: Duration = Duration::from_secs(2);
/// How long a ping may take before the holding counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
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
    holds: u32,
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
pub(super) struct Sessions {
    pool: PgPool,
    held: Mutex<HashMap<LockName, Holding>>,
}

impl Sessions {
    pub(super) fn new(pool: PgPool) -> Self {
        Sessions {
            pool,
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, Holding>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) async fn try_take(&self, req: &LockRequest) -> Result<Attempt> {
        {
            let mut held = self.held();
            if let Some(h) = held.get_mut(&req.name) {
                if *h.lost.borrow() {
                    held.remove(&req.name);
                } else if h.owner == req.owner {
                    h.holds += 1;
                    return Ok(Attempt::Acquired {
                        token: h.token,
                        session_lost: Some(h.lost_signal()),
                    });
                } else {
                    return Ok(Attempt::Held {
                        retry_after: Some(RETRY_AFTER),
                    });
                }
            }
        }
        let mut conn = PgListener::connect_with(&self.pool)
            .await
            .map_err(|e| from_sqlx(super::NAME, "opening a session connection", e))?;
        conn.eager_reconnect(false);
        let (answer_tx, answer) = oneshot::channel();
        let (commands_tx, commands) = mpsc::channel(4);
        let (lost_tx, lost) = watch::channel(false);
        tokio::spawn(hold(conn, req.name.clone(), answer_tx, commands, lost_tx));
        let token = answer.await.map_err(|_| {
            Error::new(ErrorKind::Connection, "the session task ended unexpectedly")
                .with_backend(super::NAME)
        })??;
        let Some(token) = token else {
            return Ok(Attempt::Held {
                retry_after: Some(RETRY_AFTER),
            });
        };
        let holding = Holding {
            owner: req.owner.clone(),
            holds: 1,
            token,
            commands: commands_tx,
            lost,
        };
        let session_lost = Some(holding.lost_signal());
        self.held().insert(req.name.clone(), holding);
        Ok(Attempt::Acquired {
            token,
            session_lost,
        })
    }

    /// Whether `req.owner` still holds the lock through a live connection (asks the connection).
    pub(super) async fn still_held(&self, req: &LockRequest) -> Result<bool> {
        let commands = {
            let held = self.held();
            match held.get(&req.name) {
                Some(h) if h.owner == req.owner && !*h.lost.borrow() => h.commands.clone(),
                _ => return Ok(false),
            }
        };
        let (tx, rx) = oneshot::channel();
        if commands.send(Command::Ping(tx)).await.is_err() {
            return Ok(false);
        }
        Ok(rx.await.unwrap_or(false))
    }

    pub(super) async fn release(&self, req: &LockRequest) -> Result<Released> {
        let commands = {
            let mut held = self.held();
            match held.get_mut(&req.name) {
                Some(h) if h.owner == req.owner => {
                    if h.holds > 1 && !*h.lost.borrow() {
                        h.holds -= 1;
                        return Ok(Released::StillHeld { holds: h.holds });
                    }
                    held.remove(&req.name).map(|h| h.commands)
                }
                _ => None,
            }
        };
        let Some(commands) = commands else {
            return Ok(Released::NotHeld);
        };
        let (tx, rx) = oneshot::channel();
        if commands.send(Command::Release(tx)).await.is_err() {
            return Ok(Released::NotHeld);
        }
        Ok(if rx.await.unwrap_or(false) {
            Released::Freed
        } else {
            Released::NotHeld
        })
    }
}

/// One holding, from the try to the unlock.
async fn hold(
    mut conn: PgListener,
    name: LockName,
    answer: oneshot::Sender<Result<Option<FencingToken>>>,
    mut commands: mpsc::Receiver<Command>,
    lost: watch::Sender<bool>,
) {
    let took = sqlx::query(include_str!("sql/session_take.sql"))
        .bind(name.as_str())
        .fetch_one(&mut conn)
        .await
        .map(|row| row.get::<Option<i64>, _>(0).map(|t| FencingToken(t as u64)))
        .map_err(|e| from_sqlx(super::NAME, "trying the advisory lock", e));
    let held = matches!(took, Ok(Some(_)));
    if answer.send(took).is_err() && held {
        // The caller gave up while we were taking the lock: nobody will release it.
        unlock(&mut conn, &name).await;
        return;
    }
    if !held {
        return;
    }
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Release(reply)) => {
                    let _ = reply.send(unlock(&mut conn, &name).await);
                    return;
                }
                Some(Command::Ping(reply)) => {
                    let alive = ping(&mut conn).await;
                    let _ = reply.send(alive);
                    if !alive {
                        let _ = lost.send(true);
                        return;
                    }
                }
                // The backend forgot this holding (dropped): free the lock with it.
                None => {
                    unlock(&mut conn, &name).await;
                    return;
                }
            },
            // Nothing is LISTENed on this connection: it only returns when the socket ends
            // (or with a stray notice, which changes nothing).
            received = conn.try_recv() => {
                if !matches!(received, Ok(Some(_))) {
                    let _ = lost.send(true);
                    return;
                }
            }
            () = tokio::time::sleep(PING_EVERY) => {
                if !ping(&mut conn).await {
                    let _ = lost.send(true);
                    return;
                }
            }
        }
    }
}

async fn ping(conn: &mut PgListener) -> bool {
    let probe = sqlx::query("SELECT 1").execute(&mut *conn);
    matches!(tokio::time::timeout(PING_TIMEOUT, probe).await, Ok(Ok(_)))
}

/// Frees the lock; true if this connection held it. The statement fails only when the connection
/// broke, and the pool then discards the connection, which frees the lock too.
async fn unlock(conn: &mut PgListener, name: &LockName) -> bool {
    let released = sqlx::query(include_str!("sql/session_release.sql"))
        .bind(name.as_str())
        .fetch_one(&mut *conn)
        .await;
    match released {
        Ok(row) => row.get::<bool, _>(0),
        Err(e) => {
            tracing::debug!(lock = %name, "session unlock failed: {e}");
            false
        }
    }
}

//! The fair lock, the read-write lock and the semaphore on the SQL stores (lease mode,
//! `sql/schema_flavours.sql`), written once over a dialect's statements ([`FlavourSql`]).
//!
//! Each judging step is one transaction: lock the synchronizer's row, drop lapsed holdings and
//! places, read the rest, decide by the shared rules ([`flavour_rules::decide`]), write. A
//! release, a leaver, a resize and a forced release tell the synchronizer's waiters
//! ([`Dialect::changed`]: PostgreSQL notifies at commit; MySQL cannot, and each client watches
//! a synchronizer its waiters wait for with one poller instead). A transaction the database
//! picks as a deadlock victim runs again.
//!
//! Every transaction runs whole in a task of its own ([`tx::finished`]), so a caller that is
//! dropped mid-step never leaves a transaction open on a pooled connection.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::{Pool, Transaction};

use super::dialect::{Conn, Dialect, Picked, Read, Runs, SqlResult, Statement, Wants};
use super::inspect::{self, Columns};
use super::{err, retried};
use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::{
    self, Decision, Held, Outcome, Peek, Place, Side,
};
use crate::backends::client_rules::flavour_waiter::FlavourSteps;
use crate::error::Result;
use crate::sqlx_support::tx;
use crate::status::{ForcedRelease, Holding, LockStatus};
use crate::types::{FencingToken, LockName};

/// A synchronizer's live holdings and line, as a judging step reads them.
pub(crate) struct Line {
    pub(crate) holdings: Vec<Held>,
    /// By arrival.
    pub(crate) places: Vec<Place>,
    /// Whether lapsed places were dropped on the way: one may have been first in line, and the
    /// new first must hear of it.
    pub(crate) places_lapsed: bool,
}

/// One side of one synchronizer: where a step acts.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) side: Side,
    pub(crate) name: &'a str,
}

impl At<'_> {
    /// The synchronizer's family, a column of every flavour table.
    pub(crate) fn family(self) -> &'static str {
        self.side.family()
    }

    /// The key the synchronizer's changes are told and watched under.
    pub(crate) fn key(self) -> String {
        format!("f:{}:{}", self.family(), self.name)
    }
}

/// One owner's holding, or place in line, at a synchronizer: a request and its side.
#[derive(Clone, Copy)]
pub(crate) struct Mine<'a> {
    pub(crate) req: &'a LockRequest,
    pub(crate) side: Side,
}

impl<'a> Mine<'a> {
    pub(crate) fn at(self) -> At<'a> {
        At {
            side: self.side,
            name: self.req.name.as_str(),
        }
    }

    pub(crate) fn owner(self) -> &'a str {
        self.req.owner.as_str()
    }
}

/// A dialect's statements for the flavours. Tokens are the BIGINT the tables keep; a holding's
/// side is stored as [`Side::column`].
#[async_trait]
pub(crate) trait FlavourSql: Dialect {
    /// `flavour_peek.sql` with the synchronizer bound: its holdings, line and row as one plain
    /// read shows them, locking nothing (rows decoded by [`state`]).
    fn peek(at: At<'_>) -> Statement<'_, Self>;

    /// `flavour_lock.sql` with the synchronizer bound: locks its row for the rest of the
    /// transaction and answers it (last token, semaphore size), or no row if it is missing
    /// (then [`create_row`](FlavourSql::create_row) makes it and the step begins again).
    fn lock_row(at: At<'_>) -> Statement<'_, Self>;

    /// Makes the synchronizer's row, outside any step's transaction.
    async fn create_row(pool: &Pool<Self::Db>, at: At<'_>) -> SqlResult<()>;

    /// Sets a semaphore's size (its first take, or a resize).
    async fn set_size(conn: &mut Conn<Self>, at: At<'_>, size: i64) -> SqlResult<()>;

    /// Drops the lapsed holdings and places and reads the live ones.
    async fn line(conn: &mut Conn<Self>, at: At<'_>) -> SqlResult<Line>;

    /// Restarts the lease of the owner's holding with `token`; `true` if it was there.
    async fn renew(conn: &mut Conn<Self>, mine: Mine<'_>, token: i64) -> SqlResult<bool>;

    /// Writes a new holding for the owner (the step judged it may take): the owner leaves the
    /// line, the synchronizer's next token is drawn. Answers the token.
    async fn hold(conn: &mut Conn<Self>, mine: Mine<'_>) -> SqlResult<i64>;

    /// Puts the owner in line (at the end) or keeps its place (moves its deadline on).
    async fn join(conn: &mut Conn<Self>, mine: Mine<'_>) -> SqlResult<()>;

    /// Draws the synchronizer's next fencing token.
    async fn next_token(conn: &mut Conn<Self>, at: At<'_>) -> SqlResult<i64>;

    /// Removes every holding of the side, whoever holds it: answers the live ones removed.
    async fn remove_all(conn: &mut Conn<Self>, at: At<'_>) -> SqlResult<Vec<Holding>>;

    /// Frees the owner's holding (only the one with `token`, when given) and tells the
    /// waiters; `true` if it was there.
    async fn free(pool: &Pool<Self::Db>, mine: Mine<'_>, token: Option<i64>) -> SqlResult<bool>;

    /// Gives up the owner's place in line and tells the others.
    async fn leave(pool: &Pool<Self::Db>, mine: Mine<'_>) -> SqlResult<()>;
}

/// The flavours of one client, over the backend's pool.
pub(crate) struct Flavours<D: Dialect> {
    pool: Pool<D::Db>,
    dialect: Arc<D>,
}

impl<D: FlavourSql> Flavours<D> {
    pub(crate) fn new(pool: Pool<D::Db>, dialect: Arc<D>) -> Self {
        Flavours { pool, dialect }
    }

    /// A take of `req`'s side (`queue`: a waiter keeping its place in line).
    pub(crate) async fn take_side(
        &self,
        req: &LockRequest,
        side: Side,
        queue: bool,
    ) -> Result<Attempt> {
        let what = "taking the lock";
        // Woken (or polling) waiters read first, and only one that may get in (or must write its
        // place) queues on the row lock.
        let mine = Mine { req, side };
        let seen = peek::<D>(&self.pool, mine.at())
            .await
            .map_err(err::<D>(what))?;
        if let Some(left_ms) = seen.blocked(req, side, queue) {
            return Ok(Attempt::Held {
                retry_after: Some(std::time::Duration::from_millis(left_ms.max(1) as u64)),
            });
        }
        let (pool, owned) = (self.pool.clone(), req.clone());
        let outcome = tx::finished(async move {
            let mine = Mine { req: &owned, side };
            retried::<D, _, _, _>(what, || take::<D>(&pool, mine, queue)).await
        })
        .await?;
        flavour_rules::attempt(D::NAME, outcome, req)
    }

    pub(crate) async fn extend(
        &self,
        req: &LockRequest,
        side: Side,
        token: FencingToken,
    ) -> Result<bool> {
        let what = "extending the lease";
        let mut conn = self.pool.acquire().await.map_err(err::<D>(what))?;
        D::renew(&mut conn, Mine { req, side }, token.get() as i64)
            .await
            .map_err(err::<D>(what))
    }

    pub(crate) async fn release(
        &self,
        req: &LockRequest,
        side: Side,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        D::free(
            &self.pool,
            Mine { req, side },
            token.map(|t| t.get() as i64),
        )
        .await
        .map_err(err::<D>("releasing the lock"))
    }

    /// The size the semaphore keeps (`None`: never used) and its permits held now.
    pub(crate) async fn count(&self, name: &LockName) -> Result<(Option<i64>, i64)> {
        let (pool, name) = (self.pool.clone(), name.as_str().to_owned());
        tx::finished(async move {
            let at = At {
                side: Side::Permit,
                name: &name,
            };
            retried::<D, _, _, _>("counting permits", || async {
                let mut tx = pool.begin().await?;
                // A semaphore without a row was never used: nothing to lock, nothing held.
                let Some(size) = lock::<D>(&mut tx, at).await? else {
                    return Ok((None, 0));
                };
                let held = D::line(&mut tx, at).await?.holdings.len();
                tx.commit().await?;
                Ok((size, held as i64))
            })
            .await
        })
        .await
    }

    pub(crate) async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let (pool, name) = (self.pool.clone(), name.as_str().to_owned());
        tx::finished(async move {
            let at = At {
                side: Side::Permit,
                name: &name,
            };
            retried::<D, _, _, _>("changing a semaphore's size", || async {
                let (mut tx, had) = locked::<D>(&pool, at).await?;
                D::set_size(&mut tx, at, i64::from(permits)).await?;
                // A larger size may let waiters in.
                D::changed(&mut tx, &at.key()).await?;
                tx.commit().await?;
                Ok(had.and_then(|had| u32::try_from(had).ok()))
            })
            .await
        })
        .await
    }

    pub(crate) async fn force_release(&self, name: &LockName, side: Side) -> Result<ForcedRelease> {
        let (pool, name) = (self.pool.clone(), name.as_str().to_owned());
        tx::finished(async move {
            let at = At { side, name: &name };
            retried::<D, _, _, _>("releasing the lock by force", || async {
                let (mut tx, _) = locked::<D>(&pool, at).await?;
                let removed = D::remove_all(&mut tx, at).await?;
                // Drawn under the row lock: every later holding's token is above the removed.
                let fence = D::next_token(&mut tx, at).await?;
                D::changed(&mut tx, &at.key()).await?;
                tx.commit().await?;
                Ok(ForcedRelease::new(removed, inspect::token(fence)))
            })
            .await
        })
        .await
    }

    /// The live holdings and lines of the synchronizers `picked`.
    pub(crate) async fn status(&self, picked: Picked<'_>) -> Result<Vec<LockStatus>> {
        let [holdings, lines] = D::SHOWN;
        let shown = async {
            let shown = D::Db::rows(&self.pool, D::select(holdings, picked)).await?;
            let lines = D::Db::rows(&self.pool, D::select(lines, picked)).await?;
            Ok(flavour_rules::statuses(
                inspect::shown(shown)?,
                inspect::waiting(lines)?,
            ))
        };
        shown.await.map_err(err::<D>("reading the locks"))
    }
}

/// The synchronizer as one plain read shows it, locking nothing.
async fn peek<D: FlavourSql>(pool: &Pool<D::Db>, at: At<'_>) -> SqlResult<Peek> {
    Ok(state(D::Db::rows(pool, D::peek(at)).await?)?.0)
}

/// Locks the synchronizer's row for the rest of the transaction `conn` is in: its semaphore
/// size, or `None` if the row is missing.
async fn lock<D: FlavourSql>(conn: &mut Conn<D>, at: At<'_>) -> SqlResult<Option<Option<i64>>> {
    let rows = D::Db::rows_in(conn, D::lock_row(at)).await?;
    rows.first().map(|row| row.int(1)).transpose()
}

/// A transaction holding the synchronizer's row lock, and its semaphore size. A dialect whose
/// lock does not make a missing row has it made first, outside the transaction (inserting
/// inside it would deadlock two steps on InnoDB's gap locks).
async fn locked<D: FlavourSql>(
    pool: &Pool<D::Db>,
    at: At<'_>,
) -> SqlResult<(Transaction<'static, D::Db>, Option<i64>)> {
    // At most once more: the first run made the row.
    for _ in 0..2 {
        let mut tx = pool.begin().await?;
        if let Some(size) = lock::<D>(&mut tx, at).await? {
            return Ok((tx, size));
        }
        drop(tx);
        D::create_row(pool, at).await?;
    }
    Err(sqlx::Error::RowNotFound)
}

/// One take, in its own transaction.
async fn take<D: FlavourSql>(
    pool: &Pool<D::Db>,
    mine: Mine<'_>,
    queue: bool,
) -> SqlResult<Outcome> {
    let (req, side, at) = (mine.req, mine.side, mine.at());
    let (mut tx, kept) = locked::<D>(pool, at).await?;
    let mut size = 0;
    if side == Side::Permit {
        let asked = flavour_rules::asked_permits(req);
        size = match flavour_rules::semaphore_size(kept, asked, req.follows_resize) {
            Ok(size) => size,
            Err(kept) => return Ok(Outcome::SizeDiffers(kept)),
        };
        if kept.is_none() {
            // The first take sets the size, for everyone after.
            D::set_size(&mut tx, at, size).await?;
        }
    }
    let line = D::line(&mut tx, at).await?;
    let decision = flavour_rules::decide(
        side,
        mine.owner(),
        &line.holdings,
        &line.places,
        size,
        queue,
    );
    let outcome = match decision {
        Decision::Keep(token) => {
            D::renew(&mut tx, mine, token).await?;
            Outcome::Taken(token)
        }
        Decision::Take => Outcome::Taken(D::hold(&mut tx, mine).await?),
        Decision::Blocked { left_ms, join } => {
            if join {
                D::join(&mut tx, mine).await?;
            }
            if line.places_lapsed {
                // A lapsed place may have been first in line: the new first must hear of it.
                D::changed(&mut tx, &at.key()).await?;
            }
            Outcome::Held(left_ms)
        }
        Decision::Upgrade => Outcome::Upgrade,
    };
    tx.commit().await?;
    Ok(outcome)
}

#[async_trait]
impl<D: FlavourSql> FlavourSteps for Flavours<D> {
    async fn take(&self, req: &LockRequest, side: Side, queue: bool) -> Result<Attempt> {
        self.take_side(req, side, queue).await
    }

    async fn leave(&self, req: &LockRequest, side: Side) -> Result<()> {
        D::leave(&self.pool, Mine { req, side })
            .await
            .map_err(err::<D>("leaving the wait"))
    }

    async fn watch(&self, req: &LockRequest, side: Side) -> Result<Wakeups> {
        // What a poller reads, for a dialect that polls: one read for all of this client's
        // waiters there, waking the ones a change lets in.
        let (pool, name) = (self.pool.clone(), req.name.as_str().to_owned());
        let read: Read<Peek> = Arc::new(move || {
            let (pool, name) = (pool.clone(), name.clone());
            Box::pin(async move {
                let seen = peek::<D>(&pool, At { side, name: &name })
                    .await
                    .map_err(err::<D>("taking the lock"))?;
                Ok((seen.fingerprint(), seen))
            })
        });
        let owned = req.clone();
        let wants: Wants<Peek> = Box::new(move |seen: &Peek| seen.lets_in(&owned, side));
        let key = Mine { req, side }.at().key();
        self.dialect.watch_synchronizer(key, read, wants).await
    }

    fn watched(&self) -> bool {
        !D::NOTIFIES
    }
}

/// Decodes the rows of `flavour_peek.sql` and PostgreSQL's `flavour_state.sql`, each
/// (what, side, owner, number, left_ms): holdings ('h': token, lease left), places in line by
/// seq ('w': seq, place left), the synchronizer's row ('s': its semaphore size); answers them
/// and the number of an 'x' row (places dropped on the way).
pub(crate) fn state(rows: Vec<impl Columns>) -> SqlResult<(Peek, i64)> {
    let mut peek = Peek::default();
    let mut dropped = 0;
    for row in &rows {
        let owner = || Ok::<_, sqlx::Error>(row.text(2)?.unwrap_or_default());
        let number = || Ok::<_, sqlx::Error>(row.int(3)?.unwrap_or_default());
        let left_ms = || Ok::<_, sqlx::Error>(row.int(4)?.unwrap_or_default());
        match row.text(0)?.as_deref() {
            Some("h") => {
                if let Some(side) = Side::from_column(&row.text(1)?.unwrap_or_default()) {
                    peek.holdings.push(Held {
                        side,
                        owner: owner()?,
                        token: number()?,
                        left_ms: left_ms()?,
                    });
                }
            }
            Some("w") => peek.line.push(Place {
                owner: owner()?,
                left_ms: left_ms()?,
            }),
            Some("x") => dropped = number()?,
            _ => peek.row = Some(row.int(3)?),
        }
    }
    Ok((peek, dropped))
}

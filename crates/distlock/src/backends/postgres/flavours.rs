//! The fair lock, the read-write lock and the semaphore in PostgreSQL (lease mode,
//! `sql/schema_flavours.sql`). Each judging step is one transaction: lock the synchronizer's
//! row (`flavour_lock.sql`), drop lapsed holdings and places, read the rest, decide by the
//! shared rules ([`flavour_rules::decide`]), write. A release, a leaver and a resize notify
//! `distlock_changed` with the key `f:FAMILY:NAME` in their transaction; waiters listen on the
//! client's one listening connection (`notify.rs`).
//!
//! Every transaction runs whole in a task of its own ([`tx::finished`]), so a caller that
//! is dropped mid-step never leaves a transaction open on a pooled connection.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgPool, Postgres};

use super::notify::Releases;
use super::{NAME, err};
use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::{
    self, Decision, Held, Outcome, Peek, Place, Shown, Side, WAITER_TTL_MS,
};
use crate::backends::client_rules::flavour_waiter::FlavourSteps;
use crate::backends::sql_family::inspect as sql_inspect;
use crate::sqlx_support::tx;
use crate::error::Result;
use crate::status::{ForcedRelease, Holder, Holding, LockStatus};
use crate::types::{FencingToken, LockName};

type Tx = sqlx::Transaction<'static, Postgres>;

/// The steps, over the backend's pool and listening connection.
pub(super) struct PgFlavours {
    pub(super) pool: PgPool,
    pub(super) releases: Arc<Releases>,
}

/// The notice key of a synchronizer.
fn key(side: Side, name: &str) -> String {
    format!("f:{}:{name}", side.family())
}

/// Locks the synchronizer's row: its last token and a semaphore's size.
async fn lock_row(tx: &mut Tx, side: Side, name: &str) -> Result<(i64, Option<i32>)> {
    let row = sqlx::query(include_str!("sql/flavour_lock.sql"))
        .bind(side.family())
        .bind(name)
        .fetch_one(&mut **tx)
        .await
        .map_err(err("locking the synchronizer's row"))?;
    Ok((row.get(0), row.get(1)))
}

async fn next_token(tx: &mut Tx, side: Side, name: &str) -> Result<i64> {
    sqlx::query_scalar(include_str!("sql/flavour_next_token.sql"))
        .bind(side.family())
        .bind(name)
        .fetch_one(&mut **tx)
        .await
        .map_err(err("drawing a fencing token"))
}

/// Reads rows of `flavour_peek.sql` or `flavour_state.sql`: holdings ('h'), places in line by
/// seq ('w'), the synchronizer's row ('s'); answers them and the count of an 'x' row (places
/// dropped).
fn parse_state(rows: &[sqlx::postgres::PgRow]) -> (Peek, i64) {
    let mut peek = Peek::default();
    let mut dropped = 0;
    for row in rows {
        match row.get::<&str, _>(0) {
            "h" => peek.holdings.extend(
                Side::from_column(row.get::<Option<&str>, _>(1).unwrap_or_default()).map(|side| {
                    Held {
                        side,
                        owner: row.get::<Option<String>, _>(2).unwrap_or_default(),
                        token: row.get::<Option<i64>, _>(3).unwrap_or_default(),
                        left_ms: row.get::<Option<i64>, _>(4).unwrap_or_default(),
                    }
                }),
            ),
            "w" => peek.line.push(Place {
                owner: row.get::<Option<String>, _>(2).unwrap_or_default(),
                left_ms: row.get::<Option<i64>, _>(4).unwrap_or_default(),
            }),
            "x" => dropped = row.get::<Option<i64>, _>(3).unwrap_or_default(),
            _ => peek.row = Some(row.get::<Option<i64>, _>(3)),
        }
    }
    (peek, dropped)
}

/// The synchronizer as the snapshot of one statement shows it, locking nothing.
async fn peek(pool: &PgPool, side: Side, name: &str) -> Result<Peek> {
    let rows = sqlx::query(include_str!("sql/flavour_peek.sql"))
        .bind(side.family())
        .bind(name)
        .fetch_all(pool)
        .await
        .map_err(err("taking the lock"))?;
    Ok(parse_state(&rows).0)
}

/// One take, in its own transaction.
async fn take(pool: PgPool, req: LockRequest, side: Side, queue: bool) -> Result<Outcome> {
    let what = "taking the lock";
    let (family, name, owner) = (side.family(), req.name.as_str(), req.owner.as_str());
    let mut tx = pool.begin().await.map_err(err(what))?;
    let (_, permits) = lock_row(&mut tx, side, name).await?;
    let mut size = 0;
    if side == Side::Permit {
        let asked = flavour_rules::asked_permits(&req);
        size = match flavour_rules::semaphore_size(
            permits.map(i64::from),
            asked,
            req.follows_resize,
        ) {
            Ok(size) => size,
            Err(kept) => return Ok(Outcome::SizeDiffers(kept)),
        };
        if permits.is_none() {
            // The first take sets the size, for everyone after.
            sqlx::query(include_str!("sql/sem_set.sql"))
                .bind(family)
                .bind(name)
                .bind(size as i32)
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
        }
    }
    let rows = sqlx::query(include_str!("sql/flavour_state.sql"))
        .bind(family)
        .bind(name)
        .fetch_all(&mut *tx)
        .await
        .map_err(err(what))?;
    let (Peek { holdings, line, .. }, lapsed_places) = parse_state(&rows);
    let lease_ms = req.lease.as_millis() as i64;
    let outcome = match flavour_rules::decide(side, owner, &holdings, &line, size, queue) {
        Decision::Keep(token) => {
            sqlx::query(include_str!("sql/flavour_extend.sql"))
                .bind(family)
                .bind(name)
                .bind(side.column())
                .bind(owner)
                .bind(token)
                .bind(lease_ms)
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            Outcome::Taken(token)
        }
        Decision::Take => {
            let token = sqlx::query_scalar(include_str!("sql/flavour_take.sql"))
                .bind(family)
                .bind(name)
                .bind(side.column())
                .bind(owner)
                .bind(lease_ms)
                .bind(Holder::this_process_record())
                .fetch_one(&mut *tx)
                .await
                .map_err(err(what))?;
            Outcome::Taken(token)
        }
        Decision::Blocked { left_ms, join } => {
            if join {
                sqlx::query(include_str!("sql/waiter_join.sql"))
                    .bind(family)
                    .bind(name)
                    .bind(owner)
                    .bind(WAITER_TTL_MS)
                    .execute(&mut *tx)
                    .await
                    .map_err(err(what))?;
            }
            if lapsed_places > 0 {
                // A lapsed place may have been first in line: the new first must hear of it.
                sqlx::query(include_str!("sql/notify_changed.sql"))
                    .bind(key(side, name))
                    .execute(&mut *tx)
                    .await
                    .map_err(err(what))?;
            }
            Outcome::Held(left_ms)
        }
        Decision::Upgrade => Outcome::Upgrade,
    };
    tx.commit().await.map_err(err(what))?;
    Ok(outcome)
}

impl PgFlavours {
    /// A take of `req`'s side (`queue`: a waiter keeping its place in line).
    pub(super) async fn take_side(
        &self,
        req: &LockRequest,
        side: Side,
        queue: bool,
    ) -> Result<Attempt> {
        // A crowd of woken waiters reads first, and only one that may get in (or must write its
        // place) queues on the row lock.
        let seen = peek(&self.pool, side, req.name.as_str()).await?;
        if let Some(left_ms) = seen.blocked(req, side, queue) {
            return Ok(Attempt::Held {
                retry_after: Some(std::time::Duration::from_millis(left_ms.max(1) as u64)),
            });
        }
        let (pool, owned) = (self.pool.clone(), req.clone());
        let outcome = tx::finished(take(pool, owned, side, queue)).await?;
        flavour_rules::attempt(NAME, outcome, req)
    }

    pub(super) async fn extend(
        &self,
        req: &LockRequest,
        side: Side,
        token: FencingToken,
    ) -> Result<bool> {
        let done = sqlx::query(include_str!("sql/flavour_extend.sql"))
            .bind(side.family())
            .bind(req.name.as_str())
            .bind(side.column())
            .bind(req.owner.as_str())
            .bind(token.get() as i64)
            .bind(req.lease.as_millis() as i64)
            .execute(&self.pool)
            .await
            .map_err(err("extending the lease"))?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn release(
        &self,
        req: &LockRequest,
        side: Side,
        token: Option<FencingToken>,
    ) -> Result<bool> {
        let freed = sqlx::query(include_str!("sql/flavour_release.sql"))
            .bind(side.family())
            .bind(req.name.as_str())
            .bind(side.column())
            .bind(req.owner.as_str())
            .bind(token.map(|t| t.get() as i64))
            .bind(key(side, req.name.as_str()))
            .fetch_optional(&self.pool)
            .await
            .map_err(err("releasing the lock"))?;
        Ok(freed.is_some())
    }

    /// The size the semaphore keeps (`None`: never used) and its permits held now.
    pub(super) async fn count(&self, name: &LockName) -> Result<(Option<i64>, i64)> {
        let what = "counting permits";
        let pool = self.pool.clone();
        let name = name.as_str().to_string();
        tx::finished(async move {
            let side = Side::Permit;
            let mut tx = pool.begin().await.map_err(err(what))?;
            let (_, permits) = lock_row(&mut tx, side, &name).await?;
            let rows = sqlx::query(include_str!("sql/flavour_state.sql"))
                .bind(side.family())
                .bind(&name)
                .fetch_all(&mut *tx)
                .await
                .map_err(err(what))?;
            let held = parse_state(&rows).0.holdings.len();
            tx.commit().await.map_err(err(what))?;
            Ok((permits.map(i64::from), held as i64))
        })
        .await
    }

    pub(super) async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let what = "changing a semaphore's size";
        let pool = self.pool.clone();
        let name = name.as_str().to_string();
        tx::finished(async move {
            let side = Side::Permit;
            let mut tx = pool.begin().await.map_err(err(what))?;
            let (_, had) = lock_row(&mut tx, side, &name).await?;
            sqlx::query(include_str!("sql/sem_set.sql"))
                .bind(side.family())
                .bind(&name)
                .bind(i32::try_from(permits).unwrap_or(i32::MAX))
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            // A larger size may let waiters in.
            sqlx::query(include_str!("sql/notify_changed.sql"))
                .bind(key(side, &name))
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            tx.commit().await.map_err(err(what))?;
            Ok(had.and_then(|had| u32::try_from(had).ok()))
        })
        .await
    }

    pub(super) async fn force_release(&self, name: &LockName, side: Side) -> Result<ForcedRelease> {
        let what = "releasing the lock by force";
        let pool = self.pool.clone();
        let name = name.as_str().to_string();
        tx::finished(async move {
            let mut tx = pool.begin().await.map_err(err(what))?;
            lock_row(&mut tx, side, &name).await?;
            let removed = sqlx::query(include_str!("sql/flavour_force.sql"))
                .bind(side.family())
                .bind(&name)
                .bind(side.column())
                .fetch_all(&mut *tx)
                .await
                .map_err(err(what))?
                .iter()
                .map(sql_inspect::removed_holding)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(err(what))?
                .into_iter()
                .flatten()
                .collect();
            let fence = next_token(&mut tx, side, &name).await?;
            sqlx::query(include_str!("sql/notify_changed.sql"))
                .bind(key(side, &name))
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            tx.commit().await.map_err(err(what))?;
            Ok(ForcedRelease::new(removed, sql_inspect::token(fence)))
        })
        .await
    }

    /// The live holdings and lines of the synchronizers selected.
    pub(super) async fn status(&self, name: Option<&str>, prefix: &str) -> Result<Vec<LockStatus>> {
        let what = "reading the locks";
        let shown = sqlx::query(include_str!("sql/flavour_status.sql"))
            .bind(name)
            .bind(prefix)
            .fetch_all(&self.pool)
            .await
            .map_err(err(what))?
            .iter()
            .filter_map(|row| {
                let side = Side::from_column(row.get::<&str, _>(1))?;
                let holding = Holding::new(sql_inspect::token(row.get(2)))
                    .holder_record(row.get::<Option<&str>, _>(3))
                    .since_unix_ms(row.get(4))
                    .lease_left_ms(row.get(5));
                Some(Shown {
                    side,
                    name: row.get(0),
                    holding,
                    last_token: row.get(6),
                    permits: row
                        .get::<Option<i32>, _>(7)
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or(0),
                })
            })
            .collect();
        let waiters = sqlx::query(include_str!("sql/waiter_status.sql"))
            .bind(name)
            .bind(prefix)
            .fetch_all(&self.pool)
            .await
            .map_err(err(what))?
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2)))
            .collect();
        Ok(flavour_rules::statuses(shown, waiters))
    }
}

#[async_trait]
impl FlavourSteps for PgFlavours {
    async fn take(&self, req: &LockRequest, side: Side, queue: bool) -> Result<Attempt> {
        self.take_side(req, side, queue).await
    }

    async fn leave(&self, req: &LockRequest, side: Side) -> Result<()> {
        sqlx::query(include_str!("sql/waiter_leave.sql"))
            .bind(side.family())
            .bind(req.name.as_str())
            .bind(req.owner.as_str())
            .bind(key(side, req.name.as_str()))
            .fetch_optional(&self.pool)
            .await
            .map_err(err("leaving the wait"))?;
        Ok(())
    }

    async fn watch(&self, req: &LockRequest, side: Side) -> Result<Wakeups> {
        self.releases
            .watch_changes(key(side, req.name.as_str()))
            .await
    }
}

//! The fair lock, the read-write lock and the semaphore in MySQL / MariaDB (lease mode,
//! `sql/schema_flavours.sql`). Each judging step is one transaction: lock the synchronizer's
//! row (`flavour_lock.sql`, created beforehand outside the transaction so two steps never
//! deadlock on it), drop lapsed holdings and places, read the rest, decide by the shared rules
//! ([`flavour_rules::decide`]), write. MySQL cannot notify a client: each client watches a
//! synchronizer its waiters wait for with one poller ([`PollWatch`]), which wakes them when its
//! holdings or line change; a transaction InnoDB picks as a deadlock victim runs again.
//!
//! Every transaction runs whole in a task of its own ([`tx::finished`]), so a caller that
//! is dropped mid-step never leaves a transaction open on a pooled connection.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlRow};

use super::sync::{DEADLOCK_RETRIES, is_deadlock};
use super::{NAME, err};
use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::{
    self, Decision, Held, Outcome, Peek, Place, Shown, Side, WAITER_TTL_MS,
};
use super::poll_watch::PollWatch;
use crate::backends::client_rules::flavour_waiter::FlavourSteps;
use crate::backends::sql_family::inspect as sql_inspect;
use crate::sqlx_support::tx;
use crate::error::Result;
use crate::status::{ForcedRelease, Holder, Holding, LockStatus};
use crate::types::{FencingToken, LockName};

/// The steps, over the backend's pool.
pub(super) struct MysqlFlavours {
    pub(super) pool: MySqlPool,
    /// This client's watches of the synchronizers its waiters wait for.
    pub(super) watches: PollWatch<Peek>,
}

/// Runs `step` (one transaction) again while InnoDB picks it as a deadlock victim.
async fn retried<T, F, Fut>(what: &'static str, mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut tries = 0;
    loop {
        match step().await {
            Err(e) if is_deadlock(&e) && tries < DEADLOCK_RETRIES => tries += 1,
            done => return done.map_err(err(what)),
        }
    }
}

/// Locks the synchronizer's row, creating it first (autocommit) if it is missing: its
/// semaphore size. Answers `None` if it had to create it: the caller begins again.
async fn lock_row(
    tx: &mut MySqlConnection,
    side: Side,
    name: &[u8],
) -> std::result::Result<Option<Option<i64>>, sqlx::Error> {
    let row = sqlx::query(include_str!("sql/flavour_lock.sql"))
        .bind(side.family())
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(row.map(|row| row.get(1)))
}

async fn create_row(pool: &MySqlPool, side: Side, name: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query(include_str!("sql/flavour_create.sql"))
        .bind(side.family())
        .bind(name)
        .execute(pool)
        .await?;
    Ok(())
}

async fn next_token(
    tx: &mut MySqlConnection,
    side: Side,
    name: &[u8],
) -> std::result::Result<i64, sqlx::Error> {
    let done = sqlx::query(include_str!("sql/flavour_next_token.sql"))
        .bind(side.family())
        .bind(name)
        .execute(&mut *tx)
        .await?;
    Ok(done.last_insert_id() as i64)
}

/// The synchronizer's rows as one plain read shows them, locking nothing (`flavour_peek.sql`).
async fn peek_rows(pool: &MySqlPool, side: Side, name: &[u8]) -> Result<Vec<MySqlRow>> {
    let family = side.family();
    sqlx::query(include_str!("sql/flavour_peek.sql"))
        .bind(family)
        .bind(name)
        .bind(family)
        .bind(name)
        .bind(family)
        .bind(name)
        .fetch_all(pool)
        .await
        .map_err(err("taking the lock"))
}

/// The synchronizer as one plain read shows it, locking nothing.
async fn peek(pool: &MySqlPool, side: Side, name: &[u8]) -> Result<Peek> {
    let rows = peek_rows(pool, side, name).await?;
    let mut peek = Peek::default();
    for row in &rows {
        let what: String = row.get(0);
        match what.as_str() {
            "h" => peek.holdings.extend(
                Side::from_column(&row.get::<Option<String>, _>(1).unwrap_or_default()).map(
                    |side| Held {
                        side,
                        owner: row.get::<Option<String>, _>(2).unwrap_or_default(),
                        token: row.get::<Option<i64>, _>(3).unwrap_or_default(),
                        left_ms: row.get::<Option<i64>, _>(4).unwrap_or_default(),
                    },
                ),
            ),
            "w" => peek.line.push(Place {
                owner: row.get::<Option<String>, _>(2).unwrap_or_default(),
                left_ms: row.get::<Option<i64>, _>(4).unwrap_or_default(),
            }),
            _ => peek.row = Some(row.get::<Option<i64>, _>(3)),
        }
    }
    Ok(peek)
}

/// One take, in its own transaction (`None`: the row had to be created first; run again).
async fn try_take(
    pool: &MySqlPool,
    req: &LockRequest,
    side: Side,
    queue: bool,
) -> std::result::Result<Option<Outcome>, sqlx::Error> {
    let (family, name, owner) = (
        side.family(),
        req.name.as_str().as_bytes(),
        req.owner.as_str(),
    );
    let mut tx = pool.begin().await?;
    let Some(permits) = lock_row(&mut tx, side, name).await? else {
        drop(tx);
        create_row(pool, side, name).await?;
        return Ok(None);
    };
    let mut size = 0;
    if side == Side::Permit {
        let asked = flavour_rules::asked_permits(req);
        size = match flavour_rules::semaphore_size(permits, asked, req.follows_resize) {
            Ok(size) => size,
            Err(kept) => return Ok(Some(Outcome::SizeDiffers(kept))),
        };
        if permits.is_none() {
            // The first take sets the size, for everyone after.
            sqlx::query(include_str!("sql/sem_set.sql"))
                .bind(size)
                .bind(family)
                .bind(name)
                .execute(&mut *tx)
                .await?;
        }
    }
    sqlx::query(include_str!("sql/flavour_purge.sql"))
        .bind(family)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    sqlx::query(include_str!("sql/waiter_purge.sql"))
        .bind(family)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    let holdings = sqlx::query(include_str!("sql/flavour_holdings.sql"))
        .bind(family)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .filter_map(|row| {
            Some(Held {
                side: Side::from_column(row.get::<&str, _>(0))?,
                owner: row.get(1),
                token: row.get(2),
                left_ms: row.get(3),
            })
        })
        .collect::<Vec<_>>();
    let line = sqlx::query(include_str!("sql/waiter_line.sql"))
        .bind(family)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|row| Place {
            owner: row.get(0),
            left_ms: row.get(1),
        })
        .collect::<Vec<_>>();
    let lease_us = req.lease.duration().as_micros() as u64;
    let outcome = match flavour_rules::decide(side, owner, &holdings, &line, size, queue) {
        Decision::Keep(token) => {
            sqlx::query(include_str!("sql/flavour_extend.sql"))
                .bind(lease_us)
                .bind(family)
                .bind(name)
                .bind(side.column())
                .bind(owner)
                .bind(token)
                .execute(&mut *tx)
                .await?;
            Outcome::Taken(token)
        }
        Decision::Take => {
            if side.queues() {
                sqlx::query(include_str!("sql/waiter_delete.sql"))
                    .bind(family)
                    .bind(name)
                    .bind(owner)
                    .execute(&mut *tx)
                    .await?;
            }
            let token = next_token(&mut tx, side, name).await?;
            sqlx::query(include_str!("sql/flavour_insert.sql"))
                .bind(family)
                .bind(name)
                .bind(side.column())
                .bind(owner)
                .bind(token)
                .bind(lease_us)
                .bind(Holder::this_process_record())
                .execute(&mut *tx)
                .await?;
            Outcome::Taken(token)
        }
        Decision::Blocked { left_ms, join } => {
            if join {
                sqlx::query(include_str!("sql/waiter_join.sql"))
                    .bind(family)
                    .bind(name)
                    .bind(owner)
                    .bind(WAITER_TTL_MS * 1000)
                    .bind(family)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
            }
            Outcome::Held(left_ms)
        }
        Decision::Upgrade => Outcome::Upgrade,
    };
    tx.commit().await?;
    Ok(Some(outcome))
}

impl MysqlFlavours {
    /// A take of `req`'s side (`queue`: a waiter keeping its place in line).
    pub(super) async fn take_side(
        &self,
        req: &LockRequest,
        side: Side,
        queue: bool,
    ) -> Result<Attempt> {
        // Polling waiters read first, and only one that may get in (or must write its place)
        // queues on the row lock.
        let seen = peek(&self.pool, side, req.name.as_str().as_bytes()).await?;
        if let Some(left_ms) = seen.blocked(req, side, queue) {
            return Ok(Attempt::Held {
                retry_after: Some(std::time::Duration::from_millis(left_ms.max(1) as u64)),
            });
        }
        let (pool, owned) = (self.pool.clone(), req.clone());
        let outcome = tx::finished(async move {
            retried("taking the lock", || async {
                // At most once more: the first run created the row.
                match try_take(&pool, &owned, side, queue).await? {
                    Some(outcome) => Ok(outcome),
                    None => try_take(&pool, &owned, side, queue)
                        .await?
                        .ok_or(sqlx::Error::RowNotFound),
                }
            })
            .await
        })
        .await?;
        flavour_rules::attempt(NAME, outcome, req)
    }

    pub(super) async fn extend(
        &self,
        req: &LockRequest,
        side: Side,
        token: FencingToken,
    ) -> Result<bool> {
        let done = sqlx::query(include_str!("sql/flavour_extend.sql"))
            .bind(req.lease.duration().as_micros() as u64)
            .bind(side.family())
            .bind(req.name.as_str().as_bytes())
            .bind(side.column())
            .bind(req.owner.as_str())
            .bind(token.get() as i64)
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
        let token = token.map(|t| t.get() as i64);
        let done = sqlx::query(include_str!("sql/flavour_release.sql"))
            .bind(side.family())
            .bind(req.name.as_str().as_bytes())
            .bind(side.column())
            .bind(req.owner.as_str())
            .bind(token)
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(err("releasing the lock"))?;
        Ok(done.rows_affected() == 1)
    }

    /// The size the semaphore keeps (`None`: never used) and its permits held now.
    pub(super) async fn count(&self, name: &LockName) -> Result<(Option<i64>, i64)> {
        let pool = self.pool.clone();
        let name = name.as_str().as_bytes().to_vec();
        tx::finished(async move {
            let side = Side::Permit;
            let mut tx = pool.begin().await.map_err(err("counting permits"))?;
            let size = sqlx::query(include_str!("sql/flavour_lock.sql"))
                .bind(side.family())
                .bind(&name[..])
                .fetch_optional(&mut *tx)
                .await
                .map_err(err("counting permits"))?
                .and_then(|row| row.get::<Option<i64>, _>(1));
            let held = sqlx::query(include_str!("sql/flavour_holdings.sql"))
                .bind(side.family())
                .bind(&name[..])
                .fetch_all(&mut *tx)
                .await
                .map_err(err("counting permits"))?
                .iter()
                .filter(|row| row.get::<i64, _>(3) > 0)
                .count();
            tx.commit().await.map_err(err("counting permits"))?;
            Ok((size, held as i64))
        })
        .await
    }

    pub(super) async fn set_permits(&self, name: &LockName, permits: u32) -> Result<Option<u32>> {
        let pool = self.pool.clone();
        let name = name.as_str().as_bytes().to_vec();
        tx::finished(async move {
            retried("changing a semaphore's size", || async {
                let side = Side::Permit;
                create_row(&pool, side, &name).await?;
                let mut tx = pool.begin().await?;
                let had = lock_row(&mut tx, side, &name)
                    .await?
                    .ok_or(sqlx::Error::RowNotFound)?;
                sqlx::query(include_str!("sql/sem_set.sql"))
                    .bind(permits)
                    .bind(side.family())
                    .bind(&name[..])
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(had.and_then(|had| u32::try_from(had).ok()))
            })
            .await
        })
        .await
    }

    pub(super) async fn force_release(&self, name: &LockName, side: Side) -> Result<ForcedRelease> {
        let pool = self.pool.clone();
        let name = name.as_str().as_bytes().to_vec();
        tx::finished(async move {
            retried("releasing the lock by force", || async {
                create_row(&pool, side, &name).await?;
                let mut tx = pool.begin().await?;
                lock_row(&mut tx, side, &name)
                    .await?
                    .ok_or(sqlx::Error::RowNotFound)?;
                let removed = sqlx::query(include_str!("sql/flavour_force_select.sql"))
                    .bind(side.family())
                    .bind(&name[..])
                    .bind(side.column())
                    .fetch_all(&mut *tx)
                    .await?
                    .iter()
                    .map(sql_inspect::removed_holding)
                    .collect::<std::result::Result<Vec<_>, _>>()?
                    .into_iter()
                    .flatten()
                    .collect();
                sqlx::query(include_str!("sql/flavour_force_delete.sql"))
                    .bind(side.family())
                    .bind(&name[..])
                    .bind(side.column())
                    .execute(&mut *tx)
                    .await?;
                let fence = next_token(&mut tx, side, &name).await?;
                tx.commit().await?;
                Ok(ForcedRelease::new(removed, sql_inspect::token(fence)))
            })
            .await
        })
        .await
    }

    /// The live holdings and lines of the synchronizers selected.
    pub(super) async fn status(&self, name: Option<&str>, prefix: &str) -> Result<Vec<LockStatus>> {
        let what = "reading the locks";
        let name = name.map(str::as_bytes);
        let shown = sqlx::query(include_str!("sql/flavour_status.sql"))
            .bind(name)
            .bind(name)
            .bind(prefix.as_bytes())
            .bind(prefix.as_bytes())
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
                        .get::<Option<i64>, _>(7)
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or(0),
                })
            })
            .collect();
        let waiters = sqlx::query(include_str!("sql/waiter_status.sql"))
            .bind(name)
            .bind(name)
            .bind(prefix.as_bytes())
            .bind(prefix.as_bytes())
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
impl FlavourSteps for MysqlFlavours {
    async fn take(&self, req: &LockRequest, side: Side, queue: bool) -> Result<Attempt> {
        self.take_side(req, side, queue).await
    }

    async fn leave(&self, req: &LockRequest, side: Side) -> Result<()> {
        sqlx::query(include_str!("sql/waiter_delete.sql"))
            .bind(side.family())
            .bind(req.name.as_str().as_bytes())
            .bind(req.owner.as_str())
            .execute(&self.pool)
            .await
            .map_err(err("leaving the wait"))?;
        Ok(())
    }

    async fn watch(&self, req: &LockRequest, side: Side) -> Result<Wakeups> {
        // MySQL cannot notify: one poller per synchronizer in this client watches for all of
        // its waiters there, and wakes the ones a change lets in.
        let (pool, name) = (self.pool.clone(), req.name.as_str().as_bytes().to_vec());
        let key = format!("{}:{}", side.family(), req.name.as_str());
        let read = Arc::new(move || {
            let (pool, name) = (pool.clone(), name.clone());
            Box::pin(async move {
                let seen = peek(&pool, side, &name).await?;
                Ok((seen.fingerprint(), seen))
            }) as _
        });
        let req = req.clone();
        let wants = Box::new(move |seen: &Peek| seen.lets_in(&req, side));
        Ok(self.watches.subscribe(key, read, wants))
    }

    fn watched(&self) -> bool {
        true
    }
}

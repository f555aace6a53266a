//! Election records and count-down latches in MySQL / MariaDB (`sql/elect_*.sql`,
//! `sql/latch_*.sql`): each write locks its row (`SELECT … FOR UPDATE`), decides, and writes in
//! one transaction. MySQL cannot notify a client, so watchers poll (the core's bounded jittered
//! backoff, 10 to 250 ms).

use std::time::Duration;

use sqlx::Row;
use sqlx::mysql::{MySqlPool, MySqlRow};

use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry};
use crate::backends::client_rules::records::{self, Step};
use crate::sqlx_support::error::from_sqlx;
use crate::error::Result;
use crate::types::{FencingToken, LockName};

fn err(what: &str) -> impl FnOnce(sqlx::Error) -> crate::error::Error + '_ {
    move |e| from_sqlx(super::NAME, what, e)
}

/// How many times a transaction InnoDB chose as a deadlock victim is run again.
pub(super) const DEADLOCK_RETRIES: u32 = 5;

pub(super) fn is_deadlock(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40001")
}

/// Locks the row `lock` selects `FOR UPDATE`, creating it with `create` first if it is missing.
/// The row is selected first so that an existing row is never touched by the `INSERT IGNORE`
/// (whose shared lock on a duplicate, upgraded by the `FOR UPDATE`, deadlocks two writers); two
/// writers creating the same new row at once can still deadlock, and the caller runs the
/// transaction again.
async fn lock_row(
    tx: &mut sqlx::MySqlConnection,
    name: &[u8],
    create: &'static str,
    lock: &'static str,
) -> Result<MySqlRow, sqlx::Error> {
    if let Some(row) = sqlx::query(lock)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
    {
        return Ok(row);
    }
    sqlx::query(create).bind(name).execute(&mut *tx).await?;
    sqlx::query(lock).bind(name).fetch_one(&mut *tx).await
}

/// See [`crate::Backend::elect_write`].
pub(super) async fn elect_write(
    pool: &MySqlPool,
    election: &LockName,
    term: FencingToken,
    value: Option<&str>,
    ttl: Duration,
) -> Result<bool> {
    let mut tries = 0;
    loop {
        match try_elect_write(pool, election, term, value, ttl).await {
            Err(e) if is_deadlock(&e) && tries < DEADLOCK_RETRIES => tries += 1,
            done => return done.map_err(err("writing the election record")),
        }
    }
}

async fn try_elect_write(
    pool: &MySqlPool,
    election: &LockName,
    term: FencingToken,
    value: Option<&str>,
    ttl: Duration,
) -> Result<bool, sqlx::Error> {
    let name = election.as_str().as_bytes();
    let term = term.get();
    let mut tx = pool.begin().await?;
    let row = lock_row(
        &mut tx,
        name,
        include_str!("sql/elect_create.sql"),
        include_str!("sql/elect_lock_row.sql"),
    )
    .await?;
    let (seq, max_term, old): (u64, u64, Option<String>) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    // A resigned record lapses at once.
    let live_us = if value.is_some() {
        ttl.as_micros() as u64
    } else {
        0
    };
    let step = records::step(
        seq as i64,
        max_term as i64,
        old.as_deref(),
        term as i64,
        value,
    );
    let seq = match step {
        Step::Refuse => return Ok(false),
        Step::Refresh => seq,
        Step::Append { seq } => {
            let seq = seq as u64;
            sqlx::query(include_str!("sql/elect_append.sql"))
                .bind(name)
                .bind(seq)
                .bind(term)
                .bind(value)
                .execute(&mut *tx)
                .await?;
            sqlx::query(include_str!("sql/elect_trim.sql"))
                .bind(name)
                .bind(seq.saturating_sub(ELECTION_LOG_KEEP))
                .execute(&mut *tx)
                .await?;
            seq
        }
    };
    sqlx::query(include_str!("sql/elect_update.sql"))
        .bind(seq)
        .bind(term)
        .bind(value)
        .bind(live_us)
        .bind(name)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

fn entries(rows: Vec<MySqlRow>, what: &str) -> Result<Vec<ElectionEntry>> {
    rows.into_iter()
        .map(|row| {
            Ok(ElectionEntry::new(
                row.try_get::<u64, _>(0).map_err(err(what))?,
                FencingToken(row.try_get::<u64, _>(1).map_err(err(what))?),
                row.try_get(2).map_err(err(what))?,
            ))
        })
        .collect()
}

/// See [`crate::Backend::elect_current`].
pub(super) async fn elect_current(
    pool: &MySqlPool,
    election: &LockName,
) -> Result<Option<ElectionEntry>> {
    let rows = sqlx::query(include_str!("sql/elect_current.sql"))
        .bind(election.as_str().as_bytes())
        .fetch_all(pool)
        .await
        .map_err(err("reading the election record"))?;
    Ok(entries(rows, "reading the election record")?.pop())
}

/// See [`crate::Backend::elect_log`].
pub(super) async fn elect_log(
    pool: &MySqlPool,
    election: &LockName,
    after: Option<u64>,
) -> Result<Vec<ElectionEntry>> {
    let name = election.as_str().as_bytes();
    let query = match after {
        None => sqlx::query(include_str!("sql/elect_latest.sql")).bind(name),
        Some(after) => sqlx::query(include_str!("sql/elect_log.sql"))
            .bind(name)
            .bind(after),
    };
    let rows = query
        .fetch_all(pool)
        .await
        .map_err(err("reading the election log"))?;
    entries(rows, "reading the election log")
}

/// Locks the latch's row (made at 0 if missing), lets `change` decide from the count what to
/// write, writes it, commits, and answers what `change` answered.
async fn latch_change<T>(
    pool: &MySqlPool,
    latch: &LockName,
    what: &str,
    change: impl Fn(u64) -> (Option<u64>, T),
) -> Result<T> {
    let mut tries = 0;
    loop {
        match try_latch_change(pool, latch, &change).await {
            Err(e) if is_deadlock(&e) && tries < DEADLOCK_RETRIES => tries += 1,
            done => return done.map_err(err(what)),
        }
    }
}

async fn try_latch_change<T>(
    pool: &MySqlPool,
    latch: &LockName,
    change: &impl Fn(u64) -> (Option<u64>, T),
) -> Result<T, sqlx::Error> {
    let name = latch.as_str().as_bytes();
    let mut tx = pool.begin().await?;
    let count: u64 = lock_row(
        &mut tx,
        name,
        include_str!("sql/latch_create.sql"),
        include_str!("sql/latch_lock_row.sql"),
    )
    .await?
    .try_get(0)?;
    let (write, answer) = change(count);
    if let Some(count) = write {
        sqlx::query(include_str!("sql/latch_write.sql"))
            .bind(count)
            .bind(name)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(answer)
}

/// See [`crate::Backend::latch_set`].
pub(super) async fn latch_set(pool: &MySqlPool, latch: &LockName, count: u64) -> Result<bool> {
    latch_change(pool, latch, "setting the latch", |now| {
        if now == 0 {
            (Some(count), true)
        } else {
            (None, false)
        }
    })
    .await
}

/// See [`crate::Backend::latch_count_down`].
pub(super) async fn latch_count_down(pool: &MySqlPool, latch: &LockName) -> Result<u64> {
    latch_change(pool, latch, "counting the latch down", |now| {
        if now == 0 {
            (None, 0)
        } else {
            (Some(now - 1), now - 1)
        }
    })
    .await
}

/// See [`crate::Backend::latch_count`].
pub(super) async fn latch_count(pool: &MySqlPool, latch: &LockName) -> Result<u64> {
    let count = sqlx::query(include_str!("sql/latch_count.sql"))
        .bind(latch.as_str().as_bytes())
        .fetch_optional(pool)
        .await
        .map_err(err("reading the latch"))?
        .map(|row| row.try_get::<u64, _>(0))
        .transpose()
        .map_err(err("reading the latch"))?;
    Ok(count.unwrap_or(0))
}

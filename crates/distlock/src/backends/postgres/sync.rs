//! Election records and count-down latches in PostgreSQL (`sql/elect_*.sql`, `sql/latch_*.sql`):
//! an election's write locks its row, decides ([`records::step`]), writes, appends to the log and
//! notifies in one transaction; the latch's steps are one statement each (plus the notice when
//! it reaches 0, in the same transaction). Watchers wake on `LISTEN distlock_changed`.

use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgPool;

use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry};
use crate::backends::client_rules::records::{self, Step};
use crate::sqlx_support::error::from_sqlx;
use crate::error::Result;
use crate::types::{FencingToken, LockName};

fn err(what: &str) -> impl FnOnce(sqlx::Error) -> crate::error::Error + '_ {
    move |e| from_sqlx(super::NAME, what, e)
}

/// See [`crate::Backend::elect_write`].
pub(super) async fn elect_write(
    pool: &PgPool,
    election: &LockName,
    term: FencingToken,
    value: Option<&str>,
    ttl: Duration,
) -> Result<bool> {
    let what = "writing the election record";
    let name = election.as_str();
    let term = term.get() as i64;
    let mut tx = pool.begin().await.map_err(err(what))?;
    sqlx::query(include_str!("sql/elect_create.sql"))
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(err(what))?;
    let row = sqlx::query(include_str!("sql/elect_lock_row.sql"))
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .map_err(err(what))?;
    let (seq, max_term, old): (i64, i64, Option<String>) = (
        row.try_get(0).map_err(err(what))?,
        row.try_get(1).map_err(err(what))?,
        row.try_get(2).map_err(err(what))?,
    );
    // A resigned record lapses at once.
    let live_ms = if value.is_some() {
        ttl.as_millis() as i64
    } else {
        0
    };
    let seq = match records::step(seq, max_term, old.as_deref(), term, value) {
        Step::Refuse => return Ok(false),
        Step::Refresh => seq,
        Step::Append { seq } => {
            sqlx::query(include_str!("sql/elect_append.sql"))
                .bind(name)
                .bind(seq)
                .bind(term)
                .bind(value)
                .bind(ELECTION_LOG_KEEP as i64)
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            sqlx::query(include_str!("sql/notify_changed.sql"))
                .bind(format!("e:{name}"))
                .execute(&mut *tx)
                .await
                .map_err(err(what))?;
            seq
        }
    };
    sqlx::query(include_str!("sql/elect_update.sql"))
        .bind(name)
        .bind(seq)
        .bind(term)
        .bind(value)
        .bind(live_ms)
        .execute(&mut *tx)
        .await
        .map_err(err(what))?;
    tx.commit().await.map_err(err(what))?;
    Ok(true)
}

fn entries(rows: Vec<sqlx::postgres::PgRow>, what: &str) -> Result<Vec<ElectionEntry>> {
    rows.into_iter()
        .map(|row| {
            Ok(ElectionEntry::new(
                row.try_get::<i64, _>(0).map_err(err(what))? as u64,
                FencingToken(row.try_get::<i64, _>(1).map_err(err(what))? as u64),
                row.try_get(2).map_err(err(what))?,
            ))
        })
        .collect()
}

/// See [`crate::Backend::elect_current`].
pub(super) async fn elect_current(
    pool: &PgPool,
    election: &LockName,
) -> Result<Option<ElectionEntry>> {
    let rows = sqlx::query(include_str!("sql/elect_current.sql"))
        .bind(election.as_str())
        .fetch_all(pool)
        .await
        .map_err(err("reading the election record"))?;
    Ok(entries(rows, "reading the election record")?.pop())
}

/// See [`crate::Backend::elect_log`].
pub(super) async fn elect_log(
    pool: &PgPool,
    election: &LockName,
    after: Option<u64>,
) -> Result<Vec<ElectionEntry>> {
    let query = match after {
        None => sqlx::query(include_str!("sql/elect_latest.sql")).bind(election.as_str()),
        Some(after) => sqlx::query(include_str!("sql/elect_log.sql"))
            .bind(election.as_str())
            .bind(after as i64),
    };
    let rows = query
        .fetch_all(pool)
        .await
        .map_err(err("reading the election log"))?;
    entries(rows, "reading the election log")
}

/// See [`crate::Backend::latch_set`].
pub(super) async fn latch_set(pool: &PgPool, latch: &LockName, count: u64) -> Result<bool> {
    let set = sqlx::query(include_str!("sql/latch_set.sql"))
        .bind(latch.as_str())
        .bind(count as i64)
        .fetch_optional(pool)
        .await
        .map_err(err("setting the latch"))?;
    Ok(set.is_some())
}

/// See [`crate::Backend::latch_count_down`].
pub(super) async fn latch_count_down(pool: &PgPool, latch: &LockName) -> Result<u64> {
    let what = "counting the latch down";
    let mut tx = pool.begin().await.map_err(err(what))?;
    let after = sqlx::query(include_str!("sql/latch_down.sql"))
        .bind(latch.as_str())
        .fetch_optional(&mut *tx)
        .await
        .map_err(err(what))?
        .map(|row| row.try_get::<i64, _>(0))
        .transpose()
        .map_err(err(what))?;
    if after == Some(0) {
        sqlx::query(include_str!("sql/notify_changed.sql"))
            .bind(format!("l:{}", latch.as_str()))
            .execute(&mut *tx)
            .await
            .map_err(err(what))?;
    }
    tx.commit().await.map_err(err(what))?;
    Ok(after.unwrap_or(0).max(0) as u64)
}

/// See [`crate::Backend::latch_count`].
pub(super) async fn latch_count(pool: &PgPool, latch: &LockName) -> Result<u64> {
    let count = sqlx::query(include_str!("sql/latch_count.sql"))
        .bind(latch.as_str())
        .fetch_optional(pool)
        .await
        .map_err(err("reading the latch"))?
        .map(|row| row.try_get::<i64, _>(0))
        .transpose()
        .map_err(err("reading the latch"))?;
    Ok(count.unwrap_or(0).max(0) as u64)
}

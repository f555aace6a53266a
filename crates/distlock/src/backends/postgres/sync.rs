//! PostgreSQL's statements for election records and count-down latches (`sql/elect_*.sql`,
//! `sql/latch_*.sql`); the transactions that run them are the SQL family's
//! (`backends/sql_family/sync.rs`). The election's row is made empty by a statement of its own
//! before it is locked (a `SELECT` in the same statement would not see the new row), appending
//! drops the old entries in the same statement, and each latch step is one statement that
//! judges the count itself.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgConnection, PgPool};

use super::PostgresDialect;
use crate::backend::ELECTION_LOG_KEEP;
use crate::backends::sql_family::sync::{Entry, Record, SyncSql};
use crate::backends::sql_family::{SqlResult, Statement};

#[async_trait]
impl SyncSql for PostgresDialect {
    async fn elect_lock(conn: &mut PgConnection, election: &str) -> SqlResult<Record> {
        sqlx::query(include_str!("sql/elect_create.sql"))
            .bind(election)
            .execute(&mut *conn)
            .await?;
        let lock = sqlx::query(include_str!("sql/elect_lock_row.sql")).bind(election);
        let row = lock.fetch_one(conn).await?;
        Ok(Record {
            seq: row.try_get(0)?,
            max_term: row.try_get(1)?,
            value: row.try_get(2)?,
        })
    }

    async fn elect_append(conn: &mut PgConnection, entry: &Entry<'_>) -> SqlResult<()> {
        let keep = ELECTION_LOG_KEEP as i64;
        let append = written(include_str!("sql/elect_append.sql"), entry).bind(keep);
        append.execute(conn).await.map(drop)
    }

    async fn elect_update(conn: &mut PgConnection, entry: &Entry<'_>) -> SqlResult<()> {
        let live_ms = entry.live.as_millis() as i64;
        let update = written(include_str!("sql/elect_update.sql"), entry).bind(live_ms);
        update.execute(conn).await.map(drop)
    }

    async fn latch_set(conn: &mut PgConnection, latch: &str, count: u64) -> SqlResult<bool> {
        // The statement judges: it sets only a latch at 0 (or new), and answers a row if so.
        let set = sqlx::query(include_str!("sql/latch_set.sql"))
            .bind(latch)
            .bind(count as i64)
            .fetch_optional(conn)
            .await?;
        Ok(set.is_some())
    }

    async fn latch_count_down(conn: &mut PgConnection, latch: &str) -> SqlResult<Option<u64>> {
        let down = sqlx::query(include_str!("sql/latch_down.sql")).bind(latch);
        let after = down.fetch_optional(conn).await?;
        Ok(after
            .map(|row| row.try_get::<i64, _>(0))
            .transpose()?
            .map(|n| n.max(0) as u64))
    }

    async fn latch_count(pool: &PgPool, latch: &str) -> SqlResult<u64> {
        let count = sqlx::query(include_str!("sql/latch_count.sql")).bind(latch);
        let count = count.fetch_optional(pool).await?;
        Ok(count
            .map(|row| row.try_get::<i64, _>(0))
            .transpose()?
            .unwrap_or(0)
            .max(0) as u64)
    }
}

/// `statement` with an entry bound first, as both statements that write one take it: `$1`
/// name, `$2` seq, `$3` term, `$4` value.
fn written<'q>(statement: &'static str, entry: &Entry<'q>) -> Statement<'q, PostgresDialect> {
    sqlx::query(statement)
        .bind(entry.election)
        .bind(entry.seq)
        .bind(entry.term)
        .bind(entry.value)
}

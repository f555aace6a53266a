//! MySQL's statements for election records and count-down latches (`sql/elect_*.sql`,
//! `sql/latch_*.sql`); the transactions that run them are the SQL family's
//! (`backends/sql_family/sync.rs`). Each write locks its row (`SELECT … FOR UPDATE`, made first
//! if missing), so a latch's count is judged here, not in its statement; appending and trimming
//! the log are two statements. MySQL cannot notify a client, so watchers poll.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlRow};

use super::MysqlDialect;
use crate::backend::ELECTION_LOG_KEEP;
use crate::backends::sql_family::SqlResult;
use crate::backends::sql_family::sync::{Entry, Record, SyncSql};

/// Locks the row `lock` selects `FOR UPDATE`, creating it with `create` first if it is missing.
/// The row is selected first so that an existing row is never touched by the `INSERT IGNORE`
/// (whose shared lock on a duplicate, upgraded by the `FOR UPDATE`, deadlocks two writers); two
/// writers creating the same new row at once can still deadlock, and the SQL family runs the
/// transaction again.
async fn lock_row(
    conn: &mut MySqlConnection,
    name: &[u8],
    create: &'static str,
    lock: &'static str,
) -> SqlResult<MySqlRow> {
    if let Some(row) = sqlx::query(lock)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?
    {
        return Ok(row);
    }
    sqlx::query(create).bind(name).execute(&mut *conn).await?;
    sqlx::query(lock).bind(name).fetch_one(conn).await
}

/// Locks the latch's row (made at 0 if missing): its count.
async fn latch_lock(conn: &mut MySqlConnection, name: &str) -> SqlResult<u64> {
    let create = include_str!("sql/latch_create.sql");
    let lock = include_str!("sql/latch_lock_row.sql");
    lock_row(conn, name.as_bytes(), create, lock)
        .await?
        .try_get(0)
}

async fn latch_write(conn: &mut MySqlConnection, name: &str, count: u64) -> SqlResult<()> {
    sqlx::query(include_str!("sql/latch_write.sql"))
        .bind(count)
        .bind(name.as_bytes())
        .execute(conn)
        .await
        .map(drop)
}

#[async_trait]
impl SyncSql for MysqlDialect {
    async fn elect_lock(conn: &mut MySqlConnection, election: &str) -> SqlResult<Record> {
        let create = include_str!("sql/elect_create.sql");
        let lock = include_str!("sql/elect_lock_row.sql");
        let row = lock_row(conn, election.as_bytes(), create, lock).await?;
        let (seq, term): (u64, u64) = (row.try_get(0)?, row.try_get(1)?);
        let value = row.try_get(2)?;
        Ok(Record {
            seq: seq as i64,
            max_term: term as i64,
            value,
        })
    }

    async fn elect_append(conn: &mut MySqlConnection, entry: &Entry<'_>) -> SqlResult<()> {
        let (name, seq) = (entry.election.as_bytes(), entry.seq as u64);
        let append = sqlx::query(include_str!("sql/elect_append.sql"))
            .bind(name)
            .bind(seq);
        let append = append.bind(entry.term as u64).bind(entry.value);
        append.execute(&mut *conn).await?;
        // No statement of MySQL's both inserts and deletes: the log is trimmed by a second.
        let trim = sqlx::query(include_str!("sql/elect_trim.sql")).bind(name);
        let trim = trim.bind(seq.saturating_sub(ELECTION_LOG_KEEP));
        trim.execute(conn).await.map(drop)
    }

    async fn elect_update(conn: &mut MySqlConnection, entry: &Entry<'_>) -> SqlResult<()> {
        let update = sqlx::query(include_str!("sql/elect_update.sql")).bind(entry.seq as u64);
        let update = update.bind(entry.term as u64).bind(entry.value);
        let update = update
            .bind(entry.live.as_micros() as u64)
            .bind(entry.election.as_bytes());
        update.execute(conn).await.map(drop)
    }

    async fn latch_set(conn: &mut MySqlConnection, latch: &str, count: u64) -> SqlResult<bool> {
        // Only a latch at 0 (or new) takes a count.
        if latch_lock(conn, latch).await? != 0 {
            return Ok(false);
        }
        latch_write(conn, latch, count).await?;
        Ok(true)
    }

    async fn latch_count_down(conn: &mut MySqlConnection, latch: &str) -> SqlResult<Option<u64>> {
        let Some(after) = latch_lock(conn, latch).await?.checked_sub(1) else {
            return Ok(None);
        };
        latch_write(conn, latch, after).await?;
        Ok(Some(after))
    }

    async fn latch_count(pool: &MySqlPool, latch: &str) -> SqlResult<u64> {
        let read = sqlx::query_scalar(include_str!("sql/latch_count.sql")).bind(latch.as_bytes());
        let count: Option<u64> = read.fetch_optional(pool).await?;
        Ok(count.unwrap_or(0))
    }
}

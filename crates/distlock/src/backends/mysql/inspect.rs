//! `distlock status` and forced release on MySQL / MariaDB, in both lock modes: the lease rows
//! (`sql/status.sql`, `sql/force_*.sql`) and the session-lock records checked against
//! `IS_USED_LOCK` (`sql/session_status.sql`, `sql/session_force_*.sql`, `sql/session_kill.sql`).
//! The answers are built by the SQL family's shared [`inspect`].

use sqlx::Row;
use sqlx::mysql::{MySqlDatabaseError, MySqlPool};

use super::MysqlDialect;

use crate::backends::sql_family::{Picked, SqlResult, Statement, inspect};
use crate::error::Result;
use crate::sqlx_support::error::from_sqlx;
use crate::status::ForcedRelease;

/// MySQL's "unknown thread id": the connection to kill ended by itself.
const ER_NO_SUCH_THREAD: u16 = 1094;

/// Whether `e` is the server's error `number` (its SQLSTATE, which `code()` answers, is the
/// generic HY000 for many).
fn is_error_number(e: &sqlx::Error, number: u16) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<MySqlDatabaseError>())
        .is_some_and(|d| d.number() == number)
}

/// `statement` (`sql/*status.sql`) with the locks `picked` bound: the exact name (NULL for a
/// prefix) twice, then the prefix twice, as bytes (names are VARBINARY).
pub(super) fn selected<'a>(
    statement: &'static str,
    picked: Picked<'a>,
) -> Statement<'a, MysqlDialect> {
    let name = picked.name.map(str::as_bytes);
    let prefix = picked.prefix.as_bytes();
    sqlx::query(statement)
        .bind(name)
        .bind(name)
        .bind(prefix)
        .bind(prefix)
}

/// Forced release of a lease lock: one transaction (the SQL family runs a deadlock victim,
/// two callers creating the same name's row at once, again).
pub(super) async fn force_lease(pool: &MySqlPool, name: &[u8]) -> SqlResult<ForcedRelease> {
    let mut tx = pool.begin().await?;
    let old = sqlx::query(include_str!("sql/force_select.sql"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    let removed = match old {
        Some(row) if row.try_get::<i64, _>(4)? == 1 => inspect::removed(&row)?,
        _ => None,
    };
    let fence = sqlx::query(include_str!("sql/force_advance.sql"))
        .bind(name)
        .execute(&mut *tx)
        .await?
        .last_insert_id();
    tx.commit().await?;
    Ok(ForcedRelease::new(
        removed.into_iter().collect(),
        inspect::token(fence as i64),
    ))
}

/// Forced release of a session lock: one transaction that advances the counter, then ends the
/// holder's connection.
pub(super) async fn force_session(pool: &MySqlPool, name: &[u8]) -> SqlResult<ForcedRelease> {
    let mut tx = pool.begin().await?;
    let old = sqlx::query(include_str!("sql/session_force_select.sql"))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
    let (removed, holding_conn) = match old {
        Some(row) => {
            let recorded: Option<i64> = row.try_get(4)?;
            let holding: Option<i64> = row.try_get(5)?;
            // The record is the holding only if the lock's holder wrote it; a leftover record
            // of an ended holding (or of one whose holder has not written it yet) is not.
            let removed = match (recorded, holding) {
                (Some(r), Some(h)) if r == h => inspect::removed(&row)?,
                _ => None,
            };
            (removed, holding)
        }
        None => (None, None),
    };
    let fence = sqlx::query(include_str!("sql/session_force_advance.sql"))
        .bind(name)
        .execute(&mut *tx)
        .await?
        .last_insert_id();
    // Killed before the commit: a new holder's token draw waits for the commit, so it is above
    // the fence even when the lock is free again at once.
    if let Some(id) = holding_conn {
        match sqlx::query(include_str!("sql/session_kill.sql"))
            .bind(id)
            .execute(&mut *tx)
            .await
        {
            Err(e) if is_error_number(&e, ER_NO_SUCH_THREAD) => {}
            other => {
                other?;
            }
        }
    }
    tx.commit().await?;
    Ok(ForcedRelease::new(
        removed.into_iter().collect(),
        inspect::token(fence as i64),
    ))
}

/// MySQL's "duplicate column name".
const ER_DUP_FIELDNAME: u16 = 1060;

/// Adds the holder columns to lock tables made by versions that recorded no holders (run at
/// connect, after `sql/schema.sql`). Clients connecting at once may both find a column missing:
/// the later ALTER fails with "duplicate column", which means it is done.
pub(super) async fn add_holder_columns(pool: &MySqlPool) -> Result<()> {
    let what = "adding the holder columns to the lock tables";
    let err = |e| from_sqlx(super::NAME, what, e);
    let missing: Vec<String> = sqlx::query_scalar(include_str!("sql/schema_holder_missing.sql"))
        .fetch_all(pool)
        .await
        .map_err(err)?;
    for table in missing {
        let alter = match table.as_str() {
            "distlock_locks" => include_str!("sql/schema_holder_locks.sql"),
            "distlock_session_tokens" => include_str!("sql/schema_holder_sessions.sql"),
            _ => continue,
        };
        match sqlx::raw_sql(alter).execute(pool).await {
            Err(e) if is_error_number(&e, ER_DUP_FIELDNAME) => {}
            other => {
                other.map_err(err)?;
            }
        }
    }
    Ok(())
}

//! PostgreSQL's statements for the fair lock, the read-write lock and the semaphore (lease mode,
//! `sql/schema_flavours.sql`); the steps that run them are the SQL family's
//! (`backends/sql_family/flavours.rs`).
//!
//! Data-modifying `WITH` keeps each step short: locking the synchronizer's row makes it if
//! missing (`flavour_lock.sql`), dropping the lapsed rows and reading the live ones is one
//! statement (`flavour_state.sql`), and so is a take that leaves the line, draws the token and
//! writes the holding (`flavour_take.sql`). A release and a leaver notify `distlock_changed`
//! with the synchronizer's key in their own statement.

use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgPool};

use super::PostgresDialect;
use crate::backends::client_rules::flavour_rules::WAITER_TTL_MS;
use crate::backends::sql_family::flavours::{At, FlavourSql, Line, Mine, state};
use crate::backends::sql_family::inspect::{self, Columns};
use crate::backends::sql_family::{SqlResult, Statement};
use crate::status::{Holder, Holding};

/// `statement` with the synchronizer bound first, as every flavour statement here takes it:
/// `$1` family, `$2` name.
fn on<'a>(statement: &'static str, at: At<'a>) -> Statement<'a, PostgresDialect> {
    sqlx::query(statement).bind(at.family()).bind(at.name)
}

/// `statement` about one owner's holding: `$1` family, `$2` name, `$3` side, `$4` owner.
fn holding<'a>(statement: &'static str, mine: Mine<'a>) -> Statement<'a, PostgresDialect> {
    on(statement, mine.at())
        .bind(mine.side.column())
        .bind(mine.owner())
}

/// `statement` about one owner's place in line (no side: a line is the synchronizer's):
/// `$1` family, `$2` name, `$3` owner.
fn place<'a>(statement: &'static str, mine: Mine<'a>) -> Statement<'a, PostgresDialect> {
    on(statement, mine.at()).bind(mine.owner())
}

#[async_trait]
impl FlavourSql for PostgresDialect {
    fn peek(at: At<'_>) -> Statement<'_, Self> {
        on(include_str!("sql/flavour_peek.sql"), at)
    }

    fn lock_row(at: At<'_>) -> Statement<'_, Self> {
        // Makes the row if missing, so it always answers one.
        on(include_str!("sql/flavour_lock.sql"), at)
    }

    async fn create_row(_pool: &PgPool, _at: At<'_>) -> SqlResult<()> {
        // `lock_row` makes the row as it locks it, so it never asks for this.
        Ok(())
    }

    async fn set_size(conn: &mut PgConnection, at: At<'_>, size: i64) -> SqlResult<()> {
        let size = i32::try_from(size).unwrap_or(i32::MAX);
        let query = on(include_str!("sql/sem_set.sql"), at).bind(size);
        query.execute(conn).await.map(drop)
    }

    async fn line(conn: &mut PgConnection, at: At<'_>) -> SqlResult<Line> {
        let rows = on(include_str!("sql/flavour_state.sql"), at)
            .fetch_all(conn)
            .await?;
        let (peek, dropped) = state(rows)?;
        Ok(Line {
            holdings: peek.holdings,
            places: peek.line,
            places_lapsed: dropped > 0,
        })
    }

    async fn renew(conn: &mut PgConnection, held: Mine<'_>, token: i64) -> SqlResult<bool> {
        let lease_ms = held.req.lease.as_millis() as i64;
        let query = holding(include_str!("sql/flavour_extend.sql"), held);
        let done = query.bind(token).bind(lease_ms).execute(conn).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn hold(conn: &mut PgConnection, taker: Mine<'_>) -> SqlResult<i64> {
        let lease_ms = taker.req.lease.as_millis() as i64;
        let query = holding(include_str!("sql/flavour_take.sql"), taker);
        let row = query
            .bind(lease_ms)
            .bind(Holder::this_process_record())
            .fetch_one(conn)
            .await?;
        row.int(0)?.ok_or(sqlx::Error::RowNotFound)
    }

    async fn join(conn: &mut PgConnection, waiter: Mine<'_>) -> SqlResult<()> {
        let query = place(include_str!("sql/waiter_join.sql"), waiter);
        query.bind(WAITER_TTL_MS).execute(conn).await.map(drop)
    }

    async fn next_token(conn: &mut PgConnection, at: At<'_>) -> SqlResult<i64> {
        let row = on(include_str!("sql/flavour_next_token.sql"), at)
            .fetch_one(conn)
            .await?;
        row.int(0)?.ok_or(sqlx::Error::RowNotFound)
    }

    async fn remove_all(conn: &mut PgConnection, at: At<'_>) -> SqlResult<Vec<Holding>> {
        let query = on(include_str!("sql/flavour_force.sql"), at).bind(at.side.column());
        inspect::removed_all(query.fetch_all(conn).await?)
    }

    async fn free(pool: &PgPool, held: Mine<'_>, token: Option<i64>) -> SqlResult<bool> {
        let query = holding(include_str!("sql/flavour_release.sql"), held);
        let freed = query
            .bind(token)
            .bind(held.at().key())
            .fetch_optional(pool)
            .await?;
        Ok(freed.is_some())
    }

    async fn leave(pool: &PgPool, waiter: Mine<'_>) -> SqlResult<()> {
        let query = place(include_str!("sql/waiter_leave.sql"), waiter);
        query
            .bind(waiter.at().key())
            .fetch_optional(pool)
            .await
            .map(drop)
    }
}

//! MySQL's statements for the fair lock, the read-write lock and the semaphore (lease mode,
//! `sql/schema_flavours.sql`); the steps that run them are the SQL family's
//! (`backends/sql_family/flavours.rs`).
//!
//! One statement per step: the synchronizer's row is locked (`flavour_lock.sql`) after it was
//! made outside the step's transaction (`flavour_create.sql`: an `INSERT IGNORE` inside it would
//! deadlock two steps); lapsed holdings and places are dropped, then the live ones read; a take
//! leaves the line, draws the token (`LAST_INSERT_ID`) and writes the holding in three. Nothing
//! notifies: the client's pollers (`backends/poll_watch.rs`) see every change.

use async_trait::async_trait;
use sqlx::mysql::{MySqlConnection, MySqlPool};

use super::MysqlDialect;
use crate::backends::client_rules::flavour_rules::{Held, Place, Side, WAITER_TTL_MS};
use crate::backends::sql_family::flavours::{At, FlavourSql, Line, Mine};
use crate::backends::sql_family::inspect::{self, Columns};
use crate::backends::sql_family::{SqlResult, Statement};
use crate::status::{Holder, Holding};

/// `statement` with the synchronizer bound: family, then name as bytes (names are VARBINARY).
/// Most flavour statements here take it first; the line and the peek name it again further on.
fn on<'a>(statement: &'static str, at: At<'a>) -> Statement<'a, MysqlDialect> {
    sqlx::query(statement)
        .bind(at.family())
        .bind(at.name.as_bytes())
}

/// Runs a statement that takes the synchronizer and nothing else.
async fn run(conn: &mut MySqlConnection, statement: &'static str, at: At<'_>) -> SqlResult<()> {
    on(statement, at).execute(conn).await.map(drop)
}

/// The live holdings, lapsed ones dropped before (`flavour_holdings.sql`): side, owner, token,
/// lease left.
async fn holdings(conn: &mut MySqlConnection, at: At<'_>) -> SqlResult<Vec<Held>> {
    let rows = on(include_str!("sql/flavour_holdings.sql"), at)
        .fetch_all(conn)
        .await?;
    let mut held = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(side) = Side::from_column(&row.text(0)?.unwrap_or_default()) {
            let (token, left_ms) = (
                row.int(2)?.unwrap_or_default(),
                row.int(3)?.unwrap_or_default(),
            );
            let owner = row.text(1)?.unwrap_or_default();
            held.push(Held {
                side,
                owner,
                token,
                left_ms,
            });
        }
    }
    Ok(held)
}

/// The live places in line by arrival, lapsed ones dropped before (`waiter_line.sql`): owner,
/// place left.
async fn places(conn: &mut MySqlConnection, at: At<'_>) -> SqlResult<Vec<Place>> {
    let rows = on(include_str!("sql/waiter_line.sql"), at)
        .fetch_all(conn)
        .await?;
    let place = |row: &sqlx::mysql::MySqlRow| {
        let owner = row.text(0)?.unwrap_or_default();
        Ok(Place {
            owner,
            left_ms: row.int(1)?.unwrap_or_default(),
        })
    };
    rows.iter().map(place).collect()
}

#[async_trait]
impl FlavourSql for MysqlDialect {
    fn peek(at: At<'_>) -> Statement<'_, Self> {
        // Holdings, line and row are three selects in one union, each naming the synchronizer.
        let peek = on(include_str!("sql/flavour_peek.sql"), at);
        let peek = peek.bind(at.family()).bind(at.name.as_bytes());
        peek.bind(at.family()).bind(at.name.as_bytes())
    }

    fn lock_row(at: At<'_>) -> Statement<'_, Self> {
        on(include_str!("sql/flavour_lock.sql"), at)
    }

    async fn create_row(pool: &MySqlPool, at: At<'_>) -> SqlResult<()> {
        // Autocommit, on a connection of its own: outside every step's transaction.
        let mut conn = pool.acquire().await?;
        run(&mut conn, include_str!("sql/flavour_create.sql"), at).await
    }

    async fn set_size(conn: &mut MySqlConnection, at: At<'_>, size: i64) -> SqlResult<()> {
        let set = sqlx::query(include_str!("sql/sem_set.sql")).bind(size);
        let set = set.bind(at.family()).bind(at.name.as_bytes());
        set.execute(conn).await.map(drop)
    }

    async fn line(conn: &mut MySqlConnection, at: At<'_>) -> SqlResult<Line> {
        run(conn, include_str!("sql/flavour_purge.sql"), at).await?;
        run(conn, include_str!("sql/waiter_purge.sql"), at).await?;
        let holdings = holdings(conn, at).await?;
        let places = places(conn, at).await?;
        // Nobody is told of lapsed places: the pollers see the line change.
        Ok(Line {
            holdings,
            places,
            places_lapsed: false,
        })
    }

    async fn renew(conn: &mut MySqlConnection, held: Mine<'_>, token: i64) -> SqlResult<bool> {
        let lease_us = held.req.lease.duration().as_micros() as u64;
        let (at, owner) = (held.at(), held.owner());
        let extend = sqlx::query(include_str!("sql/flavour_extend.sql")).bind(lease_us);
        let extend = extend.bind(at.family()).bind(at.name.as_bytes());
        let done = extend
            .bind(held.side.column())
            .bind(owner)
            .bind(token)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn hold(conn: &mut MySqlConnection, taker: Mine<'_>) -> SqlResult<i64> {
        let (at, owner) = (taker.at(), taker.owner());
        if taker.side.queues() {
            let delete = on(include_str!("sql/waiter_delete.sql"), at).bind(owner);
            delete.execute(&mut *conn).await?;
        }
        let token = Self::next_token(conn, at).await?;
        let lease_us = taker.req.lease.duration().as_micros() as u64;
        let insert = on(include_str!("sql/flavour_insert.sql"), at).bind(taker.side.column());
        let insert = insert.bind(owner).bind(token).bind(lease_us);
        insert
            .bind(Holder::this_process_record())
            .execute(conn)
            .await?;
        Ok(token)
    }

    async fn join(conn: &mut MySqlConnection, waiter: Mine<'_>) -> SqlResult<()> {
        let at = waiter.at();
        let join = on(include_str!("sql/waiter_join.sql"), at).bind(waiter.owner());
        // The place's seq is drawn from the line named once more.
        let join = join.bind(WAITER_TTL_MS * 1000).bind(at.family());
        join.bind(at.name.as_bytes()).execute(conn).await.map(drop)
    }

    async fn next_token(conn: &mut MySqlConnection, at: At<'_>) -> SqlResult<i64> {
        let drawn = on(include_str!("sql/flavour_next_token.sql"), at);
        Ok(drawn.execute(conn).await?.last_insert_id() as i64)
    }

    async fn remove_all(conn: &mut MySqlConnection, at: At<'_>) -> SqlResult<Vec<Holding>> {
        let column = at.side.column();
        let select = on(include_str!("sql/flavour_force_select.sql"), at).bind(column);
        let rows = select.fetch_all(&mut *conn).await?;
        let delete = on(include_str!("sql/flavour_force_delete.sql"), at).bind(column);
        delete.execute(conn).await?;
        inspect::removed_all(rows)
    }

    async fn free(pool: &MySqlPool, held: Mine<'_>, token: Option<i64>) -> SqlResult<bool> {
        let release = on(include_str!("sql/flavour_release.sql"), held.at());
        let release = release.bind(held.side.column()).bind(held.owner());
        let done = release.bind(token).bind(token).execute(pool).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn leave(pool: &MySqlPool, waiter: Mine<'_>) -> SqlResult<()> {
        let delete = on(include_str!("sql/waiter_delete.sql"), waiter.at());
        delete.bind(waiter.owner()).execute(pool).await.map(drop)
    }
}

//! What the PostgreSQL and MySQL test targets share: URLs and the cases that apply per technique.

#![allow(dead_code)]

pub mod db;
pub mod servers;

use std::time::Duration;

use distlock::sql::sqlx;
use distlock_testkit::{Ctx, Failure, Outcome, Suite, check};

pub const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/distlock_test";
pub const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/distlock_test";

/// The URL from `var`, or the loopback default.
pub fn url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// `url` with `lock=session` added.
pub fn session_url(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}lock=session")
}

/// The cases that do not apply to session locks, and why.
pub fn session_suite(suite: Suite) -> Suite {
    suite
        .not_applicable(
            "no_watchdog_lease_ends",
            "a session lock has no lease that ends: the server holds it until the connection ends",
        )
        .not_applicable(
            "paused_holder_is_fenced",
            "a paused holder's connection stays open, so its lock stays held and nobody else gets \
             in; a holder whose connection ends is the server_kill case",
        )
}

pub fn postgres_lease(suite: Suite) -> Suite {
    suite
}

pub fn postgres_session(suite: Suite) -> Suite {
    suite.case("server_kill_fires_lost_and_frees", |ctx| {
        server_kill(ctx, |name| async move {
            let backend = distlock::backends::postgres::PostgresBackend::connect(&url(
                "DISTLOCK_POSTGRES_URL",
                PG_DEFAULT,
            ))
            .await?;
            let killed: Vec<bool> = sqlx::query_scalar(
                "WITH k AS (SELECT hashtextextended($1, 7306915764203548012) AS key) \
                 SELECT pg_terminate_backend(l.pid) FROM pg_locks l, k \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                   AND l.classid = ((k.key >> 32) & 4294967295)::oid \
                   AND l.objid = (k.key & 4294967295)::oid",
            )
            .bind(name)
            .fetch_all(backend.pool())
            .await?;
            Ok(killed == [true])
        })
    })
}

pub fn mysql_lease(suite: Suite) -> Suite {
    suite
}

pub fn mysql_session(suite: Suite) -> Suite {
    suite.case("server_kill_fires_lost_and_frees", |ctx| {
        server_kill(ctx, |name| async move {
            let backend = distlock::backends::mysql::MysqlBackend::connect(&url(
                "DISTLOCK_MYSQL_URL",
                MYSQL_DEFAULT,
            ))
            .await?;
            let holder: Option<u64> = sqlx::query_scalar(
                "SELECT IS_USED_LOCK(CONCAT('distlock:', LEFT(SHA2(?, 256), 55)))",
            )
            .bind(name)
            .fetch_one(backend.pool())
            .await?;
            let Some(id) = holder else { return Ok(false) };
            // KILL takes no placeholder; `id` is a number the server gave us.
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                .execute(backend.pool())
                .await?;
            Ok(true)
        })
    })
}

/// A session-lock holder whose connection the server kills gets `lost()`, and the lock is free
/// for another client at once (with a larger fencing token).
async fn server_kill<F, Fut>(ctx: Ctx, kill: F) -> Outcome
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<bool, Failure>>,
{
    let name = ctx.unique_name("killed");
    let guard = ctx.lock(&name).acquire().await?;
    let first = guard.fencing_token();
    check!(
        kill(name.clone()).await?,
        "found no server connection holding {name:?}"
    );
    let lost = tokio::time::timeout(Duration::from_secs(20), guard.lost()).await;
    check!(lost.is_ok(), "lost() did not fire within 20 s of the kill");
    let other = ctx.connect().await?;
    let next = other
        .lock(&name)
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    check!(
        next.fencing_token() > first,
        "token {} after {first}",
        next.fencing_token()
    );
    check!(
        !guard.release().await?,
        "the killed holder's release claimed to free the new holder's lock"
    );
    check!(next.release().await?, "the new holder could not release");
    Ok(())
}

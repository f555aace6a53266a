//! What the PostgreSQL and MySQL test targets share: URLs and the cases that apply per technique.

#![allow(dead_code)]

pub mod db;

use std::time::Duration;

use distlock::sql::sqlx;
use distlock_testkit::servers::{WithParam, start_mariadb, start_postgres};
use distlock_testkit::{Ctx, Failure, Outcome, Suite, check};

pub const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/distlock_test";
pub const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/distlock_test";

/// The URL from `var`, or the loopback default.
pub fn url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// The URL parameter that makes a SQL store's locks session locks.
pub const SESSION: &str = "lock=session";

pub fn postgres_lease(suite: Suite) -> Suite {
    suite
        .private_store(start_postgres)
        .case("release_wakes_waiters_by_notify", release_wakes_waiters)
}

/// Waiters on another client are woken by the release's NOTIFY: with a 60 s lease, the core
/// sleeps a notified backend's waiters up to the lease left, so only the notice can get them in
/// within 20 s. Several waiters of different names share the client's one listening connection.
async fn release_wakes_waiters(ctx: Ctx) -> Outcome {
    const WAITERS: usize = 4;
    let names: Vec<String> = (0..WAITERS)
        .map(|i| ctx.unique_name(&format!("n{i}")))
        .collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(
            ctx.lock(name)
                .lease(Duration::from_secs(60))
                .acquire()
                .await?,
        );
    }
    let waiting_client = ctx.connect().await?;
    let mut waiters = Vec::new();
    for name in &names {
        let lock = waiting_client.lock(name);
        waiters.push(tokio::spawn(async move {
            lock.acquire_timeout(Duration::from_secs(20)).await
        }));
    }
    // Let every waiter try once and start listening.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for guard in held {
        check!(guard.release().await?, "a holder could not release");
    }
    for waiter in waiters {
        let got = waiter
            .await
            .map_err(|e| Failure(format!("waiter task: {e}")))?;
        check!(
            got.is_ok(),
            "a waiter was not woken by the release: {:?}",
            got.err()
        );
        got?.release().await?;
    }
    Ok(())
}

pub fn postgres_session(suite: Suite) -> Suite {
    suite
        .private_store(|| Ok(WithParam::new(start_postgres()?, SESSION)))
        .case("server_kill_fires_lost_and_frees", |ctx| {
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
    suite.private_store(start_mariadb)
}

pub fn mysql_session(suite: Suite) -> Suite {
    suite
        .private_store(|| Ok(WithParam::new(start_mariadb()?, SESSION)))
        .case("server_kill_fires_lost_and_frees", |ctx| {
            server_kill(ctx, |name| async move {
                let backend = distlock::backends::mysql::MysqlBackend::connect(&url(
                    "DISTLOCK_MYSQL_URL",
                    MYSQL_DEFAULT,
                ))
                .await?;
                let holder: Option<i64> = sqlx::query_scalar(
                "SELECT CAST(IS_USED_LOCK(CONCAT('distlock:', LEFT(SHA2(?, 256), 55))) AS SIGNED)",
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

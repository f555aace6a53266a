//! Pools for the row-lock and optimistic tests, with the failure/skip rules of the suite: an
//! unreachable server fails naming the server; `DISTLOCK_SKIP=postgres,mysql` skips, loudly.

use sqlx::{MySqlPool, PgPool};

use super::{MYSQL_DEFAULT, PG_DEFAULT, url};

pub fn skipped(backend: &str) -> bool {
    distlock_testkit::skipped(backend, &format!("{backend} cases"))
}

/// The PostgreSQL test database's pool, or `None` when skipped.
pub async fn pg() -> Option<PgPool> {
    if skipped("postgres") {
        return None;
    }
    let backend = distlock::backends::postgres::PostgresBackend::connect(&url(
        "DISTLOCK_POSTGRES_URL",
        PG_DEFAULT,
    ))
    .await
    .unwrap_or_else(|e| {
        panic!("PostgreSQL not reachable at 127.0.0.1:5432 ({e}); run scripts/services.sh")
    });
    Some(backend.pool().clone())
}

/// The MariaDB test database's pool, or `None` when skipped.
pub async fn mysql() -> Option<MySqlPool> {
    if skipped("mysql") {
        return None;
    }
    let backend =
        distlock::backends::mysql::MysqlBackend::connect(&url("DISTLOCK_MYSQL_URL", MYSQL_DEFAULT))
            .await
            .unwrap_or_else(|e| {
                panic!("MariaDB not reachable at 127.0.0.1:3306 ({e}); run scripts/services.sh")
            });
    Some(backend.pool().clone())
}

/// Runs `sql` (statements the test made, never input) on `pool`, which must take them.
pub async fn execute<'e, E: sqlx::Executor<'e>>(pool: E, sql: String) {
    pool.execute(sqlx::AssertSqlSafe(sql))
        .await
        .unwrap_or_else(|e| panic!("the test's own SQL failed: {e}"));
}

/// A table name no other test run uses.
pub fn unique_table(what: &str) -> String {
    let token = distlock::OwnerToken::random();
    format!("distlock_test_{what}_{}", &token.as_str()[..10])
}

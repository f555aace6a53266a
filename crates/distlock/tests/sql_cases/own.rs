//! The SQL stores built without a URL (issue #40): from a configuration written in code, from
//! JSON (feature `serde`), and over the application's own sqlx pool. Each locks against the real
//! server, and a client connected by URL sees that lock held: the same tables, the same
//! exclusion.

use std::sync::Arc;

use distlock::Client;
use distlock::backends::postgres::PostgresBackend;
use distlock_testkit::{Ctx, Outcome, check};

use super::{MYSQL_DEFAULT, PG_DEFAULT, Sql};

// PostgreSQL and MySQL read the same configuration; the names differ only for the reader.
type SqlConfig = distlock::backends::postgres::PostgresConfig;

/// The loopback test server's configuration, written field by field; when the test's URL
/// variable points elsewhere, that URL's (the only server these tests may assume).
fn config_in_code(ctx: &Ctx, sql: Sql) -> Result<SqlConfig, distlock_testkit::Failure> {
    let (default, in_code) = match sql {
        Sql::Postgres => (
            PG_DEFAULT,
            SqlConfig::new("127.0.0.1")
                .port(5432)
                .user("postgres")
                .database("distlock_test"),
        ),
        Sql::Mysql => (
            MYSQL_DEFAULT,
            SqlConfig::new("127.0.0.1")
                .port(3306)
                .user("root")
                .database("distlock_test"),
        ),
    };
    check!(
        SqlConfig::from_url(default)? == in_code,
        "from_url({default}) differs from the configuration written in code"
    );
    if ctx.url == default {
        Ok(in_code)
    } else {
        Ok(SqlConfig::from_url(&ctx.url)?)
    }
}

async fn connect_config(sql: Sql, config: SqlConfig) -> Result<Client, distlock::Error> {
    let options = distlock::Options::default();
    Ok(match sql {
        Sql::Postgres => Client::from_backend(Arc::new(
            PostgresBackend::connect_config(config, &options).await?,
        )),
        Sql::Mysql => Client::from_backend(Arc::new(
            distlock::backends::mysql::MysqlBackend::connect_config(config, &options).await?,
        )),
    })
}

/// `client` takes a lock; the suite's client (connected by URL) finds it held, then free once
/// released.
async fn locks_beside_the_url_client(ctx: &Ctx, client: &Client, what: &str) -> Outcome {
    let name = ctx.unique_name(what);
    let guard = client.lock(&name).acquire().await?;
    check!(
        ctx.client.lock(&name).try_acquire().await?.is_none(),
        "{what}: the URL client took a lock the other client holds"
    );
    check!(guard.release().await?, "{what}: the release found nothing");
    let after = ctx.client.lock(&name).try_acquire().await?;
    check!(after.is_some(), "{what}: still held after the release");
    after.expect("checked").release().await?;
    Ok(())
}

/// A store built from a configuration written in code, no URL, locks.
pub async fn config_in_code_locks(ctx: Ctx, sql: Sql) -> Outcome {
    let client = connect_config(sql, config_in_code(&ctx, sql)?).await?;
    locks_beside_the_url_client(&ctx, &client, "in-code").await
}

/// A store built from JSON (`serde`): the same fields, read from text.
#[cfg(feature = "serde")]
pub async fn config_from_json_locks(ctx: Ctx, sql: Sql) -> Outcome {
    let in_code = config_in_code(&ctx, sql)?;
    let json = format!(
        r#"{{"host": {:?}, "port": {}, "user": {:?}, "database": {:?}, "max_connections": 4}}"#,
        in_code.host,
        in_code.port.unwrap_or(0),
        in_code.user.as_deref().unwrap_or(""),
        in_code.database.as_deref().unwrap_or(""),
    );
    let config: SqlConfig = serde_json::from_str(&json).map_err(|e| {
        distlock_testkit::Failure(format!("the JSON configuration does not read: {e}"))
    })?;
    check!(
        config == in_code.clone().max_connections(4),
        "JSON read as {config:?}, not as written"
    );
    let client = connect_config(sql, config).await?;
    locks_beside_the_url_client(&ctx, &client, "json").await
}

/// Two clients over the application's one pool (3 connections): one holds a lock, the other
/// finds it held, and takes it once released; the URL client sees it held too.
pub async fn applications_pool_locks(ctx: Ctx, sql: Sql) -> Outcome {
    let (first, second) = match sql {
        Sql::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(3)
                .connect(&ctx.url)
                .await?;
            (
                Client::from_backend(Arc::new(PostgresBackend::from_pool(pool.clone()).await?)),
                Client::from_backend(Arc::new(PostgresBackend::from_pool(pool).await?)),
            )
        }
        Sql::Mysql => {
            use distlock::backends::mysql::MysqlBackend;
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(3)
                .connect(&ctx.url)
                .await?;
            (
                Client::from_backend(Arc::new(MysqlBackend::from_pool(pool.clone()).await?)),
                Client::from_backend(Arc::new(MysqlBackend::from_pool(pool).await?)),
            )
        }
    };
    let name = ctx.unique_name("app-pool");
    let guard = first.lock(&name).acquire().await?;
    check!(
        second.lock(&name).try_acquire().await?.is_none(),
        "a second client on the same pool took a held lock"
    );
    check!(
        ctx.client.lock(&name).try_acquire().await?.is_none(),
        "the URL client took a lock held through the application's pool"
    );
    let token = guard.fencing_token();
    check!(guard.release().await?, "the release found nothing");
    let next = second.lock(&name).try_acquire().await?;
    check!(
        next.is_some(),
        "the second client could not take the released lock"
    );
    let next = next.expect("checked");
    check!(
        next.fencing_token() > token,
        "the next holder's token {:?} is not above {token:?}",
        next.fencing_token()
    );
    next.release().await?;
    locks_beside_the_url_client(&ctx, &first, "app-pool-again").await
}

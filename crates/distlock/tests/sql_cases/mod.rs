//! What the PostgreSQL and MySQL test targets share: URLs and the cases that apply per technique.

#![allow(dead_code)]

pub mod db;
mod own;

use std::time::Duration;

use distlock_testkit::cases;
use distlock_testkit::servers::{WithParam, start_mariadb, start_postgres, with_param};
use distlock_testkit::{Ctx, Failure, Flavour, Outcome, Suite, check, check_above};

pub const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/distlock_test";
pub const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/distlock_test";

/// The URL from `var`, or the loopback default.
pub fn url(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

/// The URL parameter that makes a SQL store's locks session locks.
pub const SESSION: &str = "lock=session";

/// Which locks of a SQL store a test binary runs the suite against.
pub enum Locks {
    /// Rows with a lease (the default).
    Lease,
    /// The server's own session locks (`lock=session`), with the server ending sessions.
    Session,
}

/// Runs the conformance suite, with the cases of `locks`, against `sql`'s server: its URL
/// variable, or the loopback test database.
pub fn run(sql: Sql, locks: Locks) -> std::process::ExitCode {
    let (backend, server, var, default) = match sql {
        Sql::Postgres => (
            "postgres",
            "PostgreSQL at 127.0.0.1:5432",
            "DISTLOCK_POSTGRES_URL",
            PG_DEFAULT,
        ),
        Sql::Mysql => (
            "mysql",
            "MariaDB at 127.0.0.1:3306",
            "DISTLOCK_MYSQL_URL",
            MYSQL_DEFAULT,
        ),
    };
    let url = url(var, default);
    let suite = match locks {
        Locks::Lease => Suite::new(backend, server, url),
        Locks::Session => Suite::new(backend, server, with_param(&url, SESSION)),
    };
    match (sql, locks) {
        (Sql::Postgres, Locks::Lease) => postgres_lease(suite),
        (sql, Locks::Session) => session_locks(suite, sql),
        (Sql::Mysql, Locks::Lease) => mysql_lease(suite),
    }
    .run()
}

/// The flavours of the suite and the cases of the read-write lock and the semaphore, and with
/// `fair`, of the fair lock: what a lease-mode SQL store carries.
fn every_flavour(suite: Suite, fair: bool) -> Suite {
    let flavours = Flavour::every()
        .into_iter()
        .filter(|f| fair || f.name != "fair")
        .collect();
    let suite = suite
        .flavours(flavours)
        .case(
            "readers_share_writers_exclude",
            cases::readers_share_writers_exclude,
        )
        .case(
            "waiting_writer_holds_back_new_readers",
            cases::writer_preference,
        )
        .case(
            "read_to_write_upgrade_is_refused",
            cases::upgrade_is_refused,
        )
        .case("semaphore_counts_permits", cases::semaphore_counts_permits);
    if !fair {
        return suite;
    }
    suite
        .case(
            "fair_lock_serves_in_arrival_order",
            cases::fair_serves_in_arrival_order,
        )
        // A waiter's place lasts 6 s without it asking again (flavour_rules.rs).
        .case("fair_killed_waiter_lapses", |ctx| {
            cases::fair_killed_waiter_lapses(ctx, Duration::from_secs(15))
        })
}

fn postgres_lease(suite: Suite) -> Suite {
    every_flavour(suite, true)
        .private_store(start_postgres)
        .case("release_wakes_waiters_by_notify", release_wakes_waiters)
        .case("old_tables_get_holder_columns", |ctx| {
            old_tables_migrate(ctx, Sql::Postgres)
        })
        .tokens_cases(Sql::Postgres)
        .own_connection_cases(Sql::Postgres)
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

/// The session locks of `sql`'s server (`lock=session`): only the exclusive lock, held as long
/// as its connection, which the server may end.
fn session_locks(suite: Suite, sql: Sql) -> Suite {
    let suite = suite.case(
        "session_mode_refuses_flavours_naming_lease",
        session_refuses_flavours,
    );
    match sql {
        Sql::Postgres => suite
            .private_store(|| Ok(WithParam::new(start_postgres()?, SESSION)))
            .end_sessions(end_postgres_sessions),
        Sql::Mysql => suite
            .private_store(|| Ok(WithParam::new(start_mariadb()?, SESSION)))
            .end_sessions(end_mysql_sessions),
    }
    .tokens_cases(sql)
}

/// `?lock=session` has only the exclusive lock: the other flavours, a resize and a forced
/// release of them answer `Unsupported` naming `?lock=lease`, and `Client::supports` says so.
async fn session_refuses_flavours(ctx: Ctx) -> Outcome {
    use distlock::{ErrorKind, LockKind};
    let name = ctx.unique_name("flavours");
    let c = &ctx.client;
    check!(c.supports(LockKind::Mutex), "the lock is not supported");
    let names_lease = |e: &distlock::Error| {
        e.kind() == ErrorKind::Unsupported && e.to_string().contains("?lock=lease")
    };
    for (kind, lock) in [
        (LockKind::Fair, c.fair_lock(&name)),
        (LockKind::Read, c.rw_lock(&name).read()),
        (LockKind::Write, c.rw_lock(&name).write()),
        (LockKind::Permit { permits: 2 }, c.semaphore(&name, 2)),
    ] {
        check!(!c.supports(kind), "Client::supports({kind:?}) is true");
        let taken = lock.try_acquire().await;
        check!(
            matches!(&taken, Err(e) if names_lease(e)),
            "{kind:?} answered {taken:?}"
        );
        let forced = c.force_release(&name, kind).await;
        check!(
            matches!(&forced, Err(e) if names_lease(e)),
            "a forced release of {kind:?} answered {forced:?}"
        );
    }
    let resized = c.set_semaphore_permits(&name, 3).await;
    check!(
        matches!(&resized, Err(e) if names_lease(e)),
        "a resize answered {resized:?}"
    );
    Ok(())
}

/// Ends, from the server side, the PostgreSQL sessions of our connections from `client_ports`.
async fn end_postgres_sessions(url: String, client_ports: Vec<u16>) -> Result<usize, Failure> {
    let backend = distlock::backends::postgres::PostgresBackend::connect(&url).await?;
    let ports: Vec<i32> = client_ports.into_iter().map(i32::from).collect();
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE client_addr = '127.0.0.1' AND client_port = ANY($1)",
    )
    .bind(ports)
    .fetch_all(backend.pool())
    .await?;
    Ok(ended.into_iter().filter(|&e| e).count())
}

fn mysql_lease(suite: Suite) -> Suite {
    every_flavour(suite, true)
        .private_store(start_mariadb)
        .case("old_tables_get_holder_columns", |ctx| {
            old_tables_migrate(ctx, Sql::Mysql)
        })
        .tokens_cases(Sql::Mysql)
        .own_connection_cases(Sql::Mysql)
}

/// Ends, from the server side (`KILL`), the MariaDB sessions of our connections from
/// `client_ports`.
async fn end_mysql_sessions(url: String, client_ports: Vec<u16>) -> Result<usize, Failure> {
    let backend = distlock::backends::mysql::MysqlBackend::connect(&url).await?;
    let ports: Vec<String> = client_ports.iter().map(u16::to_string).collect();
    // HOST is `host:port` for TCP clients; the port is ours.
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE FIND_IN_SET(SUBSTRING_INDEX(HOST, ':', -1), ?) AND ID <> CONNECTION_ID()",
    )
    .bind(ports.join(","))
    .fetch_all(backend.pool())
    .await?;
    for id in &ids {
        // KILL takes no placeholder; `id` is a number the server gave us.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
            .execute(backend.pool())
            .await?;
    }
    Ok(ids.len())
}

/// `url` with its database (the path) replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, params) = url
        .split_once('?')
        .map_or((url, None), |(b, p)| (b, Some(p)));
    let base = &base[..base.rfind('/').map_or(base.len(), |i| i + 1)];
    match params {
        Some(p) => format!("{base}{database}?{p}"),
        None => format!("{base}{database}"),
    }
}

/// The lock tables as distlock made them before it recorded holders, with one live holding.
const PG_OLD_TABLES: &str = "
    CREATE TABLE distlock_locks (
        name text COLLATE \"C\" PRIMARY KEY, owner text NOT NULL,
        holds integer NOT NULL CHECK (holds >= 0), token bigint NOT NULL,
        expires_at timestamptz NOT NULL);
    CREATE SEQUENCE distlock_fencing START 10;
    INSERT INTO distlock_locks VALUES ('old-holding', 'x', 1, 1, now() + interval '1 hour');";

const MYSQL_OLD_TABLES: &str = "
    CREATE TABLE distlock_locks (
        name VARBINARY(512) NOT NULL PRIMARY KEY,
        owner CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
        holds INT UNSIGNED NOT NULL, token BIGINT UNSIGNED NOT NULL,
        expires_at DATETIME(6) NOT NULL) ENGINE = InnoDB;
    CREATE TABLE distlock_session_tokens (
        name VARBINARY(512) NOT NULL PRIMARY KEY,
        token BIGINT UNSIGNED NOT NULL) ENGINE = InnoDB;
    INSERT INTO distlock_locks
        VALUES ('old-holding', 'x', 1, 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR);";

/// Tables made by a version that recorded no holders get the holder columns at connect (in a
/// database of their own): the old holding shows without a holder, a new one with this
/// process, and a forced release fences it. (MySQL 8 has no ADD COLUMN IF NOT EXISTS.)
async fn old_tables_migrate(ctx: Ctx, sql: Sql) -> Outcome {
    in_own_database(&ctx, sql, "migrate", |url| async move {
        sql.execute_without_distlock(&url, sql.old_tables()).await?;
        migrated_tables_work(&url).await
    })
    .await
}

/// Runs `body` with the URL of a database made for it on the server of `ctx.url` (same user
/// and parameters), and drops the database after it, whatever the outcome.
async fn in_own_database<F, Fut>(ctx: &Ctx, sql: Sql, what: &str, body: F) -> Outcome
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let database = db::unique_table(what);
    sql.execute(&ctx.url, &format!("CREATE DATABASE {database}"))
        .await?;
    let outcome = body(with_database(&ctx.url, &database)).await;
    let drop = match sql {
        Sql::Postgres => format!("DROP DATABASE {database} WITH (FORCE)"),
        Sql::Mysql => format!("DROP DATABASE {database}"),
    };
    sql.execute(&ctx.url, &drop).await?;
    outcome
}

/// The SQL stores, for what their cases do differently.
#[derive(Clone, Copy)]
pub enum Sql {
    Postgres,
    Mysql,
}

impl Sql {
    /// Runs `statements` (made by the test, never from input) in the database of `url`.
    async fn execute(self, url: &str, statements: &str) -> Result<(), Failure> {
        let statements = sqlx::AssertSqlSafe(statements.to_string());
        match self {
            Sql::Postgres => {
                let backend = distlock::backends::postgres::PostgresBackend::connect(url).await?;
                sqlx::raw_sql(statements).execute(backend.pool()).await?;
            }
            Sql::Mysql => {
                let backend = distlock::backends::mysql::MysqlBackend::connect(url).await?;
                sqlx::raw_sql(statements).execute(backend.pool()).await?;
            }
        }
        Ok(())
    }

    /// Runs `statements` on a plain connection to `url`, before distlock, which would create
    /// its tables at connect, ever connected to it.
    async fn execute_without_distlock(self, url: &str, statements: &'static str) -> Outcome {
        match self {
            Sql::Postgres => {
                let old = sqlx::postgres::PgPool::connect(url).await?;
                sqlx::raw_sql(statements).execute(&old).await?;
                old.close().await;
            }
            Sql::Mysql => {
                let old = sqlx::mysql::MySqlPool::connect(url).await?;
                sqlx::raw_sql(statements).execute(&old).await?;
                old.close().await;
            }
        }
        Ok(())
    }

    /// The lock tables as distlock made them before it recorded holders, with one live
    /// holding.
    fn old_tables(self) -> &'static str {
        match self {
            Sql::Postgres => PG_OLD_TABLES,
            Sql::Mysql => MYSQL_OLD_TABLES,
        }
    }

    /// Deletes every lock's row, lease and session: what a careless cleanup job does.
    fn delete_lock_rows(self) -> &'static str {
        match self {
            Sql::Postgres => "DELETE FROM distlock_locks; DELETE FROM distlock_sessions",
            Sql::Mysql => "DELETE FROM distlock_locks; DELETE FROM distlock_session_tokens",
        }
    }

    /// Drops the lock tables (and the fencing sequence earlier versions drew from), so the next
    /// client creates them anew: a restart from scratch.
    fn drop_lock_tables(self) -> &'static str {
        match self {
            Sql::Postgres => {
                "DROP TABLE distlock_locks, distlock_sessions; \
                 DROP SEQUENCE IF EXISTS distlock_fencing"
            }
            Sql::Mysql => "DROP TABLE distlock_locks, distlock_session_tokens",
        }
    }
}

/// The cases about where fencing tokens start, added to each SQL store's suite.
trait TokensCases {
    fn tokens_cases(self, sql: Sql) -> Self;
}

/// The cases of a store built without a URL: from a configuration in code, from JSON, over the
/// application's pool (`own.rs`).
trait OwnConnectionCases {
    fn own_connection_cases(self, sql: Sql) -> Self;
}

impl OwnConnectionCases for Suite {
    fn own_connection_cases(self, sql: Sql) -> Self {
        let suite = self
            .case("config_in_code_locks", move |ctx| {
                own::config_in_code_locks(ctx, sql)
            })
            .case("applications_pool_locks", move |ctx| {
                own::applications_pool_locks(ctx, sql)
            });
        #[cfg(feature = "serde")]
        let suite = suite.case("config_from_json_locks", move |ctx| {
            own::config_from_json_locks(ctx, sql)
        });
        suite
    }
}

impl TokensCases for Suite {
    fn tokens_cases(self, sql: Sql) -> Self {
        self.case("first_token_is_the_clock_in_us", first_token_is_the_clock)
            .case("tokens_rise_after_the_lock_rows_are_deleted", move |ctx| {
                tokens_rise_after(ctx, sql, Restart::RowsDeleted)
            })
            .case("tokens_rise_after_the_tables_are_recreated", move |ctx| {
                tokens_rise_after(ctx, sql, Restart::TablesRecreated)
            })
    }
}

/// How far the server's clock may be from this process's (both run on this machine) or a
/// take's clock reading from the moment around it, in µs: generous for a loaded machine.
const CLOCK_SKEW_US: u64 = 60_000_000;

/// This machine's wall clock in µs since the Unix epoch.
fn wall_clock_us() -> u64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970");
    u64::try_from(since_epoch.as_micros()).expect("µs since 1970 fit in 64 bits")
}

/// Whether `token` is the wall clock in µs at some moment between `before` and `after`
/// (within the skew).
fn is_clock_between(token: u64, before: u64, after: u64) -> bool {
    (before - CLOCK_SKEW_US..=after + CLOCK_SKEW_US).contains(&token)
}

/// A name's first token, and the fence a forced release of a name never used draws, are the
/// server's clock in µs: a counter that starts there is above every token handed out before
/// its memory was lost (a deleted row, a recreated table), unless takes ran ahead of the
/// clock.
async fn first_token_is_the_clock(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("first");
    let before = wall_clock_us();
    let guard = ctx.lock(&name).acquire().await?;
    let after = wall_clock_us();
    let token = guard.fencing_token().get();
    check!(
        is_clock_between(token, before, after),
        "a new name's first token is {token}, not the clock in µs ({before}..{after}, \
         ±{CLOCK_SKEW_US})"
    );
    guard.release().await?;

    let never_used = ctx.unique_name("forced");
    let before = wall_clock_us();
    let forced = ctx
        .client
        .force_release(&never_used, distlock::LockKind::Mutex)
        .await?;
    let after = wall_clock_us();
    let fence = forced.fence.get();
    check!(
        is_clock_between(fence, before, after),
        "a forced release of a name never used drew {fence}, not the clock in µs \
         ({before}..{after}, ±{CLOCK_SKEW_US})"
    );
    let guard = ctx.lock(&never_used).acquire().await?;
    let first = "the first take's token after a forced release, after its fence";
    check_above(first, guard.fencing_token().get(), fence)?;
    guard.release().await?;
    Ok(())
}

/// What loses a SQL store's memory of a name's tokens.
#[derive(Clone, Copy, Debug)]
enum Restart {
    RowsDeleted,
    TablesRecreated,
}

/// A name's token after its row was deleted, or after the tables were dropped and created again
/// by the next client, is above every token handed out before (in a database of the case's own,
/// so the drop disturbs no other test). The take before the loss and the take and forced
/// release after it each draw higher.
async fn tokens_rise_after(ctx: Ctx, sql: Sql, restart: Restart) -> Outcome {
    let name = ctx.unique_name("restart");
    in_own_database(&ctx, sql, "tokens", |url| async move {
        let client = distlock::connect(&url).await?;
        let mut last = 0;
        for _ in 0..3 {
            let guard = client.lock(&name).acquire().await?;
            let token = guard.fencing_token().get();
            check!(token > last, "takes drew {last}, then {token}");
            last = token;
            guard.release().await?;
        }
        drop(client);
        let statements = match restart {
            Restart::RowsDeleted => sql.delete_lock_rows(),
            Restart::TablesRecreated => sql.drop_lock_tables(),
        };
        sql.execute(&url, statements).await?;
        // A new client: it creates whatever tables are missing.
        let client = distlock::connect(&url).await?;
        let guard = client.lock(&name).acquire().await?;
        let token = guard.fencing_token().get();
        check!(
            token > last,
            "after {restart:?} the take drew {token}, not above the last token before, {last}"
        );
        guard.release().await?;
        let forced = client
            .force_release(&name, distlock::LockKind::Mutex)
            .await?;
        let fence = format!("the fence of a forced release after {restart:?}, after the take");
        check_above(&fence, forced.fence.get(), token)?;
        Ok(())
    })
    .await
}

async fn migrated_tables_work(url: &str) -> Outcome {
    // Two clients at once: both may find the columns missing, and both must connect.
    let (client, other) = tokio::join!(distlock::connect(url), distlock::connect(url));
    let (client, _other) = (client?, other?);
    let old = client.status("old-holding").await?;
    check!(
        old.iter()
            .flat_map(|s| &s.holdings)
            .any(|h| h.token.get() == 1 && h.holder.is_none() && h.since.is_none()),
        "the holding taken before the migration: {old:?}"
    );
    let guard = client
        .lock("new-holding")
        .lease(Duration::from_secs(30))
        .acquire()
        .await?;
    let token = guard.fencing_token();
    let found = client.status("new-holding").await?;
    check!(
        found
            .iter()
            .flat_map(|s| &s.holdings)
            .any(|h| h.token == token
                && h.holder.as_ref().map(|w| w.pid) == Some(std::process::id())
                && h.since.is_some()),
        "the holding taken after the migration: {found:?}"
    );
    let forced = client
        .force_release("new-holding", distlock::LockKind::Mutex)
        .await?;
    check!(
        forced.fence > token && forced.removed.iter().any(|h| h.token == token),
        "forced release: {forced:?}"
    );
    drop(guard);
    Ok(())
}

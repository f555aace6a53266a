//! The inventory store the demo's service writes to: products, orders and a counter.
//!
//! Each operation is one SQL statement from `sql/<dialect>/`, run in autocommit: a request's
//! steps (read, check, write, insert) are separate statements on purpose, so that only the
//! strategy under test keeps them from interleaving. Three dialects, chosen by the `--store`
//! URL's scheme: SQLite (the default, a file in the demo's temporary directory), PostgreSQL and
//! MySQL/MariaDB, each a [`Store`] variant with its own `sql/<dialect>/` folder. Every file
//! takes its parameters in the same order, so one Rust call binds them for all three.
//!
//! The row-lock strategy's transaction ([`StoreTx`]) exists only on the databases with row locks.

use std::ops::Range;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use distlock::fence::SqlFence;
use sqlx::Row;
use sqlx::mysql::MySqlPool;
use sqlx::postgres::PgPool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// How long a writer queues behind another process's write before its statement fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Forgets the demo's fences when its tables are created afresh (one text for every dialect).
const RESET_FENCE: &str = include_str!("sql/reset_fence.sql");

/// The fence helper of a store's pool (`SqlFence` is one type per database, picked here by the
/// pool's type so that `on_store!` bodies stay the same text for every dialect).
trait PoolFence {
    type Db: sqlx::Database;
    async fn install_fence(&self) -> distlock::Result<SqlFence<Self::Db>>;
    fn fence(&self) -> SqlFence<Self::Db>;
}

macro_rules! pool_fence {
    ($($pool:ty => $db:ty),*) => {$(
        impl PoolFence for $pool {
            type Db = $db;
            async fn install_fence(&self) -> distlock::Result<SqlFence<$db>> {
                SqlFence::<$db>::install(self).await
            }
            fn fence(&self) -> SqlFence<$db> {
                SqlFence::<$db>::assume_installed()
            }
        }
    )*};
}

pool_fence!(SqlitePool => sqlx::Sqlite, PgPool => sqlx::Postgres, MySqlPool => sqlx::MySql);

/// Units of one seeding statement: MariaDB stops a recursive CTE after 1000 iterations.
const SEED_CHUNK: u32 = 1000;

/// The SQL of one dialect, one statement (or script) per file of `sql/<dialect>/`.
macro_rules! dialect_sql {
    ($module:ident, $dir:literal, { $($name:ident = $file:literal),* $(,)? }) => {
        mod $module {
            $(pub(super) const $name: &str = include_str!(concat!("sql/", $dir, "/", $file));)*
        }
    };
}

/// Statements every dialect has.
macro_rules! common_sql {
    ($module:ident, $dir:literal $(, $name:ident = $file:literal)*) => {
        dialect_sql!($module, $dir, {
            SCHEMA = "schema.sql",
            SEED_PRODUCTS = "seed_products.sql",
            SEED_COUNTER = "seed_counter.sql",
            FIRST_IN_STOCK = "first_in_stock.sql",
            WRITE_STOCK = "write_stock.sql",
            CAS_STOCK = "cas_stock.sql",
            TAKE_ATOMIC = "take_atomic.sql",
            INSERT_ORDER = "insert_order.sql",
            READ_COUNTER = "read_counter.sql",
            WRITE_COUNTER = "write_counter.sql",
            CAS_COUNTER = "cas_counter.sql",
            ADD_ATOMIC = "add_atomic.sql",
            AUDIT_STOCK = "audit_stock.sql",
            AUDIT_COUNTER = "audit_counter.sql",
            $($name = $file,)*
        });
    };
}

common_sql!(sqlite_sql, "sqlite");
common_sql!(
    postgres_sql,
    "postgres",
    LOCK_FIRST_IN_STOCK = "lock_first_in_stock.sql",
    LOCK_COUNTER = "lock_counter.sql"
);
common_sql!(
    mysql_sql,
    "mysql",
    LOCK_FIRST_IN_STOCK = "lock_first_in_stock.sql",
    LOCK_COUNTER = "lock_counter.sql"
);

/// Runs `$body` with `$pool` bound to the store's pool and `$sql` to its dialect's statements.
/// The body is the same text for every dialect; each arm type-checks it against its own driver.
macro_rules! on_store {
    ($store:expr, |$pool:ident, $sql:ident| $body:expr) => {
        match $store {
            Store::Sqlite($pool) => {
                use self::sqlite_sql as $sql;
                $body
            }
            Store::Postgres($pool) => {
                use self::postgres_sql as $sql;
                $body
            }
            Store::MySql($pool) => {
                use self::mysql_sql as $sql;
                $body
            }
        }
    };
}

/// As [`on_store`], for the databases with row locks.
macro_rules! on_tx {
    ($tx:expr, |$conn:ident, $sql:ident| $body:expr) => {
        match $tx {
            StoreTx::Postgres(tx) => {
                use self::postgres_sql as $sql;
                let $conn = &mut **tx;
                $body
            }
            StoreTx::MySql(tx) => {
                use self::mysql_sql as $sql;
                let $conn = &mut **tx;
                $body
            }
        }
    };
}

/// Statements both the pool ([`Store`]) and the row-lock transaction ([`StoreTx`]) run, written
/// once: each takes the statement or the dialect's SQL module, and an executor (a pool, or the
/// transaction's connection).
macro_rules! read_product {
    ($query:expr, $exec:expr, $ids:expr, $what:literal) => {
        sqlx::query($query)
            .bind($ids.start)
            .bind($ids.end)
            .fetch_optional($exec)
            .await
            .context($what)?
            .map(|r| Product {
                id: r.get("id"),
                stock: r.get("stock"),
                version: r.get("version"),
            })
    };
}

macro_rules! read_slot {
    ($query:expr, $exec:expr, $slot:expr, $what:literal) => {{
        let row = sqlx::query($query)
            .bind(i64::from($slot))
            .fetch_one($exec)
            .await
            .context($what)?;
        Slot {
            value: row.get("value"),
            version: row.get("version"),
        }
    }};
}

macro_rules! write_stock {
    ($sql:ident, $exec:expr, $id:expr, $stock:expr) => {
        sqlx::query($sql::WRITE_STOCK)
            .bind($stock)
            .bind(now_us())
            .bind($id)
            .execute($exec)
            .await
            .context("writing stock")
            .map(drop)
    };
}

macro_rules! insert_order {
    ($sql:ident, $exec:expr, $product:expr, $buyer:expr, $instance:expr) => {
        sqlx::query($sql::INSERT_ORDER)
            .bind($product)
            .bind($buyer as i64)
            .bind(i64::from($instance))
            .execute($exec)
            .await
            .context("inserting the order")
            .map(drop)
    };
}

macro_rules! write_counter {
    ($sql:ident, $exec:expr, $slot:expr, $value:expr) => {
        sqlx::query($sql::WRITE_COUNTER)
            .bind($value)
            .bind(i64::from($slot))
            .execute($exec)
            .await
            .context("writing the counter")
            .map(drop)
    };
}

/// A connection pool to the inventory store.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    /// An SQLite file shared by the instances on this machine.
    Sqlite(SqlitePool),
    /// A PostgreSQL database (default isolation: READ COMMITTED).
    Postgres(PgPool),
    /// A MySQL or MariaDB database (InnoDB, default isolation: REPEATABLE READ).
    MySql(MySqlPool),
}

/// A transaction of the row-lock strategy: its reads lock the rows they return (`FOR UPDATE`)
/// until [`commit`](StoreTx::commit); dropping it rolls back and frees them.
pub(crate) enum StoreTx {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
}

/// A product as a buyer read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Product {
    pub(crate) id: i64,
    pub(crate) stock: i64,
    pub(crate) version: i64,
}

/// A counter slot as a writer read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) value: i64,
    pub(crate) version: i64,
}

/// What the stock audit found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StockAudit {
    /// Products whose stock went below zero.
    pub(crate) negative: i64,
    /// Units sold by the stock's own account (initial minus left).
    pub(crate) units: i64,
    /// Order rows.
    pub(crate) orders: i64,
    /// Units sold beyond a product's initial stock.
    pub(crate) oversold: i64,
}

/// A pool of `connections` to the database server `url` names.
async fn server_pool<DB: sqlx::Database>(url: &str, connections: u32) -> Result<sqlx::Pool<DB>> {
    let context = || format!("opening the store {}", distlock::redact(url));
    let options: <DB::Connection as sqlx::Connection>::Options = distlock::url::for_driver(url)
        .parse()
        .with_context(context)?;
    sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(connections)
        .connect_with(options)
        .await
        .with_context(context)
}

/// The database a store URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Sqlite,
    Postgres,
    MySql,
}

impl Store {
    /// Checks that `url` names a store the demo can use, without opening it.
    pub(crate) fn check_url(url: &str) -> Result<()> {
        dialect(url).map(|_| ())
    }

    /// Opens the store `url` names, creating an SQLite file if needed.
    pub(crate) async fn open(url: &str, connections: u32) -> Result<Store> {
        let connections = connections.max(1);
        Ok(match dialect(url)? {
            Dialect::Sqlite => Store::Sqlite(open_sqlite(&sqlite_path(url)?, connections).await?),
            Dialect::Postgres => Store::Postgres(server_pool(url, connections).await?),
            Dialect::MySql => Store::MySql(server_pool(url, connections).await?),
        })
    }

    /// Whether the store `url` names has row locks (`SELECT … FOR UPDATE`): PostgreSQL and
    /// MySQL do, SQLite locks the whole database instead.
    pub(crate) fn url_has_row_locks(url: &str) -> bool {
        matches!(dialect(url), Ok(Dialect::Postgres | Dialect::MySql))
    }

    /// Drops and recreates the tables, then puts `products` products with `units` units each
    /// on sale and sets `slots` counter slots to 0.
    pub(crate) async fn seed(&self, products: u32, units: u32, slots: u32) -> Result<()> {
        on_store!(self, |pool, sql| {
            // A DDL statement commits by itself in MySQL, so the tables are created first, out
            // of the seeding transaction.
            sqlx::raw_sql(sql::SCHEMA)
                .execute(pool)
                .await
                .context("creating the demo's tables")?;
            pool.install_fence()
                .await
                .context("creating distlock's fence table")?;
            sqlx::query(RESET_FENCE)
                .execute(pool)
                .await
                .context("resetting the demo's fences")?;
            let mut tx = pool.begin().await.context("seeding the store")?;
            let mut first = 1;
            while first <= products {
                let last = products.min(first + (SEED_CHUNK - 1));
                sqlx::query(sql::SEED_PRODUCTS)
                    .bind(i64::from(first))
                    .bind(i64::from(units))
                    .bind(i64::from(last))
                    .execute(&mut *tx)
                    .await
                    .context("seeding products")?;
                first = last + 1;
            }
            sqlx::query(sql::SEED_COUNTER)
                .bind(i64::from(slots.max(1)))
                .execute(&mut *tx)
                .await
                .context("seeding the counter")?;
            tx.commit().await.context("committing the seed")?;
        });
        Ok(())
    }

    /// The first product in stock whose id is in `ids`.
    pub(crate) async fn first_in_stock(&self, ids: &Range<i64>) -> Result<Option<Product>> {
        let row = on_store!(self, |pool, sql| read_product!(
            sql::FIRST_IN_STOCK,
            pool,
            ids,
            "reading stock"
        ));
        Ok(row)
    }

    /// Sets a product's stock to `stock`, whatever it is now.
    pub(crate) async fn write_stock(&self, id: i64, stock: i64) -> Result<()> {
        on_store!(self, |pool, sql| write_stock!(sql, pool, id, stock)?);
        Ok(())
    }

    /// Sets a product's stock to `stock` if its version is still `read.version`.
    pub(crate) async fn cas_stock(&self, read: &Product, stock: i64) -> Result<bool> {
        let rows = on_store!(self, |pool, sql| sqlx::query(sql::CAS_STOCK)
            .bind(stock)
            .bind(now_us())
            .bind(read.id)
            .bind(read.version)
            .execute(pool)
            .await
            .context("writing stock (compare and swap)")?
            .rows_affected());
        Ok(rows == 1)
    }

    /// Takes one unit of the first product in stock in `ids`, atomically; its id.
    pub(crate) async fn take_atomic(&self, ids: &Range<i64>) -> Result<Option<i64>> {
        loop {
            if let Some(id) = self.take_atomic_once(ids).await? {
                return Ok(Some(id));
            }
            // PostgreSQL does not re-run take_atomic.sql's subquery after waiting for another
            // buyer, so "no row" may only mean "lost the race for that product".
            if self.first_in_stock(ids).await?.is_none() {
                return Ok(None);
            }
        }
    }

    async fn take_atomic_once(&self, ids: &Range<i64>) -> Result<Option<i64>> {
        let context = "taking a unit (atomic decrement)";
        match self {
            Store::Sqlite(pool) => Ok(sqlx::query(sqlite_sql::TAKE_ATOMIC)
                .bind(now_us())
                .bind(ids.start)
                .bind(ids.end)
                .fetch_optional(pool)
                .await
                .context(context)?
                .map(|r| r.get("id"))),
            Store::Postgres(pool) => Ok(sqlx::query(postgres_sql::TAKE_ATOMIC)
                .bind(now_us())
                .bind(ids.start)
                .bind(ids.end)
                .fetch_optional(pool)
                .await
                .context(context)?
                .map(|r| r.get("id"))),
            Store::MySql(pool) => {
                let done = sqlx::query(mysql_sql::TAKE_ATOMIC)
                    .bind(now_us())
                    .bind(ids.start)
                    .bind(ids.end)
                    .execute(pool)
                    .await
                    .context(context)?;
                Ok((done.rows_affected() == 1).then(|| done.last_insert_id() as i64))
            }
        }
    }

    /// Records an order of one unit of `product`.
    pub(crate) async fn insert_order(&self, product: i64, buyer: u64, instance: u32) -> Result<()> {
        on_store!(self, |pool, sql| insert_order!(
            sql, pool, product, buyer, instance
        )?);
        Ok(())
    }

    /// Reads counter slot `slot`.
    pub(crate) async fn read_counter(&self, slot: u32) -> Result<Slot> {
        let read = on_store!(self, |pool, sql| read_slot!(
            sql::READ_COUNTER,
            pool,
            slot,
            "reading the counter"
        ));
        Ok(read)
    }

    /// Sets counter slot `slot` to `value`, whatever it is now.
    pub(crate) async fn write_counter(&self, slot: u32, value: i64) -> Result<()> {
        on_store!(self, |pool, sql| write_counter!(sql, pool, slot, value)?);
        Ok(())
    }

    /// Sets counter slot `slot` to `value` in a transaction that first checks `token` against
    /// `resource`'s fence (the lock+fence strategy); a stale token fails with
    /// `distlock::ErrorKind::StaleToken` and writes nothing.
    pub(crate) async fn write_counter_fenced(
        &self,
        slot: u32,
        value: i64,
        resource: &str,
        token: distlock::FencingToken,
    ) -> Result<()> {
        on_store!(self, |pool, sql| {
            let fence = pool.fence();
            let mut tx = pool.begin().await.context("starting the fenced write")?;
            fence.check(&mut tx, resource, token).await?;
            write_counter!(sql, &mut *tx, slot, value)?;
            tx.commit().await.context("committing the fenced write")?;
        });
        Ok(())
    }

    /// Sets counter slot `slot` to `value` if its version is still `read.version`.
    pub(crate) async fn cas_counter(&self, slot: u32, read: &Slot, value: i64) -> Result<bool> {
        let rows = on_store!(self, |pool, sql| sqlx::query(sql::CAS_COUNTER)
            .bind(value)
            .bind(i64::from(slot))
            .bind(read.version)
            .execute(pool)
            .await
            .context("writing the counter (compare and swap)")?
            .rows_affected());
        Ok(rows == 1)
    }

    /// Adds one to counter slot `slot` in the store itself.
    pub(crate) async fn add_atomic(&self, slot: u32) -> Result<()> {
        on_store!(self, |pool, sql| sqlx::query(sql::ADD_ATOMIC)
            .bind(i64::from(slot))
            .execute(pool)
            .await
            .context("incrementing the counter (atomic)")
            .map(drop)?);
        Ok(())
    }

    /// Starts a row-lock transaction; an error on SQLite, which has no row locks.
    pub(crate) async fn begin(&self) -> Result<StoreTx> {
        let context = "starting a row-lock transaction";
        match self {
            Store::Sqlite(_) => bail!("SQLite has no row locks (SELECT … FOR UPDATE)"),
            Store::Postgres(pool) => Ok(StoreTx::Postgres(pool.begin().await.context(context)?)),
            Store::MySql(pool) => Ok(StoreTx::MySql(pool.begin().await.context(context)?)),
        }
    }

    /// Audits the stock scenario.
    pub(crate) async fn audit_stock(&self) -> Result<StockAudit> {
        let audit = on_store!(self, |pool, sql| {
            let row = sqlx::query(sql::AUDIT_STOCK)
                .fetch_one(pool)
                .await
                .context("auditing the stock")?;
            StockAudit {
                negative: row.get("negative"),
                units: row.get("units"),
                orders: row.get("orders"),
                oversold: row.get("oversold"),
            }
        });
        Ok(audit)
    }

    /// The counter's value: the sum of its slots.
    pub(crate) async fn audit_counter(&self) -> Result<i64> {
        let value = on_store!(self, |pool, sql| sqlx::query(sql::AUDIT_COUNTER)
            .fetch_one(pool)
            .await
            .context("auditing the counter")?
            .get("value"));
        Ok(value)
    }

    /// Closes the pool, waiting for its connections to finish.
    pub(crate) async fn close(&self) {
        match self {
            Store::Sqlite(pool) => pool.close().await,
            Store::Postgres(pool) => pool.close().await,
            Store::MySql(pool) => pool.close().await,
        }
    }
}

impl StoreTx {
    /// The first product in stock whose id is in `ids`, its row locked until the transaction
    /// ends.
    pub(crate) async fn lock_first_in_stock(
        &mut self,
        ids: &Range<i64>,
    ) -> Result<Option<Product>> {
        let row = on_tx!(self, |conn, sql| read_product!(
            sql::LOCK_FIRST_IN_STOCK,
            conn,
            ids,
            "locking the first product in stock"
        ));
        Ok(row)
    }

    /// Sets a product's stock, in the transaction.
    pub(crate) async fn write_stock(&mut self, id: i64, stock: i64) -> Result<()> {
        on_tx!(self, |conn, sql| write_stock!(sql, conn, id, stock)?);
        Ok(())
    }

    /// Records an order, in the transaction.
    pub(crate) async fn insert_order(
        &mut self,
        product: i64,
        buyer: u64,
        instance: u32,
    ) -> Result<()> {
        on_tx!(self, |conn, sql| insert_order!(
            sql, conn, product, buyer, instance
        )?);
        Ok(())
    }

    /// Reads counter slot `slot`, its row locked until the transaction ends.
    pub(crate) async fn lock_counter(&mut self, slot: u32) -> Result<Slot> {
        let read = on_tx!(self, |conn, sql| read_slot!(
            sql::LOCK_COUNTER,
            conn,
            slot,
            "locking the counter"
        ));
        Ok(read)
    }

    /// Sets counter slot `slot`, in the transaction.
    pub(crate) async fn write_counter(&mut self, slot: u32, value: i64) -> Result<()> {
        on_tx!(self, |conn, sql| write_counter!(sql, conn, slot, value)?);
        Ok(())
    }

    /// Commits the writes and frees the rows, in one step.
    pub(crate) async fn commit(self) -> Result<()> {
        let context = "committing the row-lock transaction";
        match self {
            StoreTx::Postgres(tx) => tx.commit().await.context(context),
            StoreTx::MySql(tx) => tx.commit().await.context(context),
        }
    }
}

/// The database of a store URL; the error names what the demo can use.
fn dialect(url: &str) -> Result<Dialect> {
    use distlock::url::Scheme;
    match Scheme::of(url) {
        Ok(Scheme::Sqlite) => sqlite_path(url).map(|_| Dialect::Sqlite),
        Ok(Scheme::Postgres) => Ok(Dialect::Postgres),
        Ok(Scheme::Mysql)
            if url
                .get(..6)
                .is_some_and(|s| s.eq_ignore_ascii_case("mysql:")) =>
        {
            Ok(Dialect::MySql)
        }
        Ok(Scheme::Mysql) => bail!("a MariaDB store is spelt mysql://…"),
        _ => bail!(
            "{:?} is not a store URL the demo knows (sqlite:PATH, postgres://…, mysql://…)",
            distlock::redact(url)
        ),
    }
}

/// The file of an `sqlite:PATH` store URL.
fn sqlite_path(url: &str) -> Result<std::path::PathBuf> {
    distlock::url::sqlite_path(url).map_err(|_| {
        anyhow::anyhow!("the demo's store needs a file shared by the instances: sqlite:PATH")
    })
}

async fn open_sqlite(path: &Path, connections: u32) -> Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str("sqlite://")?
        .filename(path)
        .create_if_missing(true)
        // WAL: readers never wait for the writer; NORMAL: no fsync per commit (a demo store).
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    SqlitePoolOptions::new()
        .max_connections(connections.max(1))
        .connect_with(options)
        .await
        .with_context(|| format!("opening the store {}", path.display()))
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

//! The inventory store the demo's service writes to: products, orders and a counter.
//!
//! Each operation is one SQL statement from `sql/<dialect>/`, run in autocommit: a request's
//! steps (read, check, write, insert) are separate statements on purpose, so that only the
//! strategy under test keeps them from interleaving. Only SQLite is spoken today (the default,
//! a file in the demo's temporary directory); another dialect is a new [`Store`] variant with its
//! own `sql/` folder, chosen by the `--store` URL's scheme.

use std::ops::Range;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// How long a writer queues behind another process's write before its statement fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The SQL of the SQLite store, one statement (or script) per file.
mod sqlite_sql {
    pub(super) const SCHEMA: &str = include_str!("sql/sqlite/schema.sql");
    pub(super) const SEED_PRODUCTS: &str = include_str!("sql/sqlite/seed_products.sql");
    pub(super) const SEED_COUNTER: &str = include_str!("sql/sqlite/seed_counter.sql");
    pub(super) const FIRST_IN_STOCK: &str = include_str!("sql/sqlite/first_in_stock.sql");
    pub(super) const WRITE_STOCK: &str = include_str!("sql/sqlite/write_stock.sql");
    pub(super) const CAS_STOCK: &str = include_str!("sql/sqlite/cas_stock.sql");
    pub(super) const TAKE_ATOMIC: &str = include_str!("sql/sqlite/take_atomic.sql");
    pub(super) const INSERT_ORDER: &str = include_str!("sql/sqlite/insert_order.sql");
    pub(super) const READ_COUNTER: &str = include_str!("sql/sqlite/read_counter.sql");
    pub(super) const WRITE_COUNTER: &str = include_str!("sql/sqlite/write_counter.sql");
    pub(super) const CAS_COUNTER: &str = include_str!("sql/sqlite/cas_counter.sql");
    pub(super) const ADD_ATOMIC: &str = include_str!("sql/sqlite/add_atomic.sql");
    pub(super) const AUDIT_STOCK: &str = include_str!("sql/sqlite/audit_stock.sql");
    pub(super) const AUDIT_COUNTER: &str = include_str!("sql/sqlite/audit_counter.sql");
}

/// A connection pool to the inventory store.
#[derive(Clone, Debug)]
pub(crate) enum Store {
    /// An SQLite file shared by the instances on this machine.
    Sqlite(SqlitePool),
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

impl Store {
    /// Checks that `url` names a store the demo can use, without opening it.
    pub(crate) fn check_url(url: &str) -> Result<()> {
        sqlite_path(url).map(|_| ())
    }

    /// Opens the store `url` names, creating an SQLite file if needed.
    pub(crate) async fn open(url: &str, connections: u32) -> Result<Store> {
        let path = sqlite_path(url)?;
        Ok(Store::Sqlite(
            open_sqlite(Path::new(path), connections).await?,
        ))
    }

    /// Drops and recreates the tables, then puts `products` products with `units` units each
    /// on sale and sets `slots` counter slots to 0.
    pub(crate) async fn seed(&self, products: u32, units: u32, slots: u32) -> Result<()> {
        let Store::Sqlite(pool) = self;
        let mut tx = pool.begin().await.context("seeding the store")?;
        sqlx::raw_sql(sqlite_sql::SCHEMA)
            .execute(&mut *tx)
            .await
            .context("creating the demo's tables")?;
        if products > 0 {
            sqlx::query(sqlite_sql::SEED_PRODUCTS)
                .bind(i64::from(products))
                .bind(i64::from(units))
                .execute(&mut *tx)
                .await
                .context("seeding products")?;
        }
        sqlx::query(sqlite_sql::SEED_COUNTER)
            .bind(i64::from(slots.max(1)))
            .execute(&mut *tx)
            .await
            .context("seeding the counter")?;
        tx.commit().await.context("committing the seed")?;
        Ok(())
    }

    /// The first product in stock whose id is in `ids`.
    pub(crate) async fn first_in_stock(&self, ids: &Range<i64>) -> Result<Option<Product>> {
        let Store::Sqlite(pool) = self;
        let row = sqlx::query(sqlite_sql::FIRST_IN_STOCK)
            .bind(ids.start)
            .bind(ids.end)
            .fetch_optional(pool)
            .await
            .context("reading stock")?;
        Ok(row.map(|r| Product {
            id: r.get("id"),
            stock: r.get("stock"),
            version: r.get("version"),
        }))
    }

    /// Sets a product's stock to `stock`, whatever it is now.
    pub(crate) async fn write_stock(&self, id: i64, stock: i64) -> Result<()> {
        let Store::Sqlite(pool) = self;
        sqlx::query(sqlite_sql::WRITE_STOCK)
            .bind(id)
            .bind(stock)
            .bind(now_us())
            .execute(pool)
            .await
            .context("writing stock")?;
        Ok(())
    }

    /// Sets a product's stock to `stock` if its version is still `read.version`.
    pub(crate) async fn cas_stock(&self, read: &Product, stock: i64) -> Result<bool> {
        let Store::Sqlite(pool) = self;
        let done = sqlx::query(sqlite_sql::CAS_STOCK)
            .bind(read.id)
            .bind(stock)
            .bind(now_us())
            .bind(read.version)
            .execute(pool)
            .await
            .context("writing stock (compare and swap)")?;
        Ok(done.rows_affected() == 1)
    }

    /// Takes one unit of the first product in stock in `ids`, atomically; its id.
    pub(crate) async fn take_atomic(&self, ids: &Range<i64>) -> Result<Option<i64>> {
        let Store::Sqlite(pool) = self;
        let row = sqlx::query(sqlite_sql::TAKE_ATOMIC)
            .bind(ids.start)
            .bind(ids.end)
            .bind(now_us())
            .fetch_optional(pool)
            .await
            .context("taking a unit (atomic decrement)")?;
        Ok(row.map(|r| r.get("id")))
    }

    /// Records an order of one unit of `product`.
    pub(crate) async fn insert_order(&self, product: i64, buyer: u64, instance: u32) -> Result<()> {
        let Store::Sqlite(pool) = self;
        sqlx::query(sqlite_sql::INSERT_ORDER)
            .bind(product)
            .bind(buyer as i64)
            .bind(i64::from(instance))
            .execute(pool)
            .await
            .context("inserting the order")?;
        Ok(())
    }

    /// Reads counter slot `slot`.
    pub(crate) async fn read_counter(&self, slot: u32) -> Result<Slot> {
        let Store::Sqlite(pool) = self;
        let row = sqlx::query(sqlite_sql::READ_COUNTER)
            .bind(i64::from(slot))
            .fetch_one(pool)
            .await
            .context("reading the counter")?;
        Ok(Slot {
            value: row.get("value"),
            version: row.get("version"),
        })
    }

    /// Sets counter slot `slot` to `value`, whatever it is now.
    pub(crate) async fn write_counter(&self, slot: u32, value: i64) -> Result<()> {
        let Store::Sqlite(pool) = self;
        sqlx::query(sqlite_sql::WRITE_COUNTER)
            .bind(i64::from(slot))
            .bind(value)
            .execute(pool)
            .await
            .context("writing the counter")?;
        Ok(())
    }

    /// Sets counter slot `slot` to `value` if its version is still `read.version`.
    pub(crate) async fn cas_counter(&self, slot: u32, read: &Slot, value: i64) -> Result<bool> {
        let Store::Sqlite(pool) = self;
        let done = sqlx::query(sqlite_sql::CAS_COUNTER)
            .bind(i64::from(slot))
            .bind(value)
            .bind(read.version)
            .execute(pool)
            .await
            .context("writing the counter (compare and swap)")?;
        Ok(done.rows_affected() == 1)
    }

    /// Adds one to counter slot `slot` in the store itself.
    pub(crate) async fn add_atomic(&self, slot: u32) -> Result<()> {
        let Store::Sqlite(pool) = self;
        sqlx::query(sqlite_sql::ADD_ATOMIC)
            .bind(i64::from(slot))
            .execute(pool)
            .await
            .context("incrementing the counter (atomic)")?;
        Ok(())
    }

    /// Audits the stock scenario.
    pub(crate) async fn audit_stock(&self) -> Result<StockAudit> {
        let Store::Sqlite(pool) = self;
        let row = sqlx::query(sqlite_sql::AUDIT_STOCK)
            .fetch_one(pool)
            .await
            .context("auditing the stock")?;
        Ok(StockAudit {
            negative: row.get("negative"),
            units: row.get("units"),
            orders: row.get("orders"),
            oversold: row.get("oversold"),
        })
    }

    /// The counter's value: the sum of its slots.
    pub(crate) async fn audit_counter(&self) -> Result<i64> {
        let Store::Sqlite(pool) = self;
        let row = sqlx::query(sqlite_sql::AUDIT_COUNTER)
            .fetch_one(pool)
            .await
            .context("auditing the counter")?;
        Ok(row.get("value"))
    }

    /// Closes the pool, waiting for its connections to finish.
    pub(crate) async fn close(&self) {
        let Store::Sqlite(pool) = self;
        pool.close().await;
    }
}

/// The file of an `sqlite:PATH` store URL; the error names what the demo can use instead.
fn sqlite_path(url: &str) -> Result<&str> {
    let scheme = url.split(':').next().unwrap_or("").to_ascii_lowercase();
    match scheme.as_str() {
        "sqlite" => {
            let path = url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .unwrap_or("");
            if path.is_empty() || path.contains(":memory:") {
                bail!("the demo's store needs a file shared by the instances: sqlite:PATH");
            }
            Ok(path)
        }
        "postgres" | "postgresql" | "mysql" | "mariadb" => bail!(
            "the demo's inventory store speaks only SQLite so far; {scheme}: will come with its \
             own sql/{scheme}/ statements"
        ),
        _ => bail!(
            "{:?} is not a store URL the demo knows (sqlite:PATH)",
            distlock::redact(url)
        ),
    }
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

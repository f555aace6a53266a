//! The fence in the caller's SQL database (PostgreSQL, MySQL/MariaDB, SQLite, through sqlx),
//! checked and raised inside the caller's own transaction.
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool, guard: distlock::Guard) -> distlock::Result<()> {
//! // Not run by the doctests: it needs a PostgreSQL server.
//! use distlock::fence::SqlFence;
//!
//! let fence = SqlFence::<sqlx::Postgres>::install(&pool).await?; // once: creates the table
//! let mut tx = pool.begin().await.expect("begin");
//! fence.check(&mut tx, "product:42", guard.fencing_token()).await?; // ErrorKind::StaleToken
//! sqlx::query("UPDATE product SET stock = stock - 1 WHERE id = 42")
//!     .execute(&mut *tx)
//!     .await
//!     .expect("the fenced write");
//! tx.commit().await.expect("commit");                // the write and the fence, together
//! # Ok(()) }
//! ```
//!
//! The check raises the resource's row in `distlock_fences` to the token, only if the token is
//! above it. That row then stays locked until the transaction ends: a concurrent check of the
//! same resource waits for the commit (or rollback) and compares against what was committed.
//! On SQLite, make the check the transaction's first statement (or `BEGIN IMMEDIATE`): a
//! deferred transaction that read first may be refused the write lock (`SQLITE_BUSY`).
//!
//! [`SqlFence::update`] is the form for one statement without a transaction: the fence is a
//! column of the caller's row, compared and set by the caller's own `UPDATE`.

use std::marker::PhantomData;

use tracing::Instrument;

use crate::error::{Error, ErrorKind, Result};
use crate::sqlx_support::error::from_sqlx;
use crate::types::{FencingToken, LockName};

/// Fences of resources in one SQL database: `distlock_fences`, one row per resource.
///
/// Resource names follow the rules of lock names (1 to 512 bytes, no control characters);
/// [`ErrorKind::InvalidName`] otherwise.
pub struct SqlFence<DB: sqlx::Database> {
    statements: FenceStatements,
    backend: &'static str,
    database: PhantomData<fn() -> DB>,
}

impl<DB: sqlx::Database> Clone for SqlFence<DB> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<DB: sqlx::Database> Copy for SqlFence<DB> {}

impl<DB: sqlx::Database> std::fmt::Debug for SqlFence<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlFence")
            .field("backend", &self.backend)
            .finish()
    }
}

/// The fence statements of one database (`fence/sql/<database>/*.sql`; `schema.sql` runs once,
/// in `new`). Every dialect binds in the same order.
#[derive(Clone, Copy)]
struct FenceStatements {
    /// Raises a fence to a larger token: token, resource, token.
    advance: &'static str,
    /// Creates a resource's fence: resource, token.
    create: &'static str,
    /// `create` runs before `advance`, with [`NO_TOKEN_YET`], so that `advance` always finds
    /// the row (MySQL: a locking read that finds no row locks a gap, see its
    /// `mysql/create.sql`); otherwise it runs only after `advance` found nothing to raise.
    create_first: bool,
    /// Reads a resource's fence: resource.
    read: &'static str,
}

/// The token of a fence row created before its first write is compared: below every token.
const NO_TOKEN_YET: i64 = -1;

/// A token as the BIGINT column stores it.
fn to_sql(backend: &'static str, token: FencingToken) -> Result<i64> {
    i64::try_from(token.get()).map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("fencing token {token} is above the largest BIGINT"),
        )
        .with_backend(backend)
    })
}

/// One implementation per database, differing only in SQL, connection type and binding.
macro_rules! fence_for {
    (
        feature = $feature:literal,
        db = $db:ty,
        connection = $conn:ty,
        backend = $backend:literal,
        create_first = $create_first:literal,
        bind = |$n:ident| $bind:expr,
    ) => {
        #[cfg(feature = $feature)]
        impl SqlFence<$db> {
            /// Creates `distlock_fences` if missing and returns the fence helper. Run it on
            /// the pool (not in a transaction: MySQL commits around DDL), once at start-up.
            pub async fn install<'c, E>(executor: E) -> Result<Self>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                sqlx::raw_sql(include_str!(concat!("sql/", $backend, "/schema.sql")))
                    .execute(executor)
                    .await
                    .map_err(|e| from_sqlx($backend, "creating distlock_fences", e))?;
                Ok(Self::assume_installed())
            }

            /// The fence helper, for a database whose `distlock_fences` exists already.
            pub fn assume_installed() -> Self {
                SqlFence {
                    statements: FenceStatements {
                        advance: include_str!(concat!("sql/", $backend, "/advance.sql")),
                        create: include_str!(concat!("sql/", $backend, "/create.sql")),
                        create_first: $create_first,
                        read: include_str!(concat!("sql/", $backend, "/read.sql")),
                    },
                    backend: $backend,
                    database: PhantomData,
                }
            }

            /// Accepts `token` for a write to `resource` in the transaction `tx` (or fails
            /// with [`ErrorKind::StaleToken`] if it is not above the last token accepted). The
            /// raised fence commits or rolls back with the caller's writes, and the fence row
            /// stays locked until then.
            ///
            /// # Cancel Safety
            ///
            /// Dropping the future leaves the transaction in an unknown state: roll it back.
            pub async fn check(
                &self,
                tx: &mut $conn,
                resource: &str,
                token: FencingToken,
            ) -> Result<()> {
                let span = tracing::debug_span!(
                    "distlock.fence_check",
                    backend = $backend,
                    resource,
                    token = token.get(),
                );
                self.advance(tx, resource, token).instrument(span).await
            }

            async fn advance(
                &self,
                tx: &mut $conn,
                resource: &str,
                token: FencingToken,
            ) -> Result<()> {
                let $n = &LockName::new(resource)?;
                let value = to_sql($backend, token)?;
                let fail = |e| from_sqlx($backend, "checking the fence", e);
                if self.statements.create_first {
                    sqlx::query(self.statements.create)
                        .bind($bind)
                        .bind(NO_TOKEN_YET)
                        .execute(&mut *tx)
                        .await
                        .map_err(fail)?;
                }
                // The second pass is for a first write raced by another first writer: the row
                // that writer created is compared once more, after its commit. (A row created
                // first is there to compare on the first pass.)
                let passes = if self.statements.create_first { 1 } else { 2 };
                for pass in 0..passes {
                    let raised = sqlx::query(self.statements.advance)
                        .bind(value)
                        .bind($bind)
                        .bind(value)
                        .execute(&mut *tx)
                        .await
                        .map_err(fail)?;
                    if raised.rows_affected() > 0 {
                        return Ok(());
                    }
                    if pass + 1 == passes {
                        break;
                    }
                    let created = sqlx::query(self.statements.create)
                        .bind($bind)
                        .bind(value)
                        .execute(&mut *tx)
                        .await
                        .map_err(fail)?;
                    if created.rows_affected() > 0 {
                        return Ok(());
                    }
                }
                let last: Option<i64> = sqlx::query_scalar(self.statements.read)
                    .bind($bind)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(fail)?;
                Err(super::stale(
                    $backend,
                    resource,
                    token,
                    last.filter(|t| *t > NO_TOKEN_YET).map(|t| t as u64),
                ))
            }

            /// The last token accepted for `resource`, if any.
            pub async fn last_token<'c, E>(
                &self,
                executor: E,
                resource: &str,
            ) -> Result<Option<FencingToken>>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                let $n = &LockName::new(resource)?;
                let last: Option<i64> = sqlx::query_scalar(self.statements.read)
                    .bind($bind)
                    .fetch_optional(executor)
                    .await
                    .map_err(|e| from_sqlx($backend, "reading the fence", e))?;
                // A row created before a check that then failed holds no token yet.
                Ok(last
                    .filter(|t| *t > NO_TOKEN_YET)
                    .map(|t| FencingToken(t as u64)))
            }

            /// The single-statement form: runs the caller's `UPDATE`, which must itself set
            /// the row's fence column to the token and match only rows whose fence is below it
            /// (`… SET stock = ?, fence = ? WHERE id = ? AND fence < ?`), and turns "no row
            /// matched" into [`ErrorKind::StaleToken`] for `resource`. Returns the rows
            /// written. No transaction and no `distlock_fences` row are needed.
            pub async fn update<'q, 'c, E>(
                &self,
                executor: E,
                update: sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments>,
                resource: &str,
                token: FencingToken,
            ) -> Result<u64>
            where
                E: sqlx::Executor<'c, Database = $db>,
            {
                let span = tracing::debug_span!(
                    "distlock.fence_update",
                    backend = $backend,
                    resource,
                    token = token.get(),
                );
                let written = update
                    .execute(executor)
                    .instrument(span)
                    .await
                    .map_err(|e| from_sqlx($backend, "running the fenced update", e))?
                    .rows_affected();
                if written == 0 {
                    return Err(super::stale($backend, resource, token, None));
                }
                Ok(written)
            }
        }
    };
}

fence_for! {
    feature = "postgres",
    db = sqlx::Postgres,
    connection = sqlx::PgConnection,
    backend = "postgres",
    create_first = false,
    bind = |n| n.as_str(),
}

fence_for! {
    feature = "mysql",
    db = sqlx::MySql,
    connection = sqlx::MySqlConnection,
    backend = "mysql",
    create_first = true,
    bind = |n| n.as_str().as_bytes(),
}

fence_for! {
    feature = "sqlite-fence",
    db = sqlx::Sqlite,
    connection = sqlx::SqliteConnection,
    backend = "sqlite",
    create_first = false,
    bind = |n| n.as_str(),
}

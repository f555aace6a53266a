//! What a SQL dialect supplies to the one SQL backend ([`SqlBackend`](super::SqlBackend)): its
//! sqlx database, its statements for the lock itself, how a forced release is answered in each
//! lock mode, how it binds the statements the flow runs by name, and how waiters hear of a
//! change. The steps of the flavours ([`FlavourSql`](super::flavours::FlavourSql)) and of
//! elections and latches ([`SyncSql`](super::sync::SyncSql)) are traits of their own beside the
//! flow that runs them.
//!
//! Every statement method runs one step of a flow written once in this folder, so it answers
//! sqlx's error as it is: the flow names what failed (and runs a deadlock victim again).
//! Methods taking a [`Conn`] run inside the flow's transaction; those taking the pool run alone;
//! those answering a [`Statement`] only bind it, and the flow runs it ([`Runs`]).

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use sqlx::pool::PoolOptions;
use sqlx::query::Query;
use sqlx::{Database, Executor, IntoArguments, Pool};

use super::inspect::Columns;
use super::session::SessionPool;
use crate::backend::{Attempt, LockRequest, Wakeups};
use crate::backends::client_rules::flavour_rules::Peek;
use crate::error::Result;
use crate::status::ForcedRelease;
use crate::types::LockName;

/// A statement's answer, its error still sqlx's.
pub(crate) type SqlResult<T> = std::result::Result<T, sqlx::Error>;

/// A connection of the dialect's database (inside a transaction, the transaction's).
pub(crate) type Conn<D> = <<D as Dialect>::Db as Database>::Connection;

/// The driver's connect options of the dialect's database.
pub(crate) type ConnectOptions<D> = <Conn<D> as sqlx::Connection>::Options;

/// A statement of the dialect's, its values bound, ready for the flow to run.
pub(crate) type Statement<'a, D> =
    Query<'a, <D as Dialect>::Db, <<D as Dialect>::Db as Database>::Arguments>;

/// What the flow runs itself on a dialect's database, where only the text and the binding of a
/// statement differ: sqlx's bounds for that are met by both drivers and written once, here.
pub(crate) trait Runs: Database<Row: Columns> {
    /// Runs a string of statements (the tables' DDL) on the pool.
    fn run_all<'a>(pool: &'a Pool<Self>, sql: &'static str) -> BoxFuture<'a, SqlResult<()>>;

    /// Runs `query` on the pool: its rows.
    fn rows<'a>(
        pool: &'a Pool<Self>,
        query: Query<'a, Self, Self::Arguments>,
    ) -> BoxFuture<'a, SqlResult<Vec<Self::Row>>>;

    /// Runs `query` on `conn` (in a transaction): its rows.
    fn rows_in<'a>(
        conn: &'a mut Self::Connection,
        query: Query<'a, Self, Self::Arguments>,
    ) -> BoxFuture<'a, SqlResult<Vec<Self::Row>>>;
}

impl<DB> Runs for DB
where
    DB: Database<Row: Columns>,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    fn run_all<'a>(pool: &'a Pool<DB>, sql: &'static str) -> BoxFuture<'a, SqlResult<()>> {
        Box::pin(async move { sqlx::raw_sql(sql).execute(pool).await.map(drop) })
    }

    fn rows<'a>(
        pool: &'a Pool<DB>,
        query: Query<'a, DB, DB::Arguments>,
    ) -> BoxFuture<'a, SqlResult<Vec<DB::Row>>> {
        Box::pin(query.fetch_all(pool))
    }

    fn rows_in<'a>(
        conn: &'a mut DB::Connection,
        query: Query<'a, DB, DB::Arguments>,
    ) -> BoxFuture<'a, SqlResult<Vec<DB::Row>>> {
        Box::pin(query.fetch_all(conn))
    }
}

/// The statements the flow runs itself, kept under the same name in every dialect's `sql/`
/// folder: invoked inside a dialect's `impl Dialect`, this includes them from that dialect's
/// folder (`include_str!` reads relative to the file that invokes the macro).
macro_rules! dialect_statements {
    () => {
        const TABLES: [&'static str; 3] = [
            include_str!("sql/schema.sql"),
            include_str!("sql/schema_sync.sql"),
            include_str!("sql/schema_flavours.sql"),
        ];
        const STATUS: [&'static str; 2] = [
            include_str!("sql/status.sql"),
            include_str!("sql/session_status.sql"),
        ];
        const SHOWN: [&'static str; 2] = [
            include_str!("sql/flavour_status.sql"),
            include_str!("sql/waiter_status.sql"),
        ];
        const ENTRIES: [&'static str; 3] = [
            include_str!("sql/elect_current.sql"),
            include_str!("sql/elect_latest.sql"),
            include_str!("sql/elect_log.sql"),
        ];
    };
}
pub(crate) use dialect_statements;

pub(crate) use crate::backends::poll_watch::{Read, Wants};

/// The locks a status shows: the one `name`d, or (when `None`) every one whose name starts with
/// `prefix` (empty for a name). The statements compare `left(name, length(prefix))`, so a
/// prefix needs no `LIKE` escaping.
#[derive(Clone, Copy)]
pub(crate) struct Picked<'a> {
    pub(crate) name: Option<&'a str>,
    pub(crate) prefix: &'a str,
}

/// One SQL database as the SQL backend runs it. The value is the client's own state for it
/// (PostgreSQL's listening connection, MySQL's pollers), made once the pool exists.
#[async_trait]
pub(crate) trait Dialect: Sized + Send + Sync + 'static {
    /// The sqlx database.
    type Db: Runs;
    /// Where the dialect's session-lock connections come from.
    type Sessions: SessionPool;

    /// The backend's name, in errors and reports, and the URL scheme the driver reads
    /// (`mariadb://` and `postgresql://` are handed over as this).
    const NAME: &'static str;
    /// The database's name in the message of a URL the driver refuses.
    const PRODUCT: &'static str;
    /// The SQLSTATE of a transaction the database chose as a deadlock victim: run it again.
    const DEADLOCK: &'static str;
    /// Whether the database notifies waiters ([`Capabilities::notifying`]) on a listening
    /// connection of the pool (one more than the URL's `max_connections`); one that does not
    /// is watched by polling.
    ///
    /// [`Capabilities::notifying`]: crate::Capabilities::notifying
    const NOTIFIES: bool;
    /// The statements that create distlock's tables if missing, run in this order at connect:
    /// the lock's, the election and latch ones, the flavours' (`sql/schema*.sql`). This and the
    /// other statements the flow runs by name come from [`dialect_statements!`].
    const TABLES: [&'static str; 3];
    /// The status statements of the exclusive locks: the lease rows (`sql/status.sql`), the
    /// session locks (`sql/session_status.sql`); decoded by [`inspect::statuses`].
    ///
    /// [`inspect::statuses`]: super::inspect::statuses
    const STATUS: [&'static str; 2];
    /// The status statements of the flavours: their holdings (`sql/flavour_status.sql`) and
    /// their lines (`sql/waiter_status.sql`); decoded by [`inspect::shown`] and
    /// [`inspect::waiting`].
    ///
    /// [`inspect::shown`]: super::inspect::shown
    /// [`inspect::waiting`]: super::inspect::waiting
    const SHOWN: [&'static str; 2];
    /// An election's entries ([`Entries`](super::sync::Entries)): the live one
    /// (`sql/elect_current.sql`), the latest (`sql/elect_latest.sql`), those after a seq
    /// (`sql/elect_log.sql`); decoded by [`inspect::entries`](super::inspect::entries).
    const ENTRIES: [&'static str; 3];

    /// The client's state, over the backend's pool.
    fn new(pool: &Pool<Self::Db>) -> Self;

    /// The pool of session-lock connections, from the pool settings the backend chose.
    fn sessions(pool: PoolOptions<Self::Db>, options: ConnectOptions<Self>) -> Self::Sessions;

    /// Brings tables made by an earlier version up to date, after [`TABLES`](Dialect::TABLES).
    async fn upgrade(_pool: &Pool<Self::Db>) -> Result<()> {
        Ok(())
    }

    /// Takes a lease lock, confirms the owner's own holding, or reports it held: one statement.
    async fn take(pool: &Pool<Self::Db>, req: &LockRequest) -> SqlResult<Attempt>;

    /// Restarts the lease of the holding `token` names; `true` if it was still there. Tokens
    /// are the BIGINT the tables keep.
    async fn extend(pool: &Pool<Self::Db>, req: &LockRequest, token: i64) -> SqlResult<bool>;

    /// Frees the owner's lease lock (only the holding `token` names, when given) and tells its
    /// waiters; `true` if it was freed.
    async fn release(
        pool: &Pool<Self::Db>,
        req: &LockRequest,
        token: Option<i64>,
    ) -> SqlResult<bool>;

    /// A status statement (of [`STATUS`](Dialect::STATUS) or [`SHOWN`](Dialect::SHOWN)) with
    /// the locks `picked` bound.
    fn select<'a>(statement: &'static str, picked: Picked<'a>) -> Statement<'a, Self>;

    /// An election's [`ENTRIES`](Dialect::ENTRIES) statement with the election bound, and the
    /// seq `after` which entries are read (for `sql/elect_log.sql`).
    fn entries<'a>(
        statement: &'static str,
        election: &'a str,
        after: Option<u64>,
    ) -> Statement<'a, Self>;

    /// Ends the exclusive lock's holding, whoever holds it, and advances its fencing counter in
    /// one transaction (a deadlock victim runs again).
    async fn force_release(
        pool: &Pool<Self::Db>,
        sessions: bool,
        name: &str,
    ) -> SqlResult<ForcedRelease>;

    /// Tells the watchers of `key` (a synchronizer, an election, a latch) that it changed, at
    /// the commit of the transaction `conn` is in. Nothing, for a database watched by polling.
    async fn changed(_conn: &mut Conn<Self>, _key: &str) -> SqlResult<()> {
        Ok(())
    }

    /// Notices that the exclusive lock `name` may be free. Never, for a database watched by
    /// polling: the core's timer asks again.
    async fn watch_free(&self, _name: &LockName) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// Notices of [`changed`](Dialect::changed) for an election or a latch. Never, for a
    /// database watched by polling: the core polls.
    async fn watch_changes(&self, _key: String) -> Result<Wakeups> {
        Ok(Box::pin(futures_util::stream::pending()))
    }

    /// Wake-ups for a waiter of the synchronizer `key`: its notices, or a poller that `read`s
    /// it and wakes the waiter when what it read `wants` it to try.
    async fn watch_synchronizer(
        &self,
        key: String,
        read: Read<Peek>,
        wants: Wants<Peek>,
    ) -> Result<Wakeups>;
}

//! SQL transactions that a dropped future cannot leave half begun.
//!
//! sqlx 0.9 counts a transaction as open only once the server has answered its `BEGIN`. A future
//! dropped in between (a resign aborting the election record's refresh, a caller's timeout)
//! leaves the server inside a transaction that sqlx does not know of and so never rolls back:
//! the pooled connection then runs whatever comes next inside it, uncommitted — a lock's take
//! and release included — and its rows stay locked until the connection closes (every
//! campaigner of an election stalled for 10 s and more). MySQL's driver is no safer with a
//! statement dropped while it is being prepared.
//!
//! So distlock's own transactions (election records, latches, forced releases) run whole in a
//! task of their own ([`finished`]): a caller dropped meanwhile leaves the task to finish, and
//! the write is as if the caller had waited. The row-lock API hands its open transaction to the
//! caller, so there only the `BEGIN` runs apart ([`begin`]); a transaction dropped once begun is
//! rolled back by sqlx itself.

use std::future::Future;

use sqlx::{Database, Pool, Transaction};

use crate::error::{Error, ErrorKind, Result};

/// Runs `work` to its end in a task of its own, even if the caller is dropped first.
pub(crate) async fn finished<T: Send + 'static>(
    work: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    joined(tokio::spawn(work).await).unwrap_or_else(|| {
        Err(Error::new(
            ErrorKind::Connection,
            "the runtime is shutting down: the write was not finished",
        ))
    })
}

/// [`Pool::begin`], finished even if the caller is dropped first.
pub(crate) async fn begin<DB: Database>(
    pool: &Pool<DB>,
) -> std::result::Result<Transaction<'static, DB>, sqlx::Error>
where
    Transaction<'static, DB>: Send,
{
    let pool = pool.clone();
    let begun = tokio::spawn(async move { pool.begin().await }).await;
    // The runtime is shutting down: nothing will run on the pool any more.
    joined(begun).unwrap_or(Err(sqlx::Error::PoolClosed))
}

/// A task's output; its panic goes on in the caller; `None` if the runtime cancelled it.
fn joined<T>(joined: std::result::Result<T, tokio::task::JoinError>) -> Option<T> {
    match joined {
        Ok(out) => Some(out),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

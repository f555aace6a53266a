//! Database techniques that are not a [`Lock`](crate::Lock): a row lock held by the caller's own
//! transaction ([`row_lock`]), and optimistic version checks with bounded retries
//! ([`optimistic`]). Both work on the caller's sqlx pool (sqlx 0.9: the pool of
//! the same sqlx that distlock's `postgres` and `mysql` features use).
//!
//! | technique | where | freed after a crash by | fencing |
//! |---|---|---|---|
//! | lease lock | `connect("postgres://…")` / `("mysql://…")` | lease expiry | token |
//! | session lock | `…?lock=session` | the connection's end | token |
//! | row lock in your transaction | [`RowLock::lock_row`] | rollback of the transaction | the transaction itself |
//! | optimistic version check | [`optimistic::retry_on_conflict`] | nothing is held | the version column |

pub mod optimistic;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod row_lock;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use row_lock::{RowLock, RowLockTx};

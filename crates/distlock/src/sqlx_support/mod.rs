//! What every user of sqlx in the crate shares: the SQL backends (PostgreSQL, MySQL), the fence
//! helper on the caller's pool ([`crate::fence::SqlFence`], SQLite included) and the row lock
//! ([`crate::sql::RowLock`]). It sits at the crate's top so that those helpers need nothing from
//! `backends/` (a helper on the caller's own pool runs no store). Not named `sqlx`: that would
//! shadow the crate.

pub(crate) mod error;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod tx;

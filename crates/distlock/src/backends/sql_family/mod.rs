//! The SQL family: PostgreSQL and MySQL/MariaDB through sqlx, client–server databases whose
//! locks are rows with a lease judged by the server's clock, or session locks held by a
//! connection (`?lock=session`).
//!
//! * `session.rs`: session locks, written once over a store's connection.
//! * `url.rs`: the parameters distlock reads from a `postgres://` or `mysql://` URL.
//! * `inspect.rs`: the status and forced-release answers, decoded once.

pub(crate) mod inspect;
pub(crate) mod session;
pub(crate) mod url;

//! The family of stores that decide the lock flavours in the client: they read a synchronizer's
//! holdings and line, decide here, and write, all in one step of their own making (a
//! transaction in PostgreSQL and MySQL, the writer op in SQLite, a mutex in memory). The other
//! stores decide in the server (Redis scripts) or by the shape of their data (etcd and
//! ZooKeeper queues), so none of this is theirs.
//!
//! * [`flavour_rules`]: who may hold a fair lock, a read-write lock or a semaphore, and what a
//!   blocked taker is told (PostgreSQL, MySQL, SQLite, memory).
//! * [`flavour_waiter`]: the waiter that takes, queues, listens and leaves through a store's
//!   steps (PostgreSQL, MySQL, memory; SQLite's writer queues its own).
//! * [`records`]: the decision of a fenced election write (PostgreSQL, MySQL, memory).

#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "memory"
))]
pub(crate) mod flavour_rules;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "memory"))]
pub(crate) mod flavour_waiter;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "memory"))]
pub(crate) mod records;

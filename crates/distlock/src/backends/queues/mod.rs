//! The family of stores whose locks are queues of contender entries held by a session: etcd
//! (keys ordered by create revision, attached to the session's lease) and ZooKeeper (ephemeral
//! sequential nodes). What they share is written here once:
//!
//! * [`holdings`]: the client's holdings, found again by fencing token, the read-write rules such
//!   a queue cannot honour, and what a session's periodic check reads to find holdings someone
//!   else removed (a forced release).
//! * [`records`]: election entries, latch counts and contender entries as a key's bytes, in one
//!   format both stores write and read.

pub(crate) mod holdings;
pub(crate) mod records;

//! One module per store, each behind its cargo feature.

#[cfg(any(
    feature = "postgres",
    feature = "mysql",
    feature = "sqlite",
    feature = "memory"
))]
pub(crate) mod client_rules;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod sql_family;

#[cfg(any(feature = "postgres", feature = "mysql", feature = "object-store"))]
pub(crate) mod poll_watch;

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "redlock")]
pub mod redlock;

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "mysql")]
pub mod mysql;

#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub(crate) mod queues;

#[cfg(any(feature = "etcd", feature = "redlock"))]
pub(crate) mod moving_average;

#[cfg(feature = "etcd")]
pub mod etcd;

#[cfg(feature = "zookeeper")]
pub mod zookeeper;

#[cfg(feature = "memcached")]
pub mod memcached;

#[cfg(feature = "memory")]
pub mod memory;

#[cfg(feature = "object-store")]
pub mod objectstore;

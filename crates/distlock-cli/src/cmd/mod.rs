//! One module per subcommand.

#[cfg(not(feature = "tools"))]
pub(crate) mod absent;
#[cfg(feature = "tools")]
pub(crate) mod bench;
pub(crate) mod connect;
#[cfg(feature = "tools")]
pub(crate) mod demo;
pub(crate) mod elect;
pub(crate) mod exec;
pub(crate) mod help;
#[cfg(feature = "tools")]
pub(crate) mod processes;
#[cfg(feature = "tools")]
pub(crate) mod progress;
pub(crate) mod serve;
pub(crate) mod status;
#[cfg(feature = "tools")]
pub(crate) mod torture;

/// `lock` with the lease closest to `wanted` that the store keeps (at least a session store's
/// expiry; none for SQL session locks, which refuse every lease), so that a `--lease` default
/// made for lease stores is what the store keeps rather than a refusal. Used by the tools
/// (`bench`, `torture`, `demo`).
#[cfg(feature = "tools")]
pub(crate) fn keepable(
    client: &distlock::Client,
    lock: distlock::Lock,
    wanted: std::time::Duration,
) -> distlock::Lock {
    match client.keepable_lease(wanted) {
        Some(lease) => lock.lease(lease),
        None => lock,
    }
}

//! Whether a server may evict lock keys: read from `INFO memory` at connect, and again whenever
//! the client's warnings are asked for (`Client::warnings`, `distlock status`).
//!
//! Every lock key carries a TTL (its lease), so under `maxmemory` every policy but `noeviction`
//! may evict it: the `volatile-*` policies evict keys with a TTL (`volatile-ttl` those nearest
//! their expiry first, which short leases are), the `allkeys-*` policies any key. The lock is
//! then free while its holder believes it holds it, until its next renewal finds the key gone.
//! This is an operator's configuration, not an error: connect goes on, and the risk is logged
//! once per server (`tracing::warn!`) and answered as a warning.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use ::redis::aio::ConnectionLike;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{RedisError, RedisResult};

use super::cluster;

/// The servers this process has warned about (by the name the warning gives them): each is
/// logged once, however many clients connect to it or ask for the warnings again.
static WARNED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// A server's memory limit and eviction policy, as `INFO memory` states them.
#[derive(Debug, PartialEq, Eq)]
struct Memory {
    /// `maxmemory` in bytes: 0 is no limit.
    limit: u64,
    /// `maxmemory_human`, as the server writes it (`2.00M`).
    limit_shown: String,
    policy: String,
}

impl Memory {
    /// Read from an answer to `INFO memory` (`field:value` lines); `None` if a field is missing.
    fn parse(info: &str) -> Option<Memory> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
        };
        let limit = field("maxmemory")?.parse().ok()?;
        Some(Memory {
            limit,
            limit_shown: field("maxmemory_human").unwrap_or("").to_string(),
            policy: field("maxmemory_policy")?.to_string(),
        })
    }

    /// Whether this server may evict lock keys: it has a limit, and a policy that evicts.
    fn evicts_lock_keys(&self) -> bool {
        self.limit > 0 && self.policy != "noeviction"
    }

    /// The warning for `server`.
    fn warning(&self, server: &str) -> String {
        let evicts = if self.policy.starts_with("allkeys-") {
            "any key"
        } else {
            "keys with a TTL, as every lock key has"
        };
        let limit = if self.limit_shown.is_empty() {
            format!("{} bytes", self.limit)
        } else {
            self.limit_shown.clone()
        };
        format!(
            "{server}: maxmemory {limit} with maxmemory-policy {policy}, which evicts {evicts}: \
             a lock whose key is evicted is free while its holder still believes it holds it, \
             until the holder's next renewal finds it gone; set `maxmemory-policy noeviction` \
             on this server, or keep the locks in a Redis of their own",
            policy = self.policy,
        )
    }
}

/// The warning for the server `conn` reaches, named `server` (never with a password), if it
/// may evict lock keys; logged the first time this process sees it for that server. A server
/// that does not answer `INFO` (an ACL without it, a timeout) gives none: that is logged at
/// debug level, and the client goes on.
pub(super) async fn check(conn: &mut impl ConnectionLike, server: &str) -> Option<String> {
    let info = ::redis::cmd("INFO").arg("memory").query_async(conn).await;
    judge(info, server)
}

/// [`check`] on every master of a cluster, each named by its address.
pub(super) async fn check_cluster(conn: &ClusterConnection, cluster: &str) -> Vec<String> {
    let masters = match cluster::masters(conn).await {
        Ok(masters) => masters,
        Err(e) => {
            not_asked(cluster, &e);
            return Vec::new();
        }
    };
    let mut warnings = Vec::new();
    for (host, port) in masters {
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port,
        });
        let info = ::redis::cmd("INFO").arg("memory").clone();
        let info = conn
            .clone()
            .route_command(info, routing)
            .await
            .and_then(|answer| ::redis::from_redis_value(answer).map_err(RedisError::from));
        let server = format!("{cluster} (master {host}:{port})");
        warnings.extend(judge(info, &server));
    }
    warnings
}

/// [`check`] of an answer to `INFO memory` from `server`.
pub(super) fn judge(info: RedisResult<String>, server: &str) -> Option<String> {
    let info = match info {
        Ok(info) => info,
        Err(e) => {
            not_asked(server, &e);
            return None;
        }
    };
    let Some(memory) = Memory::parse(&info) else {
        tracing::debug!(
            server,
            "redis: INFO memory states no maxmemory or maxmemory_policy"
        );
        return None;
    };
    if !memory.evicts_lock_keys() {
        return None;
    }
    let warning = memory.warning(server);
    let first = WARNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(server.to_string());
    if first {
        tracing::warn!(
            server,
            maxmemory = memory.limit,
            policy = %memory.policy,
            "{warning}"
        );
    }
    Some(warning)
}

fn not_asked(server: &str, e: &RedisError) {
    // redis-rs errors carry no URL, so no password.
    tracing::debug!(
        server,
        "redis: could not read INFO memory, so whether lock keys can be evicted is unknown: {e}"
    );
}

#[cfg(test)]
mod tests {
    use super::Memory;

    fn info(limit: u64, policy: &str) -> String {
        format!(
            "# Memory\r\nused_memory:1000\r\nmaxmemory:{limit}\r\nmaxmemory_human:2.00M\r\n\
             maxmemory_policy:{policy}\r\nallocator_frag_ratio:1.0\r\n"
        )
    }

    #[test]
    fn which_servers_may_evict_lock_keys() {
        for (limit, policy, evicts) in [
            (0, "noeviction", false),
            // No limit: nothing is evicted whatever the policy.
            (0, "allkeys-lru", false),
            (2_097_152, "noeviction", false),
            (2_097_152, "allkeys-lru", true),
            (2_097_152, "allkeys-random", true),
            (2_097_152, "volatile-lru", true),
            (2_097_152, "volatile-ttl", true),
        ] {
            let memory = Memory::parse(&info(limit, policy)).unwrap();
            assert_eq!(memory.limit, limit);
            assert_eq!(memory.policy, policy);
            assert_eq!(memory.evicts_lock_keys(), evicts, "{limit} {policy}");
        }
        // `maxmemory_human` and `maxmemory_policy` are not read as `maxmemory`.
        assert_eq!(Memory::parse("maxmemory_policy:noeviction\r\n"), None);
        assert_eq!(Memory::parse("maxmemory:0\r\n"), None);
    }

    #[test]
    fn the_warning_names_server_policy_and_remedy() {
        let all = Memory::parse(&info(2_097_152, "allkeys-lru")).unwrap();
        let warning = all.warning("redis://***@127.0.0.1:6390");
        for part in [
            "redis://***@127.0.0.1:6390",
            "maxmemory 2.00M",
            "allkeys-lru",
            "any key",
            "maxmemory-policy noeviction",
            "a Redis of their own",
        ] {
            assert!(warning.contains(part), "{part:?} missing: {warning}");
        }
        let volatile = Memory::parse(&info(2_097_152, "volatile-lfu")).unwrap();
        assert!(volatile.warning("h:1").contains("keys with a TTL"));
    }
}

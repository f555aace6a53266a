//! A private Redis Cluster: three masters and a replica each, six child redis-servers with
//! `--cluster-enabled yes` on free loopback ports (each with its cluster bus on another free
//! port), joined by `redis-cli --cluster create`. The shared cluster of
//! `scripts/services.sh cluster` serves the conformance suite; a failover or resharding test
//! kills and migrates on a cluster of its own.

use std::process::Command;
use std::time::Duration;

use super::redis::redis_server;
use super::{
    PrivateServer, free_port, fresh_dir_and_port, loopback_hosts, on_free_ports, redis_cli_as, run,
    wait_for,
};
use crate::Failure;

/// How long a node goes unanswered before the cluster judges it failing: short, so a killed
/// master's replica takes over within a few seconds, yet not so short that a node stalled by a
/// loaded machine is failed over unasked.
const NODE_TIMEOUT_MS: u64 = 2000;

/// Six nodes; `redis-cli --cluster create` made the first three masters and the others their
/// replicas. A failover or a resharding moves slots: [`RedisCluster::master_of`] says where a
/// key lives now.
pub struct RedisCluster {
    /// The nodes, in the order they were started.
    pub nodes: Vec<PrivateServer>,
    /// Every node's `requirepass` (and `masterauth`), if any.
    password: Option<String>,
}

/// Starts a cluster and waits until every node serves every slot (`cluster_state:ok`) and
/// knows the five others.
pub fn start_redis_cluster() -> Result<RedisCluster, Failure> {
    start_redis_cluster_with(None)
}

/// [`start_redis_cluster`] with `password` as every node's `requirepass` and `masterauth` (the
/// replicas log in to their masters with it).
pub fn start_redis_cluster_with(password: Option<&str>) -> Result<RedisCluster, Failure> {
    on_free_ports(|| {
        let nodes = (0..6)
            .map(|_| start_node(password))
            .collect::<Result<Vec<_>, _>>()?;
        let mut create = Command::new("redis-cli");
        if let Some(password) = password {
            create.env("REDISCLI_AUTH", password);
        }
        create
            .args(["--cluster", "create"])
            .args(loopback_hosts(nodes.iter().map(PrivateServer::port)).split(','))
            .args(["--cluster-replicas", "1", "--cluster-yes"]);
        run(&mut create, "redis-cli --cluster create")?;
        let cluster = RedisCluster {
            nodes,
            password: password.map(str::to_string),
        };
        cluster.wait_until(Duration::from_secs(30), "the cluster to form", |c| {
            c.ready()
        })?;
        Ok(cluster)
    })
}

fn start_node(password: Option<&str>) -> Result<PrivateServer, Failure> {
    let bus = free_port()?.to_string();
    let timeout = NODE_TIMEOUT_MS.to_string();
    let mut args = vec![
        "--cluster-port",
        &bus,
        "--cluster-enabled",
        "yes",
        "--cluster-node-timeout",
        &timeout,
        "--cluster-config-file",
        "nodes.conf",
        "--save",
        "",
        "--appendonly",
        "no",
    ];
    if let Some(password) = password {
        args.extend(["--requirepass", password, "--masterauth", password]);
    }
    redis_server("Redis Cluster node", fresh_dir_and_port()?, None, args).start()
}

impl RedisCluster {
    /// `redis-cluster://` over the first three nodes (the client learns the others), with the
    /// nodes' password as the user-info if they have one.
    pub fn url(&self) -> String {
        let url = cluster_url(self.nodes[..3].iter().map(PrivateServer::port));
        match &self.password {
            Some(password) => url.replacen("://", &format!("://:{password}@"), 1),
            None => url,
        }
    }

    /// `redis-cli` on the node on `port`, logged in with the nodes' password if any.
    pub fn cli(&self, port: u16, args: &[&str]) -> Result<String, Failure> {
        redis_cli_as(port, self.password.as_deref(), args)
    }

    /// The node on `port`.
    pub fn node(&mut self, port: u16) -> Result<&mut PrivateServer, Failure> {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| Failure(format!("no node of the cluster on port {port}")))
    }

    /// A running node's port, to ask about the cluster.
    fn any_running(&self) -> Result<u16, Failure> {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .map(PrivateServer::port)
            .ok_or_else(|| Failure("no node of the cluster runs".into()))
    }

    /// The master serving `key`'s slot, as a running node says (`CLUSTER SLOTS`).
    pub fn master_of(&self, key: &str) -> Result<u16, Failure> {
        let asked = self.any_running()?;
        let slot: u16 = self
            .cli(asked, &["CLUSTER", "KEYSLOT", key])?
            .parse()
            .map_err(|_| Failure(format!("CLUSTER KEYSLOT {key} answered no number")))?;
        master_of_slot_as(asked, self.password.as_deref(), slot)
    }

    /// The masters, as `CLUSTER NODES` on a running node lists them (failed ones left out).
    pub fn masters(&self) -> Result<Vec<u16>, Failure> {
        masters_as(self.any_running()?, self.password.as_deref())
    }

    /// Asks the replica of the master on `master` to take over (`CLUSTER FAILOVER`, as an
    /// operator does: the master stops taking writes until the replica has caught up, then the
    /// two swap roles and the old master stays up as a replica).
    /// [`wait_for_new_master`](Self::wait_for_new_master) waits until it is done.
    pub fn fail_over_to_replica_of(&self, master: u16) -> Result<(), Failure> {
        let id = self.cli(master, &["CLUSTER", "MYID"])?;
        // CLUSTER NODES: "<id> <ip:port@bus> <flags> <master id> …".
        let nodes = self.cli(master, &["CLUSTER", "NODES"])?;
        let replica = nodes
            .lines()
            .map(|line| line.split(' ').collect::<Vec<_>>())
            .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == id)
            .ok_or_else(|| Failure(format!("the master on {master} has no replica: {nodes}")))?;
        let port = port_of(replica[1])?;
        let answer = self.cli(port, &["CLUSTER", "FAILOVER"])?;
        if answer != "OK" {
            return Err(Failure(format!(
                "CLUSTER FAILOVER on {port} answered {answer:?}"
            )));
        }
        Ok(())
    }

    /// Waits until a node other than `old` serves `key`'s slot and every running node agrees
    /// (after `old` was killed). Answers the new master's port.
    pub fn wait_for_new_master(&self, key: &str, old: u16) -> Result<u16, Failure> {
        let mut new = None;
        self.wait_until(Duration::from_secs(30), "a replica to take over", |c| {
            let mut seen = Vec::new();
            for node in c.nodes.iter().filter(|n| n.is_running()) {
                let slot: u16 = c
                    .cli(node.port(), &["CLUSTER", "KEYSLOT", key])?
                    .parse()
                    .unwrap_or(0);
                seen.push(master_of_slot_as(node.port(), c.password.as_deref(), slot).ok());
            }
            let agreed = seen.first().copied().flatten();
            if let Some(port) = agreed
                && port != old
                && seen.iter().all(|s| *s == Some(port))
                && c.cli(port, &["CLUSTER", "INFO"])?
                    .contains("cluster_state:ok")
            {
                new = Some(port);
                return Ok(true);
            }
            Ok(false)
        })?;
        new.ok_or_else(|| Failure("no new master".into()))
    }

    /// Every node knows the others and serves every slot, and every replica is in sync with its
    /// master (a failover is possible).
    fn ready(&self) -> Result<bool, Failure> {
        for node in &self.nodes {
            let info = self.cli(node.port(), &["CLUSTER", "INFO"])?;
            if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:6") {
                return Ok(false);
            }
            let replication = self.cli(node.port(), &["INFO", "replication"])?;
            let synced = if replication.contains("role:master") {
                replication.contains("connected_slaves:1")
            } else {
                replication.contains("master_link_status:up")
            };
            if !synced {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Polls `done` every 100 ms for up to `within`.
    pub fn wait_until(
        &self,
        within: Duration,
        what: &str,
        mut done: impl FnMut(&Self) -> Result<bool, Failure>,
    ) -> Result<(), Failure> {
        wait_for(within, what, &self.nodes[0], || done(self))
    }
}

/// The master of `slot` as the node on `asked` says (`CLUSTER SLOTS`, as redis-cli prints it:
/// one value a line).
pub fn master_of_slot(asked: u16, slot: u16) -> Result<u16, Failure> {
    master_of_slot_as(asked, None, slot)
}

/// [`master_of_slot`], logged in with `password` if any.
fn master_of_slot_as(asked: u16, password: Option<&str>, slot: u16) -> Result<u16, Failure> {
    // CLUSTER NODES: "<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <link> <slots…>".
    let nodes = redis_cli_as(asked, password, &["CLUSTER", "NODES"])?;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let serves = fields[8..].iter().any(|range| {
            if range.starts_with('[') {
                return false;
            }
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            matches!((first.parse::<u16>(), last.parse::<u16>()), (Ok(f), Ok(l)) if f <= slot && slot <= l)
        });
        if serves {
            return port_of(fields[1]);
        }
    }
    Err(Failure(format!("no master serves slot {slot}: {nodes}")))
}

/// The masters that serve slots, as the node on `asked` says.
pub fn masters(asked: u16) -> Result<Vec<u16>, Failure> {
    masters_as(asked, None)
}

/// [`masters`], logged in with `password` if any.
fn masters_as(asked: u16, password: Option<&str>) -> Result<Vec<u16>, Failure> {
    let nodes = redis_cli_as(asked, password, &["CLUSTER", "NODES"])?;
    let mut ports = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() >= 9 && fields[2].contains("master") && !fields[2].contains("fail") {
            ports.push(port_of(fields[1])?);
        }
    }
    ports.sort_unstable();
    Ok(ports)
}

/// The port of `ip:port@bus`.
fn port_of(address: &str) -> Result<u16, Failure> {
    address
        .split('@')
        .next()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| Failure(format!("a node address without a port: {address}")))
}

/// `redis-cluster://127.0.0.1:p1,…` over `ports`.
pub fn cluster_url(ports: impl IntoIterator<Item = u16>) -> String {
    format!("redis-cluster://{}", loopback_hosts(ports))
}

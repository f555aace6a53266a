//! A private Redis behind Sentinel: a master, two replicas and three Sentinels (quorum 2), each a
//! child redis-server on a free loopback port, for the tests that fail the master over. The
//! shared group of `scripts/services.sh sentinel` serves the conformance suite; a failover test
//! moves its own group's master and kills its own nodes.

use std::process::Command;
use std::time::Duration;

use super::redis::redis_server;
use super::{
    Persistence, PrivateServer, fresh_dir_and_port, loopback_hosts, on_free_ports,
    start_redis_with_args, wait_for,
};
use crate::Failure;

/// The name the Sentinels monitor the master under (shared and private groups alike).
pub const SENTINEL_MASTER: &str = "distlock";

/// How long after its last answer a Sentinel judges the private master down: short, so a
/// killed master is failed over within a few seconds, yet not so short that a node stalled by a
/// loaded machine is failed over unasked.
const DOWN_AFTER_MS: u64 = 1500;

/// A master, two replicas and three Sentinels watching them.
pub struct SentinelGroup {
    /// The data nodes: the first started as the master, the others as its replicas. A failover
    /// moves the master to another ([`SentinelGroup::master_port`] says which).
    pub nodes: Vec<PrivateServer>,
    /// The Sentinels.
    pub sentinels: Vec<PrivateServer>,
    passwords: GroupPasswords,
}

/// The passwords of a private group: none by default.
#[derive(Clone, Debug, Default)]
pub struct GroupPasswords {
    /// The data nodes' `requirepass` (and the replicas' `masterauth`, and the Sentinels'
    /// `sentinel auth-pass`, so replication and failovers work with it).
    pub nodes: Option<String>,
    /// The Sentinels' own `requirepass` (which they also use with each other).
    pub sentinels: Option<String>,
}

/// Starts a group and waits until every Sentinel knows both replicas and the two other
/// Sentinels, and both replicas are in sync (a failover is possible).
pub fn start_sentinel_group() -> Result<SentinelGroup, Failure> {
    start_sentinel_group_with(&GroupPasswords::default())
}

/// [`start_sentinel_group`] with `passwords` on the data nodes and the Sentinels.
pub fn start_sentinel_group_with(passwords: &GroupPasswords) -> Result<SentinelGroup, Failure> {
    let mut node_args: Vec<&str> = Vec::new();
    if let Some(password) = &passwords.nodes {
        node_args.extend(["--requirepass", password, "--masterauth", password]);
    }
    on_free_ports(|| {
        let master = start_redis_with_args(Persistence::None, &node_args)?;
        let master_port = master.port().to_string();
        let mut nodes = vec![master];
        for _ in 0..2 {
            let mut args = node_args.clone();
            args.extend(["--replicaof", "127.0.0.1", &master_port]);
            nodes.push(start_redis_with_args(Persistence::None, &args)?);
        }
        let ports: Vec<u16> = nodes.iter().map(PrivateServer::port).collect();
        let sentinels = (0..3)
            .map(|_| start_sentinel(ports[0], passwords))
            .collect::<Result<Vec<_>, _>>()?;
        let group = SentinelGroup {
            nodes,
            sentinels,
            passwords: passwords.clone(),
        };
        let first_sentinel = &group.sentinels[0];
        wait_for(
            Duration::from_secs(30),
            "the group to be ready",
            first_sentinel,
            || group.ready(),
        )?;
        Ok(group)
    })
}

fn start_sentinel(master_port: u16, passwords: &GroupPasswords) -> Result<PrivateServer, Failure> {
    let (dir, port) = fresh_dir_and_port()?;
    let conf = dir.path().join("sentinel.conf");
    let mut logins = String::new();
    if let Some(password) = &passwords.nodes {
        logins.push_str(&format!(
            "sentinel auth-pass {SENTINEL_MASTER} {password}\n"
        ));
    }
    if let Some(password) = &passwords.sentinels {
        logins.push_str(&format!("requirepass {password}\n"));
    }
    // A Sentinel rewrites its configuration as it learns (replicas, other Sentinels, a new
    // master), so the file is its own and written once, before the first start.
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\n\
             sentinel monitor {SENTINEL_MASTER} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {SENTINEL_MASTER} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {SENTINEL_MASTER} 5000\n\
             sentinel parallel-syncs {SENTINEL_MASTER} 2\n{logins}",
            dir = dir.path().display()
        ),
    )?;
    redis_server("Redis Sentinel", (dir, port), Some(conf), ["--sentinel"]).start()
}

/// `redis-sentinel://127.0.0.1:p1,…/distlock` over the Sentinels on `ports`.
pub fn sentinel_url(ports: impl IntoIterator<Item = u16>) -> String {
    format!(
        "redis-sentinel://{}/{SENTINEL_MASTER}",
        loopback_hosts(ports)
    )
}

/// `redis-cli -p PORT ARGS…`'s answer, one line per value. Blocks: call it from
/// `tokio::task::block_in_place` in async code.
pub fn redis_cli(port: u16, args: &[&str]) -> Result<String, Failure> {
    redis_cli_as(port, None, args)
}

/// [`redis_cli`] logged in with `password` (given through `REDISCLI_AUTH`, not the command
/// line), if any.
pub fn redis_cli_as(port: u16, password: Option<&str>, args: &[&str]) -> Result<String, Failure> {
    let mut command = Command::new("redis-cli");
    if let Some(password) = password {
        command.env("REDISCLI_AUTH", password);
    }
    let out = command
        .args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(args)
        .output()
        .map_err(|e| {
            Failure(format!(
                "redis-cli could not run ({e}); run scripts/services.sh sentinel to install it"
            ))
        })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl SentinelGroup {
    /// The URL a client connects with: with the group's passwords, the data nodes' as the
    /// user-info and the Sentinels' as `sentinel_password`.
    pub fn url(&self) -> String {
        let url = sentinel_url(self.sentinels.iter().map(PrivateServer::port));
        let url = match &self.passwords.nodes {
            Some(password) => url.replacen("://", &format!("://:{password}@"), 1),
            None => url,
        };
        match &self.passwords.sentinels {
            Some(password) => format!("{url}?sentinel_password={password}"),
            None => url,
        }
    }

    /// `redis-cli` on the data node on `port`, logged in with the nodes' password.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> Result<String, Failure> {
        redis_cli_as(port, self.passwords.nodes.as_deref(), args)
    }

    /// `redis-cli` on the Sentinel on `port`, logged in with the Sentinels' password.
    pub fn sentinel_cli(&self, port: u16, args: &[&str]) -> Result<String, Failure> {
        redis_cli_as(port, self.passwords.sentinels.as_deref(), args)
    }

    /// The master's port as the first Sentinel that answers says.
    pub fn master_port(&self) -> Result<u16, Failure> {
        for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
            let answer = self.sentinel_cli(
                sentinel.port(),
                &["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER],
            )?;
            if let Some(port) = answer.lines().nth(1).and_then(|p| p.parse().ok()) {
                return Ok(port);
            }
        }
        Err(Failure("no Sentinel names the master".into()))
    }

    /// The data node on `port`.
    pub fn node(&mut self, port: u16) -> Result<&mut PrivateServer, Failure> {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .ok_or_else(|| Failure(format!("no data node of the group on port {port}")))
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) every running data node but the master: while
    /// stopped, a replica whose link the master closed cannot connect again, so it receives
    /// nothing the master writes meanwhile.
    pub fn pause_replicas(&self, pause: bool) -> Result<(), Failure> {
        let master = self.master_port()?;
        let signal = if pause { libc::SIGSTOP } else { libc::SIGCONT };
        self.nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != master)
            .try_for_each(|n| n.signal(signal))
    }

    /// Whether the node on `port` answers `ROLE` with `master`.
    pub fn is_master(&self, port: u16) -> Result<bool, Failure> {
        Ok(self.node_cli(port, &["ROLE"])?.lines().next() == Some("master"))
    }

    /// Asks a Sentinel for a failover (`SENTINEL FAILOVER`) and waits until every Sentinel names
    /// a new master and that node says it is one. Answers the new master's port.
    pub fn failover(&self) -> Result<u16, Failure> {
        let old = self.master_port()?;
        let answer = self.sentinel_cli(
            self.sentinels[0].port(),
            &["SENTINEL", "FAILOVER", SENTINEL_MASTER],
        )?;
        if answer != "OK" {
            return Err(Failure(format!("SENTINEL FAILOVER answered {answer:?}")));
        }
        self.wait_for_new_master(old)
    }

    /// Waits until every running Sentinel names a master other than `old`, and that node says
    /// it is one (after a killed master, or a failover asked for). Answers its port.
    pub fn wait_for_new_master(&self, old: u16) -> Result<u16, Failure> {
        let mut new = None;
        wait_for(
            Duration::from_secs(30),
            "the Sentinels to agree on a new master",
            &self.sentinels[0],
            || {
                let mut named = Vec::new();
                for sentinel in self.sentinels.iter().filter(|s| s.is_running()) {
                    let answer = self.sentinel_cli(
                        sentinel.port(),
                        &["SENTINEL", "get-master-addr-by-name", SENTINEL_MASTER],
                    )?;
                    named.push(answer.lines().nth(1).and_then(|p| p.parse::<u16>().ok()));
                }
                let Some(Some(first)) = named.first().copied() else {
                    return Ok(false);
                };
                let agreed = first != old && named.iter().all(|n| *n == Some(first));
                if agreed && self.is_master(first)? {
                    new = Some(first);
                    return Ok(true);
                }
                Ok(false)
            },
        )?;
        new.ok_or_else(|| Failure("no new master".into()))
    }

    /// Waits until every running replica has received everything the master has written so far
    /// (its `slave_repl_offset` reached the master's `master_repl_offset`).
    pub fn wait_replicated(&self) -> Result<(), Failure> {
        let master = self.master_port()?;
        let offset = |port: u16, field: &str| -> Result<Option<u64>, Failure> {
            let info = self.node_cli(port, &["INFO", "replication"])?;
            Ok(info
                .lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok()))
        };
        let target = offset(master, "master_repl_offset")?
            .ok_or_else(|| Failure("the master shows no master_repl_offset".into()))?;
        let replicas: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && n.port() != master)
            .map(PrivateServer::port)
            .collect();
        let first_sentinel = &self.sentinels[0];
        wait_for(
            Duration::from_secs(10),
            "the replicas to catch up",
            first_sentinel,
            || {
                for port in &replicas {
                    if offset(*port, "slave_repl_offset")?.is_none_or(|o| o < target) {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
    }

    /// Every Sentinel knows both replicas and both other Sentinels, and the replicas are in sync.
    fn ready(&self) -> Result<bool, Failure> {
        for sentinel in &self.sentinels {
            let answer =
                self.sentinel_cli(sentinel.port(), &["SENTINEL", "master", SENTINEL_MASTER])?;
            let fields: Vec<&str> = answer.lines().collect();
            let field = |name: &str| {
                fields
                    .iter()
                    .position(|f| *f == name)
                    .and_then(|i| fields.get(i + 1))
                    .copied()
            };
            if field("num-slaves") != Some("2") || field("num-other-sentinels") != Some("2") {
                return Ok(false);
            }
        }
        for node in &self.nodes[1..] {
            let info = self.node_cli(node.port(), &["INFO", "replication"])?;
            if !info.contains("master_link_status:up") {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

//! A private etcd cluster: several etcd members as our children, each on its own loopback client
//! and peer ports and data directory, so a test can kill, pause and start again one member at a
//! time (a leader killed while locks are taken, a member paused past a session's TTL) without
//! touching the shared single-node etcd of scripts/services.sh.
//!
//! Its methods block (they run etcdctl or wait for a member): call them from
//! `tokio::task::block_in_place` in async code.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::members::{Members, member_controls};
use super::{
    Launch, PrivateServer, distinct_free_ports, free_port, fresh_dir_and_port, loopback_hosts, poll,
};
use crate::Failure;
use crate::faults::peers::{Partitionable, PeerLinks};

/// How long a new cluster, or a member started again, may take to answer as healthy.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a leader election may take before [`EtcdCluster::leader`] gives up.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(15);

const INSTALL: &str = "run scripts/services.sh etcd to install it";

/// A private etcd cluster of our own child processes, all killed (SIGKILL) on drop.
pub struct EtcdCluster {
    /// Member `i` is named `m{i}`; its [`PrivateServer`] port is its client port.
    members: Members,
}

/// Starts a cluster of `members` etcd members on free loopback ports and waits until every one
/// answers as healthy (a leader was elected and reads go through it).
pub fn start_etcd_cluster(members: usize) -> Result<EtcdCluster, Failure> {
    start(members, false)
}

/// [`start_etcd_cluster`], with the members talking to each other through [`PeerLinks`], so
/// that a member can be cut off from the others ([`EtcdCluster::isolate`]) while its clients
/// still reach it.
pub fn start_etcd_cluster_with_peer_links(members: usize) -> Result<EtcdCluster, Failure> {
    start(members, true)
}

fn start(members: usize, linked: bool) -> Result<EtcdCluster, Failure> {
    super::on_free_ports(|| start_once(members, linked))
}

fn start_once(count: usize, linked: bool) -> Result<EtcdCluster, Failure> {
    let ports = distinct_free_ports(2 * count)?;
    let (client_ports, peer_ports) = ports.split_at(count);
    let links = match linked {
        true => Some(PeerLinks::start(
            &peer_ports.iter().map(|&p| vec![p]).collect::<Vec<_>>(),
        )?),
        false => None,
    };
    // The peer port the other members dial for member i: its proxy's, or its own.
    let advertised: Vec<u16> = match &links {
        Some(links) => (0..count).map(|i| links.port(i, 0)).collect(),
        None => peer_ports.to_vec(),
    };
    let initial_cluster = (0..count)
        .map(|i| format!("m{i}=http://127.0.0.1:{}", advertised[i]))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Members::new("the private etcd cluster", links);
    for i in 0..count {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let client = format!("http://127.0.0.1:{}", client_ports[i]);
        let peer = format!("http://127.0.0.1:{}", peer_ports[i]);
        let advertised_peer = format!("http://127.0.0.1:{}", advertised[i]);
        let initial_cluster = initial_cluster.clone();
        let url = format!("etcd://127.0.0.1:{}", client_ports[i]);
        // A member listens on its client port before the cluster has a quorum.
        let launch = Launch::new("etcd member", (dir, client_ports[i]), url, move || {
            let mut command = etcd(
                &format!("m{i}"),
                &data,
                &client,
                (&peer, &advertised_peer),
                &initial_cluster,
            );
            // Unique per cluster (its ports are), so members of two test clusters never take
            // each other in.
            command
                .arg(format!("--initial-cluster-token={initial_cluster}"))
                .arg("--logger=zap");
            command
        })
        .keeping_data(true)
        .dying_by_stop_signal();
        members.start(launch)?;
    }
    let mut cluster = EtcdCluster { members };
    cluster.wait_ready(&cluster.members.all())?;
    Ok(cluster)
}

impl EtcdCluster {
    /// The URL of the members `which`.
    pub fn members_url(&self, which: &[usize], ttl_secs: u64) -> String {
        let hosts = loopback_hosts(self.members.client_ports(which));
        format!("etcd://{hosts}?ttl={ttl_secs}")
    }

    member_controls!(ttl_secs: u64);

    /// Runs etcdctl with `args` against every running member (not killed, not paused); its
    /// standard output.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, Failure> {
        self.etcdctl_output(&self.members.running(), args)
    }

    fn etcdctl_output(&self, which: &[usize], args: &[&str]) -> Result<String, Failure> {
        let out = etcdctl(&self.members, which, args)
            .output()
            .map_err(|e| Failure(format!("etcdctl could not run ({e}); {INSTALL}")))?;
        if !out.status.success() {
            return Err(Failure(format!(
                "etcdctl {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// [`etcdctl`](Self::etcdctl) with `-w json`, parsed.
    pub fn etcdctl_json(&self, args: &[&str]) -> Result<serde_json::Value, Failure> {
        let mut args = args.to_vec();
        args.extend(["-w", "json"]);
        Ok(serde_json::from_str(&self.etcdctl(&args)?)?)
    }

    /// Waits until etcdctl finds every member of `which` healthy (a linearizable read through
    /// each), failing early if one exits.
    fn wait_ready(&mut self, which: &[usize]) -> Result<(), Failure> {
        self.members
            .wait_until(which, HEALTHY_TIMEOUT, "healthy", |members| match etcdctl(
                members,
                which,
                &["endpoint", "health"],
            )
            .output()
            {
                Ok(out) => Ok(out.status.success()),
                Err(e) => Err(Failure(format!("etcdctl could not run ({e}); {INSTALL}"))),
            })
    }
}

impl Partitionable for EtcdCluster {
    fn members(&self) -> usize {
        self.members.len()
    }

    fn leader_among(&self, which: &[usize]) -> Result<usize, distlock_harness::Failure> {
        let mut statuses = Err(Failure("not asked yet".into()));
        let leader = poll(ELECTION_TIMEOUT, Duration::from_millis(100), || {
            statuses = self
                .etcdctl_output(which, &["endpoint", "status", "-w", "json"])
                .and_then(|out| Ok(serde_json::from_str::<serde_json::Value>(&out)?));
            let Ok(serde_json::Value::Array(statuses)) = &statuses else {
                return Ok(None);
            };
            // (member index, its id, the leader id it reports)
            let seen: Vec<(Option<usize>, u64, u64)> = statuses
                .iter()
                .map(|s| {
                    let endpoint = s["Endpoint"].as_str().unwrap_or_default();
                    let i = (0..self.members.len()).find(|&i| {
                        endpoint.ends_with(&format!(":{}", self.members.client_port(i)))
                    });
                    let status = &s["Status"];
                    let id = status["header"]["member_id"].as_u64().unwrap_or(0);
                    (i, id, status["leader"].as_u64().unwrap_or(0))
                })
                .collect();
            let leader_id = seen.first().map_or(0, |s| s.2);
            let agreed = leader_id != 0
                && seen.len() == which.len()
                && seen.iter().all(|s| s.2 == leader_id);
            Ok(match seen.iter().find(|s| s.1 == leader_id) {
                Some(&(Some(i), _, _)) if agreed => Some(i),
                _ => None,
            })
        })?;
        leader.ok_or_else(|| {
            distlock_harness::Failure(format!(
                "the private etcd cluster agreed on no leader within {ELECTION_TIMEOUT:?} \
                 (last etcdctl endpoint status: {statuses:?})"
            ))
        })
    }

    fn links(&mut self) -> Option<&mut PeerLinks> {
        self.members.links_mut()
    }
}

/// A one-member etcd of the test's own, as the suite's restart cases want it
/// ([`crate::Suite::private_store`]): clients get session TTL `ttl_secs`; etcd keeps its data
/// (keys and leases) across a restart.
pub struct PrivateEtcd {
    cluster: EtcdCluster,
    ttl_secs: u64,
}

/// Starts a [`PrivateEtcd`].
pub fn start_etcd(ttl_secs: u64) -> Result<PrivateEtcd, Failure> {
    Ok(PrivateEtcd {
        cluster: start_etcd_cluster(1)?,
        ttl_secs,
    })
}

impl super::PrivateStore for PrivateEtcd {
    fn url(&self) -> String {
        self.cluster.url(self.ttl_secs)
    }

    fn keeps_data(&self) -> bool {
        true
    }

    fn stop(&mut self) -> Result<(), Failure> {
        self.cluster.shut_down(0)
    }

    fn start_again(&mut self) -> Result<(), Failure> {
        self.cluster.start_again(0)
    }
}

/// `etcd` named `name`, its data in `data`, serving clients on `client` and its peers on the
/// first of `peer` (advertised as the second), in the cluster `initial_cluster`.
fn etcd(
    name: &str,
    data: &Path,
    client: &str,
    (peer, advertised_peer): (&str, &str),
    initial_cluster: &str,
) -> Command {
    let mut command = Command::new("etcd");
    command
        .arg(format!("--name={name}"))
        .arg("--data-dir")
        .arg(data)
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={advertised_peer}"))
        // Ignored when the data directory exists: a member started again rejoins from it.
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg("--initial-cluster-state=new");
    command
}

/// `etcdctl` with `args` against the members `which`.
fn etcdctl(members: &Members, which: &[usize], args: &[&str]) -> Command {
    let mut command = Command::new("etcdctl");
    command
        .env("ETCDCTL_API", "3")
        .arg(format!(
            "--endpoints={}",
            loopback_hosts(members.client_ports(which))
        ))
        // Short, so a check during an election fails fast and is asked again.
        .args(["--dial-timeout=1s", "--command-timeout=2s"])
        .args(args)
        .stdin(Stdio::null());
    command
}

/// A one-member etcd that serves clients over TLS only and wants a client certificate signed by
/// the test CA (`--client-cert-auth`). Killed on drop.
pub struct TlsEtcd {
    _server: PrivateServer,
    /// The client port (TLS).
    pub port: u16,
}

/// Starts a [`TlsEtcd`] with `certs` and waits until its port accepts connections (it may still
/// be electing itself for a moment: connect with retries).
pub fn start_etcd_tls(certs: &crate::certs::TestCerts) -> Result<TlsEtcd, Failure> {
    let (dir, port) = fresh_dir_and_port()?;
    let data = dir.path().join("data");
    let client = format!("https://127.0.0.1:{port}");
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let tls = certs.server_args(["--cert-file", "--key-file", "--trusted-ca-file"]);
    let url = format!("etcds://127.0.0.1:{port}");
    let server = Launch::new("TLS etcd", (dir, port), url, move || {
        let mut command = etcd(
            "tls",
            &data,
            &client,
            (&peer, &peer),
            &format!("tls={peer}"),
        );
        command.args(&tls).arg("--client-cert-auth");
        command
    })
    .keeping_data(true)
    .dying_by_stop_signal()
    .start()?;
    Ok(TlsEtcd {
        _server: server,
        port,
    })
}

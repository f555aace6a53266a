//! A private etcd cluster: several etcd members as our children, each on its own loopback client
//! and peer ports and data directory, so a test can kill, pause and start again one member at a
//! time (a leader killed while locks are taken, a member paused past a session's TTL) without
//! touching the shared single-node etcd of scripts/services.sh.
//!
//! Its methods block (they run etcdctl or wait for a member): call them from
//! `tokio::task::block_in_place` in async code.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{accepts, free_port, log_tail};
use crate::Failure;
use crate::faults::peers::{Partitionable, PeerLinks};

/// How long a new cluster, or a member started again, may take to answer as healthy.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a leader election may take before [`EtcdCluster::leader`] gives up.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(15);

const INSTALL: &str = "run scripts/services.sh etcd to install it";

/// A private etcd cluster of our own child processes, all killed (SIGKILL) on drop.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// `m0=http://127.0.0.1:PEER,…`: how each member finds the others.
    initial_cluster: String,
    /// The proxies on the members' peer ports, when the cluster can be partitioned.
    links: Option<PeerLinks>,
    /// Every member's data directory and log, removed once the members are dead (fields drop
    /// after [`Drop::drop`] has killed them).
    dir: tempfile::TempDir,
}

struct Member {
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    /// Paused with SIGSTOP: a request to it would hang, so etcdctl leaves it out.
    paused: bool,
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

fn start_once(members: usize, linked: bool) -> Result<EtcdCluster, Failure> {
    let dir = tempfile::tempdir()?;
    let mut ports: Vec<u16> = Vec::new();
    // free_port only says nobody listens now: two calls may hand out the same port.
    while ports.len() < 2 * members {
        let port = free_port()?;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    let members: Vec<Member> = ports
        .chunks(2)
        .map(|p| Member {
            client_port: p[0],
            peer_port: p[1],
            child: None,
            paused: false,
        })
        .collect();
    let links = if linked {
        let peer_ports: Vec<Vec<u16>> = members.iter().map(|m| vec![m.peer_port]).collect();
        Some(PeerLinks::start(&peer_ports)?)
    } else {
        None
    };
    let mut cluster = EtcdCluster {
        members,
        initial_cluster: String::new(),
        links,
        dir,
    };
    cluster.initial_cluster = (0..cluster.members.len())
        .map(|i| format!("m{i}=http://127.0.0.1:{}", cluster.advertised_peer_port(i)))
        .collect::<Vec<_>>()
        .join(",");
    let all: Vec<usize> = (0..cluster.members.len()).collect();
    for &i in &all {
        cluster.spawn(i)?;
    }
    cluster.wait_healthy(&all)?;
    Ok(cluster)
}

impl EtcdCluster {
    /// The URL of the whole cluster: every member, session TTL `ttl_secs`.
    pub fn url(&self, ttl_secs: u64) -> String {
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.members_url(&all, ttl_secs)
    }

    /// The URL of member `i` alone: a client that can reach the cluster only through it.
    pub fn member_url(&self, i: usize, ttl_secs: u64) -> String {
        self.members_url(&[i], ttl_secs)
    }

    /// The URL of the members `which`.
    pub fn members_url(&self, which: &[usize], ttl_secs: u64) -> String {
        let hosts: Vec<String> = which
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.members[i].client_port))
            .collect();
        format!("etcd://{}?ttl={ttl_secs}", hosts.join(","))
    }

    /// Which member leads, once the running members agree on one (waits out an election).
    pub fn leader(&self) -> Result<usize, Failure> {
        Ok(self.leader_among(&self.running())?)
    }

    /// The peer port the other members dial for member `i`: its proxy's, or its own.
    fn advertised_peer_port(&self, i: usize) -> u16 {
        match &self.links {
            Some(links) => links.port(i, 0),
            None => self.members[i].peer_port,
        }
    }

    /// Kills member `i` (SIGKILL): no clean shutdown, its connections just break.
    pub fn kill(&mut self, i: usize) -> Result<(), Failure> {
        if let Some(links) = &self.links {
            links.set_pid(i, None);
        }
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            child.kill()?;
            child.wait()?;
        }
        member.paused = false;
        Ok(())
    }

    /// Shuts member `i` down cleanly (SIGTERM) and waits until it has exited.
    pub fn shut_down(&mut self, i: usize) -> Result<(), Failure> {
        if self.members[i].paused {
            self.cont(i)?;
        }
        if let Some(links) = &self.links {
            links.set_pid(i, None);
        }
        if let Some(mut child) = self.members[i].child.take() {
            // SAFETY: kill() only sends a signal to our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            child.wait()?;
        }
        Ok(())
    }

    /// Pauses member `i` (SIGSTOP): its connections stay open but nothing is answered, as a
    /// member that stalls or is cut off.
    pub fn stop(&mut self, i: usize) -> Result<(), Failure> {
        self.signal(i, libc::SIGSTOP)?;
        self.members[i].paused = true;
        Ok(())
    }

    /// Lets member `i` run again (SIGCONT) after [`stop`](Self::stop).
    pub fn cont(&mut self, i: usize) -> Result<(), Failure> {
        self.signal(i, libc::SIGCONT)?;
        self.members[i].paused = false;
        Ok(())
    }

    /// Starts member `i` again after [`kill`](Self::kill), on the same ports and data (etcd
    /// then rejoins from its own log), and waits until it answers as healthy.
    pub fn start_again(&mut self, i: usize) -> Result<(), Failure> {
        if self.members[i].child.is_none() {
            self.spawn(i)?;
        }
        self.wait_healthy(&[i])
    }

    /// Runs etcdctl with `args` against every running member (not killed, not paused); its
    /// standard output.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, Failure> {
        self.etcdctl_output(&self.running(), args)
    }

    fn etcdctl_output(&self, which: &[usize], args: &[&str]) -> Result<String, Failure> {
        let out = self
            .etcdctl_command(which, args)
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

    fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some() && !self.members[i].paused)
            .collect()
    }

    fn etcdctl_command(&self, which: &[usize], args: &[&str]) -> Command {
        let endpoints: Vec<String> = which
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.members[i].client_port))
            .collect();
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", endpoints.join(",")))
            // Short, so a check during an election fails fast and is asked again.
            .args(["--dial-timeout=1s", "--command-timeout=2s"])
            .args(args)
            .stdin(Stdio::null());
        command
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("m{i}.log"))
    }

    fn spawn(&mut self, i: usize) -> Result<(), Failure> {
        let Member {
            client_port,
            peer_port,
            ..
        } = self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))?;
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let advertised_peer = format!("http://127.0.0.1:{}", self.advertised_peer_port(i));
        let child = Command::new("etcd")
            .arg(format!("--name=m{i}"))
            .arg("--data-dir")
            .arg(self.dir.path().join(format!("m{i}")))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={advertised_peer}"))
            // Ignored when the data directory exists: a member started again rejoins from it.
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg("--initial-cluster-state=new")
            // Unique per cluster, so members of two test clusters never take each other in.
            .arg(format!(
                "--initial-cluster-token={}",
                self.dir.path().display()
            ))
            .arg("--logger=zap")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| Failure(format!("etcd could not start ({e}); {INSTALL}")))?;
        if let Some(links) = &self.links {
            links.set_pid(i, Some(child.id()));
        }
        self.members[i].child = Some(child);
        self.members[i].paused = false;
        Ok(())
    }

    /// Waits until etcdctl finds every member of `which` healthy (a linearizable read through
    /// each), failing early if one exits.
    fn wait_healthy(&mut self, which: &[usize]) -> Result<(), Failure> {
        let started = Instant::now();
        loop {
            let health = self
                .etcdctl_command(which, &["endpoint", "health"])
                .output();
            match health {
                Ok(out) if out.status.success() => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(Failure(format!("etcdctl could not run ({e}); {INSTALL}"))),
            }
            for &i in which {
                let exited = match self.members[i].child.as_mut() {
                    Some(child) => child.try_wait()?,
                    None => None,
                };
                if let Some(status) = exited {
                    self.members[i].child = None;
                    return Err(Failure(format!(
                        "etcd member m{i} of a private cluster exited ({status}) before it was \
                         healthy: {}",
                        log_tail(&self.log(i))
                    )));
                }
            }
            if started.elapsed() > HEALTHY_TIMEOUT {
                let tails: Vec<String> = which.iter().map(|&i| log_tail(&self.log(i))).collect();
                return Err(Failure(format!(
                    "the private etcd cluster was not healthy within {HEALTHY_TIMEOUT:?}: {}",
                    tails.join("\n")
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn signal(&self, i: usize, signal: libc::c_int) -> Result<(), Failure> {
        let Some(child) = &self.members[i].child else {
            return Err(Failure(format!("etcd member m{i} is not running")));
        };
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (so not reused).
        if unsafe { libc::kill(child.id() as libc::pid_t, signal) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }
}

impl Partitionable for EtcdCluster {
    fn members(&self) -> usize {
        self.members.len()
    }

    fn leader_among(&self, which: &[usize]) -> Result<usize, distlock_harness::Failure> {
        let started = Instant::now();
        loop {
            let statuses = self
                .etcdctl_output(which, &["endpoint", "status", "-w", "json"])
                .and_then(|out| Ok(serde_json::from_str::<serde_json::Value>(&out)?));
            if let Ok(serde_json::Value::Array(statuses)) = &statuses {
                // (member index, its id, the leader id it reports)
                let seen: Vec<(Option<usize>, u64, u64)> = statuses
                    .iter()
                    .map(|s| {
                        let endpoint = s["Endpoint"].as_str().unwrap_or_default();
                        let i = self
                            .members
                            .iter()
                            .position(|m| endpoint.ends_with(&format!(":{}", m.client_port)));
                        let status = &s["Status"];
                        let id = status["header"]["member_id"].as_u64().unwrap_or(0);
                        (i, id, status["leader"].as_u64().unwrap_or(0))
                    })
                    .collect();
                let leader_id = seen.first().map_or(0, |s| s.2);
                let agreed = leader_id != 0
                    && seen.len() == which.len()
                    && seen.iter().all(|s| s.2 == leader_id);
                if agreed && let Some(&(Some(i), _, _)) = seen.iter().find(|s| s.1 == leader_id) {
                    return Ok(i);
                }
            }
            if started.elapsed() > ELECTION_TIMEOUT {
                return Err(distlock_harness::Failure(format!(
                    "the private etcd cluster agreed on no leader within {ELECTION_TIMEOUT:?} \
                         (last etcdctl endpoint status: {statuses:?})"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn links(&mut self) -> Option<&mut PeerLinks> {
        self.links.as_mut()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // SIGKILL ends a paused member too.
        for i in 0..self.members.len() {
            let _ = self.kill(i);
        }
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

/// A one-member etcd that serves clients over TLS only and wants a client certificate signed by
/// the test CA (`--client-cert-auth`). Killed on drop.
pub struct TlsEtcd {
    child: Child,
    /// The client port (TLS).
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a [`TlsEtcd`] with `certs` and waits until its port accepts connections (it may still
/// be electing itself for a moment: connect with retries).
pub fn start_etcd_tls(certs: &crate::certs::TestCerts) -> Result<TlsEtcd, Failure> {
    let dir = tempfile::tempdir()?;
    let (port, peer) = (free_port()?, free_port()?);
    let client = format!("https://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let log = std::fs::File::create(dir.path().join("etcd.log"))?;
    let child = Command::new("etcd")
        .arg("--name=tls")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=tls={peer_url}"))
        .arg("--cert-file")
        .arg(&certs.server_cert)
        .arg("--key-file")
        .arg(&certs.server_key)
        .arg("--trusted-ca-file")
        .arg(&certs.ca)
        .arg("--client-cert-auth")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| Failure(format!("etcd could not start ({e}); {INSTALL}")))?;
    let server = TlsEtcd {
        child,
        port,
        _dir: dir,
    };
    let started = Instant::now();
    while !accepts(port) {
        if started.elapsed() > Duration::from_secs(15) {
            return Err(Failure(format!(
                "the TLS etcd on port {port} did not accept connections within 15 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}

//! Partitions between the members of a cluster the test starts itself, on one machine and
//! without netem or iptables: each member's peer ports (etcd has one, a ZooKeeper quorum peer
//! two) sit behind [`FaultProxy`]s (the ports the other members are told to dial), and each
//! proxy tells which member dialled it by the connecting socket, found in the member processes'
//! open files. Cutting a member off blackholes every connection between it and the others, both
//! ways, while its clients, who dial its client port directly, still reach it: the member on the
//! wrong side of a partition, a leader among them, as its clients see it.
//!
//! [`PartitionSwitch`] lets a process other than the test's own ask for a partition, as
//! `distlock torture --faults partition --partition-cmd CMD` does: CMD writes a request into a
//! file the test watches, and returns once the test has carried it out.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::FaultProxy;
use super::proxy::Identify;
use crate::Failure;
use crate::sockets::tcp_connections_of_pid;

/// How long [`PeerLinks::isolate`] waits for connections of no known member to end before it
/// refuses to cut. Such a connection is normally one its dialler has just closed (a ZooKeeper
/// peer dialling a higher-numbered one), on its way out; on a loaded machine the upstream member
/// may take a while to notice.
const UNIDENTIFIED_GRACE: Duration = Duration::from_secs(5);

/// A proxy in front of each peer port of each member, and which member runs as which process.
pub struct PeerLinks {
    /// `proxies[i][k]` leads to member `i`'s peer port `k`.
    proxies: Vec<Vec<FaultProxy>>,
    /// `real[i][k]`: member `i`'s peer port `k` itself.
    real: Vec<Vec<u16>>,
    /// Member `i`'s pid while it runs, for telling who dialled a proxy.
    pids: Arc<Mutex<Vec<Option<u32>>>>,
    /// The proxies' own runtime: the cluster's methods block, and run outside any runtime.
    runtime: Option<tokio::runtime::Runtime>,
    isolated: Option<usize>,
}

impl PeerLinks {
    /// Starts one proxy in front of each `127.0.0.1:peer_ports[i][k]` (member `i`'s peer port
    /// `k`), passing everything.
    pub fn start(peer_ports: &[Vec<u16>]) -> Result<Self, Failure> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let pids: Arc<Mutex<Vec<Option<u32>>>> = Arc::new(Mutex::new(vec![None; peer_ports.len()]));
        let identify: Identify = {
            let pids = pids.clone();
            Arc::new(move |from, to| {
                let pids = pids.lock().unwrap_or_else(|p| p.into_inner()).clone();
                pids.iter().position(|pid| {
                    pid.is_some_and(|pid| {
                        tcp_connections_of_pid(pid)
                            .iter()
                            .any(|c| c.local_port == from && c.remote_port == to)
                    })
                })
            })
        };
        let proxies = runtime.block_on(async {
            let mut proxies = Vec::new();
            for ports in peer_ports {
                let mut member = Vec::new();
                for &port in ports {
                    member.push(FaultProxy::start_between(port, identify.clone()).await?);
                }
                proxies.push(member);
            }
            Ok::<_, Failure>(proxies)
        })?;
        Ok(PeerLinks {
            proxies,
            real: peer_ports.to_vec(),
            pids,
            runtime: Some(runtime),
            isolated: None,
        })
    }

    /// The port the other members dial to reach member `i`'s peer port `k` (what they are told
    /// it is).
    pub fn port(&self, i: usize, k: usize) -> u16 {
        self.proxies[i][k].port()
    }

    /// Member `i` now runs as `pid` (`None`: it no longer runs). Before it dials anyone: a
    /// connection accepted while its member is unknown is never cut off.
    pub fn set_pid(&self, i: usize, pid: Option<u32>) {
        self.pids.lock().unwrap_or_else(|p| p.into_inner())[i] = pid;
    }

    /// Has every proxy of peer port `k` rewrite each member's own address of that port
    /// (`127.0.0.1:PORT`, as a member introduces itself in its first message) to its proxy's,
    /// so that a peer dialling back the address it was told goes through the proxy too.
    pub fn readdress(&self, k: usize) -> Result<(), Failure> {
        let address = |port: u16| format!("127.0.0.1:{port}").into_bytes();
        let rewrite: Vec<(Vec<u8>, Vec<u8>)> = (0..self.proxies.len())
            .map(|i| (address(self.real[i][k]), address(self.port(i, k))))
            .collect();
        for member in &self.proxies {
            member[k].rewrite_requests(rewrite.clone())?;
        }
        Ok(())
    }

    /// [`set_pid`](Self::set_pid) for member `i`, as a function to call at each start.
    pub fn pid_of(&self, i: usize) -> impl Fn(Option<u32>) + Send + 'static {
        let pids = self.pids.clone();
        move |pid| pids.lock().unwrap_or_else(|p| p.into_inner())[i] = pid
    }

    /// Cuts member `i` off from every other member, both ways, open connections included; a
    /// member cut off before is joined again first. Fails, cutting nothing, if a proxy still
    /// has a connection open whose member it could not tell after 5 s (`UNIDENTIFIED_GRACE`): the
    /// cut would leak through it.
    pub fn isolate(&mut self, i: usize) -> Result<(), Failure> {
        let unidentified = || -> u64 {
            self.proxies
                .iter()
                .flatten()
                .map(|p| p.stats().unidentified_open)
                .sum()
        };
        let started = Instant::now();
        while unidentified() > 0 && started.elapsed() < UNIDENTIFIED_GRACE {
            std::thread::sleep(Duration::from_millis(20));
        }
        let unidentified = unidentified();
        if unidentified > 0 {
            return Err(Failure(format!(
                "{unidentified} open connection(s) between cluster members came from no known \
                 member process for {UNIDENTIFIED_GRACE:?}: a partition would not cut them"
            )));
        }
        self.check_no_direct_links()?;
        let others: Vec<usize> = (0..self.proxies.len()).filter(|&j| j != i).collect();
        for (j, member) in self.proxies.iter().enumerate() {
            let origins = if j == i {
                &others
            } else {
                std::slice::from_ref(&i)
            };
            for proxy in member {
                proxy.cut_off(origins);
            }
        }
        self.isolated = Some(i);
        Ok(())
    }

    /// Fails if a member has a connection to another member's own peer port, past the proxies
    /// (it learnt the address somewhere): a partition would not cut it.
    fn check_no_direct_links(&self) -> Result<(), Failure> {
        let pids = self.pids.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (m, pid) in pids.iter().enumerate() {
            let Some(pid) = *pid else { continue };
            let others: Vec<u16> = (0..self.real.len())
                .filter(|&n| n != m)
                .flat_map(|n| self.real[n].iter().copied())
                .collect();
            if let Some(direct) = tcp_connections_of_pid(pid)
                .into_iter()
                .find(|c| others.contains(&c.remote_port))
            {
                return Err(Failure(format!(
                    "member {m} talks to another member's port {} directly, past the proxies: a \
                     partition would not cut it",
                    direct.remote_port
                )));
            }
        }
        Ok(())
    }

    /// Joins the cut-off member again: what was sent meanwhile is delivered.
    pub fn heal(&mut self) {
        for proxy in self.proxies.iter().flatten() {
            proxy.cut_off(&[]);
        }
        self.isolated = None;
    }

    /// The member cut off now, if any.
    pub fn isolated(&self) -> Option<usize> {
        self.isolated
    }
}

impl Drop for PeerLinks {
    fn drop(&mut self) {
        self.proxies.clear();
        // Without waiting: a cluster may be dropped inside a test's own runtime.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A cluster of the test's own whose members can be cut off from each other.
pub trait Partitionable {
    /// How many members it has.
    fn members(&self) -> usize;
    /// Which member leads, once the members `which` agree on one (waits out an election): the
    /// majority's leader while a member is cut off.
    fn leader_among(&self, which: &[usize]) -> Result<usize, Failure>;
    /// Its peer links, if it was started with them.
    fn links(&mut self) -> Option<&mut PeerLinks>;

    /// Cuts member `i` off from the other members, both ways, while its clients still reach
    /// it; a member cut off before is joined again first. Only on a cluster started with peer
    /// links.
    fn isolate(&mut self, i: usize) -> Result<(), Failure> {
        links_of(self)?.isolate(i)
    }

    /// Joins the member [`isolate`](Self::isolate) cut off again.
    fn heal(&mut self) -> Result<(), Failure> {
        links_of(self)?.heal();
        Ok(())
    }
}

fn links_of<C: Partitionable + ?Sized>(cluster: &mut C) -> Result<&mut PeerLinks, Failure> {
    cluster.links().ok_or_else(|| {
        Failure("this cluster was started without peer links: it cannot be partitioned".into())
    })
}

/// Carries out `request` on `cluster` by cutting off its leader, the member whose loss matters
/// most: a cut waits until the other members have elected a new leader, and answers the old
/// one and the new; a heal answers `None`.
pub fn cut_off_the_leader(
    cluster: &mut impl Partitionable,
    request: PartitionRequest,
) -> Result<Option<(usize, usize)>, Failure> {
    match request {
        PartitionRequest::Cut => {
            let all: Vec<usize> = (0..cluster.members()).collect();
            let old = cluster.leader_among(&all)?;
            cluster.isolate(old)?;
            let others: Vec<usize> = (0..cluster.members()).filter(|&i| i != old).collect();
            Ok(Some((old, cluster.leader_among(&others)?)))
        }
        PartitionRequest::Heal => cluster.heal().map(|()| None),
    }
}

/// What a [`PartitionSwitch`] is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionRequest {
    /// Split the cluster (the test chooses how).
    Cut,
    /// Join it again.
    Heal,
}

/// A request file another process writes a [`PartitionRequest`] into, and the test carries out
/// ([`serve`](Self::serve)); the writer waits until it is done. The request is the environment
/// variable `DISTLOCK_PARTITION` (`cut` or `heal`) of the [`command`](Self::command).
pub struct PartitionSwitch {
    dir: tempfile::TempDir,
}

impl PartitionSwitch {
    /// A switch with a directory of its own.
    pub fn new() -> Result<Self, Failure> {
        Ok(PartitionSwitch {
            dir: tempfile::Builder::new()
                .prefix("distlock-partition-")
                .tempdir()?,
        })
    }

    fn request_file(&self) -> PathBuf {
        self.dir.path().join("request")
    }

    fn done_file(&self) -> PathBuf {
        self.dir.path().join("done")
    }

    /// The shell command that asks for `$DISTLOCK_PARTITION` and returns once it is done
    /// (exit 1 if nobody carried it out within 30 s).
    pub fn command(&self) -> String {
        let (request, done) = (self.request_file(), self.done_file());
        let (request, done) = (quoted(&request), quoted(&done));
        format!(
            "rm -f {done}; echo \"$DISTLOCK_PARTITION\" > {request}.new && mv {request}.new \
             {request}; for _ in $(seq 3000); do [ -f {done} ] && exit 0; sleep 0.01; done; \
             echo 'nobody carried out the partition request' >&2; exit 1"
        )
    }

    /// Carries out each request with `apply` as it comes, until `stop` is set; a request
    /// `apply` fails on is not answered (the command then fails), and the failure is returned.
    pub fn serve(
        &self,
        stop: &AtomicBool,
        mut apply: impl FnMut(PartitionRequest) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        while !stop.load(Ordering::Relaxed) {
            let Ok(text) = std::fs::read_to_string(self.request_file()) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            std::fs::remove_file(self.request_file())?;
            let request = match text.trim() {
                "cut" => PartitionRequest::Cut,
                "heal" => PartitionRequest::Heal,
                other => return Err(Failure(format!("unknown partition request {other:?}"))),
            };
            apply(request)?;
            std::fs::write(self.done_file(), text)?;
        }
        Ok(())
    }
}

fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

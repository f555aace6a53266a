//! The `failover` fault: Redis behind Sentinel (`redis-sentinel://`) loses its master right
//! after takes, the way the sources' charge against Redis locks goes.
//!
//! Each failover: replication is made to lag (a random choice: no replica, one or both
//! SIGSTOPped, and the master told to close their links: a stopped replica's socket would
//! still take in what the master sends and hand it over on SIGCONT), and as soon as a worker has taken the lock after that (within a second), the
//! master is SIGKILLed (in one case of four together with the replica that kept up: a
//! correlated failure, which is what `wait_replicas` below the replica count cannot cover), the
//! stopped replicas resumed, and the Sentinels left to promote one. Holds in this phase last up
//! to a lease (`Job::pause_max_us`), so a holder caught by the kill still holds when the
//! new master takes requests, and a second holder can get in if the take was lost. The killed nodes are started again with their own
//! command line, as replicas of the new master, and the next failover waits until every replica
//! is in sync and every Sentinel sees them up.
//!
//! The group must run on this machine: the nodes are found by the `process_id` their `INFO`
//! gives, and started again by the name their process title starts with (`redis-server`:
//! not `/proc/<pid>/exe`, which on Debian is `redis-check-rdb`, a program that picks its mode by
//! the name it was started as) with the settings [`RESTART_SETTINGS`] their `CONFIG GET`
//! answers (not their command line: redis-server writes its process title over it). Never
//! point it at a group that others use.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use distlock_harness::faults::random::Random;
use distlock_harness::monotonic_ns;

use super::driver::Pool;
use super::events::Injected;
use super::{Allowed, Overlaps};

/// A data node's address.
type Addr = (String, u16);

/// The Sentinel group a `redis-sentinel://` URL names, and the nodes this run started again.
pub(super) struct Group {
    sentinels: Vec<Addr>,
    master_name: String,
    /// `user:password@` of the data nodes, or empty.
    userinfo: String,
    /// Nodes started again after a kill: left running when the run ends (they are the group's
    /// now), reaped if they exit meanwhile.
    restarted: Vec<Child>,
}

/// A data node as the operating system knows it: enough to kill it and start it again.
struct Node {
    addr: Addr,
    pid: i32,
    program: PathBuf,
    /// `--setting value…` for each of [`RESTART_SETTINGS`] it has.
    args: Vec<String>,
}

/// The settings a killed node is started again with (those a test group sets), each as its
/// `CONFIG GET` answers it; `--replicaof` the new master is added.
const RESTART_SETTINGS: &[&str] = &[
    "port",
    "bind",
    "dir",
    "save",
    "appendonly",
    "appendfsync",
    "dbfilename",
    "requirepass",
    "masteruser",
    "masterauth",
    "protected-mode",
    "logfile",
];

/// How long a failover, a restart or a resync may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// The longest one failover with its calm may take: `--failovers N` runs at most N times this.
pub(super) const LONGEST: Duration = Duration::from_secs(90);

/// Which overlaps a failover explains, given the URL's `wait_replicas` and the group's
/// `replicas`: none when every replica must acknowledge each take (whichever the Sentinels
/// promote has it), else those of any process's hold struck by the failover.
pub(super) fn allowed(url: &str, replicas: usize) -> Allowed {
    let asked: usize = url
        .split_once('?')
        .map(|(_, query)| query)
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("wait_replicas="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if replicas > 0 && asked >= replicas {
        return Allowed {
            overlaps: Overlaps::None,
            why: "every replica acknowledged each take and renewal (wait_replicas): whichever \
                  the Sentinels promote has it",
        };
    }
    super::FaultKind::Failover.allows(super::Holding::Lease { wall_clock: true })
}

impl Group {
    /// The group of `url`, a `redis-sentinel://` URL; an error for any other.
    pub(super) fn of(url: &str) -> Result<Group> {
        let rest = url
            .strip_prefix("redis-sentinel://")
            .context("the failover fault needs a redis-sentinel:// URL")?;
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (format!("{}@", &rest[..at]), &rest[at + 1..]),
            None => (String::new(), rest),
        };
        let (hosts, path) = rest
            .split_once('/')
            .context("no master name after the Sentinels")?;
        let master_name = path.split(['?', '#']).next().unwrap_or("").to_string();
        let sentinels = hosts
            .split(',')
            .map(|host| {
                let (h, p) = host.rsplit_once(':').unwrap_or((host, "26379"));
                let port = p
                    .parse()
                    .with_context(|| format!("a Sentinel's port: {p:?}"))?;
                Ok((h.trim_matches(['[', ']']).to_string(), port))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Group {
            sentinels,
            master_name,
            userinfo,
            restarted: Vec::new(),
        })
    }

    /// How many replicas the group has: once the master has in sync every replica a majority
    /// of the Sentinels sees up (a group just started may still be syncing).
    pub(super) async fn replica_count(&self) -> Result<usize> {
        let give_up = tokio::time::Instant::now() + PATIENCE;
        loop {
            let master = self.master().await?;
            let online = self.online_replicas(&master).await?.len();
            let seen = self.replicas_seen_up().await;
            if seen > 0 && online >= seen {
                return Ok(online);
            }
            if tokio::time::Instant::now() > give_up {
                bail!("the master has {online} replicas in sync, the Sentinels see {seen} up");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The most replicas a majority of the Sentinels sees up (flags just `slave`).
    async fn replicas_seen_up(&self) -> usize {
        let mut counts = Vec::new();
        for sentinel in &self.sentinels {
            let answer: Result<Vec<Vec<String>>> = query(
                sentinel,
                "",
                redis::cmd("SENTINEL")
                    .arg("replicas")
                    .arg(&self.master_name),
            )
            .await;
            counts.push(answer.map_or(0, |list| {
                list.iter()
                    .filter(|fields| {
                        fields
                            .chunks(2)
                            .any(|kv| kv.len() == 2 && kv[0] == "flags" && kv[1] == "slave")
                    })
                    .count()
            }));
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts.get(self.sentinels.len() / 2).copied().unwrap_or(0)
    }

    /// One failover, as the module says; the fault's window runs from the moment replication
    /// starts to lag until the group is whole again.
    pub(super) async fn fail_over(&mut self, random: &Random, pool: &Pool) -> Result<Injected> {
        self.reap();
        let master = self.master().await?;
        let replicas = self.online_replicas(&master).await?;
        let mut nodes = Vec::with_capacity(replicas.len());
        for replica in &replicas {
            nodes.push(self.node(replica).await?);
        }
        let master = self.node(&master).await?;
        // 0: nothing lags; 1: one replica lags; 2: one lags and the other dies with the
        // master; 3: both lag.
        let (lagging, dies_too) = match random.below(4) {
            0 => (0, false),
            1 => (1, false),
            2 => (1, true),
            _ => (2, false),
        };
        let lagging = lagging.min(nodes.len());
        let mut links = Vec::with_capacity(lagging);
        for replica in &replicas[..lagging] {
            links.push(self.link_to_master(replica).await?);
        }
        let at_ns = monotonic_ns();
        for (node, link) in nodes[..lagging].iter().zip(&links) {
            signal(node.pid, libc::SIGSTOP)?;
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ADDR").arg(link);
            let _: redis::Value = query(&master.addr, &self.userinfo, &mut kill).await?;
        }
        // Right after a take, which reached the master and, of the replicas, only those that
        // keep up. Within a second in any case: a replica stopped longer than the Sentinels'
        // down-after time could not be promoted.
        let lagging_since = monotonic_ns();
        let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
        while !pool.took_since(lagging_since)? && tokio::time::Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Up to 20 ms more: the kill lands at varied points of the hold.
        tokio::time::sleep(random.up_to(Duration::from_millis(20))).await;
        let mut killed = vec![&master];
        signal(master.pid, libc::SIGKILL)?;
        if dies_too && let Some(kept_up) = nodes.get(lagging) {
            signal(kept_up.pid, libc::SIGKILL)?;
            killed.push(kept_up);
        }
        for node in &nodes[..lagging] {
            signal(node.pid, libc::SIGCONT)?;
        }
        let new_master = self.new_master(&master.addr).await?;
        for node in killed {
            self.start_again(node, &new_master)?;
        }
        self.whole_again(&new_master, replicas.len()).await?;
        Ok(Injected {
            at_ns,
            until_ns: monotonic_ns(),
            process: None,
        })
    }

    /// Where the master is, as the first Sentinel that answers says.
    async fn master(&self) -> Result<Addr> {
        for sentinel in &self.sentinels {
            if let Ok(Some(addr)) = self.named_by(sentinel).await {
                return Ok(addr);
            }
        }
        bail!("no Sentinel names the master {:?}", self.master_name)
    }

    /// The master `sentinel` names, if it knows one.
    async fn named_by(&self, sentinel: &Addr) -> Result<Option<Addr>> {
        let mut ask = redis::cmd("SENTINEL");
        ask.arg("get-master-addr-by-name").arg(&self.master_name);
        query(sentinel, "", &mut ask).await
    }

    /// The replica's end (`laddr`, `ip:port`) of its link to its master, as the master sees
    /// it: the connection to close so it receives nothing more.
    async fn link_to_master(&self, replica: &Addr) -> Result<String> {
        let mut list = redis::cmd("CLIENT");
        list.arg("LIST").arg("TYPE").arg("master");
        let clients: String = query(replica, &self.userinfo, &mut list).await?;
        clients
            .split_whitespace()
            .find_map(|field| field.strip_prefix("laddr="))
            .map(str::to_string)
            .with_context(|| format!("no link to a master on {replica:?}: {clients:?}"))
    }

    /// The replicas `master` lists as online.
    async fn online_replicas(&self, master: &Addr) -> Result<Vec<Addr>> {
        let info: String = query(
            master,
            &self.userinfo,
            redis::cmd("INFO").arg("replication"),
        )
        .await?;
        Ok(info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .filter_map(|l| {
                let field = |name: &str| {
                    l.split([':', ','])
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                };
                Some((field("ip")?.to_string(), field("port")?.parse().ok()?))
            })
            .collect())
    }

    /// The node at `addr`: its pid (from `INFO server`), executable and settings.
    async fn node(&self, addr: &Addr) -> Result<Node> {
        let info: String = query(addr, &self.userinfo, redis::cmd("INFO").arg("server")).await?;
        let pid: i32 = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .with_context(|| format!("no process_id in the INFO of {addr:?}"))?;
        let title = std::fs::read(format!("/proc/{pid}/cmdline")).with_context(|| {
            format!("reading the process title of {addr:?} (pid {pid}): is it on this machine?")
        })?;
        let program = String::from_utf8_lossy(&title)
            .split(['\0', ' '])
            .next()
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .with_context(|| format!("an empty process title for pid {pid}"))?;
        let mut args = Vec::new();
        for setting in RESTART_SETTINGS {
            let answer: Vec<String> = query(
                addr,
                &self.userinfo,
                redis::cmd("CONFIG").arg("GET").arg(setting),
            )
            .await?;
            let Some(value) = answer.get(1) else {
                continue;
            };
            // An empty `save` means "never", which is not the default; other empty values are.
            if value.is_empty() && *setting != "save" {
                continue;
            }
            args.push(format!("--{setting}"));
            if value.is_empty() {
                args.push(String::new());
            }
            // Each word its own argument: redis-server joins them into one configuration line.
            args.extend(value.split_whitespace().map(str::to_string));
        }
        Ok(Node {
            addr: addr.clone(),
            pid,
            program,
            args,
        })
    }

    /// Waits until a majority of the Sentinels names a master other than `old`, and it says it
    /// is one.
    async fn new_master(&self, old: &Addr) -> Result<Addr> {
        let give_up = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut named = Vec::new();
            for sentinel in &self.sentinels {
                named.push(self.named_by(sentinel).await.unwrap_or(None));
            }
            // A majority naming one node, which says it is a master: a client asks the
            // Sentinels in turn and checks the node's role, so one Sentinel late to learn of
            // the failover (seen to lag for a minute) is no obstacle.
            for candidate in named.iter().flatten() {
                let naming = named
                    .iter()
                    .filter(|n| n.as_ref() == Some(candidate))
                    .count();
                if candidate != old
                    && naming > self.sentinels.len() / 2
                    && self.is_master(candidate).await
                {
                    return Ok(candidate.clone());
                }
            }
            if tokio::time::Instant::now() > give_up {
                bail!("the Sentinels named no new master within {PATIENCE:?} (they say {named:?})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn is_master(&self, addr: &Addr) -> bool {
        let role: Result<Vec<redis::Value>> =
            query(addr, &self.userinfo, &mut redis::cmd("ROLE")).await;
        matches!(role.as_deref(), Ok([redis::Value::BulkString(r), ..]) if r == b"master")
    }

    /// Starts `node` again, with its settings, as a replica of the new master.
    fn start_again(&mut self, node: &Node, master: &Addr) -> Result<()> {
        let child = Command::new(&node.program)
            .args(&node.args)
            .args(["--replicaof", &master.0, &master.1.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "starting {:?} again ({})",
                    node.addr,
                    node.program.display()
                )
            })?;
        self.restarted.push(child);
        Ok(())
    }

    /// Waits until `master` has `replicas` replicas in sync and a majority of the Sentinels
    /// sees all of them up, so the next failover has the same group to work with.
    async fn whole_again(&self, master: &Addr, replicas: usize) -> Result<()> {
        let give_up = tokio::time::Instant::now() + PATIENCE;
        loop {
            let online = self.online_replicas(master).await.map(|r| r.len());
            let seen_up = self.replicas_seen_up().await >= replicas;
            if online.as_ref().is_ok_and(|n| *n >= replicas) && seen_up {
                return Ok(());
            }
            if tokio::time::Instant::now() > give_up {
                bail!(
                    "the group did not get its {replicas} replicas back within {PATIENCE:?} \
                     (online: {online:?}, a majority of the Sentinels sees them up: {seen_up})"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reaps restarted nodes that exited (killed again by a later failover).
    fn reap(&mut self) {
        self.restarted
            .retain_mut(|child| matches!(child.try_wait(), Ok(None)));
    }
}

fn signal(pid: i32, sig: i32) -> Result<()> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours. The pid is a
    // redis-server's, from its own INFO, whose /proc/<pid> entry was read (`node`), so it is a
    // process's, never 0 or negative (a group, or every process); at worst that process has
    // exited since, and kill fails with ESRCH.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("signal {sig} to redis-server pid {pid}"));
    }
    Ok(())
}

/// `cmd`'s answer from the server at `addr` (a new connection each time: the nodes come and go).
async fn query<T: redis::FromRedisValue>(
    addr: &Addr,
    userinfo: &str,
    cmd: &mut redis::Cmd,
) -> Result<T> {
    let url = format!("redis://{userinfo}{}:{}", addr.0, addr.1);
    let client = redis::Client::open(url.as_str()).with_context(|| distlock::redact(&url))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connecting to {}", distlock::redact(&url)))?;
    Ok(cmd.query_async(&mut conn).await?)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn signal_reaches_the_process_it_names() {
        let mut sleeping = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        super::signal(sleeping.id() as i32, libc::SIGKILL).unwrap();
        let ended = sleeping.wait().unwrap();
        assert_eq!(ended.signal(), Some(libc::SIGKILL), "{ended:?}");
    }
}

//! A private ZooKeeper: one standalone server, or an ensemble of quorum peers, each a JVM child
//! running Debian's zookeeper.jar on its own data directory and loopback ports, so a test can
//! restart the store, or kill, pause and start again one member at a time (a leader killed while
//! locks are held, a member paused past a session's timeout), without touching the shared
//! server of scripts/services.sh.
//!
//! Whether a server is up is asked over TCP with ZooKeeper's four-letter words, never read from
//! its log: `ruok` answers `imok` as soon as the process listens, but only `srvr` tells whether
//! it serves clients (`Mode: standalone`, `leader` or `follower`; a member without a quorum
//! answers "This ZooKeeper instance is not currently serving requests").
//!
//! Ticks are short (500 ms), so an election after a leader dies takes about a second and a
//! follower cut off from its leader notices within two seconds. Clients may ask for sessions of
//! 1 s to 60 s.
//!
//! Its methods block (they wait for a JVM): call them from `tokio::task::block_in_place` in
//! async code.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::members::{Members, member_controls};
use super::{
    Launch, PrivateServer, distinct_free_ports, find_program, fresh_dir_and_port, loopback_hosts,
    poll,
};
use crate::Failure;
use crate::faults::peers::{Partitionable, PeerLinks};

/// Debian's ZooKeeper (package `zookeeper`); its manifest names the jars it needs.
const JAR: &str = "/usr/share/java/zookeeper.jar";
/// An SLF4J binding that logs to stderr (package `libslf4j-java`, which ZooKeeper depends on):
/// Debian's jar comes without one and would log nothing at all.
const LOG_BINDING: &str = "/usr/share/java/slf4j-simple.jar";
const INSTALL: &str = "run scripts/services.sh zk to install it";
/// ZooKeeper's unit of time; session timeouts, sync and election limits count in ticks.
const TICK_MS: u64 = 500;
/// How long a new ensemble, or a member started again, may take to serve clients.
const SERVING_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a leader election may take before [`ZkEnsemble::leader`] gives up.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends the four-letter word `command` (`ruok`, `srvr`, `stat`, `mntr`, `cons`) to the
/// ZooKeeper on the loopback `port` and returns its answer (the server closes the connection
/// after it). Times out after a second, so a paused server fails rather than hangs.
pub fn zk_command(port: u16, command: &str) -> Result<String, Failure> {
    let timeout = Duration::from_secs(1);
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(command.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The shared ZooKeeper that scripts/services.sh starts.
pub const SHARED_ZOOKEEPER: &str = "127.0.0.1:2181";

/// Fails, naming scripts/services.sh zk, unless the shared ZooKeeper on 127.0.0.1:2181 serves
/// clients; returns its address (a Curator connect string).
pub fn shared_zookeeper() -> Result<&'static str, Failure> {
    match zk_command(2181, "srvr") {
        Ok(answer) if answer.contains("Mode: ") => Ok(SHARED_ZOOKEEPER),
        Ok(answer) => Err(Failure(format!(
            "ZooKeeper at {SHARED_ZOOKEEPER} does not serve ({}); run scripts/services.sh zk",
            answer.trim()
        ))),
        Err(Failure(e)) => Err(Failure(format!(
            "ZooKeeper not reachable at {SHARED_ZOOKEEPER} ({e}); run scripts/services.sh zk"
        ))),
    }
}

/// What `srvr` says the server on `port` is (`standalone`, `leader`, `follower`, `observer`),
/// or `None` if it does not serve clients (yet, or without a quorum) or does not answer.
fn mode(port: u16) -> Option<String> {
    let answer = zk_command(port, "srvr").ok()?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_string())
}

/// Serves clients: a standalone server, or an ensemble member in a quorum.
fn serves(port: u16) -> bool {
    mode(port).is_some()
}

/// The process listens (quorum or not).
fn answers(port: u16) -> bool {
    zk_command(port, "ruok").is_ok_and(|answer| answer == "imok")
}

/// Fails, naming ZooKeeper and how to install it, unless java and the jar are there.
fn installed() -> Result<(), Failure> {
    if !Path::new(JAR).is_file() {
        return Err(Failure(format!(
            "ZooKeeper is not installed ({JAR} is missing); {INSTALL}"
        )));
    }
    if find_program("java").is_none() {
        return Err(Failure(format!(
            "ZooKeeper needs java, which is not on PATH; {INSTALL}"
        )));
    }
    Ok(())
}

/// `zoo.cfg` for a server in `dir` with client port `client_port`; `peers` (quorum port,
/// election port) for each member of an ensemble, empty for a standalone server.
fn config(dir: &Path, client_port: u16, peers: &[(u16, u16)]) -> String {
    let mut cfg = format!(
        "tickTime={TICK_MS}\n\
         # A follower gets 5 s to sync with a new leader; one that has not heard from the leader\n\
         # for 2 s starts an election, and a leader without a quorum for 2 s steps down.\n\
         initLimit=10\n\
         syncLimit=4\n\
         minSessionTimeout=1000\n\
         maxSessionTimeout=60000\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,wchp,wchc\n",
        data = dir.join("data").display(),
    );
    for (i, (quorum, election)) in peers.iter().enumerate() {
        cfg.push_str(&format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1));
    }
    cfg
}

/// The JVM running ZooKeeper's `main` class on the configuration `cfg`.
fn java(main: &str, cfg: &Path) -> Command {
    let mut command = Command::new("java");
    command
        // Small and single-threaded where it can be: three of these share two cores.
        .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        // Empty container nodes (lock parents) are deleted after about a second, not a minute.
        .arg("-Dznode.container.checkIntervalMs=1000")
        // A member that cannot reach a peer (paused) gives up on it after a second, not five;
        // one without a quorum asks the others again at least every second, not every minute.
        .arg("-Dzookeeper.cnxTimeout=1000")
        .arg("-Dzookeeper.fastleader.maxNotificationInterval=1000")
        .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
        .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
        .arg("-cp")
        .arg(format!("{JAR}:{LOG_BINDING}"))
        .arg(main)
        .arg(cfg);
    command
}

/// Starts a private standalone ZooKeeper on a free loopback port, its data in a fresh
/// directory, and waits until it serves. [`PrivateStore::stop`] shuts it down cleanly (SIGTERM;
/// client connections end); started again on the same port and data, it keeps its znodes and
/// sessions, so an ephemeral node outlives a restart shorter than its session timeout. Its URL
/// is `zk://127.0.0.1:PORT`.
pub fn start_zookeeper() -> Result<PrivateServer, Failure> {
    installed()?;
    let (dir, port) = fresh_dir_and_port()?;
    let cfg = write_config(dir.path(), port, &[])?;
    let url = format!("zk://127.0.0.1:{port}");
    Launch::new("ZooKeeper", (dir, port), url, move || {
        java("org.apache.zookeeper.server.ZooKeeperServerMain", &cfg)
    })
    .keeping_data(true)
    .ready_when(serves)
    .start()
}

/// Writes [`config`] into `dir` (and its empty data directory); answers the file's path.
fn write_config(dir: &Path, client_port: u16, peers: &[(u16, u16)]) -> Result<PathBuf, Failure> {
    let cfg = dir.join("zoo.cfg");
    std::fs::create_dir(dir.join("data"))?;
    std::fs::write(&cfg, config(dir, client_port, peers))?;
    Ok(cfg)
}

/// A private ZooKeeper ensemble: quorum peers as our child processes, each with its own data
/// directory and loopback client, quorum and election ports, all killed (SIGKILL) on drop.
/// Member `i` has server id `i + 1`.
pub struct ZkEnsemble {
    members: Members,
}

/// Starts an ensemble of `members` ZooKeeper quorum peers on free loopback ports and waits
/// until every one serves clients (a leader was elected and the others follow it).
pub fn start_zookeeper_ensemble(members: usize) -> Result<ZkEnsemble, Failure> {
    start_ensemble(members, false)
}

/// [`start_zookeeper_ensemble`], with the members talking to each other through
/// [`PeerLinks`], so that a member can be cut off from the others ([`ZkEnsemble::isolate`])
/// while its clients still reach it. ZooKeeper has no address to advertise apart from the one
/// it listens on, so each member is told the others' proxies in its own `zoo.cfg` (its own
/// entry names its real ports); reconfiguration stays off, so no member takes another's view.
pub fn start_zookeeper_ensemble_with_peer_links(members: usize) -> Result<ZkEnsemble, Failure> {
    start_ensemble(members, true)
}

fn start_ensemble(members: usize, linked: bool) -> Result<ZkEnsemble, Failure> {
    installed()?;
    super::on_free_ports(|| start_ensemble_once(members, linked))
}

fn start_ensemble_once(members: usize, linked: bool) -> Result<ZkEnsemble, Failure> {
    let ports = distinct_free_ports(3 * members)?;
    let peers: Vec<(u16, u16)> = ports[members..].chunks(2).map(|p| (p[0], p[1])).collect();
    let links = if linked {
        let peer_ports: Vec<Vec<u16>> = peers.iter().map(|&(q, e)| vec![q, e]).collect();
        let links = PeerLinks::start(&peer_ports)?;
        // A peer opens an election connection with its own election address, from its own
        // zoo.cfg (its real port); a higher-numbered peer closes a connection a lower one dials
        // and dials back that address: rewritten to the proxy's, it goes through the proxy.
        links.readdress(1)?;
        Some(links)
    } else {
        None
    };
    let mut ensemble = ZkEnsemble {
        members: Members::new("the private ZooKeeper ensemble", links),
    };
    for (i, &client_port) in ports[..members].iter().enumerate() {
        // How member i reaches each member: itself directly, the others through their proxies.
        let peers: Vec<(u16, u16)> = match ensemble.members.links() {
            Some(links) => (0..members)
                .map(|j| match j == i {
                    true => peers[j],
                    false => (links.port(j, 0), links.port(j, 1)),
                })
                .collect(),
            None => peers.clone(),
        };
        let dir = tempfile::tempdir()?;
        let cfg = write_config(dir.path(), client_port, &peers)?;
        std::fs::write(dir.path().join("data/myid"), format!("{}\n", i + 1))?;
        let url = format!("zk://127.0.0.1:{client_port}");
        // Listening (the default readiness) is enough here: a member serves only once a quorum
        // has started.
        ensemble.members.start(
            Launch::new(
                "ZooKeeper ensemble member",
                (dir, client_port),
                url,
                move || java("org.apache.zookeeper.server.quorum.QuorumPeerMain", &cfg),
            )
            .keeping_data(true)
            .ready_when(answers),
        )?;
    }
    ensemble.wait_ready(&ensemble.members.all())?;
    Ok(ensemble)
}

impl ZkEnsemble {
    /// The URL of the members `which`, with session timeout `session_timeout` in whole
    /// milliseconds.
    pub fn members_url(&self, which: &[usize], session_timeout: Duration) -> String {
        let hosts = loopback_hosts(self.members.client_ports(which));
        format!("zk://{hosts}?timeout={}ms", session_timeout.as_millis())
    }

    /// The loopback client port of member `i` (for [`zk_command`]).
    pub fn client_port(&self, i: usize) -> u16 {
        self.members.client_port(i)
    }

    /// How many members the ensemble has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no members at all.
    pub fn is_empty(&self) -> bool {
        self.members.len() == 0
    }

    member_controls!(session_timeout: Duration);

    /// Waits until every member of `which` serves clients, failing early if one exits.
    fn wait_ready(&mut self, which: &[usize]) -> Result<(), Failure> {
        self.members
            .wait_until(which, SERVING_TIMEOUT, "serving", |members| {
                Ok(members.client_ports(which).all(serves))
            })
    }
}

impl Partitionable for ZkEnsemble {
    fn members(&self) -> usize {
        self.members.len()
    }

    /// Once every member of `which` serves and exactly one of them leads.
    fn leader_among(&self, which: &[usize]) -> Result<usize, distlock_harness::Failure> {
        let mut modes: Vec<(usize, Option<String>)> = Vec::new();
        let leader = poll(ELECTION_TIMEOUT, Duration::from_millis(100), || {
            modes = which
                .iter()
                .copied()
                .map(|i| (i, mode(self.client_port(i))))
                .collect();
            let leaders: Vec<usize> = modes
                .iter()
                .filter(|(_, m)| matches!(m.as_deref(), Some("leader" | "standalone")))
                .map(|&(i, _)| i)
                .collect();
            let serving = modes.iter().all(|(_, m)| m.is_some());
            Ok((leaders.len() == 1 && serving).then(|| leaders[0]))
        })?;
        leader.ok_or_else(|| {
            distlock_harness::Failure(format!(
                "the private ZooKeeper ensemble agreed on no leader within \
                 {ELECTION_TIMEOUT:?} (running members and their modes: {modes:?})"
            ))
        })
    }

    fn links(&mut self) -> Option<&mut PeerLinks> {
        self.members.links_mut()
    }
}

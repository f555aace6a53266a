//! Private servers: a store of the test's own, on a fresh data directory and a free loopback
//! port, that the test may stop and start again without disturbing anyone else (the shared
//! servers of scripts/services.sh serve every test run on the machine at once).
//!
//! Each server is one child process of the test ([`PrivateServer`]): stopped with the signal
//! that makes it shut down cleanly (clients cut off, data kept), killed if the test drops it.
//! Starting fails with a message naming the server and scripts/services.sh, which installs it.

mod cluster;
mod etcd;
mod mariadb;
mod members;
mod memcached;
mod postgres;
mod redis;
mod redlock;
mod sentinel;
mod zookeeper;

pub use cluster::{
    RedisCluster, cluster_url, master_of_slot, masters as cluster_masters, start_redis_cluster,
    start_redis_cluster_with,
};
pub use etcd::{
    EtcdCluster, PrivateEtcd, TlsEtcd, start_etcd, start_etcd_cluster,
    start_etcd_cluster_with_peer_links, start_etcd_tls,
};
pub use mariadb::start_mariadb;
pub use memcached::{start_memcached, start_memcached_without_evictions};
pub use postgres::start_postgres;
pub use redis::{Persistence, start_redis, start_redis_tls, start_redis_with_args};
pub use redlock::{RedlockMasters, redlock_url, start_redlock};
pub use sentinel::{
    GroupPasswords, SENTINEL_MASTER, SentinelGroup, redis_cli, redis_cli_as, sentinel_url,
    start_sentinel_group, start_sentinel_group_with,
};
pub use zookeeper::{
    SHARED_ZOOKEEPER, ZkEnsemble, shared_zookeeper, start_zookeeper, start_zookeeper_ensemble,
    start_zookeeper_ensemble_with_peer_links, zk_command,
};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::Failure;

/// A store a test owns: it can be stopped and started again. Its methods block (they wait for
/// the server process): call them from `tokio::task::block_in_place` in async code.
pub trait PrivateStore: Send {
    /// The URL a client connects with.
    fn url(&self) -> String;
    /// Whether holdings survive a stop and start (a table row, an append-only file) or the
    /// store comes back empty.
    fn keeps_data(&self) -> bool;
    /// Shuts the server down cleanly: every client connection ends, the data stays on disk.
    fn stop(&mut self) -> Result<(), Failure>;
    /// Starts the server again on the same port and data, and waits until it answers.
    fn start_again(&mut self) -> Result<(), Failure>;
    /// [`stop`](Self::stop) and [`start_again`](Self::start_again).
    fn restart(&mut self) -> Result<(), Failure> {
        self.stop()?;
        self.start_again()
    }
}

/// `url` with the query parameter `param` (`lock=session`) added.
pub fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

/// A private store whose URL carries one more parameter (`lock=session`, for the session
/// flavour of a SQL store).
pub struct WithParam<S> {
    store: S,
    param: &'static str,
}

impl<S: PrivateStore> WithParam<S> {
    /// `store`, connected to with `param` in its URL.
    pub fn new(store: S, param: &'static str) -> Self {
        WithParam { store, param }
    }
}

impl<S: PrivateStore> PrivateStore for WithParam<S> {
    fn url(&self) -> String {
        with_param(&self.store.url(), self.param)
    }
    fn keeps_data(&self) -> bool {
        self.store.keeps_data()
    }
    fn stop(&mut self) -> Result<(), Failure> {
        self.store.stop()
    }
    fn start_again(&mut self) -> Result<(), Failure> {
        self.store.start_again()
    }
}

/// How long a server may take to answer after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a server may take to shut down once asked to.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// What a server module says about its server, to start it.
pub(crate) struct Launch {
    /// The server's name in messages ("PostgreSQL").
    pub(crate) name: &'static str,
    /// Its data directory (and socket and log), removed after the server on drop.
    pub(crate) dir: tempfile::TempDir,
    pub(crate) port: u16,
    pub(crate) url: String,
    pub(crate) keeps_data: bool,
    /// The command that starts it (again).
    pub(crate) command: Box<dyn Fn() -> Command + Send>,
    /// Whether it answers yet (a TCP connect is not enough for every server).
    pub(crate) ready: fn(u16) -> bool,
    /// The signal that makes it shut down cleanly without waiting for its clients.
    pub(crate) stop_signal: libc::c_int,
    /// Whether a clean shutdown ends with the stop signal raised again once the server's own
    /// handlers ran (etcd), rather than with an exit.
    pub(crate) dies_by_stop_signal: bool,
}

impl Launch {
    /// The server `name`, started by `command`, listening on `port` with its data in `dir`,
    /// reached at `url`. Unless told otherwise it keeps nothing across a restart, answers once
    /// its port accepts a TCP connection, and shuts down cleanly on SIGTERM.
    pub(crate) fn new(
        name: &'static str,
        (dir, port): (tempfile::TempDir, u16),
        url: String,
        command: impl Fn() -> Command + Send + 'static,
    ) -> Self {
        Launch {
            name,
            dir,
            port,
            url,
            keeps_data: false,
            command: Box::new(command),
            ready: accepts,
            stop_signal: libc::SIGTERM,
            dies_by_stop_signal: false,
        }
    }

    /// It keeps its data across a stop and start.
    pub(crate) fn keeping_data(mut self, keeps_data: bool) -> Self {
        self.keeps_data = keeps_data;
        self
    }

    /// It answers once `ready` says so of its port.
    pub(crate) fn ready_when(mut self, ready: fn(u16) -> bool) -> Self {
        self.ready = ready;
        self
    }

    /// It shuts down cleanly on `signal`.
    pub(crate) fn stopped_by(mut self, signal: libc::c_int) -> Self {
        self.stop_signal = signal;
        self
    }

    /// Its clean shutdown ends with its stop signal raised again ([`Self::dies_by_stop_signal`]).
    pub(crate) fn dying_by_stop_signal(mut self) -> Self {
        self.dies_by_stop_signal = true;
        self
    }

    /// Starts it and waits until it answers.
    pub(crate) fn start(self) -> Result<PrivateServer, Failure> {
        PrivateServer::start(self)
    }
}

/// A fresh data directory and a free loopback port, for a private server.
pub(crate) fn fresh_dir_and_port() -> Result<(tempfile::TempDir, u16), Failure> {
    Ok((tempfile::tempdir()?, free_port()?))
}

/// `127.0.0.1:p1,127.0.0.1:p2,…` over `ports`: the hosts part of a URL naming several servers.
pub fn loopback_hosts(ports: impl IntoIterator<Item = u16>) -> String {
    ports
        .into_iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Calls `attempt` every `every` until it answers something, for at most `within`; `None` if
/// it never did. Blocks.
pub(crate) fn poll<T>(
    within: Duration,
    every: Duration,
    mut attempt: impl FnMut() -> Result<Option<T>, Failure>,
) -> Result<Option<T>, Failure> {
    let started = Instant::now();
    loop {
        if let Some(answer) = attempt()? {
            return Ok(Some(answer));
        }
        if started.elapsed() > within {
            return Ok(None);
        }
        std::thread::sleep(every);
    }
}

/// Polls `done` every 100 ms for up to `within`; past it, fails saying it waited for `what`,
/// with the end of `log_of`'s log (a server of the group waited for). Blocks.
pub(crate) fn wait_for(
    within: Duration,
    what: &str,
    log_of: &PrivateServer,
    mut done: impl FnMut() -> Result<bool, Failure>,
) -> Result<(), Failure> {
    match poll(within, Duration::from_millis(100), || {
        Ok(done()?.then_some(()))
    })? {
        Some(()) => Ok(()),
        None => Err(Failure(format!(
            "waited {within:?} for {what}; the private {}'s log: {}",
            log_of.launch.name,
            log_of.log_tail()
        ))),
    }
}

/// A private server: one child process on a loopback port, its log in its data directory,
/// killed (SIGKILL) if still running on drop.
pub struct PrivateServer {
    launch: Launch,
    log: PathBuf,
    child: Option<Child>,
    /// Variables set for the server process on top of the test's ([`Self::under_clock`]).
    env: Vec<(&'static str, std::ffi::OsString)>,
    /// Told the server's pid as soon as it is started, `None` once it no longer runs.
    on_spawn: Option<Box<dyn Fn(Option<u32>) + Send>>,
}

impl PrivateServer {
    /// Starts the server `launch` describes and waits until it answers.
    pub(crate) fn start(launch: Launch) -> Result<Self, Failure> {
        Self::start_telling(launch, None)
    }

    /// [`start`](Self::start), telling `on_spawn` the server's pid at each start, before it is
    /// ready (it may dial its peers by then), and `None` when it stops.
    pub(crate) fn start_telling(
        mut launch: Launch,
        on_spawn: Option<Box<dyn Fn(Option<u32>) + Send>>,
    ) -> Result<Self, Failure> {
        let log = launch.dir.path().join("server.log");
        // DISTLOCK_KEEP_SERVERS=1 keeps the directory (data and log) after the test, to read.
        if std::env::var_os("DISTLOCK_KEEP_SERVERS").is_some() {
            launch.dir.disable_cleanup(true);
            eprintln!(
                "the private {} keeps {}",
                launch.name,
                launch.dir.path().display()
            );
        }
        let mut server = PrivateServer {
            launch,
            log,
            child: None,
            env: Vec::new(),
            on_spawn,
        };
        server.start_again()?;
        Ok(server)
    }

    /// The same server, started again with its wall clock on `clock` (which the test can then
    /// jump): stopped cleanly, so what it keeps across a restart it keeps here too.
    pub fn under_clock(
        mut self,
        clock: &crate::faults::clock::ServerClock,
    ) -> Result<Self, Failure> {
        self.stop()?;
        self.env = clock.env()?;
        self.start_again()?;
        Ok(self)
    }

    /// The loopback port it listens on (for URLs with credentials).
    pub fn port(&self) -> u16 {
        self.launch.port
    }

    /// Sends `signal` to the running server (SIGSTOP / SIGCONT: a server that stalls).
    pub fn signal(&self, signal: i32) -> Result<(), Failure> {
        let Some(child) = &self.child else {
            return Err(Failure(format!(
                "the private {} is not running",
                self.launch.name
            )));
        };
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (so not reused).
        if unsafe { libc::kill(child.id() as libc::pid_t, signal) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// Kills the server (SIGKILL, paused or not) and waits for it: a crash, no clean shutdown.
    /// [`start_again`](PrivateStore::start_again) brings it back on the same port and data.
    pub fn kill(&mut self) -> Result<(), Failure> {
        self.tell(None);
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Whether it runs: started, and neither stopped nor killed since (a paused server runs).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// How the server exited, if it exited on its own; it then no longer runs.
    pub(crate) fn exited(&mut self) -> Result<Option<ExitStatus>, Failure> {
        let status = match self.child.as_mut() {
            Some(child) => child.try_wait()?,
            None => None,
        };
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    fn tell(&self, pid: Option<u32>) {
        if let Some(on_spawn) = &self.on_spawn {
            on_spawn(pid);
        }
    }

    /// The end of its log, for failure messages.
    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl PrivateStore for PrivateServer {
    fn url(&self) -> String {
        self.launch.url.clone()
    }

    fn keeps_data(&self) -> bool {
        self.launch.keeps_data
    }

    fn start_again(&mut self) -> Result<(), Failure> {
        if self.child.is_some() {
            return Ok(());
        }
        let Launch {
            name, port, ready, ..
        } = self.launch;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut child = (self.launch.command)()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                Failure(format!(
                    "the private {name} could not start ({e}); run scripts/services.sh to install it"
                ))
            })?;
        self.tell(Some(child.id()));
        let started = Instant::now();
        while !ready(port) {
            let gave_up = if let Some(status) = child.try_wait()? {
                format!("exited ({status}) before answering")
            } else if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                format!("did not answer within {START_TIMEOUT:?}")
            } else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            return Err(Failure(format!(
                "the private {name} on 127.0.0.1:{port} {gave_up}: {}",
                log_tail(&self.log)
            )));
        }
        self.child = Some(child);
        Ok(())
    }

    fn stop(&mut self) -> Result<(), Failure> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        self.tell(None);
        let pid = child.id() as libc::pid_t;
        let signal = self.launch.stop_signal;
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (so not reused).
        unsafe { libc::kill(pid, signal) };
        // A server can miss the signal when it arrives while the server is still starting
        // (mariadbd listens before its signal thread runs, and a SIGTERM then was never acted
        // on: a test stopped one right after its start and waited forever), so it is sent
        // again every second; a server already shutting down ignores it. Killed past a minute.
        let asked = Instant::now();
        let mut sent = asked;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if asked.elapsed() > STOP_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure(format!(
                    "the private {} did not shut down within {STOP_TIMEOUT:?}: {}",
                    self.launch.name,
                    log_tail(&self.log)
                )));
            }
            if sent.elapsed() >= Duration::from_secs(1) {
                // SAFETY: as above; try_wait has not reaped it.
                unsafe { libc::kill(pid, signal) };
                sent = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // A clean shutdown exits with 0, or, for a JVM (ZooKeeper), with 128 + the signal once
        // its shutdown hooks ran, or for etcd by the signal itself, raised again once its
        // handlers ran; anything else is worth seeing when a case fails later.
        let jvm_clean = status.code() == Some(128 + self.launch.stop_signal);
        let reraised = self.launch.dies_by_stop_signal
            && std::os::unix::process::ExitStatusExt::signal(&status)
                == Some(self.launch.stop_signal);
        if !status.success() && !jvm_clean && !reraised {
            return Err(Failure(format!(
                "the private {} did not shut down cleanly ({status}): {}",
                self.launch.name,
                log_tail(&self.log)
            )));
        }
        Ok(())
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `start` (a cluster on ports from [`free_port`]) up to three times: between the moment a
/// port is found free and the moment a member binds it, another test of the binary may take it
/// (a proxy binding port 0 gets one from the same range), and the member then exits before it
/// serves. The last failure is returned.
pub(crate) fn on_free_ports<T>(
    mut start: impl FnMut() -> Result<T, Failure>,
) -> Result<T, Failure> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(failure) if attempt < 3 => {
                eprintln!(
                    "starting a cluster failed (trying again on other ports): {}",
                    failure.0
                );
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// A port nobody listens on right now, below the kernel's ephemeral range: private servers are
/// restarted on their port (a restart, a moved clock), and a port the kernel also hands out to
/// outgoing connections was once taken by one in that moment ("Address already in use", a
/// clean-clone CI run's torture case). Ports are tried at random in 15000–32767 (above every
/// port `scripts/services.sh` uses); the kernel's choice if none of a few hundred is free.
pub(crate) fn free_port() -> Result<u16, Failure> {
    use std::hash::{BuildHasher, Hasher};
    const LOW: u16 = 15000;
    let high = ephemeral_start().unwrap_or(32768).max(LOW + 1000);
    for _ in 0..300 {
        // A random number without another dependency: each RandomState is seeded afresh.
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = LOW + (random % u64::from(high - LOW)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `n` loopback ports nobody listens on, all different (free_port only says nobody listens
/// now: two calls may hand out the same port).
pub(crate) fn distinct_free_ports(n: usize) -> Result<Vec<u16>, Failure> {
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < n {
        let port = free_port()?;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    Ok(ports)
}

/// The first port of the kernel's ephemeral range (outgoing connections' local ports).
fn ephemeral_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The program `name` as found on `PATH`, if it is there.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Whether something accepts TCP connections on the loopback `port`.
pub(crate) fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Runs a set-up command (`initdb`) to completion; fails with its output. Answers its standard
/// output.
pub(crate) fn run(command: &mut Command, what: &str) -> Result<String, Failure> {
    let out = command.output().map_err(|e| {
        Failure(format!(
            "{what} could not run ({e}); run scripts/services.sh to install it"
        ))
    })?;
    if !out.status.success() {
        return Err(Failure(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The end of a server's log, for failure messages.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
    format!("last lines of {}:\n{tail}", log.display())
}

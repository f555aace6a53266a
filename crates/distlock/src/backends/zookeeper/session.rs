//! The client's session: one ZooKeeper session that every node of this client's locks is tied
//! to (ephemeral), checked in the background. The session is over when it can no longer be
//! assumed alive: its timeout has run out, counted from the send time of the last check the
//! ensemble confirmed (a paused or cut-off process finds it over as soon as it runs again), or
//! the client says it expired or closed. Every holding of the session then fires its lost
//! signal at once, the session is closed for good (were it to reconnect, its nodes would come
//! back with it), and the next take starts a new session.
//!
//! The check is a write (to the session's own ephemeral beacon, `<chroot>/%sessions/<id>`), not
//! a read: a server answers reads from its own state, and a leader cut off from its followers
//! goes on answering them until it steps down, while the followers elect a new leader that
//! counts every session afresh from its election. A read so confirmed a session the ensemble
//! was about to expire, and the holder could believe it held a lock already given away (a race
//! of the old leader's step-down against the new one's election, lost once in about 18 runs of
//! the cut-off-leader case). A write is committed by a quorum, which a cut-off server cannot
//! reach, so only the side that can expire the session confirms it.
//!
//! The same check also reads the nodes of the session's holdings (pipelined with it: no round
//! trip of its own, none per acquisition): a holding whose node someone else deleted (a forced
//! release) is over, and its own lost signal fires. Not a watch on the node: its successor's
//! watch is the node's only one, so a deletion wakes one waiter, not the herd.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client::{Client, SessionState};

use super::config::Config;
use super::nodes::SESSIONS;
use super::{EPHEMERAL, NAME, PARENT, from_zk};
use crate::backend::Signal;
use crate::backends::queues::holdings::Watched;
use crate::error::{Error, ErrorKind, Result};

/// How long a failed check waits before it is tried again (within the timeout).
const RETRY: Duration = Duration::from_millis(100);

/// One ZooKeeper session and the task that checks it.
pub(super) struct Session {
    /// The session timeout the ensemble granted.
    timeout: Duration,
    /// `None` once the session is over: no request goes out on it again, and with the last
    /// handle gone the client closes the session.
    client: Arc<Mutex<Option<Client>>>,
    over: Arc<watch::Sender<bool>>,
    /// Until when the ensemble has confirmed the session: the send time of the last answered
    /// request plus the timeout.
    valid_until: watch::Receiver<Instant>,
    checker: tokio::task::AbortHandle,
    /// The nodes of this session's holdings the check reads.
    held: Arc<Watched>,
}

impl Session {
    /// Whether the session can no longer be assumed alive: said so, or past its confirmed end
    /// by the clock (before the checking task has even run, after a pause).
    pub(super) fn is_over(&self) -> bool {
        *self.over.borrow() || Instant::now() >= *self.valid_until.borrow()
    }

    /// The client of this session, unless it is over.
    pub(super) fn client(&self) -> Result<Client> {
        if self.is_over() {
            return Err(session_over());
        }
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(session_over)
    }

    /// Until when the session is confirmed, as checks move it on.
    pub(super) fn valid_until(&self) -> watch::Receiver<Instant> {
        self.valid_until.clone()
    }

    /// Resolves when the holding whose node is `path`, created at `czxid`, is over: its node
    /// found gone (or replaced) by a check, or the session over. Dropping the signal stops the
    /// checks of that node.
    pub(super) fn holding_ended(&self, path: String, czxid: i64) -> Signal {
        self.held.holding_ended(path, czxid, self.ended())
    }

    /// Resolves when the session is over.
    pub(super) fn ended(&self) -> Signal {
        let mut over = self.over.subscribe();
        Box::pin(async move {
            let _ = over.wait_for(|o| *o).await;
        })
    }

    /// Closes the session: its nodes go at once when the ensemble is reachable (the client sends
    /// the close when its last handle is dropped).
    fn close(&self) {
        self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.checker.abort();
        self.over.send_replace(true);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.checker.abort();
    }
}

/// The error for a request on a session that is over.
pub(super) fn session_over() -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        "the ZooKeeper session ended (expired, closed, or not confirmed within its timeout): \
         every lock it held or waited for is gone",
    )
    .with_backend(NAME)
}

/// The client's current session, started on first use and again after one is over; and the
/// sessions of locks whose lease is shorter than its timeout, one per timeout.
pub(super) struct Sessions {
    config: Arc<Config>,
    /// The application's connector, if it gave one: every session starts from it.
    connector: Option<zookeeper_client::Connector>,
    connect_timeout: Duration,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// The session timeout the ensemble granted the last session, in milliseconds (the one asked
    /// for until then): the servers bound what the URL asks by their minimum and maximum.
    granted_ms: AtomicU64,
    /// The sessions of leases shorter than the session timeout, by their timeout in
    /// milliseconds: a lock's lease means what it means on every store (a holder that stops
    /// blocks others at most that long) only if the session holding its node ends by then. One
    /// session per timeout serves every lock and waiter asking that lease.
    short: tokio::sync::Mutex<HashMap<u64, Arc<Session>>>,
    /// The ensemble's minimum session timeout in milliseconds, once a session showed it (the
    /// servers raise a shorter timeout to it); 0 until then.
    server_min_ms: AtomicU64,
}

/// The step short sessions' timeouts are rounded up to: a lease of 4.95 s is held by a 5 s
/// session, and distinct leases share few sessions.
pub(super) const SHORT_STEP: Duration = Duration::from_millis(100);

impl Sessions {
    /// `connector`: the application's, which every session is opened with (its TLS, SASL,
    /// authentication); `None`: a default one.
    pub(super) fn new(
        config: Arc<Config>,
        connect_timeout: Duration,
        connector: Option<zookeeper_client::Connector>,
    ) -> Self {
        Sessions {
            connector,
            granted_ms: AtomicU64::new(config.timeout.as_millis() as u64),
            config,
            connect_timeout,
            current: tokio::sync::Mutex::new(None),
            short: tokio::sync::Mutex::new(HashMap::new()),
            server_min_ms: AtomicU64::new(0),
        }
    }

    /// The live session for a lock of `lease` (`name` for the refusal): the client's session
    /// when the lease is at least its timeout, otherwise the session whose timeout is the lease
    /// (rounded up to [`SHORT_STEP`]), started if there is none. Refused with
    /// [`ErrorKind::InvalidLease`] when the ensemble grants no session that short, naming its
    /// minimum.
    pub(super) async fn get_for(&self, lease: Duration, name: &str) -> Result<Arc<Session>> {
        let step = SHORT_STEP.as_millis() as u64;
        let ms = (lease.as_millis() as u64).div_ceil(step).max(1) * step;
        if ms >= self.granted_ms.load(Ordering::Relaxed) {
            return self.get().await;
        }
        let refuse = |min: u64| {
            let min = crate::types::show_duration(Duration::from_millis(min));
            Error::new(
                ErrorKind::InvalidLease,
                format!(
                    "lock {name:?}: a lease of {} is shorter than the {min} the zk server keeps \
                     at least ({}): ask for a lease of {min} or more",
                    crate::types::show_duration(lease),
                    super::MINIMUM_TIMEOUT_WHY,
                ),
            )
            .with_backend(NAME)
        };
        let known_min = self.server_min_ms.load(Ordering::Relaxed);
        if ms < known_min {
            return Err(refuse(known_min));
        }
        let mut short = self.short.lock().await;
        if let Some(s) = short.get(&ms).filter(|s| !s.is_over()) {
            return Ok(s.clone());
        }
        if let Some(old) = short.remove(&ms) {
            old.close();
        }
        let session = self.start_with(Duration::from_millis(ms)).await?;
        let granted = session.timeout.as_millis() as u64;
        if granted > ms {
            // The ensemble raised it: a holder stopped now would block others longer than its
            // lease. The session closes as it is dropped.
            self.server_min_ms.store(granted, Ordering::Relaxed);
            session.close();
            return Err(refuse(granted));
        }
        let session = Arc::new(session);
        short.insert(ms, session.clone());
        Ok(session)
    }

    /// The session timeout the ensemble granted: how long after this client's last contact its
    /// session, and every lock it holds, ends.
    pub(super) fn timeout(&self) -> Duration {
        Duration::from_millis(self.granted_ms.load(Ordering::Relaxed))
    }

    /// The live session, started if there is none.
    pub(super) async fn get(&self) -> Result<Arc<Session>> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref().filter(|s| !s.is_over()) {
            return Ok(s.clone());
        }
        if let Some(old) = current.take() {
            old.close();
        }
        let session = Arc::new(self.start_with(self.config.timeout).await?);
        self.granted_ms
            .store(session.timeout.as_millis() as u64, Ordering::Relaxed);
        *current = Some(session.clone());
        Ok(session)
    }

    /// A connector for a new session: the application's, or a default one.
    fn connector(&self) -> zookeeper_client::Connector {
        self.connector.clone().unwrap_or_else(Client::connector)
    }

    /// The shortest session the ensemble grants ([`SHORT_STEP`] until a session showed more).
    pub(super) fn short_minimum(&self) -> Duration {
        Duration::from_millis(self.server_min_ms.load(Ordering::Relaxed)).max(SHORT_STEP)
    }

    /// Learns the ensemble's minimum session timeout: a session asking for `PROBE` is granted
    /// that minimum when it is longer (and closed at once). When it is not, the minimum is left
    /// unknown: a shorter session is asked for when a lock needs one, and refused then if the
    /// ensemble raises it.
    pub(super) async fn probe_minimum(&self) -> Result<()> {
        // Not shorter: the client gives up connecting after the session timeout it asks for,
        // which a loaded machine outlasted at 100 ms.
        const PROBE: Duration = Duration::from_secs(1);
        let probe = self
            .connector()
            .with_session_timeout(PROBE)
            .with_fail_eagerly()
            .connect(&self.config.servers);
        let client = tokio::time::timeout(self.connect_timeout, probe)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::Connection,
                    format!(
                        "cannot reach ZooKeeper at {}: no session within {:?}",
                        self.config.redacted, self.connect_timeout
                    ),
                )
                .with_backend(NAME)
            })?
            .map_err(from_zk("asking the ensemble's minimum session timeout"))?;
        let granted = client.session_timeout();
        if granted > PROBE {
            self.server_min_ms
                .store(granted.as_millis() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Connects a new session, asking for `timeout`.
    async fn start_with(&self, timeout: Duration) -> Result<Session> {
        let config = &self.config;
        let unreachable = |why: String| {
            Error::new(
                ErrorKind::Connection,
                format!("cannot reach ZooKeeper at {}: {why}", config.redacted),
            )
            .with_backend(NAME)
        };
        let mut connector = self
            .connector()
            .with_session_timeout(timeout)
            .with_fail_eagerly();
        if let Some((user, password)) = &config.user {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let sent = Instant::now();
        let client = tokio::time::timeout(self.connect_timeout, connector.connect(&config.servers))
            .await
            .map_err(|_| unreachable(format!("no session within {:?}", self.connect_timeout)))?
            .map_err(|e| unreachable(e.to_string()))?;
        let timeout = client.session_timeout();
        let beacon = Beacon::make(&client, &config.prefix)
            .await
            .map_err(from_zk("creating the session's beacon node"))?;
        let over = Arc::new(watch::channel(false).0);
        let (until_tx, valid_until) = watch::channel(sent + timeout);
        let shared = Arc::new(Mutex::new(Some(client.clone())));
        let held = Arc::new(Watched::default());
        let checker = tokio::spawn(check(
            client,
            beacon,
            shared.clone(),
            timeout,
            until_tx,
            over.clone(),
            held.clone(),
        ));
        Ok(Session {
            timeout,
            client: shared,
            over,
            valid_until,
            checker: checker.abort_handle(),
            held,
        })
    }

    /// Ends the current session: its nodes go at once, so every lock it held is free (their
    /// guards report the loss). The next take starts a new session.
    /// The sessions of short leases end with it.
    pub(super) async fn end(&self) {
        for (_, session) in self.short.lock().await.drain() {
            session.close();
        }
        if let Some(session) = self.current.lock().await.take() {
            session.close();
        }
    }
}

/// Checks the session every third of its timeout with a write to its beacon (see the module
/// comment for why not a read); the answer's send time plus the timeout is how long the session
/// is sure to live (the ensemble expires a session only a full timeout after it last heard from
/// it). A failed check is tried again until that has run out; then, or when the client reports
/// the session expired or closed, it is over.
async fn check(
    client: Client,
    beacon: Beacon,
    shared: Arc<Mutex<Option<Client>>>,
    timeout: Duration,
    confirmed: watch::Sender<Instant>,
    over: Arc<watch::Sender<bool>>,
    held: Arc<Watched>,
) {
    let mut valid_until = *confirmed.borrow();
    let mut next = valid_until - timeout + timeout / 3;
    let mut states = client.state_watcher();
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            state = states.changed() => {
                if terminal(state) {
                    break;
                }
                continue;
            }
        }
        let sent = Instant::now();
        if sent >= valid_until {
            break;
        }
        // The holdings' nodes, asked right behind the session's own check (requests are sent
        // when made, in order, on the one connection).
        let nodes = held.to_check();
        let session_check = client.set_data(&beacon.path, b"", None);
        let node_checks: Vec<_> = nodes.iter().map(|(p, _)| client.check_stat(p)).collect();
        match tokio::time::timeout(valid_until - sent, session_check).await {
            Ok(Ok(_)) => {
                valid_until = sent + timeout;
                confirmed.send_replace(valid_until);
                next = sent + timeout / 3;
                let answers =
                    tokio::time::timeout(valid_until - Instant::now(), join_all(node_checks));
                if let Ok(answers) = answers.await {
                    // A read that failed is not known this time: asked again at the next check.
                    if let Some(now) = answers
                        .into_iter()
                        .map(|a| a.map(|stat| stat.map(|s| s.czxid)).ok())
                        .collect::<Option<Vec<_>>>()
                    {
                        held.found(&nodes, &now);
                    }
                }
            }
            Ok(Err(e)) if terminal_error(&e) => break,
            // Someone deleted the beacon: made again, and checked again soon.
            Ok(Err(zookeeper_client::Error::NoNode)) => {
                if let Err(e) = Beacon::make(&client, &beacon.prefix).await {
                    tracing::debug!(error = %e, "making the session's beacon again failed");
                }
                next = Instant::now() + RETRY;
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "ZooKeeper session check failed; trying again");
                next = Instant::now() + RETRY;
            }
            Err(_) => next = Instant::now(),
        }
    }
    // Closed for good: were it to reconnect, its nodes would keep the locks it lost.
    shared.lock().unwrap_or_else(|p| p.into_inner()).take();
    over.send_replace(true);
}

/// The session's beacon node, `<prefix>/%sessions/<session id>`: ephemeral, so it goes with the
/// session; the checker's write to it confirms the session.
struct Beacon {
    /// The chroot its `%sessions` parent is under.
    prefix: String,
    path: String,
}

impl Beacon {
    /// Creates the beacon of `client`'s session under `prefix`, and its parent if missing (or
    /// finds it there already).
    async fn make(
        client: &Client,
        prefix: &str,
    ) -> std::result::Result<Beacon, zookeeper_client::Error> {
        let parent = format!("{prefix}/{SESSIONS}");
        let path = format!("{parent}/{:016x}", client.session_id().0);
        let mut tries = 0;
        loop {
            tries += 1;
            match client.create(&path, b"", &EPHEMERAL).await {
                Ok(_) | Err(zookeeper_client::Error::NodeExists) => {
                    return Ok(Beacon {
                        prefix: prefix.to_owned(),
                        path,
                    });
                }
                // The parent is missing (never made, or reaped as an empty container).
                Err(zookeeper_client::Error::NoNode) if tries < 5 => {
                    match client.mkdir(&parent, &PARENT).await {
                        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
                        Err(e) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn terminal(state: SessionState) -> bool {
    matches!(
        state,
        SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
    )
}

fn terminal_error(e: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as Zk;
    matches!(
        e,
        Zk::SessionExpired | Zk::ClientClosed | Zk::AuthFailed | Zk::SessionMoved
    )
}

/// Maps a client error met on `session`'s requests.
pub(super) fn on_session(what: &'static str, e: zookeeper_client::Error) -> Error {
    if terminal_error(&e) {
        return session_over().with_source(e);
    }
    from_zk(what)(e)
}

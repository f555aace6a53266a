//! The client's session: one etcd lease that every key of this client's locks is attached to,
//! kept alive in the background. The session is over when the lease can no longer be assumed
//! alive: its TTL has run out, counted from the send time of the last keep-alive etcd answered
//! (a paused or cut-off process finds it over as soon as it runs again), or etcd says the lease
//! is gone. Every holding of the session then fires its lost signal at once, and the next take
//! starts a new session.
//!
//! Each keep-alive also reads the keys of the session's holdings (one transaction, sent beside
//! it: no round trip of its own and none per acquisition): a holding whose key someone else
//! deleted (a forced release) is over, and its own lost signal fires.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{
    Client, LeaseGrantResponse, LeaseKeepAliveStream, LeaseKeeper, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{NAME, from_etcd};
use crate::backend::Signal;
use crate::backends::queues::holdings::Watched;
use crate::error::{Error, ErrorKind, Result};

/// How long a failed keep-alive waits before it is tried again (within the TTL).
const RETRY: Duration = Duration::from_millis(200);

/// One lease and its keep-alive task.
pub(super) struct Session {
    /// The lease id: keys are `<lock prefix><id in hex>-<n>`.
    pub(super) id: i64,
    /// The TTL etcd granted its lease.
    ttl: Duration,
    over: watch::Receiver<bool>,
    /// Until when etcd has confirmed the lease: the send time of the last answered keep-alive
    /// plus the TTL.
    valid_until: watch::Receiver<Instant>,
    keep_alive: tokio::task::AbortHandle,
    /// The keys of this session's holdings the keep-alive reads.
    held: Arc<Watched>,
}

impl Session {
    /// Resolves when the holding whose key is `key`, created at `revision`, is over: the key
    /// found gone (or put anew) by a keep-alive's read, or the session over. Dropping the signal
    /// stops the reads of that key.
    pub(super) fn holding_ended(&self, key: String, revision: i64) -> Signal {
        self.held.holding_ended(key, revision, self.ended())
    }

    /// Whether the session can no longer be assumed alive: said so, or past its confirmed end
    /// by the clock (before the keep-alive task has even run, after a pause).
    pub(super) fn is_over(&self) -> bool {
        *self.over.borrow() || Instant::now() >= *self.valid_until.borrow()
    }

    /// Until when the session is confirmed, as keep-alives move it on.
    pub(super) fn valid_until(&self) -> watch::Receiver<Instant> {
        self.valid_until.clone()
    }

    /// Resolves when the session is over.
    pub(super) fn ended(&self) -> Signal {
        let mut over = self.over.clone();
        Box::pin(async move {
            // The sender is dropped only once the task has said "over" (or was aborted with the
            // backend): either way the lease is not kept alive any more.
            let _ = over.wait_for(|o| *o).await;
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

/// The client's current session, started on first use and again after one is over; and the
/// sessions of locks whose lease is shorter than its TTL, one per TTL.
pub(super) struct Sessions {
    client: Client,
    ttl: Duration,
    current: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// The TTL etcd granted the last session's lease, in seconds (the one asked for until then):
    /// etcd raises a TTL below its minimum.
    granted_secs: AtomicU64,
    /// The sessions of leases shorter than the session's TTL, by their TTL in whole seconds: a
    /// lock's lease means what it means on every store (a holder that stops blocks others at
    /// most that long) only if what holds its key ends by then. One lease per TTL, kept alive
    /// like the client's own, serves every lock and waiter asking that lease.
    short: tokio::sync::Mutex<HashMap<u64, Arc<Session>>>,
    /// etcd's minimum TTL in seconds, once a grant showed it (it raises a shorter TTL to it);
    /// 0 until then.
    server_min_secs: AtomicU64,
}

/// The TTL of the lease that keeps a lock of `lease`: whole seconds (etcd leases count
/// seconds), rounded up, so a stopped holder blocks others at most the lease plus a second.
pub(super) fn ttl_secs_of(lease: Duration) -> u64 {
    lease.as_nanos().div_ceil(1_000_000_000).max(1) as u64
}

impl Sessions {
    pub(super) fn new(client: Client, ttl: Duration) -> Self {
        Sessions {
            client,
            ttl,
            current: tokio::sync::Mutex::new(None),
            granted_secs: AtomicU64::new(ttl.as_secs()),
            short: tokio::sync::Mutex::new(HashMap::new()),
            server_min_secs: AtomicU64::new(0),
        }
    }

    /// The live session for a lock of `lease` (`name` for the refusal): the client's session
    /// when the lease is at least its TTL, otherwise the session of the lease's own TTL,
    /// started if there is none with a lease `grant` asks for. Refused with
    /// [`ErrorKind::InvalidLease`] when etcd cannot keep a lease that short, naming its minimum.
    pub(super) async fn get_for<G>(
        &self,
        lease: Duration,
        name: &str,
        grant: impl FnOnce(i64) -> G,
    ) -> Result<Arc<Session>>
    where
        G: std::future::Future<Output = Result<LeaseGrantResponse>>,
    {
        let secs = ttl_secs_of(lease);
        if secs >= self.granted_secs.load(Ordering::Relaxed) {
            return self.get(grant).await;
        }
        let refuse = |min: u64| {
            Error::new(
                ErrorKind::InvalidLease,
                format!(
                    "lock {name:?}: a lease of {} is shorter than the {min}s etcd keeps a lease                      at least (the server raises a shorter TTL to its minimum, 1.5 times its                      --election-timeout rounded up to a second): ask for a lease of {min}s or                      more, or lower the servers' --election-timeout",
                    crate::types::show_duration(lease),
                ),
            )
            .with_backend(NAME)
        };
        let known_min = self.server_min_secs.load(Ordering::Relaxed);
        if secs < known_min {
            return Err(refuse(known_min));
        }
        let mut short = self.short.lock().await;
        if let Some(s) = short.get(&secs).filter(|s| !s.is_over()) {
            return Ok(s.clone());
        }
        let sent = Instant::now();
        let granted = grant(secs as i64).await?;
        if granted.ttl() > secs as i64 {
            // etcd raised it: a holder stopped now would block others longer than its lease.
            let min = granted.ttl() as u64;
            self.server_min_secs.store(min, Ordering::Relaxed);
            let mut leases = self.client.lease_client();
            let id = granted.id();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), leases.revoke(id)).await;
            });
            return Err(refuse(min));
        }
        let session = Arc::new(self.start(sent, granted)?);
        short.insert(secs, session.clone());
        Ok(session)
    }

    /// The shortest lease etcd keeps (whole seconds; 1 s until a grant showed more).
    pub(super) fn short_minimum(&self) -> Duration {
        Duration::from_secs(self.server_min_secs.load(Ordering::Relaxed).max(1))
    }

    /// Learns etcd's minimum TTL: a grant of 1 s comes back raised to it (and is revoked).
    pub(super) async fn probe_minimum(&self) -> Result<()> {
        let mut leases = self.client.lease_client();
        let granted = leases
            .grant(1, None)
            .await
            .map_err(from_etcd("asking etcd's minimum lease TTL"))?;
        self.server_min_secs
            .store(granted.ttl().max(1) as u64, Ordering::Relaxed);
        let _ = leases.revoke(granted.id()).await;
        Ok(())
    }

    /// The TTL of the session's lease: how long after this client's last keep-alive its
    /// session, and every lock it holds, ends.
    pub(super) fn ttl(&self) -> Duration {
        Duration::from_secs(self.granted_secs.load(Ordering::Relaxed))
    }

    /// Stops using `session` (etcd says its lease is gone): the next take starts a new one.
    /// Its holdings are told by the keep-alive, which finds the lease gone too.
    pub(super) async fn discard(&self, session: &Arc<Session>) {
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, session)) {
            *current = None;
        }
        drop(current);
        self.short
            .lock()
            .await
            .retain(|_, s| !Arc::ptr_eq(s, session));
    }

    /// The live session, started if there is none with a lease `grant` asks for (given the
    /// TTL in seconds).
    pub(super) async fn get<G>(&self, grant: impl FnOnce(i64) -> G) -> Result<Arc<Session>>
    where
        G: std::future::Future<Output = Result<LeaseGrantResponse>>,
    {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref().filter(|s| !s.is_over()) {
            return Ok(s.clone());
        }
        let sent = Instant::now();
        let granted = grant(self.ttl.as_secs() as i64).await?;
        let session = Arc::new(self.start(sent, granted)?);
        self.granted_secs
            .store(session.ttl.as_secs(), Ordering::Relaxed);
        *current = Some(session.clone());
        Ok(session)
    }

    /// The session of the lease `granted`, asked for at `sent`.
    fn start(&self, sent: Instant, granted: LeaseGrantResponse) -> Result<Session> {
        if granted.ttl() <= 0 {
            return Err(Error::new(
                ErrorKind::Backend,
                format!("etcd granted a lease of {} s", granted.ttl()),
            )
            .with_backend(NAME));
        }
        let ttl = Duration::from_secs(granted.ttl() as u64);
        let (over_tx, over) = watch::channel(false);
        let (until_tx, valid_until) = watch::channel(sent + ttl);
        let held = Arc::new(Watched::default());
        let task = tokio::spawn(keep_alive(
            self.client.clone(),
            granted.id(),
            ttl,
            until_tx,
            over_tx,
            held.clone(),
        ));
        Ok(Session {
            id: granted.id(),
            ttl,
            over,
            valid_until,
            keep_alive: task.abort_handle(),
            held,
        })
    }

    /// Ends the current session: revokes its lease, which deletes every key of this client's
    /// locks at once (a clean shutdown frees the locks without waiting for the TTL).
    /// The sessions of short leases end with it.
    pub(super) async fn end(&self) -> Result<()> {
        let mut ending: Vec<Arc<Session>> =
            self.short.lock().await.drain().map(|(_, s)| s).collect();
        ending.extend(self.current.lock().await.take());
        for session in ending {
            let revoked = self.client.lease_client().revoke(session.id).await;
            session.keep_alive.abort();
            match revoked {
                Ok(_) => {}
                // Already gone: its keys went with it.
                Err(e) if e.to_string().contains("lease not found") => {}
                Err(e) => return Err(from_etcd("ending the session (revoking its lease)")(e)),
            }
        }
        Ok(())
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        // Best effort: a client dropped without shutdown still frees its locks now rather than
        // after the TTL, when a runtime is there to send the revoke.
        let mut ending: Vec<Arc<Session>> = self.short.get_mut().drain().map(|(_, s)| s).collect();
        ending.extend(self.current.get_mut().take());
        if ending.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let mut leases = self.client.lease_client();
            rt.spawn(async move {
                for session in ending {
                    let _ = tokio::time::timeout(Duration::from_secs(2), leases.revoke(session.id))
                        .await;
                }
            });
        }
    }
}

/// Keeps lease `id` alive: a keep-alive every third of the TTL; a failed one is tried again until
/// the lease, counted from the send time of the last answered keep-alive, has run out. Then, or
/// when etcd says the lease is gone, the session is over.
async fn keep_alive(
    client: Client,
    id: i64,
    ttl: Duration,
    confirmed: watch::Sender<Instant>,
    over: watch::Sender<bool>,
    held: Arc<Watched>,
) {
    let mut valid_until = *confirmed.borrow();
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut next = valid_until - ttl + ttl / 3;
    let mut reading: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        if sent >= valid_until {
            break;
        }
        // The read goes beside the keep-alive, never in its way: a read stuck in a fault must not
        // hold back the keep-alive's retries. One at a time; a read that failed is not known
        // this time and is asked again at the next keep-alive.
        if reading.as_ref().is_none_or(|r| r.is_finished()) {
            let (client, held) = (client.clone(), held.clone());
            reading = Some(tokio::spawn(async move {
                let keys = held.to_check();
                if let Ok(Ok(now)) = tokio::time::timeout(ttl, read_keys(&client, &keys)).await {
                    held.found(&keys, &now);
                }
            }));
        }
        match tokio::time::timeout(valid_until - sent, renew(&client, id, &mut stream)).await {
            Ok(Ok(true)) => {
                valid_until = sent + ttl;
                confirmed.send_replace(valid_until);
                next = sent + ttl / 3;
            }
            Ok(Ok(false)) => break,
            Ok(Err(e)) => {
                tracing::debug!(lease = id, error = %e, "etcd keep-alive failed; trying again");
                stream = None;
                next = Instant::now() + RETRY;
            }
            Err(_) => {
                stream = None;
                next = Instant::now();
            }
        }
    }
    if let Some(reading) = reading {
        reading.abort();
    }
    // Best effort: the keys go now rather than when etcd expires the lease by its own clock.
    let _ = over.send(true);
    let _ = tokio::time::timeout(ttl, client.lease_client().revoke(id)).await;
}

/// Each key's create revision now (`None`: gone), in transactions of at most 128 reads (etcd's
/// default limit of operations per transaction). No request when there is no key.
async fn read_keys(
    client: &Client,
    keys: &[(String, i64)],
) -> std::result::Result<Vec<Option<i64>>, etcd_client::Error> {
    let mut now = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(128) {
        let reads: Vec<TxnOp> = chunk
            .iter()
            .map(|(key, _)| TxnOp::get(key.as_str(), None))
            .collect();
        let answer = client.kv_client().txn(Txn::new().and_then(reads)).await?;
        for op in answer.op_responses() {
            now.push(match op {
                TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
                _ => None,
            });
        }
    }
    Ok(now)
}

/// One keep-alive: `Ok(true)` renewed, `Ok(false)` the lease is gone.
async fn renew(
    client: &Client,
    id: i64,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> std::result::Result<bool, etcd_client::Error> {
    let Some((keeper, answers)) = stream.as_mut() else {
        // Opening the stream sends the first keep-alive and reads its answer.
        return match client.lease_client().keep_alive(id).await {
            Ok(opened) => {
                *stream = Some(opened);
                Ok(true)
            }
            Err(etcd_client::Error::LeaseKeepAliveError(e)) if e.contains("not found") => Ok(false),
            Err(e) => Err(e),
        };
    };
    keeper.keep_alive().await?;
    match answers.message().await? {
        Some(answer) => Ok(answer.ttl() > 0),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "the keep-alive stream ended".into(),
        )),
    }
}

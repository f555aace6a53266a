//! Leader election: [`Election`], [`Leadership`], [`Leader`].
//!
//! Written once over the lock and a small record in the store, so every backend that keeps
//! election records ([`Backend::elections`]) has it with the same meaning:
//!
//! * leadership **is** holding the election's lock (exclusive, leased, renewed by the watchdog,
//!   with its lost signal); the **term** is that holding's fencing token, so terms strictly
//!   increase and a resource can fence a deposed leader with it;
//! * the leader writes a **record** (value, term) fenced by the term: the store refuses a write
//!   whose term is below the largest it has seen, so a deposed leader can never overwrite its
//!   successor. The record is live for one lease and the leader refreshes it every third of a
//!   lease, so a crashed leader's record lapses with its lock;
//! * every change of the record is an entry in a short log in the store (the last
//!   [`ELECTION_LOG_KEEP`](crate::backend::ELECTION_LOG_KEEP)), which is what
//!   [`Election::observe`] reads: an observer sees every term, in order, even when several
//!   hand-overs happen between two of its reads. It reads when the store notifies (Redis
//!   pub/sub, PostgreSQL `LISTEN`, SQLite's inotify on its sidecar file, ZooKeeper and etcd
//!   watches) and, under that, on a
//!   timer; MariaDB/MySQL cannot notify, so there it polls with a jittered backoff of 10 to
//!   250 ms.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;

use tracing::Instrument;

use crate::backend::{Backend, ElectionEntry, ElectionWrite, Elections};
use crate::client::{Client, elections};
use crate::core::changes::Changes;
use crate::core::deadline::Deadline;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::Guard;
use crate::types::{FencingToken, Lease, LockName};

/// What the election's lock is called in the store: the election's name behind this prefix.
pub const ELECTION_LOCK_PREFIX: &str = "distlock-election:";

/// The longest value a leader may proclaim, in bytes.
pub const MAX_VALUE_LEN: usize = 64 * 1024;

/// The lease of an election's lock (and its record) unless [`Election::lease`] says otherwise.
pub const DEFAULT_ELECTION_LEASE: Duration = Duration::from_secs(10);

/// A leader as seen in the store: what it proclaimed, in which term (with the `serde` feature:
/// `{"value": …, "term": N}`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[non_exhaustive]
pub struct Leader {
    /// What the leader proclaimed (an address, an instance id, …).
    pub value: String,
    /// Its term: the fencing token of its hold of the election's lock. Larger for every new
    /// leader.
    pub term: FencingToken,
}

impl fmt::Display for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (term {})", self.value, self.term)
    }
}

/// One leader election, by name. Made by [`Client::election`]; nothing is sent to the store
/// until it is used.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// # async fn lead(_term: u64) -> distlock::Result<()> { Ok(()) }
/// let election = client.election("scheduler");
/// let leadership = election.campaign("node-a:8080").await?; // waits to become leader
///
/// // Any client can follow the leaders without campaigning (the current one comes first):
/// use futures_util::StreamExt;
/// let mut leaders = Box::pin(client.election("scheduler").observe().await?);
/// if let Some(leader) = leaders.next().await {
///     println!("leader: {}", leader?);                        // node-a:8080 (term …)
/// }
///
/// tokio::select! {
///     done = lead(leadership.term().get()) => done?,          // fence writes with the term
///     lost = leadership.lost() => return Err(lost),           // deposed: stop leading now
/// }
/// leadership.resign().await?;                                 // hand over at once
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    client: Client,
    name: String,
    lease: Duration,
    /// Whether [`lease`](Election::lease) set it: only then is it the lock's lease as set (see
    /// [`crate::Lock::lease`]: a store that cannot keep it refuses it).
    lease_set: bool,
}

impl Election {
    pub(crate) fn new(client: Client, name: &str) -> Self {
        Election {
            client,
            name: name.to_string(),
            lease: DEFAULT_ELECTION_LEASE,
            lease_set: false,
        }
    }

    /// The lease of the election's lock and record: how long a crashed or paused leader stays
    /// leader (10 s by default; 10 ms ..= 24 h, checked when used). The leader renews both every
    /// third of it. A store whose holdings are sessions refuses a lease it cannot keep, as
    /// [`crate::Lock::lease`] says; the default is never refused.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self.lease_set = true;
        self
    }

    /// The election's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store's election records and this election's record name, checked (the store first:
    /// on a store without elections every call answers that, whatever the name).
    fn record(&self) -> Result<(&dyn Elections, LockName)> {
        let records = elections(self.client.backend().as_ref())?;
        let record = LockName::new(&self.name).map_err(|e| {
            Error::new(
                ErrorKind::InvalidName,
                format!("election name: {}", e.message()),
            )
        })?;
        Ok((records, record))
    }

    /// Waits as long as it takes to become leader, then proclaims `value` and returns the
    /// leadership. Campaigners are served in no particular order.
    ///
    /// Errors: [`ErrorKind::Unsupported`] on a backend without elections,
    /// [`ErrorKind::InvalidName`] / [`ErrorKind::InvalidInput`] / [`ErrorKind::InvalidLease`]
    /// for a bad name, value or lease, store errors otherwise.
    ///
    /// # Cancel Safety
    ///
    /// Cancel-safe: dropping the future leaves no leader behind. A lock taken just before is
    /// released in the background; a record written just before lapses after one lease (or
    /// sooner, when the next leader writes its own).
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership> {
        self.campaign_until(value.into(), None).await
    }

    /// [`campaign`](Election::campaign), waiting at most `wait`: [`ErrorKind::Timeout`] after.
    ///
    /// # Cancel Safety
    ///
    /// As [`campaign`](Election::campaign).
    pub async fn campaign_timeout(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Leadership> {
        self.campaign_until(value.into(), Some(wait)).await
    }

    async fn campaign_until(&self, value: String, wait: Option<Duration>) -> Result<Leadership> {
        let span = tracing::debug_span!(
            "distlock.campaign",
            backend = self.client.backend_name(),
            election = %self.name,
            term = tracing::field::Empty,
        );
        let led = self
            .run_campaign(value, wait)
            .instrument(span.clone())
            .await;
        if let Ok(leadership) = &led {
            span.record("term", leadership.term.get());
        }
        led
    }

    async fn run_campaign(&self, value: String, wait: Option<Duration>) -> Result<Leadership> {
        let (records, record) = self.record()?;
        check_value(&value)?;
        let lease = Lease::new(self.lease)?;
        let lock = self
            .client
            .lock(format!("{ELECTION_LOCK_PREFIX}{}", self.name));
        let lock = if self.lease_set {
            lock.lease(self.lease)
        } else {
            lock.default_lease(self.lease)
        };
        let deadline = Deadline::within(wait);
        let backend = self.client.backend().clone();
        let (guard, term) = loop {
            let taken = match lock.take_until(deadline).await {
                // The store answered no attempt in time: not leader within the wait either.
                Err(e) if e.is_timeout() => None,
                taken => taken?,
            };
            let Some(guard) = taken else {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "election {:?}: not leader after {}",
                        self.name,
                        crate::types::show_duration(wait.unwrap_or_default())
                    ),
                ));
            };
            let term = guard.fencing_token();
            // The guard drops (and releases in the background) on every error below.
            if records
                .elect_write(ElectionWrite::new(
                    &record,
                    term,
                    Some(&value),
                    lease.duration(),
                ))
                .await?
            {
                break (guard, term);
            }
            // A newer term is in the record. If our lease ran out before the write (a pause, a
            // starved process), a newer leader took the lock and wrote it: this campaign lost
            // the race and campaigns again. A lease still ours means the lock's counter went
            // backwards under the record (a store reset): that is an error, not a turn.
            if !guard.is_lost() {
                return Err(Error::new(
                    ErrorKind::StaleToken,
                    format!(
                        "election {:?}: the store holds a term above {term}, the lock's newest \
                         fencing token (was the lock's counter reset?)",
                        self.name
                    ),
                )
                .with_backend(backend.name()));
            }
            tracing::debug!(election = %record, %term, "the lock's lease ended before the record was written; campaigning again");
        };
        let value = Arc::new(Mutex::new(value));
        let writes = Arc::new(tokio::sync::Mutex::new(()));
        let refresher = tokio::spawn(refresh(
            backend.clone(),
            record.clone(),
            term,
            value.clone(),
            writes.clone(),
            lease.duration(),
            guard.lost(),
        ));
        Ok(Leadership {
            client: self.client.clone(),
            record,
            guard: Some(guard),
            term,
            value,
            writes,
            lease: lease.duration(),
            refresher: refresher.abort_handle(),
        })
    }

    /// The current leader, if any: the latest record when it has a value and has not lapsed (its
    /// leader resigned, or stopped refreshing it for a lease: crashed, paused, cut off).
    ///
    /// ```
    /// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
    /// # async fn main() -> distlock::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
    /// match client.election("scheduler").leader().await? {
    ///     Some(leader) => println!("{} leads in term {}", leader.value, leader.term),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let span = tracing::debug_span!(
            "distlock.leader",
            backend = self.client.backend_name(),
            election = %self.name,
        );
        async {
            let (records, record) = self.record()?;
            let entry = records.elect_current(&record).await?;
            Ok(entry.and_then(leader_of))
        }
        .instrument(span)
        .await
    }

    /// Starts following the election: once this returns, the observer listens to the store and
    /// has read where the election stands, and the stream yields every leader from then on, in
    /// term order: first the current one (if any), then each new leader, and each new value a
    /// leader proclaims. No campaign needed. The stream never ends; a store error is an `Err`
    /// item, after which it goes on trying. (Starting here, not at the stream's first poll, is
    /// what makes "from then on" a moment the caller knows: a leader elected after this returns
    /// is never missed.)
    ///
    /// An observer further behind than the store's log keeps
    /// ([`ELECTION_LOG_KEEP`](crate::backend::ELECTION_LOG_KEEP) entries) misses the oldest
    /// of the terms it had not read yet.
    ///
    /// Errors: a bad election name ([`ErrorKind::InvalidName`]), a backend without elections
    /// ([`ErrorKind::Unsupported`]), or the store's error while starting.
    pub async fn observe(&self) -> Result<impl Stream<Item = Result<Leader>> + Send + 'static> {
        let (records, record) = self.record()?;
        let backend = self.client.backend().clone();
        let span = tracing::debug_span!(
            "distlock.observe",
            backend = backend.name(),
            election = %self.name,
        );
        // Listen first, then read: a change between the two is not missed.
        let (wakeups, latest) = async {
            let wakeups = records.watch_election(&record).await?;
            let latest = records.elect_log(&record, None).await?;
            Ok::<_, Error>((wakeups, latest))
        }
        .instrument(span)
        .await?;
        let changes = Changes::new(wakeups, backend.capabilities().notifies);
        let after = latest.last().map_or(0, |e| e.seq);
        let mut state = Observer {
            backend,
            record,
            changes,
            after,
            last: None,
            ready: std::collections::VecDeque::new(),
        };
        if let Some(current) = records.elect_current(&state.record).await?
            && current.seq == after
        {
            state.note(current);
        }
        Ok(futures_util::stream::unfold(
            state,
            |mut state| async move {
                let item = state.next().await;
                Some((item, state))
            },
        ))
    }
}

fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "a leader's value is at most {MAX_VALUE_LEN} bytes, this one has {}",
                value.len()
            ),
        ));
    }
    if value.contains('\0') {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "a leader's value cannot contain NUL characters",
        ));
    }
    Ok(())
}

fn leader_of(entry: ElectionEntry) -> Option<Leader> {
    entry.value.map(|value| Leader {
        value,
        term: entry.term,
    })
}

/// Keeps the record live while the leadership lasts: every third of the lease, the same fenced
/// write (which appends nothing when the value is unchanged). Ends when the leadership is lost
/// or the store has a newer term; a failed refresh is tried again at the next one (the lock's
/// own watchdog decides whether leadership is lost). Each write holds the leadership's write
/// gate, so a refresh never lands between (or after) a proclaim's or resign's write with a
/// value read before it.
async fn refresh(
    backend: Arc<dyn Backend>,
    record: LockName,
    term: FencingToken,
    value: Arc<Mutex<String>>,
    writes: Arc<tokio::sync::Mutex<()>>,
    lease: Duration,
    lost: impl Future<Output = Error> + Send + 'static,
) {
    let every = lease / 3;
    // The campaign checked the store keeps elections.
    let Ok(elections) = elections(&*backend) else {
        return;
    };
    let refreshing = async {
        loop {
            tokio::time::sleep(every).await;
            let _gate = writes.lock().await;
            let current = value.lock().unwrap_or_else(|p| p.into_inner()).clone();
            match elections
                .elect_write(ElectionWrite::new(&record, term, Some(&current), lease))
                .await
            {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => tracing::debug!(election = %record, "refreshing the record failed: {e}"),
            }
        }
    };
    tokio::select! {
        () = refreshing => {}
        _ = lost => {}
    }
}

/// Being the leader of an election: the term, the lost signal, proclaim and resign.
///
/// Dropping it without [`resign`](Leadership::resign) resigns in the background (as a dropped
/// [`Guard`] releases): queued on the runtime, not immediate, and if the runtime is gone the
/// record lapses and the lock frees within one lease.
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> distlock::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let client = distlock::connect(&format!("sqlite:{}", dir.path().join("locks.db").display())).await?;
/// use distlock::ErrorKind;
///
/// let leadership = client.election("primary").campaign("db-1:5432").await?;
/// // Fence every write of the leader with its term: a deposed leader's writes are refused.
/// let term = leadership.term();
/// match leadership.proclaim("db-1:6432").await {
///     Ok(()) => {}                                              // observers see the new value
///     Err(e) if e.kind() == ErrorKind::StaleToken => { /* a newer leader was elected */ }
///     Err(e) => return Err(e),
/// }
/// if !leadership.resign().await? {
///     // the leadership had been lost before the resign: another leader may have overlapped
/// }
/// # let _ = term;
/// # Ok(()) }
/// ```
#[must_use = "dropping a leadership gives it up"]
pub struct Leadership {
    client: Client,
    record: LockName,
    guard: Option<Guard>,
    term: FencingToken,
    value: Arc<Mutex<String>>,
    /// Held across each write of the record (refresh, proclaim, resign), so they reach the store
    /// one after another, in the order they were made.
    writes: Arc<tokio::sync::Mutex<()>>,
    lease: Duration,
    refresher: tokio::task::AbortHandle,
}

impl Leadership {
    /// The term: this leadership's fencing token, larger than every earlier leader's.
    pub fn term(&self) -> FencingToken {
        self.term
    }

    /// The value last proclaimed.
    pub fn value(&self) -> String {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Resolves (with an [`ErrorKind::LeaseLost`] error) once this leadership is lost: the
    /// election's lock was lost (see [`Guard::lost`]). Race it against the leader's work.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        match &self.guard {
            Some(guard) => futures_util::future::Either::Left(guard.lost()),
            None => futures_util::future::Either::Right(std::future::ready(Error::new(
                ErrorKind::LeaseLost,
                "the leadership was resigned",
            ))),
        }
    }

    /// True once the leadership is lost (checked against the clock on every call).
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(Guard::is_lost)
    }

    /// Proclaims a new value in the same term (observers see it). [`ErrorKind::LeaseLost`] if
    /// the leadership is already lost; [`ErrorKind::StaleToken`] if the store holds a newer term
    /// (another leader was elected since).
    ///
    /// # Cancel Safety
    ///
    /// If dropped before the store answers, the new value may or may not have been written.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let span = tracing::debug_span!(
            "distlock.proclaim",
            backend = self.client.backend_name(),
            election = %self.record,
            term = self.term.get(),
        );
        self.write_value(value.into()).instrument(span).await
    }

    async fn write_value(&self, value: String) -> Result<()> {
        check_value(&value)?;
        if self.is_lost() {
            return Err(Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "election {:?}: term {} is over, nothing proclaimed",
                    self.record, self.term
                ),
            ));
        }
        let backend = self.client.backend();
        let _gate = self.writes.lock().await;
        match elections(backend.as_ref())?
            .elect_write(ElectionWrite::new(
                &self.record,
                self.term,
                Some(&value),
                self.lease,
            ))
            .await?
        {
            true => {
                *self.value.lock().unwrap_or_else(|p| p.into_inner()) = value;
                Ok(())
            }
            false => Err(stale(&self.record, self.term, backend.name())),
        }
    }

    /// Gives the leadership up: ends the term in the record (observers and
    /// [`Election::leader`] see no leader until the next one writes) and releases the lock, so a
    /// campaigner takes over at once. `Ok(true)` if this was still the leadership; `Ok(false)` if
    /// it had been lost already (nothing of a newer leader is touched).
    ///
    /// # Cancel Safety
    ///
    /// If dropped before it finishes, the lock is released in the background.
    pub async fn resign(self) -> Result<bool> {
        let span = tracing::debug_span!(
            "distlock.resign",
            backend = self.client.backend_name(),
            election = %self.record,
            term = self.term.get(),
        );
        self.step_down().instrument(span).await
    }

    async fn step_down(mut self) -> Result<bool> {
        self.refresher.abort();
        let Some(guard) = self.guard.take() else {
            return Ok(false);
        };
        // The record first: the lock is still ours, so no newer term can have been written
        // unless our lease ended, and then the fenced write refuses. Behind the gate, so a
        // refresh already sent lands before, not after, the end of the term.
        let gate = self.writes.clone();
        let gate = gate.lock().await;
        let cleared = async {
            elections(self.client.backend().as_ref())?
                .elect_write(ElectionWrite::new(
                    &self.record,
                    self.term,
                    None,
                    self.lease,
                ))
                .await
        }
        .await;
        drop(gate);
        let held = guard.release().await?;
        Ok(cleared? && held)
    }
}

fn stale(record: &LockName, term: FencingToken, backend: &'static str) -> Error {
    Error::new(
        ErrorKind::StaleToken,
        format!("election {record:?}: a newer term than {term} was written; not leader any more"),
    )
    .with_backend(backend)
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.refresher.abort();
        let Some(guard) = self.guard.take() else {
            return;
        };
        // As a resign, in the background (queued, not immediate; `Client::shutdown` waits for
        // it): end the term in the record, then release the lock. The write is fenced, so if a
        // newer leader was elected meanwhile it changes nothing.
        let backend = self.client.backend().clone();
        let (record, term, lease) = (self.record.clone(), self.term, self.lease);
        let writes = self.writes.clone();
        self.client.engine.spawn_detached(async move {
            let gate = writes.lock().await;
            let ended = async {
                elections(&*backend)?
                    .elect_write(ElectionWrite::new(&record, term, None, lease))
                    .await
            };
            if let Err(e) = ended.await {
                tracing::debug!(election = %record, "ending a dropped leadership's term failed (its record lapses): {e}");
            }
            drop(gate);
            if let Err(e) = guard.release().await {
                tracing::warn!(election = %record, "background release failed: {e}");
            }
        });
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.record)
            .field("term", &self.term)
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// The state behind [`Election::observe`].
struct Observer {
    backend: Arc<dyn Backend>,
    record: LockName,
    changes: Changes,
    /// The last log entry read.
    after: u64,
    /// The last leader emitted.
    last: Option<Leader>,
    ready: std::collections::VecDeque<Leader>,
}

impl Observer {
    async fn next(&mut self) -> Result<Leader> {
        loop {
            if let Some(leader) = self.ready.pop_front() {
                return Ok(leader);
            }
            self.changes.next().await;
            let entries = elections(&*self.backend)?
                .elect_log(&self.record, Some(self.after))
                .await?;
            if let Some(first) = entries.first()
                && first.seq > self.after + 1
            {
                tracing::warn!(
                    election = %self.record,
                    "observer fell behind the store's log: {} entries trimmed unread",
                    first.seq - self.after - 1
                );
            }
            if !entries.is_empty() {
                self.changes.reset();
            }
            for entry in entries {
                self.after = entry.seq;
                self.note(entry);
            }
        }
    }

    /// Queues `entry` if it shows a leader not emitted yet (a new term, or a new value in the
    /// last one).
    fn note(&mut self, entry: ElectionEntry) {
        let Some(leader) = leader_of(entry) else {
            return;
        };
        let new = match &self.last {
            None => true,
            Some(last) => {
                leader.term > last.term || (leader.term == last.term && leader.value != last.value)
            }
        };
        if new {
            self.last = Some(leader.clone());
            self.ready.push_back(leader);
        }
    }
}

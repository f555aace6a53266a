//! A held lease: how many guards share it, the watchdog that renews it, and the signal that says
//! it is gone.
//!
//! The guard's own clock decides first. Every renewal counts the lease from the moment its
//! request was *sent*, so "confirmed until" is never later than the store's expiry; once that
//! instant passes without a newer confirmation the holding is lost, whether or not the watchdog
//! has run since (a process paused past its lease learns it from the clock at once, not after a
//! round trip to the store). A confirmation that arrives after that instant is not taken: a
//! loss, once reported, stays reported.
//!
//! Renewal is the client's [`Renewals`] queue: every third of the validity the store last stated,
//! one renewal step ([`renew_once`]) that reports the next due time or the loss (the store says
//! the holding is no longer ours, or renewal kept failing until the lease ran out). Session
//! holds are not renewed; a small task reports their session's end.
//!
//! A lease means the same on every store ([`settle`]): a holder that stops renewing (crashed,
//! paused, no watchdog) blocks others at most that long, plus the store's granularity. On a
//! session store the session bounds a stopped holder, so a lease shorter than the session's
//! expiry is refused rather than taken and ignored; and a session hold without the watchdog
//! ends at its lease like any other: its guards lose it by the clock, and the same small task
//! frees it in the store then.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Backend, Capabilities, Hold, LeaseModel, LockRequest, Signal};
use crate::core::reentrancy::Slot;
use crate::core::renewals::{QueueKey, Renewals};
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::Labels;
use crate::types::{FencingToken, Lease, show_duration};

/// How a lock asks to be held.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Terms {
    /// The watchdog renews the holding.
    pub(crate) renew: bool,
    /// The caller set the lease ([`crate::Lock::lease`]); otherwise it is the default.
    pub(crate) lease_set: bool,
    /// How long after the take the watchdog stops renewing ([`crate::Lock::max_hold`]).
    pub(crate) max_hold: Option<Duration>,
}

/// Makes `req`'s lease one the store keeps as a lease means on every store — a holder that
/// stops renewing (crashed, paused, no watchdog) blocks others at most that long, plus the
/// store's granularity — or refuses it with [`ErrorKind::InvalidLease`]: never takes a lease
/// to ignore it.
///
/// * A per-lock lease shorter than the store's granularity is refused.
/// * On a session store a stopped holder keeps its locks until its session ends. Where the
///   store keeps short leases ([`Capabilities::short_leases`]) a lease shorter than the
///   session's expiry is held under a session of its own, refused only below the store's
///   granularity or its server's minimum (naming it). Otherwise a lease set
///   shorter than the session's expiry is refused (naming the expiry and what sets it); the
///   default lease is raised to the expiry when that is longer. Where the session is the
///   connection (no expiry: a paused holder keeps it open) a lease set and `no_watchdog` are
///   refused: nothing could end the holding of a paused holder by time.
pub(crate) fn settle(
    caps: &Capabilities,
    backend: &'static str,
    req: &mut LockRequest,
    terms: Terms,
) -> Result<()> {
    let lease = req.lease.duration();
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::InvalidLease,
            format!("lock {:?}: {why}", req.name.as_str()),
        )
        .with_backend(backend))
    };
    match caps.lease {
        LeaseModel::PerLock { granularity } if lease < granularity => refuse(format!(
            "a lease of {} is shorter than the {} the {backend} store can keep",
            show_duration(lease),
            show_duration(granularity),
        )),
        // Held under a session of its own that ends as the lease does, from the server's
        // minimum.
        LeaseModel::Session {
            expires_after: Some(expiry),
            ..
        } if lease < expiry && caps.short_leases.is_some() => {
            let short = caps.short_leases.expect("checked");
            if lease < short.granularity {
                refuse(format!(
                    "a lease of {} is shorter than the {} the {backend} store can keep",
                    show_duration(lease),
                    show_duration(short.granularity),
                ))
            } else if lease < short.minimum {
                refuse(format!(
                    "a lease of {} is shorter than the {} the {backend} server keeps at least \
                     ({}): ask for a lease of {} or more",
                    show_duration(lease),
                    show_duration(short.minimum),
                    short.why,
                    show_duration(short.minimum),
                ))
            } else {
                Ok(())
            }
        }
        LeaseModel::Session {
            expires_after: Some(expiry),
            explain,
        } if lease < expiry => {
            if terms.lease_set {
                return refuse(format!(
                    "a lease of {} is shorter than the {} a holder that stops (crashes, pauses) \
                     keeps its {backend} locks ({explain}): ask for a lease of {} or more, or \
                     for shorter sessions",
                    show_duration(lease),
                    show_duration(expiry),
                    show_duration(expiry),
                ));
            }
            // The default lease: no shorter than what a session keeps a stopped holder's locks.
            req.lease = Lease::new(expiry.min(Lease::MAX))?;
            Ok(())
        }
        LeaseModel::Session {
            expires_after: None,
            explain,
        } if terms.lease_set || !terms.renew => {
            let what = if terms.lease_set {
                format!("a lease ({})", show_duration(lease))
            } else {
                "no_watchdog (a holding that ends with its lease)".to_string()
            };
            refuse(format!(
                "{what} cannot be kept by {backend} session locks: {explain}"
            ))
        }
        _ => Ok(()),
    }
}

/// The lease closest to `wanted` that a store of `caps` keeps as a lease means everywhere (see
/// [`settle`]): rounded up to its granularity; on a session store, at least its sessions'
/// expiry. `None` where holdings end only with their connection, which keeps no lease.
pub(crate) fn keepable(caps: &Capabilities, wanted: Duration) -> Option<Duration> {
    match caps.lease {
        LeaseModel::PerLock { granularity } if !granularity.is_zero() => {
            Some(round_up(wanted, granularity))
        }
        LeaseModel::Session {
            expires_after: Some(expiry),
            ..
        } => match caps.short_leases {
            Some(short) if wanted < expiry => {
                Some(round_up(wanted.max(short.minimum), short.granularity))
            }
            _ => Some(wanted.max(expiry)),
        },
        LeaseModel::Session {
            expires_after: None,
            ..
        } => None,
        LeaseModel::PerLock { .. } => Some(wanted),
    }
}

/// `wanted` rounded up to a whole number of `step`s.
fn round_up(wanted: Duration, step: Duration) -> Duration {
    if step.is_zero() {
        return wanted;
    }
    let step = step.as_nanos();
    let rounded = wanted.as_nanos().div_ceil(step) * step;
    Duration::from_nanos(u64::try_from(rounded).unwrap_or(u64::MAX))
}

/// What a holding's guards can see of it.
#[derive(Clone, Debug, Default)]
struct LeaseState {
    /// The instant until which the store has confirmed the holding; `None` for session-based
    /// stores, whose holdings end only with the session.
    valid_until: Option<Instant>,
    /// The end of the lease of a session hold the watchdog does not renew: the holding ends
    /// then, whatever its session's confirmations say (a lease hold's `valid_until` is that
    /// already). Re-entry restarts it, as it restarts a lease.
    lease_ends: Option<Instant>,
    /// Why the holding was lost, once it was.
    lost: Option<Arc<str>>,
    /// The hold cap ([`crate::Lock::max_hold`]): from this instant on the holding is not
    /// renewed (a session hold ends here), so an end of the holding after it is the cap's.
    cap: Option<(Instant, Duration)>,
    /// Why the last renewal failed, if it did: the likely reason when the lease then runs out.
    renewal_error: Option<Arc<str>>,
    /// The labels of this holding's metrics (a loss is counted where it is marked).
    labels: Option<Arc<Labels>>,
}

impl LeaseState {
    fn is_lost(&self, now: Instant) -> bool {
        self.lost.is_some() || self.end().is_some_and(|end| now >= end)
    }

    /// When the holding ends by the clock: the earlier of its confirmed validity and its lease.
    fn end(&self) -> Option<Instant> {
        match (self.valid_until, self.lease_ends) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether it was the lease of an unrenewed session hold that ended it.
    fn lease_ended(&self, now: Instant) -> bool {
        self.lease_ends.is_some_and(|end| now >= end)
    }
}

/// One holding of one lock by one owner, shared by all reentrant guards of that owner in this
/// client.
pub(crate) struct HeldLease {
    pub(crate) req: LockRequest,
    pub(crate) token: FencingToken,
    state: Arc<watch::Sender<LeaseState>>,
    /// Guards standing for this holding. At zero the holding is over for this client.
    holds: AtomicU32,
    /// Whether the watchdog renews it.
    renewed: bool,
    /// The renewal queue, and this holding's place in it.
    renewals: Option<Arc<Renewals>>,
    renewal: Mutex<Option<QueueKey>>,
    /// The task that reports a session hold's end.
    session_watch: Mutex<Option<tokio::task::AbortHandle>>,
    /// Whether the holding is a session's (its end by the clock is the session's TTL).
    is_session: bool,
    /// Serialises this owner's takes and releases of the lock (see [`Slot`]).
    pub(crate) slot: Arc<Slot>,
    /// When it was taken, and whether its hold time was recorded (once, when it ends here).
    taken: Instant,
    hold_recorded: std::sync::atomic::AtomicBool,
    labels: Arc<Labels>,
}

impl HeldLease {
    /// A holding taken by a request sent at `sent`, with one hold: a lease hold's renewal is
    /// queued on `renewals` (unless `terms` turn renewal off), a session hold's session is
    /// watched; `terms`' max_hold caps either.
    pub(crate) fn start(
        backend: &Arc<dyn Backend>,
        renewals: &Arc<Renewals>,
        terms: Terms,
        req: LockRequest,
        token: FencingToken,
        (sent, hold): (Instant, Hold),
        slot: Arc<Slot>,
    ) -> Arc<Self> {
        let renewals = terms.renew.then_some(renewals);
        // A cap past what the clock represents is no cap.
        let cap = terms
            .max_hold
            .and_then(|max_hold| Some((sent.checked_add(max_hold)?, max_hold)));
        let (valid_until, session, first_renewal) = match hold {
            Hold::Lease { valid_for } => (Some(sent + valid_for), None, Some(sent + valid_for / 3)),
            Hold::Session { ended, valid_until } => (
                valid_until.as_ref().map(|until| *until.borrow()),
                Some((ended, valid_until)),
                None,
            ),
        };
        // Without the watchdog a session hold ends with its lease, as a lease hold does.
        let lease_ends =
            (session.is_some() && renewals.is_none()).then(|| sent + req.lease.duration());
        // A session hold is kept alive by its session, not renewed: the cap ends it in the
        // store itself, as an unrenewed hold's lease does.
        let lease_ends = match (session.is_some(), cap) {
            (true, Some((at, _))) => Some(lease_ends.map_or(at, |end| end.min(at))),
            _ => lease_ends,
        };
        let labels = Arc::new(Labels::of(backend.name(), &req.name));
        let state = Arc::new(watch::Sender::new(LeaseState {
            valid_until,
            lease_ends,
            cap,
            labels: Some(labels.clone()),
            ..LeaseState::default()
        }));
        let is_session = session.is_some();
        let session_watch = session.map(|(ended, until)| {
            tokio::spawn(watch_session(
                backend.clone(),
                req.clone(),
                token,
                ended,
                until,
                state.clone(),
            ))
            .abort_handle()
        });
        let renewals = renewals.filter(|_| first_renewal.is_some());
        let renewed = renewals.is_some();
        let lease = Arc::new(HeldLease {
            req,
            token,
            state,
            holds: AtomicU32::new(1),
            renewed,
            renewals: renewals.cloned(),
            renewal: Mutex::new(None),
            session_watch: Mutex::new(session_watch),
            is_session,
            slot,
            taken: sent,
            hold_recorded: std::sync::atomic::AtomicBool::new(false),
            labels,
        });
        if let (Some(renewals), Some(at)) = (renewals, first_renewal) {
            renewals.schedule(at, &lease);
        }
        lease
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.state.borrow().is_lost(Instant::now())
    }

    /// When the holding ends by the clock as things stand: the end of the last lease (or
    /// timed session) the store confirmed, or of an unrenewed session hold's lease. `None` for
    /// a holding that ends only with its connection.
    pub(crate) fn ends_at(&self) -> Option<Instant> {
        self.state.borrow().end()
    }

    /// Whether this is an unrenewed session hold whose lease has ended, and nothing else ended
    /// it: it may still be in the store, for this client to free.
    pub(crate) fn lease_ran_out(&self) -> bool {
        let s = self.state.borrow();
        s.lost.is_none() && s.lease_ended(Instant::now())
    }

    /// The lease is still ours by our own clock and some guard still stands for it.
    pub(crate) fn is_live(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0 && !self.is_lost()
    }

    /// The store confirmed the holding, valid for `valid_for` from `sent` (the request's send
    /// time). `false` (and the holding marked lost) if the confirmation came after the lease had
    /// already ended by our clock. An unrenewed session hold's lease restarts from `sent`.
    pub(crate) fn confirm(&self, sent: Instant, valid_for: Duration) -> bool {
        let confirmed = confirm(&self.state, sent, valid_for);
        if confirmed {
            let mut restarted = sent + self.req.lease.duration();
            if let Some((cap, _)) = self.state.borrow().cap {
                restarted = restarted.min(cap);
            }
            self.state
                .send_if_modified(|s| match s.lease_ends.as_mut() {
                    Some(end) if *end < restarted => {
                        *end = restarted;
                        true
                    }
                    _ => false,
                });
        }
        confirmed
    }

    /// Marks the holding lost for `why` (first reason wins).
    pub(crate) fn mark_lost(&self, why: &str) {
        mark_lost(&self.state, why);
    }

    /// One more guard stands for this holding.
    pub(crate) fn add_hold(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// The last guard goes without releasing ([`crate::Guard::leak`]): the holding stays in
    /// the store until its lease ends. For an unrenewed session hold that end is this client's
    /// doing, so the task that frees it then is left running.
    pub(crate) fn leak_hold(&self) {
        if self.holds.load(Ordering::Acquire) == 1 && self.state.borrow().lease_ends.is_some() {
            self.session_watch
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
        }
        self.drop_hold();
    }

    /// How many guards hold it now.
    pub(crate) fn holds(&self) -> u32 {
        self.holds.load(Ordering::Acquire)
    }

    /// One guard less; returns the guards left. At zero renewal stops.
    pub(crate) fn drop_hold(&self) -> u32 {
        let left = self.holds.fetch_sub(1, Ordering::AcqRel).saturating_sub(1);
        if left == 0 {
            self.stop();
        }
        left
    }

    /// Where the renewal queue keeps this holding now.
    pub(crate) fn set_renewal(&self, key: QueueKey) {
        *self.renewal.lock().unwrap_or_else(|p| p.into_inner()) = Some(key);
    }

    /// Nothing more to renew or watch: leaves the renewal queue, stops the session watch.
    fn stop(&self) {
        if !self.hold_recorded.swap(true, Ordering::AcqRel) {
            self.labels.held(self.taken.elapsed());
        }
        let queued = self
            .renewal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let (Some(renewals), Some(key)) = (&self.renewals, queued) {
            renewals.cancel(key);
        }
        self.stop_session_watch();
    }

    /// Whether the renewal queue should still renew it.
    pub(crate) fn wants_renewal(&self) -> bool {
        self.renewed && self.is_live()
    }

    fn stop_session_watch(&self) {
        let handle = self
            .session_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(h) = handle {
            h.abort();
        }
    }

    /// Resolves with a [`ErrorKind::LeaseLost`] error once the holding is lost: by the store's
    /// word, or by our clock passing the end of the last confirmed lease.
    pub(crate) fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let mut rx = self.state.subscribe();
        let name = self.req.name.clone();
        let lease = self.req.lease.duration();
        let renewed = self.renewed;
        let is_session = self.is_session;
        let ended = move |s: &LeaseState| {
            if let Some((_, max_hold)) = s.cap.filter(|(cap, _)| Instant::now() >= *cap) {
                format!(
                    "it was held for its max_hold of {}: renewal stopped there, and its lease \
                     ended",
                    show_duration(max_hold)
                )
            } else if is_session && !s.lease_ended(Instant::now()) {
                "its session was not kept alive past its TTL by this process's clock (was the \
                 process paused, or the store out of reach?)"
                    .to_string()
            } else {
                lease_ended(lease, renewed, s.renewal_error.as_deref())
            }
        };
        async move {
            let why = loop {
                let (lost, until) = {
                    let s = rx.borrow_and_update();
                    (s.lost.clone(), s.end())
                };
                if let Some(why) = lost {
                    break why.to_string();
                }
                // Past the end already (a process resuming from a pause): ready at once, not at
                // the timer's next tick.
                if until.is_some_and(|at| Instant::now() >= at) {
                    break ended(&rx.borrow());
                }
                let ends = async {
                    match until {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() {
                        break "the lock was released".to_string();
                    },
                    () = ends => {
                        let s = rx.borrow();
                        if s.is_lost(Instant::now()) {
                            break ended(&s);
                        }
                    }
                }
            };
            Error::new(ErrorKind::LeaseLost, format!("lock {name:?}: {why}"))
        }
    }
}

impl std::fmt::Debug for HeldLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLease")
            .field("name", &self.req.name)
            .field("token", &self.token)
            .field("holds", &self.holds.load(Ordering::Acquire))
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lease_ended(lease: Duration, renewed: bool, renewal_error: Option<&str>) -> String {
    let why = match renewal_error {
        _ if !renewed => "renewal is off".to_string(),
        Some(e) => format!("the last renewal failed: {e}"),
        None => "was the process paused?".to_string(),
    };
    format!(
        "its {} lease ended without a confirmed renewal ({why})",
        show_duration(lease)
    )
}

fn confirm(state: &watch::Sender<LeaseState>, sent: Instant, valid_for: Duration) -> bool {
    confirm_until(state, sent + valid_for)
}

/// The store confirmed the holding until `until`; see [`HeldLease::confirm`].
fn confirm_until(state: &watch::Sender<LeaseState>, confirmed: Instant) -> bool {
    let mut taken = false;
    state.send_if_modified(|s| {
        // Judged at the moment of the update: if a guard could already have seen the lease as
        // over, the confirmation is too late to count.
        if s.is_lost(Instant::now()) {
            return false;
        }
        if let Some(until) = s.valid_until.as_mut() {
            *until = (*until).max(confirmed);
        }
        taken = true;
        true
    });
    if !taken {
        mark_lost(
            state,
            "the store confirmed the lease only after it had ended by this process's clock",
        );
    }
    taken
}

fn mark_lost(state: &watch::Sender<LeaseState>, why: &str) {
    state.send_if_modified(|s| {
        if s.lost.is_some() {
            return false;
        }
        s.lost = Some(why.into());
        if let Some(labels) = &s.labels {
            labels.lost();
        }
        true
    });
}

/// Reports the end of a session hold's session, and for a session that ends by time moves the
/// holding's end on with each keep-alive the store confirmed. An unrenewed hold's lease ends
/// first if it comes first: the holding is then freed in the store (by its token, so a newer
/// holding of the same owner is never touched); its guards have lost it by the clock already.
async fn watch_session(
    backend: Arc<dyn Backend>,
    req: LockRequest,
    token: FencingToken,
    ended: Signal,
    valid_until: Option<watch::Receiver<Instant>>,
    state: Arc<watch::Sender<LeaseState>>,
) {
    let follow = async {
        if let Some(mut until) = valid_until {
            while until.changed().await.is_ok() {
                let confirmed = *until.borrow_and_update();
                if !confirm_until(&state, confirmed) {
                    break;
                }
            }
        }
        std::future::pending::<()>().await
    };
    let lease_ends = async {
        let mut changes = state.subscribe();
        loop {
            let Some(end) = changes.borrow_and_update().lease_ends else {
                return std::future::pending::<()>().await;
            };
            if Instant::now() >= end {
                return;
            }
            // Re-entry may restart the lease meanwhile: the end is read again on each change.
            tokio::select! {
                () = tokio::time::sleep_until(end) => {}
                changed = changes.changed() => if changed.is_err() {
                    return std::future::pending().await;
                },
            }
        }
    };
    let lease_ended = tokio::select! {
        () = ended => false,
        () = follow => false,
        () = lease_ends => true,
    };
    if lease_ended {
        match backend.release(&req, Some(token)).await {
            Ok(_) => {}
            // The session's end frees it anyway, within the session's expiry.
            Err(e) => {
                tracing::warn!(lock = %req.name, backend = backend.name(), "freeing a holding whose lease ended failed: {e}")
            }
        }
        return;
    }
    let backend = backend.name();
    let why = format!("the {backend} session holding the lock ended");
    tracing::warn!(lock = %req.name, backend, "{why}");
    mark_lost(&state, &why);
}

/// What one renewal step decided.
pub(crate) enum Renewed {
    /// Renew again at this instant.
    Next(Instant),
    /// The holding is lost (already marked).
    Lost,
    /// The holding reached its max_hold: it is not renewed again, and is lost by the clock when
    /// the lease last confirmed ends.
    Capped,
}

/// One renewal of `lease`: asks the store to restart it, at most until the lease ends, and says
/// when to renew next (a third of the new validity after this request was sent, or a quarter
/// period later after a failure that left time).
pub(crate) async fn renew_once(backend: &dyn Backend, lease: &HeldLease) -> Renewed {
    let sent = Instant::now();
    let until = match renewal_start(backend, lease, sent) {
        Ok(until) => until,
        Err(lost) => return lost,
    };
    let (req, token) = (&lease.req, lease.token);
    let span = tracing::debug_span!(
        "distlock.renew",
        backend = backend.name(),
        lock = %req.name,
        token = token.get(),
    );
    let extended = tokio::time::timeout_at(until, backend.extend(req, token)).instrument(span);
    let answer = extended.await.ok();
    renewal_end(backend, lease, sent, until, answer)
}

/// One renewal of each holding of `batch` in one call to the store
/// ([`Backend::extend_many`]); each is judged exactly as [`renew_once`] judges its own. The call
/// waits at most until the earliest of their leases ends: a holding whose lease ended by then
/// is lost, the others retry as after a failed renewal.
pub(crate) async fn renew_batch(
    backend: &dyn Backend,
    batch: Vec<Arc<HeldLease>>,
) -> Vec<(Arc<HeldLease>, Renewed)> {
    let sent = Instant::now();
    let mut done = Vec::with_capacity(batch.len());
    let mut asked = Vec::with_capacity(batch.len());
    for lease in batch {
        match renewal_start(backend, &lease, sent) {
            Ok(until) => asked.push((lease, until)),
            Err(lost) => done.push((lease, lost)),
        }
    }
    let Some(first_end) = asked.iter().map(|(_, until)| *until).min() else {
        return done;
    };
    let requests: Vec<(LockRequest, FencingToken)> = asked
        .iter()
        .map(|(lease, _)| (lease.req.clone(), lease.token))
        .collect();
    let span = tracing::debug_span!(
        "distlock.renew_batch",
        backend = backend.name(),
        locks = requests.len()
    );
    let answers = tokio::time::timeout_at(first_end, backend.extend_many(&requests))
        .instrument(span)
        .await;
    let mut answers = answers.map(Vec::into_iter).ok();
    for (lease, until) in asked {
        let answer = match answers.as_mut() {
            Some(answers) => Some(answers.next().unwrap_or_else(|| {
                Err(Error::new(
                    ErrorKind::Backend,
                    "the store answered fewer renewals than it was asked",
                )
                .with_backend(backend.name()))
            })),
            // Timed out at the earliest lease's end: later ones still have time to retry.
            None if Instant::now() < until => Some(Err(Error::new(
                ErrorKind::Timeout,
                "a batch of renewals got no answer before one of its leases ended",
            )
            .with_backend(backend.name()))),
            None => None,
        };
        let renewed = renewal_end(backend, &lease, sent, until, answer);
        done.push((lease, renewed));
    }
    done
}

/// Before a renewal sent at `sent`: the end of the lease as confirmed so far, or the loss if it
/// has ended already.
fn renewal_start(
    backend: &dyn Backend,
    lease: &HeldLease,
    sent: Instant,
) -> std::result::Result<Instant, Renewed> {
    let state = &lease.state;
    let Some(until) = state.borrow().valid_until else {
        return Err(Renewed::Lost);
    };
    if let Some((cap, _)) = state.borrow().cap
        && sent >= cap
    {
        // Held for its max_hold: no more renewals. The holding stays ours until the lease the
        // store last confirmed ends; the guards' lost signal fires then, by the clock.
        tracing::debug!(lock = %lease.req.name, "max_hold reached: renewal stops");
        return Err(Renewed::Capped);
    }
    if sent >= until {
        // Woken after the lease ended (the process was paused, say): the holding may be
        // someone else's by now. No question to the store can make it ours again.
        let error = state.borrow().renewal_error.clone();
        let why = lease_ended(lease.req.lease.duration(), true, error.as_deref());
        return Err(renewal_lost(backend, lease, why));
    }
    Ok(until)
}

fn renewal_lost(backend: &dyn Backend, lease: &HeldLease, why: String) -> Renewed {
    tracing::warn!(lock = %lease.req.name, backend = backend.name(), "lease lost: {why}");
    mark_lost(&lease.state, &why);
    Renewed::Lost
}

/// What the store answered a renewal sent at `sent` (`None`: nothing before the lease's end,
/// `until`) means for `lease`, and when to renew it next.
fn renewal_end(
    backend: &dyn Backend,
    lease: &HeldLease,
    sent: Instant,
    until: Instant,
    answer: Option<Result<Option<Duration>>>,
) -> Renewed {
    let (state, req) = (&lease.state, &lease.req);
    let lost = |why: String| renewal_lost(backend, lease, why);
    match &answer {
        Some(Ok(Some(_))) => lease.labels.renewed(),
        Some(Ok(None)) => {}
        Some(Err(_)) | None => lease.labels.renewal_failed(),
    }
    match answer {
        Some(Ok(Some(valid_for))) => {
            if !confirm(state, sent, valid_for) {
                return lost("the renewal was confirmed only after the lease had ended".into());
            }
            Renewed::Next(sent + valid_for / 3)
        }
        Some(Ok(None)) => lost("the store no longer lists this holding as the owner".into()),
        Some(Err(e)) if Instant::now() < until => {
            tracing::debug!(lock = %req.name, "renewal failed, retrying: {e}");
            let why = crate::error::chain(&e);
            state.send_modify(|s| s.renewal_error = Some(why.into()));
            let period = req.lease.duration() / 3;
            Renewed::Next(Instant::now() + (period / 4).max(Duration::from_millis(5)))
        }
        Some(Err(e)) => lost(format!(
            "renewal failed until the lease ended: {}",
            crate::error::chain(&e)
        )),
        None => lost("renewal got no answer before the lease ended".into()),
    }
}

#[cfg(test)]
mod short_lease_tests {
    use super::*;
    use crate::types::{LockKind, LockName, OwnerToken};

    /// A session store of 10 s sessions that keeps shorter leases in whole seconds from a 2 s
    /// server minimum (etcd's defaults).
    fn caps() -> Capabilities {
        Capabilities::sessions(Some(Duration::from_secs(10)), "?ttl= sets it").keeping_short_leases(
            Duration::from_secs(1),
            Duration::from_secs(2),
            "the why",
        )
    }

    fn settled(lease: Duration) -> Result<()> {
        let mut req = LockRequest::new(
            LockName::new("n")?,
            LockKind::Mutex,
            OwnerToken::random(),
            Lease::new(lease)?,
        );
        let terms = Terms {
            renew: true,
            lease_set: true,
            max_hold: None,
        };
        settle(&caps(), "etcd", &mut req, terms)
    }

    #[test]
    fn a_short_lease_is_taken_from_the_servers_minimum() {
        assert!(settled(Duration::from_secs(5)).is_ok());
        assert!(settled(Duration::from_secs(2)).is_ok());
        assert!(settled(Duration::from_secs(30)).is_ok());
        let below = settled(Duration::from_millis(1500)).unwrap_err();
        assert_eq!(below.kind(), ErrorKind::InvalidLease);
        let text = below.to_string();
        assert!(
            text.contains("1500ms") && text.contains("2s") && text.contains("the why"),
            "{text}"
        );
        let grain = settled(Duration::from_millis(500)).unwrap_err();
        assert!(grain.to_string().contains("1s"), "{grain}");
    }

    #[test]
    fn keepable_rounds_up_from_the_minimum() {
        let caps = caps();
        assert_eq!(
            keepable(&caps, Duration::from_millis(1)),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            keepable(&caps, Duration::from_millis(4500)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            keepable(&caps, Duration::from_secs(12)),
            Some(Duration::from_secs(12))
        );
    }
}

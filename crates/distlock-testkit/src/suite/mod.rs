//! The suite: one named test per (flavour, case), run against a real store.
//!
//! Cases live one behaviour per file. Each gets a [`Ctx`]: a connected client, the URL (for
//! child processes and second clients), the flavour under test, fresh lock names, and the
//! backend's fault hooks (a private store to restart, a way to end sessions).

mod bad_input;
mod cancel;
mod crash;
mod current_thread;
mod election;
mod exclusion;
mod exit;
mod fenced_holder;
mod fencing;
mod latch;
mod multi;
mod operations;
mod pause;
mod reentrancy;
mod release;
mod restart;
mod scoped;
mod semaphore_size;
mod session_end;
mod short_lease;
mod startup_check;
mod support;
mod timeouts;
mod waiting;
mod watchdog;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Lock, OwnerToken};
use libtest_mimic::{Arguments, Failed, Trial};

use crate::child::{CHILD_ENV, Spec, child_main};
use crate::flavour::SEMAPHORE;
pub use crate::flavour::{Flavour, with_lease};
use crate::servers::PrivateStore;
use crate::{Failure, Outcome};

type CaseFn = Arc<dyn Fn(Ctx) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync>;
type StartStore = Box<dyn Fn() -> Result<Box<dyn PrivateStore>, Failure> + Send + Sync>;
type EndSessions = Box<
    dyn Fn(String, Vec<u16>) -> Pin<Box<dyn Future<Output = Result<usize, Failure>> + Send>>
        + Send
        + Sync,
>;

/// What the backend's test file can do to its store, for the cases about store faults.
#[derive(Default)]
struct Faults {
    private_store: Option<StartStore>,
    end_sessions: Option<EndSessions>,
    /// How long a session store keeps a crashed client's session (its TTL); none: it ends
    /// with the connection.
    session_expiry: Option<Duration>,
}

/// What a case gets.
#[derive(Clone)]
pub struct Ctx {
    /// A client connected to the store.
    pub client: Client,
    /// The store's URL.
    pub url: String,
    /// The flavour under test.
    pub flavour: Flavour,
    /// A directory of this run for files the case shares with its children.
    pub dir: Arc<tempfile::TempDir>,
    case: String,
    faults: Arc<Faults>,
}

impl Ctx {
    /// A lease of about `wanted` that the store can keep ([`Client::keepable_lease`]); on a store that
    /// keeps none (session locks held as long as their connection), `wanted` itself, for the
    /// case's timing: its locks then take no lease ([`Ctx::leased`]).
    pub fn lease(&self, wanted: Duration) -> Duration {
        self.client.keepable_lease(wanted).unwrap_or(wanted)
    }

    /// `lock` with a lease of about `wanted` that the store can keep, or as it is on a store that
    /// keeps none ([`with_lease`]).
    pub fn leased(&self, lock: Lock, wanted: Duration) -> Lock {
        with_lease(&self.client, lock, wanted)
    }

    /// The election `name` with a lease of about `wanted` that the store can keep, or the
    /// default one on a store that keeps none.
    pub fn election(&self, name: &str, wanted: Duration) -> distlock::Election {
        let election = self.client.election(name);
        match self.client.keepable_lease(wanted) {
            Some(lease) => election.lease(lease),
            None => election,
        }
    }

    /// The lease an election of [`Ctx::election`] has: about `wanted`, or the default election
    /// lease on a store that keeps no lease.
    pub fn election_lease(&self, wanted: Duration) -> Duration {
        self.client
            .keepable_lease(wanted)
            .unwrap_or(distlock::election::DEFAULT_ELECTION_LEASE)
    }

    /// Whether a holding ends when its holder stops for long enough: a lease, or a session with
    /// an expiry ([`Suite::session_expiry`]); not a session that ends only with its connection.
    pub fn holdings_end_by_time(&self) -> bool {
        self.client.backend().capabilities().renews() || self.session_outlives_connection()
    }

    /// How long after its holder was killed a lock held with a lease of `lease` must be free:
    /// the lease and the store's lease resolution (memcached keeps expiries in whole seconds on
    /// a clock that ticks once a second, so a 1 s lease is stored as 2 s and ends 1–2 s after
    /// the last renewal), or for a session store the session's expiry when it has one.
    pub fn freed_after_crash_within(&self, lease: Duration) -> Duration {
        let caps = self.client.backend().capabilities();
        match caps.lease {
            // Where waiters judge leases (an object store), also the drift allowance.
            distlock::backend::LeaseModel::PerLock { granularity } => {
                lease + granularity + caps.drift_margin(lease)
            }
            _ => self
                .faults
                .session_expiry
                .map_or(lease, |ttl| ttl.max(lease)),
        }
    }

    /// Whether the store's sessions outlive a broken connection, ending only after a TTL
    /// ([`Suite::session_expiry`]).
    pub fn session_outlives_connection(&self) -> bool {
        self.faults.session_expiry.is_some()
    }

    /// A lock name no other case or run uses.
    pub fn unique_name(&self, what: &str) -> String {
        let token = OwnerToken::random();
        let salt = &token.as_str()[..12];
        format!(
            "conformance/{}/{}/{what}/{salt}",
            self.flavour.name, self.case
        )
    }

    /// The lock under test, named `name`.
    pub fn lock(&self, name: &str) -> Lock {
        (self.flavour.make)(&self.client, name)
    }

    /// A lock that competes with the one under test.
    pub fn contender(&self, name: &str) -> Lock {
        (self.flavour.contender)(&self.client, name)
    }

    /// A second, independent client of the same store.
    pub async fn connect(&self) -> Result<Client, crate::Failure> {
        Ok(distlock::connect(&self.url).await?)
    }

    /// A new private store of the kind the backend's test file gives
    /// ([`Suite::private_store`]), started. Blocks while it starts.
    pub fn private_store(&self) -> Result<Box<dyn PrivateStore>, Failure> {
        let start = self.faults.private_store.as_ref().ok_or_else(|| {
            Failure("the suite was given no private store (Suite::private_store)".into())
        })?;
        tokio::task::block_in_place(start)
    }

    /// Has the server at `url` end the sessions of this process's connections from
    /// `client_ports` ([`Suite::end_sessions`]); answers how many it ended.
    pub async fn end_sessions(&self, url: &str, client_ports: Vec<u16>) -> Result<usize, Failure> {
        let end = self.faults.end_sessions.as_ref().ok_or_else(|| {
            Failure("the suite was given no way to end sessions (Suite::end_sessions)".into())
        })?;
        end(url.to_string(), client_ports).await
    }

    /// The spec for a child process doing `role` with this flavour.
    pub fn spec(&self, role: crate::child::Role) -> Spec {
        Spec {
            url: self.url.clone(),
            flavour: self.flavour.name.to_string(),
            role,
        }
    }
}

/// The conformance suite for one backend.
pub struct Suite {
    backend: &'static str,
    server: &'static str,
    url: String,
    flavours: Vec<Flavour>,
    extra: Vec<(String, CaseFn)>,
    not_applicable: Vec<(&'static str, &'static str)>,
    faults: Faults,
}

/// The session TTL a store whose sessions have one (etcd) gives the clients of its private store
/// ([`Suite::private_store`]): longer than a restart, so the restart cases can tell "kept across
/// a restart" from "ended while the store was down".
pub const PRIVATE_SESSION_TTL: Duration = Duration::from_secs(8);

/// What a case needs beyond a store: read from the store ([`Probed`]), or from the hooks the
/// backend's test file gave.
#[derive(Clone, Copy, PartialEq)]
enum Need {
    /// Per-lock leases (lease expiry, renewal, pauses past the lease); not session holdings.
    Leases,
    /// Session holdings, which end with the holder's connection.
    Sessions,
    /// Holdings that end when their holder stops for long enough: leases, or sessions with an
    /// expiry ([`Suite::session_expiry`]).
    Expires,
    /// A private store to stop and start ([`Suite::private_store`]).
    PrivateStore,
    /// A way to end sessions from the server side ([`Suite::end_sessions`]).
    EndSessions,
    /// Leader election ([`distlock::Backend::elections`]).
    Elections,
    /// Count-down latches ([`distlock::Backend::latches`]).
    Latches,
    /// A store lacking elections or latches (the case checks the typed `Unsupported` errors).
    LacksElectionsOrLatches,
    /// Lock status and forced release ([`distlock::Backend::inspection`]).
    Inspects,
    /// A store without them (the case checks the typed `Unsupported` errors).
    LacksInspection,
    /// A session store that holds a lease shorter than its sessions under a session of its own
    /// ([`distlock::Capabilities::short_leases`]).
    ShortLeases,
    /// A store that does not (it refuses such a lease).
    NoShortLeases,
}

impl Need {
    /// Why a case with this need does not apply, if it does not.
    fn unmet(self, store: Option<Probed>, faults: &Faults) -> Option<&'static str> {
        // A store that cannot be reached gets its cases, and every case fails naming it.
        let renews = store.map(|s| s.capabilities.renews());
        match self {
            Need::Leases if renews == Some(false) => Some(
                "its holdings are sessions, not leases (no lease ends, a paused holder keeps \
                 its session, another client cannot free it)",
            ),
            Need::Expires if renews == Some(false) && faults.session_expiry.is_none() => Some(
                "its holdings are sessions that end with the connection, not with time (a \
                 paused holder keeps its session)",
            ),
            Need::Sessions if renews == Some(true) => {
                Some("its holdings are leases, not sessions (no connection carries a holding)")
            }
            Need::PrivateStore if faults.private_store.is_none() => Some(
                "its test file gives no private store to stop and start (Suite::private_store); \
                 a store without a server, such as an SQLite file, has nothing to restart",
            ),
            Need::EndSessions if faults.end_sessions.is_none() => Some(
                "its test file gives no way to end a session from the server side \
                 (Suite::end_sessions)",
            ),
            Need::Elections if store.is_some_and(|s| !s.elections) => Some(
                "SKIPPED, unsupported: this backend has no leader election yet \
                 (Backend::elections is None; unsupported_election_and_latch_are_typed \
                 checks that every call says so)",
            ),
            Need::Latches if store.is_some_and(|s| !s.latches) => Some(
                "SKIPPED, unsupported: this backend has no count-down latch yet \
                 (Backend::latches is None; unsupported_election_and_latch_are_typed \
                 checks that every call says so)",
            ),
            Need::LacksElectionsOrLatches if store.is_some_and(|s| s.elections && s.latches) => {
                Some("it supports both leader election and the count-down latch")
            }
            Need::Inspects if store.is_some_and(|s| !s.inspection) => Some(
                "SKIPPED, unsupported: this backend has no lock status or forced release yet \
                 (Backend::inspection is None; unsupported_status_is_typed checks that \
                 both calls say so)",
            ),
            Need::LacksInspection if store.is_some_and(|s| s.inspection) => {
                Some("it has lock status and forced release")
            }
            Need::ShortLeases if store.is_some_and(|s| s.capabilities.short_leases.is_none()) => {
                Some("it keeps no lease shorter than its sessions under a session of its own")
            }
            Need::NoShortLeases if store.is_some_and(|s| s.capabilities.short_leases.is_some()) => {
                Some(
                    "it holds a lease shorter than its sessions under a session of its own \
                     (short_lease_* check it)",
                )
            }
            _ => None,
        }
    }
}

/// Which flavours a case runs with.
#[derive(Clone, Copy, PartialEq)]
enum Runs {
    /// Every flavour.
    Each,
    /// Flavours whose holders exclude each other.
    EachExclusive,
    /// Once, with the first flavour: the case does not depend on the flavour.
    Once,
    /// Once, with the semaphore flavour (`semaphore1`): on every store that has semaphores.
    Semaphore,
}

/// Every case of the suite.
fn cases() -> Vec<(&'static str, Runs, &'static [Need], CaseFn)> {
    use Runs::{Each, EachExclusive, Once, Semaphore};
    const ANY: &[Need] = &[];
    const LEASES: &[Need] = &[Need::Leases];
    fn case<F, Fut>(f: F) -> CaseFn
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        Arc::new(move |ctx| Box::pin(f(ctx)))
    }
    vec![
        (
            "exclusion_across_processes",
            EachExclusive,
            ANY,
            case(exclusion::across_processes),
        ),
        (
            "exclusion_between_tasks",
            EachExclusive,
            ANY,
            case(exclusion::between_tasks),
        ),
        (
            "try_acquire_on_held_is_none",
            Each,
            ANY,
            case(timeouts::try_acquire_on_held_is_none),
        ),
        (
            "acquire_timeout_times_out",
            Each,
            ANY,
            case(timeouts::acquire_timeout_times_out),
        ),
        (
            "release_by_other_is_not_held",
            Each,
            ANY,
            case(release::by_other_is_not_held),
        ),
        (
            "double_release_keeps_next_holder",
            Each,
            ANY,
            case(release::double_release_keeps_next_holder),
        ),
        (
            "dropped_guard_releases",
            Each,
            ANY,
            case(release::dropped_guard_releases),
        ),
        (
            "dropped_guard_freed_before_exit",
            Each,
            ANY,
            case(exit::dropped_guard_freed_before_exit),
        ),
        (
            "current_thread_dropped_guard_frees_at_once",
            Each,
            LEASES,
            case(current_thread::dropped_guard_frees_at_once),
        ),
        (
            "current_thread_main_frees_before_exit",
            Each,
            LEASES,
            case(current_thread::current_thread_main_frees_before_exit),
        ),
        (
            "run_holds_then_frees",
            Each,
            ANY,
            case(scoped::run_holds_then_frees),
        ),
        (
            "run_stops_work_when_lost",
            Each,
            LEASES,
            case(scoped::run_stops_work_when_lost),
        ),
        (
            "crashed_holder_frees_within_lease",
            Each,
            ANY,
            case(crash::killed_holder_frees_within_lease),
        ),
        (
            "short_lease_killed_holder_frees_within_it",
            Once,
            &[Need::Expires],
            case(short_lease::killed_holder_frees_within_short_lease),
        ),
        (
            "short_lease_below_server_minimum_is_refused",
            Once,
            &[Need::ShortLeases],
            case(short_lease::below_server_minimum_is_refused),
        ),
        (
            "watchdog_keeps_lock_past_lease",
            Each,
            ANY,
            case(watchdog::keeps_lock_past_lease),
        ),
        (
            "no_watchdog_lease_ends",
            Each,
            ANY,
            case(watchdog::no_watchdog_lease_ends),
        ),
        (
            "lease_shorter_than_session_is_refused",
            Each,
            &[Need::Sessions, Need::NoShortLeases],
            case(watchdog::lease_shorter_than_session_is_refused),
        ),
        (
            "paused_holder_is_fenced",
            Each,
            &[Need::Expires],
            case(pause::paused_holder_is_fenced),
        ),
        (
            "resumed_holder_knows_at_once",
            Each,
            &[Need::Expires],
            case(pause::resumed_holder_knows_at_once),
        ),
        (
            "stale_guard_keeps_newer_holding",
            Each,
            LEASES,
            case(watchdog::stale_guard_keeps_newer_holding),
        ),
        (
            "stale_holding_untouched_in_store",
            Each,
            LEASES,
            case(release::stale_holding_untouched_in_store),
        ),
        (
            "stale_reentrant_holds_report_not_held",
            Each,
            ANY,
            case(release::stale_reentrant_holds_report_not_held),
        ),
        (
            "old_guard_after_retake_is_inert",
            Each,
            ANY,
            case(release::old_guard_after_retake_is_inert),
        ),
        (
            "reenter_after_lease_end_is_lost",
            Each,
            LEASES,
            case(watchdog::reenter_after_lease_end_is_lost),
        ),
        (
            "huge_waits_wait_forever",
            Each,
            ANY,
            case(timeouts::huge_waits_wait_forever),
        ),
        (
            "max_hold_caps_a_live_holder",
            Once,
            ANY,
            case(watchdog::max_hold_caps_a_live_holder),
        ),
        (
            "reentrancy_counts_holds",
            Each,
            ANY,
            case(reentrancy::counts_holds),
        ),
        (
            "fencing_tokens_increase_across_processes",
            EachExclusive,
            ANY,
            case(fencing::increase_across_processes),
        ),
        (
            "cancelled_acquire_leaves_nothing_held",
            Each,
            ANY,
            case(cancel::cancelled_acquire_leaves_nothing_held),
        ),
        (
            "cancelled_release_still_frees",
            Each,
            ANY,
            case(cancel::cancelled_release_still_frees),
        ),
        (
            "cancelled_waiter_leaves_the_queue",
            Each,
            ANY,
            case(cancel::cancelled_waiter_leaves_the_queue),
        ),
        (
            "unsupported_flavours_are_typed",
            Once,
            ANY,
            case(bad_input::unsupported_flavours_are_typed),
        ),
        ("bad_input_is_typed", Once, ANY, case(bad_input::is_typed)),
        (
            "check_answers_as_acquisition",
            Once,
            ANY,
            case(startup_check::check_answers_as_acquisition),
        ),
        (
            "awkward_names_round_trip",
            Each,
            ANY,
            case(bad_input::awkward_names_round_trip),
        ),
        (
            "multi_lock_orders_and_rolls_back",
            Once,
            ANY,
            case(multi::orders_and_rolls_back),
        ),
        // A store of its own per case, and a restart takes seconds: once, not per flavour.
        (
            "store_restart_while_held",
            Once,
            &[Need::PrivateStore],
            case(restart::while_held),
        ),
        (
            "store_down_past_lease_fires_lost",
            Once,
            &[Need::Expires, Need::PrivateStore],
            case(restart::down_past_lease_fires_lost),
        ),
        (
            "election_one_leader_across_processes",
            Once,
            &[Need::Elections],
            case(election::one_leader_across_processes),
        ),
        (
            "election_and_latch_writes_cut_leave_no_transaction_open",
            Once,
            &[Need::Elections],
            case(cancel::cut_writes_leave_no_transaction_open),
        ),
        (
            "election_rules",
            Once,
            &[Need::Elections],
            case(election::rules),
        ),
        (
            "election_crashed_leader_lapses",
            Once,
            &[Need::Elections],
            case(election::crashed_leader_lapses),
        ),
        (
            "election_huge_wait_waits_forever",
            Once,
            &[Need::Elections],
            case(election::huge_wait_waits_forever),
        ),
        (
            "latch_releases_waiters_across_processes",
            Once,
            &[Need::Latches],
            case(latch::releases_waiters_across_processes),
        ),
        (
            "latch_wait_timeout_is_typed",
            Once,
            &[Need::Latches],
            case(latch::wait_timeout_is_typed),
        ),
        (
            "latch_count_rules",
            Once,
            &[Need::Latches],
            case(latch::count_rules),
        ),
        (
            "latch_huge_wait_waits_forever",
            Once,
            &[Need::Latches],
            case(latch::huge_wait_waits_forever),
        ),
        (
            "status_shows_holder",
            Each,
            &[Need::Inspects],
            case(operations::shows_holder),
        ),
        (
            "force_release_fences_holder",
            Each,
            &[Need::Inspects],
            case(operations::force_release_fences_holder),
        ),
        (
            "unsupported_status_is_typed",
            Once,
            &[Need::LacksInspection],
            case(operations::unsupported_is_typed),
        ),
        (
            "unsupported_election_and_latch_are_typed",
            Once,
            &[Need::LacksElectionsOrLatches],
            case(latch::unsupported_is_typed),
        ),
        (
            "semaphore_size_mismatch_is_refused",
            Semaphore,
            ANY,
            case(semaphore_size::mismatch_is_refused),
        ),
        (
            "semaphore_resize_grows_and_shrinks",
            Semaphore,
            ANY,
            case(semaphore_size::resize_grows_and_shrinks),
        ),
        (
            "holder_session_ended_by_server",
            Each,
            &[Need::Sessions, Need::EndSessions],
            case(session_end::holder_session_ended),
        ),
        (
            "waiter_session_ended_by_server",
            Each,
            &[Need::Sessions, Need::EndSessions],
            case(session_end::waiter_session_ended),
        ),
    ]
}

impl Suite {
    /// The suite for `backend` (its name in `DISTLOCK_SKIP`), whose store is `server` (named in
    /// failure messages) at `url`. Runs the exclusive lock unless [`flavours`](Suite::flavours)
    /// says otherwise.
    pub fn new(backend: &'static str, server: &'static str, url: String) -> Self {
        Suite {
            backend,
            server,
            url,
            flavours: vec![Flavour::mutex()],
            extra: Vec::new(),
            not_applicable: Vec::new(),
            faults: Faults::default(),
        }
    }

    /// Gives the cases about store restarts a store of their own: `start` makes a new private
    /// store (a fresh server on a free port, for one case), of the same kind as the store under
    /// test and connected to the same way (same URL parameters). Without it those cases are not
    /// applicable.
    pub fn private_store<S, F>(mut self, start: F) -> Self
    where
        S: PrivateStore + 'static,
        F: Fn() -> Result<S, Failure> + Send + Sync + 'static,
    {
        self.faults.private_store = Some(Box::new(move || {
            start().map(|s| Box::new(s) as Box<dyn PrivateStore>)
        }));
        self
    }

    /// Gives the cases about ended sessions a way to end them from the server side (what
    /// `pg_terminate_backend` or `KILL` does to a client): `end(url, client_ports)` ends, on the
    /// server at `url`, every session whose client connection comes from one of `client_ports`
    /// on 127.0.0.1, and answers how many it ended. Without it those cases are not applicable.
    pub fn end_sessions<F, Fut>(mut self, end: F) -> Self
    where
        F: Fn(String, Vec<u16>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<usize, Failure>> + Send + 'static,
    {
        self.faults.end_sessions = Some(Box::new(move |url, ports| Box::pin(end(url, ports))));
        self
    }

    /// For a store whose sessions outlive a crashed client by a TTL (an etcd lease, a ZooKeeper
    /// session timeout) rather than ending with its connection: that TTL, which bounds how long
    /// a killed holder's lock stays taken.
    pub fn session_expiry(mut self, ttl: Duration) -> Self {
        self.faults.session_expiry = Some(ttl);
        self
    }

    /// The flavours to run every case against.
    pub fn flavours(mut self, flavours: Vec<Flavour>) -> Self {
        self.flavours = flavours;
        self
    }

    /// Declares a case that does not apply to this backend, and why (printed with the run).
    pub fn not_applicable(mut self, case: &'static str, why: &'static str) -> Self {
        self.not_applicable.push((case, why));
        self
    }

    /// Adds a backend-specific case, run once with the first flavour.
    pub fn case<F, Fut>(mut self, name: &str, f: F) -> Self
    where
        F: Fn(Ctx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        self.extra
            .push((name.to_string(), Arc::new(move |ctx| Box::pin(f(ctx)))));
        self
    }

    /// Runs the suite (or, in a child process, the child's role). Call from `main`.
    pub fn run(self) -> ExitCode {
        if let Ok(spec) = std::env::var(CHILD_ENV) {
            let spec: Spec = match serde_json::from_str(&spec) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("bad {CHILD_ENV}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            return child_main(spec, &self.flavours);
        }
        let mut args = Arguments::from_args();
        // Most cases spend their time waiting (a lease running out, a session expiring, a paused
        // process, a server restarting), each with its own names, child processes and private
        // servers: a few run side by side. The ones that drive thousands of contended hand-offs,
        // or end the process's connections, run alone (see `ALONE`). `--test-threads 1` runs
        // every case on its own.
        args.test_threads.get_or_insert(CASES_AT_ONCE);

        let skipped = std::env::var("DISTLOCK_SKIP").unwrap_or_default();
        let skip = skipped
            .split(',')
            .any(|s| s.trim().eq_ignore_ascii_case(self.backend));
        if skip {
            eprintln!(
                "SKIPPED: every {} conformance case, because DISTLOCK_SKIP={skipped}",
                self.backend
            );
        }
        for (case, why) in &self.not_applicable {
            eprintln!("not applicable to {}: {case}: {why}", self.backend);
        }
        // Which cases apply follows from what the store says it can do. A store that cannot be
        // reached gets every case, and every case fails naming it.
        let store = if skip { None } else { probe(&self.url) };
        let applies_to_store = |case: &str, needs: &[Need]| -> bool {
            match needs
                .iter()
                .find_map(|need| need.unmet(store, &self.faults))
            {
                Some(why) => {
                    eprintln!("not applicable to {}: {case}: {why}", self.backend);
                    false
                }
                None => true,
            }
        };

        let setup = Arc::new(Setup {
            server: self.server,
            url: self.url.clone(),
            dir: Arc::new(tempfile::tempdir().expect("a temporary directory")),
            reachable: std::sync::OnceLock::new(),
        });
        let mut trials = Vec::new();
        let cases: Vec<_> = cases()
            .into_iter()
            .filter(|(case, _, needs, _)| {
                !self.not_applicable.iter().any(|(c, _)| c == case) && applies_to_store(case, needs)
            })
            .collect();
        let faults = Arc::new(self.faults);
        for (index, flavour) in self.flavours.iter().enumerate() {
            for (case, runs, _, body) in cases.iter().cloned() {
                let applies = match runs {
                    Runs::Each => true,
                    Runs::EachExclusive => flavour.self_exclusive,
                    Runs::Once => index == 0,
                    Runs::Semaphore => flavour.name == SEMAPHORE,
                };
                if !applies {
                    continue;
                }
                let gate = if ALONE.contains(&case) {
                    Gate::Alone
                } else {
                    Gate::Beside
                };
                trials.push(
                    trial(&setup, &faults, flavour, case, body, gate).with_ignored_flag(skip),
                );
            }
        }
        if let Some(first) = self.flavours.first() {
            for (name, body) in self.extra {
                let leaked: &'static str = Box::leak(name.into_boxed_str());
                // A backend's own cases kill, fail over and reshard servers and time what follows.
                let trial = trial(&setup, &faults, first, leaked, body, Gate::Alone);
                trials.push(trial.with_ignored_flag(skip));
            }
        }
        libtest_mimic::run(&args, trials).exit_code()
    }
}

/// What a store says of itself, read once before the cases run.
#[derive(Clone, Copy)]
struct Probed {
    /// What its lock is like.
    capabilities: distlock::Capabilities,
    /// Which of what a store may offer beyond the lock it has (its `Backend` accessors).
    elections: bool,
    latches: bool,
    inspection: bool,
}

/// What the store at `url` can do, or `None` if it cannot be reached now.
fn probe(url: &str) -> Option<Probed> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = tokio::time::timeout(Duration::from_secs(10), distlock::connect(url))
            .await
            .ok()?
            .ok()?;
        let backend = client.backend();
        Some(Probed {
            capabilities: backend.capabilities(),
            elections: backend.elections().is_some(),
            latches: backend.latches().is_some(),
            inspection: backend.inspection().is_some(),
        })
    })
}

struct Setup {
    server: &'static str,
    url: String,
    dir: Arc<tempfile::TempDir>,
    /// Whether the store answered, checked once: `Err` holds the message every case fails with.
    reachable: std::sync::OnceLock<Result<(), String>>,
}

impl Setup {
    async fn connect(&self) -> Result<Client, String> {
        let unreachable = |e: String| {
            format!(
                "{} not reachable at {}: {e}; run scripts/services.sh (or set DISTLOCK_SKIP to skip it on purpose)",
                self.server,
                distlock::redact(&self.url)
            )
        };
        let client = tokio::time::timeout(Duration::from_secs(10), distlock::connect(&self.url))
            .await
            .map_err(|_| unreachable("no answer within 10s".into()))?
            .map_err(|e| unreachable(e.to_string()))?;
        if self.reachable.get().is_none() {
            let probe = client.lock("conformance/probe");
            let answer = tokio::time::timeout(Duration::from_secs(10), probe.try_acquire()).await;
            let verdict = match answer {
                Err(_) => Err(unreachable("no answer within 10s".into())),
                Ok(Err(e)) => Err(unreachable(e.to_string())),
                Ok(Ok(guard)) => {
                    if let Some(g) = guard {
                        let _ = g.release().await;
                    }
                    Ok(())
                }
            };
            let _ = self.reachable.set(verdict);
        }
        match self.reachable.get() {
            Some(Err(message)) => Err(message.clone()),
            _ => Ok(client),
        }
    }
}

/// How many cases of a suite run at once, unless `--test-threads` says otherwise.
const CASES_AT_ONCE: usize = 3;

/// The cases that run alone:
/// * those that keep several processes handing a lock over thousands of times as fast as the
///   store allows: beside others on 2 cores they starved them (a 500 ms lease not renewed in
///   time) and each other (MySQL's fair lock past a 300 s budget);
/// * those that have the server end every connection this process opened since a moment: beside
///   others they ended those cases' sessions too (a holder's advisory lock went with its
///   session, and another case's waiter got in).
const ALONE: &[&str] = &[
    "exclusion_across_processes",
    "exclusion_between_tasks",
    "fencing_tokens_increase_across_processes",
    "election_one_leader_across_processes",
    "holder_session_ended_by_server",
    "waiter_session_ended_by_server",
];

/// Whether a case may run beside others of its binary.
#[derive(Clone, Copy)]
enum Gate {
    /// It waits for the cases running to end, and none starts until it has ended.
    Alone,
    /// Beside any other case that may run beside others.
    Beside,
}

impl Gate {
    /// Held for the whole case: `Alone` takes the write side, `Beside` the read side. (std's
    /// lock lets no new reader in while a writer waits, so an `Alone` case is not starved.)
    fn enter(self) -> Box<dyn std::any::Any> {
        static CASES: std::sync::RwLock<()> = std::sync::RwLock::new(());
        // A case that panicked poisons the lock; the next ones still run.
        match self {
            Gate::Alone => Box::new(CASES.write().unwrap_or_else(|e| e.into_inner())),
            Gate::Beside => Box::new(CASES.read().unwrap_or_else(|e| e.into_inner())),
        }
    }
}

fn trial(
    setup: &Arc<Setup>,
    faults: &Arc<Faults>,
    flavour: &Flavour,
    case: &'static str,
    body: CaseFn,
    gate: Gate,
) -> Trial {
    let setup = setup.clone();
    let faults = faults.clone();
    let flavour = flavour.clone();
    let name = format!("{}::{case}", flavour.name);
    Trial::test(name.clone(), move || {
        let _turn = gate.enter();
        let started = std::time::Instant::now();
        let outcome = run_case(&setup, faults, flavour, case, body);
        if std::env::var_os("DISTLOCK_CASE_TIMES").is_some() {
            eprintln!("case time: {name}: {:.1}s", started.elapsed().as_secs_f64());
        }
        outcome
    })
}

/// Runs one case on a runtime of its own, with a fresh client.
fn run_case(
    setup: &Setup,
    faults: Arc<Faults>,
    flavour: Flavour,
    case: &'static str,
    body: CaseFn,
) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(e.to_string()))?;
    runtime.block_on(async {
        let client = setup.connect().await?;
        let ctx = Ctx {
            client,
            url: setup.url.clone(),
            flavour,
            dir: setup.dir.clone(),
            case: case.to_string(),
            faults,
        };
        body(ctx).await.map_err(|f| Failed::from(f.0))
    })
}

//! The suite: one named test per (flavour, case), run against a real store.
//!
//! Cases live one behaviour per file. Each gets a [`Ctx`]: a connected client, the URL (for
//! child processes and second clients), the flavour under test, and fresh lock names.

mod bad_input;
mod cancel;
mod crash;
mod exclusion;
mod fencing;
mod multi;
mod pause;
mod reentrancy;
mod release;
mod timeouts;
mod watchdog;

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Client, Lock, OwnerToken};
use libtest_mimic::{Arguments, Failed, Trial};

use crate::Outcome;
use crate::child::{CHILD_ENV, Spec, child_main};

type CaseFn = Arc<dyn Fn(Ctx) -> Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync>;

/// A lock flavour under test: how to make the lock from a client and a name.
#[derive(Clone)]
pub struct Flavour {
    /// Short name, the first part of each test name (`mutex`, `fair`, `semaphore1`, …).
    pub name: &'static str,
    /// Makes the lock under test.
    pub make: fn(&Client, &str) -> Lock,
    /// Whether two holders of this flavour exclude each other. When false (the read side of a
    /// read-write lock), cases that need a second holder use `contender` instead.
    pub self_exclusive: bool,
    /// Makes the lock a competing holder takes (the write side, for readers).
    pub contender: fn(&Client, &str) -> Lock,
}

impl Flavour {
    /// The exclusive lock, `client.lock(name)`.
    pub fn mutex() -> Self {
        Flavour {
            name: "mutex",
            make: |c, n| c.lock(n),
            self_exclusive: true,
            contender: |c, n| c.lock(n),
        }
    }
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
}

impl Ctx {
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
}

/// What a case needs of the store, read from its [`distlock::Capabilities`].
#[derive(Clone, Copy, PartialEq)]
enum Needs {
    /// Any store.
    Any,
    /// Per-lock leases (lease expiry, renewal, pauses past the lease); not session holdings.
    Leases,
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
}

/// Every case of the suite.
fn cases() -> Vec<(&'static str, Runs, Needs, CaseFn)> {
    use Needs::{Any, Leases};
    use Runs::{Each, EachExclusive, Once};
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
            Any,
            case(exclusion::across_processes),
        ),
        (
            "exclusion_between_tasks",
            EachExclusive,
            Any,
            case(exclusion::between_tasks),
        ),
        (
            "try_acquire_on_held_is_none",
            Each,
            Any,
            case(timeouts::try_acquire_on_held_is_none),
        ),
        (
            "acquire_timeout_times_out",
            Each,
            Any,
            case(timeouts::acquire_timeout_times_out),
        ),
        (
            "release_by_other_is_not_held",
            Each,
            Any,
            case(release::by_other_is_not_held),
        ),
        (
            "double_release_keeps_next_holder",
            Each,
            Any,
            case(release::double_release_keeps_next_holder),
        ),
        (
            "dropped_guard_releases",
            Each,
            Any,
            case(release::dropped_guard_releases),
        ),
        (
            "crashed_holder_frees_within_lease",
            Each,
            Any,
            case(crash::killed_holder_frees_within_lease),
        ),
        (
            "watchdog_keeps_lock_past_lease",
            Each,
            Any,
            case(watchdog::keeps_lock_past_lease),
        ),
        (
            "no_watchdog_lease_ends",
            Each,
            Leases,
            case(watchdog::no_watchdog_lease_ends),
        ),
        (
            "paused_holder_is_fenced",
            Each,
            Leases,
            case(pause::paused_holder_is_fenced),
        ),
        (
            "resumed_holder_knows_at_once",
            Each,
            Leases,
            case(pause::resumed_holder_knows_at_once),
        ),
        (
            "stale_guard_keeps_newer_holding",
            Each,
            Leases,
            case(watchdog::stale_guard_keeps_newer_holding),
        ),
        (
            "stale_holding_untouched_in_store",
            Each,
            Leases,
            case(release::stale_holding_untouched_in_store),
        ),
        (
            "old_guard_after_retake_is_inert",
            Each,
            Any,
            case(release::old_guard_after_retake_is_inert),
        ),
        (
            "reenter_after_lease_end_is_lost",
            Each,
            Leases,
            case(watchdog::reenter_after_lease_end_is_lost),
        ),
        (
            "huge_waits_wait_forever",
            Each,
            Any,
            case(timeouts::huge_waits_wait_forever),
        ),
        (
            "reentrancy_counts_holds",
            Each,
            Any,
            case(reentrancy::counts_holds),
        ),
        (
            "fencing_tokens_increase_across_processes",
            EachExclusive,
            Any,
            case(fencing::increase_across_processes),
        ),
        (
            "cancelled_acquire_leaves_nothing_held",
            Each,
            Any,
            case(cancel::cancelled_acquire_leaves_nothing_held),
        ),
        (
            "cancelled_waiter_leaves_the_queue",
            Each,
            Any,
            case(cancel::cancelled_waiter_leaves_the_queue),
        ),
        (
            "unsupported_flavours_are_typed",
            Once,
            Any,
            case(bad_input::unsupported_flavours_are_typed),
        ),
        ("bad_input_is_typed", Once, Any, case(bad_input::is_typed)),
        (
            "awkward_names_round_trip",
            Each,
            Any,
            case(bad_input::awkward_names_round_trip),
        ),
        (
            "multi_lock_orders_and_rolls_back",
            Once,
            Any,
            case(multi::orders_and_rolls_back),
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
        }
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
        // Cases measure lease timing and pause processes: one at a time unless asked otherwise.
        args.test_threads.get_or_insert(1);

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
        let capabilities = if skip {
            None
        } else {
            probe_capabilities(&self.url)
        };
        let applies_to_store = |case: &str, needs: Needs| -> bool {
            let Some(caps) = capabilities else {
                return true;
            };
            let fits = match needs {
                Needs::Any => true,
                Needs::Leases => caps.renews(),
            };
            if !fits {
                eprintln!(
                    "not applicable to {}: {case}: its holdings are sessions, not leases (no lease \
                     ends, a paused holder keeps its session, another client cannot free it)",
                    self.backend
                );
            }
            fits
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
                !self.not_applicable.iter().any(|(c, _)| c == case)
                    && applies_to_store(case, *needs)
            })
            .collect();
        for (index, flavour) in self.flavours.iter().enumerate() {
            for (case, runs, _, body) in cases.iter().cloned() {
                let applies = match runs {
                    Runs::Each => true,
                    Runs::EachExclusive => flavour.self_exclusive,
                    Runs::Once => index == 0,
                };
                if !applies {
                    continue;
                }
                trials.push(trial(&setup, flavour, case, body).with_ignored_flag(skip));
            }
        }
        if let Some(first) = self.flavours.first() {
            for (name, body) in self.extra {
                let leaked: &'static str = Box::leak(name.into_boxed_str());
                trials.push(trial(&setup, first, leaked, body).with_ignored_flag(skip));
            }
        }
        libtest_mimic::run(&args, trials).exit_code()
    }
}

/// What the store at `url` can do, or `None` if it cannot be reached now.
fn probe_capabilities(url: &str) -> Option<distlock::Capabilities> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = tokio::time::timeout(Duration::from_secs(10), distlock::connect(url))
            .await
            .ok()?
            .ok()?;
        Some(client.backend().capabilities())
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
            let probe = client
                .lock("conformance/probe")
                .lease(Duration::from_secs(1));
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

fn trial(setup: &Arc<Setup>, flavour: &Flavour, case: &'static str, body: CaseFn) -> Trial {
    let setup = setup.clone();
    let flavour = flavour.clone();
    Trial::test(format!("{}::{case}", flavour.name), move || {
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
            };
            body(ctx).await.map_err(|f| Failed::from(f.0))
        })
    })
}

//! `distlock demo`: the sources' overselling demo, made real.
//!
//! For each scenario and strategy: seed the store, start K instances of a small inventory
//! service as separate OS processes (each serving HTTP on a loopback port the OS picks), fire N
//! concurrent requests at them round-robin, stop them, audit the store. Then a table, a verdict
//! per run, and optionally JSON lines and an SVG chart.
//!
//! # Layout
//!
//! * [`strategy`]: scenarios, strategies and the request flows each strategy protects.
//! * [`service`]: one instance (`distlock demo serve`, internal): HTTP in front of the flows.
//! * [`instances`]: starting, watching and stopping the K processes.
//! * [`load`]: the load generator, drawing a [`super::progress`] bar.
//! * [`store`]: the inventory store, its SQL in `sql/<dialect>/*.sql`.
//! * [`audit`]: the invariants checked after each run.
//! * [`report`]: table, verdicts, JSON; [`chart`]: the SVG.
//!
//! Exit status: 0 when every strategy that must be correct was, and nothing failed; 1 when one
//! was WRONG or an instance or request failed; 64 for invalid arguments.

mod audit;
mod chart;
mod instances;
mod load;
mod report;
mod service;
mod store;
mod strategy;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use distlock::ErrorKind;

use self::instances::Instances;
use self::load::Routing;
use self::report::RunReport;
use self::store::Store;
use self::strategy::{LockStore, Method, Scenario, Settings, Strategy};
use super::progress::Progress;
use crate::{EXIT_USAGE, duration};

/// How long each distlock lock's lease is; the watchdog renews it while a request holds it.
const LOCK_LEASE: Duration = Duration::from_secs(10);
/// The pause scenario's lease: short, so that the stopped holder's lease ends soon.
const PAUSE_LEASE: Duration = Duration::from_secs(1);
/// How long the pause scenario's holder stays stopped: three leases.
const PAUSE_STOP: Duration = Duration::from_secs(3);
/// How long the up-front check of a lock URL may take.
const LOCK_URL_CHECK: Duration = Duration::from_secs(10);
/// Connections of the parent's own pool to the store (seeding and auditing only).
const PARENT_STORE_CONNECTIONS: u32 = 1;

/// Arguments of `distlock demo`.
#[derive(clap::Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    after_help = "Scenarios: stock (N items with one unit each on sale, N buyers each ordering \
                  the next item in stock: read, check, write stock - 1, then insert an order), counter \
                  (one counter at 0, N \"+1\" requests: read, add, write).\n\
                  Strategies: none (no protection), local-mutex (a mutex inside each instance; \
                  also run with 1 instance when K > 1), optimistic (version compare-and-swap, \
                  retried), lock (a distlock lock on the request's key, taken by the service's \
                  distlock-axum layer; once per --lock-url), atomic (one \
                  check-and-decrement statement), segmented (the hot stock split into \
                  --segments parts, one lock each, on the first --lock-url), row-lock (a \
                  transaction that locks the row with SELECT ... FOR UPDATE; PostgreSQL and MySQL \
                  stores only); all = every one the store supports.\n\
                  Scenario pause (in all when K > 1): the counter, with instance 1 stopped \
                  (SIGSTOP) while it holds the lock, for 3 s against a 1 s lease, then resumed, \
                  while the other instances serve every other request; runs lock (its late \
                  write loses updates: wrong, as expected) and lock+fence (the store refuses the \
                  late write: correct), once per --lock-url.\n\
                  Exit status: 0 if every strategy that must be correct was; 1 if one was WRONG \
                  or an instance or request failed; 64 for invalid arguments."
)]
pub(crate) struct DemoArgs {
    #[command(subcommand)]
    internal: Option<Internal>,
    /// Scenarios to run, comma-separated, or all.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "all",
        env = "DISTLOCK_DEMO_SCENARIO"
    )]
    scenario: Vec<ScenarioChoice>,
    /// Strategies to run, comma-separated, or all.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "all",
        env = "DISTLOCK_DEMO_STRATEGY"
    )]
    strategy: Vec<StrategyChoice>,
    /// Instances of the service (K), each its own process.
    #[arg(
        long,
        short = 'k',
        default_value_t = 3,
        env = "DISTLOCK_DEMO_INSTANCES"
    )]
    instances: u32,
    /// Requests per run (N); the stock scenario puts N items on sale to N buyers.
    #[arg(
        long,
        short = 'n',
        default_value_t = 5000,
        env = "DISTLOCK_DEMO_REQUESTS"
    )]
    requests: u32,
    /// Keys the requests are spread over, each its own lock (the lock strategies lock a request
    /// by its key): stock splits the N items into that many groups of products, counter keeps
    /// that many counters; request n names key n mod keys in its path. The pause scenario and
    /// segmented use one key.
    #[arg(long, default_value_t = 1, env = "DISTLOCK_DEMO_KEYS")]
    keys: u32,
    /// Requests in flight at once, spread over the instances. Enough to show every race; more
    /// mostly adds waiters polling the lock store.
    #[arg(
        long,
        short = 'c',
        default_value_t = 16,
        env = "DISTLOCK_DEMO_CONCURRENCY"
    )]
    concurrency: u32,
    /// Segments of the segmented strategy (S).
    #[arg(long, default_value_t = 8, env = "DISTLOCK_DEMO_SEGMENTS")]
    segments: u32,
    /// Extra time between reading a value and writing it back, as a slower database round trip
    /// or business logic would take: it widens the race window. None by default: the race
    /// shows without it (the read and the write are separate statements).
    #[arg(long, default_value = "0s", value_parser = duration::parse, env = "DISTLOCK_DEMO_PAUSE")]
    pause: Duration,
    /// Compare-and-swap attempts of the optimistic strategy before a request gives up.
    #[arg(long, default_value_t = 100, env = "DISTLOCK_DEMO_RETRIES")]
    retries: u32,
    /// The inventory store: sqlite:PATH, postgres://… or mysql://… (its demo_* tables are
    /// dropped and created afresh for every run) [default: an SQLite file in a temporary
    /// directory].
    #[arg(long, env = "DISTLOCK_DEMO_STORE")]
    store: Option<String>,
    /// A distlock URL for the lock strategies; repeat it to run `lock` on several backends
    /// [default: an SQLite file in a temporary directory].
    #[arg(
        long = "lock-url",
        visible_alias = "url",
        value_name = "URL",
        env = "DISTLOCK_DEMO_LOCK_URL"
    )]
    lock_urls: Vec<String>,
    /// How long a request may take before it counts as failed.
    #[arg(long, default_value = "60s", value_parser = duration::parse, env = "DISTLOCK_DEMO_REQUEST_TIMEOUT")]
    request_timeout: Duration,
    /// How long a request of a lock strategy waits for its key's lock before the service answers
    /// 423 Locked (counted as `busy`); 0s: the lock now or 423 [default: the request timeout].
    #[arg(long, value_parser = duration::parse, env = "DISTLOCK_DEMO_LOCK_WAIT")]
    lock_wait: Option<Duration>,
    /// Print one JSON object per run instead of the table.
    #[arg(long, env = "DISTLOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// Also write a bar chart of throughput and correctness per strategy to this SVG file.
    #[arg(long, value_name = "FILE.svg", env = "DISTLOCK_DEMO_CHART")]
    chart: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
enum Internal {
    /// One instance of the inventory service (started by `distlock demo` itself).
    #[command(hide = true)]
    Serve(service::ServeArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ScenarioChoice {
    All,
    Stock,
    Counter,
    Pause,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum StrategyChoice {
    All,
    None,
    LocalMutex,
    Optimistic,
    Lock,
    #[value(name = "lock+fence")]
    LockFence,
    Atomic,
    Segmented,
    RowLock,
}

/// One run to do.
struct Plan {
    scenario: Scenario,
    strategy: Strategy,
    instances: u32,
}

pub(crate) async fn run(args: DemoArgs) -> ExitCode {
    if let Some(Internal::Serve(serve)) = args.internal {
        return service::run(serve).await;
    }
    if let Err(e) = check(&args) {
        eprintln!("distlock demo: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    // On Ctrl-C the demo future is dropped: that kills the instances (kill_on_drop) and removes
    // the temporary directory.
    tokio::select! {
        outcome = demo(args) => match outcome {
            Ok(code) => code,
            Err(e) => {
                eprintln!("distlock demo: {}", distlock::error::chain(e.as_ref()));
                ExitCode::FAILURE
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ndistlock demo: interrupted");
            ExitCode::from(130)
        }
    }
}

fn check(args: &DemoArgs) -> Result<(), String> {
    if !(1..=64).contains(&args.instances) {
        return Err("--instances must be 1 ..= 64".into());
    }
    if args.scenario.contains(&ScenarioChoice::Pause) && args.instances < 2 {
        return Err(
            "the pause scenario needs --instances 2 or more: one to stop, others to \
                    go on while it is stopped"
                .into(),
        );
    }
    if args.requests == 0
        || args.concurrency == 0
        || args.segments == 0
        || args.retries == 0
        || args.keys == 0
    {
        return Err(
            "--requests, --concurrency, --segments, --retries and --keys must be at least 1".into(),
        );
    }
    if args.keys > args.requests {
        return Err("--keys cannot exceed --requests (each key needs an item)".into());
    }
    if let Some(url) = &args.store {
        Store::check_url(url).map_err(|e| format!("--store: {e}"))?;
    }
    if args.strategy.iter().all(|s| *s == StrategyChoice::RowLock) && !row_locks(args) {
        return Err(ROW_LOCK_NOTE.into());
    }
    let segmented = args
        .strategy
        .iter()
        .any(|s| matches!(s, StrategyChoice::All | StrategyChoice::Segmented));
    if segmented && args.segments > args.requests {
        return Err("--segments cannot exceed --requests (each segment needs an item)".into());
    }
    Ok(())
}

async fn demo(args: DemoArgs) -> Result<ExitCode> {
    let scratch = tempfile::Builder::new()
        .prefix("distlock-demo-")
        .tempdir()
        .context("creating a temporary directory")?;
    let in_scratch = |file: &str| format!("sqlite:{}", scratch.path().join(file).display());
    let store_url = args
        .store
        .clone()
        .unwrap_or_else(|| in_scratch("inventory.db"));
    let lock_urls = if args.lock_urls.is_empty() {
        vec![in_scratch("locks.db")]
    } else {
        args.lock_urls.clone()
    };
    let lock_stores = LockStore::named(&lock_urls);
    let plans = plan(&args, &lock_stores);
    if plans.iter().any(|p| p.strategy.lock.is_some())
        && let Err(e) = check_lock_urls(&args.lock_urls).await
    {
        eprintln!("distlock demo: {e}");
        return Ok(ExitCode::from(EXIT_USAGE));
    }
    let store = Store::open(&store_url, PARENT_STORE_CONNECTIONS).await?;
    if !args.json {
        let shown = |given: bool, url: &str| {
            if given {
                distlock::redact(url)
            } else {
                "sqlite (temporary file)".to_string()
            }
        };
        let locks: Vec<String> = lock_urls
            .iter()
            .map(|u| shown(!args.lock_urls.is_empty(), u))
            .collect();
        let pause = if args.pause.is_zero() {
            "none".to_string()
        } else {
            humantime::format_duration(args.pause).to_string()
        };
        println!(
            "distlock demo: {} run{} of {} requests, {} in flight; store: {}; locks: {}; extra \
             pause between read and write: {pause}",
            plans.len(),
            if plans.len() == 1 { "" } else { "s" },
            args.requests,
            args.concurrency,
            shown(args.store.is_some(), &store_url),
            locks.join(", "),
        );
    }

    let mut runs = Vec::new();
    for p in plans {
        let report = run_one(&args, &store, &store_url, p).await;
        if args.json {
            println!("{}", report.json());
        }
        runs.push(report);
    }
    store.close().await;

    if !args.json {
        println!("\n{}\n", report::table(&runs));
        for r in &runs {
            println!("{}", r.verdict_line());
        }
    }
    if let Some(path) = &args.chart {
        std::fs::write(path, chart::svg(&runs))
            .with_context(|| format!("writing the chart to {}", path.display()))?;
        if !args.json {
            println!("\nchart written to {}", path.display());
        }
    }
    let failures = runs.iter().filter(|r| r.verdict().is_failure()).count();
    if failures > 0 {
        let runs = if failures == 1 { "run" } else { "runs" };
        eprintln!("distlock demo: {failures} {runs} WRONG or FAILED (see above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Why `row-lock` is not run on the SQLite store.
const ROW_LOCK_NOTE: &str = "row-lock needs a store with row locks (SELECT ... FOR UPDATE), which \
     SQLite has not: use --store postgres://… or mysql://…";

/// Whether the chosen store has row locks (the default, SQLite, has not).
fn row_locks(args: &DemoArgs) -> bool {
    args.store.as_deref().is_some_and(Store::url_has_row_locks)
}

/// A lock URL this build cannot use is an argument error, said once up front rather than by
/// every instance of every run. Other failures (a server down) are left to the instances, which
/// report them with their stderr.
async fn check_lock_urls(urls: &[String]) -> Result<(), String> {
    for url in urls {
        let connected = tokio::time::timeout(LOCK_URL_CHECK, distlock::connect(url)).await;
        if let Ok(Err(e)) = connected
            && matches!(e.kind(), ErrorKind::InvalidUrl | ErrorKind::Unsupported)
        {
            return Err(format!("--lock-url: {}", distlock::error::chain(&e)));
        }
    }
    Ok(())
}

/// The runs, in order: each scenario, each strategy; `lock` once per lock URL; `local-mutex`
/// with one instance first when K > 1, to show it correct there and wrong with K.
fn plan(args: &DemoArgs, lock_stores: &[LockStore]) -> Vec<Plan> {
    // In the sources' order; `all` leaves out the pause scenario where there is no second
    // instance to go on while the first is stopped.
    let chosen = |c| args.scenario.contains(&c) || args.scenario.contains(&ScenarioChoice::All);
    let scenarios: Vec<Scenario> = [
        (ScenarioChoice::Stock, Scenario::Stock),
        (ScenarioChoice::Counter, Scenario::Counter),
        (ScenarioChoice::Pause, Scenario::Pause),
    ]
    .into_iter()
    .filter(|&(choice, scenario)| {
        chosen(choice) && (scenario != Scenario::Pause || args.instances > 1)
    })
    .map(|(_, scenario)| scenario)
    .collect();
    let every = [
        StrategyChoice::None,
        StrategyChoice::LocalMutex,
        StrategyChoice::Optimistic,
        StrategyChoice::Lock,
        StrategyChoice::LockFence,
        StrategyChoice::Atomic,
        StrategyChoice::Segmented,
        StrategyChoice::RowLock,
    ];
    let chosen: Vec<StrategyChoice> = every
        .into_iter()
        .filter(|s| args.strategy.contains(s) || args.strategy.contains(&StrategyChoice::All))
        .collect();
    let row_locks = row_locks(args);
    // Only worth saying where row-lock would have run: the pause scenario has no row-lock row.
    let row_lock_wanted = scenarios.iter().any(|s| *s != Scenario::Pause);
    if chosen.contains(&StrategyChoice::RowLock) && !row_locks && row_lock_wanted {
        eprintln!("distlock demo: row-lock skipped: {ROW_LOCK_NOTE}");
    }
    let plain = |method| Strategy { method, lock: None };
    let mut plans = Vec::new();
    for scenario in scenarios {
        let mut add = |strategy: Strategy, instances| {
            plans.push(Plan {
                scenario,
                strategy,
                instances,
            });
        };
        // The pause scenario compares the lock with and without the fence, and the fence is
        // its alone.
        let runs_in = |choice: &&StrategyChoice| match scenario {
            Scenario::Pause => matches!(choice, StrategyChoice::Lock | StrategyChoice::LockFence),
            _ => **choice != StrategyChoice::LockFence,
        };
        for choice in chosen.iter().filter(runs_in) {
            match choice {
                StrategyChoice::All | StrategyChoice::None => {
                    add(plain(Method::None), args.instances)
                }
                StrategyChoice::LocalMutex => {
                    if args.instances > 1 {
                        add(plain(Method::LocalMutex), 1);
                    }
                    add(plain(Method::LocalMutex), args.instances);
                }
                StrategyChoice::Optimistic => add(plain(Method::Optimistic), args.instances),
                StrategyChoice::Lock | StrategyChoice::LockFence => {
                    let method = if *choice == StrategyChoice::Lock {
                        Method::Lock
                    } else {
                        Method::LockFence
                    };
                    for lock in lock_stores {
                        let strategy = Strategy {
                            method,
                            lock: Some(lock.clone()),
                        };
                        add(strategy, args.instances);
                    }
                }
                StrategyChoice::Atomic => add(plain(Method::Atomic), args.instances),
                // Segments are the keys of segmented: it runs on one key of requests.
                StrategyChoice::Segmented if args.keys > 1 => {}
                StrategyChoice::Segmented => {
                    let strategy = Strategy {
                        method: Method::Segmented,
                        lock: lock_stores.first().cloned(),
                    };
                    add(strategy, args.instances);
                }
                StrategyChoice::RowLock => {
                    if row_locks {
                        add(plain(Method::RowLock), args.instances);
                    }
                }
            }
        }
    }
    plans
}

async fn run_one(args: &DemoArgs, store: &Store, store_url: &str, plan: Plan) -> RunReport {
    let Plan {
        scenario,
        strategy,
        instances,
    } = plan;
    let mut report = RunReport {
        scenario,
        strategy,
        instances,
        requests: u64::from(args.requests),
        load: None,
        audit: None,
        problems: Vec::new(),
    };
    let segmented = report.strategy.method == Method::Segmented;
    let keys = if scenario == Scenario::Pause || segmented {
        1
    } else {
        args.keys
    };
    let (products, slots) = match scenario {
        Scenario::Stock => (args.requests, 1),
        Scenario::Counter | Scenario::Pause => (0, if segmented { args.segments } else { keys }),
    };
    if let Err(e) = store.seed(products, 1, slots).await {
        report.problems.push(format!(
            "seeding the store: {}",
            distlock::error::chain(e.as_ref())
        ));
        return report;
    }
    let settings = Settings {
        scenario,
        method: report.strategy.method,
        instance: 0,
        products,
        keys,
        segments: args.segments,
        pause: args.pause,
        retries: args.retries,
        lock_wait: args.lock_wait.unwrap_or(args.request_timeout),
        lease: if scenario == Scenario::Pause {
            PAUSE_LEASE
        } else {
            LOCK_LEASE
        },
        stop_for: if scenario == Scenario::Pause {
            PAUSE_STOP
        } else {
            Duration::ZERO
        },
    };
    let lock_url = report.strategy.lock.as_ref().map(|l| l.url.clone());
    let mut running =
        match Instances::start(instances, &settings, store_url, lock_url.as_deref()).await {
            Ok(running) => running,
            Err(problems) => {
                report
                    .problems
                    .extend(problems.iter().map(ToString::to_string));
                return report;
            }
        };
    let progress = Progress::start(
        format!(
            "{} {} ×{instances}",
            scenario.name(),
            report.strategy.label()
        ),
        u64::from(args.requests),
        Some("req/s"),
    );
    let routing = match (scenario, running.pid(1)) {
        (Scenario::Pause, Some(pid)) => Routing::AroundStopped { pid },
        _ => Routing::RoundRobin,
    };
    let load = load::run(
        &running.addrs(),
        load::Target {
            path: scenario.path(),
            keys,
        },
        u64::from(args.requests),
        args.concurrency,
        args.request_timeout,
        routing,
        &progress,
    )
    .await;
    progress.finish();
    let crashed = running.crashed();
    let mut problems: Vec<String> = crashed.iter().map(ToString::to_string).collect();
    for stopped in running.stop().await {
        if !crashed.iter().any(|c| c.instance == stopped.instance) {
            problems.push(stopped.to_string());
        }
    }
    if load.failed > 0 {
        problems.insert(
            0,
            format!(
                "{} of {} requests failed; first errors: {}",
                load.failed,
                load.requests,
                load.errors.join("; ")
            ),
        );
    }
    match audit::audit(scenario, store, &load).await {
        Ok(a) => report.audit = Some(a),
        Err(e) => problems.push(format!(
            "auditing the store: {}",
            distlock::error::chain(e.as_ref())
        )),
    }
    report.load = Some(load);
    report.problems = problems;
    report
}

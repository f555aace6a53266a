//! distlock's ZooKeeper locks against Apache Curator's on the same path, on the shared ZooKeeper
//! of scripts/services.sh: Curator's `InterProcessMutex` and distlock's lock `N` on
//! `zk://127.0.0.1:2181/C` (Curator's `/C/N`) exclude each other both ways, and so do the two
//! sides of Curator's `InterProcessReadWriteLock` and distlock's read-write lock, whose readers
//! share with each other. The Java side is the testkit's Curator holder; every holder, Java or
//! Rust, runs the shared critical-section protocol (`distlock_testkit::section`), so any two
//! holders inside at once are caught, and lost increments show in the counter.
//!
//! Without ZooKeeper, java, javac or Curator's jars these fail, naming scripts/services.sh zk.

use std::path::Path;
use std::time::Duration;

use distlock::{Client, Guard, Lock};
use distlock_testkit::curator::{self, CuratorHolder, CuratorJob, CuratorMode, CuratorReport};
use distlock_testkit::section::{self, read_counter};
use distlock_testkit::servers::shared_zookeeper;
use distlock_testkit::{Failure, acquiring, check, check_taken};
use tokio::task::JoinHandle;
use zookeeper_client::Client as Zk;

/// Every lock of this file lives under this chroot: distlock's URL path, Curator's path prefix.
const CHROOT: &str = "/distlock-curator";
/// Long enough for a JVM to start and a lock to pass, short enough to fail a stuck test.
const WAIT: Duration = Duration::from_secs(30);
/// How long a contender must stay out while the other side holds.
const STAYS_OUT: Duration = Duration::from_secs(1);

/// A lock of the test's own: distlock's name (a plain node name) and Curator's path.
struct Names {
    name: String,
    path: String,
}

fn names(test: &str) -> Names {
    let name = format!(
        "{test}-{}-{}",
        std::process::id(),
        distlock_testkit::monotonic_ns()
    );
    Names {
        path: format!("{CHROOT}/{name}"),
        name,
    }
}

/// ZooKeeper and the Curator holder are there (or the test fails, naming scripts/services.sh zk).
fn prerequisites() -> Result<&'static str, Failure> {
    let zk = shared_zookeeper()?;
    curator::build()?;
    Ok(zk)
}

async fn distlock(zk: &str) -> Result<Client, Failure> {
    let url = format!("zk://{zk}{CHROOT}?timeout=4s");
    distlock::connect(&url).await.map_err(|e| {
        Failure(format!(
            "distlock cannot connect to {url}: {e}; run scripts/services.sh zk"
        ))
    })
}

fn spawn(job: &CuratorJob) -> Result<CuratorHolder, Failure> {
    curator::build()?.spawn(job)
}

/// The children of `path` (none when it is gone: lock parents are containers).
async fn children(zk: &str, path: &str) -> Result<Vec<String>, Failure> {
    let client = Zk::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(zk)
        .await
        .map_err(|e| Failure(format!("cannot reach ZooKeeper at {zk}: {e}")))?;
    match client.list_children(path).await {
        Ok(mut c) => {
            c.sort();
            Ok(c)
        }
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Failure(format!("listing {path}: {e}"))),
    }
}

/// Fails unless the holder prints nothing for `STAYS_OUT` (it waits for the lock).
async fn stays_out(holder: &mut CuratorHolder, what: &str) -> Result<(), Failure> {
    holder
        .check_waits(STAYS_OUT, &format!("({what}) while distlock held"))
        .await
}

fn check_counter(dir: &Path, expected: u64) -> Result<(), Failure> {
    let counter = read_counter(dir)?;
    check!(
        counter == expected,
        "the counter is {counter} after {expected} exclusive sections"
    );
    Ok(())
}

/// One test's lock, critical-section directory and distlock clients, on the shared ZooKeeper.
struct Case {
    zk: &'static str,
    lock: Names,
    dir: tempfile::TempDir,
    clients: Vec<Client>,
}

impl Case {
    /// The test `test`'s own lock and directory, and `clients` distlock clients; fails unless
    /// ZooKeeper and the Curator holder are there.
    async fn start(test: &str, clients: usize) -> Result<Case, Failure> {
        let zk = prerequisites()?;
        let mut case = Case {
            zk,
            lock: names(test),
            dir: tempfile::tempdir()?,
            clients: Vec::new(),
        };
        for _ in 0..clients {
            case.clients.push(distlock(zk).await?);
        }
        Ok(case)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The test's lock, through the first client.
    fn lock(&self) -> Lock {
        self.clients[0].lock(&self.lock.name)
    }

    /// The test's read-write lock, through the first client.
    fn rw_lock(&self) -> distlock::RwLock {
        self.clients[0].rw_lock(&self.lock.name)
    }

    /// A Curator holder's job on the test's lock and directory.
    fn job(&self, mode: CuratorMode) -> CuratorJob {
        CuratorJob::new(self.zk, &self.lock.path, mode, self.dir())
    }

    /// Fails unless the counter shows `sections` exclusive sections; shuts the clients down;
    /// fails if anything is left in the lock's queue.
    async fn finish(self, sections: u64) -> Result<(), Failure> {
        check_counter(self.dir(), sections)?;
        for client in self.clients {
            client.shutdown().await;
        }
        queue_is_empty(self.zk, &self.lock.path).await
    }
}

/// Fails unless `lock`'s acquire_timeout(800ms) times out `while_` the other side holds.
async fn times_out(lock: &Lock, while_: &str) -> Result<(), Failure> {
    let timed = lock.acquire_timeout(Duration::from_millis(800)).await;
    check!(
        timed.as_ref().is_err_and(|e| e.is_timeout()),
        "distlock's acquire_timeout(800ms) {while_}: {timed:?}"
    );
    Ok(())
}

/// A task waiting up to `WAIT` for `lock`; fails unless it still waits 300 ms later, `while_`
/// the other side holds.
async fn waiter(lock: &Lock, while_: &str) -> Result<JoinHandle<distlock::Result<Guard>>, Failure> {
    let waiter = acquiring(lock.clone(), WAIT);
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !waiter.is_finished(),
        "distlock's waiter finished {while_}: {:?}",
        waiter.await
    );
    Ok(waiter)
}

/// Fails unless the counter values `written` by distlock's exclusive sections (`ours`) are not
/// one block: sections of `theirs` came between them (they really contended).
fn came_between(mut written: Vec<u64>, ours: &str, theirs: &str) -> Result<(), Failure> {
    written.sort_unstable();
    let (first, last) = (written[0], written[written.len() - 1]);
    check!(
        last - first + 1 > written.len() as u64,
        "{ours} were one block ({first}..={last}): {theirs} never came between"
    );
    Ok(())
}

/// Nothing is left in the lock's queue once every holder is done.
async fn queue_is_empty(zk: &str, path: &str) -> Result<(), Failure> {
    let left = children(zk, path).await?;
    check!(left.is_empty(), "nodes left under {path}: {left:?}");
    Ok(())
}

/// Curator holds the mutex: distlock's try_acquire is refused and a timed acquire times out (its
/// node leaves the queue); a distlock waiter gets the lock when Curator releases.
#[tokio::test(flavor = "multi_thread")]
async fn curator_mutex_holds_distlock_out() -> Result<(), Failure> {
    let case = Case::start("curator-holds", 1).await?;
    let mut holder = spawn(&case.job(CuratorMode::Mutex).until_line())?;
    let node = holder.wait_for("acquired", WAIT).await?;

    let mutex = case.lock();
    check_taken(&mutex, "distlock took the lock Curator holds").await?;
    times_out(&mutex, "while Curator held").await?;
    let queue = children(case.zk, &case.lock.path).await?;
    let curator_node = node.trim_start_matches("acquired ");
    check!(
        queue == [curator_node],
        "after distlock gave up, the queue is {queue:?}, not Curator's {curator_node}"
    );

    let waiter = waiter(&mutex, "while Curator held").await?;
    holder.send_line().await?;
    let guard = waiter.await??;
    let written = section::exclusive_section(case.dir(), Duration::ZERO).await?;
    check!(
        guard.release().await?,
        "distlock lost the lock it took after Curator"
    );
    holder.finish(WAIT).await?.check()?;
    check!(written == 2, "distlock's section wrote {written}, not 2");
    case.finish(2).await
}

/// distlock holds the mutex: a Curator holder waits; it gets the lock when distlock releases.
#[tokio::test(flavor = "multi_thread")]
async fn distlock_mutex_holds_curator_out() -> Result<(), Failure> {
    let case = Case::start("distlock-holds", 1).await?;
    let mutex = case.lock();
    let guard = mutex.acquire_timeout(WAIT).await?;
    let inside = section::enter_exclusive(case.dir())?;

    let mut holder = spawn(&case.job(CuratorMode::Mutex))?;
    holder.wait_for("waiting", WAIT).await?;
    stays_out(&mut holder, "Curator's mutex").await?;
    let queue = children(case.zk, &case.lock.path).await?;
    check!(
        queue.len() == 2
            && queue
                .iter()
                .all(|n| n.starts_with("_c_") && n.contains("-lock-")),
        "distlock's holder and Curator's waiter should be queued, not {queue:?}"
    );

    check!(inside.leave()? == 1, "distlock's section did not count 1");
    check!(
        guard.release().await?,
        "distlock lost its lock while Curator waited"
    );
    holder.acquires_and_finishes(WAIT).await?;
    case.finish(2).await
}

/// Which distlock lock a task takes: the lock itself, or a side of the read-write lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Mutex,
    Read,
    Write,
}

/// `tasks` distlock tasks (over the case's clients, round robin), each running `iterations`
/// sections of `hold` on the `side` of the case's lock; each task gives what its sections
/// returned (exclusive: the counter written; shared: 1 when another reader was inside).
fn distlock_tasks(
    case: &Case,
    side: Side,
    tasks: usize,
    iterations: usize,
    hold: Duration,
) -> Vec<JoinHandle<Result<Vec<u64>, Failure>>> {
    let (clients, name, dir) = (&case.clients, &case.lock.name, case.dir());
    let mut handles = Vec::new();
    for task in 0..tasks {
        let client = &clients[task % clients.len()];
        let lock = match side {
            Side::Mutex => client.lock(name),
            Side::Read => client.rw_lock(name).read(),
            Side::Write => client.rw_lock(name).write(),
        };
        let dir = dir.to_path_buf();
        handles.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for _ in 0..iterations {
                let guard = lock.acquire_timeout(WAIT).await?;
                let result = match side {
                    Side::Read => u64::from(section::shared_section(&dir, hold).await?),
                    _ => section::exclusive_section(&dir, hold).await?,
                };
                check!(
                    guard.release().await?,
                    "a distlock {side:?} holder lost its lock"
                );
                results.push(result);
            }
            Ok(results)
        }));
    }
    handles
}

async fn join_all(
    handles: Vec<JoinHandle<Result<Vec<u64>, Failure>>>,
) -> Result<Vec<u64>, Failure> {
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await??);
    }
    Ok(all)
}

/// Curator (2 processes × 15) and distlock (4 tasks × 15 over 2 clients) take the mutex on one
/// path at once: no one sees an overlap, the counter is the 90 sections, and Curator's sections
/// came between distlock's (they really contended).
#[tokio::test(flavor = "multi_thread")]
async fn curator_and_distlock_mutex_holders_share_a_counter() -> Result<(), Failure> {
    let case = Case::start("mutex-counter", 2).await?;
    let job = case
        .job(CuratorMode::Mutex)
        .iterations(15)
        .hold(Duration::from_millis(5));
    let mut java = [spawn(&job)?, spawn(&job)?];
    for holder in &mut java {
        holder.wait_for("connected", WAIT).await?;
    }
    let rust = distlock_tasks(&case, Side::Mutex, 4, 15, Duration::from_millis(5));
    let (java, rust) = tokio::join!(
        futures_util::future::try_join_all(java.map(|h| h.finish(WAIT * 2))),
        join_all(rust)
    );
    let (java, rust) = (java?, rust?);
    for report in &java {
        report.check()?;
    }
    came_between(rust, "distlock's 60 sections", "Curator")?;
    case.finish(90).await
}

/// Curator's write lock holds distlock's readers and writers out; distlock's write lock holds
/// Curator's readers and writers out; each side gets in when the other releases.
#[tokio::test(flavor = "multi_thread")]
async fn writers_exclude_readers_and_writers_both_ways() -> Result<(), Failure> {
    let case = Case::start("rw-writers", 1).await?;
    let rw = case.rw_lock();

    // Curator writes.
    let mut writer = spawn(&case.job(CuratorMode::Write).until_line())?;
    writer.wait_for("acquired", WAIT).await?;
    check_taken(
        &rw.read(),
        "a distlock reader got in while Curator's writer held",
    )
    .await?;
    check_taken(
        &rw.write(),
        "a distlock writer got in while Curator's writer held",
    )
    .await?;
    times_out(&rw.write(), "for a writer while Curator's writer held").await?;
    let reader = waiter(&rw.read(), "(a reader) while Curator's writer held").await?;
    writer.send_line().await?;
    let read_guard = reader.await??;
    let shared = section::shared_section(case.dir(), Duration::ZERO).await?;
    check!(!shared, "a reader was inside with distlock's lone reader");
    check!(
        read_guard.release().await?,
        "distlock's reader lost its lock"
    );
    writer.finish(WAIT).await?.check()?;
    check_counter(case.dir(), 1)?;

    // distlock writes.
    let guard = rw.write().acquire_timeout(WAIT).await?;
    let inside = section::enter_exclusive(case.dir())?;
    let (read_job, write_job) = (case.job(CuratorMode::Read), case.job(CuratorMode::Write));
    let (mut reader, mut writer) = (spawn(&read_job)?, spawn(&write_job)?);
    reader.wait_for("waiting", WAIT).await?;
    writer.wait_for("waiting", WAIT).await?;
    let (r, w) = tokio::join!(
        stays_out(&mut reader, "Curator's reader"),
        stays_out(&mut writer, "Curator's writer")
    );
    r?;
    w?;
    check!(
        inside.leave()? == 2,
        "distlock's writer's section did not count 2"
    );
    check!(guard.release().await?, "distlock's writer lost its lock");
    let (r, w) = tokio::join!(reader.finish(WAIT), writer.finish(WAIT));
    let (r, w) = (r?, w?);
    r.check()?;
    w.check()?;
    check!(
        r.nodes().iter().all(|n| n.contains("-__READ__"))
            && w.nodes().iter().all(|n| n.contains("-__WRIT__")),
        "unexpected Curator nodes: {r:?} {w:?}"
    );
    case.finish(3).await
}

/// A distlock reader and a Curator reader are inside at once (each sees the other); a writer of
/// either side waits for both, and the Curator writer gets in once both are gone.
#[tokio::test(flavor = "multi_thread")]
async fn readers_share_across_sides_and_writers_wait_for_them() -> Result<(), Failure> {
    let case = Case::start("rw-readers", 1).await?;
    let rw = case.rw_lock();

    // distlock's reader holds, Curator's reader gets in too, and only once Curator's is inside
    // its section does distlock's enter (a reader looks for others on its way in and out).
    let read_guard = rw.read().acquire_timeout(WAIT).await?;
    let mut reader = spawn(&case.job(CuratorMode::Read).until_line())?;
    reader.wait_for("acquired", WAIT).await?;
    reader_marker_appears(case.dir()).await?;
    let inside = section::enter_shared(case.dir())?;

    // Readers of both sides hold: writers of both sides wait.
    times_out(&rw.write(), "for a writer while two readers held").await?;
    let mut writer = spawn(&case.job(CuratorMode::Write))?;
    writer.wait_for("waiting", WAIT).await?;
    stays_out(&mut writer, "Curator's writer (two readers holding)").await?;

    let reader = reader.release_and_finish(WAIT).await?;
    check!(
        reader.count("shared") == 1,
        "Curator's reader did not see distlock's reader inside: {reader:?}"
    );
    stays_out(&mut writer, "Curator's writer (distlock's reader holding)").await?;
    check!(
        inside.leave()?,
        "distlock's reader did not see Curator's reader inside"
    );
    check!(
        read_guard.release().await?,
        "distlock's reader lost its lock"
    );
    writer.acquires_and_finishes(WAIT).await?;
    case.finish(1).await
}

/// Waits for a reader's marker in the critical-section directory (the Curator reader creates it
/// just after it prints `acquired`).
async fn reader_marker_appears(dir: &Path) -> Result<(), Failure> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for entry in std::fs::read_dir(dir)? {
            if entry?
                .file_name()
                .to_string_lossy()
                .starts_with("inside-reader-")
            {
                return Ok(());
            }
        }
        check!(
            tokio::time::Instant::now() < deadline,
            "Curator's reader never entered its section"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Readers and writers of both sides at once: a Curator reader (8 × 40 ms) and writer (8 ×
/// 10 ms), distlock readers (2 tasks × 8 × 40 ms) and writers (2 tasks × 8 × 10 ms) over two
/// clients: no overlap anywhere, the counter is the 24 writes, Curator's writer came between
/// distlock's, and readers did share.
#[tokio::test(flavor = "multi_thread")]
async fn mixed_readers_and_writers_of_both_sides() -> Result<(), Failure> {
    let case = Case::start("rw-mixed", 2).await?;
    let read_hold = Duration::from_millis(40);
    let write_hold = Duration::from_millis(10);
    let read_job = case.job(CuratorMode::Read).iterations(8).hold(read_hold);
    let write_job = case.job(CuratorMode::Write).iterations(8).hold(write_hold);
    let mut java = [spawn(&read_job)?, spawn(&write_job)?];
    for holder in &mut java {
        holder.wait_for("connected", WAIT).await?;
    }
    let mut rust = distlock_tasks(&case, Side::Read, 2, 8, read_hold);
    let readers = rust.len();
    rust.extend(distlock_tasks(&case, Side::Write, 2, 8, write_hold));
    let (java, rust) = tokio::join!(
        futures_util::future::try_join_all(java.map(|h| h.finish(WAIT * 2))),
        async move {
            let mut results = Vec::new();
            for handle in rust {
                results.push(handle.await??);
            }
            Ok::<_, Failure>(results)
        }
    );
    let (java, rust): (Vec<CuratorReport>, _) = (java?, rust?);
    for report in &java {
        report.check()?;
    }
    let written: Vec<u64> = rust[readers..].iter().flatten().copied().collect();
    came_between(written, "distlock's 16 writes", "Curator's writer")?;
    // Whether two readers happened to be inside at once here depends on the scheduler (a loaded
    // CI machine queued them strictly R, W, R, W): reported, not asserted. That readers of both
    // sides share is proved step by step by `readers_share_across_sides_and_writers_wait_for_them`.
    let rust_shares: u64 = rust[..readers].iter().flatten().sum();
    let java_shares = java[0].count("shared");
    eprintln!("readers that shared: distlock {rust_shares} of 16, Curator {java_shares} of 8");
    case.finish(8 + 2 * 8).await
}

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

use distlock::Client;
use distlock_testkit::curator::{self, CuratorHolder, CuratorJob, CuratorMode, CuratorReport};
use distlock_testkit::section::{self, read_counter};
use distlock_testkit::servers::shared_zookeeper;
use distlock_testkit::{Failure, check, check_taken};
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
    let next = holder.next_event(STAYS_OUT).await;
    check!(
        next.is_err(),
        "{what} went on while distlock held: {next:?}, events {:?}",
        holder.events()
    );
    Ok(())
}

fn check_counter(dir: &Path, expected: u64) -> Result<(), Failure> {
    let counter = read_counter(dir)?;
    check!(
        counter == expected,
        "the counter is {counter} after {expected} exclusive sections"
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
    let zk = prerequisites()?;
    let lock = names("curator-holds");
    let dir = tempfile::tempdir()?;
    let client = distlock(zk).await?;
    let job = CuratorJob::new(zk, &lock.path, CuratorMode::Mutex, dir.path()).until_line();
    let mut holder = spawn(&job)?;
    let node = holder.wait_for("acquired", WAIT).await?;

    let mutex = client.lock(&lock.name);
    check_taken(&mutex, "distlock took the lock Curator holds").await?;
    let timed = mutex.acquire_timeout(Duration::from_millis(800)).await;
    check!(
        timed.as_ref().is_err_and(|e| e.is_timeout()),
        "distlock's acquire_timeout(800ms) while Curator held: {timed:?}"
    );
    let queue = children(zk, &lock.path).await?;
    let curator_node = node.trim_start_matches("acquired ");
    check!(
        queue == [curator_node],
        "after distlock gave up, the queue is {queue:?}, not Curator's {curator_node}"
    );

    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.acquire_timeout(WAIT).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !waiter.is_finished(),
        "distlock's waiter finished while Curator held: {:?}",
        waiter.await
    );
    holder.send_line().await?;
    let guard = waiter.await??;
    let written = section::exclusive_section(dir.path(), Duration::ZERO).await?;
    check!(
        guard.release().await?,
        "distlock lost the lock it took after Curator"
    );
    holder.finish(WAIT).await?.check()?;
    check!(written == 2, "distlock's section wrote {written}, not 2");
    check_counter(dir.path(), 2)?;
    client.shutdown().await;
    queue_is_empty(zk, &lock.path).await
}

/// distlock holds the mutex: a Curator holder waits; it gets the lock when distlock releases.
#[tokio::test(flavor = "multi_thread")]
async fn distlock_mutex_holds_curator_out() -> Result<(), Failure> {
    let zk = prerequisites()?;
    let lock = names("distlock-holds");
    let dir = tempfile::tempdir()?;
    let client = distlock(zk).await?;
    let guard = client.lock(&lock.name).acquire_timeout(WAIT).await?;
    let inside = section::enter_exclusive(dir.path())?;

    let job = CuratorJob::new(zk, &lock.path, CuratorMode::Mutex, dir.path());
    let mut holder = spawn(&job)?;
    holder.wait_for("waiting", WAIT).await?;
    stays_out(&mut holder, "Curator's mutex").await?;
    let queue = children(zk, &lock.path).await?;
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
    holder.wait_for("acquired", WAIT).await?;
    holder.finish(WAIT).await?.check()?;
    check_counter(dir.path(), 2)?;
    client.shutdown().await;
    queue_is_empty(zk, &lock.path).await
}

/// Which distlock lock a task takes: the lock itself, or a side of the read-write lock.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Mutex,
    Read,
    Write,
}

/// `tasks` distlock tasks (over `clients`, round robin), each running `iterations` sections of
/// `hold` on `name`'s `side`; each task gives what its sections returned (exclusive: the counter
/// written; shared: 1 when another reader was inside).
fn distlock_tasks(
    clients: &[Client],
    name: &str,
    side: Side,
    tasks: usize,
    iterations: usize,
    hold: Duration,
    dir: &Path,
) -> Vec<tokio::task::JoinHandle<Result<Vec<u64>, Failure>>> {
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
    handles: Vec<tokio::task::JoinHandle<Result<Vec<u64>, Failure>>>,
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
    let zk = prerequisites()?;
    let lock = names("mutex-counter");
    let dir = tempfile::tempdir()?;
    let clients = [distlock(zk).await?, distlock(zk).await?];
    let job = CuratorJob::new(zk, &lock.path, CuratorMode::Mutex, dir.path())
        .iterations(15)
        .hold(Duration::from_millis(5));
    let mut java = [spawn(&job)?, spawn(&job)?];
    for holder in &mut java {
        holder.wait_for("connected", WAIT).await?;
    }
    let rust = distlock_tasks(
        &clients,
        &lock.name,
        Side::Mutex,
        4,
        15,
        Duration::from_millis(5),
        dir.path(),
    );
    let (java, rust) = tokio::join!(
        futures_util::future::try_join_all(java.map(|h| h.finish(WAIT * 2))),
        join_all(rust)
    );
    let (java, mut rust) = (java?, rust?);
    for report in &java {
        report.check()?;
    }
    check_counter(dir.path(), 90)?;
    rust.sort_unstable();
    let (first, last) = (rust[0], rust[rust.len() - 1]);
    check!(
        last - first + 1 > rust.len() as u64,
        "distlock's 60 sections were one block ({first}..={last}): Curator never came between"
    );
    for client in clients {
        client.shutdown().await;
    }
    queue_is_empty(zk, &lock.path).await
}

/// Curator's write lock holds distlock's readers and writers out; distlock's write lock holds
/// Curator's readers and writers out; each side gets in when the other releases.
#[tokio::test(flavor = "multi_thread")]
async fn writers_exclude_readers_and_writers_both_ways() -> Result<(), Failure> {
    let zk = prerequisites()?;
    let lock = names("rw-writers");
    let dir = tempfile::tempdir()?;
    let client = distlock(zk).await?;
    let rw = client.rw_lock(&lock.name);

    // Curator writes.
    let job = CuratorJob::new(zk, &lock.path, CuratorMode::Write, dir.path()).until_line();
    let mut writer = spawn(&job)?;
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
    let timed = rw.write().acquire_timeout(Duration::from_millis(800)).await;
    check!(
        timed.as_ref().is_err_and(|e| e.is_timeout()),
        "distlock's writer acquire_timeout(800ms) while Curator's writer held: {timed:?}"
    );
    let reader = tokio::spawn({
        let read = rw.read();
        async move { read.acquire_timeout(WAIT).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !reader.is_finished(),
        "distlock's reader finished while Curator's writer held: {:?}",
        reader.await
    );
    writer.send_line().await?;
    let read_guard = reader.await??;
    let shared = section::shared_section(dir.path(), Duration::ZERO).await?;
    check!(!shared, "a reader was inside with distlock's lone reader");
    check!(
        read_guard.release().await?,
        "distlock's reader lost its lock"
    );
    writer.finish(WAIT).await?.check()?;
    check_counter(dir.path(), 1)?;

    // distlock writes.
    let guard = rw.write().acquire_timeout(WAIT).await?;
    let inside = section::enter_exclusive(dir.path())?;
    let read_job = CuratorJob::new(zk, &lock.path, CuratorMode::Read, dir.path());
    let write_job = CuratorJob::new(zk, &lock.path, CuratorMode::Write, dir.path());
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
    check_counter(dir.path(), 3)?;
    client.shutdown().await;
    queue_is_empty(zk, &lock.path).await
}

/// A distlock reader and a Curator reader are inside at once (each sees the other); a writer of
/// either side waits for both, and the Curator writer gets in once both are gone.
#[tokio::test(flavor = "multi_thread")]
async fn readers_share_across_sides_and_writers_wait_for_them() -> Result<(), Failure> {
    let zk = prerequisites()?;
    let lock = names("rw-readers");
    let dir = tempfile::tempdir()?;
    let client = distlock(zk).await?;
    let rw = client.rw_lock(&lock.name);

    // distlock's reader holds, Curator's reader gets in too, and only once Curator's is inside
    // its section does distlock's enter (a reader looks for others on its way in and out).
    let read_guard = rw.read().acquire_timeout(WAIT).await?;
    let job = CuratorJob::new(zk, &lock.path, CuratorMode::Read, dir.path()).until_line();
    let mut reader = spawn(&job)?;
    reader.wait_for("acquired", WAIT).await?;
    reader_marker_appears(dir.path()).await?;
    let inside = section::enter_shared(dir.path())?;

    // Readers of both sides hold: writers of both sides wait.
    let timed = rw.write().acquire_timeout(Duration::from_millis(800)).await;
    check!(
        timed.as_ref().is_err_and(|e| e.is_timeout()),
        "distlock's writer acquire_timeout(800ms) while two readers held: {timed:?}"
    );
    let write_job = CuratorJob::new(zk, &lock.path, CuratorMode::Write, dir.path());
    let mut writer = spawn(&write_job)?;
    writer.wait_for("waiting", WAIT).await?;
    stays_out(&mut writer, "Curator's writer (two readers holding)").await?;

    reader.send_line().await?;
    let reader = reader.finish(WAIT).await?;
    reader.check()?;
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
    writer.wait_for("acquired", WAIT).await?;
    writer.finish(WAIT).await?.check()?;
    check_counter(dir.path(), 1)?;
    client.shutdown().await;
    queue_is_empty(zk, &lock.path).await
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
    let zk = prerequisites()?;
    let lock = names("rw-mixed");
    let dir = tempfile::tempdir()?;
    let clients = [distlock(zk).await?, distlock(zk).await?];
    let read_hold = Duration::from_millis(40);
    let write_hold = Duration::from_millis(10);
    let read_job = CuratorJob::new(zk, &lock.path, CuratorMode::Read, dir.path())
        .iterations(8)
        .hold(read_hold);
    let write_job = CuratorJob::new(zk, &lock.path, CuratorMode::Write, dir.path())
        .iterations(8)
        .hold(write_hold);
    let mut java = [spawn(&read_job)?, spawn(&write_job)?];
    for holder in &mut java {
        holder.wait_for("connected", WAIT).await?;
    }
    let mut rust = distlock_tasks(
        &clients,
        &lock.name,
        Side::Read,
        2,
        8,
        read_hold,
        dir.path(),
    );
    let readers = rust.len();
    rust.extend(distlock_tasks(
        &clients,
        &lock.name,
        Side::Write,
        2,
        8,
        write_hold,
        dir.path(),
    ));
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
    check_counter(dir.path(), 8 + 2 * 8)?;
    let mut written: Vec<u64> = rust[readers..].iter().flatten().copied().collect();
    written.sort_unstable();
    let (first, last) = (written[0], written[written.len() - 1]);
    check!(
        last - first + 1 > written.len() as u64,
        "distlock's 16 writes were one block ({first}..={last}): Curator's writer never came between"
    );
    // Whether two readers happened to be inside at once here depends on the scheduler (a loaded
    // CI machine queued them strictly R, W, R, W): reported, not asserted. That readers of both
    // sides share is proved step by step by `readers_share_across_sides_and_writers_wait_for_them`.
    let rust_shares: u64 = rust[..readers].iter().flatten().sum();
    let java_shares = java[0].count("shared");
    eprintln!("readers that shared: distlock {rust_shares} of 16, Curator {java_shares} of 8");
    for client in clients {
        client.shutdown().await;
    }
    queue_is_empty(zk, &lock.path).await
}

//! Cases that hold for every store with a read-write lock or a semaphore, beyond the suite's
//! per-flavour cases: a backend's test file adds the ones its store supports with
//! [`Suite::case`](crate::Suite::case).

use std::time::Duration;

use distlock::{ErrorKind, OwnerToken};

use crate::{Ctx, Failure, Outcome, check, check_kind, joined};

/// How long a released waiter may take to get in.
const TEN_S: Duration = Duration::from_secs(10);

/// Polls `probe` every 10 ms until it answers true, failing after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut probe: F) -> Outcome
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Failure>>,
{
    let until = tokio::time::Instant::now() + within;
    loop {
        if probe().await? {
            return Ok(());
        }
        if tokio::time::Instant::now() >= until {
            return Err(Failure(format!("{what}: not within {within:?}")));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Readers share the lock; a writer waits while any reader holds and keeps readers out while it
/// holds; tokens increase.
pub async fn readers_share_writers_exclude(ctx: Ctx) -> Outcome {
    let rw = ctx.client.rw_lock(ctx.unique_name("rw"));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let r = rw.read().try_acquire().await?;
        check!(r.is_some(), "a reader was refused while only readers held");
        readers.push(r.unwrap());
    }
    let tokens: Vec<u64> = readers.iter().map(|g| g.fencing_token().get()).collect();
    check!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "reader tokens do not increase: {tokens:?}"
    );
    check!(
        rw.write().try_acquire().await?.is_none(),
        "a writer got in among readers"
    );
    for r in readers {
        check!(r.release().await?, "a reader lost its lock");
    }
    let writer = rw.write().try_acquire().await?;
    check!(
        writer.is_some(),
        "the writer was refused after the readers left"
    );
    let writer = writer.unwrap();
    check!(
        rw.read().try_acquire().await?.is_none(),
        "a reader got in while a writer held"
    );
    check!(writer.release().await?, "the writer lost its lock");
    check!(
        rw.read().try_acquire().await?.is_some(),
        "a reader was refused after the writer left"
    );
    Ok(())
}

/// Once a writer waits, new readers wait behind it (no writer starvation).
pub async fn writer_preference(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("rw");
    let rw = ctx.client.rw_lock(&name);
    let first_reader = rw.read().acquire().await?;
    let writer_lock = ctx.connect().await?.rw_lock(&name).write();
    let writer =
        tokio::spawn(async move { writer_lock.acquire_timeout(Duration::from_secs(20)).await });
    // Once the writer waits, new readers must wait behind it.
    let other = ctx.connect().await?;
    eventually(Duration::from_secs(5), "new readers held back", || {
        let read = other.rw_lock(&name).read();
        async move {
            match read.try_acquire().await? {
                Some(g) => {
                    g.release().await?;
                    Ok(false)
                }
                None => Ok(true),
            }
        }
    })
    .await?;
    check!(
        first_reader.release().await?,
        "the first reader lost its lock"
    );
    let w = joined(
        TEN_S,
        writer,
        "the writer getting the lock after the reader left",
    )
    .await??;
    check!(
        rw.read().try_acquire().await?.is_none(),
        "a reader got in while the writer held"
    );
    w.release().await?;
    let after = rw.read().acquire_timeout(Duration::from_secs(5)).await?;
    after.release().await?;
    Ok(())
}

/// A reader cannot take the write side with the same owner: two readers doing so would deadlock.
pub async fn upgrade_is_refused(ctx: Ctx) -> Outcome {
    let rw = ctx.client.rw_lock(ctx.unique_name("rw"));
    let owner = OwnerToken::random();
    let read = rw.read().owner(owner.clone()).acquire().await?;
    let upgrade = rw.write().owner(owner).try_acquire().await;
    check_kind(&upgrade, ErrorKind::InvalidInput, "read → write upgrade")?;
    check!(read.release().await?, "the reader lost its lock");
    Ok(())
}

/// A semaphore of 3: three permits, a fourth waits for a release, `available_permits` counts.
pub async fn semaphore_counts_permits(ctx: Ctx) -> Outcome {
    let sem = ctx.client.semaphore(ctx.unique_name("sem"), 3);
    check!(
        sem.available_permits().await? == 3,
        "a new semaphore is not free"
    );
    let mut permits = Vec::new();
    for taken in 1..=3u32 {
        let p = sem.try_acquire().await?;
        check!(p.is_some(), "permit {taken} of 3 refused");
        permits.push(p.unwrap());
        let free = sem.available_permits().await?;
        check!(free == 3 - taken, "{free} free after taking {taken} of 3");
    }
    let tokens: Vec<u64> = permits.iter().map(|g| g.fencing_token().get()).collect();
    check!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "permit tokens do not increase: {tokens:?}"
    );
    check!(
        sem.try_acquire().await?.is_none(),
        "a fourth permit of three"
    );
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_timeout(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    check!(permits.pop().unwrap().release().await?, "a permit was lost");
    let woken = joined(TEN_S, waiter, "a released permit reaching the waiter").await??;
    check!(
        sem.available_permits().await? == 0,
        "the waiter's permit is not counted"
    );
    woken.release().await?;
    for p in permits {
        p.release().await?;
    }
    check!(
        sem.available_permits().await? == 3,
        "permits did not all come back"
    );
    Ok(())
}

/// The number of waiters the store shows in line for the fair lock `name`.
async fn fair_waiters(client: &distlock::Client, name: &str) -> Result<u64, Failure> {
    Ok(client
        .status(name)
        .await?
        .iter()
        .filter(|s| s.kind == distlock::LockKind::Fair)
        .find_map(|s| s.waiters)
        .unwrap_or(0))
}

/// A waiter, number `i`, that takes `lock` (within 30 s), notes its number in `order` and lets
/// go a moment later.
fn served_in_turn(
    lock: distlock::Lock,
    i: u64,
    order: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
) -> tokio::task::JoinHandle<Outcome> {
    tokio::spawn(async move {
        let g = lock.acquire_timeout(Duration::from_secs(30)).await?;
        order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
        tokio::time::sleep(Duration::from_millis(5)).await;
        g.release().await?;
        Ok(())
    })
}

/// A fair lock serves waiters of five clients in the order they came (each arrives only once
/// the one before is in line, as the store's status shows).
pub async fn fair_serves_in_arrival_order(ctx: Ctx) -> Outcome {
    use std::sync::{Arc, Mutex};
    let name = ctx.unique_name("fair");
    let holder = ctx.client.fair_lock(&name).acquire().await?;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..5u64 {
        // Separate clients, so no in-process wake-up helps anyone jump the line.
        let lock = ctx.connect().await?.fair_lock(&name);
        waiters.push(served_in_turn(lock, i, order.clone()));
        eventually(Duration::from_secs(5), "the waiter in line", || async {
            Ok(fair_waiters(&ctx.client, &name).await? == i + 1)
        })
        .await?;
    }
    check!(holder.release().await?, "the holder lost its lock");
    for w in waiters {
        joined(Duration::from_secs(30), w, "a fair waiter getting the lock").await??;
    }
    let order = order.lock().unwrap_or_else(|p| p.into_inner()).clone();
    check!(order == vec![0, 1, 2, 3, 4], "served in order {order:?}");
    Ok(())
}

/// A fair waiter killed (SIGKILL) while first in line holds the one behind it up for the
/// lifetime of its place at most, not forever: `within` is the store's bound plus slack.
pub async fn fair_killed_waiter_lapses(ctx: Ctx, within: Duration) -> Outcome {
    use crate::child::{ChildProcess, Role, Spec};
    let name = ctx.unique_name("fair");
    let holder = ctx.client.fair_lock(&name).acquire().await?;
    let spec = Spec {
        url: ctx.url.clone(),
        flavour: "fair".into(),
        role: Role::Hold {
            name: name.clone(),
            lease_ms: 30_000,
        },
    };
    let child = ChildProcess::spawn(&spec)?;
    eventually(Duration::from_secs(10), "the child in line", || async {
        Ok(fair_waiters(&ctx.client, &name).await? == 1)
    })
    .await?;
    child.signal(libc::SIGKILL)?;
    let next = {
        let lock = ctx.connect().await?.fair_lock(&name);
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(60)).await })
    };
    eventually(
        Duration::from_secs(5),
        "the next waiter in line",
        || async { Ok(fair_waiters(&ctx.client, &name).await? == 2) },
    )
    .await?;
    let released = tokio::time::Instant::now();
    check!(holder.release().await?, "the holder lost its lock");
    let got = joined(
        within,
        next,
        "the lock reaching the waiter behind a killed one",
    )
    .await??;
    eprintln!(
        "the waiter behind a killed one got the lock {:?} after the release",
        released.elapsed()
    );
    check!(got.release().await?, "the next holder lost its lock");
    Ok(())
}

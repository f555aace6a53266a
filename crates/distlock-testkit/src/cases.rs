//! Cases that hold for every store with a read-write lock or a semaphore, beyond the suite's
//! per-flavour cases: a backend's test file adds the ones its store supports with
//! [`Suite::case`](crate::Suite::case).

use std::time::Duration;

use distlock::{ErrorKind, OwnerToken};

use crate::{Ctx, Failure, Outcome, check};

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
    let w = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .map_err(|_| Failure("the writer did not get the lock after the reader left".into()))??;
    let w = w?;
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
    check!(
        matches!(&upgrade, Err(e) if e.kind() == ErrorKind::InvalidInput),
        "read → write upgrade answered {upgrade:?}"
    );
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
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .map_err(|_| Failure("a released permit did not reach the waiter".into()))???;
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

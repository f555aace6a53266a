//! Cancelled acquisitions leave nothing behind: no lock held for a lease with no guard, no place
//! in a wait queue holding up the next waiter.

use std::time::Duration;

use distlock::backend::ElectionWrite;
use distlock::{Client, Lock};

use crate::suite::{Ctx, with_lease};
use crate::{Failure, Outcome, check};

/// `acquire()` dropped mid-flight, many times, at different points of its round trip, on a free
/// lock: once the client's background clean-up has run, the lock is free — not after a lease.
///
/// The future is polled a few times (with the runtime free to send its request in between) and
/// then dropped: `tokio::time::timeout` cannot cut closer than the timer's 1 ms tick, by which
/// time a loopback store has answered.
pub(super) async fn cancelled_acquire_leaves_nothing_held(ctx: Ctx) -> Outcome {
    let (name, client, lock) = own_lock(&ctx, "cancelled").await?;
    let mut cancelled = 0;
    for (round, polls, budget) in rounds(40, 8, 50) {
        match poll_then_drop(lock.acquire(), polls, budget).await {
            None => cancelled += 1,
            Some(taken) => {
                check!(
                    taken?.release().await?,
                    "a completed acquisition lost its lock"
                );
            }
        }
        let dropped =
            format!("an acquisition dropped after {polls} polls and {budget:?} (round {round})");
        free_once_flushed(&ctx, &client, &name, &dropped).await?;
    }
    check!(cancelled > 0, "no acquisition was cancelled mid-flight");
    Ok(())
}

/// A lock of the flavour under test, named for `what`, with a 30 s lease, through a client of
/// the case's own (whose background work the case flushes): its name, the client and the lock.
async fn own_lock(ctx: &Ctx, what: &str) -> Result<(String, Client, Lock), Failure> {
    let name = ctx.unique_name(what);
    let client = ctx.connect().await?;
    let lock = with_lease(
        &client,
        (ctx.flavour.make)(&client, &name),
        Duration::from_secs(30),
    );
    Ok((name, client, lock))
}

/// `count` rounds of cutting a call short: each round's number, how many times the call is
/// polled (1 to `most_polls`) and how long after that it may run on (`step_us` µs more each
/// round) before it is dropped.
fn rounds(count: u64, most_polls: u64, step_us: u64) -> impl Iterator<Item = (u64, u64, Duration)> {
    (0..count).map(move |round| {
        (
            round,
            1 + round % most_polls,
            Duration::from_micros(round * step_us),
        )
    })
}

/// Once `client`'s background work has run, the lock `name` is free for a contender at once;
/// `dropped` says what was dropped before.
async fn free_once_flushed(
    ctx: &Ctx,
    client: &distlock::Client,
    name: &str,
    dropped: &str,
) -> Outcome {
    client.flush().await;
    let Some(other) = ctx.contender(name).try_acquire().await? else {
        return Err(crate::Failure(format!(
            "after {dropped}, the lock stayed held"
        )));
    };
    check!(other.release().await?, "the contender lost its lock");
    Ok(())
}

/// Polls `fut` up to `polls` times, yielding in between, then sleeps `budget`; drops it
/// unfinished unless it completed.
async fn poll_then_drop<F: std::future::Future>(
    fut: F,
    polls: u64,
    budget: Duration,
) -> Option<F::Output> {
    use std::task::Poll;
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        if step.is_some() {
            return step;
        }
        tokio::task::yield_now().await;
    }
    if !budget.is_zero() {
        tokio::time::sleep(budget).await;
    }
    None
}

/// `release()` dropped mid-flight, many times, at different points of its round trip: the release
/// goes on in the background, so once the client's background work has run the lock is free —
/// not after a lease (30 s here).
pub(super) async fn cancelled_release_still_frees(ctx: Ctx) -> Outcome {
    let (name, client, lock) = own_lock(&ctx, "cancelled-release").await?;
    let mut cancelled = 0;
    for (round, polls, budget) in rounds(30, 5, 40) {
        let guard = lock.acquire().await?;
        if poll_then_drop(guard.release(), polls, budget)
            .await
            .is_none()
        {
            cancelled += 1;
        }
        let dropped =
            format!("a release dropped after {polls} polls and {budget:?} (round {round})");
        free_once_flushed(&ctx, &client, &name, &dropped).await?;
    }
    check!(cancelled > 0, "no release was cancelled mid-flight");
    Ok(())
}

/// A waiter dropped while waiting leaves its place: after the holder releases, the next waiter
/// gets the lock at once (a fair lock would otherwise keep it for the dead waiter's turn).
pub(super) async fn cancelled_waiter_leaves_the_queue(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("cancelled-waiter");
    let client = ctx.connect().await?;
    let holder = ctx.contender(&name).acquire().await?;
    let waiting = tokio::spawn({
        let lock = (ctx.flavour.make)(&client, &name);
        async move { lock.acquire().await.map(|g| g.fencing_token()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(!waiting.is_finished(), "the waiter got a held lock");
    waiting.abort();
    let _ = waiting.await;
    client.flush().await;
    check!(holder.release().await?, "the holder lost its lock");
    let next = ctx
        .lock(&name)
        .acquire_timeout(Duration::from_secs(3))
        .await
        .map_err(|e| {
            crate::Failure(format!(
                "the next waiter did not get the lock once the cancelled one was gone: {e}"
            ))
        })?;
    check!(next.release().await?, "the next holder lost its lock");
    Ok(())
}

/// Election and latch writes dropped at different points of their flight (a resign aborts the
/// record's refresh; a caller's timeout drops a count-down) leave no transaction open on a
/// connection the client uses again: after each cut, a lock this client takes and releases is
/// free for another client at once. (sqlx 0.9 does not roll back a `BEGIN` whose answer had not
/// arrived when its future was dropped: the statements that next ran on that pooled connection
/// ran inside it, uncommitted, and held their rows until the connection closed.)
pub(super) async fn cut_writes_leave_no_transaction_open(ctx: Ctx) -> Outcome {
    // SQL stores pool connections: with one, every statement after a cut runs on the
    // connection the cut left behind.
    let url = if ["postgres", "postgresql", "mysql", "mariadb"]
        .iter()
        .any(|scheme| ctx.url.starts_with(&format!("{scheme}://")))
    {
        let join = if ctx.url.contains('?') { '&' } else { '?' };
        format!("{}{join}max_connections=1", ctx.url)
    } else {
        ctx.url.clone()
    };
    let client = distlock::connect(&url).await?;
    let backend = client.backend().clone();
    let record = distlock::LockName::new(ctx.unique_name("cut-election"))?;
    let latch = distlock::LockName::new(ctx.unique_name("cut-latch"))?;
    let elections = backend
        .elections()
        .ok_or_else(|| crate::Failure("the store has no elections".into()))?;
    let latches = backend.latches();
    if let Some(latches) = latches {
        latches.latch_set(&latch, 1_000_000).await?;
    }
    let mut cut = 0;
    for round in 0..200u64 {
        let polls = 1 + round % 6;
        let budget = Duration::from_micros((round * 37) % 1500);
        let term = distlock::FencingToken::new(round + 1);
        let write = elections.elect_write(ElectionWrite::new(
            &record,
            term,
            Some("cut"),
            Duration::from_secs(30),
        ));
        let mut cut_now = poll_then_drop(write, polls, budget).await.is_none();
        if let Some(latches) = latches {
            let down = latches.latch_count_down(&latch);
            cut_now |= poll_then_drop(down, polls, budget).await.is_none();
        }
        if !cut_now {
            continue;
        }
        cut += 1;
        client.flush().await;
        for take in 0..2 {
            let name = ctx.unique_name(&format!("after-cut-{round}-{take}"));
            let mine = (ctx.flavour.make)(&client, &name).acquire().await?;
            check!(mine.release().await?, "a lock taken after a cut was lost");
            match ctx
                .contender(&name)
                .acquire_timeout(Duration::from_secs(3))
                .await
            {
                Ok(theirs) => check!(theirs.release().await?, "the contender lost its lock"),
                Err(e) => {
                    return Err(crate::Failure(format!(
                        "after an election or latch write was cut mid-flight ({polls} polls, \
                         {budget:?}, round {round}), a lock this client then took and released \
                         stayed held for another client: {e} (the cut left its transaction \
                         open on a pooled connection?)"
                    )));
                }
            }
        }
    }
    check!(cut > 0, "no write was cut mid-flight");
    Ok(())
}

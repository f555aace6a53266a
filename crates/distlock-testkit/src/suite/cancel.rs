//! Cancelled acquisitions leave nothing behind: no lock held for a lease with no guard, no place
//! in a wait queue holding up the next waiter.

use std::time::Duration;

use crate::suite::Ctx;
use crate::{Outcome, check};

/// `acquire()` dropped mid-flight, many times, at different points of its round trip, on a free
/// lock: once the client's background clean-up has run, the lock is free — not after a lease.
///
/// The future is polled a few times (with the runtime free to send its request in between) and
/// then dropped: `tokio::time::timeout` cannot cut closer than the timer's 1 ms tick, by which
/// time a loopback store has answered.
pub(super) async fn cancelled_acquire_leaves_nothing_held(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("cancelled");
    let client = ctx.connect().await?;
    let lock = (ctx.flavour.make)(&client, &name).lease(Duration::from_secs(30));
    let mut cancelled = 0;
    for round in 0..40u64 {
        let polls = 1 + round % 8;
        let budget = Duration::from_micros(round * 50);
        match poll_then_drop(lock.acquire(), polls, budget).await {
            None => cancelled += 1,
            Some(taken) => {
                check!(
                    taken?.release().await?,
                    "a completed acquisition lost its lock"
                );
            }
        }
        client.flush().await;
        let Some(other) = ctx.contender(&name).try_acquire().await? else {
            return Err(crate::Failure(format!(
                "after an acquisition dropped after {polls} polls and {budget:?} (round {round}), \
                 the lock stayed held"
            )));
        };
        check!(other.release().await?, "the contender lost its lock");
    }
    check!(cancelled > 0, "no acquisition was cancelled mid-flight");
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

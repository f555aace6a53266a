//! Waiting on several masters at once: each master's release notices (the Redis backend's
//! shared subscriber, one pub/sub connection per master), merged into one stream that yields
//! once per burst.
//!
//! One release publishes on every master where a waiter found the lock held, so a client hears
//! about it up to n times. Two things keep that from waking n waiters:
//!
//! * a waiter registers on every master in the same order, synchronously, so each master's
//!   round robin ("wake one waiter of this client") has the same order and picks the same
//!   waiter for the same release;
//! * the merged stream drains whatever the other masters have ready when it yields, so the
//!   woken waiter retries once, not n times;
//! * it yields after a random pause of one to two rounds on the masters (at least
//!   [`NOTICE_JITTER`] of randomness): the releasing client hands
//!   the lock to a waiter of its own at once (the core's in-process wake-up), and the waiters
//!   of other clients, woken by the same release, arrive after that take instead of splitting
//!   the masters' votes with it (and with each other) — a split vote costs every contender a
//!   round of undoing and a retry. This is the Redlock docs' "retry after a random delay",
//!   applied where most collisions start.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::future::Future;

use futures_util::stream::{FuturesUnordered, Stream, StreamExt};

use crate::backend::Wakeups;
use crate::backends::redis::subscriber::SUBSCRIBE_WAIT;

use super::masters::Master;
use super::quorum::{RoundTime, jitter};

/// The least randomness of the pause between a release notice and the retry it wakes.
pub(super) const NOTICE_JITTER: Duration = Duration::from_millis(5);

/// Registers a waiter on `channel` with every connected master, and returns once a majority
/// has confirmed its subscription (or the wait for that ran out: the core's timer then bounds
/// the wait). A master not connected yet is left out: it could not have published anyway.
pub(super) async fn watch(
    masters: &[Master],
    quorum: usize,
    channel: &str,
    round: Arc<RoundTime>,
) -> Wakeups {
    let mut streams = Vec::with_capacity(masters.len());
    let mut confirmations = FuturesUnordered::new();
    for server in masters.iter().filter_map(Master::connected) {
        let (wakeups, confirmed) = server.subscriber.register(channel.to_string(), None);
        streams.push(wakeups);
        confirmations.push(confirmed);
    }
    if streams.is_empty() {
        return Box::pin(futures_util::stream::pending());
    }
    let needed = quorum.min(confirmations.len());
    let _ = tokio::time::timeout(SUBSCRIBE_WAIT, async {
        for _ in 0..needed {
            if confirmations.next().await.is_none() {
                break;
            }
        }
    })
    .await;
    Box::pin(Merged {
        streams,
        round,
        pause: None,
    })
}

/// The masters' wake-ups as one stream: one item per burst of notices.
struct Merged {
    streams: Vec<Wakeups>,
    /// How long a take round takes lately: the pause lets one finish.
    round: Arc<RoundTime>,
    /// The random pause before a notice is passed on, once one came.
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for Merged {
    type Item = ();

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let mut woken = false;
        // Every stream is polled (and drained) each time, so a notice on one master that came
        // with a notice on another is consumed with it, and every stream's waker is registered.
        self.streams.retain_mut(|stream| {
            loop {
                match stream.as_mut().poll_next(cx) {
                    Poll::Ready(Some(())) => woken = true,
                    Poll::Ready(None) => return false,
                    Poll::Pending => return true,
                }
            }
        });
        if woken && self.pause.is_none() {
            let round = self.round.get();
            let pause = round + jitter(round.max(NOTICE_JITTER));
            self.pause = Some(Box::pin(tokio::time::sleep(pause)));
        }
        if let Some(pause) = self.pause.as_mut() {
            if pause.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.pause = None;
            return Poll::Ready(Some(()));
        }
        if self.streams.is_empty() {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

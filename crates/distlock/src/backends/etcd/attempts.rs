//! The attempts of one request (see [`Inner::retrying`](super::Inner::retrying)): sent again
//! after a connection fault, and sent again *beside* an attempt left unanswered for several times
//! the usual answer time, the first answer winning, unless that answer is a conditional write's
//! "compares failed" that an earlier attempt still in flight may have caused.

use std::time::Duration;

use crate::backends::moving_average::MovingAverage;
use crate::error::{Error, ErrorKind, Result};

/// The most attempts of one request in flight at once; past it the oldest is given up.
const MOST_IN_FLIGHT: usize = 8;

/// A moving average of how long answered requests took: an attempt unanswered for many times
/// that is sent again beside it. etcd-client spreads requests over every endpoint, a member cut
/// off (connection open, nothing answered) included: without this every third request waited
/// for a member that would never answer.
#[derive(Default)]
pub(super) struct AnswerTimes(MovingAverage);

impl AnswerTimes {
    /// The least wait before a second attempt: above a healthy answer on a loaded machine.
    const SHORTEST_WAIT: Duration = Duration::from_millis(25);
    /// The most: below the response timeout, and past an election's usual length.
    const LONGEST_WAIT: Duration = Duration::from_millis(750);

    /// How long an attempt may go unanswered before another is sent beside it.
    fn wait_before_another(&self) -> Duration {
        (self.0.get() * 8).clamp(Self::SHORTEST_WAIT, Self::LONGEST_WAIT)
    }
}

/// How one request is attempted.
pub(super) struct Attempts<'a> {
    pub(super) answers: &'a AnswerTimes,
    /// How long attempts failing with a connection fault go on.
    pub(super) retry_for: Duration,
    /// Whether an attempt left unanswered gets another sent beside it.
    pub(super) hedged: bool,
}

impl Attempts<'_> {
    /// Sends the request (`send` makes one attempt) until an attempt answers, or fails with an
    /// error `error` does not call a connection fault, or `retry_for` has passed.
    ///
    /// An answer that is not `settled` (a conditional write whose compares failed) while an
    /// earlier attempt is still in flight may have failed *because* that attempt landed first (a
    /// hedged delete finds the key already deleted by the attempt before it): no more attempts
    /// are sent, the ones in flight are awaited, and the unsettled answer is returned only when
    /// none of them settles. An attempt given up (a connection fault, or past
    /// [`MOST_IN_FLIGHT`]) may still have landed and its fate is not known; the unsettled answer
    /// then stands, which errs towards "not done": a release then reports its holding lost,
    /// never a lost one as kept.
    pub(super) async fn run<T, E, Fut>(
        &self,
        settled: impl Fn(&T) -> bool,
        error: impl Fn(E) -> Error,
        mut send: impl FnMut() -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = std::result::Result<T, E>>,
    {
        let until = crate::core::deadline::instant_after(self.retry_for);
        let mut nap = Duration::from_millis(10);
        let mut attempt = || {
            let attempt = send();
            Box::pin(async move {
                let sent = tokio::time::Instant::now();
                (attempt.await, sent.elapsed())
            })
        };
        // Oldest first. Each attempt sent beside others waits twice as long as the one before
        // (an election can leave several unanswered); past MOST_IN_FLIGHT the oldest is dropped.
        let mut in_flight = vec![attempt()];
        let mut wait = self.answers.wait_before_another();
        let mut unsettled = None;
        loop {
            let another = self.hedged && unsettled.is_none() && tokio::time::Instant::now() < until;
            tokio::select! {
                ((answer, took), i, _) = futures_util::future::select_all(in_flight.iter_mut()) => {
                    drop(in_flight.remove(i));
                    let failed = match answer {
                        Ok(answer) => {
                            self.answers.0.record(took);
                            if settled(&answer) || in_flight.is_empty() {
                                return Ok(answer);
                            }
                            unsettled = Some(answer);
                            continue;
                        }
                        Err(e) => error(e),
                    };
                    if let Some(answer) = unsettled.take() {
                        if in_flight.is_empty() {
                            return Ok(answer);
                        }
                        unsettled = Some(answer);
                        continue;
                    }
                    if failed.kind() != ErrorKind::Connection {
                        return Err(failed);
                    }
                    if !in_flight.is_empty() {
                        continue;
                    }
                    if tokio::time::Instant::now() + nap >= until {
                        return Err(failed);
                    }
                    tokio::time::sleep(nap).await;
                    nap = (nap * 2).min(Duration::from_millis(320));
                    in_flight.push(attempt());
                }
                () = tokio::time::sleep(wait), if another => {
                    if in_flight.len() == MOST_IN_FLIGHT {
                        drop(in_flight.remove(0));
                    }
                    in_flight.push(attempt());
                    wait = (wait * 2).min(AnswerTimes::LONGEST_WAIT);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Runs a hedged request whose attempt `n` answers `answers[n]` after its delay.
    async fn hedged(answers: &[(u64, bool)]) -> (bool, usize) {
        let times = AnswerTimes::default();
        let attempts = Attempts {
            answers: &times,
            retry_for: Duration::from_secs(5),
            hedged: true,
        };
        let sent = Mutex::new(0);
        let answer = attempts
            .run(
                |done: &bool| *done,
                |e: Error| e,
                || {
                    let mut n = sent.lock().unwrap();
                    let (after_ms, done) = answers[*n];
                    *n += 1;
                    async move {
                        tokio::time::sleep(Duration::from_millis(after_ms)).await;
                        Ok(done)
                    }
                },
            )
            .await
            .unwrap();
        let sent = *sent.lock().unwrap();
        (answer, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedged_write_failing_because_the_first_landed_waits_for_the_first() {
        // The first attempt deletes the key but answers late; the one sent beside it finds the
        // key gone and answers first.
        assert_eq!(hedged(&[(300, true), (1, false)]).await, (true, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsettled_answer_stands_when_no_attempt_settles() {
        assert_eq!(hedged(&[(300, false), (1, false)]).await, (false, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quick_answer_is_not_sent_twice() {
        assert_eq!(hedged(&[(1, false)]).await, (false, 1));
        assert_eq!(hedged(&[(1, true)]).await, (true, 1));
    }
}

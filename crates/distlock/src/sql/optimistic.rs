//! Optimistic concurrency: read a row with its version, compute, write back only if the version
//! is unchanged (`UPDATE … SET …, version = version + 1 WHERE id = ? AND version = ?`), and try
//! again on a conflict — with a bounded number of attempts and a jittered pause in between, so
//! writers that collided do not collide again in lockstep.
//!
//! No lock is held between the read and the write: nothing waits, and a writer that dies leaves
//! nothing behind. Under heavy contention most attempts conflict; that is the technique's cost
//! (the retry count tells you how much you pay).
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! // Not run by the doctests: it needs a PostgreSQL server.
//! use distlock::sql::optimistic::{Cas, Retry, retry_on_conflict};
//! use sqlx::Row;
//!
//! let done = retry_on_conflict(&Retry::default(), |_attempt| async {
//!     let row = sqlx::query("SELECT stock, version FROM product WHERE id = 1")
//!         .fetch_one(&pool).await?;
//!     let (stock, version): (i64, i64) = (row.get(0), row.get(1));
//!     if stock == 0 {
//!         return Ok(Cas::Done(false)); // sold out: nothing to write
//!     }
//!     let written = sqlx::query(
//!         "UPDATE product SET stock = $1, version = version + 1 WHERE id = 1 AND version = $2",
//!     )
//!     .bind(stock - 1).bind(version).execute(&pool).await?;
//!     Ok::<_, sqlx::Error>(if written.rows_affected() == 1 { Cas::Done(true) } else { Cas::Conflict })
//! })
//! .await?;
//! println!("sold: {}, after {} retries", done.value, done.retries);
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// What one attempt of the read-compute-write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cas<T> {
    /// The write went through (or there was nothing to write): stop with this value.
    Done(T),
    /// The version had changed since the read: someone else wrote first. Try again.
    Conflict,
}

/// How often and how patiently to try again.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Retry {
    /// Attempts in all, the first included (at least 1).
    pub attempts: u32,
    /// The pause before the first retry, doubled for each further one...
    pub base: Duration,
    /// ...up to this. Each pause is a random point in [0, step] ("full jitter").
    pub cap: Duration,
}

impl Default for Retry {
    /// 50 attempts, pauses of up to 1 ms doubling to at most 50 ms.
    fn default() -> Self {
        Retry {
            attempts: 50,
            base: Duration::from_millis(1),
            cap: Duration::from_millis(50),
        }
    }
}

impl Retry {
    /// `attempts` in all (the first included), pausing with full jitter from `base`, doubled
    /// for each further retry, up to `cap`.
    pub const fn new(attempts: u32, base: Duration, cap: Duration) -> Self {
        Retry {
            attempts,
            base,
            cap,
        }
    }

    fn pause(&self, retry: u32) -> Duration {
        let step = self
            .base
            .saturating_mul(1u32 << retry.min(20))
            .min(self.cap);
        let micros = step.as_micros() as u64;
        Duration::from_micros(getrandom::u64().unwrap_or(0) % (micros + 1))
    }
}

/// A committed attempt: its value and how many conflicts came before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Committed<T> {
    /// What the successful attempt returned.
    pub value: T,
    /// Conflicts (failed attempts) before it.
    pub retries: u32,
}

/// Why [`retry_on_conflict`] gave up.
#[derive(Debug)]
#[non_exhaustive]
pub enum OptimisticError<E> {
    /// Every attempt conflicted.
    Exhausted {
        /// Attempts made.
        attempts: u32,
    },
    /// An attempt failed with the caller's error (not a conflict); no retry was made.
    Failed(E),
}

impl<E: fmt::Display> fmt::Display for OptimisticError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptimisticError::Exhausted { attempts } => {
                write!(f, "optimistic update conflicted {attempts} times in a row")
            }
            OptimisticError::Failed(e) => write!(f, "optimistic update failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for OptimisticError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OptimisticError::Failed(e) => Some(e),
            OptimisticError::Exhausted { .. } => None,
        }
    }
}

/// Runs `attempt` (given the attempt number, from 0) until it returns [`Cas::Done`], at most
/// `retry.attempts` times, pausing with jitter after each [`Cas::Conflict`]. An `Err` from an
/// attempt ends the loop at once.
///
/// # Cancel Safety
///
/// Dropping the future between attempts leaves nothing behind; dropping it during an attempt is
/// as safe as dropping that attempt's own queries.
pub async fn retry_on_conflict<T, E, F, Fut>(
    retry: &Retry,
    mut attempt: F,
) -> Result<Committed<T>, OptimisticError<E>>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<Cas<T>, E>>,
{
    let attempts = retry.attempts.max(1);
    for n in 0..attempts {
        match attempt(n).await.map_err(OptimisticError::Failed)? {
            Cas::Done(value) => return Ok(Committed { value, retries: n }),
            Cas::Conflict if n + 1 < attempts => tokio::time::sleep(retry.pause(n)).await,
            Cas::Conflict => {}
        }
    }
    Err(OptimisticError::Exhausted { attempts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_retries_and_gives_up() {
        let done = retry_on_conflict(&Retry::default(), |n| async move {
            Ok::<_, std::io::Error>(if n < 3 { Cas::Conflict } else { Cas::Done(n) })
        })
        .await
        .unwrap();
        assert_eq!(
            done,
            Committed {
                value: 3,
                retries: 3
            }
        );

        let retry = Retry {
            attempts: 4,
            ..Retry::default()
        };
        let mut calls = 0;
        let err = retry_on_conflict(&retry, |_| {
            calls += 1;
            async { Ok::<Cas<()>, std::io::Error>(Cas::Conflict) }
        })
        .await
        .unwrap_err();
        assert!(matches!(err, OptimisticError::Exhausted { attempts: 4 }));
        assert_eq!(calls, 4);

        let err = retry_on_conflict(&retry, |_| async {
            Err::<Cas<()>, _>(std::io::Error::other("boom"))
        })
        .await
        .unwrap_err();
        assert!(matches!(err, OptimisticError::Failed(_)));
    }

    #[test]
    fn pauses_stay_under_the_cap() {
        let retry = Retry::default();
        for n in 0..30 {
            assert!(retry.pause(n) <= retry.cap);
        }
    }
}

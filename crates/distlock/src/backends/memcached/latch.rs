//! Count-down latches in memcached: one item per latch with its count as a decimal number, never
//! expiring, on the server the latch's name picks (docs.md, "Leader election and the count-down
//! latch"). A missing item counts 0.

use async_trait::async_trait;

use super::conn::{Conn, Fault, Item, Task};

/// Rounds of one set before it gives up on an item that keeps changing under it.
const MAX_ROUNDS: usize = 16;

fn parse_count(item: &Item) -> Result<u64, Fault> {
    // memcached pads a number a decrement shortened with spaces.
    item.value.trim().parse().map_err(|_| {
        Fault::Reply(format!(
            "a latch item that is not distlock's: {:?}",
            item.value
        ))
    })
}

/// [`crate::backend::Latches::latch_set`]: `add` the count; over a latch at 0, check-and-set it.
pub(super) struct Set {
    pub(super) key: String,
    pub(super) count: u64,
}

#[async_trait]
impl Task for Set {
    type Output = bool;

    async fn run(&self, conn: &mut Conn) -> Result<bool, Fault> {
        let count = self.count.to_string();
        for _ in 0..MAX_ROUNDS {
            let stored = match conn.get(&self.key).await? {
                None => conn.add(&self.key, &count, 0).await?,
                Some(item) if parse_count(&item)? > 0 => return Ok(false),
                // Only the item at 0 just read: a count set meanwhile is not overwritten.
                Some(item) => conn.swap(&self.key, &count, 0, item.cas).await?,
            };
            if stored {
                return Ok(true);
            }
        }
        Err(Fault::Reply(format!(
            "(the latch item changed under {MAX_ROUNDS} attempts in a row)"
        )))
    }
}

/// [`crate::backend::Latches::latch_count_down`]: memcached's own decrement, one atomic step that
/// stops at 0 and does not create a missing item.
pub(super) struct CountDown {
    pub(super) key: String,
}

#[async_trait]
impl Task for CountDown {
    type Output = u64;

    async fn run(&self, conn: &mut Conn) -> Result<u64, Fault> {
        Ok(conn.decrement(&self.key).await?.unwrap_or(0))
    }
}

/// [`crate::backend::Latches::latch_count`].
pub(super) struct Count {
    pub(super) key: String,
}

#[async_trait]
impl Task for Count {
    type Output = u64;

    async fn run(&self, conn: &mut Conn) -> Result<u64, Fault> {
        match conn.get(&self.key).await? {
            Some(item) => parse_count(&item),
            None => Ok(0),
        }
    }
}

//! Take, extend and release: each a short sequence of meta commands on one connection, every
//! change guarded by the CAS of the item it read (docs.md, "The algorithm").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::conn::{Conn, Fault, Task};
use super::keys::Keys;

/// A fencing counter lives this long from its creation, then starts again from the clock.
const FENCE_TTL: u32 = 24 * 3600;
/// Rounds of one take, extend or release before it gives up on an item that keeps changing
/// under it (each round lost a race to another client, which made progress).
const MAX_ROUNDS: usize = 16;

/// What the lock item holds: the owner, and its fencing token once drawn (`-` before).
pub(super) fn value(owner: &str, token: Option<u64>) -> String {
    match token {
        Some(t) => format!("{owner} {t}"),
        None => format!("{owner} -"),
    }
}

fn parse_value(value: &str) -> Result<(&str, Option<u64>), Fault> {
    let bad = || Fault::Reply(format!("a lock item that is not distlock's: {value:?}"));
    let (owner, token) = value.split_once(' ').ok_or_else(bad)?;
    match token {
        "-" => Ok((owner, None)),
        t => t.parse().map(|t| (owner, Some(t))).map_err(|_| bad()),
    }
}

fn too_busy() -> Fault {
    Fault::Reply(format!(
        "(the lock item changed under {MAX_ROUNDS} attempts in a row)"
    ))
}

/// The wall clock in microseconds: where a new fencing counter starts.
fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One attempt to take a lock.
pub(super) struct Take<'a> {
    pub(super) k: Keys,
    pub(super) owner: &'a str,
    /// The item's expiry in seconds.
    pub(super) ttl: u32,
}

pub(super) enum Taken {
    /// Taken (or the owner's own holding confirmed) with this token.
    Yes(u64),
    /// Someone else holds it; about this long is left of its lease.
    Held(Option<Duration>),
}

impl Take<'_> {
    /// Draws a token for the pending item whose CAS is `cas`, then marks it granted: the
    /// counter moves only while this taker's item sits in the lock key. `None` if the item
    /// changed meanwhile (it expired and another taker added theirs): nothing was granted.
    async fn grant(&self, conn: &mut Conn, cas: u64) -> Result<Option<u64>, Fault> {
        let token = conn.bump(&self.k.fence, now_micros(), FENCE_TTL).await?;
        let granted = value(self.owner, Some(token));
        let stored = conn.swap(&self.k.lock, &granted, self.ttl, cas).await?;
        Ok(stored.then_some(token))
    }

    /// One round: `None` when it lost a race and should look again. It reads before it adds:
    /// waiters poll every few milliseconds, and a poll of a held lock is then one round trip.
    async fn round(&self, conn: &mut Conn) -> Result<Option<Taken>, Fault> {
        let Some(item) = conn.get(&self.k.lock).await? else {
            // Free: add the pending item, which fails if another taker was first.
            let pending = value(self.owner, None);
            return Ok(match conn.add(&self.k.lock, &pending, self.ttl).await? {
                Some(cas) => self.grant(conn, cas).await?.map(Taken::Yes),
                None => None,
            });
        };
        let (holder, token) = parse_value(&item.value)?;
        if holder != self.owner {
            // `t` counts whole seconds of memcached's clock: the item ends within it.
            let left = u64::try_from(item.ttl)
                .ok()
                .map(|s| Duration::from_secs(s.max(1)));
            return Ok(Some(Taken::Held(left)));
        }
        match token {
            // The owner's own holding: restart its lease, same token.
            Some(t) => {
                let kept = conn
                    .swap(&self.k.lock, &item.value, self.ttl, item.cas)
                    .await?;
                Ok(kept.then_some(Taken::Yes(t)))
            }
            // The owner's own take, cut off after its add (a cancelled call): finish it.
            None => Ok(self.grant(conn, item.cas).await?.map(Taken::Yes)),
        }
    }
}

#[async_trait]
impl Task for Take<'_> {
    type Output = Taken;

    async fn run(&self, conn: &mut Conn) -> Result<Taken, Fault> {
        for _ in 0..MAX_ROUNDS {
            if let Some(taken) = self.round(conn).await? {
                return Ok(taken);
            }
        }
        Err(too_busy())
    }
}

/// Restarts the lease of one holding.
pub(super) struct Extend {
    pub(super) k: Keys,
    /// The item's value while that holding is there.
    pub(super) ours: String,
    pub(super) ttl: u32,
}

#[async_trait]
impl Task for Extend {
    type Output = bool;

    async fn run(&self, conn: &mut Conn) -> Result<bool, Fault> {
        for _ in 0..MAX_ROUNDS {
            let Some(item) = conn.get(&self.k.lock).await? else {
                return Ok(false);
            };
            if item.value != self.ours {
                return Ok(false);
            }
            // Only the item just read: never a lease that is no longer this holding's.
            if conn
                .swap(&self.k.lock, &self.ours, self.ttl, item.cas)
                .await?
            {
                return Ok(true);
            }
        }
        Err(too_busy())
    }
}

/// Frees one holding (`token`), or whatever holding the owner has (`None`).
pub(super) struct Release<'a> {
    pub(super) k: Keys,
    pub(super) owner: &'a str,
    pub(super) token: Option<u64>,
}

#[async_trait]
impl Task for Release<'_> {
    type Output = bool;

    async fn run(&self, conn: &mut Conn) -> Result<bool, Fault> {
        for _ in 0..MAX_ROUNDS {
            let Some(item) = conn.get(&self.k.lock).await? else {
                return Ok(false);
            };
            let (holder, held) = parse_value(&item.value)?;
            if holder != self.owner || self.token.is_some_and(|t| held != Some(t)) {
                return Ok(false);
            }
            // Deletes exactly the item read: never a holding taken since.
            if conn.delete(&self.k.lock, item.cas).await? {
                return Ok(true);
            }
        }
        Err(too_busy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        assert_eq!(parse_value(&value("ab", Some(7))).unwrap(), ("ab", Some(7)));
        assert_eq!(parse_value(&value("ab", None)).unwrap(), ("ab", None));
        assert!(parse_value("ab").is_err());
        assert!(parse_value("ab x").is_err());
    }
}

//! Take, extend and release: each a short sequence of meta commands on one connection, every
//! change guarded by the CAS of the item it read (docs.md, "The algorithm").

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::conn::{Conn, Fault, Item, Task};
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

/// The holding part of a lock item's value (`<owner> <token>`), without the record a grant
/// puts before it (see [`took`]): what extend and release compare.
pub(super) fn holding_part(value: &str) -> &str {
    value
        .rsplit_once('\n')
        .map_or(value, |(_, holding)| holding)
}

/// What a grant stores before the holding: `<taken, ms since the epoch>\t<holder record>\n`
/// (before, so the value still ends with the token, as it always did). The time is this
/// client's clock (memcached has no clock a client can read cheaply); the record has no control
/// characters, so the newline cannot occur in it.
fn took() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format!("{ms}\t{}\n", crate::status::Holder::this_process_record())
}

/// The time and holder record of a lock item's value, if its grant stored them.
pub(super) fn parse_took(value: &str) -> (Option<i64>, Option<&str>) {
    let Some((took, _)) = value.rsplit_once('\n') else {
        return (None, None);
    };
    match took.split_once('\t') {
        Some((ms, record)) => (ms.parse().ok(), Some(record)),
        None => (None, None),
    }
}

pub(super) fn parse_value(value: &str) -> Result<(&str, Option<u64>), Fault> {
    let bad = || Fault::Reply(format!("a lock item that is not distlock's: {value:?}"));
    let (owner, token) = holding_part(value).split_once(' ').ok_or_else(bad)?;
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
        // Only a grant writes the record; the owner's re-take and extend keep the item's value.
        let mut granted = took();
        granted.push_str(&value(self.owner, Some(token)));
        let stored = conn.swap(&self.k.lock, &granted, self.ttl, cas).await?;
        Ok(stored.then_some(token))
    }

    /// One round: `None` when it lost a race and should look again. It reads before it adds:
    /// waiters poll every few milliseconds, and a poll of a held lock is then one round trip
    /// (an `add` would also allocate an item only to throw it away).
    async fn round(&self, conn: &mut Conn) -> Result<Option<Taken>, Fault> {
        let item = match conn.get(&self.k.lock).await? {
            Some(item) => item,
            // Free: add the pending item, which fails if another taker was first, and read
            // what is there after it: this taker's pending item (and its CAS, for the grant) or
            // the other taker's, answered below as any item is.
            None => {
                let pending = value(self.owner, None);
                match conn.add_and_get(&self.k.lock, &pending, self.ttl).await? {
                    Some(item) => item,
                    // Added and gone already (a forced release): look again.
                    None => return Ok(None),
                }
            }
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
            // The owner's own pending item: just added above, or left by its take cut off after
            // the add (a cancelled call, or a grant refused for memory): finish it.
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

/// A lock's item and counter as they are (a status).
pub(super) struct Inspect {
    pub(super) k: Keys,
}

#[async_trait]
impl Task for Inspect {
    /// The lock item, if any, and the counter (the last token drawn), if any.
    type Output = (Option<Item>, Option<u64>);

    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault> {
        let item = conn.get(&self.k.lock).await?;
        let counter = match conn.get(&self.k.fence).await? {
            Some(c) => Some(c.value.trim().parse().map_err(|_| Fault::Reply(c.value))?),
            None => None,
        };
        Ok((item, counter))
    }
}

/// Removes the lock item whoever holds it, and advances the counter first: the counter moves
/// while the removed item still blocks every take, and the delete names the item read before
/// (CAS), so no take can draw a token between the two (a take draws only while its own item is
/// in the key). If the item changed between the read and the delete (its holder renewed it),
/// the round is tried again; the counter then moves more than once, which is harmless.
pub(super) struct ForceRelease {
    pub(super) k: Keys,
}

#[async_trait]
impl Task for ForceRelease {
    /// The item removed, if there was one, and the counter after it moved.
    type Output = (Option<Item>, u64);

    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault> {
        for _ in 0..MAX_ROUNDS {
            let item = conn.get(&self.k.lock).await?;
            let fence = conn.bump(&self.k.fence, now_micros(), FENCE_TTL).await?;
            let Some(item) = item else {
                return Ok((None, fence));
            };
            if conn.delete(&self.k.lock, item.cas).await? {
                return Ok((Some(item), fence));
            }
        }
        Err(too_busy())
    }
}

/// Every key the server lists (a status by prefix).
pub(super) struct Dump;

#[async_trait]
impl Task for Dump {
    type Output = Option<Vec<String>>;

    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault> {
        conn.metadump().await
    }
}

/// Restarts the lease of one holding.
pub(super) struct Extend {
    pub(super) k: Keys,
    /// The item's value while that holding is there (its holding part, see [`holding_part`]).
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
            if holding_part(&item.value) != self.ours {
                return Ok(false);
            }
            // Only the item just read: never a lease that is no longer this holding's. Its
            // value as it is (with the holder record).
            if conn
                .swap(&self.k.lock, &item.value, self.ttl, item.cas)
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
        let granted = format!("{}{}", took(), value("ab", Some(7)));
        assert_eq!(parse_value(&granted).unwrap(), ("ab", Some(7)));
        let (since, record) = parse_took(&granted);
        assert!(since.is_some_and(|ms| ms > 0));
        assert_eq!(record, Some(crate::status::Holder::this_process_record()));
        assert_eq!(parse_took("ab 7"), (None, None));
    }
}

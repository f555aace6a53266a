//! Election records in memcached: a head item with the latest entry, an `alive` item whose
//! expiry says whether the leader is live, and one item per older entry of the log, all on the
//! server the election's name picks (docs.md, "Leader election and the count-down latch").
//!
//! Every change of the head is one check-and-set of the item just read, so the head is a
//! linearizable register and the log's order is the order of those CAS writes. The item of entry
//! `n` is written *before* the CAS that moves the head from `n` to `n + 1`, with content fixed by
//! the head that CAS names: whenever the head says `n + 1`, the item of `n` exists (unless
//! memcached evicted it), and a writer whose CAS fails has written only what the winner writes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::conn::{Conn, Fault, Item, Task};
use super::keys::ElectionKeys;
use crate::backend::{ELECTION_LOG_KEEP, ElectionEntry};
use crate::types::FencingToken;

/// Rounds of one write before it gives up on items that keep changing under it. Only the
/// leader writes, bar a deposed one's last refresh, so a write rarely needs a second round.
const MAX_ROUNDS: u32 = 64;
/// How long an older entry's item lives. Entries are trimmed to the last
/// [`ELECTION_LOG_KEEP`] as the head moves on; the expiry only bounds items a writer left
/// behind (it stalled past the trim, or the head was lost), and an observer reading a day late.
const LOG_TTL: u32 = 24 * 3600;

/// An entry as its item (and the head) store it: `<seq> <term> <1|0> <value>`; the value is the
/// rest of the item, so it may hold spaces and newlines.
fn show_entry(seq: u64, term: u64, value: Option<&str>) -> String {
    match value {
        Some(value) => format!("{seq} {term} 1 {value}"),
        None => format!("{seq} {term} 0 "),
    }
}

fn parse_entry(text: &str) -> Result<ElectionEntry, Fault> {
    let bad = || Fault::Reply(format!("an election item that is not distlock's: {text:?}"));
    let mut parts = text.splitn(4, ' ');
    let (seq, term, has, value) = (parts.next(), parts.next(), parts.next(), parts.next());
    let seq = seq.and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let term = term.and_then(|t| t.parse().ok()).ok_or_else(bad)?;
    let value = match (has, value) {
        (Some("1"), Some(value)) => Some(value.to_string()),
        (Some("0"), Some(_)) => None,
        _ => return Err(bad()),
    };
    Ok(ElectionEntry::new(seq, FencingToken(term), value))
}

/// The head item: `<first seq> <latest entry>`. `first` is the seq this head started at; the
/// log has no entries below it (a head that was lost starts again above every earlier seq).
struct Head {
    first: u64,
    /// The latest entry as stored, which is also its log item's content once it is replaced.
    text: String,
    entry: ElectionEntry,
}

fn parse_head(item: &Item) -> Result<Head, Fault> {
    let bad = || {
        Fault::Reply(format!(
            "an election head that is not distlock's: {:?}",
            item.value
        ))
    };
    let (first, text) = item.value.split_once(' ').ok_or_else(bad)?;
    Ok(Head {
        first: first.parse().map_err(|_| bad())?,
        entry: parse_entry(text)?,
        text: text.to_string(),
    })
}

/// The term an `alive` item carries.
fn parse_term(item: &Item) -> Result<u64, Fault> {
    item.value.trim().parse().map_err(|_| {
        Fault::Reply(format!(
            "an election liveness item that is not distlock's: {:?}",
            item.value
        ))
    })
}

/// Where a new head's seqs start: the wall clock in µs, as a new fencing counter does (ops.rs).
/// A head appends at most one entry per round trip, so its seqs stay below the clock, and a head
/// made after the old one was lost starts above every seq that one gave: an observer's place
/// stays valid, and no old entry item can be mistaken for a new one.
fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

fn too_busy() -> Fault {
    Fault::Reply(format!(
        "(the election's items changed under {MAX_ROUNDS} attempts in a row)"
    ))
}

/// After a lost check-and-set: a short random pause (growing with the rounds lost, at most
/// 4 ms), so writers that keep colliding fall out of step.
async fn backoff(round: u32) {
    let most = 500 * u64::from(round.min(8));
    let micros = getrandom::u64().unwrap_or(0) % (most + 1);
    tokio::time::sleep(Duration::from_micros(micros)).await;
}

/// What a write did to the head.
enum Step {
    /// A larger term is there: nothing changed.
    Refused,
    /// The latest entry is already this `(term, value)`: nothing to append.
    Kept,
    /// A new entry (or a new head) was written.
    Appended,
}

/// [`crate::backend::Elections::elect_write`].
pub(super) struct Write<'a> {
    pub(super) k: ElectionKeys<'a>,
    pub(super) term: u64,
    pub(super) value: Option<&'a str>,
    /// The `alive` item's expiry in seconds.
    pub(super) ttl: u32,
}

impl Write<'_> {
    /// Appends `(term, value)` to the log unless a larger term is there or it is the latest
    /// entry already.
    async fn head(&self, conn: &mut Conn) -> Result<Step, Fault> {
        for round in 0..MAX_ROUNDS {
            if round > 0 {
                backoff(round).await;
            }
            let Some(item) = conn.get(&self.k.head).await? else {
                // The first write, or the head was lost (eviction, restart). A live leader's
                // `alive` item still carries its term: an older term must not start the new
                // head under it.
                if let Some(alive) = conn.get(&self.k.alive).await?
                    && parse_term(&alive)? > self.term
                {
                    return Ok(Step::Refused);
                }
                let first = now_micros();
                let head = format!("{first} {}", show_entry(first, self.term, self.value));
                if conn.add(&self.k.head, &head, 0).await? {
                    return Ok(Step::Appended);
                }
                continue;
            };
            let head = parse_head(&item)?;
            let latest = &head.entry;
            if self.term < latest.term.get() {
                return Ok(Step::Refused);
            }
            if self.term == latest.term.get() && latest.value.as_deref() == self.value {
                return Ok(Step::Kept);
            }
            // The latest entry moves to its own item before the head moves past it: every
            // writer that read this head writes the same item, so losing the CAS below leaves
            // nothing wrong behind.
            conn.set(&self.k.log(latest.seq), &head.text, LOG_TTL)
                .await?;
            let seq = latest.seq + 1;
            let new = format!("{} {}", head.first, show_entry(seq, self.term, self.value));
            if conn.swap(&self.k.head, &new, 0, item.cas).await? {
                // Keep the last ELECTION_LOG_KEEP entries (the head's is one of them).
                if let Some(old) = seq
                    .checked_sub(ELECTION_LOG_KEEP)
                    .filter(|old| *old >= head.first)
                {
                    conn.remove(&self.k.log(old)).await?;
                }
                return Ok(Step::Appended);
            }
        }
        Err(too_busy())
    }

    /// Makes the record live for `ttl` (a value) or ends its liveness (`None`), never touching a
    /// newer term's: `false` if a newer leader's liveness is there (nothing written).
    async fn alive(&self, conn: &mut Conn) -> Result<bool, Fault> {
        let term = self.term.to_string();
        for round in 0..MAX_ROUNDS {
            if round > 0 {
                backoff(round).await;
            }
            let item = conn.get(&self.k.alive).await?;
            let carried = item.as_ref().map(parse_term).transpose()?;
            let done = match (self.value, item) {
                (Some(_), None) => conn.add(&self.k.alive, &term, self.ttl).await?,
                (Some(_), Some(_)) if carried > Some(self.term) => return Ok(false),
                (Some(_), Some(item)) => {
                    conn.swap(&self.k.alive, &term, self.ttl, item.cas).await?
                }
                // Resigning ends only this term's liveness.
                (None, Some(item)) if carried == Some(self.term) => {
                    conn.delete(&self.k.alive, item.cas).await?
                }
                (None, _) => true,
            };
            if done {
                return Ok(true);
            }
        }
        Err(too_busy())
    }
}

#[async_trait]
impl Task for Write<'_> {
    type Output = bool;

    async fn run(&self, conn: &mut Conn) -> Result<bool, Fault> {
        // The head first, then liveness: a reader that finds the alive item carrying this term
        // finds this term's entry in the head (or a newer one), never an older one.
        let step = self.head(conn).await?;
        if let Step::Refused = step {
            return Ok(false);
        }
        let alive = self.alive(conn).await?;
        // A newer leader's liveness appeared after this head step: a refresh that appended
        // nothing changed nothing (the caller is told of the newer term); an appended entry was
        // written before the newer leader's, which overwrote it.
        Ok(alive || matches!(step, Step::Appended))
    }
}

/// [`crate::backend::Elections::elect_current`].
pub(super) struct Current<'a> {
    pub(super) k: ElectionKeys<'a>,
}

#[async_trait]
impl Task for Current<'_> {
    type Output = Option<ElectionEntry>;

    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault> {
        // Liveness first, then the head. A writer moves the head before the liveness, so when
        // the head read second still shows the term the alive item carried, that term's
        // liveness was still there at the head read (bar its expiry in between): the answer
        // holds at that moment. The other order could answer a leader that had resigned.
        let Some(alive) = conn.get(&self.k.alive).await? else {
            return Ok(None);
        };
        let term = parse_term(&alive)?;
        let Some(head) = conn.get(&self.k.head).await? else {
            return Ok(None);
        };
        let entry = parse_head(&head)?.entry;
        Ok((entry.value.is_some() && entry.term.get() == term).then_some(entry))
    }
}

/// [`crate::backend::Elections::elect_log`].
pub(super) struct Log<'a> {
    pub(super) k: ElectionKeys<'a>,
    pub(super) after: Option<u64>,
}

#[async_trait]
impl Task for Log<'_> {
    type Output = Vec<ElectionEntry>;

    async fn run(&self, conn: &mut Conn) -> Result<Self::Output, Fault> {
        let Some(item) = conn.get(&self.k.head).await? else {
            return Ok(Vec::new());
        };
        let head = parse_head(&item)?;
        let latest = head.entry.seq;
        let Some(after) = self.after else {
            return Ok(vec![head.entry]);
        };
        // A place above the latest seq came from an earlier head: this one was started after it
        // was lost, below it (the starting client's clock was behind). Its entries are all
        // after that place, so the reader gets them rather than waiting for the seqs to pass it.
        let after = match after {
            a if a == latest => return Ok(Vec::new()),
            a if a > latest => head.first.saturating_sub(1),
            a => a,
        };
        // Entries the log still keeps, of this head, after the reader's place.
        let from = (after + 1)
            .max(head.first)
            .max((latest + 1).saturating_sub(ELECTION_LOG_KEEP));
        let mut entries = Vec::with_capacity((latest - from + 1) as usize);
        for seq in from..latest {
            // A missing item was trimmed or evicted: skipped (the core reports the gap).
            if let Some(item) = conn.get(&self.k.log(seq)).await? {
                let entry = parse_entry(&item.value)?;
                if entry.seq == seq {
                    entries.push(entry);
                }
            }
        }
        entries.push(head.entry);
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        for value in [Some("node-a:80"), Some(""), Some("a b\r\nc 1 0"), None] {
            let text = show_entry(7, 42, value);
            let entry = parse_entry(&text).unwrap();
            assert_eq!(
                entry,
                ElectionEntry::new(7, FencingToken(42), value.map(str::to_string))
            );
        }
        for bad in ["", "7", "7 42", "7 42 2 x", "x 42 1 v", "7 y 1 v"] {
            assert!(parse_entry(bad).is_err(), "{bad:?}");
        }
        let item = Item {
            value: format!("5 {}", show_entry(9, 3, Some("v"))),
            cas: 1,
            ttl: -1,
        };
        let head = parse_head(&item).unwrap();
        assert_eq!(
            (head.first, head.entry.seq, head.text.as_str()),
            (5, 9, "9 3 1 v")
        );
    }
}

//! Election records and count-down latches on the SQL stores (`sql/schema_sync.sql`), written
//! once over a dialect's statements ([`SyncSql`]).
//!
//! An election's write locks its row, decides ([`records::step`]), writes, appends to the log
//! and tells the watchers, in one transaction; a latch's change is one transaction too, and the
//! step that reaches 0 tells the watchers. PostgreSQL's watchers wake on its notices; MySQL's
//! poll (the core's bounded jittered backoff, 10 to 250 ms).

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Pool;

use super::dialect::{Conn, Dialect, Runs, SqlResult};
use super::{inspect, retried};
use crate::backend::ElectionEntry;
use crate::backends::client_rules::records::{self, Step};
use crate::error::Result;
use crate::sqlx_support::tx;
use crate::types::{FencingToken, LockName};

/// Which entries of an election to read (one of [`Dialect::ENTRIES`]).
#[derive(Clone, Copy)]
pub(crate) enum Entries {
    /// The live leader's, if any (`elect_current.sql`).
    Live,
    /// The latest, live or not (`elect_latest.sql`).
    Latest,
    /// Every entry after this seq, oldest first (`elect_log.sql`).
    After(u64),
}

/// The entries `which` of `election`.
pub(crate) async fn entries<D: SyncSql>(
    pool: &Pool<D::Db>,
    election: &str,
    which: Entries,
) -> SqlResult<Vec<ElectionEntry>> {
    let [live, latest, log] = D::ENTRIES;
    let read = match which {
        Entries::Live => D::entries(live, election, None),
        Entries::Latest => D::entries(latest, election, None),
        Entries::After(seq) => D::entries(log, election, Some(seq)),
    };
    inspect::entries(D::Db::rows(pool, read).await?)
}

/// An election's row as its write finds it (locked).
pub(crate) struct Record {
    /// The latest entry's number (0: none yet).
    pub(crate) seq: i64,
    /// The largest term ever written.
    pub(crate) max_term: i64,
    /// The latest entry's value (`None`: resigned, or none yet).
    pub(crate) value: Option<String>,
}

/// An entry of an election, as a write records it.
pub(crate) struct Entry<'a> {
    pub(crate) election: &'a str,
    pub(crate) seq: i64,
    pub(crate) term: i64,
    pub(crate) value: Option<&'a str>,
    /// How long the record stays live from now, by the server's clock.
    pub(crate) live: Duration,
}

/// A dialect's statements for elections and latches.
#[async_trait]
pub(crate) trait SyncSql: Dialect {
    /// Locks an election's row for the rest of the transaction, making it empty (seq 0, term 0)
    /// if missing.
    async fn elect_lock(conn: &mut Conn<Self>, election: &str) -> SqlResult<Record>;

    /// Appends the entry to the election's log and drops the entries older than the last
    /// [`ELECTION_LOG_KEEP`](crate::backend::ELECTION_LOG_KEEP).
    async fn elect_append(conn: &mut Conn<Self>, entry: &Entry<'_>) -> SqlResult<()>;

    /// Writes the entry to the election's row (live for [`Entry::live`]).
    async fn elect_update(conn: &mut Conn<Self>, entry: &Entry<'_>) -> SqlResult<()>;

    /// Sets the latch's count if it is 0 or the latch is new; `false` if a count is running.
    async fn latch_set(conn: &mut Conn<Self>, name: &str, count: u64) -> SqlResult<bool>;

    /// Counts the latch down by one: the count after, or `None` if it was at 0 already (or
    /// does not exist).
    async fn latch_count_down(conn: &mut Conn<Self>, name: &str) -> SqlResult<Option<u64>>;

    /// The latch's count (0 if it does not exist).
    async fn latch_count(pool: &Pool<Self::Db>, name: &str) -> SqlResult<u64>;
}

/// The key an election's new entries are told and watched under.
pub(crate) fn election_key(election: &LockName) -> String {
    format!("e:{}", election.as_str())
}

/// The key a latch reaching 0 is told and watched under.
pub(crate) fn latch_key(latch: &LockName) -> String {
    format!("l:{}", latch.as_str())
}

/// See [`crate::Backend::elect_write`]. A whole transaction, finished even if the caller is
/// dropped (see [`tx`]).
pub(crate) async fn elect_write<D: SyncSql>(
    pool: Pool<D::Db>,
    election: LockName,
    term: FencingToken,
    value: Option<String>,
    ttl: Duration,
) -> Result<bool> {
    let term = term.get() as i64;
    tx::finished(async move {
        retried::<D, _, _, _>("writing the election record", || async {
            let (name, value) = (election.as_str(), value.as_deref());
            let mut tx = pool.begin().await?;
            let found = D::elect_lock(&mut tx, name).await?;
            let step = records::step(
                found.seq,
                found.max_term,
                found.value.as_deref(),
                term,
                value,
            );
            let (seq, append) = match step {
                Step::Refuse => return Ok(false),
                Step::Refresh => (found.seq, false),
                Step::Append { seq } => (seq, true),
            };
            let entry = Entry {
                election: name,
                seq,
                term,
                value,
                // A resigned record lapses at once.
                live: if value.is_some() { ttl } else { Duration::ZERO },
            };
            if append {
                D::elect_append(&mut tx, &entry).await?;
                D::changed(&mut tx, &election_key(&election)).await?;
            }
            D::elect_update(&mut tx, &entry).await?;
            tx.commit().await?;
            Ok(true)
        })
        .await
    })
    .await
}

/// See [`crate::Backend::latch_set`].
pub(crate) async fn latch_set<D: SyncSql>(
    pool: Pool<D::Db>,
    latch: LockName,
    count: u64,
) -> Result<bool> {
    tx::finished(async move {
        retried::<D, _, _, _>("setting the latch", || async {
            let mut tx = pool.begin().await?;
            let set = D::latch_set(&mut tx, latch.as_str(), count).await?;
            tx.commit().await?;
            Ok(set)
        })
        .await
    })
    .await
}

/// See [`crate::Backend::latch_count_down`].
pub(crate) async fn latch_count_down<D: SyncSql>(
    pool: Pool<D::Db>,
    latch: LockName,
) -> Result<u64> {
    tx::finished(async move {
        retried::<D, _, _, _>("counting the latch down", || async {
            let mut tx = pool.begin().await?;
            let after = D::latch_count_down(&mut tx, latch.as_str()).await?;
            if after == Some(0) {
                D::changed(&mut tx, &latch_key(&latch)).await?;
            }
            tx.commit().await?;
            Ok(after.unwrap_or(0))
        })
        .await
    })
    .await
}

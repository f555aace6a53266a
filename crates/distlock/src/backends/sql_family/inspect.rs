//! The rows the SQL family reads back, decoded once for both dialects: status and
//! forced-release answers (`sql/*status.sql`, `sql/*force*.sql`), and an election's entries.
//! Each statement answers the same columns, in the same order and of the same type, in both
//! dialects and both lock modes (MySQL casts to `SIGNED` where its column is unsigned).

use sqlx::{ColumnIndex, Decode, Row, Type};

use super::dialect::{Picked, SqlResult};
use crate::backend::ElectionEntry;
use crate::backends::client_rules::flavour_rules::{Shown, Side};
use crate::error::{Error, Result};
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind};

/// The columns the SQL family reads, on a row of either database: the bounds a row type must
/// meet are written once, here.
pub(crate) trait Columns {
    /// An integer column (BIGINT, or cast to it).
    fn int(&self, at: usize) -> SqlResult<Option<i64>>;
    /// A text column.
    fn text(&self, at: usize) -> SqlResult<Option<String>>;
}

impl<R> Columns for R
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    fn int(&self, at: usize) -> SqlResult<Option<i64>> {
        self.try_get(at)
    }

    fn text(&self, at: usize) -> SqlResult<Option<String>> {
        self.try_get(at)
    }
}

/// A column no statement answers NULL in.
fn given<T>(value: Option<T>, at: usize) -> SqlResult<T> {
    value.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: at.to_string(),
        source: "unexpected NULL".into(),
    })
}

/// What a status statement binds (see [`Picked`]).
pub(crate) fn selection<'a>(backend: &'static str, which: &'a Selection) -> Result<Picked<'a>> {
    match which {
        Selection::Name(name) => Ok(Picked {
            name: Some(name.as_str()),
            prefix: "",
        }),
        Selection::Prefix(prefix) => Ok(Picked {
            name: None,
            prefix: prefix.as_str(),
        }),
        #[allow(unreachable_patterns)]
        _ => Err(Error::unsupported(backend, "this selection")),
    }
}

/// Decodes status rows: name, token, holder record, since (Unix ms), lease left (ms, NULL for
/// a session holding), last token. Each holding is a mutex's: the SQL stores lock nothing else
/// there.
pub(crate) fn statuses(rows: Vec<impl Columns>) -> SqlResult<Vec<LockStatus>> {
    let status = |row: &dyn Columns| {
        let mut status = LockStatus::new(given(row.text(0)?, 0)?, LockKind::Mutex);
        status.holdings.push(holding(
            given(row.int(1)?, 1)?,
            row.text(2)?,
            row.int(3)?,
            row.int(4)?,
        ));
        status.last_token = row.int(5)?.map(token);
        Ok(status)
    };
    rows.iter().map(|row| status(row)).collect()
}

/// Decodes a forced release's row: the removed holding (see [`removed`]; NULL token: the lock
/// was free), then the fencing counter after the advance.
// Only PostgreSQL answers a forced release in one row.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn forced(row: &impl Columns) -> SqlResult<ForcedRelease> {
    let removed = removed(row)?.into_iter().collect();
    Ok(ForcedRelease::new(removed, token(given(row.int(4)?, 4)?)))
}

/// Decodes the holding a forced release removes from its first four columns: token (NULL:
/// none), holder record, since (Unix ms), lease left (ms, NULL for a session).
pub(crate) fn removed(row: &impl Columns) -> SqlResult<Option<Holding>> {
    Ok(match row.int(0)? {
        Some(t) => Some(holding(t, row.text(1)?, row.int(2)?, row.int(3)?)),
        None => None,
    })
}

/// [`removed`] for every row: the live holdings a statement removed.
pub(crate) fn removed_all(rows: Vec<impl Columns>) -> SqlResult<Vec<Holding>> {
    rows.iter()
        .map(|row| removed(row))
        .filter_map(Result::transpose)
        .collect()
}

/// Decodes the rows of `flavour_status.sql`: name, side, token, holder record, since (Unix ms),
/// lease left (ms), the synchronizer's last token, a semaphore's size (NULL for the others).
/// A side this version does not know is left out.
pub(crate) fn shown(rows: Vec<impl Columns>) -> SqlResult<Vec<Shown>> {
    let shown = |row: &dyn Columns| {
        let Some(side) = Side::from_column(&given(row.text(1)?, 1)?) else {
            return Ok(None);
        };
        let holding = Holding::new(token(given(row.int(2)?, 2)?))
            .holder_record(row.text(3)?.as_deref())
            .since_unix_ms(row.int(4)?)
            .lease_left_ms(given(row.int(5)?, 5)?);
        Ok(Some(Shown {
            side,
            name: given(row.text(0)?, 0)?,
            holding,
            last_token: row.int(6)?,
            permits: row.int(7)?.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
        }))
    };
    rows.iter()
        .map(|row| shown(row))
        .filter_map(Result::transpose)
        .collect()
}

/// Decodes the rows of `waiter_status.sql`: name, family, count of live waiters.
pub(crate) fn waiting(rows: Vec<impl Columns>) -> SqlResult<Vec<(String, String, i64)>> {
    rows.iter()
        .map(|row| {
            Ok((
                given(row.text(0)?, 0)?,
                given(row.text(1)?, 1)?,
                given(row.int(2)?, 2)?,
            ))
        })
        .collect()
}

/// Decodes an election's entries (`elect_*.sql`): seq, term, value.
pub(crate) fn entries(rows: Vec<impl Columns>) -> SqlResult<Vec<ElectionEntry>> {
    rows.iter()
        .map(|row| {
            let seq = given(row.int(0)?, 0)?.max(0) as u64;
            Ok(ElectionEntry::new(
                seq,
                token(given(row.int(1)?, 1)?),
                row.text(2)?,
            ))
        })
        .collect()
}

/// A holding as the statements describe it.
fn holding(
    token_drawn: i64,
    holder: Option<String>,
    since_ms: Option<i64>,
    lease_left_ms: Option<i64>,
) -> Holding {
    let holding = Holding::new(token(token_drawn))
        .holder_record(holder.as_deref())
        .since_unix_ms(since_ms);
    match lease_left_ms {
        Some(ms) => holding.lease_left_ms(ms),
        None => holding,
    }
}

/// Tokens are drawn from counters that start at the clock in µs (at 1 in earlier versions), so
/// they are never negative in the store.
pub(crate) fn token(t: i64) -> FencingToken {
    FencingToken(t.max(0) as u64)
}

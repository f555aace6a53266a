//! Status and forced-release answers of the PostgreSQL and MySQL backends. Both backends' status
//! statements (`sql/status*.sql`) answer rows of one shape, and their forced releases one row
//! of another, in both lock modes, so decoding and building the answers is written once here.

use sqlx::{ColumnIndex, Decode, Row, Type};

use crate::error::{Error, Result};
use crate::status::{ForcedRelease, Holding, LockStatus, Selection};
use crate::types::{FencingToken, LockKind};

/// What a status statement binds: the exact name (`None` for a prefix) and the prefix (empty
/// for an exact name). The statements compare `left(name, length(prefix))`, so a prefix needs
/// no `LIKE` escaping.
pub(crate) fn selection<'a>(
    backend: &'static str,
    which: &'a Selection,
) -> Result<(Option<&'a str>, &'a str)> {
    match which {
        Selection::Name(name) => Ok((Some(name.as_str()), "")),
        Selection::Prefix(prefix) => Ok((None, prefix.as_str())),
        #[allow(unreachable_patterns)]
        _ => Err(Error::unsupported(backend, "this selection")),
    }
}

/// Decodes one status row: name, token, holder record, since (Unix ms), lease left (ms, NULL for
/// a session holding), last token. Each holding is a mutex's: the SQL stores lock nothing else.
pub(crate) fn status_row<R>(row: &R) -> std::result::Result<LockStatus, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut status = LockStatus::new(row.try_get::<String, _>(0)?, LockKind::Mutex);
    status.holdings.push(holding(
        row.try_get(1)?,
        row.try_get(2)?,
        row.try_get(3)?,
        row.try_get(4)?,
    ));
    status.last_token = row.try_get::<Option<i64>, _>(5)?.map(token);
    Ok(status)
}

/// Decodes a forced release's row: the removed holding (see [`removed_holding`]; NULL token:
/// the lock was free), then the fencing counter after the advance.
// Only PostgreSQL answers a forced release in one row.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn forced_row<R>(row: &R) -> std::result::Result<ForcedRelease, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let removed = removed_holding(row)?.into_iter().collect();
    Ok(ForcedRelease::new(removed, token(row.try_get(4)?)))
}

/// Decodes the holding a forced release removes from its first four columns: token (NULL:
/// none), holder record, since (Unix ms), lease left (ms, NULL for a session).
pub(crate) fn removed_holding<R>(row: &R) -> std::result::Result<Option<Holding>, sqlx::Error>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(match row.try_get::<Option<i64>, _>(0)? {
        Some(t) => Some(holding(
            t,
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
        )),
        None => None,
    })
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

//! What `distlock status` and a forced release do in the file (`sql/status.sql`,
//! `sql/force_delete.sql`): ops of the writer, so a forced release and its fencing-counter
//! advance are one transaction.

use rusqlite::{Connection, params};

use super::clock;

/// One live holding as the file has it.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) name: String,
    pub(super) token: i64,
    pub(super) holder: Option<String>,
    pub(super) since_ms: Option<i64>,
    pub(super) lease_left_ms: i64,
    pub(super) last_token: Option<i64>,
}

impl Row {
    /// A holding as `status.sql` and `flavour_status.sql` answer it, in their first six
    /// columns: name, token, holder, since_ms, lease_left_ms, last_token.
    pub(super) fn from_status(row: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            name: row.get(0)?,
            token: row.get(1)?,
            holder: row.get(2)?,
            since_ms: row.get(3)?,
            lease_left_ms: row.get(4)?,
            last_token: row.get(5)?,
        })
    }
}

/// The live holdings of the lock `name`, or of every lock whose name starts with `prefix`.
pub(super) fn status(
    conn: &Connection,
    boot_id: &str,
    name: Option<&str>,
    prefix: &str,
) -> rusqlite::Result<Vec<Row>> {
    conn.prepare_cached(include_str!("sql/status.sql"))?
        .query_map(
            params![name, prefix, boot_id, clock::boottime_ms()],
            Row::from_status,
        )?
        .collect()
}

/// Removes the lock's row and draws its next fencing token, which nobody will hold: every later
/// take draws above it. Answers the removed holding (if it was live) and that token.
pub(super) fn force_release(
    conn: &Connection,
    boot_id: &str,
    name: &str,
) -> rusqlite::Result<(Option<Row>, i64)> {
    let now = clock::boottime_ms();
    let removed = live_removed(
        conn,
        include_str!("sql/force_delete.sql"),
        params![name],
        name,
        boot_id,
        now,
    )?
    .into_iter()
    .next();
    let fence: i64 = conn
        .prepare_cached(include_str!("sql/next_token.sql"))?
        .query_row(params![name, clock::wall_us(), 0], |row| row.get(0))?;
    Ok((removed, fence))
}

/// Runs `delete`, a forced release's statement answering the rows it removed (`token, holder,
/// since_ms, boot_id, expires_ms`), and keeps the holdings of lock `name` that were live at
/// `now`: taken since this boot, their lease not over.
pub(super) fn live_removed(
    conn: &Connection,
    delete: &str,
    params: impl rusqlite::Params,
    name: &str,
    boot_id: &str,
    now: i64,
) -> rusqlite::Result<Vec<Row>> {
    let removed = conn
        .prepare_cached(delete)?
        .query_map(params, |row| {
            Ok((
                Row {
                    name: name.to_string(),
                    token: row.get(0)?,
                    holder: row.get(1)?,
                    since_ms: row.get(2)?,
                    lease_left_ms: row.get::<_, i64>(4)? - now,
                    last_token: None,
                },
                row.get::<_, String>(3)? == boot_id,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(removed
        .into_iter()
        .filter(|(row, this_boot)| *this_boot && row.lease_left_ms > 0)
        .map(|(row, _)| row)
        .collect())
}

//! Session locks on PostgreSQL advisory locks; the holding logic is in
//! [`crate::backends::sql_family::session`].
//!
//! The connection is a [`PgListener`] that listens to nothing: its `try_recv` waits on the
//! socket, so a connection the server ends (`pg_terminate_backend`, shutdown) is noticed at once.
//! Its pool runs `pg_advisory_unlock_all()` on every connection given back, so no path can
//! return a connection that still holds a lock.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgListener, PgPool};

use crate::backends::sql_family::session::{SessionConn, SessionPool};
use crate::error::Result;
use crate::sqlx_support::error::from_sqlx;
use crate::types::{FencingToken, LockName};

pub(crate) struct PgSessions(pub(super) PgPool);

pub(crate) struct PgSessionConn(PgListener);

#[async_trait]
impl SessionPool for PgSessions {
    type Conn = PgSessionConn;
    const BACKEND: &'static str = super::NAME;

    async fn open(&self) -> Result<PgSessionConn> {
        let mut conn = PgListener::connect_with(&self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "opening a session connection", e))?;
        // A lost connection must stay lost: a fresh one would not hold the lock.
        conn.eager_reconnect(false);
        conn.ignore_pool_close_event(true);
        Ok(PgSessionConn(conn))
    }
}

#[async_trait]
impl SessionConn for PgSessionConn {
    // Kills are seen at once through `ended`; pings only catch a silent network.
    const PING_EVERY: Duration = Duration::from_secs(2);

    async fn take(&mut self, name: &LockName) -> Result<Option<FencingToken>> {
        let row = sqlx::query(include_str!("sql/session_take.sql"))
            .bind(name.as_str())
            .bind(crate::status::Holder::this_process_record())
            .fetch_one(&mut self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "trying the advisory lock", e))?;
        Ok(row.get::<Option<i64>, _>(0).map(|t| FencingToken(t as u64)))
    }

    async fn unlock(&mut self, name: &LockName) -> Result<bool> {
        let row = sqlx::query(include_str!("sql/session_release.sql"))
            .bind(name.as_str())
            .fetch_one(&mut self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "releasing the advisory lock", e))?;
        Ok(row.get::<bool, _>(0))
    }

    async fn ping(&mut self) -> bool {
        sqlx::query("SELECT 1").execute(&mut self.0).await.is_ok()
    }

    async fn ended(&mut self) {
        // Nothing is LISTENed on this connection: only the socket's end (or a stray notice,
        // which changes nothing) makes `try_recv` return.
        while let Ok(Some(_)) = self.0.try_recv().await {}
    }

    fn discard(self) {
        // Dropping gives the connection back; the pool's after-release hook unlocks everything
        // on it, or closes it if it no longer answers.
    }
}

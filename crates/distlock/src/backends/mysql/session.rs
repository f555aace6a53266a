//! Session locks on `GET_LOCK`; the holding logic is in [`crate::backends::sql_family::session`].
//!
//! sqlx cannot wait on an idle MySQL socket, so a connection the server kills (`KILL`) is
//! noticed by the next ping, every 250 ms.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::mysql::MySqlPool;
use sqlx::pool::PoolConnection;

use crate::backends::sql_family::session::{SessionConn, SessionPool};
use crate::error::Result;
use crate::sqlx_support::error::from_sqlx;
use crate::types::{FencingToken, LockName};

pub(crate) struct MySqlSessions(pub(super) MySqlPool);

pub(crate) struct MySqlSessionConn(PoolConnection<sqlx::MySql>);

#[async_trait]
impl SessionPool for MySqlSessions {
    type Conn = MySqlSessionConn;
    const BACKEND: &'static str = super::NAME;

    async fn open(&self) -> Result<MySqlSessionConn> {
        let conn = self
            .0
            .acquire()
            .await
            .map_err(|e| from_sqlx(super::NAME, "opening a session connection", e))?;
        Ok(MySqlSessionConn(conn))
    }
}

#[async_trait]
impl SessionConn for MySqlSessionConn {
    const PING_EVERY: Duration = Duration::from_millis(250);

    async fn take(&mut self, name: &LockName) -> Result<Option<FencingToken>> {
        let got: Option<i64> = sqlx::query(include_str!("sql/session_take.sql"))
            .bind(name.as_str())
            .fetch_one(&mut *self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "trying GET_LOCK", e))?
            .get(0);
        if got != Some(1) {
            return Ok(None);
        }
        let drawn = sqlx::query(include_str!("sql/session_token.sql"))
            .bind(name.as_str().as_bytes())
            .bind(crate::status::Holder::this_process_record())
            .execute(&mut *self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "drawing a fencing token", e));
        match drawn {
            Ok(done) => Ok(Some(FencingToken(done.last_insert_id()))),
            Err(e) => {
                // Do not keep a lock nobody will know about.
                let _ = self.unlock(name).await;
                Err(e)
            }
        }
    }

    async fn unlock(&mut self, name: &LockName) -> Result<bool> {
        let released: Option<i64> = sqlx::query(include_str!("sql/session_release.sql"))
            .bind(name.as_str())
            .fetch_one(&mut *self.0)
            .await
            .map_err(|e| from_sqlx(super::NAME, "RELEASE_LOCK", e))?
            .get(0);
        Ok(released == Some(1))
    }

    async fn ping(&mut self) -> bool {
        sqlx::query("SELECT 1").execute(&mut *self.0).await.is_ok()
    }

    async fn ended(&mut self) {
        std::future::pending::<()>().await
    }

    fn discard(mut self) {
        // Closing the connection frees whatever it still holds.
        self.0.close_on_drop();
    }
}

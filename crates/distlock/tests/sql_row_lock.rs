//! The row lock held by the caller's transaction: the protected write commits before the lock is
//! released, on PostgreSQL and MariaDB.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

use std::time::Duration;

use distlock::sql::RowLock;
use sql_cases::db;
use sqlx::AssertSqlSafe;

const TASKS: usize = 8;
const ROUNDS: usize = 10;

/// Each task, holding the row lock, reads the counter, yields (so others would interleave), and
/// writes counter + 1 in the same transaction, then commits. If the lock were released before
/// the commit, a later holder could read the old value and an update would be lost.
macro_rules! no_lost_updates {
    ($pool:expr, $create:literal, $read:literal, $write:literal) => {{
        // The pool, or the test returns: DISTLOCK_SKIP names the server.
        let Some(pool) = $pool.await else { return };
        let table = db::unique_table("rowlock");
        db::execute(&pool, format!($create, t = table)).await;
        let lock_name = format!("{table}/'\"\\%_ü");
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let pool = pool.clone();
            let (table, lock_name) = (table.clone(), lock_name.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let mut tx = pool.lock_row(&lock_name).await.unwrap();
                    let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!($read, t = table)))
                        .fetch_one(&mut *tx)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    sqlx::query(AssertSqlSafe(format!($write, t = table)))
                        .bind(n + 1)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(format!($read, t = table)))
            .fetch_one(&pool)
            .await
            .unwrap();
        db::execute(&pool, format!("DROP TABLE {table}")).await;
        assert_eq!(n, (TASKS * ROUNDS) as i64, "updates were lost");
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_writes_commit_before_release() {
    no_lost_updates!(
        db::pg(),
        "CREATE TABLE {t} (id int PRIMARY KEY, n bigint NOT NULL); INSERT INTO {t} VALUES (1, 0)",
        "SELECT n FROM {t} WHERE id = 1",
        "UPDATE {t} SET n = $1 WHERE id = 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_writes_commit_before_release() {
    no_lost_updates!(
        db::mysql(),
        "CREATE TABLE {t} (id int PRIMARY KEY, n bigint NOT NULL) ENGINE = InnoDB; INSERT INTO {t} VALUES (1, 0)",
        "SELECT n FROM {t} WHERE id = 1",
        "UPDATE {t} SET n = ? WHERE id = 1"
    );
}

/// While one transaction holds the row, `try_lock_row` answers `None`; a rollback frees it.
macro_rules! try_lock_sees_holder {
    ($pool:expr) => {{
        // The pool, or the test returns: DISTLOCK_SKIP names the server.
        let Some(pool) = $pool.await else { return };
        let name = db::unique_table("try");
        let held = pool.lock_row(&name).await.unwrap();
        assert!(pool.try_lock_row(&name).await.unwrap().is_none());
        held.rollback().await.unwrap();
        let again = pool.try_lock_row(&name).await.unwrap();
        assert!(again.is_some(), "the row stayed locked after rollback");
        assert_eq!(
            pool.lock_row("").await.unwrap_err().kind(),
            distlock::ErrorKind::InvalidName
        );
    }};
}

#[tokio::test]
async fn postgres_try_lock_sees_holder() {
    try_lock_sees_holder!(db::pg());
}

#[tokio::test]
async fn mysql_try_lock_sees_holder() {
    try_lock_sees_holder!(db::mysql());
}

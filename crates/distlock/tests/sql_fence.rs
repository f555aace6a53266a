//! The SQL fence on PostgreSQL, MariaDB and SQLite (sqlx): a write by an older holding is
//! refused once a newer one has written, in the caller's own transaction.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

use std::sync::Arc;
use std::time::Duration;

use distlock::fence::SqlFence;
use distlock::{ErrorKind, FencingToken};
use sql_cases::db;
use sqlx::AssertSqlSafe;

/// Writers in the concurrency case.
const WRITERS: u64 = 8;

/// The three cases of the issue, and the single-statement form, for one database. `$pool` is
/// an `Option` of its pool (`None`: skipped); `$insert` writes `(token, note)` to table `{t}`;
/// `$update` sets `v` and `fence` of row 1 if its fence is below the token.
macro_rules! fence_cases {
    ($db:ident, $database:ty, $pool:expr, insert = $insert:literal, update = $update:literal) => {
        mod $db {
            use super::*;

            type Db = $database;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn older_token_is_refused_after_a_newer_write() {
                let Some(pool) = $pool else { return };
                let fence = SqlFence::<Db>::install(&pool).await.unwrap();
                let table = db::unique_table("fence");
                create_log(&pool, &table).await;
                let (t1, t2) = (FencingToken::new(41), FencingToken::new(42));

                let mut tx2 = pool.begin().await.unwrap();
                fence.check(&mut tx2, &table, t2).await.unwrap();
                insert(&mut tx2, &table, t2, "t2").await;
                tx2.commit().await.unwrap();

                let mut tx1 = pool.begin().await.unwrap();
                let refused = fence.check(&mut tx1, &table, t1).await.unwrap_err();
                assert_eq!(refused.kind(), ErrorKind::StaleToken, "{refused}");
                assert!(refused.is_stale_token());
                assert!(refused.to_string().contains("42"), "{refused}");
                tx1.rollback().await.unwrap();

                assert_eq!(log(&pool, &table).await, [(42, "t2".to_string())]);
                assert_eq!(fence.last_token(&pool, &table).await.unwrap(), Some(t2));
                drop_log(&pool, &table).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn equal_token_is_refused_the_second_time() {
                let Some(pool) = $pool else { return };
                let fence = SqlFence::<Db>::install(&pool).await.unwrap();
                let resource = db::unique_table("equal");
                let token = FencingToken::new(7);
                let mut tx = pool.begin().await.unwrap();
                fence.check(&mut tx, &resource, token).await.unwrap();
                tx.commit().await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                let refused = fence.check(&mut tx, &resource, token).await.unwrap_err();
                assert_eq!(refused.kind(), ErrorKind::StaleToken, "{refused}");
                tx.rollback().await.unwrap();
                // A rolled-back check raises nothing: the next token still gets in.
                let mut tx = pool.begin().await.unwrap();
                fence.check(&mut tx, &resource, FencingToken::new(8)).await.unwrap();
                tx.commit().await.unwrap();
            }

            /// Writers take increasing tokens one after the other (as a lock hands them out),
            /// but each lets the next one start before it commits: the next check waits on the
            /// fence row and then passes. Every write lands, in token order.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_writers_with_increasing_tokens_all_land_in_order() {
                let Some(pool) = $pool else { return };
                let fence = SqlFence::<Db>::install(&pool).await.unwrap();
                let table = db::unique_table("order");
                create_log(&pool, &table).await;
                let next = Arc::new(tokio::sync::Mutex::new(0u64));
                let mut writers = Vec::new();
                for _ in 0..WRITERS {
                    let (pool, table, next) = (pool.clone(), table.clone(), next.clone());
                    writers.push(tokio::spawn(async move {
                        let mut turn = next.lock().await;
                        *turn += 1;
                        let token = FencingToken::new(*turn);
                        let mut tx = pool.begin().await.unwrap();
                        fence.check(&mut tx, &table, token).await.unwrap();
                        insert(&mut tx, &table, token, "w").await;
                        drop(turn);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        tx.commit().await.unwrap();
                    }));
                }
                for w in writers {
                    w.await.unwrap();
                }
                // All accepted: the fence refuses any token not above the last, so they were
                // accepted in token order.
                let tokens: Vec<i64> = log(&pool, &table).await.into_iter().map(|r| r.0).collect();
                assert_eq!(tokens, (1..=WRITERS as i64).collect::<Vec<_>>());
                drop_log(&pool, &table).await;
            }

            /// First writes to new resources, many at once (a new product each): every one is
            /// accepted. On MariaDB a check that first looked for the missing row locked the gap
            /// where it would go, and two such first writers then deadlocked on their inserts.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn first_writers_of_new_resources_at_once_are_all_accepted() {
                let Some(pool) = $pool else { return };
                let fence = SqlFence::<Db>::install(&pool).await.unwrap();
                let prefix = db::unique_table("first");
                let mut writers = Vec::new();
                for w in 0..WRITERS {
                    let (pool, prefix) = (pool.clone(), prefix.clone());
                    writers.push(tokio::spawn(async move {
                        for round in 0..25u64 {
                            let resource = format!("{prefix}/{round}/{w}");
                            let mut tx = pool.begin().await.unwrap();
                            fence
                                .check(&mut tx, &resource, FencingToken::new(round + 1))
                                .await
                                .map_err(|e| format!("{resource}: {e}"))?;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            tx.commit().await.unwrap();
                        }
                        Ok::<(), String>(())
                    }));
                }
                for w in writers {
                    w.await.unwrap().unwrap();
                }
                let last = fence.last_token(&pool, &format!("{prefix}/24/0")).await.unwrap();
                assert_eq!(last, Some(FencingToken::new(25)));
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn single_statement_update_refuses_an_older_token() {
                let Some(pool) = $pool else { return };
                let fence = SqlFence::<Db>::install(&pool).await.unwrap();
                let table = db::unique_table("cond");
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TABLE {table} (id INT PRIMARY KEY, v BIGINT NOT NULL, fence BIGINT NOT NULL); \
                     INSERT INTO {table} VALUES (1, 0, 0)"
                )))
                .execute(&pool)
                .await
                .unwrap();
                let write = |v: i64, t: u64| {
                    sqlx::query(AssertSqlSafe(format!($update, t = table)))
                        .bind(v)
                        .bind(t as i64)
                        .bind(t as i64)
                };
                fence.update(&pool, write(20, 2), "row1", FencingToken::new(2)).await.unwrap();
                let refused = fence
                    .update(&pool, write(10, 1), "row1", FencingToken::new(1))
                    .await
                    .unwrap_err();
                assert_eq!(refused.kind(), ErrorKind::StaleToken, "{refused}");
                let v: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT v FROM {table}")))
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert_eq!(v, 20);
                drop_log(&pool, &table).await;
            }

            async fn create_log(pool: &sqlx::Pool<Db>, table: &str) {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TABLE {table} (token BIGINT NOT NULL, note VARCHAR(64) NOT NULL)"
                )))
                .execute(pool)
                .await
                .unwrap();
            }

            async fn insert(
                conn: &mut <Db as sqlx::Database>::Connection,
                table: &str,
                token: FencingToken,
                note: &str,
            ) {
                sqlx::query(AssertSqlSafe(format!($insert, t = table)))
                    .bind(token.get() as i64)
                    .bind(note.to_string())
                    .execute(conn)
                    .await
                    .unwrap();
            }

            async fn log(pool: &sqlx::Pool<Db>, table: &str) -> Vec<(i64, String)> {
                sqlx::query_as(AssertSqlSafe(format!("SELECT token, note FROM {table} ORDER BY token")))
                    .fetch_all(pool)
                    .await
                    .unwrap()
            }

            async fn drop_log(pool: &sqlx::Pool<Db>, table: &str) {
                sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE {table}")))
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }
    };
}

fence_cases!(
    postgres,
    sqlx::Postgres,
    db::pg().await,
    insert = "INSERT INTO {t} (token, note) VALUES ($1, $2)",
    update = "UPDATE {t} SET v = $1, fence = $2 WHERE id = 1 AND fence < $3"
);

fence_cases!(
    mysql,
    sqlx::MySql,
    db::mysql().await,
    insert = "INSERT INTO {t} (token, note) VALUES (?, ?)",
    update = "UPDATE {t} SET v = ?, fence = ? WHERE id = 1 AND fence < ?"
);

fence_cases!(
    sqlite,
    sqlx::Sqlite,
    Some(sqlite().await),
    insert = "INSERT INTO {t} (token, note) VALUES (?, ?)",
    update = "UPDATE {t} SET v = ?, fence = ? WHERE id = 1 AND fence < ?"
);

/// A pool on a fresh SQLite file (kept for the process's life: the tests are short).
async fn sqlite() -> sqlx::SqlitePool {
    let dir = tempfile::tempdir().unwrap().keep();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("fence.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    sqlx::SqlitePool::connect_with(options).await.unwrap()
}

//! The optimistic helper never loses an update: 8 concurrent writers in each of 3 processes
//! increment one row through a version check, on PostgreSQL and MariaDB.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

use std::time::Duration;

use distlock::sql::optimistic::{Cas, Retry, retry_on_conflict};
use sql_cases::db;
use sqlx::AssertSqlSafe;

const PROCESSES: usize = 3;
const WRITERS: usize = 8;
const INCREMENTS: usize = 20;
/// Set in the child processes: "<backend> <table>".
const CHILD_ENV: &str = "DISTLOCK_OPTIMISTIC_CHILD";

/// Patient enough that 24 writers on one row never run out of attempts.
const RETRY: Retry = Retry::new(10_000, Duration::from_millis(1), Duration::from_millis(20));

/// One writer: `INCREMENTS` read-compute-write cycles. Returns the conflicts it retried.
macro_rules! writer {
    ($pool:expr, $table:expr, $write:literal) => {{
        let (pool, table) = ($pool, $table);
        let mut retries = 0;
        for _ in 0..INCREMENTS {
            let done = retry_on_conflict(&RETRY, |_| {
                let (pool, table) = (pool.clone(), table.clone());
                async move {
                    let (n, version): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
                        "SELECT n, version FROM {table} WHERE id = 1"
                    )))
                    .fetch_one(&pool)
                    .await?;
                    // Give the other writers room to interleave between read and write.
                    tokio::task::yield_now().await;
                    let written = sqlx::query(AssertSqlSafe(format!($write, t = table)))
                        .bind(n + 1)
                        .bind(version)
                        .execute(&pool)
                        .await?;
                    Ok::<_, sqlx::Error>(if written.rows_affected() == 1 {
                        Cas::Done(())
                    } else {
                        Cas::Conflict
                    })
                }
            })
            .await
            .expect("an optimistic update gave up");
            retries += done.retries;
        }
        retries
    }};
}

async fn run_writers(backend: &str, table: &str) -> u32 {
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let table = table.to_string();
        let backend = backend.to_string();
        tasks.push(tokio::spawn(async move {
            if backend == "postgres" {
                let pool = db::pg().await.unwrap();
                writer!(
                    pool,
                    table,
                    "UPDATE {t} SET n = $1, version = version + 1 WHERE id = 1 AND version = $2"
                )
            } else {
                let pool = db::mysql().await.unwrap();
                writer!(
                    pool,
                    table,
                    "UPDATE {t} SET n = ?, version = version + 1 WHERE id = 1 AND version = ?"
                )
            }
        }));
    }
    let mut retries = 0;
    for t in tasks {
        retries += t.await.unwrap();
    }
    retries
}

/// Not a test of its own: the body of the child processes the two tests below start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process_role() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (backend, table) = spec.split_once(' ').unwrap();
    let retries = run_writers(backend, table).await;
    // On a line of its own: the test runner's "test … " may already be on this one.
    println!("\nretries={retries} ");
}

/// Runs the writers in `PROCESSES` child processes; returns the conflicts they retried.
async fn across_processes(backend: &str, table: &str) -> u32 {
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(
            tokio::process::Command::new(&exe)
                .args([
                    "child_process_role",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{backend} {table}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let mut retries = 0u32;
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success(), "a writer process failed");
        let text = String::from_utf8_lossy(&out.stdout);
        retries += text
            .lines()
            .find_map(|l| l.split("retries=").nth(1))
            .and_then(|n| n.split_whitespace().next()?.parse::<u32>().ok())
            .expect("a writer process reported no retry count");
    }
    eprintln!(
        "{backend}: {} updates by {PROCESSES}×{WRITERS} writers, {retries} conflicts retried",
        PROCESSES * WRITERS * INCREMENTS
    );
    retries
}

/// Creates a table of one counter row (`$create`, with `{t}` for its name) on `$pool`, has the
/// writer processes of `$backend` increment it, and checks that no update was lost.
macro_rules! never_loses_an_update {
    ($pool:expr, $backend:literal, $create:literal) => {{
        // The pool, or the test returns: DISTLOCK_SKIP names the server.
        let Some(pool) = $pool.await else { return };
        let table = db::unique_table("optimistic");
        db::execute(&pool, format!($create, t = table)).await;
        across_processes($backend, &table).await;
        let (n, version): (i64, i64) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT n, version FROM {table} WHERE id = 1"
        )))
        .fetch_one(&pool)
        .await
        .unwrap();
        db::execute(&pool, format!("DROP TABLE {table}")).await;
        let expected = (PROCESSES * WRITERS * INCREMENTS) as i64;
        assert_eq!((n, version), (expected, expected), "updates were lost");
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_never_loses_an_update() {
    never_loses_an_update!(
        db::pg(),
        "postgres",
        "CREATE TABLE {t} (id int PRIMARY KEY, n bigint NOT NULL, version bigint NOT NULL); \
         INSERT INTO {t} VALUES (1, 0, 0)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_never_loses_an_update() {
    never_loses_an_update!(
        db::mysql(),
        "mysql",
        "CREATE TABLE {t} (id int PRIMARY KEY, n bigint NOT NULL, version bigint NOT NULL) \
         ENGINE = InnoDB; INSERT INTO {t} VALUES (1, 0, 0)"
    );
}

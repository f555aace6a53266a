//! Acquire+release cycles per second of each SQL technique, uncontended (16 tasks, distinct
//! names) and contended (16 tasks, one name). A stand-in until `distlock bench` covers them.
//!
//! ```text
//! cargo run --release -p distlock --features postgres,mysql --example sql_throughput -- \
//!     postgres://postgres@127.0.0.1:5432/distlock_test mysql://root@127.0.0.1:3306/distlock_test
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use distlock::sql::RowLock;

const TASKS: usize = 16;
const RUN: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("| database | technique | uncontended (16 names) | contended (1 name) |");
    println!("|---|---|---|---|");
    for url in std::env::args().skip(1) {
        let db = if url.starts_with("postgres") {
            "postgres"
        } else {
            "mysql"
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        for (technique, url) in [
            ("lease lock", format!("{url}{sep}max_connections=20")),
            (
                "session lock",
                format!("{url}{sep}lock=session&max_connections=20"),
            ),
        ] {
            let client = distlock::connect(&url).await?;
            let c = client.clone();
            let spread = cycles(move |i| {
                let lock = c.lock(format!("bench/{technique}/{i}"));
                async move { lock.acquire().await?.release().await.map(|_| ()) }
            })
            .await?;
            let hot = cycles(move |_| {
                let lock = client.lock(format!("bench/{technique}/hot"));
                async move { lock.acquire().await?.release().await.map(|_| ()) }
            })
            .await?;
            println!("| {db} | {technique} | {spread:.0}/s | {hot:.0}/s |");
        }
        let (spread, hot) = if db == "postgres" {
            let b = distlock::backends::postgres::PostgresBackend::connect(&url).await?;
            row_lock_cycles(b.pool().clone()).await?
        } else {
            let b = distlock::backends::mysql::MysqlBackend::connect(&url).await?;
            row_lock_cycles(b.pool().clone()).await?
        };
        println!("| {db} | row lock (FOR UPDATE, commit) | {spread:.0}/s | {hot:.0}/s |");
    }
    Ok(())
}

/// Row-lock cycles per second on `pool`: uncontended (distinct names), then contended (one).
async fn row_lock_cycles<P>(pool: P) -> distlock::Result<(f64, f64)>
where
    P: RowLock + Clone + Send + Sync + 'static,
{
    let p2 = pool.clone();
    let spread = cycles(move |i| {
        let pool = pool.clone();
        async move {
            let name = format!("bench/row/{i}");
            pool.lock_row(&name).await?.commit().await
        }
    })
    .await?;
    let hot = cycles(move |_| {
        let pool = p2.clone();
        async move { pool.lock_row("bench/row/hot").await?.commit().await }
    })
    .await?;
    Ok((spread, hot))
}

/// Runs `TASKS` tasks, task `i` repeating `cycle(i)` for `RUN`; returns cycles per second.
async fn cycles<F, Fut>(cycle: F) -> distlock::Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock::Result<()>> + Send,
{
    let cycle = Arc::new(cycle);
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (cycle, done) = (cycle.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < RUN {
                cycle(i).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, distlock::Error>(())
        }));
    }
    for t in tasks {
        t.await.expect("a bench task panicked")?;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

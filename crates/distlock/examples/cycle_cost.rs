//! The client's cost of a lock cycle (acquire + release), for counting instructions with
//! callgrind, which the machine's load does not change (docs/benchmarks.md, "The renovation"):
//!
//! ```sh
//! cargo build --release --example cycle_cost --features redis
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/cycle_cost redis://127.0.0.1:6379 1500
//! ```
//!
//! Run it with 500 and with 1,500 cycles: the difference of the two totals over 1,000 is one
//! cycle's cost, start-up excluded. A current-thread runtime keeps the count repeatable.

use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> distlock::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(cycles)) = (args.next(), args.next()) else {
        eprintln!("usage: cycle_cost URL CYCLES");
        std::process::exit(64);
    };
    let Ok(cycles) = cycles.parse::<u32>() else {
        eprintln!("cycle_cost: CYCLES is a whole number, not {cycles:?}");
        std::process::exit(64);
    };
    let client = distlock::connect(&url).await?;
    let lease = Duration::from_secs(30);
    // Warm-up: connections, loaded scripts, prepared statements.
    for i in 0..20 {
        let guard = client
            .lock(format!("cycle-warm-{i}"))
            .lease(lease)
            .acquire()
            .await?;
        guard.release().await?;
    }
    let started = Instant::now();
    for i in 0..cycles {
        let guard = client
            .lock(format!("cycle-{}", i % 64))
            .lease(lease)
            .acquire()
            .await?;
        guard.release().await?;
    }
    let each = started.elapsed() / cycles.max(1);
    println!("{url}: {cycles} cycles, {each:?} each");
    client.shutdown().await;
    Ok(())
}

//! What one client holding many locks costs the Redis server in renewals: holds `--locks` locks
//! (the default 30 s lease, so the watchdog renews each every 10 s) for `--seconds`, and prints
//! the script calls (`EVALSHA`, from `INFO commandstats`, with the time the server spent running
//! them) and the server CPU (`used_cpu_sys + used_cpu_user`, from `INFO cpu`: the scripts, the
//! network and everything else the server does) the holding took, per minute. Run it once
//! as is (renewals in batches of up to 100) and once with `DISTLOCK_RENEW_BATCH=1` (each holding
//! renewed by its own call, as before batching) against a server with no other traffic.
//!
//! ```text
//! redis-server --port 6499 --save '' --appendonly no --daemonize yes
//! cargo run -p distlock --features redis --example renewal_load -- \
//!     [--url redis://127.0.0.1:6499] [--locks 10000] [--seconds 60]
//! ```

use std::time::{Duration, Instant};

/// One `INFO` section's field, as a number.
fn field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The server's script calls so far, the µs it spent in them, and its CPU seconds.
async fn server_counts(
    conn: &mut redis::aio::MultiplexedConnection,
) -> redis::RedisResult<(f64, f64, f64)> {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let evalsha = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or_default();
    let stat = |name: &str| {
        evalsha
            .split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(conn).await?;
    let cpu = field(&cpu, "used_cpu_sys") + field(&cpu, "used_cpu_user");
    Ok((stat("calls"), stat("usec"), cpu))
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = arg(&args, "--url", "redis://127.0.0.1:6499");
    let locks: usize = arg(&args, "--locks", "10000").parse()?;
    let seconds: u64 = arg(&args, "--seconds", "60").parse()?;
    let batch = std::env::var("DISTLOCK_RENEW_BATCH").unwrap_or_else(|_| "100 (default)".into());

    let client = distlock::connect(&url).await?;
    let mut raw = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let names: Vec<String> = (0..locks).map(|i| format!("renewal-load/{i}")).collect();
    let mut guards = Vec::with_capacity(locks);
    for chunk in names.chunks(500) {
        let takes = chunk
            .iter()
            .map(|name| client.lock(name))
            .map(|lock| async move { lock.try_acquire().await });
        for taken in futures_util::future::join_all(takes).await {
            guards.push(taken?.ok_or("a lock of this run was held by someone else")?);
        }
    }
    let (calls_before, usec_before, cpu_before) = server_counts(&mut raw).await?;
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let (calls_after, usec_after, cpu_after) = server_counts(&mut raw).await?;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let calls = calls_after - calls_before;
    println!(
        "{locks} locks held {seconds} s, batch {batch}: {calls} renewal calls ({:.0}/min, \
         {:.3} s/min in scripts), server CPU {:.3} s/min, {lost} lost",
        calls / minutes,
        (usec_after - usec_before) / 1e6 / minutes,
        (cpu_after - cpu_before) / minutes,
    );
    for guard in guards {
        guard.release().await?;
    }
    Ok(())
}

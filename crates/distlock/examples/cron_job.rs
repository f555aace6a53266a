// A cron-style job: every instance is started on schedule and only one of them does the work;
// the others find the lock taken and skip this run.
//
//     cargo run -p distlock --example cron_job -- [URL]       (default: sqlite:cron_job.db)
//
// Exit status, for the scheduler: 0 the job ran; 75 (sysexits' EX_TEMPFAIL) another instance
// holds the lock, so this run was skipped; 130 interrupted (Ctrl-C), the lock released; 1 the job
// or the store failed. CRON_JOB_SECONDS sets how long the pretend job takes (default 1).

use std::process::ExitCode;
use std::time::Duration;

enum Run {
    Done,
    Skipped,
    Interrupted,
}

#[tokio::main]
async fn main() -> ExitCode {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite:cron_job.db".into());
    match run(&url).await {
        Ok(Run::Done) => ExitCode::SUCCESS,
        Ok(Run::Skipped) => {
            eprintln!("nightly-report: skipped, another instance holds the lock");
            ExitCode::from(75)
        }
        Ok(Run::Interrupted) => ExitCode::from(130),
        Err(e) => {
            eprintln!("nightly-report: failed: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> distlock::Result<Run> {
    let client = distlock::connect(url).await?;
    // Never wait: a run that finds the job taken is not needed.
    let Some(guard) = client.lock("nightly-report").try_acquire().await? else {
        return Ok(Run::Skipped);
    };
    // The lease is renewed in the background while the job runs. If renewal fails (the store
    // is unreachable, this process was paused past the lease), stop: another instance may start.
    let outcome = tokio::select! {
        done = nightly_report(guard.fencing_token().get()) => done.map(|()| Run::Done),
        lost = guard.lost() => Err(lost),
        _ = tokio::signal::ctrl_c() => Ok(Run::Interrupted),
    };
    // Release now rather than leave the lock to its lease; `false` means the lease had been lost
    // before the release, so the job may have overlapped another instance's.
    let held = guard.release().await?;
    client.shutdown().await;
    match outcome? {
        Run::Done if !held => Err(distlock::Error::new(
            distlock::ErrorKind::LeaseLost,
            "the lock was lost before the job finished",
        )),
        run => Ok(run),
    }
}

/// The job itself. `token` grows with every run that holds the lock: store it with the results,
/// so that they can refuse an older run's late write (see `distlock::fence`).
async fn nightly_report(token: u64) -> distlock::Result<()> {
    println!("nightly-report: running with fencing token {token}");
    let seconds = std::env::var("CRON_JOB_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok());
    tokio::time::sleep(Duration::from_secs_f64(seconds.unwrap_or(1.0))).await;
    println!("nightly-report: done");
    Ok(())
}

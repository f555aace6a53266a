//! A one-line progress bar on stderr while a run goes on (the demo's requests, a torture run's
//! time), drawn only when stderr is a terminal (so logs, pipes and `--json` consumers never see
//! it).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

const WIDTH: usize = 30;
const REDRAW: Duration = Duration::from_millis(100);

/// Counts finished steps and, on a terminal, redraws the bar until [`finish`](Self::finish).
pub(crate) struct Progress {
    done: Arc<AtomicU64>,
    drawer: Option<JoinHandle<()>>,
}

impl Progress {
    /// A bar for `total` steps labelled `label`, followed by the rate of steps per second
    /// named `rate_unit` (e.g. "req/s") if given; drawn only if stderr is a terminal.
    pub(crate) fn start(label: String, total: u64, rate_unit: Option<&'static str>) -> Self {
        let done = Arc::new(AtomicU64::new(0));
        let drawer = std::io::stderr().is_terminal().then(|| {
            let done = done.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                loop {
                    draw(
                        &label,
                        rate_unit,
                        done.load(Ordering::Relaxed),
                        total,
                        started.elapsed(),
                    );
                    tokio::time::sleep(REDRAW).await;
                }
            })
        });
        Progress { done, drawer }
    }

    /// The counter senders bump once per finished request.
    pub(crate) fn counter(&self) -> Arc<AtomicU64> {
        self.done.clone()
    }

    /// Stops drawing and clears the line.
    pub(crate) fn finish(self) {
        if let Some(drawer) = self.drawer {
            drawer.abort();
            let mut err = std::io::stderr();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

fn draw(label: &str, rate_unit: Option<&str>, done: u64, total: u64, elapsed: Duration) {
    let filled = if total == 0 {
        WIDTH
    } else {
        (done.min(total) as usize * WIDTH) / total as usize
    };
    let rate = match rate_unit {
        Some(unit) => format!(
            " {:.0} {unit}",
            done as f64 / elapsed.as_secs_f64().max(0.001)
        ),
        None => String::new(),
    };
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\r\x1b[2K{label:<28} [{}{}] {done}/{total}{rate}",
        "#".repeat(filled),
        "-".repeat(WIDTH - filled),
    );
    let _ = err.flush();
}

//! distlock's Redis lock against rslock, the most used Rust Redis lock, on the same Redis in one
//! run: acquire + release cycles per second, each worker on its own key (uncontended), library
//! defaults (distlock's watchdog, fencing and re-entry included), the two libraries alternating
//! round by round so that a busy machine slows both alike. `--workload contended` puts every
//! worker of every process on one key and counts hand-offs instead: acquisitions by another
//! worker than the one before, which each holder reads and writes in a file shared by the
//! processes while it holds the lock.
//!
//! ```text
//! cargo run --release -p distlock --features redis --example redis_vs_rslock -- \
//!     [--url redis://127.0.0.1:6379] [--workers 16] [--processes 4] [--seconds 5] [--rounds 3] \
//!     [--workload uncontended|contended]
//! ```
//!
//! Workers are spread over processes (this program started again with `RVR_CHILD` set), as
//! services run as many instances. With `--url redlock://h1:p1,h2:p2,…` (and `--features
//! redlock`) both libraries run Redlock over the same masters.
//!
//! `--cycles N --library distlock|rslock` instead makes exactly N uncontended cycles with one
//! worker in this process and exits: what `scripts/redis-cycle-cost.py` runs against a server
//! under callgrind, to count the server's work per cycle with the real clients.

use std::os::unix::fs::FileExt;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Debug)]
enum Library {
    Distlock,
    Rslock,
}

impl Library {
    fn name(self) -> &'static str {
        match self {
            Library::Distlock => "distlock",
            Library::Rslock => "rslock",
        }
    }
}

struct Settings {
    url: String,
    workers: u32,
    processes: u32,
    seconds: u64,
    rounds: u32,
    contended: bool,
    /// `--cycles N --library L`: N cycles of one library, one worker, then exit.
    cycles: Option<(u64, Library)>,
}

fn settings() -> Result<Settings, String> {
    let mut s = Settings {
        url: "redis://127.0.0.1:6379".into(),
        workers: 16,
        processes: 4,
        seconds: 5,
        rounds: 3,
        contended: false,
        cycles: None,
    };
    let mut library = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--url" => s.url = value.clone(),
            "--workers" => s.workers = number()? as u32,
            "--processes" => s.processes = number()? as u32,
            "--seconds" => s.seconds = number()?,
            "--rounds" => s.rounds = number()? as u32,
            "--cycles" => s.cycles = Some((number()?, Library::Distlock)),
            "--library" => {
                library = Some(match value.as_str() {
                    "distlock" => Library::Distlock,
                    "rslock" => Library::Rslock,
                    other => return Err(format!("--library {other}: distlock or rslock")),
                })
            }
            "--workload" => {
                s.contended = match value.as_str() {
                    "contended" => true,
                    "uncontended" => false,
                    other => return Err(format!("--workload {other}: uncontended or contended")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    match (&mut s.cycles, library) {
        (Some((_, chosen)), Some(library)) => *chosen = library,
        (None, None) => {}
        _ => return Err("--cycles and --library go together".into()),
    }
    if s.workers == 0 || s.processes == 0 || !s.workers.is_multiple_of(s.processes) {
        return Err("--workers must be a positive multiple of --processes".into());
    }
    Ok(s)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if let Ok(child) = std::env::var("RVR_CHILD") {
        let cycles = runtime.block_on(child_main(&child))?;
        println!("{cycles}");
        return Ok(());
    }
    let s = settings()?;
    if let Some((cycles, library)) = s.cycles {
        let took = runtime.block_on(counted_cycles(&s.url, library, cycles))?;
        println!("{cycles} {} cycles in {took:?}", library.name());
        return Ok(());
    }
    let what = if s.contended {
        "contended hand-offs/s (one key)"
    } else {
        "uncontended acquire+release cycles/s"
    };
    println!(
        "{what} on {} — {} workers over {} processes, {} s a run",
        s.url, s.workers, s.processes, s.seconds
    );
    println!(
        "| round | distlock | rslock | distlock / rslock | server CPU µs per cycle, distlock / \
         rslock | clients' CPU µs per cycle, distlock / rslock |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for round in 1..=s.rounds {
        let mut runs = [Run::default(); 2];
        // Alternate which goes first, so neither always gets the quieter half.
        let order = if round % 2 == 1 {
            [Library::Distlock, Library::Rslock]
        } else {
            [Library::Rslock, Library::Distlock]
        };
        for library in order {
            runs[library as usize] = runtime.block_on(run(&s, library, round))?;
        }
        let [d, r] = runs;
        let ratio = d.rate / r.rate;
        ratios.push(ratio);
        println!(
            "| {round} | {:.0} | {:.0} | {ratio:.2} | {:.1} / {:.1} | {:.1} / {:.1} |",
            d.rate, r.rate, d.server_us, r.server_us, d.client_us, r.client_us
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("median distlock / rslock: {:.2}", ratios[ratios.len() / 2]);
    Ok(())
}

/// What one library's run measured.
#[derive(Clone, Copy, Default)]
struct Run {
    /// Cycles (hand-offs, contended) per second over all processes.
    rate: f64,
    /// The servers' CPU (every master's, for Redlock) per cycle, µs.
    server_us: f64,
    /// The client processes' CPU per cycle, µs.
    client_us: f64,
}

/// One library's run: its processes started, waited for and measured. CPU per cycle is less at
/// the mercy of other load on the machine than the rate is.
async fn run(
    s: &Settings,
    library: Library,
    round: u32,
) -> Result<Run, Box<dyn std::error::Error>> {
    let (server_before, clients_before) = (server_cpu(&s.url).await?, children_cpu()?);
    let rate = run_processes(s, library, round)?;
    let server = server_cpu(&s.url).await? - server_before;
    let clients = children_cpu()? - clients_before;
    let cycles = rate * s.seconds as f64;
    Ok(Run {
        rate,
        server_us: server * 1e6 / cycles,
        client_us: clients * 1e6 / cycles,
    })
}

/// The CPU seconds the servers behind `url` have used (`INFO cpu`, user + system; every master
/// of a Redlock URL).
async fn server_cpu(url: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let mut total = 0.0;
    for uri in rslock_uris(url) {
        let mut conn = redis::Client::open(uri)?
            .get_multiplexed_async_connection()
            .await?;
        let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
        for line in info.lines() {
            if let Some(seconds) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                total += seconds.trim().parse::<f64>()?;
            }
        }
    }
    Ok(total)
}

/// The CPU seconds of this process's children that it waited for (`/proc/self/stat`'s cutime
/// and cstime, in the kernel's 100 ticks a second).
fn children_cpu() -> Result<f64, Box<dyn std::error::Error>> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command name, which is in parentheses and may hold spaces: the 14th
    // and 15th of these are cutime and cstime.
    let after_name = stat.rsplit_once(") ").ok_or("malformed /proc/self/stat")?.1;
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks = fields[13].parse::<f64>()? + fields[14].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// One library's cycles (hand-offs, contended) per second over all processes.
fn run_processes(
    s: &Settings,
    library: Library,
    round: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    let per_process = s.workers / s.processes;
    let holders = if s.contended {
        holder_file(library, round)
    } else {
        String::new()
    };
    let children: Vec<_> = (0..s.processes)
        .map(|p| {
            let spec = format!(
                "{}|{}|{}|{}|{}|{}",
                library.name(),
                s.url,
                per_process,
                s.seconds,
                format_args!("r{round}p{p}"),
                holders,
            );
            std::process::Command::new(std::env::current_exe()?)
                .env("RVR_CHILD", spec)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut cycles = 0u64;
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("a {} process failed: {}", library.name(), out.status).into());
        }
        cycles += String::from_utf8_lossy(&out.stdout).trim().parse::<u64>()?;
    }
    if !holders.is_empty() {
        let _ = std::fs::remove_file(&holders);
    }
    Ok(cycles as f64 / s.seconds as f64)
}

/// The file in which the holders of a contended round write who they are (8 bytes, created
/// empty here), so that each can tell whether it took the lock over from another worker.
fn holder_file(library: Library, round: u32) -> String {
    let path = std::env::temp_dir().join(format!(
        "rvr-holder-{}-{}-r{round}",
        library.name(),
        std::process::id()
    ));
    // A failure shows in the children, which open the file.
    let _ = std::fs::write(&path, 0u64.to_le_bytes());
    path.to_string_lossy().into_owned()
}

/// What a worker does while it holds the lock: with a holder file (contended), whether the
/// holder before it was another worker, which it then names there; otherwise nothing to check.
fn took_over(holders: Option<&std::fs::File>, me: u64) -> std::io::Result<bool> {
    let Some(file) = holders else {
        return Ok(true);
    };
    let mut before = [0u8; 8];
    file.read_exact_at(&mut before, 0)?;
    file.write_all_at(&me.to_le_bytes(), 0)?;
    Ok(u64::from_le_bytes(before) != me)
}

/// A child process: `workers` tasks, each cycling on its own key (or, with a holder file, all on
/// one) until the time is up; answers the cycles (the hand-offs) made.
async fn child_main(spec: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let parts: Vec<&str> = spec.split('|').collect();
    let [library, url, workers, seconds, tag, holder_path] = parts[..] else {
        return Err("bad RVR_CHILD".into());
    };
    let workers: u32 = workers.parse()?;
    let until = Instant::now() + Duration::from_secs(seconds.parse()?);
    let counted = Arc::new(AtomicU64::new(0));
    let holders = match holder_path {
        "" => None,
        path => Some(Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)?,
        )),
    };
    // Contended: one key per library and round, the holder file's name.
    let key = |w: u32| match holder_path {
        "" => format!("rvr/{library}/{tag}/{w}"),
        path => format!("rvr/{library}/{}", path.rsplit('/').next().unwrap_or(path)),
    };
    let me = |w: u32| u64::from(std::process::id()) << 16 | u64::from(w + 1);
    let mut tasks = Vec::new();
    match library {
        "distlock" => {
            let client = distlock::connect(url).await?;
            for w in 0..workers {
                let lock = client.lock(key(w)).lease(LEASE);
                let (counted, holders) = (counted.clone(), holders.clone());
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < until {
                        let guard = lock.acquire().await.map_err(|e| e.to_string())?;
                        let new =
                            took_over(holders.as_deref(), me(w)).map_err(|e| e.to_string())?;
                        guard.release().await.map_err(|e| e.to_string())?;
                        // Acquisitions after the end (each worker's last wait) do not count.
                        if Instant::now() < until {
                            counted.fetch_add(u64::from(new), Ordering::Relaxed);
                        }
                    }
                    Ok::<(), String>(())
                }));
            }
        }
        _ => {
            let manager = Arc::new(rslock::LockManager::new(rslock_uris(url)));
            for w in 0..workers {
                let manager = manager.clone();
                let key = key(w);
                let (counted, holders) = (counted.clone(), holders.clone());
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < until {
                        let lock = manager
                            .acquire_no_guard(key.as_bytes(), LEASE)
                            .await
                            .map_err(|e| e.to_string())?;
                        let new =
                            took_over(holders.as_deref(), me(w)).map_err(|e| e.to_string())?;
                        manager.unlock(&lock).await;
                        // Acquisitions after the end (each worker's last wait) do not count.
                        if Instant::now() < until {
                            counted.fetch_add(u64::from(new), Ordering::Relaxed);
                        }
                    }
                    Ok::<(), String>(())
                }));
            }
        }
    }
    for t in tasks {
        t.await??;
    }
    Ok(counted.load(Ordering::Relaxed))
}

/// Exactly `cycles` uncontended acquire + release cycles of `library` by one worker on one key,
/// as a user's program makes them (library defaults); answers how long they took.
async fn counted_cycles(
    url: &str,
    library: Library,
    cycles: u64,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let key = format!("rvr/{}/counted", library.name());
    let started = Instant::now();
    match library {
        Library::Distlock => {
            let client = distlock::connect(url).await?;
            let lock = client.lock(&key).lease(LEASE);
            for _ in 0..cycles {
                lock.acquire().await?.release().await?;
            }
        }
        Library::Rslock => {
            let manager = rslock::LockManager::new(rslock_uris(url));
            for _ in 0..cycles {
                let lock = manager
                    .acquire_no_guard(key.as_bytes(), LEASE)
                    .await
                    .map_err(|e| e.to_string())?;
                manager.unlock(&lock).await;
            }
        }
    }
    Ok(started.elapsed())
}

/// rslock's servers for `url`: the URL itself for one Redis; for `redlock://h1:p1,h2:p2,…`, one
/// `redis://` URI per master, so both libraries run Redlock over the same masters.
fn rslock_uris(url: &str) -> Vec<String> {
    match url.strip_prefix("redlock://") {
        Some(hosts) => hosts
            .split(['/', '?'])
            .next()
            .unwrap_or_default()
            .split(',')
            .map(|h| format!("redis://{h}"))
            .collect(),
        None => vec![url.to_string()],
    }
}

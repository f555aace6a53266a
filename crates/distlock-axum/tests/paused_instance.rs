//! A paused instance: a real process serving the layer over HTTP is stopped (SIGSTOP) while its
//! handler holds the lock, for longer than the lease, and resumed (SIGCONT) while another
//! holds the lock. Its handler must not run one more step then: the process's clock already
//! says the lease is lost, whichever of its timers the runtime fires first.
//!
//! The instance is this test binary run again with one test selected,
//! [`paused_instance_child`], which serves only when the test sets [`CHILD_DIR`]; run by the
//! suite itself, it returns at once.
#![cfg(unix)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use distlock_axum::{KeyRequest, LockGuard, LockLayer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The directory the instance shares with the test: the SQLite lock file, the port it serves
/// on, and the lines its handler writes. Set only for the child.
const CHILD_DIR: &str = "DISTLOCK_AXUM_PAUSED_INSTANCE_DIR";

/// The instance's lease: short, so that the pause outlasts it by far.
const LEASE: Duration = Duration::from_secs(1);

/// How long the instance stays stopped, at least: 2.5 leases.
const PAUSE: Duration = Duration::from_millis(2500);

/// Bounds on waits that end early when things work; generous for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("locks.db").display())
}

/// The instance: serves `POST /work/{key}` behind the layer (lock `work:{key}`, 1 s lease) on a
/// port it writes to `port` in [`CHILD_DIR`]. Does nothing unless [`CHILD_DIR`] is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_instance_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR).map(PathBuf::from) else {
        return;
    };
    let client = distlock::connect(&sqlite_url(&dir)).await.unwrap();
    let key = |req: &KeyRequest| Some(format!("work:{}", req.path_param("key")?));
    let app = Router::new()
        .route("/work/{key}", post(step_forever))
        .layer(LockLayer::new(client, key).lease(LEASE))
        .with_state(Arc::new(dir.join("steps")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // Renamed into place, so that the test never reads half a port number.
    std::fs::write(dir.join("port.tmp"), port.to_string()).unwrap();
    std::fs::rename(dir.join("port.tmp"), dir.join("port")).unwrap();
    axum::serve(listener, app).await.unwrap();
}

/// Writes a line per step, saying whether the lock was lost when the step ran, every 50 ms,
/// until the layer stops it.
async fn step_forever(State(steps): State<Arc<PathBuf>>, guard: LockGuard) -> &'static str {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&*steps)
        .unwrap();
    loop {
        // Unbuffered: the line is in the file once the step has run.
        let line = if guard.is_lost() { "lost\n" } else { "held\n" };
        file.write_all(line.as_bytes()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The instance's process; killed (SIGKILL ends a stopped process too) when the test ends,
/// whether it passed or not.
struct Instance(std::process::Child);

impl Instance {
    fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.0.id()).expect("a pid");
        // SAFETY: `kill` only sends a signal, to our own child, which has not been waited for.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            sent,
            0,
            "kill({pid}, {signal}): {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every 20 ms until it gives a value; panics after [`PATIENCE`] with `what`.
async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = f() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn steps(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("steps"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Sends `POST path` over a plain HTTP/1.1 connection; the status code and the body.
async fn http_post(port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_string();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_instance_runs_no_step_after_resuming_past_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let instance = Instance(
        Command::new(std::env::current_exe().unwrap())
            .args(["paused_instance_child", "--exact", "--nocapture"])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let port = wait_for("the instance's port", || {
        std::fs::read_to_string(dir.path().join("port"))
            .ok()?
            .parse::<u16>()
            .ok()
    })
    .await;
    let request = tokio::spawn(async move { http_post(port, "/work/a").await });
    wait_for("three steps under the lock", || {
        (steps(dir.path()).len() >= 3).then_some(())
    })
    .await;

    instance.signal(libc::SIGSTOP);
    let stopped_at = Instant::now();
    // Another instance: it has the lock once the stopped one's lease has run out in the store,
    // which counts it from later than the stopped instance's own clock does.
    let other = distlock::connect(&sqlite_url(dir.path())).await.unwrap();
    let guard = other
        .lock("work:a")
        .acquire_timeout(PATIENCE)
        .await
        .expect("the stopped instance's lease ends");
    tokio::time::sleep_until((stopped_at + PAUSE).into()).await;
    let before = steps(dir.path());
    instance.signal(libc::SIGCONT);

    let (status, body) = tokio::time::timeout(PATIENCE, request)
        .await
        .expect("an answer once resumed")
        .unwrap();
    let after = steps(dir.path());
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("lost"), "{body}");
    assert!(
        before.iter().all(|step| step == "held"),
        "every step before the pause ran under the lock: {before:?}"
    );
    let resumed = &after[before.len()..];
    eprintln!(
        "stopped {:?}; {} steps before, {} after resuming: {resumed:?}; answer {status}",
        stopped_at.elapsed(),
        before.len(),
        resumed.len()
    );
    assert!(
        resumed.is_empty(),
        "{} steps ran after resuming ({} before): {resumed:?}",
        resumed.len(),
        before.len()
    );
    // Still ours: the resumed instance took nothing back.
    assert!(guard.release().await.unwrap());
    other.shutdown().await;
    drop(instance);
}

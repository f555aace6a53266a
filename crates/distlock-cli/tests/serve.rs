//! `distlock serve` end to end: the real binary on a free loopback port over an SQLite file, its
//! JSON and Prometheus endpoints read over HTTP, and its status page loaded in headless Chromium
//! (tests/serve/cdp.rs), which must show a lock taken here and drop it when it is released,
//! without a reload and without a console error.
//!
//! Screenshots go to `$CARGO_TARGET_TMPDIR/serve/`. `cargo test -p distlock-cli --test serve --
//! --ignored readme_screenshot` makes the README's picture, docs/serve.png.

#[path = "serve/cdp.rs"]
mod cdp;
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use cdp::Browser;
use common::BIN;

/// A running `distlock serve`; stopped (SIGKILL) on drop if the test did not stop it.
struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`, without the trailing slash.
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_command(url: &str) -> Command {
    common::distlock(&["serve", "--url", url])
}

impl Server {
    /// Starts `distlock serve` on a port the OS picks, and waits for its `listening on` line.
    fn start(url: &str, extra: &[&str]) -> Server {
        Server::start_in(Path::new("."), url, extra)
    }

    /// [`Server::start`] in the working directory `dir` (for relative `sqlite:` URLs).
    fn start_in(dir: &Path, url: &str, extra: &[&str]) -> Server {
        let mut command = serve_command(url);
        command
            .current_dir(dir)
            .args(["--listen", "127.0.0.1:0", "--refresh", "200ms"])
            .args(extra);
        Server::spawn(command)
    }

    /// Spawns `command` (a `distlock serve`, its standard error the test's), and waits for its
    /// `listening on` line.
    fn spawn(mut command: Command) -> Server {
        command.stderr(Stdio::inherit());
        Server::listening(command)
    }

    /// Spawns `command` (a `distlock serve`, its standard error as the caller set it), and
    /// waits for its `listening on` line.
    fn listening(mut command: Command) -> Server {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn distlock serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read serve's stdout");
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve printed {line:?}, not its address"))
            .trim_end_matches('/')
            .to_string();
        Server { child, base }
    }

    fn get(&self, path: &str) -> (u16, String, String) {
        http_get(&self.base, path)
    }

    fn locks(&self) -> Value {
        let (status, _, body) = self.get("/api/locks");
        assert_eq!(status, 200, "GET /api/locks: {body}");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/api/locks is not JSON ({e}): {body}"))
    }

    /// The lock named `name` in /api/locks, once it shows within `within` (None if it never does).
    fn wait_for_lock(&self, name: &str, held: bool, within: Duration) -> Option<Value> {
        let mut found = None;
        let settled = common::eventually(within, || {
            let report = self.locks();
            found = report["locks"]
                .as_array()
                .and_then(|locks| locks.iter().find(|l| l["name"] == name))
                .cloned();
            found.is_some() == held
        });
        settled.then_some(found).flatten()
    }
}

/// A plain HTTP/1.0 GET (the server closes the connection after answering): (status, head, body).
fn http_get(base: &str, path: &str) -> (u16, String, String) {
    let authority = base.strip_prefix("http://").expect("http base");
    let response = common::http_get(authority, path);
    let (head, body) = response.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, head.to_string(), body.to_string())
}

/// Where this run's screenshots go.
fn screenshot_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("serve")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_metrics_report_a_held_lock() {
    let store = common::sqlite();
    let server = Server::start(&store.url, &[]);
    let name = format!("serve-test/{}", common::unique());

    let report = server.locks();
    assert_eq!(report["backend"], "sqlite");
    assert_eq!(report["url"], store.url.as_str());
    assert_eq!(report["error"], Value::Null);
    assert_eq!(report["locks"], serde_json::json!([]));
    assert_eq!(report["warnings"], serde_json::json!([]));

    let client = distlock::connect(&store.url).await.expect("connect");
    let guard = client.lock(&name).acquire().await.expect("acquire");
    let lock = server
        .wait_for_lock(&name, true, Duration::from_secs(5))
        .expect("the held lock shows in /api/locks");
    assert_eq!(lock["kind"], "lock");
    let holdings = lock["holdings"].as_array().expect("holdings");
    assert_eq!(holdings.len(), 1, "{lock}");
    let holding = &holdings[0];
    assert_eq!(holding["token"], guard.fencing_token().get());
    assert_eq!(holding["holder"]["pid"], std::process::id());
    assert!(holding["holder"]["host"].is_string(), "{holding}");
    assert!(holding["since_ms"].as_u64().is_some(), "{holding}");
    assert!(
        holding["lease_left_ms"].as_u64().unwrap_or(0) > 0,
        "{holding}"
    );

    let (status, head, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    for line in [
        "distlock_status_up{backend=\"sqlite\"} 1",
        "distlock_status_locks_held{backend=\"sqlite\",kind=\"lock\"} 1",
        "distlock_status_holdings{backend=\"sqlite\",kind=\"lock\"} 1",
        "distlock_status_holdings{backend=\"sqlite\",kind=\"fair\"} 0",
        "# TYPE distlock_status_holdings gauge",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "/metrics lacks {line:?}:\n{metrics}"
        );
    }
    // Every metric shown is described (# HELP) for whoever reads the scrape.
    for name in metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = name.split_whitespace().next().unwrap_or_default();
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&format!("# HELP {name} "))),
            "{name} has no # HELP:\n{metrics}"
        );
    }

    guard.release().await.expect("release");
    assert!(
        server
            .wait_for_lock(&name, false, Duration::from_secs(5))
            .is_none(),
        "the released lock still shows in /api/locks"
    );
    let (_, _, metrics) = server.get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "distlock_status_holdings{backend=\"sqlite\",kind=\"lock\"} 0"),
        "{metrics}"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_shows_a_lock_live_in_headless_chromium() {
    let store = common::sqlite();
    let server = Server::start(&store.url, &[]);
    let name = format!("page-test/{}", common::unique());
    let mut browser = Browser::launch(1100, 600).await;
    browser.navigate(&format!("{}/", server.base)).await;

    // The first poll fills in the store line; nothing is held yet.
    assert!(
        browser
            .wait_for(
                "document.getElementById('store').textContent.includes('sqlite store')",
                Duration::from_secs(10)
            )
            .await,
        "the page never showed the backend"
    );
    assert_eq!(
        browser
            .eval("!document.getElementById('empty').hidden && document.getElementById('error').hidden")
            .await,
        Value::Bool(true),
        "the page does not show its empty state"
    );
    // Set in the page now, still there later: the page was updated in place, not reloaded.
    browser.eval("window.__notReloaded = true").await;

    let client = distlock::connect(&store.url).await.expect("connect");
    let guard = client.lock(&name).acquire().await.expect("acquire");
    let row = format!(
        "[...document.querySelectorAll('#rows tr')].find(r => r.dataset.lock === {name:?})"
    );
    assert!(
        browser
            .wait_for(&format!("{row} !== undefined"), Duration::from_secs(10))
            .await,
        "the page never showed lock {name}"
    );
    let cells = browser
        .eval(&format!("[...{row}.cells].map(c => c.textContent)"))
        .await;
    let cells: Vec<&str> = cells
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| c.as_str().unwrap_or(""))
        .collect();
    assert_eq!(cells[0], name);
    assert_eq!(cells[1], "lock");
    assert!(
        cells[2].contains(&format!("(pid {})", std::process::id())),
        "holder cell {:?}",
        cells[2]
    );
    assert_eq!(cells[3], guard.fencing_token().to_string());
    assert!(cells[5].ends_with(" s"), "lease cell {:?}", cells[5]);
    assert_eq!(
        browser
            .eval("document.getElementById('empty').hidden")
            .await,
        Value::Bool(true)
    );
    let shot = screenshot_path("page-held.png");
    browser.screenshot(&shot).await;
    println!(
        "screenshot of the page with {name} held: {}",
        shot.display()
    );

    guard.release().await.expect("release");
    assert!(
        browser
            .wait_for(
                &format!("{row} === undefined && !document.getElementById('empty').hidden"),
                Duration::from_secs(10)
            )
            .await,
        "the page still shows {name} after its release"
    );
    assert_eq!(
        browser.eval("window.__notReloaded === true").await,
        Value::Bool(true),
        "the page reloaded instead of updating in place"
    );
    let shot = screenshot_path("page-released.png");
    browser.screenshot(&shot).await;
    println!(
        "screenshot of the page after the release: {}",
        shot.display()
    );
    // A last round trip, so every event Chromium sent before it has been read.
    browser.eval("1").await;
    assert!(
        browser.errors().is_empty(),
        "the page reported errors: {:#?}",
        browser.errors()
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_selects_the_locks_shown() {
    let store = common::sqlite();
    let unique = common::unique();
    let shown = format!("shown/{unique}");
    let hidden = format!("hidden/{unique}");
    let server = Server::start(&store.url, &["--prefix", "shown/"]);
    let client = distlock::connect(&store.url).await.expect("connect");
    let hidden_guard = client.lock(&hidden).acquire().await.expect("acquire");
    let shown_guard = client.lock(&shown).acquire().await.expect("acquire");
    assert!(
        server
            .wait_for_lock(&shown, true, Duration::from_secs(5))
            .is_some()
    );
    let report = server.locks();
    assert_eq!(report["prefix"], "shown/");
    let names: Vec<&str> = report["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert_eq!(names, [shown.as_str()]);
    shown_guard.release().await.expect("release");
    hidden_guard.release().await.expect("release");
    client.shutdown().await;
}

/// A backend without lock status (memcached answers Unsupported, and connects lazily, so no
/// server is needed): the server keeps running and says so in the JSON, the metrics and the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_to_answer_shows_an_error_not_a_crash() {
    // memcached connects lazily: serve starts, and every status read fails (nothing listens on
    // port 1). Every backend now reports status; an unsupported one takes the same path.
    let server = Server::start("memcached://127.0.0.1:1", &[]);
    let report = server.locks();
    assert_eq!(report["backend"], "memcached");
    assert_eq!(report["url"], "memcached://127.0.0.1:1");
    let error = report["error"].as_str().expect("an error");
    assert!(
        error.contains("reading the lock status failed") && error.contains("127.0.0.1:1"),
        "{error}"
    );
    assert_eq!(report["locks"], serde_json::json!([]));
    let (_, _, metrics) = server.get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "distlock_status_up{backend=\"memcached\"} 0"),
        "{metrics}"
    );

    let mut browser = Browser::launch(1100, 400).await;
    browser.navigate(&format!("{}/", server.base)).await;
    assert!(
        browser
            .wait_for(
                "!document.getElementById('error').hidden && \
                 document.getElementById('error').textContent.includes('reading the lock status failed')",
                Duration::from_secs(10)
            )
            .await,
        "the page shows no error banner"
    );
    let shot = screenshot_path("page-error.png");
    browser.screenshot(&shot).await;
    println!("screenshot of the error banner: {}", shot.display());
    browser.eval("1").await;
    assert!(browser.errors().is_empty(), "{:#?}", browser.errors());
}

#[test]
fn bad_arguments_are_usage_errors() {
    let store = common::sqlite();
    for (args, says) in [
        (&["--listen", "localhost"][..], "--listen"),
        (&["--listen", "127.0.0.1:99999"][..], "--listen"),
        (&["--listen", ":7380"][..], "--listen"),
        (&["--refresh", "soon"][..], "--refresh"),
        (&["--refresh", "10ms"][..], "--refresh"),
        (&["--max-connections", "0"][..], "--max-connections"),
        (&["--header-timeout", "100ms"][..], "--header-timeout"),
        (&["--idle-timeout", "soon"][..], "--idle-timeout"),
    ] {
        let out = serve_command(&store.url).args(args).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let out = serve_command("nosuch://user:hunter2@127.0.0.1/x")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("unknown scheme"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password shows: {stderr}");
    // A store that is down at start (nothing listens on port 1): exit 69 (EX_UNAVAILABLE), password masked.
    let out = serve_command("postgres://user:hunter2@127.0.0.1:1/db")
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("user:***@127.0.0.1:1"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "the password shows: {stderr}");
}

/// `--listen` takes a host name as well as an IP address: `localhost` binds its loopback
/// address.
#[test]
fn it_listens_on_a_host_name() {
    let store = common::sqlite();
    let mut command = serve_command(&store.url);
    command.args(["--listen", "localhost:0"]);
    let server = Server::spawn(command);
    assert!(
        server.base.starts_with("http://127.0.0.1:") || server.base.starts_with("http://[::1]:"),
        "{}",
        server.base
    );
    assert_eq!(server.locks()["backend"], "sqlite");
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let store = common::sqlite();
    let out = serve_command(&store.url)
        .args(["--listen", &addr])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

#[test]
fn sigterm_stops_it_cleanly_with_a_connection_open() {
    let store = common::sqlite();
    let mut server = Server::start(&store.url, &[]);
    // A browser keeps its connection open between requests: shutting down must not wait on it.
    let authority = server.base.strip_prefix("http://").unwrap().to_string();
    let mut idle = TcpStream::connect(&authority).expect("connect");
    write!(idle, "GET /api/locks HTTP/1.1\r\nHost: {authority}\r\n\r\n").expect("send");
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).expect("an answer");
    assert_eq!(&first, b"HTTP/1.1 200");

    let pid = server.child.id() as i32;
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let stopped = common::eventually(Duration::from_secs(10), || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    assert!(stopped, "serve did not stop within 10s of SIGTERM");
    let status = server.child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// `count` connections each sending a request line and a header but never the blank line that
/// ends the header, as a slow (or hostile) client does.
fn half_sent_requests(authority: &str, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(authority).expect("connect to serve");
            write!(stream, "GET /api/locks HTTP/1.1\r\nHost: {authority}\r\n").expect("send");
            stream
        })
        .collect()
}

/// Whether the server closes `stream` (end of file or reset, no answer) within `within`.
fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut buf = [0u8; 256];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!(
            "a half-sent request got an answer: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
        ),
    }
}

/// The value of the sample `name` (labels included) in Prometheus text, 0 if absent.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

/// Issue #32 item 4: with every place taken by half-sent requests, a new client is still
/// answered, the slow ones beyond the cap make way at once, and the others are closed when their
/// header has not come within --header-timeout.
#[test]
fn slow_clients_beyond_the_cap_do_not_lock_others_out() {
    let store = common::sqlite();
    let server = Server::start(
        &store.url,
        &["--max-connections", "8", "--header-timeout", "2s"],
    );
    let authority = server.base.strip_prefix("http://").unwrap().to_string();
    let mut slow = half_sent_requests(&authority, 30);

    let (status, _, body) = server.get("/api/locks");
    assert_eq!(status, 200, "a client beyond the cap: {body}");
    for (i, stream) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(stream, Duration::from_secs(30)),
            "half-sent request {i} still open 30 s on (header timeout 2 s)"
        );
    }
    let (status, _, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    let evicted = sample(
        &metrics,
        "distlock_serve_connections_closed_total{reason=\"evicted\"}",
    );
    let timed_out = sample(
        &metrics,
        "distlock_serve_connections_closed_total{reason=\"header_timeout\"}",
    );
    // 31 connections came for 8 places: 23 made way; the slow ones that kept theirs timed out.
    assert!(evicted >= 22.0, "{evicted} evicted:\n{metrics}");
    assert!(timed_out >= 1.0, "{timed_out} timed out:\n{metrics}");
    assert!(evicted + timed_out >= 30.0, "{metrics}");
    assert!(
        sample(&metrics, "distlock_serve_connections") <= 8.0,
        "{metrics}"
    );
}

/// A keep-alive connection serves request after request, and is closed once none has come for
/// --idle-timeout.
#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let store = common::sqlite();
    let server = Server::start(&store.url, &["--idle-timeout", "1s"]);
    let authority = server.base.strip_prefix("http://").unwrap().to_string();
    let mut kept = TcpStream::connect(&authority).expect("connect");
    kept.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    for _ in 0..2 {
        write!(kept, "GET /api/locks HTTP/1.1\r\nHost: {authority}\r\n\r\n").expect("send");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            kept.read_exact(&mut byte).expect("the answer's head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a content-length");
        kept.read_exact(&mut vec![0u8; length]).expect("the body");
    }
    assert!(
        closed_by_server(&mut kept, Duration::from_secs(30)),
        "an idle connection still open 30 s on (idle timeout 1 s)"
    );
    let (_, _, metrics) = server.get("/metrics");
    assert_eq!(
        sample(
            &metrics,
            "distlock_serve_connections_closed_total{reason=\"idle_timeout\"}"
        ),
        1.0,
        "{metrics}"
    );
}

/// The case: more half-sent requests than serve has file descriptors (`ulimit -n 64`,
/// the default cap). Others are still answered, the slow ones are closed by the default header
/// timeout, and the failed accepts are said once, not once per retry.
#[test]
fn out_of_file_descriptors_it_keeps_serving() {
    let store = common::sqlite();
    let mut command = Command::new("sh");
    command
        .args(["-c", "ulimit -n 64 && exec \"$0\" \"$@\"", BIN, "serve"])
        .args(["--url", &store.url, "--listen", "127.0.0.1:0"])
        .env_remove("DISTLOCK_URL")
        .stderr(Stdio::piped());
    let mut server = Server::listening(command);
    let authority = server.base.strip_prefix("http://").unwrap().to_string();
    let mut slow = half_sent_requests(&authority, 100);

    let (status, _, body) = server.get("/api/locks");
    assert_eq!(
        status, 200,
        "a client with serve out of descriptors: {body}"
    );
    assert!(body.contains("\"error\":null"), "{body}");
    for (i, stream) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(stream, Duration::from_secs(40)),
            "half-sent request {i} still open 40 s on (default header timeout 10 s)"
        );
    }
    let (status, _, _) = server.get("/api/locks");
    assert_eq!(status, 200);

    let _ = server.child.kill();
    let _ = server.child.wait();
    let mut stderr = String::new();
    server
        .child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let accept_lines = stderr.lines().filter(|l| l.contains("accept")).count();
    assert!(
        accept_lines <= 3,
        "{accept_lines} lines on accepting:\n{stderr}"
    );
}

/// Makes docs/serve.png: three locks held by `distlock exec` processes (so the page shows real
/// holder pids), one of them with a short lease. Run by hand; it writes into the source tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes docs/serve.png; run with --ignored readme_screenshot"]
async fn readme_screenshot() {
    // A relative URL, run from a scratch directory: the picture shows `sqlite:locks.db`.
    let dir = tempfile::tempdir().expect("tempdir");
    let url = "sqlite:locks.db";
    let server = Server::start_in(dir.path(), url, &[]);
    let holders: Vec<Child> = [
        ("backup/nightly", "30s"),
        ("billing/invoice-run", "20s"),
        ("deploy/web", "6s"),
    ]
    .iter()
    .map(|(name, lease)| {
        Command::new(BIN)
            .args(["exec", "--url", url, "--lease", lease, name])
            .current_dir(dir.path())
            .args(["--", "sleep", "60"])
            .env_remove("DISTLOCK_URL")
            .spawn()
            .expect("spawn distlock exec")
    })
    .collect();
    for name in ["backup/nightly", "billing/invoice-run", "deploy/web"] {
        assert!(
            server
                .wait_for_lock(name, true, Duration::from_secs(10))
                .is_some(),
            "{name} was not taken"
        );
    }
    let mut browser = Browser::launch(1000, 420).await;
    browser.navigate(&format!("{}/", server.base)).await;
    assert!(
        browser
            .wait_for(
                "document.querySelectorAll('#rows tr').length === 3",
                Duration::from_secs(10)
            )
            .await
    );
    // Let the lease bars run down a little from full.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/serve.png");
    browser.screenshot(&path).await;
    println!("README screenshot: {}", path.display());
    assert!(browser.errors().is_empty(), "{:#?}", browser.errors());
    for mut holder in holders {
        let _ = holder.kill();
        let _ = holder.wait();
    }
}

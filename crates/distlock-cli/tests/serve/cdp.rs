//! A small Chrome DevTools Protocol client: starts headless Chromium, opens one page, and lets a
//! test navigate, evaluate JavaScript, take screenshots and collect console errors.
//!
//! One websocket to the browser, the page's commands sent on a flattened session
//! (`Target.attachToTarget` with `flatten`), so no second connection or HTTP discovery is needed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long one DevTools command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// The Chromium binary: `$DISTLOCK_CHROMIUM`, else the first of the usual names on PATH. When
/// none is there, runs scripts/install-chromium.sh once (Debian's `chromium` package); if there
/// is still none, fails the test saying how to install it: a missing browser never passes.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("DISTLOCK_CHROMIUM") {
        return path.into();
    }
    let find = || {
        ["chromium", "chromium-browser", "google-chrome"]
            .iter()
            .find_map(|name| {
                std::env::var_os("PATH").and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|dir| dir.join(name))
                        .find(|p| p.is_file())
                })
            })
    };
    if let Some(found) = find() {
        return found;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-chromium.sh");
    eprintln!("no Chromium on PATH: running {}", script.display());
    let installed = Command::new(&script).status();
    match (installed, find()) {
        (_, Some(found)) => found,
        (status, None) => panic!(
            "this test needs headless Chromium and found none (tried $DISTLOCK_CHROMIUM, then \
             chromium, chromium-browser, google-chrome on PATH; {} gave {status:?}). Install it \
             with scripts/install-chromium.sh (as root: apt-get update && apt-get install \
             chromium), or point DISTLOCK_CHROMIUM at a Chromium or Chrome binary.",
            script.display()
        ),
    }
}

/// A headless Chromium with one page open; killed on drop.
pub struct Browser {
    child: Child,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    session: String,
    next_id: u64,
    /// Console errors, uncaught exceptions and failed loads the page reported, as text.
    errors: Vec<String>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts Chromium with a fresh profile and a `width`×`height` page.
    pub async fn launch(width: u32, height: u32) -> Browser {
        let binary = chromium();
        let profile = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(&binary)
            .args([
                "--headless",
                // Tests run as root in CI, where Chromium's sandbox refuses to start.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-port=0",
                "about:blank",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let ws_url = devtools_url(&mut child, &binary);
        let (ws, _) = tokio_tungstenite::connect_async(ws_url.as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to Chromium's DevTools at {ws_url}: {e}"));
        let mut browser = Browser {
            child,
            ws,
            session: String::new(),
            next_id: 0,
            errors: Vec::new(),
            _profile: profile,
        };
        let target = browser
            .send(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = browser
            .send(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            browser.call(domain, json!({})).await;
        }
        browser
            .call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
            )
            .await;
        browser
    }

    /// Sends a command to the page.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params).await
    }

    /// Sends a command (to the browser, or to the page's session) and returns its result,
    /// noting the events that arrive meanwhile.
    async fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.ws
            .send(Message::text(message.to_string()))
            .await
            .unwrap_or_else(|e| panic!("sending {method} to Chromium: {e}"));
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("Chromium did not answer {method} within 30s"));
            let text = match next {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(_)) => continue,
                Some(Err(e)) => panic!("reading from Chromium: {e}"),
                None => panic!("Chromium closed the DevTools connection during {method}"),
            };
            let message: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    panic!("Chromium refused {method}: {error}");
                }
                return message["result"].clone();
            }
            self.note(&message);
        }
    }

    /// Keeps the page's errors from an event.
    fn note(&mut self, event: &Value) {
        let params = &event["params"];
        let error = match event["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                let details = &params["exceptionDetails"];
                let text = details["exception"]["description"]
                    .as_str()
                    .or(details["text"].as_str())
                    .unwrap_or("an exception");
                Some(format!("uncaught: {text}"))
            }
            Some("Runtime.consoleAPICalled")
                if matches!(params["type"].as_str(), Some("error" | "assert")) =>
            {
                let args: Vec<String> = params["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| {
                        a["value"]
                            .as_str()
                            .map(str::to_string)
                            .or_else(|| a["description"].as_str().map(str::to_string))
                            .unwrap_or_else(|| a["value"].to_string())
                    })
                    .collect();
                Some(format!("console.error: {}", args.join(" ")))
            }
            Some("Log.entryAdded") if params["entry"]["level"] == json!("error") => Some(format!(
                "log: {} ({})",
                params["entry"]["text"].as_str().unwrap_or(""),
                params["entry"]["url"].as_str().unwrap_or("")
            )),
            _ => None,
        };
        if let Some(error) = error {
            eprintln!("page error: {error}");
            self.errors.push(error);
        }
    }

    /// Every error the page reported so far.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Opens `url` and waits until the page has loaded.
    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        assert!(
            self.wait_for(
                "document.readyState === 'complete'",
                Duration::from_secs(20)
            )
            .await,
            "{url} did not finish loading within 20s"
        );
    }

    /// The value of a JavaScript expression in the page (awaited if a promise).
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("evaluating {expression:?} threw: {exception}");
        }
        result["result"]["value"].clone()
    }

    /// Polls `expression` every 100 ms until it is `true`, for up to `within`.
    pub async fn wait_for(&mut self, expression: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.eval(expression).await == json!(true) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a PNG of the page's viewport at `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot directory");
        }
        std::fs::write(path, png).expect("writing the screenshot");
    }
}

/// Reads Chromium's stderr up to the `DevTools listening on ws://…` line it prints once the
/// debugging port is open; the rest of its stderr is drained by a thread (a full pipe would stall
/// the browser).
fn devtools_url(child: &mut Child, binary: &Path) -> String {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut sent = false;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if !sent {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(Ok(line[at..].trim().to_string()));
                    sent = true;
                } else {
                    seen.push(line);
                }
            }
        }
        if !sent {
            let _ = tx.send(Err(seen.join("\n")));
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(url)) => url,
        Ok(Err(output)) => panic!(
            "{} exited without opening its DevTools port; its stderr:\n{output}",
            binary.display()
        ),
        Err(_) => panic!(
            "{} did not print its DevTools URL within 30s",
            binary.display()
        ),
    }
}

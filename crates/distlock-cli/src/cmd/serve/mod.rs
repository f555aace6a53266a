//! `distlock serve`: an HTTP server showing the store's locks: `GET /api/locks` (JSON),
//! `GET /metrics` (Prometheus text: what the library records through the `metrics` facade, plus
//! gauges of the last status read) and `GET /` (a live status page that polls `/api/locks`).
//!
//! The page's HTML, CSS and JavaScript live in `page/`, compiled into the binary: the page needs
//! nothing but this server (no CDN, no external fonts), and its Content-Security-Policy says so.

mod board;
mod connections;

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::server::graceful::GracefulShutdown;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use self::board::Board;
use self::connections::Connections;
use super::exec::{Signals, failed};
use crate::{EXIT_UNAVAILABLE, duration};

/// The first line `serve` prints on stdout once it accepts requests, followed by its base URL
/// (with `--listen 127.0.0.1:0`, the port the OS chose).
const READY_PREFIX: &str = "listening on ";
/// How long open connections get to finish their request once a signal asks to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often histograms the library records are folded for rendering (the recorder leaves this
/// to its owner when it runs no HTTP listener of its own).
const METRICS_UPKEEP: Duration = Duration::from_secs(5);
/// Arguments of `distlock serve`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Endpoints:\n  \
    GET /            a live status page: every lock, its holder (host, pid, process), fencing \
    token, since when, lease left and waiters; it polls /api/locks every --refresh\n  \
    GET /api/locks   the same as JSON (locks as `distlock status --json` prints them): {backend, url (passwords masked), prefix, refresh_ms, \
    read_at_ms, locks: [{name, kind, holdings: [{token, holder: {host, pid, process}, \
    since_ms, lease_left_ms}], waiters, last_token}], error, warnings: [what the store's \
    configuration puts at risk, e.g. a Redis that may evict lock keys]}\n  \
    GET /metrics     Prometheus text: whatever the library records in this process through the \
    metrics facade (distlock_acquires_total and the like are recorded by the processes that \
    take locks, so they show here only for locks taken in this process) and, from the last status \
    read, distlock_status_up, \
    distlock_status_locks_held, distlock_status_holdings, distlock_status_waiters (by backend \
    and kind)\n\
    The store is read when a request finds the last read older than --refresh; a failed read \
    (or a backend that cannot report status) shows as `error` and on the page, and the server \
    keeps running.\n\
    Slow clients cannot lock others out: a request whose header has not all come \
    --header-timeout after its first byte is closed, and so is a connection with no request \
    under way for --idle-timeout. A connection beyond --max-connections takes the place of the \
    open one that has waited longest for its request, or, if every one is being answered, waits \
    for one to end; out of file descriptors, the cap drops below where that happened. \
    /metrics counts them: distlock_serve_connections (open), \
    distlock_serve_connections_closed_total{reason=header_timeout|idle_timeout|evicted}.\n\
    Exit status: 0 after Ctrl-C or SIGTERM; 64 for invalid arguments or URL; 69 if the address \
    cannot be bound or the store cannot be reached at start (or fails).")]
pub(crate) struct ServeArgs {
    /// Address to listen on, HOST:PORT: an IP address (`[::1]:7380` for IPv6) or a host name,
    /// bound at the first address it resolves to that can be bound (port 0: any free port; the
    /// address is printed). Only that address is bound.
    #[arg(long, default_value = "127.0.0.1:7380", value_name = "HOST:PORT", env = "DISTLOCK_LISTEN",
          value_parser = listen_address)]
    listen: String,
    /// Store URL [default: $DISTLOCK_URL, else sqlite:distlock.db in the working directory].
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true)]
    url: Option<String>,
    /// Show only the locks whose name starts with this.
    #[arg(long, default_value = "", env = "DISTLOCK_PREFIX")]
    prefix: String,
    /// How often the page refreshes, and how old a status read may be when served (at least
    /// 100ms).
    #[arg(long, default_value = "1s", env = "DISTLOCK_REFRESH", value_parser = at_least::<100>)]
    refresh: Duration,
    /// Most connections open at once; one more takes the place of the connection that has
    /// waited longest for its request (keep it below `ulimit -n`).
    #[arg(long, default_value_t = 256, value_name = "N", env = "DISTLOCK_SERVE_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    /// Close a connection whose request header has not all come this long after its first byte
    /// (at least 500ms).
    #[arg(long, default_value = "10s", env = "DISTLOCK_SERVE_HEADER_TIMEOUT",
          value_parser = at_least::<500>)]
    header_timeout: Duration,
    /// Close a connection with no request under way for this long: a new one that sends
    /// nothing, or one kept alive after an answer (at least 500ms).
    #[arg(long, default_value = "30s", env = "DISTLOCK_SERVE_IDLE_TIMEOUT",
          value_parser = at_least::<500>)]
    idle_timeout: Duration,
}

pub(crate) async fn run(args: ServeArgs) -> ExitCode {
    let url = args.url.as_deref().unwrap_or(distlock::DEFAULT_URL);
    let client = match distlock::connect(url).await {
        Ok(c) => c,
        // The library's errors show URLs redacted; the URL named here is redacted too.
        Err(e) => {
            return failed(
                &format!("serve: cannot open the store {}", distlock::redact(url)),
                &e,
            );
        }
    };
    let metrics = match PrometheusBuilder::new().install_recorder() {
        Ok(handle) => {
            // The client connected before the recorder existed: describe the library's metrics
            // to this one, so that any it records here show with # HELP.
            distlock::metrics::describe();
            handle
        }
        Err(e) => {
            eprintln!("distlock: serve: cannot set up the metrics recorder: {e}");
            return ExitCode::from(70);
        }
    };
    // Tokio resolves a host name and binds its addresses in turn, keeping the first that binds.
    let bound = TcpListener::bind(args.listen.as_str())
        .await
        .and_then(|l| Ok((l.local_addr()?, l)));
    let (addr, listener) = match bound {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("distlock: serve: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    let connections = Connections::new(&args);
    let board = Board::new(client.clone(), url, args.prefix, args.refresh);
    announce(addr, &client, url);
    let upkeep = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(METRICS_UPKEEP).await;
                metrics.run_upkeep();
            }
        })
    };
    serve(listener, router(board, metrics), connections).await;
    upkeep.abort();
    client.shutdown().await;
    eprintln!("distlock: serve: stopped");
    ExitCode::SUCCESS
}

/// A duration of at least `MS` milliseconds: a shorter `--refresh` would have the page and the
/// cache hammer the store, and a browser on a slow link needs 500ms to send a header.
fn at_least<const MS: u64>(value: &str) -> Result<Duration, String> {
    let parsed = duration::parse(value)?;
    if parsed < Duration::from_millis(MS) {
        return Err(format!("must be at least {MS}ms"));
    }
    Ok(parsed)
}

/// Checks `--listen`'s form, HOST:PORT with a port number, before anything starts (a host
/// name is resolved when it is bound).
fn listen_address(value: &str) -> Result<String, String> {
    let (host, port) = value.rsplit_once(':').ok_or_else(|| {
        format!("{value:?} is not HOST:PORT (a port is needed, 0 for any free one)")
    })?;
    port.parse::<u16>()
        .map_err(|_| format!("{port:?} in {value:?} is not a port number (0 to 65535)"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || (host.starts_with('[') && bare.parse::<std::net::Ipv6Addr>().is_err()) {
        return Err(format!("{value:?} is not HOST:PORT"));
    }
    Ok(value.to_string())
}

/// Tells where the server is: one line on stdout, for scripts and tests (flushed at once, since
/// stdout may be a pipe); a readable one on stderr.
fn announce(addr: SocketAddr, client: &distlock::Client, url: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{READY_PREFIX}http://{addr}/").and_then(|()| stdout.flush());
    eprintln!(
        "distlock: serve: {} store {}, status page http://{addr}/ (Ctrl-C stops)",
        client.backend_name(),
        distlock::redact(url)
    );
}

/// Accepts connections until Ctrl-C or SIGTERM, then lets open ones finish (up to
/// [`SHUTDOWN_GRACE`]): a browser's idle keep-alive connection is closed at once, a request in
/// flight gets its answer.
async fn serve(listener: TcpListener, app: Router, connections: Arc<Connections>) {
    let graceful = GracefulShutdown::new();
    let mut signals = Signals::new();
    loop {
        let stream = tokio::select! {
            stream = connections.accept(&listener) => stream,
            _ = signals.next() => break,
        };
        connections.serve(stream, app.clone(), &graceful);
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
}

/// The page, compiled in: (path, content type, body).
#[rustfmt::skip]
const PAGE: [(&str, &str, &str); 4] = [
    ("/", "text/html; charset=utf-8", include_str!("page/index.html")),
    ("/style.css", "text/css; charset=utf-8", include_str!("page/style.css")),
    ("/app.js", "text/javascript; charset=utf-8", include_str!("page/app.js")),
    ("/favicon.svg", "image/svg+xml", include_str!("page/favicon.svg")),
];

fn router(board: Board, metrics: PrometheusHandle) -> Router {
    let mut router = Router::new()
        .route("/api/locks", get(locks))
        .route("/metrics", get(prometheus));
    for (path, content_type, body) in PAGE {
        router = router.route(path, get(([(header::CONTENT_TYPE, content_type)], body)));
    }
    router
        .fallback(|| async {
            let text = "not found: see / for the status page, /api/locks, /metrics\n";
            (StatusCode::NOT_FOUND, text)
        })
        .layer(middleware::from_fn(every_answer))
        .with_state(Arc::new((board, metrics)))
}

/// What the handlers share: the store's last status read, and the metrics recorder.
type Shared = State<Arc<(Board, PrometheusHandle)>>;

async fn locks(State(shared): Shared) -> Response {
    match serde_json::to_vec(&shared.0.report().await) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => {
            let text = format!("encoding the status: {e}\n");
            (StatusCode::INTERNAL_SERVER_ERROR, text).into_response()
        }
    }
}

async fn prometheus(State(shared): Shared) -> impl IntoResponse {
    // Sets the status gauges (if the last read is stale) before rendering them.
    shared.0.report().await;
    let content_type = "text/plain; version=0.0.4; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], shared.1.render())
}

/// Only GET (and HEAD) is answered, on any path. Every answer says that nothing is cached (the
/// status is live), and that the page may load nothing from anywhere but this server.
async fn every_answer(request: Request, next: Next) -> Response {
    let mut response = if matches!(*request.method(), Method::GET | Method::HEAD) {
        next.run(request).await
    } else {
        let allow = [(header::ALLOW, "GET, HEAD")];
        (StatusCode::METHOD_NOT_ALLOWED, allow, "only GET\n").into_response()
    };
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

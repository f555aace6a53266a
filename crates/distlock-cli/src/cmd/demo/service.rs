//! One instance of the inventory service: an HTTP server on a loopback port chosen by the OS,
//! run by `distlock demo serve` in its own process.
//!
//! Protocol with the parent: the store URL and the lock URL come in the environment
//! ([`STORE_ENV`], [`LOCK_URL_ENV`]) so that no password shows in `ps`; the instance prints
//! `listening <addr>` on stdout once it accepts requests, and exits when its stdin closes (so it
//! never outlives the parent). Problems go to stderr, which the parent reports.
//!
//! Requests: `POST /order/{key}?n=N` (stock: buy from the key's products) and
//! `POST /increment/{key}?n=N` (counter: add one to the key's counter), N being the request
//! number. Answers: 200 done, 409 sold out, 412 a fenced write refused, 503 the optimistic
//! strategy gave up (or the lock was lost: the body says which), 500 an error (its text in the
//! body).
//!
//! The server is axum. The lock strategies lock a request by its `{key}` with
//! [`distlock_axum::LockLayer`] around the handler, which is then the same code as with no
//! protection at all: see [`router`].

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use distlock_axum::{KeyRequest, LockGuard, LockLayer, OnLost};
use tokio::net::TcpListener;

use super::store::Store;
use super::strategy::{Method, Outcome, Protection, Scenario, Settings};
use crate::duration;

/// Environment variable carrying the store URL to an instance.
pub(crate) const STORE_ENV: &str = "DISTLOCK_DEMO_STORE";
/// Environment variable carrying the lock URL to an instance (lock strategies only).
pub(crate) const LOCK_URL_ENV: &str = "DISTLOCK_DEMO_LOCK_URL";
/// The first line an instance prints on stdout, followed by its address.
pub(crate) const READY_PREFIX: &str = "listening ";
/// Connections of an instance's store pool. SQLite runs one writer at a time anyway.
const STORE_CONNECTIONS: u32 = 4;

/// Arguments of the internal `distlock demo serve` (started by `distlock demo`, not by hand).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    #[arg(long, value_enum)]
    scenario: Scenario,
    #[arg(long, value_enum)]
    method: Method,
    #[arg(long)]
    instance: u32,
    #[arg(long)]
    products: u32,
    #[arg(long)]
    keys: u32,
    #[arg(long)]
    segments: u32,
    #[arg(long, value_parser = duration::parse)]
    pause: Duration,
    #[arg(long)]
    retries: u32,
    #[arg(long, value_parser = duration::parse)]
    lock_wait: Duration,
    #[arg(long, value_parser = duration::parse)]
    lease: Duration,
    #[arg(long, value_parser = duration::parse, default_value = "0s")]
    stop_for: Duration,
}

impl ServeArgs {
    /// The arguments that start an instance with `settings`.
    pub(crate) fn command_line(settings: &Settings) -> Vec<String> {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        vec![
            "demo".into(),
            "serve".into(),
            "--scenario".into(),
            settings.scenario.name().into(),
            "--method".into(),
            settings.method.name().into(),
            "--instance".into(),
            settings.instance.to_string(),
            "--products".into(),
            settings.products.to_string(),
            "--keys".into(),
            settings.keys.to_string(),
            "--segments".into(),
            settings.segments.to_string(),
            "--pause".into(),
            format!("{}us", settings.pause.as_micros()),
            "--retries".into(),
            settings.retries.to_string(),
            "--lock-wait".into(),
            ms(settings.lock_wait),
            "--lease".into(),
            ms(settings.lease),
            "--stop-for".into(),
            ms(settings.stop_for),
        ]
    }

    fn settings(&self) -> Settings {
        Settings {
            scenario: self.scenario,
            method: self.method,
            instance: self.instance,
            products: self.products,
            keys: self.keys,
            segments: self.segments,
            pause: self.pause,
            retries: self.retries,
            lock_wait: self.lock_wait,
            stop_for: self.stop_for,
            lease: self.lease,
        }
    }
}

/// Runs one instance until its stdin closes. Exit status 0, or 2 with the reason on stderr.
pub(crate) async fn run(args: ServeArgs) -> std::process::ExitCode {
    match serve(args).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("instance: {}", distlock::error::chain(e.as_ref()));
            std::process::ExitCode::from(2)
        }
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let settings = args.settings();
    let store_url = std::env::var(STORE_ENV).with_context(|| format!("{STORE_ENV} is not set"))?;
    let store = Store::open(&store_url, STORE_CONNECTIONS).await?;
    let locks = if settings.method.uses_locks() {
        let url =
            std::env::var(LOCK_URL_ENV).with_context(|| format!("{LOCK_URL_ENV} is not set"))?;
        let client = distlock::connect(&url)
            .await
            .context("connecting to the lock store")?;
        Some(client)
    } else {
        None
    };
    let app = router(settings, store.clone(), locks);

    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a loopback port")?;
    let addr = listener.local_addr().context("reading the bound port")?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{READY_PREFIX}{addr}")
            .and_then(|()| stdout.flush())
            .context("telling the parent the port")?;
    }
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    // Not a graceful shutdown: the load generator keeps its connections open, and the parent
    // is gone or done with this instance.
    tokio::select! {
        served = axum::serve(listener, app).into_future() => served.context("serving")?,
        () = parent_gone() => {}
    }
    store.close().await;
    Ok(())
}

/// The service: one route, `POST {scenario path}/{key}?n=N`.
///
/// The `lock` strategies wrap it in a [`LockLayer`] that locks each request by its `{key}`
/// (`demo-stock-3`, `demo-counter-0`): the handler gets the guard as an extractor, and the lock is
/// released when the response is produced (the stock handler lets it go earlier, before
/// recording the order, which needs no lock). A request waits for its key up to `--lock-wait`
/// (the request timeout unless set), then is answered 423. On a lost lease the layer stops the handler and
/// answers 503 ("lost"), except in the pause scenario, whose point is what the late write does:
/// there the handler is let finish (`OnLost::Mark`), and the fence or the audit tells.
fn router(settings: Settings, store: Store, locks: Option<distlock::Client>) -> Router {
    let scenario = settings.scenario;
    let protection = Arc::new(Protection::new(settings, store, locks.clone()));
    let expected = format!("POST {}/{{key}}?n=N", scenario.path());
    let routes = Router::new()
        .route(&format!("{}/{{key}}", scenario.path()), post(answer))
        .with_state(protection);
    let routes = match locks {
        Some(client) if settings.method.locks_the_request() => {
            let prefix = scenario.lock_prefix();
            let mut layer = LockLayer::new(client.clone(), move |req: &KeyRequest| {
                Some(format!("{prefix}-{}", req.path_param("key")?))
            })
            .wait(settings.lock_wait)
            .when_held(StatusCode::LOCKED);
            // On a session store the lease is at least the session's expiry, and SQL session
            // locks take none (their holding is the connection's): what the store keeps.
            if let Some(lease) = client.keepable_lease(settings.lease) {
                layer = layer.lease(lease);
            }
            if scenario == Scenario::Pause {
                layer = layer.on_lost(OnLost::Mark);
            }
            routes.route_layer(layer)
        }
        _ => routes,
    };
    routes.fallback(move || async move {
        (
            StatusCode::NOT_FOUND,
            format!("this instance serves {expected}\n"),
        )
    })
}

/// Resolves when stdin reaches its end: the parent closed it, or died.
///
/// A plain thread does the blocking read, so that it never holds up the runtime's shutdown.
async fn parent_gone() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut stdin = std::io::stdin().lock();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
        let _ = tx.send(());
    });
    let _ = rx.await;
}

async fn answer(
    State(protection): State<Arc<Protection>>,
    Path(key): Path<u32>,
    RawQuery(query): RawQuery,
    guard: Option<LockGuard>,
) -> Response {
    let Some(n) = request_number(query.as_deref()) else {
        return reply(StatusCode::BAD_REQUEST, "missing ?n=N\n".into());
    };
    match protection.serve(n, key, guard).await {
        Ok(Outcome::Done(v)) => reply(StatusCode::OK, format!("done {v}\n")),
        Ok(Outcome::SoldOut) => reply(StatusCode::CONFLICT, "sold out\n".into()),
        Ok(Outcome::GaveUp(tries)) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{GAVE_UP} after {tries} conflicting writes\n"),
        ),
        Ok(Outcome::Refused) => reply(
            StatusCode::PRECONDITION_FAILED,
            "write refused: stale fencing token\n".into(),
        ),
        Ok(Outcome::NoSuchKey(keys)) => reply(
            StatusCode::NOT_FOUND,
            format!("no key {key}: this run has keys 0 ..= {}\n", keys - 1),
        ),
        Err(e) => {
            let e = distlock::error::chain(e.as_ref());
            eprintln!("instance: request {n}: {e}");
            reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
        }
    }
}

/// How the body of the optimistic strategy's 503 starts (other 503s are failures: a lost lock,
/// an unreachable lock store).
pub(crate) const GAVE_UP: &str = "gave up";

/// `n=123` from a query string.
fn request_number(query: Option<&str>) -> Option<u64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|v| v.parse().ok())
}

fn reply(status: StatusCode, body: String) -> Response {
    (status, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers() {
        assert_eq!(request_number(Some("n=42")), Some(42));
        assert_eq!(request_number(Some("x=1&n=7")), Some(7));
        assert_eq!(request_number(Some("n=-1")), None);
        assert_eq!(request_number(None), None);
    }
}

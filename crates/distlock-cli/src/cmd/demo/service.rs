//! One instance of the inventory service: an HTTP server on a loopback port chosen by the OS,
//! run by `distlock demo serve` in its own process.
//!
//! Protocol with the parent: the store URL and the lock URL come in the environment
//! ([`STORE_ENV`], [`LOCK_URL_ENV`]) so that no password shows in `ps`; the instance prints
//! `listening <addr>` on stdout once it accepts requests, and exits when its stdin closes (so it
//! never outlives the parent). Problems go to stderr, which the parent reports.
//!
//! Requests: `POST /order?n=N` (stock) and `POST /increment?n=N` (counter), N being the request
//! number. Answers: 200 done, 409 sold out, 503 the optimistic strategy gave up, 500 an error
//! (its text in the body).

use std::convert::Infallible;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method as HttpMethod, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
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
    let protection = Arc::new(Protection::new(settings, store.clone(), locks));

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

    let accept = async {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("instance: accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let protection = protection.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| answer(protection.clone(), req));
                // A connection the load generator drops mid-request is its business, not ours.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        () = accept => {}
        () = parent_gone() => {}
    }
    store.close().await;
    Ok(())
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
    protection: Arc<Protection>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let expected = protection.scenario().path();
    if req.method() != HttpMethod::POST || req.uri().path() != expected {
        return Ok(reply(
            StatusCode::NOT_FOUND,
            format!("this instance serves POST {expected}?n=N\n"),
        ));
    }
    let Some(n) = request_number(req.uri().query()) else {
        return Ok(reply(StatusCode::BAD_REQUEST, "missing ?n=N\n".into()));
    };
    Ok(match protection.serve(n).await {
        Ok(Outcome::Done(v)) => reply(StatusCode::OK, format!("done {v}\n")),
        Ok(Outcome::SoldOut) => reply(StatusCode::CONFLICT, "sold out\n".into()),
        Ok(Outcome::GaveUp(tries)) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("gave up after {tries} conflicting writes\n"),
        ),
        Ok(Outcome::Refused) => reply(
            StatusCode::PRECONDITION_FAILED,
            "write refused: stale fencing token\n".into(),
        ),
        Err(e) => {
            let e = distlock::error::chain(e.as_ref());
            eprintln!("instance: request {n}: {e}");
            reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"))
        }
    })
}

/// `n=123` from a query string.
fn request_number(query: Option<&str>) -> Option<u64> {
    query?
        .split('&')
        .find_map(|kv| kv.strip_prefix("n="))
        .and_then(|v| v.parse().ok())
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
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

//! A layer whose setting the store cannot serve fails when the router is built
//! ([`LockLayer::checked`]), with the reason, rather than answering every request 500 or 503;
//! and it fails with the kind the request path would have met. On the real memcached
//! (DISTLOCK_MEMCACHED_URL, default memcached://127.0.0.1:11211): an exclusive lock only, leases
//! in whole seconds; and on an SQLite lock file.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::routing::post;
use distlock::{Client, ErrorKind, LockKind};
use distlock_axum::{KeyRequest, LockLayer};
use tower_service::Service;

async fn memcached() -> Client {
    let url = std::env::var("DISTLOCK_MEMCACHED_URL")
        .unwrap_or_else(|_| "memcached://127.0.0.1:11211".to_string());
    distlock::connect(&url)
        .await
        .expect("the memcached server (scripts/services.sh starts it)")
}

fn by_sku(req: &KeyRequest) -> Option<String> {
    Some(format!("startup-check/{}", req.path_param("sku")?))
}

/// The status a request through `layer` is answered with.
async fn status_of(layer: LockLayer<fn(&KeyRequest) -> Option<String>>) -> StatusCode {
    let app = Router::new()
        .route("/order/{sku}", post(|| async { "sold\n" }))
        .layer(layer);
    let req = Request::builder()
        .method(Method::POST)
        .uri("/order/a")
        .body(Body::empty())
        .expect("a request");
    app.clone()
        .call(req)
        .await
        .expect("routers do not fail")
        .status()
}

fn layer(client: &Client) -> LockLayer<fn(&KeyRequest) -> Option<String>> {
    LockLayer::new(client.clone(), by_sku as fn(&KeyRequest) -> Option<String>)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flavour_the_store_lacks_fails_at_build_with_the_reason() {
    let client = memcached().await;
    for kind in [
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
        LockKind::Permit { permits: 3 },
    ] {
        assert!(!client.supports(kind), "memcached keeps {kind} now");
        let err = layer(&client).kind(kind).checked().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{kind}: {err}");
        assert!(err.to_string().contains("memcached"), "{kind}: {err}");
        // Unchecked, the same layer refuses each request instead: 503.
        assert_eq!(
            status_of(layer(&client).kind(kind)).await,
            StatusCode::SERVICE_UNAVAILABLE,
            "{kind}"
        );
    }
    // The flavour it keeps passes, and the checked layer serves.
    let checked = layer(&client).kind(LockKind::Mutex).checked().unwrap();
    assert_eq!(status_of(checked).await, StatusCode::OK);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_the_store_cannot_keep_fails_at_build_with_the_reason() {
    let client = memcached().await;
    // memcached keeps expiries in whole seconds: half a second is below what it can keep.
    let short = Duration::from_millis(500);
    let err = layer(&client).lease(short).checked().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLease, "{err}");
    assert!(err.to_string().contains("500ms"), "{err}");
    assert_eq!(
        status_of(layer(&client).lease(short)).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // A zero max_hold is refused too (InvalidInput), and a lease the store keeps passes.
    let err = layer(&client)
        .max_hold(Duration::ZERO)
        .checked()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    let keepable = client
        .keepable_lease(short)
        .expect("memcached keeps leases");
    let checked = layer(&client).lease(keepable).checked().unwrap();
    assert_eq!(status_of(checked).await, StatusCode::OK);
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_past_the_longest_fails_at_build_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("locks.db").display());
    let client = distlock::connect(&url).await.expect("the SQLite lock file");
    let long = Duration::from_secs(25 * 3600);
    let err = layer(&client).lease(long).checked().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidLease, "{err}");
    assert_eq!(
        status_of(layer(&client).lease(long)).await,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    // SQLite keeps every flavour: each passes.
    for kind in [
        LockKind::Fair,
        LockKind::Read,
        LockKind::Permit { permits: 2 },
    ] {
        layer(&client).kind(kind).checked().unwrap();
    }
    client.shutdown().await;
}

//! The layer and the extractor on a real store: an SQLite lock file in a temporary directory,
//! requests sent through the router as a server would (no socket needed to test the layer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Method, Request, StatusCode};
use axum::routing::{get, post};
use distlock::{Client, LockKind};
use distlock_axum::{KeyRequest, LOCK_LOST_HEADER, LockGuard, LockLayer, OnLost, Undecodable};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower_service::Service;

struct Store {
    _dir: tempfile::TempDir,
    url: String,
    client: Client,
}

async fn store() -> Store {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite:{}", dir.path().join("locks.db").display());
    let client = distlock::connect(&url).await.expect("the SQLite lock file");
    Store {
        _dir: dir,
        url,
        client,
    }
}

fn by_sku(req: &KeyRequest) -> Option<String> {
    Some(format!("stock:{}", req.path_param("sku")?))
}

struct Answer {
    status: StatusCode,
    body: String,
    lost_header: bool,
}

async fn send(app: &Router, method: Method, path: &str) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .expect("a request");
    let response = app.clone().call(req).await.expect("routers do not fail");
    let status = response.status();
    let lost_header = response.headers().contains_key(LOCK_LOST_HEADER);
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("the body");
    Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        lost_header,
    }
}

/// The handler answers with the fencing token it was given.
async fn token(guard: LockGuard) -> String {
    guard.fencing_token().get().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_answers_the_configured_status_without_running_the_handler() {
    let s = store().await;
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = |State(ran): State<Arc<AtomicUsize>>| async move {
        ran.fetch_add(1, Ordering::SeqCst);
        "sold\n"
    };
    let app = |layer: LockLayer<_>| {
        Router::new()
            .route("/order/{sku}", post(handler))
            .layer(layer)
            .with_state(ran.clone())
    };
    let default = app(LockLayer::new(s.client.clone(), by_sku));
    let conflict = app(LockLayer::new(s.client.clone(), by_sku).when_held(StatusCode::CONFLICT));
    let waiting = app(LockLayer::new(s.client.clone(), by_sku)
        .wait(Duration::from_millis(50))
        .when_held(StatusCode::SERVICE_UNAVAILABLE));

    let held = s.client.lock("stock:a").acquire().await.unwrap();
    assert_eq!(
        send(&default, Method::POST, "/order/a").await.status,
        StatusCode::LOCKED
    );
    assert_eq!(
        send(&conflict, Method::POST, "/order/a").await.status,
        StatusCode::CONFLICT
    );
    let answer = send(&waiting, Method::POST, "/order/a").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.body.contains("held by another"), "{}", answer.body);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "no handler ran under a held lock"
    );

    // Another key is another lock.
    assert_eq!(
        send(&default, Method::POST, "/order/b").await.status,
        StatusCode::OK
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(held.release().await.unwrap());
    assert_eq!(
        send(&default, Method::POST, "/order/a").await.status,
        StatusCode::OK
    );
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_gets_the_token_and_the_lock_is_free_when_the_response_is() {
    let s = store().await;
    let app = Router::new()
        .route("/order/{sku}", post(token))
        .layer(LockLayer::new(s.client.clone(), by_sku));
    let mut last = 0;
    for _ in 0..3 {
        let answer = send(&app, Method::POST, "/order/a").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        assert!(!answer.lost_header);
        let token: u64 = answer.body.parse().expect("a token");
        assert!(token > last, "tokens increase: {token} after {last}");
        // Released before the response was given: free now, and the next holder's token is larger.
        let next = s.client.lock("stock:a").try_acquire().await.unwrap();
        let next = next.expect("the lock is free once the response is produced");
        assert!(next.fencing_token().get() > token);
        last = next.fencing_token().get();
        assert!(next.release().await.unwrap());
    }
    s.client.shutdown().await;
}

/// The handler of the lost-lease tests: says it started, then waits for `proceed` (or forever).
#[derive(Clone)]
struct Gate {
    started: mpsc::UnboundedSender<()>,
    dropped: Arc<AtomicBool>,
    committed: Arc<AtomicBool>,
}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn gate() -> (Gate, mpsc::UnboundedReceiver<()>) {
    let (started, rx) = mpsc::unbounded_channel();
    let gate = Gate {
        started,
        dropped: Arc::new(AtomicBool::new(false)),
        committed: Arc::new(AtomicBool::new(false)),
    };
    (gate, rx)
}

/// Runs until the lock is lost, then "commits" (a write that would have been a late one).
async fn work_until_lost(State(gate): State<Gate>, guard: LockGuard) -> &'static str {
    let _flag = DropFlag(gate.dropped.clone());
    let _ = gate.started.send(());
    let why = guard.lost().await;
    assert_eq!(why.kind(), distlock::ErrorKind::LeaseLost);
    // Give the layer its chance to see the loss first, as a write's round trip would.
    tokio::task::yield_now().await;
    gate.committed.store(true, Ordering::SeqCst);
    "committed\n"
}

/// Takes the lock away from the layer's holder as an operator's forced release would, from
/// another client (another process would do the same): the holder learns it at its next renewal.
async fn take_away(url: &str, name: &str) {
    let other = distlock::connect(url).await.unwrap();
    let forced = other.force_release(name, LockKind::Mutex).await.unwrap();
    assert_eq!(forced.removed.len(), 1, "{name} was held once");
    other.shutdown().await;
}

/// Sends `POST /order/a` to [`work_until_lost`] behind `layer`; returns once the handler runs.
async fn start_gated<K>(layer: LockLayer<K>) -> (JoinHandle<Answer>, Gate)
where
    K: Fn(&KeyRequest<'_>) -> Option<String> + Send + Sync + 'static,
{
    let (gate, mut started) = gate();
    let app = Router::new()
        .route("/order/{sku}", post(work_until_lost))
        .layer(layer)
        .with_state(gate.clone());
    let request = tokio::spawn(async move { send(&app, Method::POST, "/order/a").await });
    started.recv().await.expect("the handler started");
    (request, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_handler_before_it_commits() {
    let s = store().await;
    let layer = LockLayer::new(s.client.clone(), by_sku).lease(Duration::from_millis(300));
    let (request, gate) = start_gated(layer).await;
    take_away(&s.url, "stock:a").await;
    let answer = request.await.unwrap();
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert!(answer.body.contains("lost"), "{}", answer.body);
    assert!(
        gate.dropped.load(Ordering::SeqCst),
        "the handler's future was dropped"
    );
    assert!(
        !gate.committed.load(Ordering::SeqCst),
        "the handler never committed"
    );
    s.client.shutdown().await;
}

/// Issue #38 item 5: a handler that would hold its key for ever (alive, its lease renewed) is
/// stopped once its `max_hold` and the lease after it have passed: 503, and the key is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_a_handler_that_holds_too_long() {
    let s = store().await;
    let (lease, max_hold) = (Duration::from_millis(300), Duration::from_millis(900));
    let layer = LockLayer::new(s.client.clone(), by_sku)
        .lease(lease)
        .max_hold(max_hold);
    let started = std::time::Instant::now();
    let (request, gate) = start_gated(layer).await;
    // Renewed past its lease until the cap: nobody else gets the key meanwhile.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let other = distlock::connect(&s.url).await.unwrap();
    assert!(
        other.lock("stock:a").try_acquire().await.unwrap().is_none(),
        "the key was free before the cap"
    );
    let answer = tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .expect("the handler was stopped")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.body
    );
    assert!(took >= max_hold, "stopped after {took:?}, before the cap");
    assert!(
        gate.dropped.load(Ordering::SeqCst) && !gate.committed.load(Ordering::SeqCst),
        "the handler was dropped before it committed"
    );
    let next = other.lock("stock:a").try_acquire().await.unwrap();
    assert!(next.is_some(), "the key stayed held after the cap");
    drop(next);
    other.shutdown().await;
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_marks_the_response_when_asked_to() {
    let s = store().await;
    let layer = LockLayer::new(s.client.clone(), by_sku)
        .lease(Duration::from_millis(300))
        .on_lost(OnLost::Mark);
    let (request, gate) = start_gated(layer).await;
    take_away(&s.url, "stock:a").await;
    let answer = request.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(answer.lost_header, "the response says the lock was lost");
    assert!(gate.committed.load(Ordering::SeqCst));
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_mid_handler_frees_its_lock() {
    let s = store().await;
    let (request, gate) = start_gated(LockLayer::new(s.client.clone(), by_sku)).await;
    // The client went away: the server drops the request's future.
    request.abort();
    let _ = request.await;
    assert!(gate.dropped.load(Ordering::SeqCst));
    // The dropped guard's release is queued in the background: once it has run, the lock is free.
    s.client.flush().await;
    let next = s.client.lock("stock:a").try_acquire().await.unwrap();
    let next = next.expect("free once the dropped request's release ran");
    assert!(next.release().await.unwrap());
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_key_names_no_lock_for_go_through_unlocked() {
    let s = store().await;
    let key = |req: &KeyRequest| match req.parts().method {
        Method::POST => Some(format!("doc:{}", req.path_param("id")?)),
        _ => None,
    };
    async fn maybe(guard: Option<LockGuard>) -> String {
        guard.map_or("unlocked".into(), |g| g.name().to_string())
    }
    let app = Router::new()
        .route("/doc/{id}", get(maybe).post(maybe))
        .route("/must/{id}", get(token))
        .layer(LockLayer::new(s.client.clone(), key));
    assert_eq!(send(&app, Method::GET, "/doc/7").await.body, "unlocked");
    assert_eq!(send(&app, Method::POST, "/doc/7").await.body, "doc:7");
    let answer = send(&app, Method::GET, "/must/7").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(answer.body.contains("no lock was taken"), "{}", answer.body);
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_headers_and_queries_and_a_bad_name_is_the_requests_fault() {
    let s = store().await;
    let app = Router::new()
        .route("/pay", post(token))
        .layer(LockLayer::new(s.client.clone(), |req: &KeyRequest| {
            let account = req
                .header("x-account")
                .or_else(|| req.query_param("account"))?;
            Some(account.to_string())
        }));
    let by_query = send(&app, Method::POST, "/pay?account=acct-1").await;
    assert_eq!(by_query.status, StatusCode::OK, "{}", by_query.body);
    let req = Request::post("/pay")
        .header("x-account", "acct-1")
        .body(Body::empty())
        .unwrap();
    let held = s.client.lock("acct-1").acquire().await.unwrap();
    let by_header = app.clone().call(req).await.unwrap();
    assert_eq!(by_header.status(), StatusCode::LOCKED);
    assert!(held.release().await.unwrap());
    // An empty name is an invalid lock name: the request's fault, not the store's.
    let empty = send(&app, Method::POST, "/pay?account=").await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST, "{}", empty.body);
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_may_release_early_and_finish_without_the_lock() {
    let s = store().await;
    let proceed = Arc::new(tokio::sync::Notify::new());
    let (released_tx, mut released) = mpsc::unbounded_channel::<bool>();
    let handler = {
        let proceed = proceed.clone();
        move |guard: LockGuard| async move {
            let was_ours = guard.clone().release().await.unwrap();
            assert!(guard.is_lost(), "a released guard counts as lost");
            assert_eq!(
                guard.lost().await.kind(),
                distlock::ErrorKind::NotHeld,
                "resolves at once after the release"
            );
            let _ = released_tx.send(was_ours);
            // The rest of the handler (recording the order) runs without the lock.
            proceed.notified().await;
            "recorded\n"
        }
    };
    let app = Router::new()
        .route("/order/{sku}", post(handler))
        .layer(LockLayer::new(s.client.clone(), by_sku));
    let request = tokio::spawn({
        let app = app.clone();
        async move { send(&app, Method::POST, "/order/a").await }
    });
    assert!(released.recv().await.unwrap(), "released while still ours");
    let next = s.client.lock("stock:a").try_acquire().await.unwrap();
    let next = next.expect("free while the handler still runs");
    assert!(next.release().await.unwrap());
    proceed.notify_one();
    let answer = request.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(!answer.lost_header, "an early release is not a lost lock");
    s.client.shutdown().await;
}

/// Counts the handler's runs; answers whether it ran under a lock.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicUsize>);

async fn counted(State(runs): State<Runs>, guard: Option<LockGuard>) -> String {
    runs.0.fetch_add(1, Ordering::SeqCst);
    guard.map_or("unlocked".into(), |g| g.name().to_string())
}

async fn counted_locked(State(runs): State<Runs>, guard: LockGuard) -> String {
    runs.0.fetch_add(1, Ordering::SeqCst);
    guard.name().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_parameter_that_cannot_be_decoded_answers_400_without_running_the_handler() {
    let s = store().await;
    let runs = Runs::default();
    let key = |req: &KeyRequest| Some(format!("w:{}", req.path_param("id")?));
    let app = Router::new()
        .route("/maybe/{id}", post(counted))
        .route("/must/{id}", post(counted_locked))
        // No parameter: the key function finds none, and the request goes through unlocked.
        .route("/list", post(counted))
        .layer(LockLayer::new(s.client.clone(), key))
        .with_state(runs.clone());
    // `%FF` percent-decodes to a byte that is not UTF-8.
    for path in ["/maybe/a%FFb", "/must/a%FFb"] {
        let answer = send(&app, Method::POST, path).await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{path}: {}",
            answer.body
        );
        assert!(
            answer.body.contains("could not be decoded"),
            "{}",
            answer.body
        );
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "no handler ran");
    // Decodable, and absent: as before.
    let locked = send(&app, Method::POST, "/maybe/a%C3%A9b").await;
    assert_eq!(
        (locked.status, locked.body.as_str()),
        (StatusCode::OK, "w:aéb")
    );
    let locked = send(&app, Method::POST, "/must/ab").await;
    assert_eq!(
        (locked.status, locked.body.as_str()),
        (StatusCode::OK, "w:ab")
    );
    let unlocked = send(&app, Method::POST, "/list").await;
    assert_eq!(
        (unlocked.status, unlocked.body.as_str()),
        (StatusCode::OK, "unlocked")
    );
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_cannot_be_decoded_answers_400_without_running_the_handler() {
    let s = store().await;
    let runs = Runs::default();
    let key = |req: &KeyRequest| Some(format!("acct:{}", req.header("x-account")?));
    let app = |handler| {
        Router::new()
            .route("/pay", handler)
            .layer(LockLayer::new(s.client.clone(), key))
            .with_state(runs.clone())
    };
    let maybe = app(post(counted));
    let must = app(post(counted_locked));
    let request = |account: HeaderValue| {
        Request::post("/pay")
            .header("x-account", account)
            .body(Body::empty())
            .unwrap()
    };
    // Bytes above 0x7f are allowed in a header value, but are not visible ASCII.
    let bad = HeaderValue::from_bytes(b"acct-\xe9").unwrap();
    for app in [&maybe, &must] {
        let answer = app.clone().call(request(bad.clone())).await.unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 0, "no handler ran");
    let good = HeaderValue::from_static("acct-1");
    let answer = maybe.clone().call(request(good)).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    // Absent: no key, and the handler that accepts that runs unlocked.
    assert_eq!(send(&maybe, Method::POST, "/pay").await.body, "unlocked");
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
    s.client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_path_param_and_try_header_tell_absent_from_undecodable_and_leave_the_answer_to_the_key()
 {
    let s = store().await;
    let runs = Runs::default();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let key = {
        let seen = seen.clone();
        move |req: &KeyRequest| {
            let param = req.try_path_param("id").map(|p| p.map(str::to_string));
            let header = req.try_header("x-account").map(|h| h.map(str::to_string));
            seen.lock().unwrap().push((param, header));
            // An undecodable part: this key function lets the request through unlocked.
            None
        }
    };
    let app = Router::new()
        .route("/t/{id}", post(counted))
        .route("/t", post(counted))
        .layer(LockLayer::new(s.client.clone(), key))
        .with_state(runs.clone());
    let bad_header = Request::post("/t")
        .header("x-account", HeaderValue::from_bytes(b"\xe9").unwrap())
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        app.clone().call(bad_header).await.unwrap().status(),
        StatusCode::OK
    );
    for path in ["/t/a%FFb", "/t/ab", "/t"] {
        let answer = send(&app, Method::POST, path).await;
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (StatusCode::OK, "unlocked")
        );
    }
    assert_eq!(
        runs.0.load(Ordering::SeqCst),
        4,
        "the key function's None went"
    );
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let undecodable_param = Undecodable::PathParam("id".into());
    let undecodable_header = Undecodable::Header("x-account".into());
    assert_eq!(
        seen,
        [
            (Ok(None), Err(undecodable_header.clone())),
            (Err(undecodable_param.clone()), Ok(None)),
            (Ok(Some("ab".into())), Ok(None)),
            (Ok(None), Ok(None)),
        ]
    );
    assert_eq!(
        undecodable_param.to_string(),
        "path parameter `id` is not UTF-8 once percent-decoded"
    );
    assert_eq!(
        undecodable_header.to_string(),
        "header `x-account` is not visible ASCII"
    );
    s.client.shutdown().await;
}

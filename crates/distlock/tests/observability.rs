//! What an operator sees of distlock: a `tracing` span for every store operation a user
//! triggers (with the backend, the lock's name and the fencing token where known, never the
//! owner token), and the `serde` form of what a status, a forced release and an election
//! report. Over the embedded SQLite store (and SQLite as a fenced resource): spans are opened
//! by the core and the user API, the same for every backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{FencingToken, Leader, LockKind, LockStatus, OwnerToken};
use futures_util::StreamExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One span as recorded: its name and every field given at its start or recorded later.
#[derive(Clone, Debug, Default)]
struct SeenSpan {
    name: &'static str,
    fields: HashMap<String, String>,
}

/// Records every span opened while it is the thread's subscriber.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SeenSpan>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl<S> Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut seen = SeenSpan {
            name: attrs.metadata().name(),
            ..SeenSpan::default()
        };
        attrs.record(&mut Fields(&mut seen.fields));
        let mut spans = self.0.lock().unwrap();
        // Span ids are reused once a span closes: the index is the span's place in the list.
        seen.fields
            .insert("#id".into(), format!("{}", id.into_u64()));
        spans.push(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        let key = format!("{}", id.into_u64());
        if let Some(span) = spans
            .iter_mut()
            .rev()
            .find(|s| s.fields.get("#id") == Some(&key))
        {
            values.record(&mut Fields(&mut span.fields));
        }
    }
}

impl Spans {
    fn named(&self, name: &str) -> Vec<SeenSpan> {
        let spans = self.0.lock().unwrap();
        spans.iter().filter(|s| s.name == name).cloned().collect()
    }

    fn all(&self) -> Vec<SeenSpan> {
        self.0.lock().unwrap().clone()
    }
}

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite:{}", dir.path().join("locks.db").display())
}

#[test]
fn every_public_operation_opens_a_span() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(
        spans
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    // The process-wide subscriber, not a thread's: a callsite first reached on another test's
    // thread (no subscriber there) would otherwise stay disabled for this one too. The other
    // test's spans land here as well; what is asserted below holds with them.
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    let owner = OwnerToken::random();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = distlock::connect(&url).await.unwrap();
        // Locks: a take, a try that finds it held, a wait that runs out, a re-entry, releases.
        let guard = client
            .lock("order:1")
            .owner(owner.clone())
            .acquire()
            .await
            .unwrap();
        let other = distlock::connect(&url).await.unwrap();
        assert!(other.lock("order:1").try_acquire().await.unwrap().is_none());
        let waited = other
            .lock("order:1")
            .acquire_timeout(Duration::from_millis(50))
            .await;
        assert!(waited.unwrap_err().is_timeout());
        let again = guard.reenter().await.unwrap();
        assert!(again.release().await.unwrap());
        guard.leak();
        client
            .lock("order:1")
            .owner(owner.clone())
            .release()
            .await
            .unwrap();
        // Semaphores, multi-locks, status and forced release.
        assert_eq!(client.set_semaphore_permits("pool", 2).await.unwrap(), None);
        assert_eq!(
            client
                .semaphore("pool", 2)
                .available_permits()
                .await
                .unwrap(),
            2
        );
        let both = client.multi_lock(["a", "b"]).acquire().await.unwrap();
        assert_eq!(client.status("a").await.unwrap().len(), 1);
        assert!(!client.status_prefix("").await.unwrap().is_empty());
        assert!(client.warnings().await.is_empty());
        let forced = client.force_release("a", LockKind::Mutex).await.unwrap();
        assert_eq!(forced.removed.len(), 1);
        drop(both);
        // Elections and latches.
        let election = client.election("scheduler");
        let leadership = election.campaign("node-a").await.unwrap();
        leadership.proclaim("node-a:8080").await.unwrap();
        let leader = election.leader().await.unwrap().expect("a leader");
        let mut leaders = Box::pin(election.observe().await.unwrap());
        assert_eq!(leaders.next().await.unwrap().unwrap(), leader);
        assert!(leadership.resign().await.unwrap());
        let latch = client.latch("deploy");
        assert!(latch.try_set_count(1).await.unwrap());
        assert_eq!(latch.count().await.unwrap(), 1);
        assert_eq!(latch.count_down().await.unwrap(), 0);
        latch.wait_timeout(Duration::from_secs(1)).await.unwrap();
        // A fenced write on the resource's own database: accepted, then a stale one refused.
        let db = sqlx::SqlitePool::connect("sqlite::memory:").await.unwrap();
        let fence = distlock::fence::SqlFence::<sqlx::Sqlite>::install(&db)
            .await
            .unwrap();
        let mut tx = db.begin().await.unwrap();
        fence
            .check(&mut tx, "stock", FencingToken::new(5))
            .await
            .unwrap();
        let stale = fence.check(&mut tx, "stock", FencingToken::new(3)).await;
        assert!(stale.unwrap_err().is_stale_token());
        tx.commit().await.unwrap();
        client.flush().await;
        other.shutdown().await;
        client.shutdown().await;
    });

    let all = spans.all();
    for name in [
        "distlock.connect",
        "distlock.acquire",
        "distlock.reenter",
        "distlock.release",
        "distlock.set_permits",
        "distlock.available_permits",
        "distlock.multi_acquire",
        "distlock.status",
        "distlock.warnings",
        "distlock.force_release",
        "distlock.campaign",
        "distlock.proclaim",
        "distlock.leader",
        "distlock.observe",
        "distlock.resign",
        "distlock.latch",
        "distlock.flush",
        "distlock.fence_check",
    ] {
        let seen = spans.named(name);
        assert!(!seen.is_empty(), "no {name} span among {all:#?}");
        for span in &seen {
            assert_eq!(
                span.fields.get("backend").map(String::as_str),
                Some("sqlite"),
                "{span:?}"
            );
        }
    }
    let checks: Vec<_> = spans
        .named("distlock.fence_check")
        .iter()
        .map(|s| (s.fields["resource"].clone(), s.fields["token"].clone()))
        .collect();
    assert_eq!(
        checks,
        [("stock".into(), "5".into()), ("stock".into(), "3".into())]
    );
    // Each span says which lock, election or latch it is about.
    for span in all.iter().filter(|s| s.name.starts_with("distlock.")) {
        let about = [
            "lock", "locks", "election", "latch", "prefix", "url", "resource",
        ]
        .iter()
        .any(|f| span.fields.contains_key(*f));
        // Flushing and the store's warnings are about the whole client.
        assert!(
            about || span.name == "distlock.flush" || span.name == "distlock.warnings",
            "{span:?} names nothing"
        );
    }
    // Acquisitions say how they ended, and the token of a grant.
    let acquires = spans.named("distlock.acquire");
    let result_of = |result: &str| {
        acquires
            .iter()
            .filter(|s| s.fields.get("result").map(String::as_str) == Some(result))
            .count()
    };
    assert!(result_of("acquired") >= 1, "{acquires:#?}");
    assert_eq!(result_of("contended"), 1, "{acquires:#?}");
    assert_eq!(result_of("timeout"), 1, "{acquires:#?}");
    for granted in acquires
        .iter()
        .filter(|s| s.fields.get("result").map(String::as_str) == Some("acquired"))
    {
        let token: u64 = granted.fields["token"].parse().expect("a numeric token");
        assert!(token > 0, "{granted:?}");
    }
    let forced = &spans.named("distlock.force_release")[0];
    assert!(forced.fields.contains_key("token"), "{forced:?}");
    let terms: Vec<_> = spans
        .named("distlock.campaign")
        .iter()
        .filter_map(|s| s.fields.get("term").cloned())
        .collect();
    assert_eq!(terms.len(), 1, "the campaign's span lacks its term");
    // The owner token proves ownership: it is never in a span.
    for span in &all {
        for value in span.fields.values() {
            assert!(
                !value.contains(owner.as_str()),
                "{span:?} shows the owner token"
            );
        }
    }
    // The URL is shown redacted (no password here, but the field is there).
    let connect = &spans.named("distlock.connect")[0];
    assert!(connect.fields["url"].starts_with("sqlite:"), "{connect:?}");
}

#[test]
fn status_types_serialize_as_the_cli_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = distlock::connect(&url).await.unwrap();
        let guard = client.semaphore("pool", 3).acquire().await.unwrap();
        let status = client.status("pool").await.unwrap();
        let json = serde_json::to_value(&status).unwrap();
        let lock = &json[0];
        assert_eq!(lock["name"], "pool");
        assert_eq!(lock["kind"], "semaphore/3");
        let holding = &lock["holdings"][0];
        assert_eq!(holding["token"], guard.fencing_token().get());
        assert_eq!(holding["holder"]["pid"], std::process::id());
        assert!(holding["since_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert!(holding["lease_left_ms"].as_u64().unwrap() <= 30_000);
        // And back: the same status.
        let back: Vec<LockStatus> = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        assert_eq!(back[0].kind, LockKind::Permit { permits: 3 });
        assert_eq!(back[0].holdings[0].token, guard.fencing_token());

        let forced = client
            .force_release("pool", LockKind::Permit { permits: 3 })
            .await
            .unwrap();
        let json = serde_json::to_value(&forced).unwrap();
        assert_eq!(json["fence"], forced.fence.get());
        assert_eq!(json["removed"][0]["token"], guard.fencing_token().get());
        drop(guard);
        client.shutdown().await;
    });
    let leader: Leader = serde_json::from_str(r#"{"value": "node-a", "term": 7}"#).unwrap();
    assert_eq!(leader.term, FencingToken::new(7));
    assert_eq!(
        serde_json::to_string(&leader).unwrap(),
        r#"{"value":"node-a","term":7}"#
    );
    for kind in distlock_testkit::flavour::every_lock_kind(5) {
        let text = serde_json::to_string(&kind).unwrap();
        assert_eq!(serde_json::from_str::<LockKind>(&text).unwrap(), kind);
    }
    let bad = serde_json::from_str::<LockKind>(r#""semaphore/many""#).unwrap_err();
    assert!(bad.to_string().contains("not a kind of lock"), "{bad}");
}

//! The metrics distlock records through the `metrics` facade move as a lock is used: read back
//! with metrics-util's DebuggingRecorder, over the embedded SQLite store (the counters are
//! recorded by the core, the same for every backend).

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// (metric name, class label, result or error label) → counter value, gauge value, or histogram
/// sample count.
fn read(snapshot: metrics_util::debugging::Snapshot) -> HashMap<(String, String, String), f64> {
    snapshot
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_string())
            };
            let class = label("class").unwrap_or_default();
            let result = label("result")
                .or_else(|| label("error"))
                .unwrap_or_default();
            let backend = key
                .labels()
                .find(|l| l.key() == "backend")
                .map(|l| l.value().to_string());
            assert_eq!(backend.as_deref(), Some("sqlite"), "{key:?}");
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(samples) => samples.len() as f64,
            };
            ((key.name().to_string(), class, result), value)
        })
        .collect()
}

/// Runs `work` on a current-thread runtime with `recorder` as the thread's recorder: the
/// watchdog's tasks run on this thread too, so every metric lands in it.
fn with_recorder(recorder: &dyn metrics::Recorder, work: impl std::future::Future<Output = ()>) {
    metrics::with_local_recorder(recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    });
}

#[test]
fn counters_move_as_locks_are_used() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    distlock::metrics::set_class(|name| {
        if name.starts_with("payment:") {
            "payment".into()
        } else {
            "other".into()
        }
    });
    with_recorder(&recorder, async {
        let client = distlock::connect(&url).await.unwrap();
        let other = distlock::connect(&url).await.unwrap();
        // Two acquisitions with a release between: 2 acquired, 2 hold times, 2 waits.
        for _ in 0..2 {
            let guard = client.lock("payment:7").acquire().await.unwrap();
            assert!(guard.release().await.unwrap());
        }
        // Held by another client: a timeout, and a try that finds it held.
        let held = client
            .lock("payment:8")
            .lease(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        let timed_out = other
            .lock("payment:8")
            .acquire_timeout(Duration::from_millis(50))
            .await;
        assert!(timed_out.unwrap_err().is_timeout());
        assert!(
            other
                .lock("payment:8")
                .try_acquire()
                .await
                .unwrap()
                .is_none()
        );
        // The watchdog renews every 100 ms; a forced release makes the next renewal fail
        // to find it: lost.
        tokio::time::sleep(Duration::from_millis(350)).await;
        let forced = other
            .force_release("payment:8", distlock::LockKind::Mutex)
            .await
            .unwrap();
        assert_eq!(forced.removed.len(), 1);
        let lost = tokio::time::timeout(Duration::from_secs(2), held.lost()).await;
        assert!(lost.is_ok(), "the forced-out holder never learned it");
        assert!(!held.release().await.unwrap());
        // A bad name is refused before any acquisition starts: not counted.
        assert!(client.lock("").acquire().await.is_err());
        // A semaphore asked with another size than its own: an error the store answers.
        let permit = client.semaphore("job-2", 2).acquire().await.unwrap();
        let refused = other.semaphore("job-2", 3).try_acquire().await.unwrap_err();
        assert_eq!(refused.kind(), distlock::ErrorKind::InvalidInput);
        assert!(permit.release().await.unwrap());
        let _ = client.lock("job-1").try_acquire().await.unwrap();
        client.shutdown().await;
        other.shutdown().await;
    });
    let seen = read(snapshotter.snapshot());
    let labelled = |name: &str, class: &str, result: &str| {
        seen.get(&(name.to_string(), class.to_string(), result.to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    let get = |name: &str, class: &str| labelled(name, class, "");
    let acquires = |class: &str, result: &str| labelled("distlock_acquires_total", class, result);
    assert_eq!(acquires("payment", "acquired"), 3.0, "{seen:#?}");
    assert_eq!(get("distlock_wait_seconds", "payment"), 3.0, "{seen:#?}");
    // The wait that ran out is a timeout; the try that found the lock held is contention, not
    // a timeout (ordinary try-lock use must not fire timeout alerts).
    assert_eq!(acquires("payment", "timeout"), 1.0, "{seen:#?}");
    assert_eq!(acquires("payment", "contended"), 1.0, "{seen:#?}");
    assert_eq!(acquires("payment", "error"), 0.0, "{seen:#?}");
    // The refused size: an error, its kind a bounded snake_case label.
    assert_eq!(acquires("other", "error"), 1.0, "{seen:#?}");
    assert_eq!(
        labelled("distlock_acquire_errors_total", "other", "invalid_input"),
        1.0,
        "{seen:#?}"
    );
    assert_eq!(get("distlock_lost_total", "payment"), 1.0, "{seen:#?}");
    assert_eq!(get("distlock_hold_seconds", "payment"), 3.0, "{seen:#?}");
    assert!(
        get("distlock_renewals_total", "payment") >= 2.0,
        "{seen:#?}"
    );
    assert_eq!(get("distlock_waiters", "payment"), 0.0, "{seen:#?}");
    assert_eq!(acquires("other", "acquired"), 2.0, "{seen:#?}");
    // Every label value is bounded snake_case: no lock names, no Debug text.
    for (name, class, result) in seen.keys() {
        for value in [class, result] {
            assert!(
                value
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}: label value {value:?}"
            );
        }
    }
}

/// A Prometheus scrape shows `# HELP` (and the unit, in the help or the name) for every metric
/// distlock records, including those of a wait, a try, a renewal and a loss.
#[test]
fn every_metric_is_described() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("m.db").display());
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    with_recorder(&recorder, async {
        let client = distlock::connect(&url).await.unwrap();
        let held = client
            .lock("job:1")
            .lease(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        assert!(client.lock("job:1").try_acquire().await.unwrap().is_none());
        let timed_out = client
            .lock("job:1")
            .acquire_timeout(Duration::from_millis(150))
            .await;
        assert!(timed_out.unwrap_err().is_timeout());
        let permit = client.semaphore("job:2", 2).acquire().await.unwrap();
        let refused = client.semaphore("job:2", 3).acquire().await;
        assert_eq!(
            refused.unwrap_err().kind(),
            distlock::ErrorKind::InvalidInput
        );
        assert!(permit.release().await.unwrap());
        client
            .force_release("job:1", distlock::LockKind::Mutex)
            .await
            .unwrap();
        let lost = tokio::time::timeout(Duration::from_secs(2), held.lost()).await;
        assert!(lost.is_ok(), "the forced-out holder never learned it");
        drop(held);
        client.shutdown().await;
    });
    let text = handle.render();
    let described: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for name in [
        "distlock_acquires_total",
        "distlock_acquire_errors_total",
        "distlock_wait_seconds",
        "distlock_hold_seconds",
        "distlock_waiters",
        "distlock_renewals_total",
        "distlock_lost_total",
    ] {
        assert!(typed.contains(&name), "{name} was not recorded:\n{text}");
    }
    for name in &typed {
        assert!(
            name.starts_with("distlock_") && described.contains(name),
            "{name} has no # HELP:\n{text}"
        );
    }
}

//! The metrics distlock records through the `metrics` facade move as a lock is used: read back
//! with metrics-util's DebuggingRecorder, over the embedded SQLite store (the counters are
//! recorded by the core, the same for every backend).

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// (metric name, class label) → counter value, gauge value, or histogram sample count.
fn read(snapshot: metrics_util::debugging::Snapshot) -> HashMap<(String, String), f64> {
    snapshot
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let class = key
                .labels()
                .find(|l| l.key() == "class")
                .map(|l| l.value().to_string())
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
            ((key.name().to_string(), class), value)
        })
        .collect()
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
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
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
            // A bad name is an error, counted as such.
            assert!(client.lock("").acquire().await.is_err());
            let _ = client.lock("job-1").try_acquire().await.unwrap();
            client.shutdown().await;
            other.shutdown().await;
        });
    });
    let seen = read(snapshotter.snapshot());
    let get = |name: &str, class: &str| {
        seen.get(&(name.to_string(), class.to_string()))
            .copied()
            .unwrap_or(0.0)
    };
    assert_eq!(
        get("distlock_acquisitions_total", "payment"),
        3.0,
        "{seen:#?}"
    );
    assert_eq!(get("distlock_wait_seconds", "payment"), 3.0, "{seen:#?}");
    assert_eq!(
        get("distlock_acquire_timeouts_total", "payment"),
        2.0,
        "{seen:#?}"
    );
    assert_eq!(get("distlock_lost_total", "payment"), 1.0, "{seen:#?}");
    assert_eq!(get("distlock_hold_seconds", "payment"), 3.0, "{seen:#?}");
    assert!(
        get("distlock_renewals_total", "payment") >= 2.0,
        "{seen:#?}"
    );
    assert_eq!(get("distlock_waiters", "payment"), 0.0, "{seen:#?}");
    assert_eq!(
        get("distlock_acquisitions_total", "other"),
        1.0,
        "{seen:#?}"
    );
}

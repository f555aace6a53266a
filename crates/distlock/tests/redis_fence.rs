//! The Redis fence: fenced SET / HSET / INCRBY refuse a write by an older holding once a newer
//! one has written, on the caller's own connection.

use std::sync::Arc;

use distlock::fence::RedisFence;
use distlock::{ErrorKind, FencingToken, OwnerToken};
use redis::{AsyncCommands, aio::MultiplexedConnection};

const WRITERS: u64 = 8;

async fn conn() -> Option<MultiplexedConnection> {
    if distlock_testkit::skipped("redis", "redis fence cases") {
        return None;
    }
    let url = std::env::var("DISTLOCK_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let client = redis::Client::open(url.as_str()).unwrap();
    Some(
        client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| {
                panic!("Redis not reachable at 127.0.0.1:6379 ({e}); run scripts/services.sh")
            }),
    )
}

/// A resource name and data key no other run uses.
fn unique(what: &str) -> String {
    format!("test:fence:{what}:{}", &OwnerToken::random().as_str()[..10])
}

#[tokio::test]
async fn older_token_is_refused_after_a_newer_write() {
    let Some(mut conn) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("older");
    let (value, hash, counter) = (
        format!("{resource}:v"),
        format!("{resource}:h"),
        format!("{resource}:n"),
    );
    let (t1, t2) = (FencingToken::new(41), FencingToken::new(42));

    fence
        .set(&mut conn, &resource, t2, &value, "t2")
        .await
        .unwrap();
    let refused = fence
        .set(&mut conn, &resource, t1, &value, "t1")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::StaleToken, "{refused}");
    assert!(refused.to_string().contains("42"), "{refused}");
    let refused = fence
        .hset(&mut conn, &resource, t1, &hash, "f", "t1")
        .await
        .unwrap_err();
    assert!(refused.is_stale_token());
    let refused = fence
        .incr_by(&mut conn, &resource, t1, &counter, 5)
        .await
        .unwrap_err();
    assert!(refused.is_stale_token());

    let v: String = conn.get(&value).await.unwrap();
    assert_eq!(v, "t2");
    let h: Option<String> = conn.hget(&hash, "f").await.unwrap();
    assert_eq!(h, None);
    let n: Option<i64> = conn.get(&counter).await.unwrap();
    assert_eq!(n, None);
    assert_eq!(
        fence.last_token(&mut conn, &resource).await.unwrap(),
        Some(t2)
    );
    let _: () = conn
        .del(&[fence.key(&resource).unwrap(), value])
        .await
        .unwrap();
}

#[tokio::test]
async fn equal_token_is_refused_the_second_time() {
    let Some(mut conn) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("equal");
    let hash = format!("{resource}:h");
    let token = FencingToken::new(7);
    assert_eq!(
        fence
            .hset(&mut conn, &resource, token, &hash, "f", 1)
            .await
            .unwrap(),
        1
    );
    let refused = fence
        .hset(&mut conn, &resource, token, &hash, "f", 2)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::StaleToken, "{refused}");
    let h: i64 = conn.hget(&hash, "f").await.unwrap();
    assert_eq!(h, 1);
    // A failed write leaves the fence where it was.
    let _: () = conn.set(format!("{resource}:s"), "x").await.unwrap();
    let wrong_type = fence
        .incr_by(
            &mut conn,
            &resource,
            FencingToken::new(8),
            &format!("{resource}:s"),
            1,
        )
        .await
        .unwrap_err();
    assert_eq!(wrong_type.kind(), ErrorKind::Backend, "{wrong_type}");
    assert_eq!(
        fence.last_token(&mut conn, &resource).await.unwrap(),
        Some(token)
    );
    let _: () = conn
        .del(&[fence.key(&resource).unwrap(), hash, format!("{resource}:s")])
        .await
        .unwrap();
}

/// Writers take increasing tokens one after the other and write concurrently, each issuing its
/// write before the next takes its token (as a lock hands over): every write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_with_increasing_tokens_all_land_in_order() {
    let Some(conn) = conn().await else { return };
    let fence = RedisFence::new();
    let resource = unique("order");
    let counter = format!("{resource}:n");
    let next = Arc::new(tokio::sync::Mutex::new(0u64));
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let (mut conn, fence, next) = (conn.clone(), fence.clone(), next.clone());
        let (resource, counter) = (resource.clone(), counter.clone());
        writers.push(tokio::spawn(async move {
            let mut turn = next.lock().await;
            *turn += 1;
            let token = FencingToken::new(*turn);
            // Sent before the turn passes: the multiplexed connection keeps the order.
            let write = fence.incr_by(&mut conn, &resource, token, &counter, 1);
            let n = write.await.unwrap();
            drop(turn);
            (token, n)
        }));
    }
    let mut landed = Vec::new();
    for w in writers {
        landed.push(w.await.unwrap());
    }
    landed.sort();
    // The n-th token saw the counter at n: accepted in token order.
    for (token, n) in &landed {
        assert_eq!(token.get() as i64, *n);
    }
    let mut conn = conn;
    assert_eq!(
        fence.last_token(&mut conn, &resource).await.unwrap(),
        Some(FencingToken::new(WRITERS))
    );
    let _: () = conn
        .del(&[fence.key(&resource).unwrap(), counter])
        .await
        .unwrap();
}

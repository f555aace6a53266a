//! etcd's `concurrency.Mutex` cycle (client/v3/concurrency/mutex.go), uncontended, sent with the
//! same client library as distlock's etcd backend: one session lease granted once; `Lock` is one
//! transaction (if `pfx/<lease hex>` does not exist: put it on the lease and read the oldest key
//! under `pfx/`; else read it and the oldest), `Unlock` one `Delete`. Each worker its own `pfx`.
//! Prints cycles per second: the floor that etcd-client's stack and the server set for a
//! two-request cycle, to set distlock's rate against.
//!
//! To find what distlock's cycle adds, each difference can be switched on alone:
//! `FLOOR_VALUE=N` puts an N-byte value (distlock's contender entry is about 100),
//! `FLOOR_AHEAD=1` also reads the two newest keys in the put's transaction (the key ahead),
//! `FLOOR_RELEASE=txn` deletes in a transaction compared on the key's create revision and on its
//! value's two bounds (distlock's release), instead of a plain `Delete`.
//!
//!     CARGO_TARGET_DIR=/tmp/etcd-mutex-floor cargo run --release --offline -- \
//!         [endpoint, default 127.0.0.1:2379] [workers, default 1] [seconds, default 5]

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

#[tokio::main]
async fn main() -> Result<(), etcd_client::Error> {
    let mut args = std::env::args().skip(1);
    let endpoint = args.next().unwrap_or_else(|| "127.0.0.1:2379".into());
    let workers: usize = args.next().map_or(1, |w| w.parse().expect("workers"));
    let seconds: u64 = args.next().map_or(5, |s| s.parse().expect("seconds"));
    let client = Client::connect([endpoint], None).await?;
    // The session: one lease for the whole run, as a concurrency.Session holds (no keep-alive
    // needed within its TTL).
    let lease = client.lease_client().grant(60, None).await?.id();
    let run = std::process::id();
    let value = "v".repeat(std::env::var("FLOOR_VALUE").map_or(0, |v| v.parse().expect("bytes")));
    let ahead = std::env::var("FLOOR_AHEAD").is_ok_and(|a| a == "1");
    let txn_release = std::env::var("FLOOR_RELEASE").is_ok_and(|r| r == "txn");
    let end = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut kv = client.kv_client();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let pfx = format!("floor-{run}/{w}/");
            let key = format!("{pfx}{lease:x}");
            let oldest = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
                .with_limit(1);
            let newest = GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(2);
            let mut cycles = 0u64;
            while Instant::now() < end {
                let mut then = vec![
                    TxnOp::put(
                        key.as_str(),
                        value.as_str(),
                        Some(PutOptions::new().with_lease(lease)),
                    ),
                    TxnOp::get(pfx.as_str(), Some(oldest.clone())),
                ];
                if ahead {
                    then.push(TxnOp::get(pfx.as_str(), Some(newest.clone())));
                }
                let txn = Txn::new()
                    .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                    .and_then(then)
                    .or_else([
                        TxnOp::get(key.as_str(), None),
                        TxnOp::get(pfx.as_str(), Some(oldest.clone())),
                    ]);
                let answer = kv.txn(txn).await?;
                assert!(answer.succeeded(), "uncontended: the key was not there");
                if txn_release {
                    let created = answer.header().map_or(0, |h| h.revision());
                    let txn = Txn::new()
                        .when([
                            Compare::create_revision(key.as_str(), CompareOp::Equal, created),
                            Compare::value(key.as_str(), CompareOp::Greater, ""),
                            Compare::value(key.as_str(), CompareOp::Less, "w"),
                        ])
                        .and_then([TxnOp::delete(key.as_str(), None)]);
                    kv.txn(txn).await?;
                } else {
                    kv.delete(key.as_str(), None).await?;
                }
                cycles += 1;
            }
            Ok::<u64, etcd_client::Error>(cycles)
        }));
    }
    let mut cycles = 0;
    for t in tasks {
        cycles += t.await.expect("worker")?;
    }
    let took = started.elapsed().as_secs_f64();
    client.lease_client().revoke(lease).await?;
    println!(
        "{{\"cycles\":{cycles},\"cycles_per_sec\":{:.1}}}",
        cycles as f64 / took
    );
    Ok(())
}

use distlock_testkit::faults::peers::{PartitionRequest, cut_off_the_leader};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread")]
async fn scratch_zk_partition() {
    let mut ensemble = tokio::task::block_in_place(|| {
        distlock_testkit::servers::start_zookeeper_ensemble_with_peer_links(3).unwrap()
    });
    let url = ensemble.url(Duration::from_secs(3));
    let client = distlock::connect(&url).await.unwrap();
    for round in 0..3 {
        let g = client.lock("scratch").acquire().await.unwrap();
        g.release().await.unwrap();
        let cut = tokio::task::block_in_place(|| {
            cut_off_the_leader(&mut ensemble, PartitionRequest::Cut).unwrap()
        });
        eprintln!("round {round}: cut {cut:?}");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(8) {
            let t = Instant::now();
            match client
                .lock("scratch")
                .acquire_timeout(Duration::from_secs(2))
                .await
            {
                Ok(g) => {
                    let _ = g.release().await;
                    eprintln!("{:.2} ok in {:?}", t0.elapsed().as_secs_f64(), t.elapsed());
                }
                Err(e) => {
                    eprintln!(
                        "{:.2} err {} after {:?}",
                        t0.elapsed().as_secs_f64(),
                        distlock::error::chain(&e),
                        t.elapsed()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        tokio::task::block_in_place(|| {
            cut_off_the_leader(&mut ensemble, PartitionRequest::Heal).unwrap()
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

//! A database restart while a lease lock is held, on private PostgreSQL and MariaDB servers:
//! the lock survives (it is a table row) and the watchdog recovers after reconnecting; a holder
//! whose renewal cannot reach the database before its lease ends gets `lost()`.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

use std::time::Duration;

use distlock_testkit::servers::{PrivateStore, start_mariadb, start_postgres};

/// Long enough to cover a stop and start on a loaded machine (renewal every 4 s).
const SURVIVING_LEASE: Duration = Duration::from_secs(12);
const SHORT_LEASE: Duration = Duration::from_secs(2);

async fn restart_cases(server: &mut dyn PrivateStore) {
    let url = &server.url();
    let client = distlock::connect(url).await.unwrap();

    // A restart shorter than the lease: the lock survives and renewal resumes.
    let kept = client
        .lock("restart/kept")
        .lease(SURVIVING_LEASE)
        .acquire()
        .await
        .unwrap();
    tokio::task::block_in_place(|| server.stop()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    tokio::task::block_in_place(|| server.start_again()).unwrap();
    // Past the lease: only renewals after the restart can have kept it.
    tokio::time::sleep(SURVIVING_LEASE + Duration::from_secs(3)).await;
    assert!(!kept.is_lost(), "the lease was lost across a short restart");
    let other = distlock::connect(url).await.unwrap();
    assert!(
        other
            .lock("restart/kept")
            .try_acquire()
            .await
            .unwrap()
            .is_none(),
        "the lock did not survive the restart"
    );
    assert!(
        kept.release().await.unwrap(),
        "the survivor could not release"
    );

    // Down for longer than the lease: the holder is told, and the lock is free after restart.
    let doomed = client
        .lock("restart/doomed")
        .lease(SHORT_LEASE)
        .acquire()
        .await
        .unwrap();
    let first = doomed.fencing_token();
    tokio::task::block_in_place(|| server.stop()).unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(30), doomed.lost()).await;
    tokio::task::block_in_place(|| server.start_again()).unwrap();
    assert!(
        lost.is_ok(),
        "lost() did not fire while the database was down"
    );
    let next = other
        .lock("restart/doomed")
        .acquire_timeout(Duration::from_secs(15))
        .await
        .unwrap();
    assert!(next.fencing_token() > first, "fencing token went back");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart() {
    if sql_cases::db::skipped("postgres") {
        return;
    }
    let mut server = start_postgres().unwrap();
    restart_cases(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_restart() {
    if sql_cases::db::skipped("mysql") {
        return;
    }
    let mut server = start_mariadb().unwrap();
    restart_cases(&mut server).await;
}

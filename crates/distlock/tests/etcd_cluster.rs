//! The etcd backend on a private 3-member cluster of its own, whose members are killed and
//! paused: a follower killed, the leader killed while locks change hands, a holder's only member
//! paused past the session TTL, and a waiter's only member paused past it while the lock is
//! freed. Each test starts its own cluster on free ports; they take turns (see
//! [`one_at_a_time`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{Client, ErrorKind, connect};
use distlock_testkit::history::{self, Hold};
use distlock_testkit::servers::{EtcdCluster, start_etcd_cluster};
use distlock_testkit::{Failure, Outcome, check, monotonic_ns};
use tokio::time::Instant;

/// The session TTL of every client here, in seconds: short, so a cut-off session ends in
/// seconds.
const TTL: u64 = 3;
const TTL_D: Duration = Duration::from_secs(TTL);

/// Four 3-member clusters at once on a 2-core machine starve elections and hand-offs (one run in
/// fifteen saw too few holds after the leader's death): the tests take turns, so their timings
/// measure etcd and the backend, not the machine.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    TURN.lock().await
}

/// Runs a blocking cluster call (etcdctl, waiting for a member) without stalling the runtime.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A distlock error with its causes, for failure messages.
fn why(e: &distlock::Error) -> String {
    distlock::error::chain(e)
}

fn fail(e: distlock::Error) -> Failure {
    Failure(why(&e))
}

async fn client(url: &str) -> Result<Client, Failure> {
    connect(url)
        .await
        .map_err(|e| Failure(format!("connecting to {url}: {}", why(&e))))
}

/// A member that does not lead right now.
fn follower(cluster: &EtcdCluster) -> Result<usize, Failure> {
    let leader = blocking(|| cluster.leader())?;
    Ok((leader + 1) % 3)
}

fn others(x: usize) -> Vec<usize> {
    (0..3).filter(|&i| i != x).collect()
}

/// The keys of lock `name` in etcd, as (create revision, lease id).
fn lock_keys(cluster: &EtcdCluster, name: &str) -> Result<Vec<(u64, i64)>, Failure> {
    let prefix = format!("{name}/");
    let answer = blocking(|| cluster.etcdctl_json(&["get", "--prefix", &prefix]))?;
    let kvs = answer["kvs"].as_array().cloned().unwrap_or_default();
    Ok(kvs
        .iter()
        .map(|kv| {
            (
                kv["create_revision"].as_u64().unwrap_or(0),
                kv["lease"].as_i64().unwrap_or(0),
            )
        })
        .collect())
}

/// The TTL etcd has left on lease `id` (-1: expired or unknown).
fn lease_ttl(cluster: &EtcdCluster, id: i64) -> Result<i64, Failure> {
    let id = format!("{id:x}");
    let answer = blocking(|| cluster.etcdctl_json(&["lease", "timetolive", &id]))?;
    answer["ttl"]
        .as_i64()
        .ok_or_else(|| Failure(format!("no ttl in etcdctl's answer {answer}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_follower_killed_locks_keep_working() -> Outcome {
    let _turn = one_at_a_time().await;
    let mut cluster = blocking(|| start_etcd_cluster(3))?;
    let url = cluster.url(TTL);
    let (holder, a, b) = (
        client(&url).await?,
        client(&url).await?,
        client(&url).await?,
    );
    let held = holder
        .lock("held")
        .acquire_timeout(Duration::from_secs(5))
        .await
        .map_err(fail)?;
    // Every client has talked to the cluster before the kill.
    for c in [&a, &b] {
        let g = c
            .lock("cycles")
            .acquire_timeout(Duration::from_secs(5))
            .await;
        check!(
            g.map_err(fail)?.release().await.map_err(fail)?,
            "a warm-up hold was lost"
        );
    }

    let killed = follower(&cluster)?;
    blocking(|| cluster.kill(killed))?;
    // More than a whole TTL: a keep-alive that could not move off the dead member would have
    // ended the session by now.
    let watched = TTL_D + Duration::from_secs(1);
    if let Ok(e) = tokio::time::timeout(watched, held.lost()).await {
        return Err(Failure(format!(
            "the holding was lost after a follower was killed (2 of 3 members still up): {}",
            why(&e)
        )));
    }
    check!(!held.is_lost(), "is_lost() after a follower was killed");

    // Every failure is noted and the cycle tried again, so one run shows how many there are;
    // with two members of three up, there should be none.
    let mut tokens = Vec::new();
    let mut errors = Vec::new();
    for i in 0..50 {
        let c = if i % 2 == 0 { &a } else { &b };
        let mut tries = 0;
        let guard = loop {
            tries += 1;
            match c
                .lock("cycles")
                .acquire_timeout(Duration::from_secs(5))
                .await
            {
                Ok(guard) => break guard,
                Err(e) if tries < 5 => errors.push(format!("cycle {i} acquire: {}", why(&e))),
                Err(e) => {
                    return Err(Failure(format!(
                        "cycle {i} failed {tries} times with one follower of three dead ({} \
                         failed calls in all, the first: {:?}); the last: {}; the lock's keys \
                         (create revision, lease): {:?}",
                        errors.len() + 1,
                        errors.first(),
                        why(&e),
                        lock_keys(&cluster, "cycles")?
                    )));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        tokens.push(guard.fencing_token().get());
        match guard.release().await {
            Ok(true) => {}
            Ok(false) => return Err(Failure(format!("cycle {i}: the holding was lost"))),
            Err(e) => errors.push(format!("cycle {i} release: {}", why(&e))),
        }
    }
    check!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens of successive holds do not increase: {tokens:?}"
    );
    check!(
        errors.is_empty(),
        "{} requests of 50 cycles failed with one follower of three dead; first: {:?}",
        errors.len(),
        errors.first()
    );
    let released = held.release().await.map_err(fail)?;
    check!(
        released,
        "the holding kept through the kill was not ours at release"
    );
    Ok(())
}

/// What one worker of the leader-kill test saw.
#[derive(Default)]
struct Seen {
    holds: Vec<Hold>,
    /// Holds whose guard reported the loss before release.
    lost: usize,
    /// Every failed call and its kind: the election may fail requests (`Connection`) or make
    /// them wait (`Timeout`).
    errors: Vec<String>,
    /// Failed calls of any other kind: a broken connection must not look like etcd's refusal.
    untyped: Vec<String>,
    /// The longest `acquire_timeout(2 s)` call.
    longest_acquire: Duration,
}

impl Seen {
    fn note(&mut self, call: &str, e: &distlock::Error) {
        if !matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
            self.untyped.push(format!("{call}: {}", why(e)));
        }
        self.errors.push(format!("{call} {:?}", e.kind()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_no_overlap_and_locks_work_after_election() -> Outcome {
    let _turn = one_at_a_time().await;
    let mut cluster = blocking(|| start_etcd_cluster(3))?;
    let url = cluster.url(TTL);
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(9);
    let mut workers = Vec::new();
    for _ in 0..3 {
        let client = client(&url).await?;
        let (inside, max_inside) = (inside.clone(), max_inside.clone());
        workers.push(tokio::spawn(async move {
            let lock = client.lock("counter");
            let mut seen = Seen::default();
            while Instant::now() < until {
                let asked = Instant::now();
                let got = lock.acquire_timeout(Duration::from_secs(2)).await;
                seen.longest_acquire = seen.longest_acquire.max(asked.elapsed());
                let guard = match got {
                    Ok(guard) => guard,
                    // The election: requests fail or wait; try again.
                    Err(e) => {
                        seen.note("acquire", &e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let start_ns = monotonic_ns();
                let before = inside.fetch_add(1, Ordering::SeqCst);
                max_inside.fetch_max(before + 1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                let end_ns = monotonic_ns();
                let token = guard.fencing_token().get();
                seen.holds.push(Hold {
                    start_ns,
                    end_ns,
                    token,
                });
                seen.lost += usize::from(guard.is_lost());
                if let Err(e) = guard.release().await {
                    seen.note("release", &e);
                }
            }
            seen
        }));
    }

    tokio::time::sleep(Duration::from_secs(3)).await;
    let leader = blocking(|| cluster.leader())?;
    let killed_ns = monotonic_ns();
    blocking(|| cluster.kill(leader))?;
    // What the lock's queue holds as the workers stop: a key nobody deletes shows here.
    tokio::time::sleep_until(until).await;
    let keys_at_end = lock_keys(&cluster, "counter")?;

    let mut all = Seen::default();
    for worker in workers {
        let seen = worker.await.map_err(|e| Failure(e.to_string()))?;
        all.holds.extend(seen.holds);
        all.lost += seen.lost;
        all.errors.extend(seen.errors);
        all.untyped.extend(seen.untyped);
        all.longest_acquire = all.longest_acquire.max(seen.longest_acquire);
    }
    let new_leader = blocking(|| cluster.leader())?;
    check!(
        new_leader != leader,
        "no new leader after m{leader} was killed"
    );
    let before = all.holds.iter().filter(|h| h.end_ns < killed_ns).count();
    let after = all.holds.iter().filter(|h| h.start_ns > killed_ns).count();
    let verdict = history::check(all.holds.iter().copied());
    let mut errors = std::collections::BTreeMap::new();
    for e in &all.errors {
        *errors.entry(e).or_insert(0) += 1;
    }
    let summary = format!(
        "{verdict}; {before} holds before the kill, {after} after; {} guards lost; errors: \
         {errors:?}; longest acquire_timeout(2 s): {:?}; keys (create revision, lease) at the \
         end: {keys_at_end:?}; first errors of another kind: {:?}",
        all.lost,
        all.longest_acquire,
        all.untyped.iter().take(2).collect::<Vec<_>>()
    );
    check!(
        max_inside.load(Ordering::SeqCst) == 1,
        "{} holders at once: {summary}",
        max_inside.load(Ordering::SeqCst)
    );
    check!(verdict.is_ok(), "{summary}");
    check!(before >= 10, "too few holds before the kill: {summary}");
    check!(
        after >= 20,
        "too few holds after the leader was killed: {summary}"
    );
    check!(
        all.untyped.is_empty(),
        "{} failures were neither Connection nor Timeout: {:?}",
        all.untyped.len(),
        all.untyped.iter().take(3).collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holder_whose_member_is_paused_past_ttl_is_lost_before_successor_takes_larger_token()
-> Outcome {
    let _turn = one_at_a_time().await;
    let mut cluster = blocking(|| start_etcd_cluster(3))?;
    let x = follower(&cluster)?;
    let holder_client = client(&cluster.member_url(x, TTL)).await?;
    let waiter_client = client(&cluster.members_url(&others(x), TTL)).await?;
    let held = Arc::new(
        holder_client
            .lock("paused")
            .acquire_timeout(Duration::from_secs(5))
            .await
            .map_err(fail)?,
    );
    let token = held.fencing_token();
    let lost = held.lost();
    let lost = tokio::spawn(async move {
        let e = lost.await;
        (Instant::now(), e)
    });
    let waiter = tokio::spawn({
        let held = held.clone();
        async move {
            let got = waiter_client
                .lock("paused")
                .acquire_timeout(Duration::from_secs(20))
                .await;
            // By the holder's own clock, at the moment the successor has the lock.
            let holder_knew = held.is_lost();
            (Instant::now(), got, holder_knew, waiter_client)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");

    blocking(|| cluster.stop(x))?;
    let stopped = Instant::now();
    let within = TTL_D + Duration::from_secs(2);
    let (lost_at, e) = tokio::time::timeout(within, lost)
        .await
        .map_err(|_| {
            Failure(format!(
                "lost() did not fire within {within:?} of the holder's only member being paused"
            ))
        })?
        .map_err(|e| Failure(e.to_string()))?;
    check!(e.kind() == ErrorKind::LeaseLost, "lost() said {}", why(&e));
    let (got_at, got, holder_knew, _waiter_client) =
        tokio::time::timeout(Duration::from_secs(15), waiter)
            .await
            .map_err(|_| Failure("the waiter never got the lock of the lost holder".into()))?
            .map_err(|e| Failure(e.to_string()))?;
    let guard = got.map_err(|e| Failure(format!("the waiter: {}", why(&e))))?;
    // The holder's own clock is what counts (is_lost() checks it on every call); when its
    // lost() task got to run is only reported.
    check!(
        holder_knew,
        "the successor got the lock {:?} after the pause while the holder still believed it held \
         it (its lost() fired {:?} after the pause)",
        got_at - stopped,
        lost_at - stopped
    );
    check!(
        guard.fencing_token() > token,
        "the successor's token {:?} is not above the lost holder's {token:?}",
        guard.fencing_token()
    );

    blocking(|| cluster.cont(x))?;
    let held = Arc::try_unwrap(held).map_err(|_| Failure("the guard is still shared".into()))?;
    let released = held.release().await.map_err(fail)?;
    check!(
        !released,
        "the lost holder's release says it still held the lock"
    );
    check!(
        guard.release().await.map_err(fail)?,
        "the successor's holding was lost"
    );
    // Its member runs again: the holder's client starts a new session and takes the lock anew.
    let again = holder_client
        .lock("paused")
        .acquire_timeout(Duration::from_secs(10))
        .await
        .map_err(|e| {
            Failure(format!(
                "the old holder once its member ran again: {}",
                why(&e)
            ))
        })?;
    check!(
        again.fencing_token() > token,
        "the old holder's new token is not larger"
    );
    check!(
        again.release().await.map_err(fail)?,
        "its new holding was lost"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiter_with_cut_keepalives_never_gets_lock_on_expired_lease() -> Outcome {
    let _turn = one_at_a_time().await;
    const NAME: &str = "cut-waiter";
    let mut cluster = blocking(|| start_etcd_cluster(3))?;
    let x = follower(&cluster)?;
    let holder_client = client(&cluster.members_url(&others(x), TTL)).await?;
    let waiter_client = client(&cluster.member_url(x, TTL)).await?;
    let held = holder_client
        .lock(NAME)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .map_err(fail)?;
    let waiter = tokio::spawn(async move {
        let got = waiter_client
            .lock(NAME)
            .acquire_timeout(Duration::from_secs(30))
            .await;
        (got, waiter_client)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");
    let queued = lock_keys(&cluster, NAME)?;
    check!(
        queued.len() == 2,
        "expected the holder's and the waiter's key: {queued:?}"
    );
    let old_lease = queued
        .iter()
        .find(|k| k.0 != held.fencing_token().get())
        .map(|k| k.1)
        .unwrap_or(0);

    // The waiter's only member stalls: its keep-alives and requests go nowhere.
    blocking(|| cluster.stop(x))?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    check!(
        held.release().await.map_err(fail)?,
        "the holder's holding was lost"
    );
    // The waiter's lease runs out in etcd, taking its key: the lock is free and nobody queues.
    let deadline = Instant::now() + TTL_D + Duration::from_secs(3);
    loop {
        let keys = lock_keys(&cluster, NAME)?;
        if keys.is_empty() {
            break;
        }
        check!(
            Instant::now() < deadline,
            "the cut-off waiter's key outlived its lease's TTL: {keys:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check!(
        lease_ttl(&cluster, old_lease)? < 0,
        "the waiter's old lease {old_lease:x} is still alive"
    );
    blocking(|| cluster.cont(x))?;

    let (got, _waiter_client) = tokio::time::timeout(Duration::from_secs(40), waiter)
        .await
        .map_err(|_| Failure("the waiter's acquire_timeout never returned".into()))?
        .map_err(|e| Failure(e.to_string()))?;
    let guard = match got {
        Ok(guard) => guard,
        // Told it failed: the caller knows it has no lock.
        Err(e) if matches!(e.kind(), ErrorKind::Connection | ErrorKind::LeaseLost) => {
            eprintln!("the waiter was told it has no lock: {}", why(&e));
            return Ok(());
        }
        Err(e) => {
            return Err(Failure(format!(
                "the waiter's acquire failed untyped: {}",
                why(&e)
            )));
        }
    };
    let token = guard.fencing_token().get();
    check!(!guard.is_lost(), "the waiter's new guard is lost at once");
    // Its key is in etcd, on a live lease other than the expired one...
    let keys = lock_keys(&cluster, NAME)?;
    let Some(&(_, lease)) = keys.iter().find(|k| k.0 == token) else {
        return Err(Failure(format!(
            "the waiter holds token {token} but etcd has no such key: {keys:?}"
        )));
    };
    check!(
        lease != old_lease,
        "granted on the expired lease {old_lease:x}"
    );
    let ttl = lease_ttl(&cluster, lease)?;
    check!(
        ttl > 0,
        "granted on lease {lease:x}, whose TTL in etcd is {ttl}"
    );
    // ...and it stays there for more than a TTL: a lease kept alive, not one about to expire.
    tokio::time::sleep(TTL_D + Duration::from_secs(1)).await;
    let keys = lock_keys(&cluster, NAME)?;
    check!(
        keys.contains(&(token, lease)),
        "the waiter's key (token {token}) vanished a TTL later: {keys:?}"
    );
    check!(!guard.is_lost(), "the waiter's guard was lost a TTL later");
    let released = guard.release().await.map_err(fail)?;
    check!(released, "the waiter's holding was not ours at release");
    Ok(())
}

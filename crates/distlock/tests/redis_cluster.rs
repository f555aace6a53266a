//! The conformance suite against a Redis Cluster (DISTLOCK_REDIS_CLUSTER_URL, default the
//! cluster `scripts/services.sh cluster` starts: three masters and a replica each on
//! 127.0.0.1:7000-7005), for every flavour; then what only a cluster has: locks spread over the
//! masters, multi-locks across slots, status and forced release across masters, replica
//! acknowledgement (`?wait_replicas=N`) by each lock's master, and on private clusters, a
//! failover asked of a master's replica (`CLUSTER FAILOVER`) then a SIGKILLed master, a
//! resharding of a held lock's slot, and a password on every node.

use std::collections::BTreeMap;
use std::time::Duration;

use distlock::{Client, ErrorKind, LockKind};
use distlock_testkit::failover::{blocking, handed_on, take_refused_for_replicas, waiter_guard};
use distlock_testkit::servers::{
    RedisCluster, cluster_masters, redis_cli, redis_cli_as, start_redis_cluster,
    start_redis_cluster_with,
};
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, acquiring, check, check_above, check_taken,
};

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_REDIS_CLUSTER_URL").unwrap_or_else(|_| {
        "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002".to_string()
    });
    Suite::new("redis-cluster", "Redis Cluster", url)
        .flavours(Flavour::every())
        .case("redis_cluster::bad_urls_are_typed", bad_urls)
        .case(
            "redis_cluster::the_applications_cluster_client",
            the_applications_cluster_client,
        )
        .case(
            "redis_cluster::typed_configuration_alone",
            typed_configuration_alone,
        )
        .case(
            "redis_cluster::locks_spread_over_every_master",
            locks_spread_over_every_master,
        )
        .case(
            "redis_cluster::multi_lock_across_slots",
            multi_lock_across_slots,
        )
        .case(
            "redis_cluster::failover_asked_then_killed_master_are_followed",
            failovers_are_followed,
        )
        .case(
            "redis_cluster::resharding_a_held_lock_keeps_it",
            resharding_keeps_the_lock,
        )
        .case(
            "redis_cluster::wait_replicas_counts_the_locks_master_replicas",
            wait_replicas,
        )
        .case(
            "redis_cluster::password_on_every_node",
            password_on_every_node,
        )
        .case(
            "redis_cluster::an_evicting_master_is_named_in_a_warning",
            evicting_master_is_warned,
        )
        .run()
}

/// The port of the URL's first node.
fn first_port(url: &str) -> Result<u16, Failure> {
    url.split("://")
        .nth(1)
        .and_then(|rest| rest.rsplit('@').next())
        .and_then(|hosts| hosts.split([',', '/', '?']).next())
        .and_then(|host| host.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| Failure(format!("no port in {url}")))
}

/// The key of the exclusive lock `name` (see keys.rs).
fn lock_key(name: &str) -> String {
    format!("distlock:lock:{{{name}}}")
}

/// Which master holds each of `keys`: asks every master `EXISTS` (a master that does not
/// serve the key's slot answers `MOVED`, an error).
async fn placement(masters: &[u16], keys: &[String]) -> Result<BTreeMap<u16, usize>, Failure> {
    let mut found = BTreeMap::new();
    for port in masters {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_multiplexed_async_connection()
            .await?;
        for key in keys {
            let exists: Result<bool, _> =
                redis::cmd("EXISTS").arg(key).query_async(&mut conn).await;
            if exists == Ok(true) {
                *found.entry(*port).or_insert(0) += 1;
            }
        }
    }
    Ok(found)
}

async fn bad_urls(_ctx: Ctx) -> Outcome {
    for (url, fault) in [
        (
            "redis-cluster://u:hunter2@127.0.0.1:7000/3",
            "database 0 only",
        ),
        (
            "redis-cluster://u:hunter2@127.0.0.1:7000?db=1",
            "unknown parameter",
        ),
        ("redis-cluster://u:hunter2@127.0.0.1:0", "port"),
        ("redis-cluster://u:hunter2@", "no host"),
        ("redis-cluster://127.0.0.1:7000?prefix=a*", "prefix"),
    ] {
        let err = distlock::connect(url).await.map(drop).unwrap_err();
        check!(err.kind() == ErrorKind::InvalidUrl, "{url}: {err:?}");
        let shown = err.to_string();
        check!(shown.contains(fault), "{url}: {shown}");
        check!(!shown.contains("hunter2"), "{url}: {shown}");
    }
    // Nothing listens there: a connection error naming the URL, without its password.
    let refused = distlock::connect("redis-cluster://u:hunter2@127.0.0.1:1").await;
    distlock_testkit::check_refused_hiding(refused, ErrorKind::Connection, "hunter2")
}

/// 60 locks of different names held at once land on every master (their hash tags spread over
/// the slots); a status by prefix finds them all, across the masters; a forced release of one
/// on each master frees exactly it, with a counter above its holder's token.
async fn locks_spread_over_every_master(ctx: Ctx) -> Outcome {
    let masters = blocking(|| cluster_masters(first_port(&ctx.url)?))?;
    check!(
        masters.len() == 3,
        "the cluster has masters {masters:?}, not 3"
    );
    let base = ctx.unique_name("spread");
    let names: Vec<String> = (0..60).map(|i| format!("{base}/{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(
            ctx.client
                .lock(name)
                .acquire_timeout(Duration::from_secs(5))
                .await?,
        );
    }
    let keys: Vec<String> = names.iter().map(|n| lock_key(n)).collect();
    let placed = placement(&masters, &keys).await?;
    eprintln!("60 locks over the masters: {placed:?}");
    check!(
        placed.values().sum::<usize>() == 60,
        "not every lock was found on exactly one master: {placed:?}"
    );
    check!(
        placed.len() == 3 && placed.values().all(|n| *n >= 5),
        "the locks do not spread over the three masters: {placed:?}"
    );

    let seen = ctx.client.status_prefix(&base).await?;
    check!(
        seen.len() == 60 && seen.iter().all(|s| s.holdings.len() == 1),
        "a status by prefix found {} of 60 locks",
        seen.len()
    );

    // One forced release on each master.
    let mut forced_on = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        let on = placement(&masters, std::slice::from_ref(key)).await?;
        let Some(master) = on.keys().next().copied() else {
            continue;
        };
        if forced_on.contains_key(&master) {
            continue;
        }
        let forced = ctx.client.force_release(&names[i], LockKind::Mutex).await?;
        check!(
            forced.removed.len() == 1 && forced.removed[0].token == guards[i].fencing_token(),
            "the forced release of {} removed {:?}",
            names[i],
            forced.removed
        );
        let next = ctx.client.lock(&names[i]).try_acquire().await?;
        let Some(next) = next else {
            return Err(Failure(format!(
                "{} still held after a forced release",
                names[i]
            )));
        };
        let whose = "the token after a forced release, after the holder's";
        check_above(whose, next.fencing_token(), guards[i].fencing_token())?;
        next.release().await?;
        forced_on.insert(master, i);
    }
    check!(
        forced_on.len() == 3,
        "forced releases reached {forced_on:?}"
    );
    for (i, guard) in guards.into_iter().enumerate() {
        let released = guard.release().await?;
        let was_forced = forced_on.values().any(|f| *f == i);
        check!(
            released != was_forced,
            "lock {i}: release answered {released} (forced: {was_forced})"
        );
    }
    Ok(())
}

/// A multi-lock over names on different masters takes all or nothing: a held name on one
/// master keeps it from taking the others, and once free it takes all.
async fn multi_lock_across_slots(ctx: Ctx) -> Outcome {
    let masters = blocking(|| cluster_masters(first_port(&ctx.url)?))?;
    let base = ctx.unique_name("multi");
    // Names until every master has one.
    let mut by_master: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0..200 {
        let name = format!("{base}/{i}");
        let key = lock_key(&name);
        let port = blocking(|| -> Result<u16, Failure> {
            let slot: u16 = redis_cli(masters[0], &["CLUSTER", "KEYSLOT", &key])?
                .parse()
                .map_err(|_| Failure("CLUSTER KEYSLOT answered no number".into()))?;
            distlock_testkit::servers::master_of_slot(masters[0], slot)
        })?;
        by_master.entry(port).or_insert(name);
        if by_master.len() == masters.len() {
            break;
        }
    }
    check!(by_master.len() == 3, "names found on {by_master:?} only");
    let names: Vec<String> = by_master.values().cloned().collect();
    let blocker = ctx.client.lock(&names[2]).acquire().await?;
    let multi = ctx.client.multi_lock(names.clone());
    check!(
        multi.try_acquire().await?.is_none(),
        "a multi-lock took a name held on another master"
    );
    for name in &names[..2] {
        let free = ctx.client.lock(name).try_acquire().await?;
        check!(free.is_some(), "the multi-lock left {name} held");
        free.into_iter().next().unwrap().release().await?;
    }
    let waiting = tokio::spawn({
        let multi = multi.clone();
        async move { multi.acquire_timeout(Duration::from_secs(20)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    blocker.release().await?;
    let all = waiting.await.map_err(|e| Failure(e.to_string()))??;
    for name in &names {
        check_taken(
            &ctx.client.lock(name),
            "the multi-lock does not hold {name}",
        )
        .await?;
    }
    all.release().await?;
    Ok(())
}

async fn connect(url: &str) -> Result<Client, Failure> {
    // A failover takes a few seconds: requests to the dead master are retried meanwhile.
    let options = distlock::Options::default().retry_for(Duration::from_secs(20));
    Ok(distlock::connect_with(url, &options).await?)
}

/// The holder's lease: longer than a failover takes on a loaded machine.
const LEASE: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug)]
enum How {
    /// The master SIGKILLed; its replica takes over once the others judge it failed.
    Killed,
    /// `CLUSTER FAILOVER` on the master's replica: the two swap roles, the old master stays up.
    Asked,
}

/// Both failovers on one private cluster, one after the other (two private clusters failing
/// over at once beside the other cases starved a 2-core machine: a holder missed its renewals):
/// first one asked of the lock's master's replica, then the master of another lock SIGKILLed.
async fn failovers_are_followed(ctx: Ctx) -> Outcome {
    let mut cluster: RedisCluster = blocking(start_redis_cluster)?;
    failover_is_followed(&ctx, &mut cluster, How::Asked).await?;
    failover_is_followed(&ctx, &mut cluster, How::Killed).await
}

/// A lock held and waited for while its master is SIGKILLed, or hands over to its replica
/// (`CLUSTER FAILOVER`): the replica takes over with the holding (replicated before: the test
/// waits for it), the holder keeps renewing it there, the waiter does not get in until the
/// release on the new master wakes it, with a larger token; new takes on the same URL, no
/// restart, draw tokens above every earlier one.
async fn failover_is_followed(ctx: &Ctx, cluster: &mut RedisCluster, how: How) -> Outcome {
    let url = cluster.url();
    let holder = connect(&url).await?;
    let waiter = connect(&url).await?;
    let name = ctx.unique_name("failover");
    let key = lock_key(&name);
    let lock = holder.lock(&name).lease(LEASE);
    let mut before = Vec::new();
    for _ in 0..3 {
        let guard = lock.acquire_timeout(Duration::from_secs(5)).await?;
        before.push(guard.fencing_token().get());
        guard.release().await?;
    }
    let held = lock.acquire_timeout(Duration::from_secs(5)).await?;
    before.push(held.fencing_token().get());
    let waiting = acquiring(waiter.lock(&name).lease(LEASE), Duration::from_secs(60));
    let old = blocking(|| cluster.master_of(&key))?;
    let channel = format!("{key}:free");
    distlock_testkit::cases::eventually(Duration::from_secs(10), "the waiter to subscribe", || {
        let channel = channel.clone();
        async move {
            let n = blocking(|| redis_cli(old, &["PUBSUB", "SHARDNUMSUB", &channel]))?;
            Ok(n.lines().nth(1) == Some("1"))
        }
    })
    .await?;
    // The replica has the holding before the master dies.
    let acked = blocking(|| redis_cli(old, &["WAIT", "1", "5000"]))?;
    check!(acked == "1", "the replica did not acknowledge: {acked}");

    let started = std::time::Instant::now();
    match how {
        How::Killed => blocking(|| cluster.node(old)?.kill())?,
        How::Asked => blocking(|| cluster.fail_over_to_replica_of(old))?,
    }
    let new = blocking(|| cluster.wait_for_new_master(&key, old))?;
    let promoted = started.elapsed();
    // The holder renews on the new master: its time to live goes back up there.
    let pttl = |key: &str| -> Result<i64, Failure> {
        Ok(blocking(|| redis_cli(new, &["PTTL", key]))?
            .parse()
            .unwrap_or(-2))
    };
    let first = pttl(&key)?;
    check!(
        first > 0,
        "the new master {new} does not have the holding: PTTL {first}"
    );
    // Renewed there: its time to live rises above the lowest seen since the promotion.
    let mut lowest = first;
    let until = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ttl = pttl(&key)?;
        if ttl > lowest + 500 {
            break;
        }
        lowest = lowest.min(ttl);
        check!(
            std::time::Instant::now() < until,
            "no renewal on the new master {new} in 20 s (PTTL {ttl})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    check!(
        !held.is_lost(),
        "the holder lost its lock across the failover"
    );
    check!(
        !waiting.is_finished(),
        "the waiter finished while the lock was held: {:?}",
        waiting.await
    );
    // The waiter's subscription moved to the new master.
    let resubscribed = distlock_testkit::cases::eventually(
        Duration::from_secs(15),
        "the waiter to subscribe on the new master",
        || {
            let channel = channel.clone();
            async move {
                let n = blocking(|| redis_cli(new, &["PUBSUB", "SHARDNUMSUB", &channel]))?;
                Ok(n.lines().nth(1) == Some("1"))
            }
        },
    )
    .await;
    let subscribed_after = started.elapsed();
    check!(
        held.release().await?,
        "the release on the new master found no holding"
    );
    let released = std::time::Instant::now();
    let taken = waiter_guard(waiting, &format!("{how:?}")).await?;
    let woken_after = released.elapsed();
    eprintln!(
        "{how:?}: resubscribed: {resubscribed:?} after {subscribed_after:?}; the waiter took the \
         lock {woken_after:?} after the release"
    );
    resubscribed?;
    // Woken by the release's message, not by its timer (bounded by the holder's lease left,
    // up to 20 s).
    check!(
        woken_after < Duration::from_secs(3),
        "the waiter took the lock {woken_after:?} after the release: not woken by it"
    );
    let max_before = before.iter().copied().max().unwrap_or(0);
    let whose = "the waiter's token";
    check_above(whose, taken.fencing_token().get(), max_before)?;
    taken.release().await?;
    eprintln!(
        "{how:?}: master {old} -> {new} after {promoted:?}; the waiter got the lock after the \
         release"
    );
    for client in [&holder, &waiter] {
        for lock_name in [name.clone(), ctx.unique_name("after")] {
            let guard = client
                .lock(&lock_name)
                .acquire_timeout(Duration::from_secs(10))
                .await?;
            let whose = "a take's token after the failover";
            check_above(whose, guard.fencing_token().get(), max_before)?;
            guard.release().await?;
        }
    }
    Ok(())
}

/// The slot of a held lock moves to another master (`CLUSTER SETSLOT … IMPORTING/MIGRATING`,
/// `MIGRATE` key by key, `SETSLOT … NODE`), the way `redis-cli --cluster reshard` moves it, while
/// the holder renews and a contender keeps trying: no try gets in at any step (half the lock's
/// keys moved included), the holder keeps its lock, and its release on the new master hands
/// the lock to the waiter with a larger token.
async fn resharding_keeps_the_lock(ctx: Ctx) -> Outcome {
    let cluster: RedisCluster = blocking(start_redis_cluster)?;
    let url = cluster.url();
    let holder = connect(&url).await?;
    let contender = connect(&url).await?;
    let name = ctx.unique_name("reshard");
    let key = lock_key(&name);
    // A short lease: renewals (every 2 s) run through the migration.
    let lease = Duration::from_secs(6);
    let held = holder.lock(&name).lease(lease).acquire().await?;
    let waiting = acquiring(contender.lock(&name).lease(lease), Duration::from_secs(60));
    let source = blocking(|| cluster.master_of(&key))?;
    let masters = blocking(|| cluster.masters())?;
    let target = *masters
        .iter()
        .find(|m| **m != source)
        .ok_or_else(|| Failure("no other master".into()))?;
    let id = |port: u16| blocking(|| redis_cli(port, &["CLUSTER", "MYID"]));
    let (source_id, target_id) = (id(source)?, id(target)?);
    let slot = blocking(|| redis_cli(source, &["CLUSTER", "KEYSLOT", &key]))?;
    let step = |port: u16, args: &[&str]| -> Result<(), Failure> {
        let answer = blocking(|| redis_cli(port, args))?;
        check!(answer == "OK", "{args:?} on {port}: {answer}");
        Ok(())
    };
    // A contender that tries all the time the slot moves: it must never get in.
    let tries = {
        let lock = contender.lock(&name).lease(lease);
        tokio::spawn(async move {
            let mut tries = 0u32;
            loop {
                match lock.try_acquire().await {
                    Ok(Some(g)) => {
                        return Err(Failure(format!(
                            "try {tries} took the held lock: token {}",
                            g.fencing_token().get()
                        )));
                    }
                    Ok(None) => {}
                    Err(e)
                        if e.kind() == ErrorKind::Connection || e.kind() == ErrorKind::Backend =>
                    {
                        return Err(Failure(format!("try {tries} failed: {e:?}")));
                    }
                    Err(e) => return Err(Failure(format!("try {tries}: {e}"))),
                }
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                if tries >= 150 {
                    return Ok(tries);
                }
            }
        })
    };
    step(
        target,
        &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id],
    )?;
    step(
        source,
        &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id],
    )?;
    let keys = blocking(|| redis_cli(source, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]))?;
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    check!(keys.len() >= 2, "the lock's slot holds {keys:?}");
    // One key at a time, with time between: the lock is half here, half there for a while.
    for k in &keys {
        let port = target.to_string();
        let answer =
            blocking(|| redis_cli(source, &["MIGRATE", "127.0.0.1", &port, k, "0", "5000"]))?;
        check!(answer == "OK", "MIGRATE {k}: {answer}");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    for port in &masters {
        step(*port, &["CLUSTER", "SETSLOT", &slot, "NODE", &target_id])?;
    }
    tokio::time::sleep(lease).await;
    let tries = tries.await.map_err(|e| Failure(e.to_string()))??;
    check!(tries >= 150, "{tries} tries");
    check!(
        !held.is_lost(),
        "the holder lost its lock in the resharding"
    );
    check!(
        !waiting.is_finished(),
        "the waiter got in while the lock was held: {:?}",
        waiting.await
    );
    let exists = blocking(|| redis_cli(target, &["EXISTS", &key]))?;
    check!(
        exists == "1",
        "the lock is not on its new master {target}: {exists}"
    );
    let taken = handed_on(held, waiting, "after the resharding").await?;
    taken.release().await?;
    Ok(())
}

/// Every node of the cluster the node on `asked` knows (`CLUSTER NODES`), failed ones included.
fn every_node(asked: u16) -> Result<Vec<u16>, Failure> {
    let nodes = redis_cli(asked, &["CLUSTER", "NODES"])?;
    Ok(nodes
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter_map(|addr| addr.split('@').next()?.rsplit_once(':')?.1.parse().ok())
        .collect())
}

/// How many nodes, masters and replicas, hold the holding of `token` under `key` right now
/// (replicas asked after `READONLY`; a node that does not serve the key's slot answers `MOVED`).
async fn copies(nodes: &[u16], key: &str, token: u64) -> Result<usize, Failure> {
    let mut found = 0;
    for port in nodes {
        let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
            continue;
        };
        let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
            continue;
        };
        let _: Result<(), _> = redis::cmd("READONLY").query_async(&mut conn).await;
        let value: Result<Option<String>, _> =
            redis::cmd("GET").arg(key).query_async(&mut conn).await;
        if let Ok(Some(value)) = value
            && value
                .split('\t')
                .next()
                .is_some_and(|v| v.ends_with(&format!(":{token}")))
        {
            found += 1;
        }
    }
    Ok(found)
}

/// `?wait_replicas=1` on the shared cluster (a replica per master): every take gives a guard
/// only once the lock's master's replica has it (the take's pipeline and its `WAIT` went to that
/// master), on locks of every master, and acknowledged renewals keep a lease past its first end.
/// `?wait_replicas=2` asks for more replicas than a master has: every take answers `NoQuorum`
/// and is undone (a plain client takes the lock at once).
async fn wait_replicas(ctx: Ctx) -> Outcome {
    let first = first_port(&ctx.url)?;
    let masters = blocking(|| cluster_masters(first))?;
    let nodes = blocking(|| every_node(first))?;
    check!(
        masters.len() == 3 && nodes.len() == 6,
        "the shared cluster should have 3 masters and 3 replicas: {masters:?} of {nodes:?}"
    );
    let joint = if ctx.url.contains('?') { '&' } else { '?' };
    let one = connect(&format!(
        "{}{joint}wait_replicas=1&wait_timeout=300ms",
        ctx.url
    ))
    .await?;
    let two = connect(&format!(
        "{}{joint}wait_replicas=2&wait_timeout=100ms",
        ctx.url
    ))
    .await?;
    let base = ctx.unique_name("acked");
    // Names until every master has one.
    let mut by_master: BTreeMap<u16, String> = BTreeMap::new();
    for i in 0..100 {
        let name = format!("{base}/{i}");
        let key = lock_key(&name);
        let guard = one
            .lock(&name)
            .lease(Duration::from_secs(1))
            .acquire_timeout(Duration::from_secs(5))
            .await?;
        let token = guard.fencing_token().get();
        let held = copies(&nodes, &key, token).await?;
        check!(
            held == 2,
            "{name}: {held} nodes hold the take of token {token} when its guard is given, not \
             the master and its replica"
        );
        let master = *placement(&masters, std::slice::from_ref(&key))
            .await?
            .keys()
            .next()
            .ok_or_else(|| Failure(format!("{key} on no master")))?;
        if by_master.is_empty() {
            // Past the first lease's end: only acknowledged renewals keep it.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            check!(
                !guard.is_lost(),
                "acknowledged renewals did not keep the lease past its first end"
            );
        }
        check!(guard.release().await?, "{name}: the release failed");
        by_master.entry(master).or_insert(name);
        if by_master.len() == 3 {
            break;
        }
    }
    check!(
        by_master.len() == 3,
        "acknowledged takes reached the masters {by_master:?} only"
    );
    for name in by_master.values() {
        take_refused_for_replicas(&two.lock(name), name).await?;
        let plain = ctx.client.lock(name).try_acquire().await?;
        let Some(plain) = plain else {
            return Err(Failure(format!(
                "{name} is held after a take that was undone"
            )));
        };
        plain.release().await?;
    }
    Ok(())
}

/// A private cluster whose nodes ask for a password (`requirepass`, `masterauth`): the URL's
/// password logs in to every node, the subscriber's included (a waiter is woken by the release),
/// and a status by prefix reaches every master; a wrong or missing password is a typed error
/// that never shows it.
async fn password_on_every_node(ctx: Ctx) -> Outcome {
    const PASSWORD: &str = "cluster-s3cret";
    let cluster = blocking(|| start_redis_cluster_with(Some(PASSWORD)))?;
    let url = cluster.url();
    let hosts = url
        .rsplit_once('@')
        .map(|(_, hosts)| hosts.to_string())
        .ok_or_else(|| Failure(format!("no password in {url}")))?;
    let options = distlock::Options::default().retry_for(Duration::from_millis(200));
    for wrong in [
        format!("redis-cluster://:wrong-s3cret@{hosts}"),
        format!("redis-cluster://{hosts}"),
    ] {
        let err = distlock::connect_with(&wrong, &options)
            .await
            .map(drop)
            .unwrap_err();
        let shown = distlock::error::chain(&err);
        check!(
            err.kind() == ErrorKind::Backend && shown.contains("password"),
            "{}: {shown}",
            distlock::redact(&wrong)
        );
        check!(
            !shown.contains("s3cret"),
            "the error shows a password: {shown}"
        );
    }
    let holder = connect(&url).await?;
    let waiter = connect(&url).await?;
    let base = ctx.unique_name("login");
    let name = format!("{base}/a");
    let key = lock_key(&name);
    let first = holder
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    let first_token = first.fencing_token();
    let waiting = acquiring(waiter.lock(&name), Duration::from_secs(30));
    let master = blocking(|| cluster.master_of(&key))?;
    let channel = format!("{key}:free");
    distlock_testkit::cases::eventually(Duration::from_secs(10), "the waiter to subscribe", || {
        let channel = channel.clone();
        async move {
            let ask = ["PUBSUB", "SHARDNUMSUB", &channel];
            let n = blocking(|| redis_cli_as(master, Some(PASSWORD), &ask))?;
            Ok(n.lines().nth(1) == Some("1"))
        }
    })
    .await?;
    let mut guards = Vec::new();
    for i in 0..20 {
        guards.push(holder.lock(format!("{base}/{i}")).try_acquire().await?);
    }
    // The 20 and the one the waiter waits for.
    let seen = holder.status_prefix(&base).await?;
    check!(
        seen.len() == 21,
        "a status by prefix found {} of the 21 locks held",
        seen.len()
    );
    check!(first.release().await?, "the release failed");
    let second = waiter_guard(waiting, "on the password-protected cluster").await?;
    let whose = "the waiter's token, after the holder's";
    check_above(whose, second.fencing_token(), first_token)?;
    second.release().await?;
    for guard in guards.into_iter().flatten() {
        guard.release().await?;
    }
    Ok(())
}

/// One master of a private cluster given `maxmemory` and an evicting policy: a client is warned
/// of that master, by its address, and of no other (every master is asked); the shared
/// cluster, run without `maxmemory`, gives no warning.
async fn evicting_master_is_warned(ctx: Ctx) -> Outcome {
    let shared = ctx.client.warnings().await;
    check!(shared.is_empty(), "the shared cluster warns: {shared:?}");
    let cluster = blocking(start_redis_cluster)?;
    let masters = blocking(|| cluster.masters())?;
    let evicting = masters[0];
    for (setting, value) in [("maxmemory", "64mb"), ("maxmemory-policy", "allkeys-lfu")] {
        let answer = blocking(|| cluster.cli(evicting, &["CONFIG", "SET", setting, value]))?;
        check!(
            answer == "OK",
            "CONFIG SET {setting} on {evicting}: {answer}"
        );
    }
    let client = connect(&cluster.url()).await?;
    let warnings = client.warnings().await;
    println!("warnings: {warnings:?}");
    check!(
        warnings.len() == 1
            && warnings[0].contains(&format!("master 127.0.0.1:{evicting}"))
            && warnings[0].contains("allkeys-lfu"),
        "masters {masters:?}, {evicting} evicting: {warnings:?}"
    );
    Ok(())
}

/// The cluster's nodes in `url`.
fn nodes_of(url: &str) -> Result<Vec<(String, u16)>, Failure> {
    use distlock::backends::redis::{RedisConfig, RedisTopology};
    match RedisConfig::from_url(url)?.topology {
        RedisTopology::Cluster { nodes } => Ok(nodes),
        other => Err(Failure(format!("{url}: not a cluster but {other:?}"))),
    }
}

/// The application's own cluster client (`from_cluster_client`), RESP3 as sharded pub/sub
/// needs: two distlock clients made from it lock, see each other's lock and hand it over; one
/// from the URL sees it too. A RESP2 client, which cannot subscribe, locks as well, and its
/// waiter asks again every 100 ms.
async fn the_applications_cluster_client(ctx: Ctx) -> Outcome {
    use distlock::backends::redis::redis_rs::ProtocolVersion;
    use distlock::backends::redis::redis_rs::cluster::ClusterClientBuilder;
    use distlock::backends::redis::{RedisBackend, RedisLockSettings};
    let seeds: Vec<String> = nodes_of(&ctx.url)?
        .iter()
        .map(|(host, port)| format!("redis://{host}:{port}"))
        .collect();
    let app = ClusterClientBuilder::new(seeds.clone())
        .use_protocol(ProtocolVersion::RESP3)
        .build()?;
    let options = distlock::Options::default();
    let make = |app| async {
        let backend =
            RedisBackend::from_cluster_client(app, RedisLockSettings::new(), &options).await?;
        Ok::<_, Failure>(Client::from_backend(std::sync::Arc::new(backend)))
    };
    let (a, b) = (make(app.clone()).await?, make(app.clone()).await?);
    distlock_testkit::check_handed_over(&a, &b, &ctx.unique_name("byo-cluster")).await?;
    distlock_testkit::check_handed_over(&b, &ctx.client, &ctx.unique_name("byo-cluster-url"))
        .await?;
    let resp2 = make(ClusterClientBuilder::new(seeds).build()?).await?;
    let name = ctx.unique_name("byo-cluster-resp2");
    // A RESP2 client cannot subscribe: its waiter asks again every 100 ms, so it is handed the
    // lock within the helper's 5 s, well before the holder's 30 s lease would wake its timer.
    distlock_testkit::check_handed_over(&a, &resp2, &name).await?;
    Ok(())
}

/// A `RedisConfig::cluster` built in code, no URL: it locks on the real cluster and hands the
/// lock to the URL's client; one from JSON does too.
async fn typed_configuration_alone(ctx: Ctx) -> Outcome {
    use distlock::backends::redis::{RedisBackend, RedisConfig};
    let nodes = nodes_of(&ctx.url)?;
    let options = distlock::Options::default();
    let backend =
        RedisBackend::connect_config(RedisConfig::cluster(nodes.clone()), &options).await?;
    let typed = Client::from_backend(std::sync::Arc::new(backend));
    distlock_testkit::check_handed_over(&typed, &ctx.client, &ctx.unique_name("typed-cluster"))
        .await?;
    #[cfg(feature = "serde")]
    {
        let json = serde_json::json!({ "topology": { "cluster": { "nodes": nodes } } });
        let config: RedisConfig = serde_json::from_value(json)?;
        let backend = RedisBackend::connect_config(config, &options).await?;
        let from_json = Client::from_backend(std::sync::Arc::new(backend));
        distlock_testkit::check_handed_over(
            &from_json,
            &typed,
            &ctx.unique_name("typed-cluster-json"),
        )
        .await?;
    }
    let err = RedisBackend::connect_config(RedisConfig::cluster(nodes).db(1), &options)
        .await
        .map(drop)
        .unwrap_err();
    check!(err.kind() == ErrorKind::InvalidInput, "{err:?}");
    Ok(())
}

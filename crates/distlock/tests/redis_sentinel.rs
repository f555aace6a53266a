//! The conformance suite against Redis behind Sentinel (DISTLOCK_REDIS_SENTINEL_URL, default
//! the group `scripts/services.sh sentinel` starts: a master and two replicas, three Sentinels
//! on 127.0.0.1:6410-6412), for every flavour; then failovers on a private group of the same
//! shape: one asked of the Sentinels (`SENTINEL FAILOVER`) and a SIGKILLed master, each while a
//! lock is held and waited for. Then replica acknowledgement (`?wait_replicas=N`): on the shared
//! group with both replicas up, and on a private group with a replica stopped. Last, a private
//! group with passwords on the data nodes and on the Sentinels.

use std::time::Duration;

use distlock::{Client, ErrorKind};
use distlock_testkit::failover::{blocking, handed_on, take_refused_for_replicas, waiter_guard};
use distlock_testkit::servers::{
    GroupPasswords, redis_cli, redis_cli_as, start_sentinel_group, start_sentinel_group_with,
};
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, acquiring, check, check_above, within,
};

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_REDIS_SENTINEL_URL").unwrap_or_else(|_| {
        "redis-sentinel://127.0.0.1:6410,127.0.0.1:6411,127.0.0.1:6412/distlock".to_string()
    });
    Suite::new("redis-sentinel", "Redis behind Sentinel", url)
        .flavours(Flavour::every())
        .case(
            "redis_sentinel::typed_configuration_alone",
            typed_configuration_alone,
        )
        .case(
            "redis_sentinel::failover_asked_of_the_sentinels_is_followed",
            |ctx| failover_is_followed(ctx, How::Asked),
        )
        .case("redis_sentinel::killed_master_is_followed", |ctx| {
            failover_is_followed(ctx, How::Killed)
        })
        .case(
            "redis_sentinel::a_take_not_replicated_is_lost_and_tokens_stay_above",
            take_not_replicated,
        )
        .case("redis_sentinel::bad_urls_and_names_are_typed", bad_urls)
        .case(
            "redis_sentinel::wait_replicas_every_replica_up_gives_a_guard_they_all_have",
            wait_replicas_all_up,
        )
        .case(
            "redis_sentinel::wait_replicas_a_replica_down_is_no_quorum_and_leaves_no_lock",
            wait_replicas_one_down,
        )
        .case(
            "redis_sentinel::wait_replicas_nonsense_is_refused",
            wait_replicas_refused,
        )
        .case(
            "redis_sentinel::passwords_on_nodes_and_sentinels_across_a_failover",
            passwords,
        )
        .case(
            "redis_sentinel::an_evicting_master_is_named_in_a_warning",
            evicting_master_is_warned,
        )
        .run()
}

#[derive(Clone, Copy, Debug)]
enum How {
    /// `SENTINEL FAILOVER`: the old master is turned into a replica.
    Asked,
    /// The master SIGKILLed; the Sentinels judge it down and promote a replica.
    Killed,
}

/// The holder's lease: longer than a failover takes on a loaded machine. Until its Sentinel
/// announces the promotion, the holder renews on the old master, which no longer replicates to
/// the promoted replica: the copy there lives only as long as the lease from the last renewal
/// replicated before the promotion (docs.md).
const LEASE: Duration = Duration::from_secs(20);

/// A lock held and waited for while the master moves. What is asserted: the holding, replicated
/// before the failover (the test waits until the replicas have it), is on the new master and the
/// holder keeps renewing it there past a whole lease; the waiter does not get in meanwhile, its
/// subscription moves to the new master, and the release there hands it the lock with a larger
/// token; new takes succeed, their tokens above every token before. What a holding that had not
/// reached a replica would suffer is docs.md's (it is lost: a second holder can get in).
async fn failover_is_followed(ctx: Ctx, how: How) -> Outcome {
    let mut group = blocking(start_sentinel_group)?;
    let url = group.url();
    let holder = distlock::connect(&url).await?;
    let waiter = distlock::connect(&url).await?;
    let name = ctx.unique_name("failover");
    let lock = holder.lock(&name).lease(LEASE);

    let mut before = Vec::new();
    for _ in 0..3 {
        let guard = lock.acquire_timeout(Duration::from_secs(5)).await?;
        before.push(guard.fencing_token().get());
        check!(
            guard.release().await?,
            "a release before the failover failed"
        );
    }
    let held = lock.acquire_timeout(Duration::from_secs(5)).await?;
    let held_token = held.fencing_token().get();
    before.push(held_token);
    let waiting = acquiring(waiter.lock(&name).lease(LEASE), Duration::from_secs(60));
    let old = blocking(|| group.master_port())?;
    let channel = format!("distlock:lock:{{{name}}}:free");
    wait_for_subscriber(old, &channel, "the waiter to subscribe on the first master").await?;
    blocking(|| group.wait_replicated())?;

    let started = std::time::Instant::now();
    let new = blocking(|| -> Result<u16, Failure> {
        match how {
            How::Asked => group.failover(),
            How::Killed => {
                group.node(old)?.kill()?;
                group.wait_for_new_master(old)
            }
        }
    })?;
    check!(new != old, "{how:?}: the master stayed on {old}");
    let promoted = started.elapsed();

    // The holding came across with the replication stream.
    let value = blocking(|| redis_cli(new, &["GET", &format!("distlock:lock:{{{name}}}")]))?;
    check!(
        value
            .split('\t')
            .next()
            .is_some_and(|v| v.ends_with(&format!(":{held_token}"))),
        "{how:?}: the new master {new} does not have the holding of token {held_token}: {value:?}"
    );
    // The waiter's subscription follows to the new master.
    wait_for_subscriber(new, &channel, "the waiter to subscribe on the new master").await?;
    let resubscribed = started.elapsed();
    // The holder renews on the new master: the holding's time to live goes up there.
    wait_for_renewal(new, &format!("distlock:lock:{{{name}}}"), how).await?;
    check!(
        !held.is_lost(),
        "{how:?}: the holder lost its lock across the failover (renewals on the new master failed)"
    );
    check!(
        !waiting.is_finished(),
        "{how:?}: the waiter finished while the lock was held: {:?}",
        waiting.await
    );
    check!(
        held.release().await?,
        "{how:?}: the release on the new master found no holding"
    );
    let taken = waiter_guard(waiting, &format!("{how:?}")).await?;
    let max_before = before.iter().copied().max().unwrap_or(0);
    let whose = format!("{how:?}: the waiter's token");
    check_above(&whose, taken.fencing_token().get(), max_before)?;
    check!(taken.release().await?, "the waiter's release failed");
    eprintln!(
        "{how:?}: master {old} -> {new}: every Sentinel named the new master after {promoted:?}, \
         the waiter was subscribed there after {resubscribed:?}"
    );

    // New takes, by both clients, with no restart: on the same name and a new one.
    for client in [&holder, &waiter] {
        for lock_name in [name.clone(), ctx.unique_name("after")] {
            let guard = take(client, &lock_name).await?;
            let whose = format!("{how:?}: a take's token after the failover");
            check_above(&whose, guard.fencing_token().get(), max_before)?;
            check!(
                guard.release().await?,
                "a release after the failover failed"
            );
        }
    }
    Ok(())
}

/// The hazard of asynchronous replication, made to happen: the replicas are stopped (SIGSTOP)
/// and their links closed by the master, a lock is taken on the master, the master is killed and
/// the replicas resumed. The promoted replica never had the take: the lock is free on it, so a
/// second client takes it while the first never released it (two holders), and the first is told
/// (`lost()`). The second's fencing token is still above the lost one's: tokens are at least the
/// server clock in µs (a counter alone, behind on the promoted replica, drew the same token
/// again).
async fn take_not_replicated(ctx: Ctx) -> Outcome {
    let lease = Duration::from_secs(6);
    {
        let mut group = blocking(start_sentinel_group)?;
        let url = group.url();
        let first = distlock::connect(&url).await?;
        let second = distlock::connect(&url).await?;
        let name = ctx.unique_name("unreplicated");
        let guard = first
            .lock(&name)
            .acquire_timeout(Duration::from_secs(5))
            .await?;
        let replicated = guard.fencing_token().get();
        check!(
            guard.release().await?,
            "a release before the failover failed"
        );
        blocking(|| group.wait_replicated())?;
        let old = blocking(|| group.master_port())?;

        blocking(|| {
            group.pause_replicas(true)?;
            redis_cli(old, &["CLIENT", "KILL", "TYPE", "replica"])
        })?;
        let held = first
            .lock(&name)
            .lease(lease)
            .acquire_timeout(Duration::from_secs(5))
            .await?;
        let lost_token = held.fencing_token().get();
        let new = blocking(|| -> Result<u16, Failure> {
            group.node(old)?.kill()?;
            group.pause_replicas(false)?;
            group.wait_for_new_master(old)
        })?;
        let key = format!("distlock:lock:{{{name}}}");
        let found = blocking(|| redis_cli(new, &["GET", &key]))?;
        check!(
            found.is_empty(),
            "the new master has the take no replica could receive: {found:?}"
        );
        // The lock is free on the new master though its holder never released it.
        let taken = second.lock(&name).lease(lease).try_acquire().await?;
        let Some(taken) = taken else {
            return Err(Failure(
                "the take was not on the new master, yet the lock is held there".into(),
            ));
        };
        check_above(
            &format!(
                "the second holder's token, after the lost take's (the one before it, replicated: {replicated})"
            ),
            taken.fencing_token().get(),
            lost_token,
        )?;
        let told = "the first holder told it lost the lock";
        within(lease * 2, held.lost(), told).await?;
        let after = taken.fencing_token().get();
        check!(taken.release().await?, "the second holder's release failed");
        eprintln!("tokens: replicated {replicated}, lost {lost_token}, after the failover {after}");
    }
    Ok(())
}

/// Waits (up to two leases) until the `PTTL` of `key` on the node on `port` goes up: a renewal.
async fn wait_for_renewal(port: u16, key: &str, how: How) -> Outcome {
    let pttl = || -> Result<i64, Failure> {
        let answer = blocking(|| redis_cli(port, &["PTTL", key]))?;
        answer
            .parse()
            .map_err(|_| Failure(format!("PTTL {key} answered {answer:?}")))
    };
    let mut last = pttl()?;
    let give_up = tokio::time::Instant::now() + LEASE * 2;
    while tokio::time::Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = pttl()?;
        check!(
            now > 0,
            "{how:?}: the holding expired on the new master (PTTL {now})"
        );
        if now > last {
            return Ok(());
        }
        last = now;
    }
    Err(Failure(format!(
        "{how:?}: no renewal reached the new master in {:?}",
        LEASE * 2
    )))
}

async fn take(client: &Client, name: &str) -> Result<distlock::Guard, Failure> {
    Ok(client
        .lock(name)
        .acquire_timeout(Duration::from_secs(10))
        .await?)
}

/// Waits until the node on `port` has a subscriber on `channel`.
async fn wait_for_subscriber(port: u16, channel: &str, what: &str) -> Outcome {
    wait_for_subscriber_as(None, port, channel, what).await
}

/// [`wait_for_subscriber`] on a node that asks for `password`.
async fn wait_for_subscriber_as(
    password: Option<&str>,
    port: u16,
    channel: &str,
    what: &str,
) -> Outcome {
    for _ in 0..200 {
        let answer = blocking(|| redis_cli_as(port, password, &["PUBSUB", "NUMSUB", channel]))?;
        if answer.lines().nth(1).is_some_and(|n| n != "0") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Failure(format!("waited 10 s for {what} (port {port})")))
}

/// A master name no Sentinel knows, and no Sentinel at all, are typed errors saying so; a
/// malformed URL is `InvalidUrl`.
async fn bad_urls(ctx: Ctx) -> Outcome {
    let sentinels = ctx
        .url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(hosts, _)| hosts.to_string())
        .ok_or_else(|| Failure(format!("no hosts in {}", ctx.url)))?;
    let unknown = distlock::connect(&format!("redis-sentinel://{sentinels}/no-such-master"))
        .await
        .map(drop)
        .unwrap_err();
    check!(
        unknown.kind() == ErrorKind::Backend
            && distlock::error::chain(&unknown).contains("no Sentinel knows a master"),
        "an unknown master name: {unknown:?}"
    );
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let nobody = distlock::connect_with(
        &format!("redis-sentinel://127.0.0.1:{port}/distlock"),
        &distlock::Options::default().retry_for(Duration::from_millis(200)),
    )
    .await
    .map(drop)
    .unwrap_err();
    check!(
        nobody.kind() == ErrorKind::Connection && nobody.to_string().contains("Sentinels running"),
        "no Sentinel: {nobody:?}"
    );
    for url in [
        "redis-sentinel://127.0.0.1:6410",
        "redis-sentinel://127.0.0.1:6410/m?prefx=1",
    ] {
        let e = distlock::connect(url).await.map(drop).unwrap_err();
        check!(e.kind() == ErrorKind::InvalidUrl, "{url}: {e:?}");
    }
    Ok(())
}

/// `url` with `params` added to its query.
fn with_params(url: &str, params: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{params}")
}

/// Whether `value`, a lock key's (`owner:token`, then tab-separated details), is the holding of
/// `token`.
fn holds_token(value: &str, token: u64) -> bool {
    value
        .split('\t')
        .next()
        .is_some_and(|v| v.ends_with(&format!(":{token}")))
}

/// The first Sentinel's port in `url`.
fn first_sentinel(url: &str) -> Result<u16, Failure> {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split(['/', ',']).next())
        .and_then(|host| host.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .ok_or_else(|| Failure(format!("no Sentinel port in {url}")))
}

/// The ports of the replicas the Sentinel on `sentinel` knows and judges up.
fn replica_ports(sentinel: u16) -> Result<Vec<u16>, Failure> {
    let answer = redis_cli(sentinel, &["SENTINEL", "replicas", "distlock"])?;
    // One flat list of field, value pairs per replica, each opening with "name".
    let lines: Vec<&str> = answer.lines().collect();
    let mut replicas: Vec<Vec<(&str, &str)>> = Vec::new();
    for pair in lines.chunks(2) {
        if let [field, value] = pair {
            if *field == "name" {
                replicas.push(Vec::new());
            }
            if let Some(replica) = replicas.last_mut() {
                replica.push((field, value));
            }
        }
    }
    fn field<'a>(replica: &[(&'a str, &'a str)], name: &str) -> Option<&'a str> {
        replica.iter().find(|(f, _)| *f == name).map(|(_, v)| *v)
    }
    let ports = replicas
        .iter()
        .filter(|r| field(r, "flags") == Some("slave"))
        .filter_map(|r| field(r, "port")?.parse().ok())
        .collect();
    Ok(ports)
}

/// With `wait_replicas=2` and both replicas up, a take gives a guard, and by the time it does,
/// both replicas have the holding (that is what `WAIT` waited for); acknowledged renewals keep
/// the lease past its first end, and the release works as without it.
async fn wait_replicas_all_up(ctx: Ctx) -> Outcome {
    let url = with_params(&ctx.url, "wait_replicas=2&wait_timeout=300ms");
    let client = distlock::connect(&url).await?;
    let replicas = blocking(|| replica_ports(first_sentinel(&ctx.url)?))?;
    check!(
        replicas.len() == 2,
        "the group should have two replicas up, the Sentinel knows {replicas:?}"
    );
    let name = ctx.unique_name("acked");
    let key = format!("distlock:lock:{{{name}}}");
    for round in 0..3 {
        let guard = client
            .lock(&name)
            .lease(Duration::from_secs(1))
            .acquire_timeout(Duration::from_secs(5))
            .await?;
        let token = guard.fencing_token().get();
        for port in &replicas {
            let value = blocking(|| redis_cli(*port, &["GET", &key]))?;
            check!(
                holds_token(&value, token),
                "round {round}: replica {port} lacks the take of token {token} when the guard \
                 is given: {value:?}"
            );
        }
        if round == 0 {
            // Past the first lease's end: only acknowledged renewals keep it.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            check!(
                !guard.is_lost(),
                "acknowledged renewals did not keep the lease past its first end"
            );
        }
        check!(guard.release().await?, "round {round}: the release failed");
    }
    Ok(())
}

/// On a private group with one replica killed: `wait_replicas=2` takes fail with `NoQuorum`
/// (retryable), and leave nothing behind (the master has no holding, another client takes the
/// lock at once); `wait_replicas=1` still gives guards.
async fn wait_replicas_one_down(ctx: Ctx) -> Outcome {
    let mut group = blocking(start_sentinel_group)?;
    let master = blocking(|| group.master_port())?;
    let replica = group
        .nodes
        .iter()
        .map(|n| n.port())
        .find(|p| *p != master)
        .ok_or_else(|| Failure("the group has no replica".into()))?;
    blocking(|| group.node(replica)?.kill())?;
    let both = distlock::connect(&with_params(
        &group.url(),
        "wait_replicas=2&wait_timeout=300ms",
    ))
    .await?;
    let one = distlock::connect(&with_params(
        &group.url(),
        "wait_replicas=1&wait_timeout=2s",
    ))
    .await?;
    let plain = distlock::connect(&group.url()).await?;
    let name = ctx.unique_name("unacked");
    let key = format!("distlock:lock:{{{name}}}");
    for attempt in 0..3 {
        take_refused_for_replicas(&both.lock(&name), &format!("attempt {attempt}")).await?;
        let left = blocking(|| redis_cli(master, &["EXISTS", &key]))?;
        check!(
            left == "0",
            "attempt {attempt}: the unacknowledged take is still on the master"
        );
    }
    // The acquire that waits gets the same error, not a wait until its deadline.
    let err = both
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await
        .map(drop)
        .unwrap_err();
    check!(err.kind() == ErrorKind::NoQuorum, "acquire: {err}");
    let taken = plain.lock(&name).try_acquire().await?;
    let Some(taken) = taken else {
        return Err(Failure(
            "the lock is held after takes that were undone".into(),
        ));
    };
    check!(taken.release().await?, "the plain client's release failed");
    let guard = one
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    let replicated = blocking(|| {
        let replica = group
            .nodes
            .iter()
            .find(|n| n.is_running() && n.port() != master)
            .map(|n| n.port())
            .ok_or_else(|| Failure("no replica left running".into()))?;
        redis_cli(replica, &["GET", &key])
    })?;
    check!(
        holds_token(&replicated, guard.fencing_token().get()),
        "wait_replicas=1: the replica up lacks the take when the guard is given: {replicated:?}"
    );
    check!(
        guard.release().await?,
        "wait_replicas=1: the release failed"
    );
    Ok(())
}

/// Values that cannot be honoured are refused before anything is sent: a wait without a
/// timeout, a zero timeout (Redis: forever), a timeout alone, Redlock; a lease the wait could
/// eat up is `InvalidLease`.
async fn wait_replicas_refused(ctx: Ctx) -> Outcome {
    for params in [
        "wait_replicas=2",
        "wait_replicas=2&wait_timeout=0",
        "wait_replicas=2&wait_timeout=0ms",
        "wait_timeout=1s",
        "wait_replicas=-1&wait_timeout=1s",
        "wait_replicas=1&wait_timeout=forever",
    ] {
        let url = with_params(&ctx.url, params);
        let e = distlock::connect(&url).await.map(drop).unwrap_err();
        check!(e.kind() == ErrorKind::InvalidUrl, "{params}: {e:?}");
        let plain = with_params("redis://127.0.0.1:6379", params);
        let e = distlock::connect(&plain).await.map(drop).unwrap_err();
        check!(
            e.kind() == ErrorKind::InvalidUrl,
            "redis:// {params}: {e:?}"
        );
    }
    let client =
        distlock::connect(&with_params(&ctx.url, "wait_replicas=1&wait_timeout=1s")).await?;
    let e = client
        .lock(ctx.unique_name("short"))
        .lease(Duration::from_secs(2))
        .try_acquire()
        .await
        .map(drop)
        .unwrap_err();
    check!(
        e.kind() == ErrorKind::InvalidLease,
        "a 2 s lease with a 1 s wait: {e:?}"
    );
    Ok(())
}

/// The data nodes' password (`requirepass`, `masterauth`) in the private group of [`passwords`].
const NODE_PASSWORD: &str = "node-s3cret";
/// The Sentinels' own password (their `requirepass`).
const SENTINEL_PASSWORD: &str = "sentinel-s3cret";

/// A private group with a password on the data nodes and another on the Sentinels: the URL's
/// user-info logs in to the nodes and `?sentinel_password=` to the Sentinels. A lock is taken
/// and waited for (the waiter's subscription and the follower log in too); each wrong or missing
/// password is a `Backend` error naming which login failed and never the password; after a
/// failover the same clients take, renew, release and wake on the promoted replica, logged in.
async fn passwords(ctx: Ctx) -> Outcome {
    let group = blocking(|| {
        start_sentinel_group_with(&GroupPasswords {
            nodes: Some(NODE_PASSWORD.into()),
            sentinels: Some(SENTINEL_PASSWORD.into()),
        })
    })?;
    let url = group.url();
    let hosts = url
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(hosts, _)| hosts.to_string())
        .ok_or_else(|| Failure(format!("no hosts in {url}")))?;
    // Fails at once rather than after the not-sent retries.
    let options = distlock::Options::default().retry_for(Duration::from_millis(200));
    for (wrong, says) in [
        (
            format!(
                "redis-sentinel://:wrong-node@{hosts}/distlock?sentinel_password={SENTINEL_PASSWORD}"
            ),
            "refused the user or password in the URL",
        ),
        (
            format!("redis-sentinel://{hosts}/distlock?sentinel_password={SENTINEL_PASSWORD}"),
            "asks for one the URL does not give",
        ),
        (
            format!(
                "redis-sentinel://:{NODE_PASSWORD}@{hosts}/distlock?sentinel_password=wrong-sentinel"
            ),
            "a Sentinel refused the URL's sentinel_user/sentinel_password",
        ),
        (
            format!("redis-sentinel://:{NODE_PASSWORD}@{hosts}/distlock"),
            "give it as ?sentinel_password=",
        ),
    ] {
        let err = distlock::connect_with(&wrong, &options)
            .await
            .map(drop)
            .unwrap_err();
        let shown = distlock::error::chain(&err);
        check!(
            err.kind() == ErrorKind::Backend && shown.contains(says),
            "{}: expected a Backend error saying {says:?}, got {err:?}",
            distlock::redact(&wrong)
        );
        for secret in [
            "wrong-node",
            "wrong-sentinel",
            NODE_PASSWORD,
            SENTINEL_PASSWORD,
        ] {
            check!(
                !shown.contains(secret),
                "the error shows a password: {shown}"
            );
        }
    }

    let holder = distlock::connect(&url).await?;
    let waiter = distlock::connect(&url).await?;
    let name = ctx.unique_name("login");
    let lock = holder.lock(&name).lease(LEASE);
    let first = lock.acquire_timeout(Duration::from_secs(5)).await?;
    let first_token = first.fencing_token();
    let waiting = acquiring(waiter.lock(&name).lease(LEASE), Duration::from_secs(60));
    let old = blocking(|| group.master_port())?;
    let channel = format!("distlock:lock:{{{name}}}:free");
    let on = Some(NODE_PASSWORD);
    wait_for_subscriber_as(on, old, &channel, "the waiter to subscribe").await?;
    check!(first.release().await?, "the first release failed");
    let second = waiter_guard(waiting, "before the failover").await?;
    let whose = "the waiter's token, after the first holder's";
    check_above(whose, second.fencing_token(), first_token)?;

    // Across a failover: the waiter holds, the holder waits.
    let waiting = acquiring(holder.lock(&name).lease(LEASE), Duration::from_secs(60));
    wait_for_subscriber_as(on, old, &channel, "the holder to subscribe").await?;
    blocking(|| group.wait_replicated())?;
    let new = blocking(|| group.failover())?;
    check!(new != old, "the master stayed on {old}");
    let what = "the holder to subscribe on the new master";
    wait_for_subscriber_as(on, new, &channel, what).await?;
    let key = format!("distlock:lock:{{{name}}}");
    let value = blocking(|| group.node_cli(new, &["GET", &key]))?;
    check!(
        holds_token(&value, second.fencing_token().get()),
        "the new master {new} lacks the holding: {value:?}"
    );
    let third = handed_on(second, waiting, "after the failover (on the new master)").await?;
    check!(third.release().await?, "the last release failed");
    Ok(())
}

/// The master of a private group given `maxmemory` and an evicting policy (replicas without):
/// a client is warned of it, by its address; after a failover to a replica that cannot evict,
/// the same client's warnings are asked of the new master and are none. The shared group, run
/// without `maxmemory`, gives no warning.
async fn evicting_master_is_warned(ctx: Ctx) -> Outcome {
    let shared = ctx.client.warnings().await;
    check!(shared.is_empty(), "the shared group warns: {shared:?}");
    let group = blocking(start_sentinel_group)?;
    let master = blocking(|| group.master_port())?;
    for (setting, value) in [("maxmemory", "64mb"), ("maxmemory-policy", "volatile-lru")] {
        let answer = blocking(|| redis_cli(master, &["CONFIG", "SET", setting, value]))?;
        check!(answer == "OK", "CONFIG SET {setting} on {master}: {answer}");
    }
    let client = distlock::connect(&group.url()).await?;
    let warnings = client.warnings().await;
    println!("warnings: {warnings:?}");
    check!(
        warnings.len() == 1
            && warnings[0].contains(&format!("master 127.0.0.1:{master}"))
            && warnings[0].contains("volatile-lru"),
        "master {master} evicting: {warnings:?}"
    );
    let promoted = blocking(|| group.failover())?;
    // The client's connection follows the promotion; until then it asks the old master.
    distlock_testkit::cases::eventually(
        Duration::from_secs(10),
        "no warning once the master cannot evict",
        || async { Ok(client.warnings().await.is_empty()) },
    )
    .await
    .map_err(|e| Failure(format!("after the failover to {promoted}: {e:?}")))?;
    Ok(())
}

/// A `RedisConfig::sentinel` built in code from the URL's Sentinels and master name, no URL:
/// it locks on the master they name, the URL's client finds the lock held, and a waiter there
/// gets it once it is released (within 10 s: pub/sub wakes it at once; room for a loaded
/// machine). One from JSON locks too; TLS behind Sentinel is refused, typed.
async fn typed_configuration_alone(ctx: Ctx) -> Outcome {
    use distlock::backends::redis::{RedisBackend, RedisConfig, RedisTopology};
    let RedisTopology::Sentinel {
        sentinels,
        master_name,
    } = RedisConfig::from_url(&ctx.url)?.topology
    else {
        return Err(Failure(format!("{}: not behind Sentinel", ctx.url)));
    };
    let options = distlock::Options::default();
    let config = RedisConfig::sentinel(sentinels.clone(), master_name.clone()).db(0);
    let typed = Client::from_backend(std::sync::Arc::new(
        RedisBackend::connect_config(config, &options).await?,
    ));
    let name = ctx.unique_name("typed-sentinel");
    let held = typed.lock(&name).acquire().await?;
    distlock_testkit::check_taken(
        &ctx.client.lock(&name),
        "the URL's client took the typed client's lock",
    )
    .await?;
    let waiter = tokio::spawn({
        let lock = ctx.client.lock(&name);
        async move { lock.acquire_timeout(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await?;
    let taken = waiter.await.map_err(|e| Failure(e.to_string()))??;
    distlock_testkit::check_taken(&typed.lock(&name), "the waiter's hold is not seen").await?;
    taken.release().await?;
    #[cfg(feature = "serde")]
    {
        let json = serde_json::json!({
            "topology": { "sentinel": { "sentinels": sentinels, "master_name": master_name } },
            "prefix": "json:"
        });
        let config: RedisConfig = serde_json::from_value(json)?;
        let from_json = Client::from_backend(std::sync::Arc::new(
            RedisBackend::connect_config(config, &options).await?,
        ));
        let held = from_json.lock(&name).acquire().await?;
        // Another prefix: other keys.
        let other = ctx.client.lock(&name).try_acquire().await?;
        check!(other.is_some(), "the prefix did not keep the keys apart");
        if let Some(guard) = other {
            guard.release().await?;
        }
        held.release().await?;
    }
    let err = RedisBackend::connect_config(
        RedisConfig::sentinel(sentinels, master_name).tls(true),
        &options,
    )
    .await
    .map(drop)
    .unwrap_err();
    check!(err.kind() == ErrorKind::InvalidInput, "{err:?}");
    check!(err.to_string().contains("TLS"), "{err}");
    Ok(())
}

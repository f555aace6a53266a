//! The conformance suite against the real ZooKeeper (DISTLOCK_ZK_URL, default
//! zk://127.0.0.1:2181/distlock-test?timeout=4s: a short session timeout so the crash cases
//! wait seconds, not ten; with 3 s, a 2.3 s fsync stall of the server's log on a loaded machine
//! left a client's pings unanswered past the timeout and a holder lost its session), then the
//! cases only ZooKeeper has (`zk::…`): the node layout Curator shares, FIFO with one watcher per
//! node, a killed waiter skipped, an ended session.

use std::time::Duration;

use distlock::ErrorKind;
use distlock_testkit::child::{ChildProcess, Role};
use distlock_testkit::servers::{WithParam, start_zookeeper};
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, acquiring, cases, check, check_above, joined, within,
};
use zookeeper_client::Client as Zk;

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_ZK_URL")
        .unwrap_or_else(|_| "zk://127.0.0.1:2181/distlock-test?timeout=4s".to_string());
    let suite = Suite::new("zk", "ZooKeeper", url)
        .flavours(Flavour::every())
        // The session timeout of the URL above: a stopped or killed holder's session ends by
        // then (ZooKeeper expires sessions in ticks: allow one more).
        .session_expiry(Duration::from_secs(6))
        // ZooKeeper keeps nodes and sessions on disk: a session outlives a restart shorter
        // than its timeout, and ends when the store is down past it.
        .private_store(|| Ok(WithParam::new(start_zookeeper()?, "timeout=8s")))
        .case(
            "zk::curator_layout_in_the_chroot",
            curator_layout_in_the_chroot,
        )
        .case(
            "zk::hundred_waiters_fifo_one_watch_each",
            hundred_waiters_fifo_one_watch_each,
        )
        .case(
            "zk::killed_middle_waiter_is_skipped",
            killed_middle_waiter_is_skipped,
        )
        .case("zk::ended_session_fires_lost", ended_session_fires_lost)
        .case(
            "zk::deleted_session_beacon_is_made_again",
            deleted_session_beacon_is_made_again,
        )
        .case(
            "zk::readers_share_writers_exclude",
            cases::readers_share_writers_exclude,
        )
        .case(
            "zk::waiting_writer_holds_back_new_readers",
            cases::writer_preference,
        )
        .case(
            "zk::read_to_write_upgrade_is_refused",
            cases::upgrade_is_refused,
        )
        .case(
            "zk::semaphore_counts_permits",
            cases::semaphore_counts_permits,
        )
        .case("zk::password_never_shown", password_never_shown)
        .case("zk::config_in_code_locks", config_in_code_locks)
        .case(
            "zk::the_applications_own_connector_locks",
            the_applications_own_connector_locks,
        );
    // From JSON needs the serde feature (every CI run has it).
    #[cfg(feature = "serde")]
    let suite = suite.case("zk::config_from_json_locks", config_from_json_locks);
    suite.run()
}

/// A lock taken through `backend` (built without a URL, in `chroot`) excludes a contender
/// connected by URL to the same chroot, and its release frees it for that contender.
async fn locks_with_url_client(
    ctx: &Ctx,
    backend: distlock::backends::zookeeper::ZooKeeperBackend,
    chroot: &str,
) -> Outcome {
    let (servers, _) = servers_and_chroot(ctx);
    let client = distlock::Client::from_backend(std::sync::Arc::new(backend));
    let by_url = distlock::connect(&format!("zk://{servers}{chroot}?timeout=4s")).await?;
    let name = ctx.unique_name("typed");
    // Shorter than the 10 s default session: held under a session of its own.
    distlock_testkit::check_shared_store(&client, &by_url, &name, "the typed configuration")
        .await?;
    client.shutdown().await;
    Ok(())
}

/// `ZooKeeperConfig` built in code, no URL: `connect_config` connects and locks (issue #40).
async fn config_in_code_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::zookeeper::{ZooKeeperBackend, ZooKeeperConfig};
    let (servers, chroot) = servers_and_chroot(&ctx);
    let config = ZooKeeperConfig::new(servers.split(',')).chroot(chroot.clone());
    let backend = ZooKeeperBackend::connect_config(config, &distlock::Options::default()).await?;
    locks_with_url_client(&ctx, backend, &chroot).await
}

/// `ZooKeeperConfig` from JSON (the `serde` feature), then as in code.
#[cfg(feature = "serde")]
async fn config_from_json_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::zookeeper::{ZooKeeperBackend, ZooKeeperConfig};
    let (servers, chroot) = servers_and_chroot(&ctx);
    let json = serde_json::json!({
        "servers": servers.split(',').collect::<Vec<_>>(),
        "chroot": chroot,
        "timeout": "10s",
    });
    let config: ZooKeeperConfig = serde_json::from_value(json)
        .map_err(|e| Failure(format!("the JSON configuration was refused: {e}")))?;
    let backend = ZooKeeperBackend::connect_config(config, &distlock::Options::default()).await?;
    locks_with_url_client(&ctx, backend, &chroot).await
}

/// The application's own `zookeeper_client::Connector` (issue #40): `from_connector` opens
/// every session with it (here with a digest identity the application adds itself) and locks.
async fn the_applications_own_connector_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::zookeeper::{ZooKeeperBackend, ZooKeeperConfig};
    let (servers, chroot) = servers_and_chroot(&ctx);
    let connector = Zk::connector().with_auth("digest", b"app-own:pw");
    let config = ZooKeeperConfig::new(servers.split(',')).chroot(chroot.clone());
    let backend =
        ZooKeeperBackend::from_connector(connector, config, &distlock::Options::default()).await?;
    locks_with_url_client(&ctx, backend, &chroot).await
}

/// `host:port,…` and the chroot of the suite's URL.
fn servers_and_chroot(ctx: &Ctx) -> (String, String) {
    let rest = ctx.url.split_once("://").map_or(&*ctx.url, |(_, r)| r);
    let rest = rest.split('?').next().unwrap_or_default();
    let (hosts, chroot) = rest.split_once('/').unwrap_or((rest, ""));
    let hosts = hosts.rsplit_once('@').map_or(hosts, |(_, h)| h);
    (hosts.to_string(), format!("/{chroot}"))
}

/// A plain ZooKeeper client on the suite's servers, to look at the tree.
async fn zk(ctx: &Ctx) -> Result<(Zk, String), Failure> {
    let (servers, chroot) = servers_and_chroot(ctx);
    let client = Zk::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&servers)
        .await
        .map_err(|e| Failure(format!("cannot reach ZooKeeper at {servers}: {e}")))?;
    Ok((client, chroot))
}

async fn children(zk: &Zk, path: &str) -> Result<Vec<String>, Failure> {
    match zk.list_children(path).await {
        Ok(c) => Ok(c),
        Err(zookeeper_client::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(Failure(format!("listing {path}: {e}"))),
    }
}

/// A lock name a Curator user writes as a path segment as it is (the suite's names hold `/`,
/// which distlock escapes).
fn plain_name(ctx: &Ctx, what: &str) -> String {
    ctx.unique_name(what).replace('/', "-")
}

/// The holder's node is Curator's: `<chroot>/<name>/_c_<uuid>-lock-<10 digits>`, ephemeral to
/// the client's session, and its creation zxid is the fencing token; an awkward name stays one
/// node under the chroot.
async fn curator_layout_in_the_chroot(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    let (zk, chroot) = zk(&ctx).await?;
    let name = plain_name(&ctx, "layout");
    let held = ctx.lock(&name).acquire().await?;
    let nodes = children(&zk, &format!("{chroot}/{name}")).await?;
    check!(nodes.len() == 1, "one holder, nodes {nodes:?}");
    let node = &nodes[0];
    let uuid = node
        .strip_prefix("_c_")
        .and_then(|n| n.split_once("-lock-"))
        .map(|(id, seq)| (id.len(), seq.len(), seq.bytes().all(|b| b.is_ascii_digit())));
    check!(
        uuid == Some((36, 10, true)),
        "node {node:?} is not _c_<uuid>-lock-<10 digits>"
    );
    let path = format!("{chroot}/{name}/{node}");
    let stat = zk
        .check_stat(&path)
        .await
        .map_err(|e| Failure(format!("{path}: {e}")))?
        .ok_or_else(|| Failure(format!("{path} vanished")))?;
    check!(
        stat.ephemeral_owner != 0,
        "the holder's node is not ephemeral"
    );
    check!(
        stat.czxid as u64 == held.fencing_token().get(),
        "token {} is not the node's creation zxid {}",
        held.fencing_token(),
        stat.czxid
    );
    let first = held.fencing_token();
    check!(held.release().await?, "release");
    let after = children(&zk, &format!("{chroot}/{name}")).await?;
    check!(after.is_empty(), "release left {after:?}");
    // The lock's node is a container: ZooKeeper deletes it once empty (scripts/services.sh
    // starts ZooKeeper checking every second), and the next take creates it again.
    let parent = format!("{chroot}/{name}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while zk
        .check_stat(&parent)
        .await
        .map_err(|e| Failure(format!("{parent}: {e}")))?
        .is_some()
    {
        check!(
            tokio::time::Instant::now() < deadline,
            "the empty lock node {parent} was not reaped within 10 s: is ZooKeeper running \
             with -Dznode.container.checkIntervalMs=1000 (scripts/services.sh zk)?"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = ctx.lock(&name).acquire().await?;
    let whose = "the token after the lock node was created again";
    check_above(whose, again.fencing_token(), first)?;
    check!(
        again.release().await?,
        "release after the lock node came back"
    );
    // Names that would be other paths stay one node under the chroot.
    for awkward in [
        "..",
        ".",
        "zookeeper",
        "a/../../b",
        "x\u{fff5}y",
        "🚀",
        "\u{e000}",
    ] {
        let before = children(&zk, &chroot).await?;
        let held = ctx.lock(awkward).acquire().await?;
        let now = children(&zk, &chroot).await?;
        let added: Vec<&String> = now.iter().filter(|n| !before.contains(n)).collect();
        check!(
            added.len() <= 1 && added.iter().all(|n| !n.contains('/')),
            "{awkward:?} made {added:?} under {chroot}"
        );
        check!(held.release().await?, "release {awkward:?}");
    }
    Ok(())
}

/// 100 waiters on one lock, queued one after another across 10 clients, are served in the
/// order they queued, and while they wait each contender's node is watched by exactly one
/// session (its successor's): a release wakes one waiter, not the herd.
async fn hundred_waiters_fifo_one_watch_each(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    const WAITERS: usize = 100;
    let (zk, chroot) = zk(&ctx).await?;
    let name = plain_name(&ctx, "fifo");
    let parent = format!("{chroot}/{name}");
    let mut clients = Vec::new();
    for _ in 0..10 {
        clients.push(distlock::connect(&ctx.url).await?);
    }
    let held = ctx.lock(&name).acquire().await?;
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % clients.len()].lock(&name);
        let order = order_tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire_timeout(Duration::from_secs(120)).await?;
            let _ = order.send(i);
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.release().await?;
            Ok::<_, distlock::Error>(())
        }));
        // Queued once its node is there: the next one queues behind it.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while children(&zk, &parent).await?.len() < i + 2 {
            check!(
                tokio::time::Instant::now() < deadline,
                "waiter {i} did not queue within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // Every waiter watches one node (the last one sets its watch just after queueing), and no
    // node has two watchers.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let watches = loop {
        let watches = watches_by_path(&ctx, &parent).await?;
        let watched: usize = watches.iter().map(|(_, sessions)| *sessions).sum();
        if watched >= WAITERS || tokio::time::Instant::now() >= deadline {
            break watches;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let watched: usize = watches.iter().map(|(_, sessions)| *sessions).sum();
    let crowded: Vec<&(String, usize)> = watches.iter().filter(|(_, n)| *n != 1).collect();
    check!(
        crowded.is_empty(),
        "nodes with more than one watcher: {crowded:?}"
    );
    check!(
        watched == WAITERS && watches.len() == WAITERS,
        "{watched} watches on {} nodes for {WAITERS} waiters",
        watches.len()
    );
    check!(held.release().await?, "release");
    drop(order_tx);
    let mut served = Vec::new();
    while let Some(i) = order_rx.recv().await {
        served.push(i);
    }
    for t in tasks {
        t.await.map_err(|e| Failure(e.to_string()))??;
    }
    let expected: Vec<usize> = (0..WAITERS).collect();
    check!(
        served == expected,
        "waiters were not served in the order they queued: {served:?}"
    );
    Ok(())
}

/// ZooKeeper's own count of watches per node under `parent` (the `wchp` command): (node,
/// sessions watching it).
async fn watches_by_path(ctx: &Ctx, parent: &str) -> Result<Vec<(String, usize)>, Failure> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (servers, _) = servers_and_chroot(ctx);
    let first = servers.split(',').next().unwrap_or_default().to_string();
    let mut stream = tokio::net::TcpStream::connect(&first).await?;
    stream.write_all(b"wchp").await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    if answer.contains("not in the whitelist") || answer.contains("not executed") {
        return Err(Failure(format!(
            "ZooKeeper at {first} refuses the wchp command ({}): scripts/services.sh zk \
             starts it with wchp allowed",
            answer.trim()
        )));
    }
    // Paths at the start of a line, then one session id per line, indented.
    let mut watches: Vec<(String, usize)> = Vec::new();
    for line in answer.lines() {
        if line.starts_with('/') {
            watches.push((line.to_string(), 0));
        } else if line.trim_start().starts_with("0x")
            && let Some(last) = watches.last_mut()
        {
            last.1 += 1;
        }
    }
    watches.retain(|(path, _)| path.starts_with(&format!("{parent}/")));
    Ok(watches)
}

/// A waiter in another process, queued between two others, is SIGKILLed: once its session
/// expires its node goes and the waiter behind it gets the lock — the queue does not stall.
async fn killed_middle_waiter_is_skipped(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    let (zk, chroot) = zk(&ctx).await?;
    let name = plain_name(&ctx, "skip");
    let parent = format!("{chroot}/{name}");
    let held = ctx.lock(&name).acquire().await?;
    let first_token = held.fencing_token();
    let middle = ChildProcess::spawn(&ctx.spec(Role::Hold {
        name: name.clone(),
        lease_ms: 3_000,
    }))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while children(&zk, &parent).await?.len() < 2 {
        check!(
            tokio::time::Instant::now() < deadline,
            "the middle waiter did not queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = distlock::connect(&ctx.url).await?;
    let last = acquiring(other.lock(&name), Duration::from_secs(30));
    while children(&zk, &parent).await?.len() < 3 {
        check!(
            tokio::time::Instant::now() < deadline,
            "the last waiter did not queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    middle.signal(libc::SIGKILL)?;
    check!(held.release().await?, "release");
    let served = "the last waiter served after the kill";
    let next = joined(Duration::from_secs(20), last, served).await??;
    check_above("the last waiter's token", next.fencing_token(), first_token)?;
    check!(next.release().await?, "release");
    Ok(())
}

/// The client's session ended (closed on purpose, as an expiry would end it): every guard of
/// that session reports the loss, another client gets the lock, and the first client takes it
/// again on a new session.
async fn ended_session_fires_lost(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    let backend = std::sync::Arc::new(
        distlock::backends::zookeeper::ZooKeeperBackend::connect(&ctx.url).await?,
    );
    let client = distlock::Client::from_backend(backend.clone());
    let name = plain_name(&ctx, "ended");
    let a = client.lock(&name).acquire().await?;
    let b = client.lock(format!("{name}-2")).acquire().await?;
    backend.end_session().await;
    for guard in [&a, &b] {
        let ended = "lost() firing when the session ended";
        within(Duration::from_secs(5), guard.lost(), ended).await?;
    }
    let other = ctx
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    let whose = "the next holder's token";
    check_above(whose, other.fencing_token(), a.fencing_token())?;
    check!(other.release().await?, "release");
    let stale = a.release().await;
    check!(
        !matches!(stale, Ok(true)),
        "a lost guard released something"
    );
    let again = client
        .lock(&name)
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    check!(again.release().await?, "release on the new session");
    Ok(())
}

/// Every session confirms itself by a write to its beacon, `<chroot>/%sessions/<id>`. Someone
/// deletes the beacons (a clean-up of the tree, say) while a lock is held: each client makes its
/// beacon again, so the holder is not lost past its session timeout and releases its lock.
async fn deleted_session_beacon_is_made_again(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    let (zk, chroot) = zk(&ctx).await?;
    let client = distlock::connect(&ctx.url).await?;
    let held = client.lock(ctx.unique_name("beacon")).acquire().await?;
    let sessions = format!("{chroot}/%sessions");
    let beacons = children(&zk, &sessions).await?;
    check!(!beacons.is_empty(), "no session beacon under {sessions}");
    for beacon in &beacons {
        match zk.delete(&format!("{sessions}/{beacon}"), None).await {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => return Err(Failure(format!("deleting {sessions}/{beacon}: {e}"))),
        }
    }
    // Two session timeouts of the suite's URL (4 s): a holder that could not confirm its
    // session is lost by then.
    tokio::time::sleep(Duration::from_secs(9)).await;
    check!(
        !held.is_lost(),
        "the holder was lost after its session's beacon was deleted"
    );
    check!(
        !children(&zk, &sessions).await?.is_empty(),
        "no beacon was made again under {sessions}"
    );
    check!(
        held.release().await?,
        "the holder's release found its lock gone"
    );
    Ok(())
}

/// A password in the URL reaches ZooKeeper's digest scheme and never an error or `Debug`.
async fn password_never_shown(ctx: Ctx) -> Outcome {
    if ctx.flavour.name != "mutex" {
        return Ok(());
    }
    let (servers, chroot) = servers_and_chroot(&ctx);
    let url = format!("zk://app:hunter2@{servers}{chroot}?timeout=3s");
    let client = distlock::connect(&url).await?;
    check!(
        !format!("{:?}", client.backend()).contains("hunter2"),
        "Debug shows the password"
    );
    let guard = client.lock(plain_name(&ctx, "auth")).acquire().await?;
    check!(guard.release().await?, "release");
    let bad = distlock::connect("zk://app:hunter2@127.0.0.1:1/x?timeout=1s").await;
    let e = bad
        .err()
        .ok_or_else(|| Failure("connected to port 1".into()))?;
    check!(
        e.kind() == ErrorKind::Connection && !distlock::error::chain(&e).contains("hunter2"),
        "{e}"
    );
    Ok(())
}

//! The conformance suite against the real etcd (DISTLOCK_ETCD_URL, default
//! etcd://127.0.0.1:2379?ttl=3: a short session TTL so the crash cases wait seconds, not ten),
//! then the cases only etcd has (`etcd::…`): etcd's own `etcdctl lock` as the other holder, and a
//! session lease revoked on the server.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use distlock::{ErrorKind, OwnerToken};
use distlock_testkit::servers::{start_etcd, start_etcd_cluster, start_etcd_tls};
use distlock_testkit::suite::PRIVATE_SESSION_TTL;
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, cases, check, check_above, check_taken, within,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_ETCD_URL")
        .unwrap_or_else(|_| "etcd://127.0.0.1:2379?ttl=3".to_string());
    let suite = Suite::new("etcd", "etcd", url)
        .flavours(Flavour::every())
        // The session TTL of the URL above: a stopped or killed holder's lease ends by then.
        .session_expiry(Duration::from_secs(3))
        // etcd keeps keys and leases across a restart (and gives leases a fresh TTL then).
        .private_store(|| start_etcd(PRIVATE_SESSION_TTL.as_secs()))
        .case(
            "etcd::etcdctl_lock_and_distlock_exclude_each_other",
            etcdctl_lock_and_distlock_exclude_each_other,
        )
        .case(
            "etcd::etcdctl_and_distlock_share_a_counter",
            etcdctl_and_distlock_share_a_counter,
        )
        .case(
            "etcd::revoked_session_fires_lost",
            revoked_session_fires_lost,
        )
        .case(
            "etcd::readers_share_writers_exclude",
            cases::readers_share_writers_exclude,
        )
        .case(
            "etcd::waiting_writer_holds_back_new_readers",
            cases::writer_preference,
        )
        .case(
            "etcd::read_to_write_upgrade_is_refused",
            cases::upgrade_is_refused,
        )
        .case("etcd::writer_cannot_also_read", writer_cannot_also_read)
        .case(
            "etcd::a_lock_taken_again_puts_the_same_key",
            a_lock_taken_again_puts_the_same_key,
        )
        .case(
            "etcd::semaphore_counts_permits",
            cases::semaphore_counts_permits,
        )
        .case("etcd::user_and_password", user_and_password)
        .case(
            "etcd::tls_with_a_client_certificate",
            tls_with_a_client_certificate,
        )
        .case("etcd::config_in_code_locks", config_in_code_locks)
        .case(
            "etcd::the_applications_own_client_locks",
            the_applications_own_client_locks,
        );
    // From JSON needs the serde feature (every CI run has it).
    #[cfg(feature = "serde")]
    let suite = suite.case("etcd::config_from_json_locks", config_from_json_locks);
    suite.run()
}

/// A lock taken through `backend` (built without a URL, under `prefix`) excludes a contender
/// connected by URL to the same prefix, and its release frees it for that contender.
async fn locks_with_url_client(
    ctx: &Ctx,
    backend: distlock::backends::etcd::EtcdBackend,
    prefix: &str,
) -> Outcome {
    let client = distlock::Client::from_backend(std::sync::Arc::new(backend));
    let by_url = distlock::connect(&format!("etcd://{}/{prefix}", endpoints(ctx))).await?;
    let name = ctx.unique_name("typed");
    distlock_testkit::check_shared_store(&client, &by_url, &name, "the typed configuration")
        .await?;
    client.shutdown().await;
    Ok(())
}

/// `EtcdConfig` built in code, no URL: `connect_config` connects and locks (issue #40).
async fn config_in_code_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::etcd::{EtcdBackend, EtcdConfig};
    let prefix = format!("typed-{}", &OwnerToken::random().as_str()[..8]);
    let config = EtcdConfig::new([endpoints(&ctx)])
        .prefix(prefix.clone())
        .ttl(Duration::from_secs(3));
    let backend = EtcdBackend::connect_config(config, &distlock::Options::default()).await?;
    locks_with_url_client(&ctx, backend, &prefix).await
}

/// `EtcdConfig` from JSON (the `serde` feature), then as in code.
#[cfg(feature = "serde")]
async fn config_from_json_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::etcd::{EtcdBackend, EtcdConfig};
    let prefix = format!("json-{}", &OwnerToken::random().as_str()[..8]);
    let json = serde_json::json!({
        "endpoints": [endpoints(&ctx)],
        "prefix": format!("{prefix}/"),
        "ttl": "3s",
    });
    let config: EtcdConfig = serde_json::from_value(json)
        .map_err(|e| Failure(format!("the JSON configuration was refused: {e}")))?;
    let backend = EtcdBackend::connect_config(config, &distlock::Options::default()).await?;
    locks_with_url_client(&ctx, backend, &prefix).await
}

/// The application's own `etcd_client::Client` (issue #40): `from_client` locks through it,
/// with the prefix and TTL of the configuration (its endpoints unused).
async fn the_applications_own_client_locks(ctx: Ctx) -> Outcome {
    use distlock::backends::etcd::{EtcdBackend, EtcdConfig};
    let apps = etcd_client::Client::connect([format!("http://{}", endpoints(&ctx))], None)
        .await
        .map_err(|e| Failure(format!("the application's client did not connect: {e}")))?;
    let prefix = format!("own-{}", &OwnerToken::random().as_str()[..8]);
    let config = EtcdConfig::new(Vec::<String>::new()).prefix(prefix.clone());
    let backend = EtcdBackend::from_client(apps.clone(), config).await?;
    locks_with_url_client(&ctx, backend, &prefix).await?;
    // The application's client is still its own, and works.
    let mut kv = apps.kv_client();
    kv.put(format!("{prefix}-app-key"), "v", None)
        .await
        .map_err(|e| Failure(format!("the application's client stopped working: {e}")))?;
    kv.delete(format!("{prefix}-app-key"), None)
        .await
        .map_err(|e| Failure(e.to_string()))?;
    Ok(())
}

/// `host:port,…` of the suite's URL, for etcdctl.
fn endpoints(ctx: &Ctx) -> String {
    let rest = ctx.url.split_once("://").map_or(&*ctx.url, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    rest[..end]
        .rsplit_once('@')
        .map_or(&rest[..end], |(_, h)| h)
        .to_string()
}

/// A lock name etcdctl uses as written (the suite's names hold `/`, which distlock escapes).
fn plain_name(ctx: &Ctx, what: &str) -> String {
    ctx.unique_name(what).replace('/', "-")
}

fn etcdctl(ctx: &Ctx, args: &[&str]) -> Command {
    let mut command = Command::new("etcdctl");
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints(ctx)))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The next line `child` prints, within `within`.
async fn line(child: &mut Child, within: Duration, what: &str) -> Result<String, Failure> {
    let stdout = child
        .stdout
        .as_mut()
        .ok_or_else(|| Failure("no stdout".into()))?;
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    match tokio::time::timeout(within, reader.read_line(&mut line)).await {
        Ok(Ok(n)) if n > 0 => Ok(line.trim().to_string()),
        Ok(_) => Err(Failure(format!("etcdctl ended before {what}"))),
        Err(_) => Err(Failure(format!(
            "etcdctl did not print {what} within {within:?}"
        ))),
    }
}

fn signal(child: &Child, sig: i32) -> Outcome {
    let pid = child
        .id()
        .ok_or_else(|| Failure("etcdctl already exited".into()))?;
    // SAFETY: kill() only sends a signal to our own child.
    check!(
        unsafe { libc::kill(pid as i32, sig) } == 0,
        "cannot signal etcdctl"
    );
    Ok(())
}

/// `etcdctl lock NAME` (etcd's own `concurrency.Mutex`) and distlock's lock `NAME` are one lock:
/// each waits while the other holds, in both directions.
async fn etcdctl_lock_and_distlock_exclude_each_other(ctx: Ctx) -> Outcome {
    let name = plain_name(&ctx, "etcdctl");
    // etcdctl holds first: it prints its key once it holds and keeps it until interrupted.
    let mut holder = etcdctl(&ctx, &["lock", &name]).spawn()?;
    let key = line(&mut holder, Duration::from_secs(10), "its key").await?;
    check!(
        key.starts_with(&format!("{name}/")),
        "etcdctl's key {key:?} is not under {name}/"
    );
    check_taken(&ctx.lock(&name), "distlock took the lock etcdctl holds").await?;
    let waited = ctx
        .lock(&name)
        .acquire_timeout(Duration::from_millis(800))
        .await;
    check!(
        waited.as_ref().is_err_and(|e| e.is_timeout()),
        "distlock's wait on etcdctl's lock ended with {:?}",
        waited.map(|g| g.fencing_token())
    );
    // Interrupted, etcdctl unlocks and exits; the waiter is woken by the key's deletion.
    let waiting = {
        let lock = ctx.lock(&name);
        tokio::spawn(async move { lock.acquire_timeout(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(&holder, libc::SIGINT)?;
    let guard = waiting.await.map_err(|e| Failure(e.to_string()))??;
    holder.wait().await?;

    // Now distlock holds: etcdctl must wait for it.
    let mut waiter = etcdctl(&ctx, &["lock", &name, "echo", "got-it"]).spawn()?;
    let early = line(&mut waiter, Duration::from_millis(1500), "got-it").await;
    check!(
        early.is_err(),
        "etcdctl ran its command while distlock held the lock: {:?}",
        early.ok()
    );
    check!(guard.release().await?, "distlock's holding was gone");
    let got = line(&mut waiter, Duration::from_secs(10), "got-it").await?;
    check!(got == "got-it", "etcdctl printed {got:?}");
    let status = tokio::time::timeout(Duration::from_secs(10), waiter.wait()).await??;
    check!(status.success(), "etcdctl lock failed: {status}");
    Ok(())
}

/// etcdctl's critical sections (a shell read-modify-write of a counter file) and distlock's
/// interleave on one lock without overlap: every increment counts.
async fn etcdctl_and_distlock_share_a_counter(ctx: Ctx) -> Outcome {
    let name = plain_name(&ctx, "counter");
    let counter = ctx.dir.path().join(format!("{name}.counter"));
    std::fs::write(&counter, "0")?;
    const ROUNDS: u32 = 15;
    let script = format!(
        "for i in $(seq {ROUNDS}); do ETCDCTL_API=3 etcdctl --endpoints={} lock {name} -- \
         sh -c 'v=$(cat {path}); sleep 0.02; echo $((v+1)) > {path}' >/dev/null || exit 1; done",
        endpoints(&ctx),
        path = counter.display(),
    );
    let mut shell = Command::new("sh")
        .args(["-c", &script])
        .kill_on_drop(true)
        .spawn()?;
    for _ in 0..ROUNDS {
        let guard = ctx
            .lock(&name)
            .acquire_timeout(Duration::from_secs(20))
            .await?;
        increment(&counter).await?;
        guard.release().await?;
    }
    let status = tokio::time::timeout(Duration::from_secs(60), shell.wait()).await??;
    check!(status.success(), "the etcdctl loop failed: {status}");
    let value: u32 = std::fs::read_to_string(&counter)?.trim().parse()?;
    check!(
        value == 2 * ROUNDS,
        "counter = {value} after {ROUNDS} increments by etcdctl and {ROUNDS} by distlock: \
         sections overlapped"
    );
    Ok(())
}

/// A read-modify-write slow enough that an overlapping writer would lose an update.
async fn increment(path: &Path) -> Outcome {
    let value: u32 = tokio::fs::read_to_string(path).await?.trim().parse()?;
    tokio::time::sleep(Duration::from_millis(20)).await;
    tokio::fs::write(path, (value + 1).to_string()).await?;
    Ok(())
}

/// The server ends a holder's session (an administrator's `etcdctl lease revoke`): its guard's
/// `lost()` fires, the lock is free at once, and the next holder's token is larger.
async fn revoked_session_fires_lost(ctx: Ctx) -> Outcome {
    let name = plain_name(&ctx, "revoked");
    let holder = ctx.connect().await?;
    let held = holder.lock(&name).acquire().await?;
    let mut keys = etcdctl(
        &ctx,
        &["get", "--prefix", "--keys-only", &format!("{name}/")],
    )
    .spawn()?;
    let key = line(&mut keys, Duration::from_secs(10), "the holder's key").await?;
    keys.wait().await?;
    // `<name>/<lease id in hex>-<contender number>`.
    let lease = key
        .rsplit_once('/')
        .and_then(|(_, last)| last.split('-').next())
        .map(str::to_string)
        .ok_or_else(|| Failure(format!("a key without a lease id: {key:?}")))?;
    let revoke = etcdctl(&ctx, &["lease", "revoke", &lease]).output().await?;
    check!(
        revoke.status.success(),
        "etcdctl lease revoke {lease} failed: {revoke:?}"
    );
    let revoked = "the holder's lost() firing once its lease was revoked";
    within(Duration::from_secs(5), held.lost(), revoked).await?;
    check!(held.is_lost(), "lost() fired but is_lost() is false");
    let next = ctx
        .lock(&name)
        .acquire_timeout(Duration::from_secs(2))
        .await?;
    let whose = "the token after the revoked holder's";
    check_above(whose, next.fencing_token(), held.fencing_token())?;
    check!(
        !matches!(held.release().await, Ok(true)),
        "the revoked holder's release claimed the lock"
    );
    // The holder's client goes on with a new session.
    let again = holder
        .lock(plain_name(&ctx, "after"))
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    again.release().await?;
    next.release().await?;
    Ok(())
}

/// On etcd a reader queues behind every older writer, so the write holder's owner cannot also
/// take the read side: refused with a typed error, not a wait for itself.
async fn writer_cannot_also_read(ctx: Ctx) -> Outcome {
    let rw = ctx.client.rw_lock(ctx.unique_name("rw"));
    let owner = OwnerToken::random();
    let writer = rw.write().owner(owner.clone()).acquire().await?;
    let read = rw.read().owner(owner).try_acquire().await;
    check!(
        matches!(&read, Err(e) if e.kind() == ErrorKind::InvalidInput),
        "the writer's own read answered {:?}",
        read.map(|g| g.map(|g| g.fencing_token()))
    );
    check!(writer.release().await?, "the writer lost its lock");
    Ok(())
}

/// A client that takes a lock again and again puts the same key each time (a contender number
/// is named again once this client deleted its key), as etcd's own mutex keeps one key per
/// session: not a new key per take, each left deleted in the lock's range for every later read
/// of it to walk until etcd compacts. A second owner queueing meanwhile gets a key of its own and
/// the lock in its turn.
async fn a_lock_taken_again_puts_the_same_key(ctx: Ctx) -> Outcome {
    let name = plain_name(&ctx, "again");
    // A client of its own: the suite's is shared with cases running beside this one, whose
    // releases free numbers too.
    let client = ctx.connect().await?;
    let lock = client.lock(&name);
    let live_keys = || async {
        let out = etcdctl(
            &ctx,
            &["get", "--prefix", "--keys-only", &format!("{name}/")],
        )
        .output()
        .await?;
        check!(out.status.success(), "etcdctl get failed: {out:?}");
        Ok::<Vec<String>, Failure>(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
        )
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut last = 0;
    for _ in 0..5 {
        let guard = lock.acquire().await?;
        let whose = "the token after the last one";
        check_above(whose, guard.fencing_token().get(), last)?;
        last = guard.fencing_token().get();
        seen.extend(live_keys().await?);
        check!(
            guard.release().await?,
            "the lock was lost before its release"
        );
    }
    check!(seen.len() == 1, "5 takes in a row put {seen:?}");
    // Held again, with another owner of the same client queueing behind.
    let held = lock.acquire().await?;
    let other = client.lock(&name).owner(OwnerToken::random());
    let waiting = tokio::spawn(async move {
        let guard = other.acquire_timeout(Duration::from_secs(10)).await?;
        let token = guard.fencing_token();
        guard.release().await?;
        Ok::<_, distlock::Error>(token)
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while live_keys().await?.len() < 2 {
        check!(
            tokio::time::Instant::now() < deadline,
            "the second owner never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.extend(live_keys().await?);
    check!(seen.len() == 2, "two contenders at once put {seen:?}");
    let held_token = held.fencing_token();
    check!(
        held.release().await?,
        "the lock was lost before its release"
    );
    let next = waiting.await.map_err(|e| Failure(e.to_string()))??;
    check!(
        next > held_token,
        "the waiter's token {next} after the holder's {held_token}"
    );
    client.shutdown().await;
    Ok(())
}

/// Connects to `url`, again for up to 15 s while it fails with a connection error (a private
/// etcd electing itself).
async fn connect_soon(url: &str) -> Result<distlock::Client, distlock::Error> {
    let until = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        match distlock::connect(url).await {
            Err(e) if e.kind() == ErrorKind::Connection && tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// etcd with authentication on (a private one): the right user and password take and release
/// a lock; a wrong password is refused at connect without showing it; no credentials, no lock.
async fn user_and_password(_ctx: Ctx) -> Outcome {
    let cluster = tokio::task::block_in_place(|| start_etcd_cluster(1))?;
    tokio::task::block_in_place(|| {
        cluster.etcdctl(&["user", "add", "root:r00t-Pw"])?;
        cluster.etcdctl(&["auth", "enable"])
    })?;
    let plain = cluster.member_url(0, 3);
    let with = |userinfo: &str| plain.replacen("etcd://", &format!("etcd://{userinfo}@"), 1);
    let client = connect_soon(&with("root:r00t-Pw")).await?;
    let guard = client
        .lock("authenticated")
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    check!(
        guard.release().await?,
        "the authenticated holder lost its lock"
    );
    let wrong = distlock::connect(&with("root:hunter2")).await;
    match wrong {
        Ok(_) => return Err(Failure("a wrong password was accepted".into())),
        Err(e) => {
            let shown = format!("{e} {}", distlock::error::chain(&e));
            check!(!shown.contains("hunter2"), "the password shows: {shown}");
            check!(
                shown.contains("etcd"),
                "the error does not name etcd: {shown}"
            );
        }
    }
    let anonymous = token_through(&plain, "authenticated", Duration::from_secs(5)).await;
    check!(
        anonymous.is_err(),
        "a client without credentials took a lock: {anonymous:?}"
    );
    Ok(())
}

/// The token of lock `name` taken (waiting at most `within`) by a new client of `url`, or why
/// the client could not connect or take it.
async fn token_through(
    url: &str,
    name: &str,
    within: Duration,
) -> distlock::Result<distlock::FencingToken> {
    let client = distlock::connect(url).await?;
    let guard = client.lock(name).acquire_timeout(within).await?;
    Ok(guard.fencing_token())
}

/// `etcds://` against an etcd that serves TLS only and wants client certificates: with the CA
/// and a client certificate a lock works; without the certificate, or without the CA (the
/// server's certificate is then unknown), nothing does.
async fn tls_with_a_client_certificate(_ctx: Ctx) -> Outcome {
    let dir = tempfile::tempdir()?;
    let certs = distlock_testkit::certs::make(dir.path())?;
    let server = tokio::task::block_in_place(|| start_etcd_tls(&certs))?;
    let base = format!("etcds://localhost:{}", server.port);
    let full = format!(
        "{base}?cacert={}&cert={}&key={}",
        certs.ca.display(),
        certs.client_cert.display(),
        certs.client_key.display()
    );
    let client = connect_soon(&full).await?;
    let guard = client
        .lock("over-tls")
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    check!(guard.fencing_token().get() > 0, "no fencing token over TLS");
    check!(guard.release().await?, "the TLS holder lost its lock");
    let no_cert = format!("{base}?cacert={}", certs.ca.display());
    for (what, url) in [
        ("without a client certificate", no_cert),
        ("without the CA", base),
    ] {
        let attempt = token_through(&url, "over-tls", Duration::from_secs(3)).await;
        check!(attempt.is_err(), "a client {what} took a lock: {attempt:?}");
    }
    Ok(())
}

//! The conformance suite against five Redis masters (DISTLOCK_REDLOCK_URL, default
//! redlock://127.0.0.1:6390,…,6394, as scripts/services.sh redlock starts them), with five
//! private masters (no persistence) for the restart cases; then Redlock's own fault cases, each
//! on private masters of its own: masters killed and restored, a master whose replies arrive
//! late (a delaying proxy in front of it), and a master restarted without persistence inside a
//! lease.

use std::time::Duration;

use distlock::backend::Hold;
use distlock::{Attempt, ErrorKind, OwnerToken};
use distlock_testkit::faults::FaultProxy;
use distlock_testkit::fenced::FencedFile;
use distlock_testkit::servers::{
    Persistence, PrivateStore, redlock_url, start_redis, start_redlock,
};
use distlock_testkit::{Ctx, Failure, Outcome, Suite, check, mutex_request};

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_REDLOCK_URL").unwrap_or_else(|_| redlock_url(6390..=6394));
    Suite::new("redlock", "Redis masters (Redlock)", url)
        .private_store(|| start_redlock(5, Persistence::None))
        .case(
            "redlock::two_of_five_masters_down_works_three_is_no_quorum",
            quorum_of_masters,
        )
        .case(
            "redlock::late_master_shortens_the_validity",
            late_master_shortens_validity,
        )
        .case(
            "redlock::master_restarted_empty_inside_a_lease_is_caught_by_the_fence",
            restart_without_persistence,
        )
        .case(
            "redlock::tokens_increase_across_majorities_whose_counters_disagree",
            counters_disagree,
        )
        .case(
            "redlock::a_failed_take_frees_its_shares_on_masters_that_never_ran_a_release",
            undo_on_new_masters,
        )
        .case("redlock::bad_urls_are_typed", bad_urls)
        .run()
}

/// Options that give a dead master little of the lease.
fn quick() -> distlock::Options {
    distlock::Options::default()
        .connect_timeout(Duration::from_millis(200))
        .response_timeout(Duration::from_millis(200))
}

async fn quorum_of_masters(ctx: Ctx) -> Outcome {
    let mut store = tokio::task::block_in_place(|| start_redlock(5, Persistence::None))?;
    let client = distlock::connect_with(&store.url(), &quick()).await?;
    let name = ctx.unique_name("quorum");
    let lock = client.lock(&name).lease(Duration::from_millis(900));
    let first = lock.acquire_timeout(Duration::from_secs(5)).await?;
    let first_token = first.fencing_token();

    // Two masters down: the holder keeps its lock past its lease (renewed on the other three)…
    tokio::task::block_in_place(|| {
        store.masters[0].kill()?;
        store.masters[1].kill()
    })?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    check!(
        !first.is_lost(),
        "the holder lost its lock with 3 of 5 masters up"
    );
    check!(
        first.release().await?,
        "release with 3 of 5 masters up failed"
    );
    // …and a new holder takes it.
    let second = lock.acquire_timeout(Duration::from_secs(5)).await?;
    check!(
        second.fencing_token() > first_token,
        "token {} after {first_token}",
        second.fencing_token()
    );

    // Three down: no lock, ever, and an error that says why; the holder is told.
    tokio::task::block_in_place(|| store.masters[2].kill())?;
    for attempt in [
        lock.try_acquire().await.map(|g| g.is_some()),
        lock.acquire_timeout(Duration::from_secs(5))
            .await
            .map(|_| true),
    ] {
        match attempt {
            Err(e) if e.kind() == ErrorKind::NoQuorum => {
                let text = e.to_string();
                check!(
                    text.contains("2 of 5 masters answered"),
                    "the error does not say how many answered: {text}"
                );
                check!(e.is_retryable(), "no quorum is not retryable");
            }
            other => return Err(Failure(format!("with 2 of 5 masters up: {other:?}"))),
        }
    }
    let lost = tokio::time::timeout(Duration::from_secs(3), second.lost()).await;
    check!(
        lost.is_ok(),
        "the holder was not told within its lease that no majority renews it"
    );

    // Masters back (empty): the lock works again, tokens still above.
    tokio::task::block_in_place(|| (0..3).try_for_each(|i| store.masters[i].start_again()))?;
    let third = take_once_possible(&lock, "the masters came back").await?;
    check!(
        third.fencing_token() > second.fencing_token(),
        "token {} after {}",
        third.fencing_token(),
        second.fencing_token()
    );
    check!(third.release().await?, "release after the restore failed");
    Ok(())
}

/// Tries `lock` until it is taken (no quorum and "held" are expected for a while); fails
/// after 10 s naming `after`.
async fn take_once_possible(
    lock: &distlock::Lock,
    after: &str,
) -> Result<distlock::Guard, Failure> {
    let started = std::time::Instant::now();
    loop {
        match lock.try_acquire().await {
            Ok(Some(g)) => return Ok(g),
            Ok(None) => {}
            Err(e) if e.kind() == ErrorKind::NoQuorum => {}
            Err(e) => return Err(e.into()),
        }
        check!(
            started.elapsed() < Duration::from_secs(10),
            "no lock within 10 s after {after}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Masters behind proxies that hold their replies back. One late master of five is not waited
/// for: a majority answered promptly, so the take is prompt and its validity whole. Three late
/// of five: the majority needs a late grant, so the validity reported is shorter by at least
/// the delay; a delay past the lease makes the acquisition fail (and leaves nothing held).
async fn late_master_shortens_validity(ctx: Ctx) -> Outcome {
    let masters = tokio::task::block_in_place(|| start_redlock(2, Persistence::None))?;
    let mut slow = Vec::new();
    let mut proxies = Vec::new();
    for _ in 0..3 {
        let server = tokio::task::block_in_place(|| start_redis(Persistence::None))?;
        proxies.push(FaultProxy::start(server.port()).await?);
        slow.push(server);
    }
    let mut ports: Vec<u16> = masters.masters.iter().map(|m| m.port()).collect();
    ports.extend(proxies.iter().map(|p| p.port()));
    let url = redlock_url(ports);
    let options = distlock::Options::default().response_timeout(Duration::from_secs(5));
    let client = distlock::connect_with(&url, &options).await?;
    let backend = client.backend();
    let lease = Duration::from_millis(2000);
    let drift = lease / 100 + Duration::from_millis(2);
    let delay = Duration::from_millis(700);
    let set_delay = |late: usize, delay: Duration| {
        for (i, proxy) in proxies.iter().enumerate() {
            proxy.set_delay(if i < late { delay } else { Duration::ZERO });
        }
    };

    // One name for every take: the first (no delay) brings the masters' counters for it into
    // line, so the later ones are one round (a name's first take may need a second round to
    // raise the counters, which a late master would make later still).
    let name = ctx.unique_name("late");
    let take = |late: usize| {
        let (backend, name) = (backend.clone(), name.clone());
        set_delay(late, delay);
        async move {
            let req = mutex_request(&name, lease)?;
            let sent = std::time::Instant::now();
            let answer = backend.try_take(&req).await?;
            let took = sent.elapsed();
            let Attempt::Acquired {
                hold: Hold::Lease { valid_for },
                ..
            } = answer
            else {
                return Err(Failure(format!(
                    "{late} late masters of 5 made it {answer:?}"
                )));
            };
            check!(
                backend.release(&req, None).await?,
                "the holding was not released"
            );
            Ok::<_, Failure>((took, valid_for))
        }
    };
    let (_, prompt_validity) = take(0).await?;
    check!(
        prompt_validity <= lease - drift && prompt_validity > lease / 2,
        "validity {prompt_validity:?} without delay (lease {lease:?})"
    );
    let (took, valid_for) = take(1).await?;
    check!(
        took < delay,
        "one late master of five held the take up for {took:?}"
    );
    check!(
        valid_for > lease - delay,
        "validity {valid_for:?} with one master of five {delay:?} late: the majority was prompt"
    );
    let (took, valid_for) = take(3).await?;
    check!(took >= delay, "the late majority's answer came in {took:?}");
    check!(
        valid_for <= lease - delay - drift,
        "validity {valid_for:?} with three masters of five {delay:?} late (lease {lease:?}): \
         not shortened"
    );
    check!(
        valid_for + took <= lease,
        "validity {valid_for:?} after {took:?}: more than the lease left"
    );

    // Later than the lease: the grants are worthless, so there is none, and nothing stays held.
    set_delay(3, lease + Duration::from_millis(300));
    let too_late = mutex_request(&ctx.unique_name("too-late"), lease)?;
    let answer = backend.try_take(&too_late).await;
    check!(
        matches!(&answer, Err(e) if e.kind() == ErrorKind::NoQuorum),
        "three masters of five later than the lease gave {answer:?}"
    );
    set_delay(0, Duration::ZERO);
    let other = distlock::connect_with(&url, &options).await?;
    let taken = other.lock(too_late.name.as_str()).try_acquire().await?;
    check!(
        taken.is_some(),
        "the failed acquisition left its shares held"
    );

    // Later than the response timeout but well inside the lease: the late masters ran the take
    // (only their replies are held back), and the failed take gives their shares back at once
    // rather than leaving them held for the rest of the lease.
    let impatient = distlock::connect_with(
        &url,
        &distlock::Options::default()
            .response_timeout(Duration::from_millis(600))
            .retry_for(Duration::ZERO),
    )
    .await?;
    set_delay(3, Duration::from_millis(900));
    let given_up = mutex_request(&ctx.unique_name("given-up"), lease)?;
    let sent = std::time::Instant::now();
    let answer = impatient.backend().try_take(&given_up).await;
    check!(
        matches!(&answer, Err(e) if e.kind() == ErrorKind::NoQuorum),
        "three masters of five later than the response timeout gave {answer:?}"
    );
    set_delay(0, Duration::ZERO);
    // The undo leaves this client a moment before the other's take, but through another proxy
    // connection, so it may reach a master just after it: the other waits a little (its release
    // notice wakes it), far less than the rest of the lease a kept share would hold it up.
    let taken = other
        .lock(given_up.name.as_str())
        .acquire_timeout(lease / 5)
        .await;
    let after = sent.elapsed();
    check!(
        taken.is_ok() && after < lease,
        "the late masters kept the failed take's shares: {taken:?} {after:?} after the take was \
         sent (lease {lease:?})"
    );
    drop(slow);
    Ok(())
}

/// Redlock's known hole, made to happen: a holder A with a majority of three (two masters
/// down), one of its three restarted without persistence inside A's lease, the two others back
/// empty: B wins a majority while A still believes it holds. Tokens still increase (a lost
/// counter starts again at the master's clock in µs), so the fenced resource takes B's write and
/// refuses A's late one.
async fn restart_without_persistence(ctx: Ctx) -> Outcome {
    let mut store = tokio::task::block_in_place(|| start_redlock(5, Persistence::None))?;
    let url = store.url();
    let a_client = distlock::connect_with(&url, &quick()).await?;
    let b_client = distlock::connect_with(&url, &quick()).await?;
    let name = ctx.unique_name("restarted");
    tokio::task::block_in_place(|| {
        store.masters[3].kill()?;
        store.masters[4].kill()
    })?;
    let a = a_client
        .lock(&name)
        .lease(Duration::from_secs(20))
        .no_watchdog()
        .acquire_timeout(Duration::from_secs(5))
        .await?;
    // Master 2 crashes and comes back empty; so do 3 and 4.
    tokio::task::block_in_place(|| {
        store.masters[2].kill()?;
        (2..5).try_for_each(|i| store.masters[i].start_again())
    })?;
    let b = take_once_possible(
        &b_client.lock(&name),
        "the three empty masters came back (no overlap to show)",
    )
    .await?;
    check!(
        !a.is_lost(),
        "A knows it lost the lock: the overlap did not happen"
    );
    check!(
        b.fencing_token() > a.fencing_token(),
        "tokens went back: B {} after A {}",
        b.fencing_token(),
        a.fencing_token()
    );
    let resource = FencedFile::new(
        ctx.dir
            .path()
            .join(format!("restarted-{}", &OwnerToken::random().as_str()[..8])),
    );
    check!(
        resource.write(b.fencing_token().get())?,
        "B's write was refused"
    );
    check!(
        !resource.write(a.fencing_token().get())?,
        "A's stale write (token {} after B's {}) was accepted",
        a.fencing_token(),
        b.fencing_token()
    );
    b.release().await?;
    a.leak();
    Ok(())
}

/// Sets a master's fencing counter of lock `name` (`counter`), makes another owner hold its
/// share (`block`), makes the master answer takes with an error (`break`: the lock key is a hash,
/// not the string a holding is), or clears the lock key (`clear`), through a plain connection.
async fn on_master(port: u16, name: &str, what: &str, value: u64) -> Outcome {
    let url = format!("redis://127.0.0.1:{port}");
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let lock = format!("distlock:lock:{{{name}}}");
    let mut cmd = redis::cmd("EVAL");
    let script = match what {
        "counter" => "redis.call('SET', KEYS[1] .. ':fence', ARGV[1])",
        "block" => "redis.call('SET', KEYS[1], 'another-owner:' .. ARGV[1], 'PX', 60000)",
        "break" => "redis.call('HSET', KEYS[1], 'not', 'a-string')",
        _ => "redis.call('DEL', KEYS[1])",
    };
    cmd.arg(script).arg(1).arg(lock).arg(value);
    let () = cmd.query_async(&mut conn).await?;
    Ok(())
}

/// Per-master counters are independent, so "the largest token of this majority" alone could go
/// back: here A's majority {0, 1, 2} draws 101, 101, 5001 (masters 3 and 4 answer with errors)
/// and B's later majority {0, 1, 3, 4} would draw at most 102. The take raises the counters of
/// A's winners to A's token before it returns, so B, sharing masters 0 and 1 with it, draws more.
async fn counters_disagree(ctx: Ctx) -> Outcome {
    let store = tokio::task::block_in_place(|| start_redlock(5, Persistence::None))?;
    let ports: Vec<u16> = store.masters.iter().map(|m| m.port()).collect();
    let client = distlock::connect_with(&store.url(), &quick()).await?;
    let name = ctx.unique_name("counters");
    for (i, &port) in ports.iter().enumerate() {
        on_master(port, &name, "counter", if i == 2 { 5000 } else { 100 }).await?;
    }
    for &port in &ports[3..] {
        on_master(port, &name, "break", 0).await?;
    }
    let a = client.lock(&name).try_acquire().await?;
    let Some(a) = a else {
        return Err(Failure("A did not win masters 0, 1, 2".into()));
    };
    let a_token = a.fencing_token();
    check!(a_token.get() == 5001, "A's token {a_token}, not 5001");
    check!(a.release().await?, "A's release failed");
    for &port in &ports[3..] {
        on_master(port, &name, "clear", 0).await?;
    }
    on_master(ports[2], &name, "block", 1).await?;
    let Some(b) = client.lock(&name).try_acquire().await? else {
        return Err(Failure("B did not win masters 0, 1, 3, 4".into()));
    };
    check!(
        b.fencing_token() > a_token,
        "B's token {} is not above A's {a_token}",
        b.fencing_token()
    );
    check!(b.release().await?, "B's release failed");
    Ok(())
}

/// Whether master `port` has a holding of lock `name`, through a plain connection.
async fn held_on(port: u16, name: &str) -> Result<bool, Failure> {
    let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
        .get_multiplexed_async_connection()
        .await?;
    let held: bool = redis::cmd("EXISTS")
        .arg(format!("distlock:lock:{{{name}}}"))
        .query_async(&mut conn)
        .await?;
    Ok(held)
}

/// A failed take's undo is queued without waiting for its answer, so it cannot be loaded and
/// sent again after a `NOSCRIPT`: on masters that never ran the release script (new, or
/// restarted) it must still free the shares, or the failed taker's next take renews them there
/// (a take confirms its owner's own share) and, with every contender in that state, nobody wins.
/// Torture's clock-jump run, which starts on new masters with four contenders, saw whole phases
/// without one acquisition that way.
async fn undo_on_new_masters(ctx: Ctx) -> Outcome {
    let store = tokio::task::block_in_place(|| start_redlock(5, Persistence::None))?;
    let ports: Vec<u16> = store.masters.iter().map(|m| m.port()).collect();
    let name = ctx.unique_name("undo");
    for &port in &ports[2..] {
        on_master(port, &name, "block", 1).await?;
    }
    let client = distlock::connect_with(&store.url(), &quick()).await?;
    let lease = Duration::from_secs(20);
    let taken = client.lock(&name).lease(lease).try_acquire().await?;
    check!(taken.is_none(), "won against three foreign holdings");
    // The undo is not awaited by the take: give it a moment to land.
    let give_up = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let mut kept = Vec::new();
        for &port in &ports[..2] {
            if held_on(port, &name).await? {
                kept.push(port);
            }
        }
        if kept.is_empty() {
            break;
        }
        check!(
            std::time::Instant::now() < give_up,
            "the failed take's shares are still held on masters {kept:?} 2 s after it \
             (lease {lease:?})"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn bad_urls(_ctx: Ctx) -> Outcome {
    for url in [
        "redlock://u:s3cret@127.0.0.1:1,127.0.0.1:2",
        "redlock://u:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4",
        "redlock://u:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?response_timeout=0ms",
        "redlock://u:s3cret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?connect_timeout=later",
    ] {
        let err = distlock::connect(url).await.unwrap_err();
        check!(err.kind() == ErrorKind::InvalidUrl, "{url}: {err:?}");
        check!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
    }
    let err = distlock::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4")
        .await
        .unwrap_err();
    check!(
        err.to_string().contains("use 3, 5 or 7"),
        "the error does not say why: {err}"
    );
    // Nothing listens there: a typed error naming the count, not a hang or a panic.
    let err = distlock::connect_with("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", &quick())
        .await
        .unwrap_err();
    check!(
        err.kind() == ErrorKind::NoQuorum && err.to_string().contains("0 of 3"),
        "{err}"
    );
    Ok(())
}

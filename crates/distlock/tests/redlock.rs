//! The conformance suite against five Redis masters (DISTLOCK_REDLOCK_URL, default
//! redlock://127.0.0.1:6390,…,6394, as scripts/services.sh redlock starts them), with five
//! private masters (no persistence) for the restart cases; then Redlock's own fault cases, each
//! on private masters of its own: masters killed and restored, a master whose replies arrive
//! late (a delaying proxy in front of it), and a master restarted without persistence inside a
//! lease.

use std::time::Duration;

use distlock::backend::Hold;
use distlock::{Attempt, ErrorKind, OwnerToken};
use distlock_testkit::faults::{Fault, FaultProxy};
use distlock_testkit::fenced::FencedFile;
use distlock_testkit::servers::{
    Persistence, PrivateServer, PrivateStore, RedlockMasters, redlock_url, start_redis,
    start_redis_with_args, start_redlock,
};
use distlock_testkit::{
    Ctx, Failure, Outcome, Suite, check, check_above, check_kind, mutex_request, within,
};

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_REDLOCK_URL").unwrap_or_else(|_| redlock_url(6390..=6394));
    Suite::new("redlock", "Redis masters (Redlock)", url)
        .private_store(|| start_redlock(5, Persistence::None))
        .case(
            "redlock::typed_configuration_alone",
            typed_configuration_alone,
        )
        .case(
            "redlock::two_of_five_masters_down_works_three_is_no_quorum",
            quorum_of_masters,
        )
        .case(
            "redlock::grants_from_late_masters_count_from_the_send_and_past_the_lease_are_none",
            late_masters_grants,
        )
        .case(
            "redlock::late_answers_leave_the_guard_until_send_plus_lease_minus_drift",
            late_answers_cost_the_guard_nothing,
        )
        .case(
            "redlock::a_take_answered_after_its_validity_is_an_error_not_a_lost_guard",
            take_answered_after_its_validity,
        )
        .case(
            "redlock::a_renewal_answered_late_holds_until_its_send_plus_lease_minus_drift",
            late_renewal,
        )
        .case(
            "redlock::a_take_retried_after_no_quorum_is_valid_from_the_round_that_won",
            retried_take,
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
        .case(
            "redlock::an_evicting_master_is_named_in_a_warning",
            evicting_master_is_warned,
        )
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
    let whose = "the second holder's token";
    check_above(whose, second.fencing_token(), first_token)?;

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
    let told = "the holder told that no majority renews it (within its lease)";
    within(Duration::from_secs(3), second.lost(), told).await?;

    // Masters back (empty): the lock works again, tokens still above.
    tokio::task::block_in_place(|| (0..3).try_for_each(|i| store.masters[i].start_again()))?;
    let third = take_once_possible(&lock, "the masters came back").await?;
    let whose = "the third holder's token";
    check_above(whose, third.fencing_token(), second.fencing_token())?;
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
/// for: a majority answered promptly, so the take is prompt. Three late of five: the majority
/// needs a late grant, so the take takes the delay. Either way the grant is lease − drift
/// counted from the send (the core counts the time the answers took, once); a delay past the
/// lease makes the acquisition fail (and leaves nothing held).
async fn late_masters_grants(ctx: Ctx) -> Outcome {
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
    // The grant is counted from the send (the core counts the time the answers took): lease −
    // drift, or more by as much as rounds retried before the one that won started later.
    let counted_from_the_send = |late: usize, took: Duration, valid_for: Duration| {
        check!(
            valid_for >= lease - drift && valid_for <= lease - drift + took,
            "validity {valid_for:?} counted from the send, with {late} of 5 masters {delay:?} \
             late, answered after {took:?} (lease {lease:?}, drift {drift:?})"
        );
        Ok::<_, Failure>(())
    };
    let (took, valid_for) = take(0).await?;
    counted_from_the_send(0, took, valid_for)?;
    let (took, valid_for) = take(1).await?;
    check!(
        took < delay,
        "one late master of five held the take up for {took:?}"
    );
    counted_from_the_send(1, took, valid_for)?;
    let (took, valid_for) = take(3).await?;
    check!(took >= delay, "the late majority's answer came in {took:?}");
    // What is left of it once the answers are in: lease − elapsed − drift.
    counted_from_the_send(3, took, valid_for)?;

    // Later than the lease: the grants are worthless, so there is none, and nothing stays held.
    set_delay(3, lease + Duration::from_millis(300));
    let too_late = mutex_request(&ctx.unique_name("too-late"), lease)?;
    let answer = backend.try_take(&too_late).await;
    check_kind(
        &answer,
        ErrorKind::NoQuorum,
        "three masters of five later than the lease",
    )?;
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
    check_kind(
        &answer,
        ErrorKind::NoQuorum,
        "three masters of five later than the response timeout",
    )?;
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

/// Two prompt masters and three behind proxies that can hold their replies back (the requests
/// pass at once, so a late master writes its share as early as a prompt one).
struct LateMasters {
    prompt: RedlockMasters,
    slow: Vec<PrivateServer>,
    proxies: Vec<FaultProxy>,
}

impl LateMasters {
    async fn start() -> Result<Self, Failure> {
        let prompt = tokio::task::block_in_place(|| start_redlock(2, Persistence::None))?;
        let (mut slow, mut proxies) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let server = tokio::task::block_in_place(|| start_redis(Persistence::None))?;
            proxies.push(FaultProxy::start(server.port()).await?);
            slow.push(server);
        }
        Ok(LateMasters {
            prompt,
            slow,
            proxies,
        })
    }

    /// `n` masters (3 or 5): the prompt ones first (1 of 3, 2 of 5), then proxied ones; each
    /// master as (the port the client uses, the server's own port).
    fn masters(&self, n: usize) -> Vec<(u16, u16)> {
        let prompt = self.prompt.masters.iter().map(|m| (m.port(), m.port()));
        let slow = self
            .proxies
            .iter()
            .zip(&self.slow)
            .map(|(p, s)| (p.port(), s.port()));
        prompt.take(n / 2).chain(slow).take(n).collect()
    }

    /// The first `late` proxies hold each reply for `delay`; the others pass at once.
    fn set_delay(&self, late: usize, delay: Duration) {
        for (i, proxy) in self.proxies.iter().enumerate() {
            proxy.set_delay(if i < late { delay } else { Duration::ZERO });
        }
    }
}

/// Redlock's validity is `lease − elapsed − drift` at the moment the answers are in, i.e. the
/// holding is good until `send + lease − drift` (every share was written no earlier than the
/// send). The grant counts the elapsed time once: masters whose answers come 100–400 ms late
/// (a late majority: 2 of 3, 3 of 5; a late minority: 1 of 3, 2 of 5; one round, or two when
/// the counters disagree and the late masters must be raised) leave the guard valid until
/// `send + lease − drift`, never less (its validity counted twice) and never more (past the
/// shares). Measured with no watchdog: the guard's `lost()` fires at the end it was given.
async fn late_answers_cost_the_guard_nothing(ctx: Ctx) -> Outcome {
    let late_masters = LateMasters::start().await?;
    // No retries: one round (or two, with the raise) per take, so the send is the take's.
    let options = distlock::Options::default()
        .response_timeout(Duration::from_secs(5))
        .retry_for(Duration::ZERO);
    let three = late_masters.masters(3);
    let five = late_masters.masters(5);
    let urls = [three.clone(), five.clone()].map(|m| redlock_url(m.iter().map(|(p, _)| *p)));
    let clients = [
        distlock::connect_with(&urls[0], &options).await?,
        distlock::connect_with(&urls[1], &options).await?,
    ];
    for (client, masters) in clients.iter().zip([&three, &five]) {
        warm_up(client, masters, &ctx.unique_name("warm-up")).await?;
    }
    let lease = Duration::from_millis(1000);
    let drift = lease / 100 + Duration::from_millis(2);
    // Past the end the guard was given, by more than a loaded machine's scheduling: a holding
    // counted from the answer (not the send) would still be live here.
    let slack = Duration::from_millis(60);

    struct Taken {
        what: String,
        sent: std::time::Instant,
        answered: Duration,
        guard: distlock::Guard,
        ended: tokio::task::JoinHandle<std::time::Instant>,
    }
    let (mut taken, mut failures) = (Vec::new(), Vec::new());
    for delay in [100, 250, 400].map(Duration::from_millis) {
        // (client, masters, late, counters disagree: a second round to the late masters)
        for (c, masters, late, raise) in [
            (0, &three, 1, false),
            (0, &three, 2, false),
            (0, &three, 2, true),
            (1, &five, 2, false),
            (1, &five, 3, false),
            (1, &five, 3, true),
        ] {
            let what = format!(
                "{late} of {} masters {delay:?} late{}",
                masters.len(),
                if raise { ", two rounds" } else { "" }
            );
            let name = ctx.unique_name("late-answers");
            if raise {
                counters_ahead_on_the_prompt(masters, &name).await?;
            } else {
                for (_, server) in masters.iter() {
                    on_master(*server, &name, "counter", 100).await?;
                }
            }
            late_masters.set_delay(late, delay);
            let lock = clients[c].lock(&name).lease(lease).no_watchdog();
            let sent = std::time::Instant::now();
            let guard = lock.try_acquire().await;
            let answered = sent.elapsed();
            // Replies the take gave up on (a late minority's) go through now, not ahead of the
            // next take's: the proxy holds each chunk in turn.
            late_masters.set_delay(0, Duration::ZERO);
            let guard = match guard {
                Ok(Some(guard)) => guard,
                other => {
                    return Err(Failure(format!(
                        "{what}: the take gave {:?} after {answered:?}",
                        other.map(|g| g.map(|g| g.fencing_token()))
                    )));
                }
            };
            if guard.is_lost() {
                failures.push(format!(
                    "{what}: the take returned a guard already lost, after {answered:?} (lease \
                     {lease:?})"
                ));
            }
            let lost = guard.lost();
            let ended = tokio::spawn(async move {
                lost.await;
                std::time::Instant::now()
            });
            taken.push(Taken {
                what,
                sent,
                answered,
                guard,
                ended,
            });
        }
    }
    for t in taken {
        tokio::time::sleep_until((t.sent + lease - drift + slack).into()).await;
        let lost_by_then = t.guard.is_lost();
        let ended = t.ended.await.map_err(|e| Failure(e.to_string()))?;
        let ended_after = ended - t.sent;
        eprintln!(
            "{}: answered after {:?}, the guard ended {:?} after the send (send + lease − \
             drift: {:?})",
            t.what,
            t.answered,
            ended_after,
            lease - drift
        );
        if ended_after < lease - drift {
            failures.push(format!(
                "{}: the guard ended {ended_after:?} after the send, before send + lease − \
                 drift = {:?} (answered after {:?})",
                t.what,
                lease - drift,
                t.answered
            ));
        }
        if !lost_by_then {
            failures.push(format!(
                "{}: the guard was still live {:?} after the send, past send + lease − drift",
                t.what,
                lease - drift + slack
            ));
        }
    }
    check!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// Makes `client`'s connections to `masters` (as [`LateMasters::masters`] lists them) load the
/// take, raise and renewal scripts, before any delay: a script a master does not have yet costs
/// a round trip more (`NOSCRIPT`, then the script's text), which a late master makes late.
async fn warm_up(client: &distlock::Client, masters: &[(u16, u16)], name: &str) -> Outcome {
    counters_ahead_on_the_prompt(masters, name).await?;
    let guard = client.lock(name).try_acquire().await?;
    let Some(guard) = guard else {
        return Err(Failure(format!("warming up, {name} was held")));
    };
    let again = guard.reenter().await?;
    drop(again);
    check!(guard.release().await?, "warming up, the release failed");
    Ok(())
}

/// A renewal is counted once too: answered late by a majority, it still confirms the holding
/// until its send + lease − drift. Seen through re-entry (which renews the holding and takes
/// the store's answer as the watchdog does) on a guard with no watchdog, so nothing else moves
/// its end.
async fn late_renewal(ctx: Ctx) -> Outcome {
    let late_masters = LateMasters::start().await?;
    let masters = late_masters.masters(3);
    let url = redlock_url(masters.iter().map(|(p, _)| *p));
    let options = distlock::Options::default().response_timeout(Duration::from_secs(5));
    let client = distlock::connect_with(&url, &options).await?;
    warm_up(&client, &masters, &ctx.unique_name("warm-up")).await?;
    let lease = Duration::from_millis(1000);
    let drift = lease / 100 + Duration::from_millis(2);
    let delay = Duration::from_millis(300);
    let guard = client
        .lock(ctx.unique_name("late-renewal"))
        .lease(lease)
        .no_watchdog()
        .try_acquire()
        .await?;
    let Some(guard) = guard else {
        return Err(Failure("the lock was held".into()));
    };
    tokio::time::sleep(lease / 4).await;
    late_masters.set_delay(2, delay);
    let sent = std::time::Instant::now();
    let again = guard.reenter().await?;
    let answered = sent.elapsed();
    late_masters.set_delay(0, Duration::ZERO);
    check!(
        answered >= delay,
        "the renewal was answered after {answered:?}, not late"
    );
    let ended = {
        guard.lost().await;
        sent.elapsed()
    };
    eprintln!(
        "a renewal answered {answered:?} late by 2 of 3 masters: the holding ended {ended:?} \
         after its send (send + lease − drift: {:?})",
        lease - drift
    );
    check!(
        ended >= lease - drift,
        "the holding ended {ended:?} after the renewal's send, before send + lease − drift = \
         {:?} (answered after {answered:?})",
        lease - drift
    );
    drop(again);
    Ok(())
}

/// Sets lock `name`'s fencing counter on the prompt masters (the first half, as
/// [`LateMasters::masters`] lists them) ahead of the others (the late ones), so a take's
/// winners disagree and the late masters are raised in a second round.
async fn counters_ahead_on_the_prompt(masters: &[(u16, u16)], name: &str) -> Outcome {
    for (i, (_, server)) in masters.iter().enumerate() {
        let prompt = i < masters.len() / 2;
        on_master(*server, name, "counter", if prompt { 5000 } else { 100 }).await?;
    }
    Ok(())
}

/// A majority granted the take, but its answers (here the second round, raising the late
/// masters' counters) came after `lease − drift`: the grant is worthless by the time it is
/// known. The take is an error (`NoQuorum`: no majority answered in time), not a guard.
async fn take_answered_after_its_validity(ctx: Ctx) -> Outcome {
    let late_masters = LateMasters::start().await?;
    let masters = late_masters.masters(3);
    let url = redlock_url(masters.iter().map(|(p, _)| *p));
    let options = distlock::Options::default().response_timeout(Duration::from_secs(5));
    let once = distlock::connect_with(&url, &options.clone().retry_for(Duration::ZERO)).await?;
    warm_up(&once, &masters, &ctx.unique_name("warm-up")).await?;
    let lease = Duration::from_millis(1000);
    let drift = lease / 100 + Duration::from_millis(2);
    // Each round within the lease, the two together past it.
    let delay = Duration::from_millis(600);

    let name = ctx.unique_name("too-late");
    counters_ahead_on_the_prompt(&masters, &name).await?;
    late_masters.set_delay(2, delay);
    let sent = std::time::Instant::now();
    let answer = once
        .lock(&name)
        .lease(lease)
        .no_watchdog()
        .try_acquire()
        .await;
    let answered = sent.elapsed();
    match &answer {
        // The message says how late, against what the grant was valid for.
        Err(e) if e.kind() == ErrorKind::NoQuorum => check!(
            e.to_string().contains("answered only")
                && e.to_string().contains("after the send, past the")
                && e.to_string().contains("the grant is valid for"),
            "the error does not say the answers came too late: {e}"
        ),
        other => {
            return Err(Failure(format!(
                "a take answered after {answered:?} (lease {lease:?}, drift {drift:?}) gave {:?}",
                other
                    .as_ref()
                    .map(|g| g.as_ref().map(|g| (g.fencing_token(), g.is_lost())))
            )));
        }
    }

    Ok(())
}

/// A take retried after rounds that found no quorum (two of three masters unreachable for a
/// moment) is valid from the send of the round that won, not from the first round's: counted
/// from the first, the guard came back already lost.
async fn retried_take(ctx: Ctx) -> Outcome {
    let late_masters = LateMasters::start().await?;
    let masters = late_masters.masters(3);
    let url = redlock_url(masters.iter().map(|(p, _)| *p));
    let client = distlock::connect_with(&url, &quick()).await?;
    warm_up(&client, &masters, &ctx.unique_name("warm-up")).await?;
    let lease = Duration::from_millis(1000);
    let drift = lease / 100 + Duration::from_millis(2);
    let down_for = Duration::from_millis(300);
    for proxy in &late_masters.proxies[..2] {
        proxy.set(Fault::Reset);
    }
    let sent = std::time::Instant::now();
    let lock = client
        .lock(ctx.unique_name("retried"))
        .lease(lease)
        .no_watchdog();
    let taking = lock.acquire_timeout(Duration::from_secs(5));
    tokio::pin!(taking);
    // The masters come back while the take retries.
    let guard = tokio::select! {
        taken = &mut taking => taken,
        () = tokio::time::sleep(down_for) => {
            for proxy in &late_masters.proxies {
                proxy.set(Fault::Pass);
            }
            taking.await
        }
    };
    let answered = sent.elapsed();
    let guard = guard?;
    check!(
        answered > down_for,
        "the take won after {answered:?}, while two of three masters were unreachable"
    );
    check!(
        !guard.is_lost(),
        "the retried take returned a guard already lost, after {answered:?}"
    );
    let ended = {
        guard.lost().await;
        sent.elapsed()
    };
    eprintln!(
        "two of three masters unreachable for {down_for:?}: the retried take answered after \
         {answered:?}, its guard ended {ended:?} after the first send"
    );
    check!(
        ended >= down_for + lease - drift,
        "the retried guard ended {ended:?} after the first send, before the winning round's \
         send (after {down_for:?}) + lease − drift"
    );
    check!(
        ended <= answered + lease - drift + Duration::from_millis(200),
        "the retried guard ended {ended:?} after the first send, past the answer ({answered:?}) \
         + lease − drift"
    );
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
    let whose = "B's token after A's (tokens went back)";
    check_above(whose, b.fencing_token(), a.fencing_token())?;
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
    check_above("B's token, after A's", b.fencing_token(), a_token)?;
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
    // One server under several names is no majority of independent masters: refused before
    // anything is connected (6379 may have a server; 1 has none), naming the names.
    for (url, names) in [
        (
            "redlock://127.0.0.1:6379,127.0.0.1:6379,localhost:6379",
            "127.0.0.1:6379, 127.0.0.1:6379 and localhost:6379",
        ),
        (
            "redlock://u:s3cret@127.0.0.1:1,LOCALHOST:1,127.0.0.1:2",
            "127.0.0.1:1 and LOCALHOST:1",
        ),
        (
            "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3,127.0.0.1:4,127.0.0.1:3",
            "127.0.0.1:3 is listed twice",
        ),
    ] {
        let Err(err) = distlock::connect_with(url, &quick()).await else {
            return Err(Failure(format!("{url} was accepted")));
        };
        let text = format!("{err} {err:?}");
        check!(
            err.kind() == ErrorKind::InvalidUrl && text.contains(names),
            "{url}: {text}"
        );
        check!(!text.contains("s3cret"), "{text}");
    }
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

/// One of three private masters given `maxmemory` and an evicting policy: a client is warned of
/// that master, by its address, and of no other (each master is asked as one Redis server is).
/// The shared masters, run without `maxmemory`, give no warning.
async fn evicting_master_is_warned(ctx: Ctx) -> Outcome {
    let shared = ctx.client.warnings().await;
    check!(shared.is_empty(), "the shared masters warn: {shared:?}");
    let evicting = start_redis_with_args(
        Persistence::None,
        &["--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl"],
    )?;
    let others = start_redlock(2, Persistence::None)?;
    let ports = [
        evicting.port(),
        others.masters[0].port(),
        others.masters[1].port(),
    ];
    let client = distlock::connect(&redlock_url(ports)).await?;
    let warnings = client.warnings().await;
    println!("warnings: {warnings:?}");
    check!(
        warnings.len() == 1
            && warnings[0].contains(&format!("127.0.0.1:{}", ports[0]))
            && warnings[0].contains("volatile-ttl"),
        "masters {ports:?}, the first evicting: {warnings:?}"
    );
    Ok(())
}

/// A `RedlockConfig` built in code from the URL's masters, no URL: it takes a lock the URL's
/// client then finds held, and frees it for that client on release; one from JSON (another
/// prefix, so other keys) takes the same name while it is held. Four masters are refused, typed.
async fn typed_configuration_alone(ctx: Ctx) -> Outcome {
    use distlock::backends::redlock::{RedlockBackend, RedlockConfig};
    let masters = RedlockConfig::from_url(&ctx.url)?.masters;
    let options = distlock::Options::default();
    let config = RedlockConfig::new(masters.clone()).response_timeout(Duration::from_secs(1));
    let typed = distlock::Client::from_backend(std::sync::Arc::new(
        RedlockBackend::connect_config(config, &options).await?,
    ));
    let name = ctx.unique_name("typed-redlock");
    let held = typed.lock(&name).acquire().await?;
    distlock_testkit::check_taken(&ctx.client.lock(&name), "the URL's client took it").await?;
    #[cfg(feature = "serde")]
    {
        let json = serde_json::json!({ "masters": masters, "prefix": "json:",
                                       "connect_timeout": "1s" });
        let config: RedlockConfig = serde_json::from_value(json)?;
        let from_json = distlock::Client::from_backend(std::sync::Arc::new(
            RedlockBackend::connect_config(config, &options).await?,
        ));
        let other = from_json.lock(&name).try_acquire().await?;
        check!(other.is_some(), "the prefix did not keep the keys apart");
        if let Some(guard) = other {
            guard.release().await?;
        }
    }
    held.release().await?;
    let taken = ctx.client.lock(&name).try_acquire().await?;
    check!(taken.is_some(), "released by the typed client, yet held");
    if let Some(guard) = taken {
        guard.release().await?;
    }
    let err = RedlockBackend::connect_config(RedlockConfig::new(masters[..4].to_vec()), &options)
        .await
        .map(drop)
        .unwrap_err();
    check!(err.kind() == ErrorKind::InvalidInput, "{err:?}");
    check!(err.to_string().contains("4 masters"), "{err}");
    Ok(())
}

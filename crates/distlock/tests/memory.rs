//! The conformance suite against the in-memory backend (`memory://NAME`, so that the second
//! clients the cases connect share the store, as a second client of a server would), plus what
//! only it has to get right: stores apart or shared by name, leases on tokio's paused clock, and
//! in one process what the suite checks with child processes elsewhere.
//!
//! The in-memory backend is for applications' unit tests; every real store has its own suite
//! against a real server. Cases that need a second process, or a server to kill, do not apply:
//! a store in one process's memory has neither.

use std::time::Duration;

use distlock::LockKind;
use distlock_testkit::cases;
use distlock_testkit::{
    Ctx, Failure, Flavour, Outcome, Suite, check, check_above, check_kind, check_taken, joined,
    within,
};

/// Why the cases with child processes do not apply.
const ONE_PROCESS: &str = "one process's memory: a child process would have a store of its own \
     (memory::* cases check the same in one process)";

/// Why the cases that cut a step mid-flight do not apply.
const NO_FLIGHT: &str = "each step of a store in memory finishes at its first poll (no I/O, \
     nothing awaited under its mutex): there is no mid-flight to cut";

fn main() -> std::process::ExitCode {
    let mut suite = Suite::new("memory", "in-memory store", "memory://conformance".into())
        .flavours(Flavour::every());
    for case in [
        "exclusion_across_processes",
        "fencing_tokens_increase_across_processes",
        "crashed_holder_frees_within_lease",
        "dropped_guard_freed_before_exit",
        "current_thread_main_frees_before_exit",
        "short_lease_killed_holder_frees_within_it",
        "paused_holder_is_fenced",
        "resumed_holder_knows_at_once",
        "election_one_leader_across_processes",
        "election_crashed_leader_lapses",
        "latch_releases_waiters_across_processes",
        "latch_wait_timeout_is_typed",
        "status_shows_holder",
        "force_release_fences_holder",
    ] {
        suite = suite.not_applicable(case, ONE_PROCESS);
    }
    for case in [
        "cancelled_release_still_frees",
        "election_and_latch_writes_cut_leave_no_transaction_open",
    ] {
        suite = suite.not_applicable(case, NO_FLIGHT);
    }
    suite
        .case(
            "memory::readers_share_writers_exclude",
            cases::readers_share_writers_exclude,
        )
        .case(
            "memory::waiting_writer_holds_back_new_readers",
            cases::writer_preference,
        )
        .case(
            "memory::read_to_write_upgrade_is_refused",
            cases::upgrade_is_refused,
        )
        .case(
            "memory::semaphore_counts_permits",
            cases::semaphore_counts_permits,
        )
        .case(
            "memory::fair_lock_serves_in_arrival_order",
            cases::fair_serves_in_arrival_order,
        )
        .case("memory::stores_are_apart_unless_named", stores_apart)
        .case("memory::leases_end_on_tokios_paused_clock", |_ctx| {
            on_paused_clock(leases_on_paused_clock)
        })
        .case("memory::waiters_wake_on_tokios_paused_clock", |_ctx| {
            on_paused_clock(waiters_on_paused_clock)
        })
        .case(
            "memory::status_and_forced_release_between_clients",
            status_and_forced_release,
        )
        .case(
            "memory::election_and_latch_between_clients",
            election_and_latch,
        )
        .run()
}

/// `memory:` is a new store at each connect; `memory://NAME` is one store per name.
async fn stores_apart(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("apart");
    let (a, b) = (
        distlock::connect("memory:").await?,
        distlock::connect("memory:").await?,
    );
    let held_a = a.lock(&name).try_acquire().await?;
    let held_b = b.lock(&name).try_acquire().await?;
    check!(
        held_a.is_some() && held_b.is_some(),
        "two memory: stores share a lock"
    );
    check_taken(&a.lock(&name), "a store of its own let a second owner in").await?;
    let store: String = ctx
        .unique_name("store")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let named = distlock::connect(&format!("memory://{store}")).await?;
    let again = distlock::connect(&format!("memory://{store}")).await?;
    let other = distlock::connect(&format!("memory://{store}-other")).await?;
    let guard = named.lock(&name).acquire().await?;
    check_taken(
        &again.lock(&name),
        "a second client of the same named store took a held lock",
    )
    .await?;
    check!(
        other.lock(&name).try_acquire().await?.is_some(),
        "a store of another name shares the lock"
    );
    check!(guard.release().await?, "the holder lost its lock");
    let bad = distlock::connect("memory://a/b").await;
    check_kind(&bad, distlock::ErrorKind::InvalidUrl, "memory://a/b")?;
    Ok(())
}

/// Runs `case` on a current-thread runtime with paused time (what `#[tokio::test(start_paused =
/// true)]` gives a user's test), in a thread of its own.
async fn on_paused_clock<F, Fut>(case: F) -> Outcome
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Outcome>,
{
    tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .map_err(|e| Failure(e.to_string()))?
            .block_on(case())
    })
    .await
    .map_err(|e| Failure(format!("the paused runtime's thread: {e}")))?
}

/// On paused time, leases end by `tokio::time::advance`, not by the wall clock: a holder that
/// stopped renewing keeps its lock until its lease has run out on tokio's clock, then loses it;
/// a renewed holder keeps its lock for as long as time is advanced.
async fn leases_on_paused_clock() -> Outcome {
    let client = distlock::connect("memory:").await?;
    let wall = std::time::Instant::now();
    let lease = Duration::from_secs(30);
    let stopped = client
        .lock("job")
        .lease(lease)
        .no_watchdog()
        .acquire()
        .await?;
    tokio::time::advance(Duration::from_secs(29)).await;
    check_taken(
        &client.lock("job"),
        "another owner got in 29 s into a 30 s lease",
    )
    .await?;
    check!(!stopped.is_lost(), "lost 29 s into a 30 s lease");
    tokio::time::advance(Duration::from_secs(2)).await;
    check!(stopped.is_lost(), "not lost 31 s into a 30 s lease");
    let next = client
        .lock("job")
        .try_acquire()
        .await?
        .ok_or_else(|| Failure("the lock was still held after its lease ran out".into()))?;
    let whose = "the next holder's token";
    check_above(whose, next.fencing_token(), stopped.fencing_token())?;
    check!(
        !stopped.release().await?,
        "the stopped holder released a lock it had lost"
    );

    // The watchdog renews on the same clock: an hour later it still holds. A sleep lets the
    // paused clock jump from timer to timer, each renewal on time (one `advance` of more than
    // the lease would move the clock past the lease before the watchdog's timer ran).
    tokio::time::sleep(Duration::from_secs(3600)).await;
    check!(!next.is_lost(), "the watchdog let a lease run out");
    check_taken(
        &client.lock("job"),
        "another owner got in while the watchdog renewed",
    )
    .await?;
    check!(next.release().await?, "the renewed holder lost its lock");
    // Paused time: the hour passes without being waited for (the bound is far from both).
    eprintln!(
        "an hour of paused time, a renewal every 10 s, took {:?} of wall time",
        wall.elapsed()
    );
    check!(
        wall.elapsed() < Duration::from_secs(600),
        "an hour of paused time took {:?} of wall time",
        wall.elapsed()
    );
    Ok(())
}

/// On paused time a waiter is woken by the release itself (no timer), and a waiter with a
/// timeout gets `Timeout` when tokio's clock says so.
async fn waiters_on_paused_clock() -> Outcome {
    let client = distlock::connect("memory:").await?;
    for (flavour, make) in [
        (
            "lock",
            (|c, n| c.lock(n)) as fn(&distlock::Client, &str) -> distlock::Lock,
        ),
        ("fair", |c, n| c.fair_lock(n)),
        ("write", |c, n| c.rw_lock(n).write()),
        ("semaphore", |c, n| c.semaphore(n, 1)),
    ] {
        let holder = make(&client, flavour).acquire().await?;
        let waiter = tokio::spawn({
            let lock = make(&client, flavour);
            async move { lock.acquire().await }
        });
        let timed = make(&client, flavour)
            .acquire_timeout(Duration::from_secs(5))
            .await;
        check_kind(
            &timed,
            distlock::ErrorKind::Timeout,
            &format!("{flavour}: a 5 s wait on a held lock"),
        )?;
        let released = tokio::time::Instant::now();
        check!(
            holder.release().await?,
            "{flavour}: the holder lost its lock"
        );
        let next = waiter.await.map_err(|e| Failure(e.to_string()))??;
        check!(
            released.elapsed() < Duration::from_secs(1),
            "{flavour}: the waiter got the lock {:?} of tokio's time after the release",
            released.elapsed()
        );
        check!(next.release().await?, "{flavour}: the waiter lost its lock");
    }
    Ok(())
}

/// What the suite checks with a child process as the holder, between two clients of one store:
/// the status names the holder, its token and lease; a forced release removes the holding,
/// draws a token above it, and the holder's `lost()` fires at its next renewal.
async fn status_and_forced_release(ctx: Ctx) -> Outcome {
    let holder_client = ctx.connect().await?;
    for flavour in Flavour::every() {
        let name = ctx.unique_name(flavour.name);
        let lease = Duration::from_millis(600);
        let guard = (flavour.make)(&holder_client, &name)
            .lease(lease)
            .acquire()
            .await?;
        let token = guard.fencing_token();
        let kind = guard.kind();
        let found = ctx.client.status(&name).await?;
        let shown = found
            .iter()
            .filter(|s| s.kind == kind)
            .flat_map(|s| s.holdings.iter())
            .find(|h| h.token == token);
        let Some(shown) = shown else {
            return Err(Failure(format!(
                "{}: the status does not show token {token}: {found:?}",
                flavour.name
            )));
        };
        check!(
            shown.holder.as_ref().map(|h| h.pid) == Some(std::process::id()),
            "{}: the holder is {:?}",
            flavour.name,
            shown.holder
        );
        check!(
            shown.lease_left.is_some_and(|left| left <= lease),
            "{}: lease left {:?} of {lease:?}",
            flavour.name,
            shown.lease_left
        );
        let prefixed = ctx.client.status_prefix(&name[..name.len() - 3]).await?;
        check!(
            prefixed.iter().any(|s| s.name == name),
            "{}: a prefix does not find the lock",
            flavour.name
        );
        let forced = ctx.client.force_release(&name, kind).await?;
        check!(
            forced.removed.iter().any(|h| h.token == token) && forced.fence > token,
            "{}: the forced release of token {token} gave {forced:?}",
            flavour.name
        );
        // At its next renewal, a third of the lease later; the bound only guards against a hang.
        let fired = format!("{}: lost() firing", flavour.name);
        within(Duration::from_secs(30), guard.lost(), &fired).await?;
        let next = (flavour.make)(&ctx.client, &name)
            .try_acquire()
            .await?
            .ok_or_else(|| Failure(format!("{}: not free after the force", flavour.name)))?;
        let whose = format!("{}: the next token, after the fence", flavour.name);
        check_above(&whose, next.fencing_token(), forced.fence)?;
        check!(
            !guard.release().await?,
            "{}: the forced-out holder released",
            flavour.name
        );
        next.release().await?;
    }
    check!(
        ctx.client.status("conformance/nobody").await?.is_empty(),
        "a lock nobody holds shows a status"
    );
    let kinds = [
        LockKind::Mutex,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ];
    check!(
        kinds.iter().all(|k| ctx.client.supports(*k)),
        "the memory backend lacks a flavour"
    );
    Ok(())
}

/// What the suite checks with child processes elsewhere, between two clients of one store: one
/// leader at a time, the next one's term above; a latch releases a waiter of another client.
async fn election_and_latch(ctx: Ctx) -> Outcome {
    let other = ctx.connect().await?;
    let name = ctx.unique_name("election");
    let lease = Duration::from_secs(2);
    let first = ctx
        .client
        .election(&name)
        .lease(lease)
        .campaign("first")
        .await?;
    let seen = other.election(&name).leader().await?;
    check!(
        seen.as_ref().map(|l| l.value.as_str()) == Some("first"),
        "the other client sees leader {seen:?}"
    );
    let second = tokio::spawn({
        let election = other.election(&name).lease(lease);
        async move { election.campaign("second").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    check!(
        !second.is_finished(),
        "a second leader while the first leads"
    );
    let term = first.term();
    check!(first.resign().await?, "the first leader had lost its term");
    let second = joined(
        Duration::from_secs(30),
        second,
        "the second candidate leading",
    )
    .await??;
    check!(
        second.term() > term,
        "the second term {} is not above {term}",
        second.term()
    );
    second.resign().await?;

    let latch = ctx.unique_name("latch");
    check!(
        ctx.client.latch(&latch).try_set_count(2).await?,
        "a new latch refused its count"
    );
    let waiting = tokio::spawn({
        let latch = other.latch(&latch);
        async move { latch.wait().await }
    });
    ctx.client.latch(&latch).count_down().await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    check!(!waiting.is_finished(), "the waiter left at count 1");
    check!(
        ctx.client.latch(&latch).count_down().await? == 0,
        "the count did not reach 0"
    );
    joined(
        Duration::from_secs(30),
        waiting,
        "the latch's waiter's release",
    )
    .await??;
    Ok(())
}

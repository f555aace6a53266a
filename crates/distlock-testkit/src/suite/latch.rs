//! The count-down latch: counted down by several processes, it releases waiters in other
//! processes; a waiter with a timeout gets the typed timeout; the count's rules.

use std::time::{Duration, Instant};

use distlock::ErrorKind;
use distlock::latch::Latch;

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::{Outcome, check, check_kind};

/// A process sets a latch of 5 and is SIGKILLed (the count stays in the store); 4 processes ×
/// 5 waiters wait on it; 5 other processes count it down once each. No waiter is released
/// before the last count-down was sent, and all 20 are released soon after it.
pub(super) async fn releases_waiters_across_processes(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("latch");
    let mut creator = ChildProcess::spawn(&ctx.spec(Role::LatchSet {
        latch: name.clone(),
        count: 5,
    }))?;
    let set = creator.event(Duration::from_secs(30)).await?;
    check!(set["set"] == true, "a new latch refused its count: {set}");
    creator.signal(libc::SIGKILL)?;
    drop(creator);
    let count = ctx.client.latch(&name).count().await?;
    check!(
        count == 5,
        "after its creator was killed the latch counts {count}, not 5"
    );
    let mut waiters = Vec::new();
    for _ in 0..4 {
        waiters.push(ChildProcess::spawn(&ctx.spec(Role::LatchWait {
            latch: name.clone(),
            waiters: 5,
            timeout_ms: 60_000,
        }))?);
    }
    for w in &mut waiters {
        let event = w.event(Duration::from_secs(30)).await?;
        check!(event["event"] == "waiting", "a waiter process said {event}");
    }
    // Let every waiter reach its wait: none may be released while the count is above 0.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut counters = Vec::new();
    for _ in 0..5 {
        counters.push(ChildProcess::spawn(&ctx.spec(Role::LatchCountDown {
            latch: name.clone(),
        }))?);
    }
    let mut afters = Vec::new();
    let mut zero_sent = None;
    for c in &mut counters {
        let event = c.event(Duration::from_secs(30)).await?;
        let after = event["after"].as_u64().unwrap_or(u64::MAX);
        if after == 0 {
            zero_sent = event["sent"].as_u64();
        }
        afters.push(after);
    }
    afters.sort_unstable();
    check!(
        afters == [0, 1, 2, 3, 4],
        "counts after each count-down: {afters:?}"
    );
    let zero_sent = zero_sent.unwrap_or(u64::MAX);
    let counted = Instant::now();
    let mut released = 0;
    for w in &mut waiters {
        for _ in 0..5 {
            let event = w.event(Duration::from_secs(10)).await?;
            check!(event["event"] == "released", "a waiter said {event}");
            let at = event["at"].as_u64().unwrap_or(0);
            check!(
                at >= zero_sent,
                "a waiter was released {} µs before the last count-down was sent",
                (zero_sent - at) / 1000
            );
            released += 1;
        }
    }
    eprintln!(
        "latch: {released} waiters in 4 processes released within {:?} of the last count-down",
        counted.elapsed()
    );
    for c in counters {
        c.finish(Duration::from_secs(10)).await?;
    }
    for w in waiters {
        w.finish(Duration::from_secs(10)).await?;
    }
    check!(ctx.client.latch(&name).count().await? == 0, "count not 0");
    Ok(())
}

/// A waiter with a timeout on a latch that stays above 0 gets `ErrorKind::Timeout` after about
/// its timeout, in a process of its own and in this one.
pub(super) async fn wait_timeout_is_typed(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("latch-timeout");
    let latch = ctx.client.latch(&name);
    check!(
        latch.try_set_count(1).await?,
        "a new latch refused its count"
    );
    let mut child = ChildProcess::spawn(&ctx.spec(Role::LatchWait {
        latch: name.clone(),
        waiters: 1,
        timeout_ms: 300,
    }))?;
    check!(
        child.event(Duration::from_secs(30)).await?["event"] == "waiting",
        "the waiter did not start"
    );
    let answer = child.event(Duration::from_secs(10)).await;
    check!(
        matches!(&answer, Err(f) if f.0.contains("timed out")),
        "a waiter with a 300ms timeout: {answer:?}"
    );
    let started = Instant::now();
    let waited = latch.wait_timeout(Duration::from_millis(300)).await;
    let elapsed = started.elapsed();
    check_kind(&waited, ErrorKind::Timeout, "wait_timeout on a latch at 1")?;
    check!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(3),
        "timed out after {elapsed:?} for a 300ms timeout"
    );
    check!(latch.count_down().await? == 0, "count after the count-down");
    latch.wait_timeout(Duration::from_millis(300)).await?;
    latch.wait().await?;
    Ok(())
}

/// The count's rules: a running count is not set again; the count never goes below 0; a latch
/// at 0 can be set again; bad counts and names are typed errors.
pub(super) async fn count_rules(ctx: Ctx) -> Outcome {
    let latch = ctx.client.latch(ctx.unique_name("rules"));
    check!(latch.count().await? == 0, "a new latch's count");
    check!(
        latch.try_set_count(2).await?,
        "a new latch refused its count"
    );
    check!(
        !latch.try_set_count(7).await?,
        "a running count was set again"
    );
    check!(latch.count().await? == 2, "count after refusing");
    check!(latch.count_down().await? == 1, "first count-down");
    check!(latch.count_down().await? == 0, "second count-down");
    check!(latch.count_down().await? == 0, "a count-down below 0");
    check!(
        latch.count().await? == 0,
        "count after three count-downs of 2"
    );
    check!(
        latch.try_set_count(1).await?,
        "a latch at 0 refused a new round"
    );
    check!(latch.count().await? == 1, "count of the new round");
    for bad in [0, Latch::MAX_COUNT + 1, u64::MAX] {
        let e = latch.try_set_count(bad).await;
        check_kind(
            &e,
            ErrorKind::InvalidInput,
            &format!("try_set_count({bad})"),
        )?;
    }
    let e = ctx.client.latch("").count().await;
    check_kind(&e, ErrorKind::InvalidName, "empty latch name")?;
    Ok(())
}

/// On a backend without elections or latches every call is a typed `Unsupported` error, and
/// nothing is taken.
pub(super) async fn unsupported_is_typed(ctx: Ctx) -> Outcome {
    let backend = ctx.client.backend();
    let name = ctx.unique_name("unsupported");
    if backend.elections().is_none() {
        let election = ctx.client.election(&name);
        let e = election.campaign("x").await;
        check!(
            matches!(&e, Err(e) if e.kind() == ErrorKind::Unsupported),
            "campaign: {:?}",
            e.map(|l| l.term())
        );
        let e = election.leader().await;
        check_kind(&e, ErrorKind::Unsupported, "leader")?;
        // The election's lock was not taken.
        let lock = ctx.client.lock(format!(
            "{}{name}",
            distlock::election::ELECTION_LOCK_PREFIX
        ));
        check!(
            lock.try_acquire().await?.is_some(),
            "an unsupported campaign left its lock taken"
        );
    }
    if backend.latches().is_none() {
        let latch = ctx.client.latch(&name);
        for (what, e) in [
            ("try_set_count", latch.try_set_count(1).await.map(|_| ())),
            ("count_down", latch.count_down().await.map(|_| ())),
            ("count", latch.count().await.map(|_| ())),
            ("wait", latch.wait().await),
        ] {
            check_kind(&e, ErrorKind::Unsupported, what)?;
        }
    }
    Ok(())
}

/// `wait_timeout(Duration::MAX)` is a wait without end (issue #38 item 3): it neither panics
/// nor times out while the count is above 0, and returns once it reaches 0.
pub(super) async fn huge_wait_waits_forever(ctx: Ctx) -> Outcome {
    let latch = ctx.client.latch(ctx.unique_name("forever"));
    latch.wait_timeout(Duration::MAX).await?;
    check!(
        latch.try_set_count(1).await?,
        "a new latch refused its count"
    );
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_timeout(Duration::MAX).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    check!(
        !waiter.is_finished(),
        "a wait without end ended at count 1: {:?}",
        waiter.await
    );
    check!(latch.count_down().await? == 0, "count after the count-down");
    crate::joined(Duration::from_secs(10), waiter, "the waiter's release at 0").await??;
    Ok(())
}

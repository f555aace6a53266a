//! A guard dropped on a current-thread runtime (`#[tokio::test]`, `flavor = "current_thread"`,
//! a small CLI's `new_current_thread()`) frees its lock as soon as on a multi-thread one, though
//! that runtime stops right after the drop: the next holder does not wait out the lease (30 s).
//!
//! Each ending runs a fresh current-thread runtime on a thread of its own, as a test or a
//! program would: connect, take the lock with a 30 s lease, drop the guard, let the runtime end.
//! The lock is then checked from the suite's client.

use std::time::{Duration, Instant};

use distlock::Client;

use crate::child::{ChildProcess, DropPath, Role};
use crate::flavour::Flavour;
use crate::suite::Ctx;
use crate::{Failure, Outcome, check, check_above};

/// The lease the dropped guard takes: what a holder that never released would block others for.
const LEASE: Duration = Duration::from_secs(30);

/// How soon the lock must be takeable after the runtime that dropped its guard ended: a
/// release's round trip (and, the first time, opening the release thread's connection), with
/// room for a loaded machine, 30 times below the lease. Measured figures are printed.
const FREED_WITHIN: Duration = Duration::from_secs(1);

/// How the program holding the guard ends.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// As a `#[tokio::test]` returns: the guard, then the client, dropped as the runtime's
    /// last task finishes; the runtime is dropped next.
    TestReturns,
    /// The client is dropped first, the guard after it, both inside the runtime.
    ClientDroppedFirst,
    /// The guard is dropped inside the runtime, which then ends while the client lives on (held
    /// by a longer-lived part of the program): no client's end waits for the release.
    ClientOutlivesRuntime,
    /// The runtime goes on after the drop (a long-running current-thread server): the release
    /// runs there, and the same client takes the lock again before the runtime ends.
    RuntimeGoesOn,
}

/// What the holding thread reports: the holding's token, when the guard was dropped, when the
/// runtime had ended, and the client if it outlives the runtime.
type Held = (u64, Instant, Instant, Option<Client>);

pub(super) async fn dropped_guard_frees_at_once(ctx: Ctx) -> Outcome {
    for ending in [
        Ending::TestReturns,
        Ending::ClientDroppedFirst,
        Ending::ClientOutlivesRuntime,
        Ending::RuntimeGoesOn,
    ] {
        let name = ctx.unique_name(&format!("{ending:?}"));
        let (url, flavour, lease) = (ctx.url.clone(), ctx.flavour.clone(), ctx.lease(LEASE));
        let holder = std::thread::spawn({
            let name = name.clone();
            move || hold_and_drop(&url, &flavour, &name, lease, ending)
        });
        let (token, dropped, ended, kept) = tokio::task::spawn_blocking(move || holder.join())
            .await
            .map_err(|e| Failure(format!("{ending:?}: the holding thread's join failed: {e}")))?
            .map_err(|_| Failure(format!("{ending:?}: the holding thread panicked")))??;
        let to_end = ended - dropped;
        let mut tries = 1;
        let next = loop {
            if let Some(next) = ctx.contender(&name).try_acquire().await? {
                break next;
            }
            check!(
                ended.elapsed() < FREED_WITHIN,
                "{ending:?}: the lock of a guard dropped on a current-thread runtime was still \
                 held {:?} after the runtime ended (lease {lease:?}, {tries} tries)",
                ended.elapsed()
            );
            tries += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let freed_after = ended.elapsed();
        println!(
            "{} {ending:?}: drop to runtime end {to_end:?}; free {freed_after:?} after it, on try \
             {tries} (lease {lease:?})",
            ctx.flavour.name
        );
        // The runtime's end (or the client's) waits for the release: free at the first try.
        check!(
            tries == 1,
            "{ending:?}: the lock was still held at the first try after the runtime ended"
        );
        check_above(
            &format!("{ending:?}: the next holder's token"),
            next.fencing_token().get(),
            token,
        )?;
        next.release().await?;
        drop(kept);
    }
    Ok(())
}

/// On a fresh current-thread runtime: connects, takes `name` with `lease`, drops the guard, and
/// ends the runtime as `ending` says.
fn hold_and_drop(
    url: &str,
    flavour: &Flavour,
    name: &str,
    lease: Duration,
    ending: Ending,
) -> Result<Held, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (token, dropped, kept) = runtime.block_on(async {
        let client = distlock::connect(url).await?;
        let guard = (flavour.make)(&client, name).lease(lease).acquire().await?;
        let token = guard.fencing_token().get();
        let dropped = Instant::now();
        Ok::<_, Failure>(match ending {
            Ending::TestReturns => {
                drop(guard);
                (token, dropped, None)
            }
            Ending::ClientDroppedFirst => {
                drop(client);
                drop(guard);
                (token, dropped, None)
            }
            Ending::ClientOutlivesRuntime => {
                drop(guard);
                (token, dropped, Some(client))
            }
            Ending::RuntimeGoesOn => {
                drop(guard);
                let again = (flavour.make)(&client, name)
                    .lease(lease)
                    .acquire_timeout(FREED_WITHIN)
                    .await
                    .map_err(|e| {
                        Failure(format!(
                            "the same client could not take the lock again within \
                             {FREED_WITHIN:?} of dropping its guard on a current-thread \
                             runtime that goes on: {e}"
                        ))
                    })?;
                let retaken = again.fencing_token().get();
                check!(
                    retaken > token,
                    "the token after the dropped guard's: {retaken} is not above {token}"
                );
                check!(again.release().await?, "the retaken lock was lost");
                (retaken, dropped, None)
            }
        })
    })?;
    drop(runtime);
    Ok((token, dropped, Instant::now(), kept))
}

/// A `#[tokio::main(flavor = "current_thread")]` program that returns from `main` with its guard
/// dropped: the process exits right after, and the lock is free at once.
pub(super) async fn current_thread_main_frees_before_exit(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("main");
    let mut holder = ChildProcess::spawn(&ctx.spec(Role::DropAndExit {
        name: name.clone(),
        how: DropPath::CurrentThreadMain,
    }))?;
    let event = holder.event(Duration::from_secs(30)).await?;
    let old_token = event["token"].as_u64().unwrap_or(u64::MAX);
    holder.finish(Duration::from_secs(30)).await?;
    let exited = Instant::now();
    let next = ctx.contender(&name).try_acquire().await?;
    let waited = exited.elapsed();
    let Some(next) = next else {
        return Err(Failure(format!(
            "the lock of a current-thread program that returned from main was still held after \
             it exited (checked {waited:?} after)"
        )));
    };
    println!(
        "{}: free at the first try, {waited:?} after the current-thread holder exited",
        ctx.flavour.name
    );
    check_above(
        "the token after the exited holder's",
        next.fencing_token().get(),
        old_token,
    )?;
    next.release().await?;
    Ok(())
}

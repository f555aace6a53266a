//! The store going down under a holder, on a private store of the case's own
//! ([`crate::Suite::private_store`]), so stopping it disturbs no one.
//!
//! What a holder should see depends on whether its holding outlives the server process: a lease
//! in a store that keeps its data (a table row, an append-only file) does, and so does a session
//! with a TTL of its own (an etcd lease), so the holder keeps it if the store is back before the
//! lease or TTL ends; a session that is its connection, or a store that comes back empty (Redis
//! without persistence), does not, so the holder is told. In
//! every backend's docs.md fencing tokens keep increasing across a restart: sequences and
//! counter rows are on disk, and Redis starts a lost counter at its clock in µs.

use std::time::{Duration, Instant};

use distlock::Client;

use crate::suite::waiting::Waiting;
use crate::suite::{Ctx, with_lease};
use crate::{Failure, Outcome, check, check_above, within};

/// Longer than a stop and start of a private store on a loaded machine (about 1 to 3 s); the
/// watchdog renews every third of it. A store whose sessions have a TTL gives its private
/// store's clients this TTL ([`crate::suite::PRIVATE_SESSION_TTL`]).
const SURVIVING_LEASE: Duration = crate::suite::PRIVATE_SESSION_TTL;
/// Short, so that being down past it costs the case little.
const SHORT_LEASE: Duration = Duration::from_secs(2);

/// A holder and a waiter (another client) across a restart. Where the holding outlives the
/// server process and the restart is shorter than the lease, the holder keeps the lock (renewal
/// resumes after the restart) and the waiter gets it only at the release; otherwise the holder's
/// `lost()` fires and the waiter gets the lock with a larger token. Then the holder's client,
/// reconnected, takes the lock again.
pub(super) async fn while_held(ctx: Ctx) -> Outcome {
    let mut store = ctx.private_store()?;
    let url = store.url();
    let holder_client = distlock::connect(&url).await?;
    let waiter_client = distlock::connect(&url).await?;
    let name = ctx.unique_name("restart");
    let held = take(&ctx, &holder_client, &name, SURVIVING_LEASE).await?;
    let first = held.fencing_token();
    let waiter = Waiting::start(
        (ctx.flavour.contender)(&waiter_client, &name),
        Duration::from_secs(60),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    check!(!waiter.is_finished(), "the waiter got a held lock");

    let stopped = Instant::now();
    tokio::task::block_in_place(|| store.restart())?;
    let down_for = stopped.elapsed();
    // A lease, or a session that outlives its connection by a TTL (etcd's lease), survives a
    // restart of a store that keeps its data; a connection's session does not.
    let outlives_connection =
        holder_client.backend().capabilities().renews() || ctx.session_outlives_connection();
    let keeps_holding = outlives_connection && store.keeps_data();
    let after = "after the restart";
    let next = if keeps_holding {
        check!(
            down_for < SURVIVING_LEASE,
            "the restart took {down_for:?}, not shorter than the lease {SURVIVING_LEASE:?}: \
             the case cannot tell anything on a machine this slow"
        );
        // Past the lease counted from the stop: only renewals after the restart can have kept it.
        tokio::time::sleep_until((stopped + SURVIVING_LEASE + Duration::from_secs(1)).into()).await;
        check!(
            !held.is_lost(),
            "the holder lost its lock across a restart of {down_for:?}, shorter than its \
             lease {SURVIVING_LEASE:?}"
        );
        if waiter.is_finished() {
            return Err(match waiter.answer().await? {
                Ok(guard) => Failure(format!(
                    "the waiter got the lock (token {}) while the holder kept it (token \
                     {first}) across the restart",
                    guard.fencing_token()
                )),
                Err(e) => Failure(format!(
                    "the waiter's wait failed across the restart instead of riding it out: {}",
                    distlock::error::chain(&e)
                )),
            });
        }
        check!(
            held.release().await?,
            "the holder could not release after the restart"
        );
        waiter
            .gets_in(Duration::from_secs(10), first, after)
            .await?
    } else {
        // The holding is gone: the holder must be told, within a renewal or a session check.
        let told = "the holder's lost() firing after a restart that dropped its holding";
        within(SURVIVING_LEASE, held.lost(), told).await?;
        check!(held.is_lost(), "lost() fired but is_lost() is false");
        let next = waiter
            .gets_in(Duration::from_secs(30), first, after)
            .await?;
        let stale = held.release().await;
        check!(
            !matches!(stale, Ok(true)),
            "the lost holder's release claimed the lock the waiter now holds"
        );
        next
    };
    let waiter_token = next.fencing_token();
    check!(next.release().await?, "the waiter could not release");
    // The holder's client works again too: it reconnected by itself.
    let again = lock(&ctx, &holder_client, &name)
        .acquire_timeout(Duration::from_secs(10))
        .await?;
    let retaken = "the token the holder's client took the lock again with, after the waiter's";
    check_above(retaken, again.fencing_token(), waiter_token)?;
    check!(
        again.release().await?,
        "the holder's client could not release"
    );
    Ok(())
}

/// A holder whose store stays down past its lease (or its session's TTL) gets `lost()` (and
/// `is_lost()`) while the store is still down; once the store is back, another client takes the lock with a larger
/// token.
pub(super) async fn down_past_lease_fires_lost(ctx: Ctx) -> Outcome {
    let mut store = ctx.private_store()?;
    let url = store.url();
    let holder_client = distlock::connect(&url).await?;
    let name = ctx.unique_name("down");
    let held = take(&ctx, &holder_client, &name, SHORT_LEASE).await?;
    let first = held.fencing_token();
    tokio::task::block_in_place(|| store.stop())?;
    // A session with a TTL ends when the TTL has passed without a keep-alive.
    let ends_within = if ctx.session_outlives_connection() {
        SURVIVING_LEASE
    } else {
        SHORT_LEASE
    };
    let lost = tokio::time::timeout(ends_within + Duration::from_secs(2), held.lost()).await;
    // Start again whatever happened, so the checks below can clean up.
    tokio::task::block_in_place(|| store.start_again())?;
    check!(
        lost.is_ok(),
        "lost() did not fire while the store was down past the lease {ends_within:?}"
    );
    check!(held.is_lost(), "lost() fired but is_lost() is false");
    let other = distlock::connect(&url).await?;
    let next = (ctx.flavour.contender)(&other, &name)
        .acquire_timeout(Duration::from_secs(15))
        .await?;
    let came_back = "the token after the store came back, after the one before it";
    check_above(came_back, next.fencing_token(), first)?;
    check!(next.release().await?, "the next holder could not release");
    Ok(())
}

/// The lock under test through `client` (the private store's), with a lease of about `lease`
/// that the store can keep, taken.
async fn take(
    ctx: &Ctx,
    client: &Client,
    name: &str,
    lease: Duration,
) -> Result<distlock::Guard, Failure> {
    Ok(with_lease(client, lock(ctx, client, name), lease)
        .acquire()
        .await?)
}

/// The lock under test, through `client` (the private store's) instead of the suite's.
fn lock(ctx: &Ctx, client: &Client, name: &str) -> distlock::Lock {
    (ctx.flavour.make)(client, name)
}

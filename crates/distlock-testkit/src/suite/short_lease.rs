//! One lease meaning on every store (issue #40): a lease set shorter than a session store's
//! sessions (etcd's session lease, ZooKeeper's session timeout) is held under a session of its
//! own that ends as the lease does, so a holder killed with a 5 s lease frees its lock within
//! 5 s plus the store's granularity, with the store's default URL — not after the session's
//! TTL, and not refused. What the server cannot keep (below its own minimum) is refused, naming
//! that minimum.

use std::time::{Duration, Instant};

use distlock::ErrorKind;

use crate::child::{ChildProcess, Role, Spec};
use crate::suite::Ctx;
use crate::suite::support::{check_takes_and_releases, show};
use crate::{Outcome, check, check_above, check_kind};

/// The lease a holder asks for: shorter than etcd's and ZooKeeper's default sessions (10 s).
const LEASE: Duration = Duration::from_secs(5);
/// Slack on top of the lease and the store's granularity for the bound on the crashed holder's
/// lock: a ZooKeeper ensemble expires sessions by the tick (2 s on the shared one), etcd checks
/// its leases' expiry every 500 ms, and two cores are shared by several test runs. Still well
/// under the 10 s a default session would have kept the lock.
const SLACK: Duration = Duration::from_secs(3);

/// The store's lease resolution for a lease of [`LEASE`]: a per-lock lease's granularity, or
/// the step a short lease's own session is rounded up to.
fn granularity(ctx: &Ctx) -> Duration {
    let caps = ctx.client.backend().capabilities();
    match (caps.lease, caps.short_leases) {
        (distlock::backend::LeaseModel::PerLock { granularity }, _) => granularity,
        (_, Some(short)) => short.granularity,
        _ => Duration::ZERO,
    }
}

/// The store's URL as a user would write it: on a store that keeps short leases, without the
/// query (the suite's URLs shorten the sessions there, `?ttl=3`, `?timeout=4s`, which would
/// hold a 5 s lease under the client's own session).
fn default_url(ctx: &Ctx) -> String {
    match ctx.client.backend().capabilities().short_leases {
        Some(_) => ctx.url.split('?').next().unwrap_or(&ctx.url).to_string(),
        None => ctx.url.clone(),
    }
}

/// With the store's default URL ([`default_url`]), `lease(5s)` is taken as it is, and a holder process holding with it, SIGKILLed, leaves the
/// lock taken at first (the lease is honoured: the holder's renewals or keep-alives counted)
/// and free within the lease, the granularity and [`SLACK`] (measured and printed).
pub(super) async fn killed_holder_frees_within_short_lease(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("short-lease");
    let url = default_url(&ctx);
    let client = distlock::connect(&url).await?;
    if let distlock::backend::LeaseModel::Session {
        expires_after: Some(expiry),
        ..
    } = client.backend().capabilities().lease
    {
        check!(
            expiry > LEASE,
            "{url}'s sessions last {expiry:?}: a {LEASE:?} lease is not shorter"
        );
    }
    let probe = (ctx.flavour.make)(&client, &name)
        .lease(LEASE)
        .try_acquire()
        .await;
    check!(
        probe.as_ref().is_ok_and(Option::is_some),
        "lease({LEASE:?}) was not taken on a free lock: {probe:?}"
    );
    if let Ok(Some(guard)) = probe {
        check!(guard.release().await?, "the 5s holding was lost");
    }
    let mut holder = ChildProcess::spawn(&Spec {
        url: url.clone(),
        flavour: ctx.flavour.name.to_string(),
        role: Role::Hold {
            name: name.clone(),
            lease_ms: LEASE.as_millis() as u64,
        },
    })?;
    let acquired = holder.event(Duration::from_secs(30)).await?;
    let old_token = acquired["token"].as_u64().unwrap_or(u64::MAX);
    // Held past the point a renewal or keep-alive must have happened (a third of the lease).
    tokio::time::sleep(LEASE / 2).await;
    ctx.check_taken(&name, "the holder's lock was free while it ran")
        .await?;
    holder.signal(libc::SIGKILL)?;
    let killed = Instant::now();
    ctx.check_taken(
        &name,
        "the killed holder's lock was free at once: no lease was kept",
    )
    .await?;
    let bound = LEASE + granularity(&ctx) + SLACK;
    let guard = ctx
        .contender_takes(&name, bound + Duration::from_secs(5))
        .await?;
    let waited = killed.elapsed();
    println!(
        "{}: a SIGKILLed holder's {LEASE:?} lease freed its lock {waited:?} after the kill \
         (bound {bound:?})",
        ctx.client.backend().name()
    );
    // The last renewal or keep-alive was at most a third of the lease before the kill (plus a
    // loaded machine's delay): the lock cannot be free much before two thirds of it.
    check!(
        waited >= LEASE / 2,
        "the killed holder's lock was free after {waited:?}, before its {LEASE:?} lease could \
         have ended"
    );
    check!(
        waited <= bound,
        "the killed holder's lock was free only after {waited:?} (bound {bound:?})"
    );
    check_above(
        "the token after the killed holder's",
        guard.fencing_token().get(),
        old_token,
    )?;
    guard.release().await?;
    Ok(())
}

/// On a session store that keeps short leases: the shortest lease it keeps is the server's
/// minimum (`Client::keepable_lease` says so), a lease at that minimum is taken, and one below
/// it is refused with `InvalidLease` naming the minimum and what sets it.
pub(super) async fn below_server_minimum_is_refused(ctx: Ctx) -> Outcome {
    let caps = ctx.client.backend().capabilities();
    let Some(short) = caps.short_leases else {
        return Err(crate::Failure("the store keeps no short leases".into()));
    };
    let minimum = short.minimum;
    let keepable = ctx.client.keepable_lease(Duration::from_millis(1));
    check!(
        keepable == Some(minimum),
        "keepable_lease(1ms) is {keepable:?}, not the server's minimum {minimum:?}"
    );
    let name = ctx.unique_name("below-minimum");
    let below = minimum
        .saturating_sub(short.granularity)
        .max(short.granularity);
    check!(
        below < minimum,
        "the server keeps leases as short as the store's granularity ({minimum:?}): nothing to \
         refuse"
    );
    let refused = ctx.lock(&name).lease(below).try_acquire().await;
    check_kind(
        &refused,
        ErrorKind::InvalidLease,
        "a lease below the server's minimum",
    )?;
    if let Err(e) = &refused {
        let text = e.to_string();
        let shown = show(minimum);
        check!(
            text.contains(&shown) && text.contains("server"),
            "the refusal does not name the server's minimum {shown}: {text}"
        );
    }
    let minimum_lease = format!("a lease of the server's minimum ({minimum:?})");
    check_takes_and_releases(ctx.lock(&name).lease(minimum), &minimum_lease).await
}

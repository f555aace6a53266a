//! Operations: what the store says of a lock held by another process (its pid, its token, its
//! lease), and a forced release that fences the old holder and fires its lost signal.

use std::time::{Duration, SystemTime};

use distlock::{Holding, LockKind, LockStatus};

use crate::suite::Ctx;
use crate::suite::fenced_holder::FencedHolder;
use crate::{Failure, Outcome, check, check_above, check_kind};

/// The status entry of `kind` among `found`, and in it the holding with `token`.
fn holding_of(found: &[LockStatus], kind: LockKind, token: u64) -> Option<&Holding> {
    found
        .iter()
        .filter(|s| same_flavour(s.kind, kind))
        .flat_map(|s| s.holdings.iter())
        .find(|h| h.token.get() == token)
}

/// Semaphores compare without their permit count (a store may not keep it).
fn same_flavour(a: LockKind, b: LockKind) -> bool {
    matches!((a, b), (LockKind::Permit { .. }, LockKind::Permit { .. })) || a == b
}

/// A child process holds the lock; the status names its pid and host, its token, when it was
/// taken and the lease it has left; a prefix finds it too; a name nobody holds shows nothing.
pub(super) async fn shows_holder(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("status");
    let lease = ctx.lease(Duration::from_secs(5));
    let before = SystemTime::now() - Duration::from_secs(1);
    let (mut holder, token) = ctx.holder_process(&name, lease).await?;
    let pid = holder
        .pid()
        .ok_or(Failure("the holder has no pid".into()))?;
    let kind = ctx.lock(&name).kind();

    let found = ctx.client.status(&name).await?;
    let Some(holding) = holding_of(&found, kind, token) else {
        return Err(Failure(format!(
            "the status of {name:?} does not show the child's holding with token {token}: \
             {found:?}"
        )));
    };
    let who = holding.holder.as_ref();
    check!(
        who.map(|w| w.pid) == Some(pid),
        "the holding's holder is {who:?}, not the child (pid {pid})"
    );
    check!(
        who.map(|w| w.host.as_str()) == Some(distlock::Holder::this_process().host.as_str()),
        "the holding's host is {who:?}, expected {:?}",
        distlock::Holder::this_process().host
    );
    check!(
        holding
            .since
            .is_none_or(|t| t >= before && t <= SystemTime::now()),
        "the holding was taken at {:?}, not during this case",
        holding.since
    );
    if ctx.client.backend().capabilities().renews() {
        check!(
            holding
                .lease_left
                .is_some_and(|left| !left.is_zero() && left <= lease + Duration::from_secs(1)),
            "lease left {:?}, expected some of {lease:?}",
            holding.lease_left
        );
    }
    let prefix = &name[..name.len() - 4];
    let by_prefix = ctx.client.status_prefix(prefix).await?;
    check!(
        holding_of(&by_prefix, kind, token).is_some(),
        "a status by prefix {prefix:?} misses the holding: {by_prefix:?}"
    );
    let free = ctx.client.status(&ctx.unique_name("free")).await?;
    check!(
        free.iter().all(|s| s.holdings.is_empty()),
        "a lock nobody took shows holdings: {free:?}"
    );

    let released = holder.ask("release", Duration::from_secs(10)).await?;
    check!(released["held"] == true, "the child's release: {released}");
    let after = ctx.client.status(&name).await?;
    check!(
        holding_of(&after, kind, token).is_none(),
        "the released holding is still shown: {after:?}"
    );
    Ok(())
}

/// A forced release removes another process's holding and advances the fencing counter: the
/// old holder's lost() fires, the next holder's token is above the removed one's and the
/// counter's, its fenced write lands and the old holder's next one is refused.
pub(super) async fn force_release_fences_holder(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("forced");
    let lease = ctx.lease(Duration::from_millis(900));
    let mut holder = FencedHolder::start(&ctx, &name, lease).await?;
    let token = holder.token;
    let kind = ctx.lock(&name).kind();

    let forced = ctx.client.force_release(&name, kind).await?;
    check!(
        forced.removed.iter().any(|h| h.token.get() == token),
        "the forced release did not report the holding with token {token}: {forced:?}"
    );
    let counter = "the fencing counter after a forced release, above the removed holding's token";
    check_above(counter, forced.fence.get(), token)?;
    let status = ctx.client.status(&name).await?;
    check!(
        holding_of(&status, kind, token).is_none(),
        "the removed holding is still shown: {status:?}"
    );

    // Its next renewal (a third of the lease) or its session's end tells the old holder.
    let wait_lost = format!("lost {}", (lease * 4).as_millis());
    let lost = holder
        .process
        .ask(&wait_lost, Duration::from_secs(30))
        .await?;
    check!(
        lost["lost"] == true,
        "the old holder's lost() did not fire within 4 leases of the forced release: {lost}"
    );

    let next = ctx.contender_takes(&name, Duration::from_secs(10)).await?;
    let next_token = next.fencing_token().get();
    let advanced = "the next holder's token, after the advanced counter";
    check_above(advanced, next_token, forced.fence.get())?;
    check!(
        holder.resource.write(next_token)?,
        "the next holder's write was refused"
    );
    let late = holder.write().await?;
    check!(
        late["accepted"] == false,
        "the resource accepted the forced-out holder's write: {late}"
    );
    next.release().await?;
    let empty = ctx.client.force_release(&name, kind).await?;
    check!(
        empty.removed.is_empty(),
        "a forced release of a free lock removed {:?}",
        empty.removed
    );
    Ok(())
}

/// A store without status and forced release says so, typed, for both.
pub(super) async fn unsupported_is_typed(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("unsupported");
    let status = ctx.client.status(&name).await;
    check_kind(&status, distlock::ErrorKind::Unsupported, "status")?;
    let forced = ctx.client.force_release(&name, LockKind::Mutex).await;
    check_kind(&forced, distlock::ErrorKind::Unsupported, "forced release")?;
    Ok(())
}

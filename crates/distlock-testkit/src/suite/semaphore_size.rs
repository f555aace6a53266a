//! A semaphore's size belongs to the semaphore: a caller asking another size (a typo in one
//! service's configuration) gets a typed error naming both sizes, never a permit — also while
//! the semaphore is momentarily empty.

use std::time::Duration;

use distlock::{Error, ErrorKind, LockKind};

use crate::suite::Ctx;
use crate::{Failure, Outcome, check, check_kind, joined, within};

/// How long a waiter a resize lets in may take.
const TWENTY_S: Duration = Duration::from_secs(20);

/// Whether `outcome` is the refusal of a caller asking `asked` permits of a semaphore of
/// `stored`: `InvalidInput`, naming both sizes.
fn check_refused<T: std::fmt::Debug>(
    outcome: &Result<T, Error>,
    stored: u32,
    asked: u32,
    what: &str,
) -> Outcome {
    let permits = |n: u32| {
        if n == 1 {
            "1 permit".to_string()
        } else {
            format!("{n} permits")
        }
    };
    check!(
        matches!(outcome, Err(e) if e.kind() == ErrorKind::InvalidInput
            && e.message().contains(&format!("has {}", permits(stored)))
            && e.message().contains(&format!("asks for {asked}"))),
        "{what} gave {outcome:?}, not InvalidInput naming both sizes"
    );
    Ok(())
}

/// Resizes the semaphore `name` from `from` permits to `to`; fails unless it answers it had
/// `from`.
async fn check_resize(ctx: &Ctx, name: &str, from: u32, to: u32) -> Outcome {
    let had = ctx.client.set_semaphore_permits(name, to).await?;
    check!(
        had == Some(from),
        "resizing to {to} answered it had {had:?}, not {from}"
    );
    Ok(())
}

/// The size a status shows for the semaphore `name`, on a store with status.
async fn size_in_status(ctx: &Ctx, name: &str) -> Result<Option<u32>, Failure> {
    if ctx.client.backend().inspection().is_none() {
        return Ok(None);
    }
    let found = ctx.client.status(name).await?;
    Ok(found.iter().find_map(|s| match s.kind {
        LockKind::Permit { permits } => Some(permits),
        _ => None,
    }))
}

/// One service takes a permit of a one-permit semaphore; another, configured with 3, is refused
/// by every way of acquiring (at once, not after a wait), while the permit is held and after
/// it is released; the status shows the size; a caller asking 1 still gets its permit.
pub(super) async fn mismatch_is_refused(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("size");
    let other_service = ctx.connect().await?;
    let one = ctx.client.semaphore(&name, 1);
    let three = other_service.semaphore(&name, 3);
    let held = one.acquire().await?;

    let tried = three.try_acquire().await;
    check_refused(
        &tried,
        1,
        3,
        "a caller asking 3 permits of a 1-permit semaphore",
    )?;
    let timed = three.acquire_timeout(Duration::from_secs(2)).await;
    check_refused(&timed, 1, 3, "acquire_timeout asking 3 of 1")?;
    let refusing = "acquire asking 3 of 1 refusing instead of waiting";
    let waited = within(Duration::from_secs(10), three.acquire(), refusing).await?;
    check_refused(&waited, 1, 3, "acquire asking 3 of 1")?;
    let free = three.available_permits().await;
    check_refused(&free, 1, 3, "available_permits asking 3 of 1")?;
    if let Some(shown) = size_in_status(&ctx, &name).await? {
        check!(shown == 1, "the status shows {shown} permits, not 1");
    }

    check!(held.release().await?, "the one permit was lost");
    // Empty now: the size stays with the semaphore.
    let tried = three.try_acquire().await;
    check_refused(&tried, 1, 3, "asking 3 of an empty 1-permit semaphore")?;
    let again = other_service.semaphore(&name, 1).try_acquire().await?;
    check!(
        again.is_some(),
        "a caller asking the semaphore's own size was refused"
    );
    check!(again.unwrap().release().await?, "the permit was lost");
    other_service.shutdown().await;
    Ok(())
}

/// Waits until a waiter of the semaphore `name` has queued, where a status counts waiters (its
/// first attempt, which checks its size, is done then); elsewhere (Redis keeps no semaphore
/// waiters) gives it a generous second for that one attempt.
async fn waiter_queued(ctx: &Ctx, name: &str) -> Outcome {
    let waiters = |found: Vec<distlock::LockStatus>| {
        found
            .iter()
            .filter(|s| matches!(s.kind, LockKind::Permit { .. }))
            .find_map(|s| s.waiters)
    };
    let counted = ctx.client.backend().inspection().is_some()
        && waiters(ctx.client.status(name).await?).is_some();
    if !counted {
        tokio::time::sleep(Duration::from_secs(1)).await;
        return Ok(());
    }
    crate::cases::eventually(Duration::from_secs(10), "the waiter queued", || async {
        Ok(waiters(ctx.client.status(name).await?).is_some_and(|w| w >= 1))
    })
    .await
}

/// An explicit resize: growing a held one-permit semaphore to 2 lets its waiter in without a
/// release; shrinking it back to 1 keeps both holders' permits, and a new take waits until
/// fewer than 1 are held. Callers asking the old size are refused after each change.
pub(super) async fn resize_grows_and_shrinks(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("resize");
    let one = ctx.client.semaphore(&name, 1);
    let two = ctx.client.semaphore(&name, 2);
    let first = one.acquire().await?;
    let waiter = {
        let one = one.clone();
        tokio::spawn(async move { one.acquire_timeout(Duration::from_secs(30)).await })
    };
    waiter_queued(&ctx, &name).await?;

    check_resize(&ctx, &name, 1, 2).await?;
    let second = joined(TWENTY_S, waiter, "growing to 2 letting the waiter in").await??;
    if let Some(shown) = size_in_status(&ctx, &name).await? {
        check!(
            shown == 2,
            "the status shows {shown} permits after growing to 2"
        );
    }
    let tried = one.try_acquire().await;
    check_refused(&tried, 2, 1, "asking 1 after the growth to 2")?;
    let third = two.try_acquire().await?;
    check!(
        third.is_none(),
        "a third permit of a semaphore grown to 2, held twice"
    );

    check_resize(&ctx, &name, 2, 1).await?;
    let tried = two.try_acquire().await;
    check_refused(&tried, 1, 2, "asking 2 after the shrink to 1")?;
    let free = one.available_permits().await?;
    check!(free == 0, "{free} permits free with 2 held of 1");
    let over = one.try_acquire().await?;
    check!(
        over.is_none(),
        "a new take got a permit while 2 were held of 1"
    );
    check!(
        first.release().await?,
        "the first holder lost its permit in the shrink"
    );
    let over = one.try_acquire().await?;
    check!(
        over.is_none(),
        "a new take got a permit while 1 was held of 1"
    );
    let last = {
        let one = one.clone();
        tokio::spawn(async move { one.acquire_timeout(Duration::from_secs(30)).await })
    };
    check!(
        second.release().await?,
        "the second holder lost its permit in the shrink"
    );
    let last = joined(TWENTY_S, last, "the last waiter getting the freed permit").await??;
    check!(last.release().await?, "the last permit was lost");

    let zero = ctx.client.set_semaphore_permits(&name, 0).await;
    check_kind(&zero, ErrorKind::InvalidInput, "resizing to 0 permits")?;
    Ok(())
}

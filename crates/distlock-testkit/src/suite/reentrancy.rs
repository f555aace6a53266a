//! Re-entry: the same owner takes the lock again without waiting; the lock frees only when every
//! hold is released.

use distlock::OwnerToken;

use crate::suite::Ctx;
use crate::{Outcome, check};

pub(super) async fn counts_holds(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("reentrant");
    let lock = ctx.lock(&name).owner(OwnerToken::random());
    let first = lock.acquire().await?;
    let second = lock
        .try_acquire()
        .await?
        .ok_or(crate::Failure("the owner could not re-enter".into()))?;
    let third = first.reenter().await?;
    check!(
        first.fencing_token() == second.fencing_token()
            && second.fencing_token() == third.fencing_token(),
        "re-entry changed the token: {} {} {}",
        first.fencing_token(),
        second.fencing_token(),
        third.fencing_token()
    );
    check!(first.release().await?, "first release: not held");
    check!(second.release().await?, "second release: not held");
    let other = ctx.contender(&name).try_acquire().await?;
    check!(other.is_none(), "the lock freed with one hold left");
    check!(third.release().await?, "third release: not held");
    let other = ctx.contender(&name).try_acquire().await?;
    check!(
        other.is_some(),
        "the lock stayed held after every hold was released"
    );
    Ok(())
}

//! Multi-locks: all or nothing, and no deadlock between callers naming locks in another order.

use std::time::Duration;

use crate::suite::Ctx;
use crate::{Failure, Outcome, check, joined};

pub(super) async fn orders_and_rolls_back(ctx: Ctx) -> Outcome {
    let a = ctx.unique_name("a");
    let b = ctx.unique_name("b");
    let c = ctx.unique_name("c");
    let mut callers = Vec::new();
    for reversed in [false, true] {
        let names = if reversed {
            vec![b.clone(), a.clone()]
        } else {
            vec![a.clone(), b.clone()]
        };
        let multi = ctx.client.multi_lock(names);
        callers.push(tokio::spawn(async move {
            for _ in 0..30 {
                let guards = multi.acquire().await?;
                tokio::task::yield_now().await;
                guards.release().await?;
            }
            Ok::<(), Failure>(())
        }));
    }
    for caller in callers {
        let deadlock = "multi-locks in opposite orders finishing (a deadlock?)";
        joined(Duration::from_secs(60), caller, deadlock).await??;
    }

    // One name taken: the multi-lock gets nothing, and leaves nothing held.
    let blocker = ctx.client.lock(&c).acquire().await?;
    let multi = ctx.client.multi_lock([a.clone(), b.clone(), c.clone()]);
    check!(
        multi.try_acquire().await?.is_none(),
        "multi-lock took a held name"
    );
    let timed = multi.acquire_timeout(Duration::from_millis(200)).await;
    check!(
        matches!(&timed, Err(e) if e.is_timeout()),
        "multi-lock wait answered {timed:?}"
    );
    for name in [&a, &b] {
        let free = ctx.client.lock(name).try_acquire().await?;
        check!(
            free.is_some(),
            "{name:?} stayed held after a failed multi-lock"
        );
    }
    blocker.release().await?;
    let all = multi.acquire_timeout(Duration::from_secs(5)).await?;
    check!(
        all.guards().len() == 3,
        "multi-lock holds {} locks",
        all.guards().len()
    );
    all.release().await?;
    Ok(())
}

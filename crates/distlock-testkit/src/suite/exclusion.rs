//! Mutual exclusion: a read-modify-write on a counter outside the store, under the lock, never
//! loses an update — across OS processes and across tasks of one process.

use std::time::Duration;

use crate::child::{ChildProcess, Role, increment_slowly};
use crate::suite::Ctx;
use crate::{Outcome, check};

const PROCESSES: u32 = 3;
const TASKS: u32 = 8;
/// 3 × 8 × 60 = 1,440 holds a flavour: a lock that lets two in loses updates within the first
/// few dozen; the torture command runs the long searches. (2,400 took MySQL's flavours ~90 s
/// each under CI's load.)
const ITERATIONS: u32 = 60;

pub(super) async fn across_processes(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("counter");
    let counter = ctx.dir.path().join(format!("{}.counter", ctx.flavour.name));
    let _ = std::fs::remove_file(&counter);
    let role = Role::Counter {
        name,
        counter: counter.clone(),
        tasks: TASKS,
        iterations: ITERATIONS,
    };
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(ChildProcess::spawn(&ctx.spec(role.clone()))?);
    }
    for child in &mut children {
        let event = child.event(Duration::from_secs(300)).await?;
        check!(event["event"] == "done", "unexpected child event {event}");
    }
    for child in children {
        child.finish(Duration::from_secs(10)).await?;
    }
    let value: u64 = std::fs::read_to_string(&counter)?.trim().parse()?;
    let expected = u64::from(PROCESSES * TASKS * ITERATIONS);
    check!(
        value == expected,
        "lost updates: the counter ended at {value}, expected {expected}"
    );
    Ok(())
}

pub(super) async fn between_tasks(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("counter");
    let counter = ctx
        .dir
        .path()
        .join(format!("{}.tasks.counter", ctx.flavour.name));
    let _ = std::fs::remove_file(&counter);
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let lock = ctx.lock(&name);
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let guard = lock.acquire().await?;
                increment_slowly(&counter).await?;
                guard.release().await?;
            }
            Ok::<(), crate::Failure>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let value: u64 = std::fs::read_to_string(&counter)?.trim().parse()?;
    check!(
        value == u64::from(TASKS * 50),
        "lost updates between tasks: {value}, expected {}",
        TASKS * 50
    );
    Ok(())
}

//! Fencing tokens strictly increase in the order of the holds, across processes.

use std::time::Duration;

use crate::child::{ChildProcess, Role};
use crate::history::{self, Hold};
use crate::suite::Ctx;
use crate::{Failure, Outcome, check};

const PROCESSES: u32 = 4;
/// 4 × 150 = 600 holds, every one checked against every other for order.
const PER_PROCESS: u32 = 150;

pub(super) async fn increase_across_processes(ctx: Ctx) -> Outcome {
    let name = ctx.unique_name("tokens");
    let role = Role::Record {
        name,
        acquisitions: PER_PROCESS,
    };
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(ChildProcess::spawn(&ctx.spec(role.clone()))?);
    }
    let mut holds = Vec::new();
    for child in &mut children {
        let event = child.event(Duration::from_secs(300)).await?;
        // Each child reports its holds as [start ns, end ns, token].
        let records: Vec<[u64; 3]> = serde_json::from_value(event["holds"].clone())
            .map_err(|e| Failure(format!("bad report {event}: {e}")))?;
        holds.extend(records.into_iter().map(|[start_ns, end_ns, token]| Hold {
            start_ns,
            end_ns,
            token,
        }));
    }
    for child in children {
        child.finish(Duration::from_secs(10)).await?;
    }
    let verdict = history::check(holds);
    check!(
        verdict.holds == (PROCESSES * PER_PROCESS) as usize,
        "{} holds recorded",
        verdict.holds
    );
    check!(verdict.is_ok(), "{verdict}");
    Ok(())
}

//! Fencing tokens strictly increase in the order of the holds, across processes.

use std::time::Duration;

use crate::child::{ChildProcess, Role};
use crate::suite::Ctx;
use crate::{Failure, Outcome, check};

const PROCESSES: u32 = 4;
const PER_PROCESS: u32 = 250;

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
    let mut holds: Vec<[u64; 3]> = Vec::new();
    for child in &mut children {
        let event = child.event(Duration::from_secs(300)).await?;
        let records: Vec<[u64; 3]> = serde_json::from_value(event["holds"].clone())
            .map_err(|e| Failure(format!("bad report {event}: {e}")))?;
        holds.extend(records);
    }
    for child in children {
        child.finish(Duration::from_secs(10)).await?;
    }
    check!(
        holds.len() == (PROCESSES * PER_PROCESS) as usize,
        "{} holds recorded",
        holds.len()
    );
    holds.sort_by_key(|h| h[0]);
    for pair in holds.windows(2) {
        let ([_, end, token], [start, _, next]) = (pair[0], pair[1]);
        check!(
            start >= end,
            "two holds overlap: {:?} and {:?}",
            pair[0],
            pair[1]
        );
        check!(next > token, "token {next} follows token {token}");
    }
    Ok(())
}

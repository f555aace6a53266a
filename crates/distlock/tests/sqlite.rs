//! The conformance suite against the embedded SQLite backend, in a temporary file, plus what only
//! an embedded file has to get right. Set DISTLOCK_SQLITE_URL to run it against another file.

use std::time::Duration;

use distlock_testkit::child::{ChildProcess, Role, Spec};
use distlock_testkit::{Ctx, Outcome, Suite, check};

fn main() -> std::process::ExitCode {
    // Removed when the run ends; child processes get the URL from their spec.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = std::env::var("DISTLOCK_SQLITE_URL")
        .unwrap_or_else(|_| format!("sqlite:{}", dir.path().join("locks.db").display()));
    Suite::new("sqlite", "SQLite file", url)
        .case("sqlite::processes_create_one_file_at_once", create_at_once)
        .run()
}

/// Eight processes open a file that does not exist yet at the same moment: all of them must
/// come up (one creates the tables and switches to WAL, the others wait), then share the lock.
async fn create_at_once(ctx: Ctx) -> Outcome {
    let file = ctx
        .dir
        .path()
        .join(format!("{}.db", ctx.unique_name("fresh").replace('/', "_")));
    let spec = Spec {
        url: format!("sqlite:{}", file.display()),
        flavour: ctx.flavour.name.to_string(),
        role: Role::Record {
            name: "shared".into(),
            acquisitions: 20,
        },
    };
    let mut children = Vec::new();
    for _ in 0..8 {
        children.push(ChildProcess::spawn(&spec)?);
    }
    let mut holds = Vec::new();
    for child in &mut children {
        let event = child.event(Duration::from_secs(60)).await?;
        holds.extend(event["holds"].as_array().cloned().unwrap_or_default());
    }
    for child in children {
        child.finish(Duration::from_secs(10)).await?;
    }
    check!(holds.len() == 160, "{} holds of 160", holds.len());
    Ok(())
}

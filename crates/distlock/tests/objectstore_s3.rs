//! The conformance suite against a real S3-compatible server (DISTLOCK_S3_URL, default the
//! RustFS that scripts/services.sh runs: `scripts/services.sh url s3`), exclusive lock and
//! latches; then the object-store cases (`objectstore::…`, tests/objectstore/cases.rs) and a
//! stand-in server that ignores conditional writes, which connect must refuse.

#[path = "objectstore/cases.rs"]
mod cases;
#[path = "objectstore/standin.rs"]
mod standin;

use distlock::ErrorKind;
use distlock_testkit::{Ctx, Outcome, Suite, check, check_kind};

const DEFAULT_URL: &str =
    "s3://distlock:distlock-secret@distlock/suite?endpoint=http://127.0.0.1:9000&region=us-east-1";

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_S3_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    let suite = Suite::new("s3", "the S3-compatible server (RustFS)", url).case(
        "objectstore::ignored_conditional_writes_are_refused_at_connect",
        ignored_conditions_refused,
    );
    cases::added(suite).run()
}

async fn ignored_conditions_refused(_ctx: Ctx) -> Outcome {
    let url = standin::start().await?;
    let answer = distlock::connect(&url).await;
    check_kind(
        &answer,
        ErrorKind::Unsupported,
        "a store that ignores If-None-Match",
    )?;
    let message = answer.err().map(|e| e.to_string()).unwrap_or_default();
    check!(
        message.contains("If-None-Match"),
        "the refusal does not name the missing guarantee: {message}"
    );
    Ok(())
}

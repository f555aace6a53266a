//! The conformance suite against Azurite, the Azure Storage emulator (DISTLOCK_AZ_URL, default
//! the Azurite that scripts/services.sh runs: `scripts/services.sh url az`), exclusive lock and
//! latches; then the object-store cases (`objectstore::…`, tests/objectstore/cases.rs).

#[path = "objectstore/cases.rs"]
mod cases;

use distlock_testkit::Suite;

// Azurite's account and key are the emulator's public, documented ones.
const DEFAULT_URL: &str = "az://devstoreaccount1:Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq%2FK1SZFPTOtr%2FKBHBeksoGMGw%3D%3D@distlock/suite?endpoint=http://127.0.0.1:10000/devstoreaccount1";

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_AZ_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
    cases::added(Suite::new(
        "az",
        "Azurite (the Azure Storage emulator)",
        url,
    ))
    .run()
}

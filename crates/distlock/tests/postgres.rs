//! The conformance suite against PostgreSQL lease locks, plus PostgreSQL-specific cases.
//! DISTLOCK_POSTGRES_URL overrides the server (default: the loopback test database).

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    let url = sql_cases::url("DISTLOCK_POSTGRES_URL", sql_cases::PG_DEFAULT);
    sql_cases::postgres_lease(distlock_testkit::Suite::new(
        "postgres",
        "PostgreSQL at 127.0.0.1:5432",
        url,
    ))
    .run()
}

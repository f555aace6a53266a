//! The conformance suite against PostgreSQL session (advisory) locks, with the server ending
//! sessions. DISTLOCK_POSTGRES_URL overrides the server; `lock=session` is added to it.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    let url = distlock_testkit::servers::with_param(
        &sql_cases::url("DISTLOCK_POSTGRES_URL", sql_cases::PG_DEFAULT),
        sql_cases::SESSION,
    );
    sql_cases::postgres_session(distlock_testkit::Suite::new(
        "postgres",
        "PostgreSQL at 127.0.0.1:5432",
        url,
    ))
    .run()
}

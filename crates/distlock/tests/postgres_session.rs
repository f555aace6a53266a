//! The conformance suite against PostgreSQL session (advisory) locks, with the server ending
//! sessions. DISTLOCK_POSTGRES_URL overrides the server; `lock=session` is added to it.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    sql_cases::run(sql_cases::Sql::Postgres, sql_cases::Locks::Session)
}

//! The conformance suite against PostgreSQL lease locks, plus PostgreSQL-specific cases.
//! DISTLOCK_POSTGRES_URL overrides the server (default: the loopback test database).

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    sql_cases::run(sql_cases::Sql::Postgres, sql_cases::Locks::Lease)
}

//! The conformance suite against MySQL/MariaDB lease locks, plus MySQL-specific cases.
//! DISTLOCK_MYSQL_URL overrides the server (default: the loopback test database).

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    sql_cases::run(sql_cases::Sql::Mysql, sql_cases::Locks::Lease)
}

//! The conformance suite against MySQL/MariaDB lease locks, plus MySQL-specific cases.
//! DISTLOCK_MYSQL_URL overrides the server (default: the loopback test database).

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    let url = sql_cases::url("DISTLOCK_MYSQL_URL", sql_cases::MYSQL_DEFAULT);
    sql_cases::mysql_lease(distlock_testkit::Suite::new(
        "mysql",
        "MariaDB at 127.0.0.1:3306",
        url,
    ))
    .run()
}

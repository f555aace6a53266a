//! The conformance suite against MySQL/MariaDB session (`GET_LOCK`) locks, with the server ending
//! sessions. DISTLOCK_MYSQL_URL overrides the server; `lock=session` is added to it.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    let url = distlock_testkit::servers::with_param(
        &sql_cases::url("DISTLOCK_MYSQL_URL", sql_cases::MYSQL_DEFAULT),
        sql_cases::SESSION,
    );
    sql_cases::mysql_session(distlock_testkit::Suite::new(
        "mysql",
        "MariaDB at 127.0.0.1:3306",
        url,
    ))
    .run()
}

//! The conformance suite against MySQL/MariaDB session (`GET_LOCK`) locks, with the server ending
//! sessions. DISTLOCK_MYSQL_URL overrides the server; `lock=session` is added to it.

#[path = "sql_cases/mod.rs"]
mod sql_cases;

fn main() -> std::process::ExitCode {
    sql_cases::run(sql_cases::Sql::Mysql, sql_cases::Locks::Session)
}

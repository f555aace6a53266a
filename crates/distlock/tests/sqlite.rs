//! The conformance suite against the embedded SQLite backend, in a temporary file.
//! Set DISTLOCK_SQLITE_URL to run it against another file.

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_SQLITE_URL").unwrap_or_else(|_| {
        let dir = std::env::temp_dir().join(format!("distlock-conformance-{}", std::process::id()));
        // A child process inherits DISTLOCK_SQLITE_URL from its parent, so all share one file.
        std::fs::create_dir_all(&dir).expect("temp dir");
        let url = format!("sqlite:{}", dir.join("locks.db").display());
        // SAFETY: set before any other thread exists (main's first statements).
        unsafe { std::env::set_var("DISTLOCK_SQLITE_URL", &url) };
        url
    });
    distlock_testkit::Suite::new("sqlite", "SQLite file", url).run()
}

//! The conformance suite against the real Redis (DISTLOCK_REDIS_URL, default
//! redis://127.0.0.1:6379), for the lock, the fair lock, each side of the read-write lock and a
//! one-permit semaphore; then the cases only they have.

use distlock_testkit::{Flavour, Suite};

fn flavours() -> Vec<Flavour> {
    vec![
        Flavour::mutex(),
        Flavour {
            name: "fair",
            make: |c, n| c.fair_lock(n),
            self_exclusive: true,
            contender: |c, n| c.fair_lock(n),
        },
        Flavour {
            name: "write",
            make: |c, n| c.rw_lock(n).write(),
            self_exclusive: true,
            contender: |c, n| c.rw_lock(n).write(),
        },
        Flavour {
            name: "read",
            make: |c, n| c.rw_lock(n).read(),
            self_exclusive: false,
            contender: |c, n| c.rw_lock(n).write(),
        },
        Flavour {
            name: "semaphore1",
            make: |c, n| c.semaphore(n, 1),
            self_exclusive: true,
            contender: |c, n| c.semaphore(n, 1),
        },
    ]
}

fn main() -> std::process::ExitCode {
    let url = std::env::var("DISTLOCK_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    Suite::new("redis", "Redis", url).flavours(flavours()).run()
}

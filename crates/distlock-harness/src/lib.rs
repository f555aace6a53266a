//! Faults injected into a running system from outside it, and the checks of what its lock holders
//! did: a TCP proxy that delays, blackholes or resets a client's traffic, cluster members cut off
//! from their peers and wall clocks jumped under a server ([`faults`]); a resource that refuses
//! writes by old fencing tokens ([`fenced`]); the checker of recorded holds for overlaps and
//! token order ([`history`]); a process's TCP connections ([`sockets`]). Used by the `distlock`
//! command's `torture` and `bench` and by distlock's test kit.
#![warn(missing_docs)]
// Every unsafe block says why it is sound.
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod faults;
pub mod fenced;
pub mod history;
pub mod sockets;

use std::fmt;

/// Why a fault could not be injected or a check could not run: a message for the operator.
#[derive(Debug)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure(e.to_string())
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine, so holds recorded
/// by different processes can be put in one order.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec through its pointer: `ts` is a live,
    // exclusively borrowed libc::timespec, and CLOCK_MONOTONIC exists on every unix.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_ns_counts_forward() {
        let first = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = super::monotonic_ns();
        assert!(
            second >= first + 2_000_000,
            "{first} ns, then {second} ns 2 ms later"
        );
    }
}

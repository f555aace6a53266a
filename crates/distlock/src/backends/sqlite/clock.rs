//! The clock SQLite leases are judged by: CLOCK_BOOTTIME, shared by every process on the machine,
//! never set by anyone, and still counting while the machine sleeps. Paired with the kernel's
//! boot id, so leases written before a reboot are over after it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since boot.
#[cfg(unix)]
pub(super) fn boottime_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let clock = libc::CLOCK_BOOTTIME;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let clock = libc::CLOCK_MONOTONIC;
    // SAFETY: clock_gettime(2) writes one timespec through its pointer: `ts` is a live,
    // exclusively borrowed libc::timespec; the clock id is a constant the kernel knows (an
    // unknown one would only fail with EINVAL, not write).
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// Elsewhere (Windows), no clock shared by processes and never set is within std's reach: the
/// wall clock, in milliseconds. Setting the clock then moves every lease's end with it (back:
/// leases last longer; forward: they end early), which docs.md lists among what breaks it.
#[cfg(not(unix))]
pub(super) fn boottime_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// This boot's identity. Without /proc (not Linux) a constant: leases then survive a reboot
/// until their boottime deadline, which a new boot reaches later.
pub(super) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-boot".to_string())
}

/// The wall clock in microseconds: the floor under fencing tokens.
pub(super) fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn boottime_counts_milliseconds_forward() {
        let first = boottime_ms();
        assert!(first > 0, "{first} ms since boot");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = boottime_ms();
        assert!(
            second >= first + 20,
            "{first} ms, then {second} ms 20 ms later"
        );
    }
}

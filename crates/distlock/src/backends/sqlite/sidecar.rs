//! The file next to the database (`PATH-distlock`) that makes waiting event-driven between the
//! processes of one machine:
//!
//! * its file lock (`File::lock`: `flock` on Unix, `LockFileEx` on Windows) is the writers' queue: a process takes it before `BEGIN IMMEDIATE`, so writers
//!   wait for each other in the kernel and wake the moment the previous one unlocks, instead of
//!   sleeping in SQLite's busy handler (1, 2, 5 … 100 ms naps). The kernel drops the lock of a
//!   process that dies, SIGKILL included;
//! * its bytes are [`SLOTS`] release counters (little-endian `u64`), one per hash of the lock
//!   name: a release bumps its name's counter with `pwrite`, which inotify reports to waiting
//!   processes (see `notices.rs`). Only written under the flock, so increments are never lost.
//!
//! It holds no lock state: deleting it between runs loses nothing (it is made again), and a
//! process that does not know it (an earlier distlock version) still writes safely, only without
//! queueing or notices.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// How many release counters the file holds. Names share a counter by hash: a shared counter
/// only wakes a waiter for nothing, which then finds its lock still held and waits again.
pub(super) const SLOTS: usize = 1024;

/// The opened sidecar file.
#[derive(Debug)]
pub(super) struct Sidecar {
    file: File,
    // The path and the counters are for inotify's notices (Linux).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    path: PathBuf,
}

impl Sidecar {
    /// Opens (creating if needed) the sidecar of the database at `db`.
    pub(super) fn open(db: &Path) -> io::Result<Self> {
        let mut name = db.as_os_str().to_owned();
        name.push("-distlock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        Ok(Sidecar { file, path })
    }

    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Waits in the kernel until this process is the only distlock writer of the database; the
    /// returned guard unlocks. No timeout: the holder keeps it only for one transaction, and a
    /// dead holder's lock goes with its last file descriptor.
    pub(super) fn lock_writers(&self) -> io::Result<WritersLock<'_>> {
        loop {
            // std's exclusive lock is flock(LOCK_EX) on Unix: held per open file, so two
            // connections of one process queue too, and dropped by the kernel with a dead
            // process's descriptors. A signal may interrupt the wait: wait again.
            match self.file.lock() {
                Ok(()) => return Ok(WritersLock { sidecar: self }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The release counter of `slot`.
    pub(super) fn counter(&self, slot: usize) -> io::Result<u64> {
        let mut counter = [0u8; 8];
        // A file shorter than the slot reads as zero (the slot was never bumped).
        let n = read_at(&self.file, &mut counter, (slot * 8) as u64)?;
        if n < 8 {
            counter = [0; 8];
        }
        Ok(u64::from_le_bytes(counter))
    }

    /// Every release counter; a file shorter than [`SLOTS`] counters reads as zeros past its end.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(super) fn counters(&self) -> io::Result<Vec<u64>> {
        let mut bytes = vec![0u8; SLOTS * 8];
        let mut filled = 0;
        while filled < bytes.len() {
            match read_at(&self.file, &mut bytes[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }
}

/// This process's turn to write; unlocks on drop.
pub(super) struct WritersLock<'a> {
    sidecar: &'a Sidecar,
}

impl WritersLock<'_> {
    /// Bumps the release counter of `slot`, telling waiting processes that a lock of that slot
    /// may be free. Only while holding the writers' lock, so two bumps never overwrite each other.
    pub(super) fn bump(&self, slot: usize) -> io::Result<()> {
        let next = self.sidecar.counter(slot)?.wrapping_add(1);
        write_all_at(&self.sidecar.file, &next.to_le_bytes(), (slot * 8) as u64)
    }
}

impl Drop for WritersLock<'_> {
    fn drop(&mut self) {
        // Closing the file would unlock too; an error here leaves nothing to do.
        let _ = self.sidecar.file.unlock();
    }
}

/// Reads at `offset` without moving the file's cursor (Unix `pread`).
#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

/// Writes all of `buf` at `offset` (Unix `pwrite`).
#[cfg(unix)]
fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

/// Reads at `offset` (Windows moves the cursor too, which nothing here relies on).
#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

/// Writes all of `buf` at `offset`.
#[cfg(windows)]
fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_write(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The release counter a lock name maps to: FNV-1a, the same in every process and build (std's
/// hasher may change between Rust releases, and two versions must agree on the slot).
pub(super) fn slot_of(name: &str) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bumps_are_seen_in_the_counters_of_another_opening() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("locks.db");
        let (writer, reader) = (Sidecar::open(&db).unwrap(), Sidecar::open(&db).unwrap());
        assert_eq!(reader.counters().unwrap(), vec![0; SLOTS]);
        let slot = slot_of("orders/42");
        {
            let turn = writer.lock_writers().unwrap();
            turn.bump(slot).unwrap();
            turn.bump(slot).unwrap();
        }
        let counters = reader.counters().unwrap();
        assert_eq!(counters[slot], 2);
        assert_eq!(counters.iter().sum::<u64>(), 2);
    }

    #[test]
    fn slots_are_stable_and_spread() {
        assert_eq!(slot_of("a"), slot_of("a"));
        let used: std::collections::HashSet<_> =
            (0..64).map(|i| slot_of(&format!("run/{i}"))).collect();
        assert!(used.len() > 48, "{} distinct slots of 64 names", used.len());
    }
}

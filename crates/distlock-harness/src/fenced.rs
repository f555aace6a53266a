//! A resource that accepts only writes carrying a fencing token at least as large as the largest
//! it has seen: what a storage service should do with distlock's tokens.
//!
//! It is a file shared by processes; each write is checked and recorded under `flock`, so the
//! check itself is atomic across processes.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// The fenced file.
#[derive(Clone, Debug)]
pub struct FencedFile {
    path: PathBuf,
}

impl FencedFile {
    /// A fenced resource stored at `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FencedFile { path: path.into() }
    }

    /// Writes on behalf of the holder of `token`: `Ok(true)` if accepted, `Ok(false)` if a
    /// larger token was seen before (the writer is a stale holder).
    pub fn write(&self, token: u64) -> std::io::Result<bool> {
        Ok(self.write_checked(token)?.accepted)
    }

    /// [`write`](FencedFile::write), saying also the largest token accepted before this write:
    /// an accepted write whose token equals it came from a second holder of the same token
    /// (the resource cannot tell them apart; a checker that knows the holds can).
    pub fn write_checked(&self, token: u64) -> std::io::Result<FencedWrite> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.path)?;
        // SAFETY: flock(2) takes two integers and touches no memory of ours; the descriptor is
        // `file`'s, open for the whole call, and the lock is released when `file` closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let highest_before: u64 = text.trim().parse().unwrap_or(0);
        if token < highest_before {
            return Ok(FencedWrite {
                accepted: false,
                highest_before,
            });
        }
        file.seek(SeekFrom::Start(0))?;
        file.set_len(0)?;
        write!(file, "{token}")?;
        file.sync_data()?;
        Ok(FencedWrite {
            accepted: true,
            highest_before,
        })
    }
}

/// What [`FencedFile::write_checked`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FencedWrite {
    /// The write was accepted (its token was at least `highest_before`).
    pub accepted: bool,
    /// The largest token accepted before (0 for none).
    pub highest_before: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writers on threads of their own each check and record under the flock: the largest
    /// token is the one kept, and none is accepted below one accepted before it.
    #[test]
    fn concurrent_writes_keep_the_largest_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = FencedFile::new(dir.path().join("resource"));
        assert!(file.write(5).unwrap());
        assert!(!file.write(4).unwrap(), "a smaller token was accepted");
        let writers: Vec<_> = (6..=40)
            .map(|token| {
                let file = file.clone();
                std::thread::spawn(move || (token, file.write_checked(token).unwrap()))
            })
            .collect();
        for writer in writers {
            let (token, write) = writer.join().unwrap();
            assert!(
                write.highest_before <= 40,
                "{token}: read {}",
                write.highest_before
            );
            assert_eq!(write.accepted, token >= write.highest_before, "{token}");
        }
        let last = file.write_checked(0).unwrap();
        assert!(!last.accepted);
        assert_eq!(last.highest_before, 40);
    }
}

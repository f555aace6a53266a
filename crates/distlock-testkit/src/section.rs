//! The critical-section protocol that holders of one lock run inside each hold, whoever they
//! are: distlock in a Rust test, or Curator in the Java holder ([`crate::curator`], whose
//! `CuratorHolder.java` implements the same steps). It lives in a directory of files, so any
//! two holders that are inside at once, in any process or language, are caught by one of them.
//!
//! The directory:
//! * `counter`: the number of exclusive sections completed (decimal; missing means 0);
//! * `inside-writer`: exists while an exclusive holder is inside, created with `O_EXCL`;
//! * `inside-reader-ID`: one per shared holder inside.
//!
//! An exclusive holder (a mutex, a write lock) creates `inside-writer` exclusively (it already
//! exists: overlap), checks for reader markers (overlap), reads the counter, holds, checks for
//! reader markers again and that the counter did not move (overlap), writes the counter + 1
//! (a temporary file renamed over it) and deletes its marker. A shared holder (a read lock)
//! creates its own marker, checks for `inside-writer` (overlap) and other readers (shared, which
//! is allowed), holds, checks both again and deletes its marker. Either side creates its marker
//! before it looks for the other's, so of two holders inside at once at least one sees the other.
//!
//! An overlapping holder still finishes its section (and writes the counter), so the overlap
//! also shows as a lost increment, and reports the overlap when it leaves.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const COUNTER: &str = "counter";
const WRITER: &str = "inside-writer";
const READER_PREFIX: &str = "inside-reader-";

/// Why a section failed: holders overlapped, or the directory could not be used.
#[derive(Debug)]
pub enum SectionError {
    /// Two holders were inside at once where the lock should have kept them apart.
    Overlap(String),
    /// Reading or writing the protocol's files failed.
    Io(std::io::Error),
}

impl SectionError {
    /// Whether holders overlapped.
    pub fn is_overlap(&self) -> bool {
        matches!(self, SectionError::Overlap(_))
    }
}

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SectionError::Overlap(why) => write!(f, "holders overlapped: {why}"),
            SectionError::Io(e) => write!(f, "the critical-section directory failed: {e}"),
        }
    }
}

impl std::error::Error for SectionError {}

impl From<std::io::Error> for SectionError {
    fn from(e: std::io::Error) -> Self {
        SectionError::Io(e)
    }
}

/// Inside an exclusive section: [`leave`](Self::leave) ends it.
#[must_use = "a section is left with leave(), which reports overlaps"]
pub struct ExclusiveSection {
    dir: PathBuf,
    owns_marker: bool,
    counter: u64,
    overlaps: Vec<String>,
}

/// Enters an exclusive section in `dir` (the holder has just acquired a mutex or a write lock).
/// Overlaps seen on the way in are reported by [`ExclusiveSection::leave`].
pub fn enter_exclusive(dir: &Path) -> Result<ExclusiveSection, SectionError> {
    let mut overlaps = Vec::new();
    let owns_marker = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dir.join(WRITER))
    {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            overlaps.push("another exclusive holder is inside".to_string());
            false
        }
        Err(e) => return Err(e.into()),
    };
    let readers = readers(dir, None)?;
    if !readers.is_empty() {
        overlaps.push(format!("readers are inside: {readers:?}"));
    }
    Ok(ExclusiveSection {
        dir: dir.to_path_buf(),
        owns_marker,
        counter: read_counter(dir)?,
        overlaps,
    })
}

impl ExclusiveSection {
    /// Leaves the section (the holder is about to release): the counter + 1 is written and the
    /// marker deleted. Returns the counter as written, or the overlaps seen in the section.
    pub fn leave(mut self) -> Result<u64, SectionError> {
        let readers = readers(&self.dir, None)?;
        if !readers.is_empty() {
            self.overlaps
                .push(format!("readers came inside: {readers:?}"));
        }
        let now = read_counter(&self.dir)?;
        if now != self.counter {
            self.overlaps.push(format!(
                "the counter moved from {} to {now} while held",
                self.counter
            ));
        }
        let next = self.counter + 1;
        write_counter(&self.dir, next)?;
        if self.owns_marker {
            std::fs::remove_file(self.dir.join(WRITER))?;
        }
        if self.overlaps.is_empty() {
            Ok(next)
        } else {
            Err(SectionError::Overlap(self.overlaps.join("; ")))
        }
    }
}

/// Inside a shared section: [`leave`](Self::leave) ends it.
#[must_use = "a section is left with leave(), which reports overlaps"]
pub struct SharedSection {
    dir: PathBuf,
    marker: PathBuf,
    saw_other: bool,
    overlaps: Vec<String>,
}

/// Enters a shared section in `dir` (the holder has just acquired a read lock). Overlaps seen
/// on the way in are reported by [`SharedSection::leave`].
pub fn enter_shared(dir: &Path) -> Result<SharedSection, SectionError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "{READER_PREFIX}rust-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let marker = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)?;
    let mut section = SharedSection {
        dir: dir.to_path_buf(),
        marker,
        saw_other: false,
        overlaps: Vec::new(),
    };
    section.check()?;
    Ok(section)
}

impl SharedSection {
    fn check(&mut self) -> Result<(), SectionError> {
        if self.dir.join(WRITER).exists() {
            self.overlaps
                .push("an exclusive holder is inside".to_string());
        }
        let own = self.marker.file_name().and_then(|n| n.to_str());
        self.saw_other |= !readers(&self.dir, own)?.is_empty();
        Ok(())
    }

    /// Leaves the section (the holder is about to release) and deletes its marker. Returns
    /// whether another reader was inside with it (allowed: readers share), or the overlaps seen.
    pub fn leave(mut self) -> Result<bool, SectionError> {
        self.check()?;
        std::fs::remove_file(&self.marker)?;
        if self.overlaps.is_empty() {
            Ok(self.saw_other)
        } else {
            Err(SectionError::Overlap(self.overlaps.join("; ")))
        }
    }
}

/// An exclusive section of `hold` in `dir`: enter, sleep, leave. Returns the counter written.
pub async fn exclusive_section(dir: &Path, hold: Duration) -> Result<u64, SectionError> {
    let section = enter_exclusive(dir)?;
    tokio::time::sleep(hold).await;
    section.leave()
}

/// A shared section of `hold` in `dir`: enter, sleep, leave. Returns whether another reader
/// was inside with it.
pub async fn shared_section(dir: &Path, hold: Duration) -> Result<bool, SectionError> {
    let section = enter_shared(dir)?;
    tokio::time::sleep(hold).await;
    section.leave()
}

/// The number of exclusive sections completed in `dir`.
pub fn read_counter(dir: &Path) -> Result<u64, SectionError> {
    match std::fs::read_to_string(dir.join(COUNTER)) {
        Ok(text) => text.trim().parse().map_err(|e| {
            SectionError::Io(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("counter {text:?}: {e}"),
            ))
        }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

fn write_counter(dir: &Path, value: u64) -> Result<(), SectionError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        "{COUNTER}.tmp-rust-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, format!("{value}\n"))?;
    std::fs::rename(&tmp, dir.join(COUNTER))?;
    Ok(())
}

/// The reader markers in `dir`, but `own`.
fn readers(dir: &Path, own: Option<&str>) -> Result<Vec<String>, SectionError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(READER_PREFIX) && Some(name.as_str()) != own {
            found.push(name);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_sections_one_after_another_count() {
        let dir = tempfile::tempdir().unwrap();
        for expected in 1..=3 {
            let section = enter_exclusive(dir.path()).unwrap();
            assert_eq!(section.leave().unwrap(), expected);
        }
        assert_eq!(read_counter(dir.path()).unwrap(), 3);
    }

    #[test]
    fn two_exclusive_sections_at_once_overlap() {
        let dir = tempfile::tempdir().unwrap();
        let first = enter_exclusive(dir.path()).unwrap();
        let second = enter_exclusive(dir.path()).unwrap();
        assert!(second.leave().unwrap_err().is_overlap());
        // The first sees the counter moved under it: the lost increment.
        assert!(first.leave().unwrap_err().is_overlap());
        assert_eq!(read_counter(dir.path()).unwrap(), 1);
    }

    #[test]
    fn a_reader_inside_with_a_writer_overlaps_either_way() {
        let dir = tempfile::tempdir().unwrap();
        // Each looks for the other on the way in and out, so both see it here.
        let writer = enter_exclusive(dir.path()).unwrap();
        let reader = enter_shared(dir.path()).unwrap();
        assert!(writer.leave().unwrap_err().is_overlap());
        assert!(reader.leave().unwrap_err().is_overlap());

        let reader = enter_shared(dir.path()).unwrap();
        let writer = enter_exclusive(dir.path()).unwrap();
        assert!(reader.leave().unwrap_err().is_overlap());
        assert!(writer.leave().unwrap_err().is_overlap());
    }

    #[test]
    fn a_reader_that_came_and_went_inside_a_writer_is_seen_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let writer = enter_exclusive(dir.path()).unwrap();
        assert!(
            enter_shared(dir.path())
                .unwrap()
                .leave()
                .unwrap_err()
                .is_overlap()
        );
        // The writer found no reader marker either time: the reader's report is the one.
        assert_eq!(writer.leave().unwrap(), 1);
    }

    #[test]
    fn readers_share() {
        let dir = tempfile::tempdir().unwrap();
        let first = enter_shared(dir.path()).unwrap();
        let second = enter_shared(dir.path()).unwrap();
        assert!(first.leave().unwrap());
        assert!(second.leave().unwrap());
        assert!(!enter_shared(dir.path()).unwrap().leave().unwrap());
        // Nothing is left behind: a writer now enters cleanly.
        assert_eq!(enter_exclusive(dir.path()).unwrap().leave().unwrap(), 1);
    }
}

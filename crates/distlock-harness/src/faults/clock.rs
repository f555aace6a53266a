//! A server's wall clock jumped by the test while nothing changes for its clients: the server
//! runs with `clock_shim.c` preloaded, which adds the offset held in a file to every wall-clock
//! reading it makes; the test (or `distlock torture --clock-file`) moves the offset.
//!
//! The file holds signed decimal seconds (`+2.5`), the relative format libfaketime reads from
//! `FAKETIME_TIMESTAMP_FILE` (with `FAKETIME_NO_CACHE=1`), so a server run under libfaketime can
//! be driven by the same file. libfaketime itself cannot run redis-server 7 (its jemalloc and
//! libfaketime's hooks recurse at start), hence the shim. Programs that read the clock without
//! the C library (Go's runtime: etcd) are not affected by either.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::Failure;

const SHIM_SOURCE: &str = include_str!("clock_shim.c");

/// The environment variable naming the offset file, read by the shim.
pub const CLOCK_FILE_VAR: &str = "DISTLOCK_CLOCK_FILE";

/// One wall-clock offset, in a file of its own, for the servers started under it.
pub struct ServerClock {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl ServerClock {
    /// A clock at offset 0 (the shim is compiled now if it was not yet: a missing C compiler
    /// fails here, not in a server's start).
    pub fn new() -> Result<Self, Failure> {
        shim()?;
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("clock-offset");
        write_offset(&file, 0)?;
        Ok(ServerClock { _dir: dir, file })
    }

    /// The offset file (for `distlock torture --clock-file`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Moves the servers' wall clock forward by `by`.
    pub fn jump(&self, by: Duration) -> Result<(), Failure> {
        jump_forward(&self.file, by).map_err(Into::into)
    }

    /// The variables a server process needs to run under this clock.
    pub fn env(&self) -> Result<Vec<(&'static str, OsString)>, Failure> {
        Ok(vec![
            ("LD_PRELOAD", shim()?.into_os_string()),
            (CLOCK_FILE_VAR, self.file.clone().into_os_string()),
        ])
    }
}

/// Moves the offset in `file` forward by `by`: the new offset is written to a file beside it,
/// which then replaces it, so a server never reads half an offset.
pub fn jump_forward(file: &Path, by: Duration) -> std::io::Result<()> {
    let now = match std::fs::read_to_string(file) {
        Ok(text) => parse_offset(&text).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} does not hold an offset in seconds such as +2.5: {text:?}",
                    file.display()
                ),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    write_offset(file, now + by.as_nanos() as i128)
}

/// `+S.NNNNNNNNN` seconds (or `-…`), as nanoseconds.
fn parse_offset(text: &str) -> Option<i128> {
    let text = text.trim().trim_end_matches('s');
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut nanos: i128 = 0;
    for (i, c) in fraction.chars().enumerate() {
        let digit = c.to_digit(10)? as i128;
        if i < 9 {
            nanos += digit * 10i128.pow(8 - i as u32);
        }
    }
    let ns = whole * 1_000_000_000 + nanos;
    Some(if negative { -ns } else { ns })
}

fn write_offset(file: &Path, ns: i128) -> std::io::Result<()> {
    let sign = if ns < 0 { '-' } else { '+' };
    let ns = ns.unsigned_abs();
    let text = format!("{sign}{}.{:09}\n", ns / 1_000_000_000, ns % 1_000_000_000);
    let mut next = file.as_os_str().to_owned();
    next.push(".next");
    std::fs::write(&next, text)?;
    std::fs::rename(&next, file)
}

/// The shim, compiled once per test process into the temporary directory (named by its
/// source's hash, so processes and versions never share a half-written one).
fn shim() -> Result<PathBuf, Failure> {
    static SHIM: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    SHIM.get_or_init(compile_shim).clone().map_err(Failure)
}

fn compile_shim() -> Result<PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    SHIM_SOURCE.hash(&mut hasher);
    let dir = std::env::temp_dir().join(format!("distlock-clock-shim-{:016x}", hasher.finish()));
    let shim = dir.join("clock_shim.so");
    if shim.is_file() {
        return Ok(shim);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let source = dir.join(format!("clock_shim.{}.c", std::process::id()));
    let built = dir.join(format!("clock_shim.{}.so", std::process::id()));
    std::fs::write(&source, SHIM_SOURCE).map_err(|e| format!("writing the shim: {e}"))?;
    // -Wno-nonnull-compare: glibc declares gettimeofday's first argument non-null, yet callers
    // may pass NULL (for the time zone alone), so the shim checks it anyway.
    let out = Command::new("cc")
        .args([
            "-O2",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Wno-nonnull-compare",
            "-o",
        ])
        .arg(&built)
        .arg(&source)
        .output()
        .map_err(|e| format!("the clock shim needs a C compiler, cc ({e}): apt-get install gcc"))?;
    if !out.status.success() {
        return Err(format!(
            "compiling the clock shim failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::rename(&built, &shim).map_err(|e| format!("placing the shim: {e}"))?;
    let _ = std::fs::remove_file(&source);
    Ok(shim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_back_and_accumulate() {
        assert_eq!(parse_offset("+2.5\n"), Some(2_500_000_000));
        assert_eq!(parse_offset("-1"), Some(-1_000_000_000));
        assert_eq!(parse_offset("+0.000000001"), Some(1));
        assert_eq!(parse_offset("3s"), Some(3_000_000_000));
        assert_eq!(parse_offset("soon"), None);
        assert_eq!(parse_offset(""), None);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("offset");
        jump_forward(&file, Duration::from_millis(1500)).unwrap();
        jump_forward(&file, Duration::from_millis(700)).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "+2.200000000\n");
    }

    /// A program under the shim sees its wall clock jump with the file, and its monotonic
    /// clock not at all.
    #[test]
    fn a_process_under_the_shim_sees_the_jump() {
        let clock = ServerClock::new().unwrap();
        let read = || {
            let mut command = Command::new("sh");
            command.args(["-c", "date +%s; cat /proc/uptime"]);
            for (k, v) in clock.env().unwrap() {
                command.env(k, v);
            }
            let out = String::from_utf8(command.output().unwrap().stdout).unwrap();
            let mut lines = out.lines();
            let wall: i64 = lines.next().unwrap().parse().unwrap();
            let up: f64 = lines
                .next()
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (wall, up)
        };
        let (wall0, up0) = read();
        clock.jump(Duration::from_secs(3600)).unwrap();
        let (wall1, up1) = read();
        assert!(
            (3599..3700).contains(&(wall1 - wall0)),
            "{wall0} -> {wall1}"
        );
        assert!(up1 - up0 < 60.0, "uptime {up0} -> {up1}");
    }
}

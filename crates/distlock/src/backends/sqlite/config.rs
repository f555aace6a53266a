//! `sqlite:PATH` → where the file is.

use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};

/// Parses `sqlite:PATH` or `sqlite://PATH` (`sqlite:///abs/path` for an absolute path).
pub(super) fn parse(url: &str) -> Result<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("{:?} is not an sqlite: URL", crate::client::redact(url)),
            )
        })?;
    let path = rest.split(['?', '#']).next().unwrap_or("");
    if path.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "sqlite: needs a file path, e.g. sqlite:./distlock.db",
        ));
    }
    if path == ":memory:" || path.starts_with("file::memory:") {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "an in-memory SQLite database cannot be shared between processes; give a file path",
        ));
    }
    Ok(PathBuf::from(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(parse("sqlite:a.db").unwrap(), PathBuf::from("a.db"));
        assert_eq!(parse("sqlite://./a.db").unwrap(), PathBuf::from("./a.db"));
        assert_eq!(
            parse("sqlite:///tmp/a.db").unwrap(),
            PathBuf::from("/tmp/a.db")
        );
        assert_eq!(parse("sqlite:").unwrap_err().kind(), ErrorKind::InvalidUrl);
        assert_eq!(
            parse("sqlite::memory:").unwrap_err().kind(),
            ErrorKind::InvalidUrl
        );
    }
}

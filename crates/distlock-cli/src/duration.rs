//! Durations on the command line: `500ms`, `2s`, `1m`, `1h30m`.

use std::time::Duration;

/// Parses a human duration for clap.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration like 500ms, 2s or 1m ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse("1m").unwrap(), Duration::from_secs(60));
        assert!(parse("soon").is_err());
        assert!(parse("").is_err());
    }
}

//! Durations on the command line: `500ms`, `2s`, `1m`, `1h30m`.

use std::time::Duration;

/// Parses a human duration for clap. clap prints the value itself in front of the message, so the
/// message only says what is wrong with it.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err("a duration cannot be negative; give one like 500ms, 2s or 1m".into());
    }
    humantime::parse_duration(s).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            "too long: a duration must be under 584 billion years".into()
        }
        e => format!("not a duration like 500ms, 2s or 1m ({e})"),
    })
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

    #[test]
    fn negative_and_unrepresentable_durations_say_why() {
        assert!(parse("-1s").unwrap_err().contains("negative"));
        assert!(
            parse("99999999999999999999s")
                .unwrap_err()
                .contains("too long")
        );
        assert!(parse("584942417355y").unwrap_err().contains("too long"));
        assert!(parse("500000000000y").is_ok());
    }
}

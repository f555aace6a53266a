//! How the CLI prints an error: the error and each cause, once.

use std::error::Error;

/// `error: cause: cause's cause`, like anyhow's `{:#}`, but a cause whose text is already on the
/// line is left out: some drivers (redis-rs, sqlx) put their cause's text in their own message
/// and return that cause as `source()` too.
pub(crate) fn chain(error: &(dyn Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn Error + 'static))
        }
    }

    #[test]
    fn each_cause_is_printed_once() {
        let refused = Layer("Connection refused", None);
        let driver = Layer(
            "error communicating: Connection refused",
            Some(Box::new(refused)),
        );
        let ours = Layer(
            "connection failure: connecting to h",
            Some(Box::new(driver)),
        );
        assert_eq!(
            chain(&ours),
            "connection failure: connecting to h: error communicating: Connection refused"
        );
    }
}

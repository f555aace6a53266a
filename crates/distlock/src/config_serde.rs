//! How the stores' typed configurations read durations with the `serde` feature: the same
//! text a URL parameter takes (`10s`, `250ms`, or whole seconds as a bare number), so a setting
//! reads alike in a URL, a TOML file and JSON. Use on a field as
//! `#[cfg_attr(feature = "serde", serde(with = "crate::config_serde::duration"))]` (or
//! `optional_duration` for an `Option<Duration>`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

struct DurationText;

impl Visitor<'_> for DurationText {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"10s\" or \"250ms\", or whole seconds as a number")
    }

    fn visit_u64<E: de::Error>(self, secs: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(secs))
    }

    fn visit_i64<E: de::Error>(self, secs: i64) -> Result<Duration, E> {
        u64::try_from(secs)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("{secs}: a duration cannot be negative")))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        crate::url::parse_duration(text).ok_or_else(|| {
            E::custom(format!(
                "{text:?} is not a duration: write it as \"10s\", \"250ms\" or a whole number of \
                 seconds"
            ))
        })
    }
}

/// A required [`Duration`] field.
pub(crate) mod duration {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationText)
    }
}

/// An `Option<Duration>` field (absent or `null`: `None`).
pub(crate) mod optional_duration {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Text(#[serde(with = "super::duration")] Duration);

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<Text>::deserialize(d)?.map(|Text(d)| d))
    }
}

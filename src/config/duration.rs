//! Durations in the configuration: the human-readable form (`150ms`, `30s`, `5m`, `1h`,
//! `1d`, or a bare number of milliseconds), and [`NonZeroDuration`] for the intervals and
//! timeouts that zero would break. Also `nz!`, the non-zero integer literals of the
//! `Default` impls.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Parses `150ms`, `30s`, `5m`, `1h`, `1d`, or a bare number of milliseconds.
///
/// ```
/// use std::time::Duration;
/// use otpmcp::config::parse_duration;
///
/// assert_eq!(parse_duration("150ms"), Ok(Duration::from_millis(150)));
/// assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "{text:?} is not a duration (try \"30s\" or \"150ms\")"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    let unit = unit.trim();
    let ms_per = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, ms)| *ms)
        .ok_or_else(|| format!("unknown unit {unit:?} in {text:?} (use ms, s, m, h or d)"))?;
    n.checked_mul(ms_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Each unit and its milliseconds, largest first (the order [`format_duration`] tries
/// them); a bare number is milliseconds.
const UNITS: [(&str, u64); 6] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
    ("", 1),
];

/// The text [`parse_duration`] reads back to `d` (to the millisecond), in the largest
/// unit that divides it: `5m`, `1500ms`, `0s`.
fn format_duration(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".into();
    }
    let (unit, per) = UNITS
        .iter()
        .find(|(_, per)| ms % per == 0)
        .copied()
        .unwrap_or(("ms", 1));
    format!("{}{unit}", ms / per)
}

/// A duration greater than zero: an interval or a timeout that zero would turn into a
/// busy loop or an instant failure. A `0s` in a file or the environment is refused at
/// load, with an error that names the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    /// `d`, unless it is zero.
    pub const fn new(d: Duration) -> Option<Self> {
        if d.is_zero() { None } else { Some(Self(d)) }
    }

    /// `secs` seconds, for literals.
    ///
    /// # Panics
    ///
    /// When `secs` is 0 (at compile time in a `const` context); use [`NonZeroDuration::new`]
    /// for a value that may be zero.
    pub const fn from_secs(secs: u64) -> Self {
        match Self::new(Duration::from_secs(secs)) {
            Some(d) => d,
            None => panic!("NonZeroDuration::from_secs(0)"),
        }
    }

    /// `ms` milliseconds, for literals.
    ///
    /// # Panics
    ///
    /// When `ms` is 0, as [`NonZeroDuration::from_secs`].
    pub const fn from_millis(ms: u64) -> Self {
        match Self::new(Duration::from_millis(ms)) {
            Some(d) => d,
            None => panic!("NonZeroDuration::from_millis(0)"),
        }
    }

    /// The duration.
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl From<NonZeroDuration> for Duration {
    fn from(d: NonZeroDuration) -> Self {
        d.0
    }
}

impl<'de> Deserialize<'de> for NonZeroDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = human_duration::deserialize(d)?;
        Self::new(value).ok_or_else(|| serde::de::Error::custom("must be greater than zero"))
    }
}

impl Serialize for NonZeroDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        human_duration::serialize(&self.0, s)
    }
}

/// A duration's spelling, as JSON Schema states it for `config docs`: a whole number and a
/// unit (`format: "duration"`); `non_zero` adds that a zero is refused.
fn duration_schema(non_zero: bool) -> schemars::Schema {
    let mut schema = schemars::json_schema!({
        "type": "string",
        "format": "duration",
        "pattern": r"^\s*[0-9]+\s*(ms|s|m|h|d)?\s*$",
    });
    if non_zero {
        schema.insert(
            "not".into(),
            serde_json::json!({ "pattern": r"^\s*0+\s*[a-z]*\s*$" }),
        );
    }
    schema
}

impl schemars::JsonSchema for NonZeroDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NonZeroDuration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        duration_schema(true)
    }
}

/// The schema of a [`Duration`] field written through [`human_duration`] (zero allowed),
/// named in its `#[schemars(with = "HumanDuration")]`.
pub(super) struct HumanDuration;

impl schemars::JsonSchema for HumanDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        duration_schema(false)
    }
}

/// Serde glue: durations are written as human-readable strings (or integer milliseconds).
pub(super) mod human_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Millis(u64),
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Text(text) => super::parse_duration(&text).map_err(serde::de::Error::custom),
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
        }
    }

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }
}

/// A non-zero integer literal (`NonZeroUsize`, `NonZeroU32`, … as the place it goes
/// wants), checked at compile time.
macro_rules! nz {
    ($n:expr) => {
        const {
            match ::std::num::NonZero::new($n) {
                Some(n) => n,
                None => panic!("a non-zero literal is zero"),
            }
        }
    };
}
pub(super) use nz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        let ms = Duration::from_millis;
        let cases = [
            ("150ms", Ok(ms(150))),
            ("30s", Ok(ms(30_000))),
            ("5m", Ok(ms(300_000))),
            ("1h", Ok(ms(3_600_000))),
            ("1d", Ok(ms(86_400_000))),
            ("250", Ok(ms(250))),
            (" 2s ", Ok(ms(2_000))),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), want, "{text}");
        }
        for bad in [
            "",
            "s",
            "ten seconds",
            "5 weeks",
            "-1s",
            "1.5s",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn durations_are_written_in_their_largest_whole_unit_and_read_back() {
        let cases = [
            (0, "0s"),
            (150, "150ms"),
            (1_500, "1500ms"),
            (30_000, "30s"),
            (300_000, "5m"),
            (86_400_000, "1d"),
            (90_000_000, "25h"),
        ];
        for (ms, text) in cases {
            let d = Duration::from_millis(ms);
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text), Ok(d));
        }
    }

    #[test]
    fn a_non_zero_duration_refuses_zero() {
        assert_eq!(NonZeroDuration::new(Duration::ZERO), None);
        assert_eq!(
            NonZeroDuration::new(Duration::from_millis(150)),
            Some(NonZeroDuration::from_millis(150))
        );
        assert_eq!(NonZeroDuration::from_secs(2).get(), Duration::from_secs(2));
    }
}

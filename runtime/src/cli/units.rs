//! The human units flags and `CloudProvider` fields take, one definition for both: durations
//! as Go's `time.ParseDuration` reads them and Kubernetes duration fields take them (`500ms`,
//! `30s`, `5m`, `1h30m`; a number needs a unit, except `0`), and sizes as bytes or binary
//! Kubernetes quantities (`65536`, `64Ki`, `64Mi`, `1Gi`). The CRD's patterns
//! ([`DURATION_PATTERN`], [`SIZE_PATTERN`]) say the same, so the API server refuses what the
//! parsers would.

use std::time::Duration;

/// What [`parse_duration_or_zero`] takes, as the CRD's schema checks it.
pub const DURATION_PATTERN: &str = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$";

/// What [`parse_size`] takes, as the CRD's schema checks it.
pub const SIZE_PATTERN: &str = r"^[0-9]+(Ki|Mi|Gi)?$";

/// A duration as Go's `time.ParseDuration` reads it (`500ms`, `30s`, `5m`, `1h30m`). Zero
/// and negative durations are refused, and so is a number without a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    if duration.is_zero() {
        return Err(format!("{text:?} must be more than zero"));
    }
    Ok(duration)
}

/// As [`parse_duration`], but `0` is allowed (for flags where it means "off").
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    let not_a_duration =
        || format!("{text:?} is not a duration (expected e.g. 500ms, 30s, 5m, 1h30m)");
    if text.is_empty() {
        return Err(not_a_duration());
    }
    let mut rest = text;
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        // Digits, with a fraction after a dot: `1.5`, not `.5` or `1.`.
        if number.starts_with('.') || number.ends_with('.') {
            return Err(not_a_duration());
        }
        let number: f64 = number.parse().map_err(|_| not_a_duration())?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "" if text == "0" => 1.0,
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" if rest.len() == text.len() && after.is_empty() => {
                return Err(format!(
                    "{text:?} has no unit: durations take ms, s, m or h ({text}s for seconds)"
                ));
            }
            "" => return Err(not_a_duration()),
            _ => {
                return Err(format!(
                    "{text:?} has unknown unit {unit:?} (use ms, s, m or h)"
                ));
            }
        };
        seconds += number * scale;
        rest = after;
    }
    if !seconds.is_finite() || seconds > 86_400.0 * 365.0 {
        return Err(format!("{text:?} must be less than a year"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A number of bytes, or of `Ki`, `Mi` or `Gi` (`65536`, `64Ki`, `64Mi`, `1Gi`). Decimal and
/// `B`-suffixed units (`64M`, `64MB`, `64MiB`) are refused: they would leave unsaid whether
/// 64 MB is 64,000,000 bytes or 64 Mi.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (expected e.g. 65536, 64Ki, 64Mi, 1Gi)"))?;
    let factor: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?}: sizes are bytes or Ki, Mi, Gi ({number}Mi is {number} x 1024 x 1024 bytes)"
            ));
        }
    };
    match number.checked_mul(factor) {
        Some(0) => Err(format!("{text:?} must be more than zero")),
        Some(bytes) => Ok(bytes),
        None => Err(format!("{text:?} is too large")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert!(
            parse_duration("10s5")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(parse_duration("0s").unwrap_err().contains("more than zero"));
        assert!(
            parse_duration("5 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64Mi"), Ok(64 << 20));
        for unlisted in ["64MiB", "64MB", "64M", "1G", "8k", "64Mi B", "64BB"] {
            assert!(
                parse_size(unlisted).unwrap_err().contains("unknown unit"),
                "{unlisted}"
            );
        }
        assert!(parse_size("0").unwrap_err().contains("more than zero"));
        assert!(parse_size("12XB").unwrap_err().contains("unknown unit"));
        assert!(
            parse_size("99999999999Gi")
                .unwrap_err()
                .contains("too large")
        );
    }

    /// The CRD's patterns take what the parsers take, and refuse what they refuse.
    #[test]
    fn the_schema_patterns_agree_with_the_parsers() {
        let duration = regex::Regex::new(DURATION_PATTERN).unwrap();
        for text in [
            "0", "500ms", "30s", "1.5m", "1h30m", "1m30s", "10ns", "3us", "3µs", "5", "1.5",
            "10s5", "s", "", "5 s", "-1s", "1d", "0s", ".5s", "1.s", " 5s", "5s ", "1..5s",
        ] {
            assert_eq!(
                duration.is_match(text),
                parse_duration_or_zero(text).is_ok(),
                "{text:?}"
            );
        }
        let size = regex::Regex::new(SIZE_PATTERN).unwrap();
        for text in [
            "65536", "64Ki", "64Mi", "1Gi", "64MiB", "64MB", "64M", "1G", "8k", "Mi", "", "1.5Mi",
            " 64Mi", "64Mi ",
        ] {
            assert_eq!(size.is_match(text), parse_size(text).is_ok(), "{text:?}");
        }
    }
}

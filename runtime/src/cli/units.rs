//! Parsing of the human units flags take: durations (`500ms`, `30s`, `5m`, `1h`) and sizes
//! (`65536`, `64Ki`, `64Mi`, `1Gi`, also `KiB`/`MiB`/`GiB` and decimal `K`/`M`/`G`).

use std::time::Duration;

/// A duration as Go's `time.ParseDuration` reads it (`500ms`, `30s`, `5m`, `1h30m`), or a
/// bare number of seconds. Zero and negative durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration_or_zero(text)?;
    if duration.is_zero() {
        return Err(format!("{:?} must be more than zero", text.trim()));
    }
    Ok(duration)
}

/// As [`parse_duration`], but `0` is allowed (for flags where it means "off").
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    let text = text.trim();
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
        let number: f64 = number.parse().map_err(|_| not_a_duration())?;
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = match unit {
            "" if rest.len() == text.len() && after.is_empty() => 1.0,
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
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

/// `65536`, `64Ki`, `64Mi`, `1Gi`, `64MiB`, `64M` (decimal).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (expected e.g. 65536, 64Ki, 64Mi, 1Gi)"))?;
    let factor: u64 = match unit.trim_end_matches('B') {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "K" | "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?} (use Ki, Mi, Gi, K, M or G)"
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
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
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
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1_000_000_000));
        assert!(parse_size("0").unwrap_err().contains("more than zero"));
        assert!(parse_size("12XB").unwrap_err().contains("unknown unit"));
        assert!(
            parse_size("99999999999Gi")
                .unwrap_err()
                .contains("too large")
        );
    }
}

//! Parsing of the human units flags take: durations (`500ms`, `30s`, `5m`, `1h`) and sizes
//! (`65536`, `64Ki`, `64Mi`, `1Gi`, also `KiB`/`MiB`/`GiB` and decimal `K`/`M`/`G`).

use std::time::Duration;

/// `500ms`, `30s`, `5m`, `1h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (expected e.g. 500ms, 30s, 5m)"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => {
            return Err(format!(
                "{text:?} has unknown unit {unit:?} (use ms, s, m or h)"
            ));
        }
    };
    if seconds <= 0.0 || !seconds.is_finite() || seconds > 86_400.0 * 365.0 {
        return Err(format!(
            "{text:?} must be more than zero and less than a year"
        ));
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

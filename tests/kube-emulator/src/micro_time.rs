//! `metav1.MicroTime` as upstream decodes it: Go's `time.Parse` with the
//! layout `RFC3339Micro` (`2006-01-02T15:04:05.000000Z07:00`), which takes
//! exactly six fractional digits, and the `*time.ParseError` text a real
//! server puts in its 400 when a value does not fit. k8s-openapi's
//! `MicroTime` accepts any RFC 3339 time, so the emulator checks the
//! string first.

/// The layout, as Go's error messages name it.
const LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

/// One element of the layout: the literal text before it, and what it reads.
#[derive(Clone, Copy)]
enum Element {
    Year,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    /// `.000000`: a period or comma and exactly six digits.
    Micros,
    /// `Z07:00`: `Z`, or a sign and `hh:mm`.
    Zone,
}

/// `(prefix, element, the element's text in the layout)`, in layout order.
const ELEMENTS: [(&str, Element, &str); 8] = [
    ("", Element::Year, "2006"),
    ("-", Element::Month, "01"),
    ("-", Element::Day, "02"),
    ("T", Element::Hour, "15"),
    (":", Element::Minute, "04"),
    (":", Element::Second, "05"),
    ("", Element::Micros, ".000000"),
    ("", Element::Zone, "Z07:00"),
];

/// Checks `value` as `time.Parse(RFC3339Micro, value)` would, returning
/// Go's error text, e.g. `parsing time "2024-01-01T00:00:00Z" as
/// "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000"`.
pub fn check(value: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let mut rest = bytes;
    let (mut year, mut month, mut day) = (0i64, 0u32, 0u32);
    for (prefix, element, layout_text) in ELEMENTS {
        let mut expected = prefix.as_bytes();
        while let Some((&want, more)) = expected.split_first() {
            match rest.split_first() {
                Some((&got, after)) if got == want => {
                    rest = after;
                    expected = more;
                }
                _ => return Err(cannot_parse(value, rest, prefix)),
            }
        }
        let hold = rest;
        let parsed = match element {
            Element::Year => fixed_digits(rest, 4).map(|(n, after)| {
                year = n;
                (after, None)
            }),
            Element::Month => two_digits(rest).map(|(n, after)| {
                month = n as u32;
                (after, (!(1..=12).contains(&n)).then_some("month"))
            }),
            Element::Day => two_digits(rest).map(|(n, after)| {
                day = n as u32;
                (after, None)
            }),
            Element::Hour => hour(rest),
            Element::Minute => {
                two_digits(rest).map(|(n, after)| (after, (n >= 60).then_some("minute")))
            }
            Element::Second => {
                two_digits(rest).map(|(n, after)| (after, (n >= 60).then_some("second")))
            }
            Element::Micros => micros(rest),
            Element::Zone => zone(rest),
        };
        match parsed {
            Some((after, None)) => rest = after,
            Some((_, Some(what))) => {
                return Err(format!(
                    "parsing time {}: {what} out of range",
                    go_quote(bytes)
                ));
            }
            None => return Err(cannot_parse(value, hold, layout_text)),
        }
    }
    if !rest.is_empty() {
        return Err(format!(
            "parsing time {}: extra text: {}",
            go_quote(bytes),
            go_quote(rest)
        ));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(format!(
            "parsing time {}: day out of range",
            go_quote(bytes)
        ));
    }
    Ok(())
}

fn cannot_parse(value: &str, rest: &[u8], layout_elem: &str) -> String {
    format!(
        "parsing time {} as {}: cannot parse {} as {}",
        go_quote(value.as_bytes()),
        go_quote(LAYOUT.as_bytes()),
        go_quote(rest),
        go_quote(layout_elem.as_bytes())
    )
}

/// `n` digits as a number (Go's `atoi` of a fixed-width field).
fn fixed_digits(s: &[u8], n: usize) -> Option<(i64, &[u8])> {
    let digits = s.get(..n)?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits
        .iter()
        .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
    Some((value, &s[n..]))
}

/// Go's `getnum(s, true)`: exactly two digits.
fn two_digits(s: &[u8]) -> Option<(i64, &[u8])> {
    fixed_digits(s, 2)
}

/// `15`: one or two digits (`getnum(s, false)`), below 24.
fn hour(s: &[u8]) -> Option<(&[u8], Option<&'static str>)> {
    let (n, after) = match s {
        [a, b, after @ ..] if a.is_ascii_digit() && b.is_ascii_digit() => {
            (i64::from(a - b'0') * 10 + i64::from(b - b'0'), after)
        }
        [a, after @ ..] if a.is_ascii_digit() => (i64::from(a - b'0'), after),
        _ => return None,
    };
    Some((after, (n >= 24).then_some("hour")))
}

/// `.000000`: seven bytes, a period or comma and six digits (Go's `atoi`
/// reads them, so a sign is allowed and a negative fraction is out of range).
fn micros(s: &[u8]) -> Option<(&[u8], Option<&'static str>)> {
    let field = s.get(..7)?;
    if !matches!(field[0], b'.' | b',') {
        return None;
    }
    let (negative, digits) = match field[1] {
        b'-' => (true, &field[2..]),
        b'+' => (false, &field[2..]),
        _ => (false, &field[1..]),
    };
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let nonzero = digits.iter().any(|d| *d != b'0');
    Some((
        &s[7..],
        (negative && nonzero).then_some("fractional second"),
    ))
}

/// `Z07:00`: `Z`, or `±hh:mm`.
fn zone(s: &[u8]) -> Option<(&[u8], Option<&'static str>)> {
    if let [b'Z', after @ ..] = s {
        return Some((after, None));
    }
    let field = s.get(..6)?;
    if field[3] != b':' {
        return None;
    }
    let hours = two_digits(&field[1..3]).map(|(n, _)| n);
    let minutes = hours.and(two_digits(&field[4..6]).map(|(n, _)| n));
    // As Go: a range error wins over a malformed sign or digits.
    let (h, m) = (hours.unwrap_or(0), minutes.unwrap_or(0));
    if m > 60 {
        return Some((&s[6..], Some("time zone offset minute")));
    }
    if h > 24 {
        return Some((&s[6..], Some("time zone offset hour")));
    }
    if minutes.is_none() || !matches!(field[0], b'+' | b'-') {
        return None;
    }
    Some((&s[6..], None))
}

fn days_in(month: u32, year: i64) -> u32 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The `quote` of Go's time package: bytes outside printable ASCII as
/// `\xNN`, quotes and backslashes escaped.
fn go_quote(s: &[u8]) -> String {
    let mut out = String::from("\"");
    for &b in s {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn six_fractional_digits_and_any_offset_are_accepted() {
        for ok in [
            "2024-01-01T00:00:00.000000Z",
            "2024-02-29T23:59:59.123456Z",
            "2024-01-01T00:00:00,000000+02:00",
            "2024-01-01T00:00:00.000000-07:30",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn other_fractions_fail_with_go_s_message() {
        assert_eq!(
            check("2024-01-01T00:00:00Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
        );
        assert_eq!(
            check("2024-01-01T00:00:00.5Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00.5Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse ".5Z" as ".000000""#
        );
        assert_eq!(
            check("2024-01-01T00:00:00.123456789Z").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00.123456789Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "789Z" as "Z07:00""#
        );
    }

    #[test]
    fn separators_ranges_and_trailing_text() {
        assert_eq!(
            check("2024/01/01").unwrap_err(),
            r#"parsing time "2024/01/01" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "/01/01" as "-""#
        );
        assert_eq!(
            check("2024-13-01T00:00:00.000000Z").unwrap_err(),
            r#"parsing time "2024-13-01T00:00:00.000000Z": month out of range"#
        );
        assert_eq!(
            check("2023-02-29T00:00:00.000000Z").unwrap_err(),
            r#"parsing time "2023-02-29T00:00:00.000000Z": day out of range"#
        );
        assert_eq!(
            check("2024-01-01T00:00:00.000000Zjunk").unwrap_err(),
            r#"parsing time "2024-01-01T00:00:00.000000Zjunk": extra text: "junk""#
        );
    }
}

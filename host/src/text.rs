//! Text the host and the manager quote from elsewhere (provider log lines and cache keys,
//! a provider's error messages, refused requests, a shadow's divergences, event notes): cut
//! to a byte budget at a character boundary, and with its control characters escaped so
//! that a provider's text is always one log record.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` cut to at most `max` bytes.
pub fn cut(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// `text` cut to at most `max` bytes, ending in `...` when it was cut.
pub fn ellipsized(mut text: String, max: usize) -> String {
    if text.len() > max {
        text.truncate(text.floor_char_boundary(max.saturating_sub(3)));
        text.push_str("...");
    }
    text
}

/// `text` with every character that could end a log line or restyle a terminal escaped:
/// `\n`, `\r` and `\t` as those two characters, other C0 and C1 controls, DEL, the Unicode
/// line and paragraph separators and the bidirectional overrides as `\u{..}`. A provider
/// writing `\n` and a forged record gets one record showing both; ordinary text is not
/// copied. Backslashes are kept as they are: the point is one record per message, not a
/// reversible encoding.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The bytes `escaped(text)` takes, counted without making it.
pub fn escaped_len(text: &str) -> usize {
    text.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => 2,
            // `\u{` and `}` around the hex digits.
            c if needs_escape(c) => 4 + (32 - (c as u32 | 1).leading_zeros() as usize).div_ceil(4),
            c => c.len_utf8(),
        })
        .sum()
}

/// Whether `text` has nothing [`escaped`] would change: no control, line-separating,
/// bidirectional or invisible formatting characters.
pub fn is_plain(text: &str) -> bool {
    !text.chars().any(needs_escape)
}

/// Controls, the Unicode line and paragraph separators, the bidirectional marks, embeddings,
/// overrides and isolates, and the invisible formatting characters (zero-width spaces and
/// joiners, the word joiner and invisible operators, the byte-order mark).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_so_a_message_stays_one_line() {
        let forged = "done\n2026-01-01T00:00:00Z  WARN wasm_ccm::egress: granted\r\x1b[2K";
        let escaped = escaped(forged);
        assert_eq!(
            escaped,
            "done\\n2026-01-01T00:00:00Z  WARN wasm_ccm::egress: granted\\r\\u{1b}[2K"
        );
        assert_eq!(escaped.lines().count(), 1);
        assert_eq!(
            super::escaped("tab\there\u{0}\u{7f}\u{85}\u{9b}"),
            "tab\\there\\u{0}\\u{7f}\\u{85}\\u{9b}"
        );
        assert_eq!(
            super::escaped("a\u{2028}b\u{202e}c"),
            "a\\u{2028}b\\u{202e}c"
        );
        assert_eq!(
            super::escaped("a\u{200b}b\u{200f}c\u{feff}"),
            "a\\u{200b}b\\u{200f}c\\u{feff}"
        );
        assert!(is_plain("plain, é") && !is_plain("zero\u{200b}width"));
        assert!(matches!(
            super::escaped("plain text, é, \\n kept"),
            Cow::Borrowed(_)
        ));
        for text in [forged, "\u{0}\u{1f}\u{85}\u{2028}\u{2069}é\t", "plain"] {
            assert_eq!(escaped_len(text), super::escaped(text).len(), "{text:?}");
        }
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("hello", 10), "hello");
        assert_eq!(ellipsized("hello".into(), 5), "hello");
        assert_eq!(ellipsized("héllo world".into(), 6), "hé...");
        assert_eq!(ellipsized("héllo world".into(), 5), "h...");
        assert_eq!(ellipsized("hello world".into(), 2), "...");
    }
}

//! Text cut to a byte budget at a character boundary, for what the host and the manager
//! quote from elsewhere: provider log lines and cache keys, refused requests, a shadow's
//! divergences, event notes.

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

#[cfg(test)]
mod tests {
    use super::*;

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

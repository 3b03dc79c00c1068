//! The docs as tests read them: the book's pages (`docs/src`) and the READMEs, their
//! sections and code blocks, so that a test types the commands and uses the files a page
//! shows, as a reader would.

use std::path::Path;

/// The text of `path`, relative to the repository root (`docs/src/operators/aws.md`).
pub fn page(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|err| panic!("cannot read {path}: {err}"))
}

/// The part of `text` under the heading line `heading` (`## IAM policy`), up to the next
/// heading of its level or above.
pub fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = text
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| *line == heading)
        .map(|(at, line)| at + line.len() + 1)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    let rest = &text[start.min(text.len())..];
    let mut in_code = false;
    let mut offset = 0;
    for line in rest.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !in_code && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            return &rest[..offset];
        }
        offset += line.len() + 1;
    }
    rest
}

/// The code blocks of `text` fenced as `lang` (```` ```yaml ````), in order.
pub fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    text.split(fence.as_str())
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(block, _)| block))
        .collect()
}

/// The first code block of `text` fenced as `lang`.
pub fn first_block(text: &str, lang: &str) -> String {
    let block = blocks(text, lang)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no {lang} block"));
    format!("{block}\n")
}

/// The code block fenced as `lang` in the page at `path` that starts with `first_line`.
pub fn block_starting(path: &str, lang: &str, first_line: &str) -> String {
    let text = page(path);
    let block = blocks(&text, lang)
        .into_iter()
        .find(|block| block.starts_with(first_line))
        .unwrap_or_else(|| panic!("{path} shows no {lang} block starting {first_line:?}"));
    format!("{block}\n")
}

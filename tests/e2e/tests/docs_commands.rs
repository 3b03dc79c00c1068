//! The docs' commands stay typed: every `sh` block of the README and the book is typed by a
//! test as a reader types it (each test fetches the block it types with
//! `docs::block_starting`, page and first line as literal strings, which is how this test
//! finds them), but for the few listed in [`UNTYPED`] with the reason; and the egress page's
//! flag fragments, which are no commands, pass the manager's checks of its flags.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use e2e::docs;

/// The `sh` blocks no test types, each named by its page and a text it shows, with the reason:
/// as few as possible.
const UNTYPED: [(&str, &str, &str); 7] = [
    (
        "README.md",
        "make demo",
        "`make demo` is `make setup` (installs tools), the test build and the demo binary, \
         which tests/e2e/tests/manager/demo.rs runs; `make test` is what CI itself runs",
    ),
    (
        "docs/src/introduction.md",
        "make demo",
        "as README.md's: the demo test runs the demo, and CI runs `make test`",
    ),
    (
        "docs/src/operators/install.md",
        "podman build",
        "a release build, a push to ghcr.io over the internet and podman (not installed); \
         tests/e2e/tests/deploy/image.rs types the page's build.sh line that packs a built binary",
    ),
    (
        "docs/src/contributing/releasing.md",
        "make release VERSION",
        "the release build for amd64 and the arm64 cross build (~25 min on 2 cores) and a push \
         to a registry over the internet; tests/e2e/tests/deploy/release.rs types the page's \
         `release/release.sh publish` of a built binary, which is what it runs after the builds",
    ),
    (
        "docs/src/contributing/releasing.md",
        "make release-check",
        "the arm64 cross build (as long as the rest of CI) and qemu; run before each release, \
         as the page says",
    ),
    (
        "docs/src/operators/install.md",
        "cosign verify",
        "cosign and oras are not in Debian 12; tests/e2e/tests/deploy/release.rs checks the \
         same signatures and referrers with the page's `wasm-ccm artifact` commands and \
         cosign.py, an independent implementation of the signature layout",
    ),
    (
        "docs/src/contributing/benchmarks.md",
        "make bench-scale",
        "needs a real cluster and a simulator reachable from it; against the emulator it is \
         `make bench-scale` itself",
    ),
];

/// Fences that hold shell commands under another name, which this test would not see.
const OTHER_SHELL_FENCES: [&str; 5] = ["bash", "shell", "console", "shell-session", "zsh"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files under `dir` (relative to the repository) whose name ends with `extension`.
fn files(dir: &str, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![repo().join(dir)];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|err| panic!("{dir:?}: {err}")) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.to_string_lossy().ends_with(extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// One `sh` block of a page: where its fence is, and its text.
struct Block {
    page: String,
    line: usize,
    text: String,
}

/// The code blocks of the page at `page` (relative to the repository) fenced as `lang`.
fn fenced(page: &str, lang: &str) -> Vec<Block> {
    let text = docs::page(page);
    let fence = format!("```{lang}");
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (index, line) in text.lines().enumerate() {
        match open.as_mut() {
            Some(_) if line.trim_start().starts_with("```") => blocks.extend(open.take()),
            Some(block) => block.text += &format!("{line}\n"),
            None if line.trim_start() == fence => {
                open = Some(Block {
                    page: page.to_string(),
                    line: index + 1,
                    text: String::new(),
                })
            }
            None => {}
        }
    }
    blocks
}

/// The pages: the README and every page of the book, relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    pages.extend(files("docs/src", ".md").iter().map(|path| {
        path.strip_prefix(repo())
            .expect("under the repository")
            .to_string_lossy()
            .into_owned()
    }));
    pages
}

/// Each `(page, first line)` the tests' sources fetch an `sh` block by: the literal arguments
/// of every `block_starting(PAGE, "sh", FIRST_LINE)` call.
fn typed_blocks() -> BTreeSet<(String, String)> {
    let call = regex::Regex::new(
        r#"block_starting\(\s*"((?:[^"\\]|\\.)*)",\s*"sh",\s*"((?:[^"\\]|\\.)*)",?\s*\)"#,
    )
    .expect("the pattern");
    let unescape = |literal: &str| literal.replace("\\\"", "\"").replace("\\\\", "\\");
    let mut sources = files("tests/e2e/tests", ".rs");
    sources.extend(files("tests/e2e/src", ".rs"));
    let mut typed = BTreeSet::new();
    for source in sources {
        let text = std::fs::read_to_string(&source).expect("a test source");
        for found in call.captures_iter(&text) {
            typed.insert((unescape(&found[1]), unescape(&found[2])));
        }
    }
    typed
}

#[test]
fn every_sh_block_in_the_docs_is_typed_by_a_test() {
    let typed = typed_blocks();
    let mut untaken = Vec::new();
    let mut exempted = Vec::new();
    for page in pages() {
        for lang in OTHER_SHELL_FENCES {
            for block in fenced(&page, lang) {
                untaken.push(format!(
                    "{}:{}: fence shell commands as ```sh, so that a test types them",
                    block.page, block.line
                ));
            }
        }
        for block in fenced(&page, "sh") {
            let is_typed = typed
                .iter()
                .any(|(at, first)| *at == page && block.text.starts_with(first.as_str()));
            let exempt = UNTYPED
                .iter()
                .position(|(at, shows, _)| *at == page && block.text.contains(shows));
            match (is_typed, exempt) {
                (true, None) => {}
                (false, Some(index)) => exempted.push(index),
                (true, Some(index)) => untaken.push(format!(
                    "{}:{}: typed by a test, yet listed untyped ({})",
                    block.page, block.line, UNTYPED[index].2
                )),
                (false, None) => untaken.push(format!(
                    "{}:{}: no test types this block (fetch it in the test that types it \
                     with docs::block_starting, the page and its first line as literal \
                     strings):\n{}",
                    block.page, block.line, block.text
                )),
            }
        }
    }
    for (index, (page, shows, _)) in UNTYPED.iter().enumerate() {
        let times = exempted.iter().filter(|i| **i == index).count();
        if times != 1 {
            untaken.push(format!(
                "UNTYPED names {times} sh blocks of {page} showing {shows:?}: it must name one"
            ));
        }
    }
    assert!(untaken.is_empty(), "{}", untaken.join("\n"));
}

/// The SigV4 rules of the egress page are flag fragments, not commands: each, typed after a
/// `wasm-ccm provider call` (the page's `/etc/aws` a directory holding keys; the keys, the web
/// identity and the region in the environment, as the page says EKS sets them), passes the
/// flag parser and every check the manager makes of its egress flags at start (the rules'
/// keys readable, no metadata grant, a web identity's STS endpoint AWS's or one
/// `--sts-endpoint-allow` lists): the call gets as far as reading its provider, which is
/// missing.
#[test]
fn the_egress_page_flag_fragments_are_taken_by_the_manager() {
    let block = docs::block_starting(
        "docs/src/security/egress.md",
        "text",
        "# AWS endpoint names give the region",
    );
    for flag in ["--allow", "--credential", "--sts-endpoint-allow"] {
        assert!(block.contains(flag), "the fragments show {flag}: {block}");
    }
    let mut shell = docs::Shell::new();
    let keys = shell.path("aws");
    std::fs::create_dir(&keys).expect("a keys directory");
    for (name, value) in [
        ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ] {
        std::fs::write(keys.join(name), value).expect("a key file");
        shell.env(name, value);
    }
    let token = shell.path("token");
    std::fs::write(&token, "a-projected-token").expect("a token file");
    shell
        .env("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/wasm-ccm")
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", &token)
        .env("AWS_REGION", "us-east-1");
    let block = docs::substitute(
        &block,
        &[("dir:/etc/aws", &format!("dir:{}", keys.display()))],
    );
    // The relative path as the command names it: the working directory's.
    let missing = format!(
        "error: file://{}: No such file or directory (os error 2)",
        shell.path("missing.wasm").display()
    );
    for fragment in docs::commands(&block) {
        let output = shell.run(&format!(
            r#"wasm-ccm provider call missing.wasm instance-metadata --args '{{"node": {{"name": "n1"}}}}' {fragment}"#
        ));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim(), missing, "{fragment}");
    }
}

//! `docs-book [ROOT] [OUT]`: build the docs book in ROOT (`docs`) into OUT (`target/book`)
//! and check its links and the README's links into it; exit 1 naming each broken link.
//! `make docs` runs it.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> anyhow::Result<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let root = PathBuf::from(args.next().unwrap_or_else(|| "docs".into()));
    let out = PathBuf::from(args.next().unwrap_or_else(|| "target/book".into()));
    let built = docs_book::build(&root, &out)?;
    let readme = root.join("../README.md");
    let mut broken = built.broken;
    if readme.exists() {
        broken.extend(docs_book::check_readme(&readme, &root.join("src"), &out)?);
    }
    for line in &broken {
        eprintln!("broken link: {line}");
    }
    println!(
        "{}: {} pages, {} internal links, {} broken",
        out.join("index.html").display(),
        built.pages,
        built.links,
        broken.len()
    );
    Ok(if broken.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

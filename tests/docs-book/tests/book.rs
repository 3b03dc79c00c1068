//! `make docs` as the README tells a reader to type it: the book builds into `target/book`
//! with mdBook, and every link in it, and every link of the README into it, leads to a page
//! and heading that exist.

use std::path::Path;
use std::process::Command;

#[test]
fn make_docs_builds_the_book_with_every_link_leading_somewhere() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let run = Command::new("make")
        .arg("docs")
        .current_dir(&repo)
        .output()
        .expect("run make");
    let stderr = String::from_utf8_lossy(&run.stderr);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stderr}\n{stdout}");
    assert!(stdout.contains(", 0 broken"), "{stdout}");
    let book = repo.join("target/book");
    for page in [
        "index.html",
        "operators/install.html",
        "authors/python.html",
    ] {
        assert!(book.join(page).is_file(), "{page} was written");
    }
}

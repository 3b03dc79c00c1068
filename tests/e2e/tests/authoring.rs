//! The docs' commands for building a provider in TypeScript and in Python (the authors'
//! pages `typescript.md` and `python.md`; the TypeScript one also in
//! `guest-sdk-js/README.md`), typed as written from the root of a copy of the sources they
//! read (so the `__pycache__` componentize-py writes lands in the copy), with the tools
//! `make setup` installs: each makes a wasm component.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use e2e::docs;

/// The workspace root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `dirs` of the repository copied into a new directory (symbolic links followed), and
/// `target/test-tools/<tool>` linked there: a root to type a documented command in.
fn workspace_copy(dirs: &[&str], tool: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    for dir in dirs {
        let to = root.path().join(dir);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        let status = std::process::Command::new("cp")
            .args(["-RL"])
            .arg(repo().join(dir))
            .arg(&to)
            .status()
            .expect("run cp");
        assert!(status.success(), "copy {dir}");
    }
    let tools = root.path().join("target/test-tools");
    std::fs::create_dir_all(&tools).expect("mkdir");
    let installed = repo().join("target/test-tools").join(tool);
    assert!(
        installed.exists(),
        "{} is missing: `make setup` installs it",
        installed.display()
    );
    std::os::unix::fs::symlink(installed, tools.join(tool)).expect("symlink");
    root
}

/// Run `command` with `sh` in `dir`; it must succeed.
async fn typed(dir: &Path, command: &str) {
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run sh");
    assert!(
        output.status.success(),
        "{command}\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Whether `path` holds a wasm component (the preamble of the component model's binary
/// format: `\0asm`, version 0x0d, layer 1).
fn is_component(path: &Path) -> bool {
    std::fs::read(path)
        .is_ok_and(|bytes| bytes.starts_with(b"\0asm\x0d\x00\x01\x00") && bytes.len() > 1_000_000)
}

#[tokio::test]
async fn the_documented_typescript_build_command_makes_a_component() {
    let command = docs::block_starting(
        "docs/src/authors/typescript.md",
        "sh",
        "node guest-sdk-js/build.mjs",
    );
    assert_eq!(
        docs::block_starting(
            "guest-sdk-js/README.md",
            "sh",
            "node guest-sdk-js/build.mjs"
        ),
        command,
        "the SDK's README gives the same command"
    );
    let root = workspace_copy(&["wit", "guest-sdk-js", "guests/simcloud-ts"], "js");
    typed(root.path(), &command).await;
    assert!(is_component(&root.path().join("simcloud-ts.wasm")));
}

#[tokio::test]
async fn the_documented_python_build_command_makes_a_component() {
    let command = docs::block_starting(
        "docs/src/authors/python.md",
        "sh",
        "VIRTUAL_ENV=target/test-tools/python",
    );
    let root = workspace_copy(&["wit", "guest-sdk-py", "guests/simcloud-py"], "python");
    typed(root.path(), &command).await;
    assert!(is_component(&root.path().join("simcloud-py.wasm")));
}

//! The docs' commands for making and building a provider, typed as a reader would type
//! them, with the tools `make setup` installs:
//! - TypeScript and Python (the authors' pages `typescript.md` and `python.md`; the
//!   TypeScript one also in `guest-sdk-js/README.md`): tests/guest-builds builds the
//!   components every test runs by typing those very commands, from the root of a copy of the
//!   sources they read; the tests here check the pages still show what it typed;
//! - `first-provider.md` whole, in an empty directory: `provider new`, the crate's build,
//!   `inspect`, a call and a conformance run against `cloud-sim` as the page starts it,
//!   `push` and `pull` through a registry; and `commands.md`'s examples;
//! - the start of `typescript.md` and `python.md`, each in an empty directory: `provider new
//!   --language`, the tools installed (offline, from what `make setup` fetched), the build,
//!   `inspect`, a call and a conformance run against `cloud-sim`.

use std::path::Path;
use std::process::Stdio;

use e2e::docs::{self, Shell};

/// Whether `path` holds a wasm component (the preamble of the component model's binary
/// format: `\0asm`, version 0x0d, layer 1).
fn is_component(path: &Path) -> bool {
    std::fs::read(path)
        .is_ok_and(|bytes| bytes.starts_with(b"\0asm\x0d\x00\x01\x00") && bytes.len() > 1_000_000)
}

/// The TypeScript page's build command is the one that built the component every test runs
/// (tests/guest-builds types it, from a copy of the sources it reads), and the SDK's README
/// gives the same.
#[test]
fn the_documented_typescript_build_command_makes_the_component_the_tests_run() {
    let command = docs::block_starting(
        "docs/src/authors/typescript.md",
        "sh",
        "node guest-sdk-js/build.mjs",
    );
    assert_eq!(command, guest_builds::SIMCLOUD_TS_COMMAND);
    assert_eq!(
        docs::block_starting(
            "guest-sdk-js/README.md",
            "sh",
            "node guest-sdk-js/build.mjs"
        ),
        command,
        "the SDK's README gives the same command"
    );
    assert!(is_component(Path::new(guest_builds::SIMCLOUD_TS)));
}

/// The Python page's build command is the one that built the component every test runs.
#[test]
fn the_documented_python_build_command_makes_the_component_the_tests_run() {
    let command = docs::block_starting(
        "docs/src/authors/python.md",
        "sh",
        "VIRTUAL_ENV=target/test-tools/python",
    );
    assert_eq!(command, guest_builds::SIMCLOUD_PY_COMMAND);
    assert!(is_component(Path::new(guest_builds::SIMCLOUD_PY)));
}

/// The page's `cloud-sim … &` line run as typed in `shell`, on a free port instead of
/// `127.0.0.1:8080`; the simulator (killed when dropped) and the address it listens on.
async fn typed_simulator(line: &str, shell: &Shell) -> (tokio::process::Child, String) {
    let command = line
        .strip_suffix(" &")
        .unwrap_or_else(|| panic!("the simulator runs in the background: {line}"))
        .replace("127.0.0.1:8080", "127.0.0.1:0");
    let mut child = tokio::process::Command::from(shell.sh(&format!("exec {command}")))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run cloud-sim");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let first = lines
        .next_line()
        .await
        .expect("read cloud-sim")
        .expect("cloud-sim says where it listens");
    let url = first
        .strip_prefix("cloud-sim listening on http://")
        .unwrap_or_else(|| panic!("{first}"));
    (child, url.to_string())
}

/// The `sh` blocks of the page at `path`, `blocks`, which must be all of them in order but
/// those starting with `typed_elsewhere`, typed as one shell session in `shell` (a `cd` holds), stopping at the first command that
/// fails; its `cloud-sim … &` line run apart, on a free port, and the page's `127.0.0.1:8080`
/// (the simulator) and `127.0.0.1:5000` (a registry: the page's own `docker-registry serve …
/// &`, on a free port and stopped when the script ends, else one the test starts) replaced by
/// the servers' addresses. What it printed.
async fn type_page(
    path: &str,
    blocks: &[String],
    typed_elsewhere: Option<&str>,
    shell: &Shell,
) -> String {
    let page: Vec<String> = docs::blocks(&docs::page(path), "sh")
        .into_iter()
        .filter(|block| typed_elsewhere.is_none_or(|start| !block.starts_with(start)))
        .map(|block| format!("{block}\n"))
        .collect();
    assert_eq!(blocks, page, "the test types {path} whole, in order");
    let blocks = blocks.concat();
    let simulator = blocks
        .lines()
        .find(|line| line.starts_with("cloud-sim "))
        .expect("the page starts the simulator");
    let (_sim, sim_addr) = typed_simulator(simulator.trim(), shell).await;
    let mut script = blocks
        .replace(simulator, "")
        .replace("127.0.0.1:8080", &sim_addr);
    let own_registry = script
        .lines()
        .find(|line| line.starts_with("docker-registry serve ") && line.ends_with(" &"))
        .map(str::to_string);
    let _registry = if let Some(line) = own_registry {
        let port = e2e::https::free_port();
        script = script
            .replace(&line, &format!("{line}\ntrap 'kill $!' EXIT"))
            .replace("127.0.0.1:5000", &format!("127.0.0.1:{port}"));
        None
    } else if script.contains("127.0.0.1:5000") {
        let registry = e2e::registry::Registry::start(Default::default()).await;
        script = script.replace("127.0.0.1:5000", &registry.addr().to_string());
        Some(registry)
    } else {
        None
    };
    let output = tokio::process::Command::from(shell.sh(&script))
        .output()
        .await
        .expect("run sh");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn the_first_provider_page_works_as_typed() {
    let blocks = [
        docs::block_starting(
            "docs/src/authors/first-provider.md",
            "sh",
            "wasm-ccm provider new mycloud",
        ),
        docs::block_starting(
            "docs/src/authors/first-provider.md",
            "sh",
            "wasm-ccm provider inspect",
        ),
        docs::block_starting("docs/src/authors/first-provider.md", "sh", "cloud-sim "),
        docs::block_starting("docs/src/authors/first-provider.md", "sh", "echo '{"),
        docs::block_starting(
            "docs/src/authors/first-provider.md",
            "sh",
            "cat > conformance.yaml",
        ),
        docs::block_starting(
            "docs/src/authors/first-provider.md",
            "sh",
            "cat > registry.yml",
        ),
        docs::block_starting(
            "docs/src/authors/first-provider.md",
            "sh",
            "wasm-ccm provider push",
        ),
    ];
    let mut shell = Shell::new();
    // cargo and rustup find their homes (the toolchain, the crates) under the reader's HOME.
    shell.env("HOME", std::env::var_os("HOME").expect("a HOME"));
    let stdout = type_page("docs/src/authors/first-provider.md", &blocks, None, &shell).await;
    let page = docs::page("docs/src/authors/first-provider.md");
    assert_metadata_as_the_first_provider_page_shows(&stdout);
    assert_conformance_passed_as(&page, &stdout);
    assert_readme_commands_on(&page, &shell);
}

/// The conformance report in `stdout`: every instance rule passed, nothing failed, and the
/// interfaces init does not declare passed as the page (its text, `page`) says.
fn assert_conformance_passed_as(page: &str, stdout: &str) {
    assert!(
        stdout.contains("PASS  instances/metadata-valid") && !stdout.contains("FAIL"),
        "{stdout}"
    );
    for rule in [
        "capabilities/undeclared-load-balancer-not-implemented",
        "capabilities/undeclared-routes-not-implemented",
    ] {
        let on_page = rule.replace("load-balancer", "*").replace("routes", "*");
        assert!(
            (page.contains(rule) || page.contains(&on_page)) && stdout.contains(rule),
            "{rule}: {stdout}"
        );
    }
}

/// The call in `stdout` printed the metadata the first provider page shows, but for the
/// instance ID.
fn assert_metadata_as_the_first_provider_page_shows(stdout: &str) {
    let page = docs::page("docs/src/authors/first-provider.md");
    let shown: serde_json::Value =
        serde_json::from_str(&docs::first_block(&page, "json")).expect("the page's JSON");
    let printed = stdout
        .split_once("\n{\n")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(object, _)| format!("{{\n{object}\n}}"))
        .unwrap_or_else(|| panic!("the call prints a JSON object: {stdout}"));
    let mut printed: serde_json::Value = serde_json::from_str(&printed).expect("JSON");
    let provider_id = printed["providerID"]
        .as_str()
        .expect("a providerID")
        .to_string();
    assert!(provider_id.starts_with("mycloud://i-"), "{provider_id}");
    printed["providerID"] = shown["providerID"].clone();
    assert_eq!(printed, shown);
}

/// The README `provider new` wrote in `shell`'s `mycloud/` gives the build and call commands
/// of the page whose text is `page`.
fn assert_readme_commands_on(page: &str, shell: &Shell) {
    let readme = std::fs::read_to_string(shell.path("mycloud/README.md")).expect("README");
    for block in docs::blocks(&readme, "sh") {
        for line in block.lines() {
            assert!(
                page.lines().any(|shown| shown == line),
                "the page has the README's {line:?}"
            );
        }
    }
}

/// What the build printed in `stdout` is the line the page at `path` shows (`built
/// target/mycloud.wasm (N bytes, sha256:…)`), with the component's own size and digest.
fn assert_build_says_what_it_wrote(path: &str, stdout: &str, shell: &Shell) {
    let page = docs::page(path);
    let shown = docs::first_block(&page, "text");
    let (shown_start, _) = shown
        .split_once(" (")
        .expect("the page shows the built line");
    let built = std::fs::read(shell.path("mycloud/target/mycloud.wasm")).expect("the component");
    let said = format!(
        "{shown_start} ({} bytes, {})",
        built.len(),
        e2e::sha256_digest(&built)
    );
    assert!(
        stdout.lines().any(|line| line == said),
        "the build says {said:?}:\n{stdout}"
    );
}

/// The start of the authors' page at `path`, its `blocks` (all of its `sh` blocks but the
/// one starting with `typed_elsewhere`), typed in an empty directory with the packages `make
/// setup` fetched and no network: `provider new`, which prints `build_hint`; the tools'
/// install and the build, which says what it wrote; `inspect`; a call against `cloud-sim`
/// answering as the Rust crate's does; and a conformance run passing as the page says.
async fn a_page_starts_a_provider_as_typed(
    path: &str,
    blocks: &[String],
    typed_elsewhere: &str,
    build_hint: &str,
) {
    let mut shell = Shell::new();
    for (name, value) in e2e::offline_package_env() {
        shell.env(name, value);
    }
    let stdout = type_page(path, blocks, Some(typed_elsewhere), &shell).await;
    let page = docs::page(path);
    assert!(
        stdout.contains(&format!("{build_hint}\nIt writes target/mycloud.wasm.\n")),
        "provider new says how to build and what: {stdout}"
    );
    assert_build_says_what_it_wrote(path, &stdout, &shell);
    assert_metadata_as_the_first_provider_page_shows(&stdout);
    assert_conformance_passed_as(&page, &stdout);
    assert_readme_commands_on(&page, &shell);
}

/// typescript.md: `npm ci` installs the tools, `npm run build` builds.
#[tokio::test]
async fn the_typescript_page_starts_a_provider_as_typed() {
    let blocks = [
        docs::block_starting(
            "docs/src/authors/typescript.md",
            "sh",
            "wasm-ccm provider new mycloud --language typescript",
        ),
        docs::block_starting(
            "docs/src/authors/typescript.md",
            "sh",
            "wasm-ccm provider inspect target/mycloud.wasm",
        ),
    ];
    a_page_starts_a_provider_as_typed(
        "docs/src/authors/typescript.md",
        &blocks,
        "node guest-sdk-js/build.mjs",
        "  cd mycloud && npm ci && npm run build",
    )
    .await;
}

/// python.md: componentize-py installed into a venv, `build.sh` builds.
#[tokio::test]
async fn the_python_page_starts_a_provider_as_typed() {
    let blocks = [
        docs::block_starting(
            "docs/src/authors/python.md",
            "sh",
            "wasm-ccm provider new mycloud --language python",
        ),
        docs::block_starting(
            "docs/src/authors/python.md",
            "sh",
            "wasm-ccm provider inspect target/mycloud.wasm",
        ),
    ];
    a_page_starts_a_provider_as_typed(
        "docs/src/authors/python.md",
        &blocks,
        "VIRTUAL_ENV=target/test-tools/python",
        "  cd mycloud && python3 -m venv .venv && .venv/bin/pip install -r requirements.txt \
         && sh build.sh",
    )
    .await;
}

#[tokio::test]
async fn the_commands_page_works_as_typed() {
    let block = docs::block_starting(
        "docs/src/authors/commands.md",
        "sh",
        "# A new provider that builds",
    );
    let shell = Shell::new();
    std::fs::copy(guest_builds::SIMCLOUD, shell.path("simcloud.wasm")).expect("copy");
    let stdout = type_page("docs/src/authors/commands.md", &[block], None, &shell).await;
    assert!(shell.path("mycloud/Cargo.toml").is_file());
    assert!(
        stdout.contains("\"providerID\": \"simcloud://i-"),
        "{stdout}"
    );
}

//! Compile every guest component (guests/* and the test guests) for wasm32-wasip2 from
//! source, so tests and benchmarks always run the code in this tree; and simcloud a second
//! time with a build stamp, as a second version for hot-swap tests; and the Python provider
//! (`guests/simcloud-py`) with componentize-py and the TypeScript provider
//! (`guests/simcloud-ts`) with componentize-js, both from `target/test-tools` (see
//! `build_python`, `build_typescript`), each on a thread of its own beside the Rust guests.
//!
//! The TypeScript and Python providers are built by the very command their authors' pages
//! (docs/src/authors/typescript.md, python.md) tell a reader to type, read from the page and
//! typed with `sh` in a copy of the sources it reads (`target/guests/<name>-root`), as from
//! the workspace root: the components every test runs are what a reader would build. The
//! command typed is kept beside the component (`<name>.command`) for the tests that compare
//! it with the pages.
//!
//! The nested cargo uses its own target directory (`target/guests`) so it never waits on the
//! lock of the cargo that runs this script.
//!
//! Both simcloud builds write `target/guests/wasm32-wasip2/release/simcloud.wasm`: cargo
//! tracks `option_env!`, so switching the stamp recompiles the simcloud crate alone (about
//! 2 s each way on the 2-core CI machine: a rerun of this script with nothing to rebuild takes
//! about 4.5 s instead of 0.1 s; a cold build about 1 s more than one build). Each is copied
//! out right after its build, to `target/guests/simcloud.wasm` and
//! `target/guests/simcloud-v2.wasm`, and the tests read the copies: they never see the shared
//! file mid-switch. A lock file keeps concurrent runs of this script (a test and a clippy
//! build of one tree, say) from interleaving their two builds.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Guest packages and the env var that carries each one's path.
const GUESTS: &[(&str, &str)] = &[
    ("simcloud", "GUEST_SIMCLOUD"),
    ("aws", "GUEST_AWS"),
    ("hostile", "GUEST_HOSTILE"),
    ("overreach", "GUEST_OVERREACH"),
    ("rollout", "GUEST_ROLLOUT"),
    ("legacy", "GUEST_LEGACY"),
];

/// The variable simcloud reads its build stamp from (`option_env!`).
const STAMP_VAR: &str = "SIMCLOUD_BUILD";
/// The stamp of the second simcloud build, and the env vars that carry it and its path.
const SIMCLOUD_V2_STAMP: &str = "v2";
const SIMCLOUD_V2_VARS: (&str, &str) = ("GUEST_SIMCLOUD_V2_BUILD", "GUEST_SIMCLOUD_V2");

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .expect("tests/guest-builds sits two levels below the workspace root")
        .to_path_buf();
    for watched in [
        "wit",
        "guest-sdk",
        "guest-sdk-py",
        "guest-sdk-js",
        "guests",
        "tests/guests",
        "Cargo.lock",
        "docs/src/authors/typescript.md",
        "docs/src/authors/python.md",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }

    let target_dir = workspace.join("target").join("guests");
    std::fs::create_dir_all(&target_dir)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", target_dir.display()));
    let lock_path = target_dir.join("guest-builds.lock");
    let lock = File::create(&lock_path)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", lock_path.display()));
    lock.lock()
        .unwrap_or_else(|err| panic!("cannot lock {}: {err}", lock_path.display()));

    // The TypeScript and Python providers build beside the Rust guests: each is mostly one
    // single-threaded tool (node, componentize-py) that would otherwise wait its turn.
    let (simcloud_ts, simcloud_py) = std::thread::scope(|scope| {
        let typescript = scope.spawn(|| build_typescript(&workspace, &target_dir));
        let python = scope.spawn(|| build_python(&workspace, &target_dir));
        build_rust_guests(&workspace, &target_dir);
        (
            typescript.join().expect("the TypeScript build panicked"),
            python.join().expect("the Python build panicked"),
        )
    });
    for (var, built) in [
        ("GUEST_SIMCLOUD_TS", &simcloud_ts),
        ("GUEST_SIMCLOUD_PY", &simcloud_py),
    ] {
        println!("cargo:rustc-env={var}={}", built.display());
        println!(
            "cargo:rustc-env={var}_COMMAND={}",
            built.with_extension("command").display()
        );
    }
}

/// The `sh` block of `page` (relative to the workspace) that starts with `first`, as a
/// reader copies it (with its final newline).
fn documented_command(workspace: &Path, page: &str, first: &str) -> String {
    let text = std::fs::read_to_string(workspace.join(page))
        .unwrap_or_else(|err| panic!("cannot read {page}: {err}"));
    text.split("```sh\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(block, _)| block))
        .find(|block| block.starts_with(first))
        .map(|block| format!("{block}\n"))
        .unwrap_or_else(|| panic!("{page} shows no sh block starting {first:?}"))
}

/// A provider built by the command its authors' page shows.
struct Documented<'a> {
    /// The component is `<name>.wasm`.
    name: &'a str,
    /// The page (relative to the workspace), and how its command starts.
    page: &'a str,
    command_start: &'a str,
    /// The workspace directories the command reads (copied) and the tools it runs
    /// (`target/test-tools/<tools>`, linked).
    sources: &'a [&'a str],
    tools: &'a str,
    /// What stands for the installed tools when judging whether the build is current.
    toolchain: PathBuf,
}

impl Documented<'_> {
    /// `target/guests/<name>.wasm`, built unless it is newer than every input (the sources,
    /// the page, the toolchain): type the page's command with `sh` in a new directory
    /// `target/guests/<name>-root` holding copies of the sources (without `__pycache__`)
    /// and a link to the tools, as a reader types it from the workspace root; move its
    /// `<name>.wasm` out and keep the command beside it (`<name>.command`).
    fn build(&self, workspace: &Path, target_dir: &Path) -> PathBuf {
        let name = self.name;
        let output = target_dir.join(format!("{name}.wasm"));
        let typed = output.with_extension("command");
        let mut inputs = self
            .sources
            .iter()
            .map(|dir| workspace.join(dir))
            .chain([workspace.join(self.page), self.toolchain.clone()]);
        if modified(&typed).is_some_and(|built| inputs.all(|input| newest(&input) <= built)) {
            return output;
        }
        let command = documented_command(workspace, self.page, self.command_start);
        let root = target_dir.join(format!("{name}-root"));
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .unwrap_or_else(|err| panic!("cannot remove {}: {err}", root.display()));
        }
        for dir in self.sources {
            copy_tree(&workspace.join(dir), &root.join(dir));
        }
        let tools = root.join("target").join("test-tools");
        std::fs::create_dir_all(&tools)
            .unwrap_or_else(|err| panic!("cannot create {}: {err}", tools.display()));
        std::os::unix::fs::symlink(
            workspace.join("target").join("test-tools").join(self.tools),
            tools.join(self.tools),
        )
        .unwrap_or_else(|err| panic!("cannot link the tools into {}: {err}", root.display()));
        let status = Command::new("sh")
            .arg("-c")
            .arg(&command)
            .current_dir(&root)
            .status()
            .unwrap_or_else(|err| panic!("cannot run sh: {err}"));
        if !status.success() {
            panic!(
                "building {name} as {} says failed (see above): {command}",
                self.page
            );
        }
        let built = root.join(format!("{name}.wasm"));
        std::fs::rename(&built, &output).unwrap_or_else(|err| {
            panic!(
                "cannot move {} to {}: {err}",
                built.display(),
                output.display()
            )
        });
        std::fs::write(&typed, &command)
            .unwrap_or_else(|err| panic!("cannot write {}: {err}", typed.display()));
        output
    }
}

/// The Rust guests, simcloud twice (stamped and not); their paths as env vars.
fn build_rust_guests(workspace: &Path, target_dir: &Path) {
    let out = target_dir.join("wasm32-wasip2").join("release");
    let simcloud = out.join("simcloud.wasm");

    // The stamped build first, so the shared file is left unstamped.
    build(
        workspace,
        target_dir,
        &["simcloud"],
        Some(SIMCLOUD_V2_STAMP),
    );
    let simcloud_v2 = target_dir.join("simcloud-v2.wasm");
    publish(&simcloud, &simcloud_v2);

    let packages: Vec<&str> = GUESTS.iter().map(|(package, _)| *package).collect();
    build(workspace, target_dir, &packages, None);
    let simcloud_v1 = target_dir.join("simcloud.wasm");
    publish(&simcloud, &simcloud_v1);

    for (package, var) in GUESTS {
        let wasm = match *package {
            "simcloud" => simcloud_v1.clone(),
            _ => out.join(format!("{package}.wasm")),
        };
        assert!(
            wasm.is_file(),
            "guest {package} built but {} is missing",
            wasm.display()
        );
        println!("cargo:rustc-env={var}={}", wasm.display());
    }
    let (stamp_var, path_var) = SIMCLOUD_V2_VARS;
    println!("cargo:rustc-env={stamp_var}={SIMCLOUD_V2_STAMP}");
    println!("cargo:rustc-env={path_var}={}", simcloud_v2.display());
}

/// The node packages tests/install-test-tools.sh installs with `npm ci` from
/// guest-sdk-js/package-lock.json (`JS_TOOLS` there), relative to the workspace.
const JS_TOOLS: &str = "target/test-tools/js";
/// The TypeScript SDK (with its build script, `build.mjs`) and provider.
const TYPESCRIPT_SDK: &str = "guest-sdk-js";
const SIMCLOUD_TS: &str = "guests/simcloud-ts";

/// `guests/simcloud-ts` built by guest-sdk-js/build.mjs (types from the WIT, tsc, esbuild,
/// componentize-js), with the command of docs/src/authors/typescript.md: a build takes
/// 15-50 s, and this script reruns for any change under `guests/`.
fn build_typescript(workspace: &Path, target_dir: &Path) -> PathBuf {
    let modules = workspace.join(JS_TOOLS).join("node_modules");
    // npm ci writes it last: it stands for the whole installed tree.
    let installed = modules.join(".package-lock.json");
    assert!(
        installed.is_file(),
        "the TypeScript provider toolchain (componentize-js, jco, tsc, esbuild) is missing at \
         {}: run `make setup` (or tests/install-test-tools.sh) to install it",
        modules.display()
    );
    Documented {
        name: "simcloud-ts",
        page: "docs/src/authors/typescript.md",
        command_start: "node guest-sdk-js/build.mjs",
        sources: &["wit", TYPESCRIPT_SDK, SIMCLOUD_TS],
        tools: "js",
        toolchain: installed,
    }
    .build(workspace, target_dir)
}

/// The venv of the Python tools, componentize-py among them, that tests/install-test-tools.sh
/// installs (`PYTHON_TOOLS` there), relative to the workspace.
const PYTHON_TOOLS: &str = "target/test-tools/python";
/// The Python SDK (its package and the world it is built for: the contract's
/// `cloud-provider` plus `wasi:http`, see guest-sdk-py/wit) and provider.
const PYTHON_SDK: &str = "guest-sdk-py";
const SIMCLOUD_PY: &str = "guests/simcloud-py";
/// `guests/simcloud-py` built with componentize-py, with the command of
/// docs/src/authors/python.md (a build takes 20-35 s, and this script reruns for any change
/// under `guests/`). componentize-py writes `__pycache__` beside the modules it bundles: in
/// the copy it builds from, so cargo does not see the tree change.
fn build_python(workspace: &Path, target_dir: &Path) -> PathBuf {
    let tool = workspace
        .join(PYTHON_TOOLS)
        .join("bin")
        .join("componentize-py");
    assert!(
        tool.is_file(),
        "componentize-py is missing at {}: run `make setup` (or tests/install-test-tools.sh) to \
         install it",
        tool.display()
    );
    Documented {
        name: "simcloud-py",
        page: "docs/src/authors/python.md",
        command_start: "VIRTUAL_ENV=target/test-tools/python",
        sources: &["wit", PYTHON_SDK, SIMCLOUD_PY],
        tools: "python",
        toolchain: tool,
    }
    .build(workspace, target_dir)
}

/// Copy the directory `from` to `to` (links followed), without `__pycache__`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", to.display()));
    let entries = std::fs::read_dir(from)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", from.display()));
    for entry in entries {
        let entry = entry.unwrap_or_else(|err| panic!("cannot read {}: {err}", from.display()));
        let path = entry.path();
        if entry.file_name() == "__pycache__" {
            continue;
        }
        if path.is_dir() {
            copy_tree(&path, &to.join(entry.file_name()));
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).unwrap_or_else(|err| {
                panic!("cannot copy {} to {}: {err}", path.display(), to.display())
            });
        }
    }
}

/// When `path` was last modified, if it exists.
fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .ok()
}

/// The newest modification time of `path` and everything under it (symbolic links
/// followed), skipping `__pycache__`; the Unix epoch if it does not exist.
fn newest(path: &Path) -> std::time::SystemTime {
    let mut latest = modified(path).unwrap_or(std::time::UNIX_EPOCH);
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            if entry.file_name() != "__pycache__" {
                latest = latest.max(newest(&entry.path()));
            }
        }
    }
    latest
}

/// `cargo build --release` of `packages` for wasm32-wasip2, with simcloud's build stamp set
/// to `stamp` (or unset).
fn build(workspace: &Path, target_dir: &Path, packages: &[&str], stamp: Option<&str>) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
        ])
        .arg("--target-dir")
        .arg(target_dir);
    for package in packages {
        command.args(["-p", package]);
    }
    // Flags meant for the host build must not leak into the guest build, nor a stamp set
    // around the outer cargo into the unstamped build. `make test`'s lints
    // (RUSTC_WORKSPACE_WRAPPER, CLIPPY_ARGS) do pass on: the guests are linted as they build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_MAKEFLAGS",
        STAMP_VAR,
    ] {
        command.env_remove(var);
    }
    if let Some(stamp) = stamp {
        command.env(STAMP_VAR, stamp);
    }
    let status = command
        .status()
        .expect("cannot run cargo to build the guests");
    if !status.success() {
        panic!(
            "building the guest components {packages:?} failed (see above); if the target is \
             missing, run `rustup target add wasm32-wasip2`"
        );
    }
}

/// Copy `from` to `to` through a temporary file and a rename, so a reader of `to` sees the
/// old file or the new one, never a partial copy.
fn publish(from: &Path, to: &Path) {
    let partial = to.with_extension("wasm.partial");
    std::fs::copy(from, &partial).unwrap_or_else(|err| {
        panic!(
            "cannot copy {} to {}: {err}",
            from.display(),
            partial.display()
        )
    });
    std::fs::rename(&partial, to).unwrap_or_else(|err| {
        panic!(
            "cannot rename {} to {}: {err}",
            partial.display(),
            to.display()
        )
    });
}

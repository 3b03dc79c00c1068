//! Compile every guest component (guests/* and the test guests) for wasm32-wasip2 from
//! source, so tests and benchmarks always run the code in this tree; and simcloud a second
//! time with a build stamp, as a second version for hot-swap tests.
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
    for watched in ["wit", "guest-sdk", "guests", "tests/guests", "Cargo.lock"] {
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

    let out = target_dir.join("wasm32-wasip2").join("release");
    let simcloud = out.join("simcloud.wasm");

    // The stamped build first, so the shared file is left unstamped.
    build(
        &workspace,
        &target_dir,
        &["simcloud"],
        Some(SIMCLOUD_V2_STAMP),
    );
    let simcloud_v2 = target_dir.join("simcloud-v2.wasm");
    publish(&simcloud, &simcloud_v2);

    let packages: Vec<&str> = GUESTS.iter().map(|(package, _)| *package).collect();
    build(&workspace, &target_dir, &packages, None);
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
    // around the outer cargo into the unstamped build.
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

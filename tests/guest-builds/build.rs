//! Compile every guest component (guests/* and the hostile test guests) for wasm32-wasip2
//! from source, so tests and benchmarks always run the code in this tree.
//!
//! The nested cargo uses its own target directory (`target/guests`) so it never waits on the
//! lock of the cargo that runs this script.

use std::path::PathBuf;
use std::process::Command;

/// Guest packages and the env var that carries each one's path.
const GUESTS: &[(&str, &str)] = &[
    ("simcloud", "GUEST_SIMCLOUD"),
    ("hostile", "GUEST_HOSTILE"),
    ("overreach", "GUEST_OVERREACH"),
];

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
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    for (package, _) in GUESTS {
        command.args(["-p", package]);
    }
    // Flags meant for the host build must not leak into the guest build.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_MAKEFLAGS",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .expect("cannot run cargo to build the guests");
    if !status.success() {
        panic!(
            "building the guest components failed (see above); if the target is missing, run \
             `rustup target add wasm32-wasip2`"
        );
    }

    let out = target_dir.join("wasm32-wasip2").join("release");
    for (package, var) in GUESTS {
        let wasm = out.join(format!("{package}.wasm"));
        assert!(
            wasm.is_file(),
            "guest {package} built but {} is missing",
            wasm.display()
        );
        println!("cargo:rustc-env={var}={}", wasm.display());
    }
}

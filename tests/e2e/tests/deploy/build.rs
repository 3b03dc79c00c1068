//! Building as a Rust user does: `cargo build --release` (or `cargo install --path runtime`)
//! at the root of a fresh clone builds the manager and the cloud simulator, and nothing that
//! needs what `make setup` installs (the wasm target, the TypeScript and Python toolchains
//! `tests/guest-builds` compiles the guests with).

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

/// `cargo metadata` of the workspace, as cargo resolves it for a build at the root on this
/// platform (only its dependencies need be downloaded).
fn metadata() -> Value {
    let output = std::process::Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--filter-platform",
        ])
        .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

#[test]
fn a_plain_cargo_build_builds_the_manager_and_never_the_guests() {
    let metadata = metadata();
    let name_of: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let defaults: BTreeSet<&str> = metadata["workspace_default_members"]
        .as_array()
        .expect("workspace_default_members")
        .iter()
        .map(|id| name_of[id.as_str().unwrap()])
        .collect();
    assert_eq!(defaults, BTreeSet::from(["cloud-sim", "wasm-ccm"]));

    // Everything they need to build (normal and build dependencies, not dev ones).
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .map(|node| (node["id"].as_str().unwrap(), node))
        .collect();
    let mut built = BTreeSet::new();
    let mut todo: Vec<&str> = metadata["workspace_default_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    while let Some(id) = todo.pop() {
        if !built.insert(name_of[id]) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().into_iter().flatten() {
            let for_building = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|kind| kind["kind"].is_null() || kind["kind"] == "build");
            if for_building {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    for needs_setup in [
        "guest-builds",
        "e2e",
        "docs-book",
        "simcloud",
        "aws",
        "hostile",
    ] {
        assert!(
            !built.contains(needs_setup),
            "a plain cargo build at the root builds {needs_setup}, which needs make setup"
        );
    }
    assert!(built.contains("wasm-ccm-host"), "{built:?}");
}

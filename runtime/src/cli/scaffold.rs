//! `wasm-ccm provider new NAME`: a Rust provider crate that builds to a component as it is.
//!
//! The crate is a `cdylib` with the SDK and the contract this binary was built with beside
//! it (`wasm-ccm-sdk/`, `wit/provider.wit`), so it builds offline from crates.io's
//! dependencies alone and implements the very contract this manager hosts. Its provider
//! answers instance questions from the cloud simulator, so `provider call` works on it
//! against a `cloud-sim` before the author has written a line; a README says the next steps.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The longest provider name: a DNS label, as the scheme of provider IDs should be.
const MAX_NAME: usize = 63;

/// The files of a new provider crate: path and template.
const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("scaffold/Cargo.toml.in")),
    ("README.md", include_str!("scaffold/README.md.in")),
    ("src/lib.rs", include_str!("scaffold/lib.rs.in")),
    (
        "wasm-ccm-sdk/Cargo.toml",
        include_str!("scaffold/sdk-Cargo.toml.in"),
    ),
    (".gitignore", "/target\n"),
];

/// The SDK's sources and the contract, as this binary was built with them (the SDK's
/// `wit_bindgen::generate!` reads `../wit` from its own directory).
const SDK: &[(&str, &str)] = &[
    (
        "wit/provider.wit",
        include_str!("../../../wit/provider.wit"),
    ),
    (
        "wasm-ccm-sdk/src/lib.rs",
        include_str!("../../../guest-sdk/src/lib.rs"),
    ),
    (
        "wasm-ccm-sdk/src/cache.rs",
        include_str!("../../../guest-sdk/src/cache.rs"),
    ),
    (
        "wasm-ccm-sdk/src/config.rs",
        include_str!("../../../guest-sdk/src/config.rs"),
    ),
    (
        "wasm-ccm-sdk/src/error.rs",
        include_str!("../../../guest-sdk/src/error.rs"),
    ),
    (
        "wasm-ccm-sdk/src/http.rs",
        include_str!("../../../guest-sdk/src/http.rs"),
    ),
    (
        "wasm-ccm-sdk/src/labels.rs",
        include_str!("../../../guest-sdk/src/labels.rs"),
    ),
    (
        "wasm-ccm-sdk/src/log.rs",
        include_str!("../../../guest-sdk/src/log.rs"),
    ),
    (
        "wasm-ccm-sdk/src/nodes.rs",
        include_str!("../../../guest-sdk/src/nodes.rs"),
    ),
    (
        "wasm-ccm-sdk/src/traits.rs",
        include_str!("../../../guest-sdk/src/traits.rs"),
    ),
];

/// Write a new provider crate named `name` into `dir` (`./NAME` when `None`); the
/// directory it wrote.
pub fn new_provider(name: &str, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    let occupied = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        bail!(
            "{}: the directory is not empty; choose another with --dir",
            dir.display()
        );
    }
    for (path, template) in FILES {
        write(&dir, path, &render(template, name))?;
    }
    for (path, text) in SDK {
        write(&dir, path, text)?;
    }
    Ok(dir)
}

/// `NAME` must be a provider name that is also a crate name: a lowercase letter, then
/// lowercase letters, digits and `-`, at most 63 in all.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !starts_well || !rest_ok || name.ends_with('-') || name.len() > MAX_NAME {
        bail!(
            "NAME {name:?}: a provider's name starts its provider IDs (NAME://ID) and names its crate: use a lowercase letter, then lowercase letters, digits and '-' (not last), at most {MAX_NAME}"
        );
    }
    Ok(())
}

/// `template` with its placeholders filled in for the provider `name`.
fn render(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{type_name}}", &type_name(name))
        .replace("{{file_name}}", &name.replace('-', "_"))
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
}

/// `my-cloud` → `MyCloud`.
fn type_name(name: &str) -> String {
    name.split('-')
        .flat_map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase())
                .into_iter()
                .chain(chars)
        })
        .collect()
}

fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_provider_and_crate_names() {
        for good in ["acme", "my-cloud", "c9", "a"] {
            check_name(good).unwrap_or_else(|error| panic!("{good}: {error}"));
        }
        for bad in [
            "",
            "Acme",
            "9cloud",
            "my_cloud",
            "cloud-",
            "a.b",
            &"x".repeat(64),
        ] {
            let error = check_name(bad).expect_err(bad).to_string();
            assert!(error.starts_with(&format!("NAME {bad:?}: ")), "{error}");
        }
        assert_eq!(type_name("my-cloud"), "MyCloud");
        assert_eq!(type_name("acme"), "Acme");
    }

    #[test]
    fn every_placeholder_is_filled() {
        for (path, template) in FILES {
            let text = render(template, "my-cloud");
            assert!(!text.contains("{{"), "{path}: {text}");
        }
    }

    /// The SDK's manifest beside a new crate names the dependencies the workspace builds the
    /// SDK with, at the same versions.
    #[test]
    fn every_source_of_the_sdk_is_written() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk/src");
        let mut sources: Vec<String> = std::fs::read_dir(dir)
            .expect("the SDK's sources")
            .map(|entry| entry.expect("an entry").file_name())
            .map(|name| format!("wasm-ccm-sdk/src/{}", name.to_string_lossy()))
            .collect();
        sources.sort();
        let mut written: Vec<&str> = SDK
            .iter()
            .map(|(path, _)| *path)
            .filter(|path| path.starts_with("wasm-ccm-sdk/src/"))
            .collect();
        written.sort();
        assert_eq!(
            written, sources,
            "SDK in scaffold.rs lists every file of guest-sdk/src"
        );
    }

    #[test]
    fn the_sdk_manifest_matches_the_workspace() {
        let workspace = include_str!("../../../Cargo.toml");
        let sdk = include_str!("../../../guest-sdk/Cargo.toml");
        let written = render(FILES[3].1, "x");
        let dependencies = sdk
            .split_once("[dependencies]")
            .expect("the SDK has dependencies")
            .1;
        for line in dependencies
            .lines()
            .filter(|l| l.ends_with(".workspace = true"))
        {
            let crate_name = line.trim_end_matches(".workspace = true");
            let pinned = workspace
                .lines()
                .find(|l| l.starts_with(&format!("{crate_name} = ")))
                .unwrap_or_else(|| panic!("{crate_name} in the workspace"));
            assert!(
                written.lines().any(|l| l == pinned),
                "the SDK written by `provider new` has {pinned:?}:\n{written}"
            );
        }
        let sdk_files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk/src"))
            .expect("the SDK's sources")
            .count();
        let written = SDK
            .iter()
            .filter(|(path, _)| path.starts_with("wasm-ccm-sdk/src/"))
            .count();
        assert_eq!(
            written, sdk_files,
            "every source file of the SDK is written"
        );
    }
}

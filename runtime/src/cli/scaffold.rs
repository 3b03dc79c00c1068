//! `wasm-ccm provider new NAME [--language rust|typescript|python]`: a provider project that
//! builds to a component as it is.
//!
//! The project has the SDK of its language and the contract this binary was built with
//! beside it (`wasm-ccm-sdk/` or `src/wasm_ccm_sdk/`, `wit/`), and its build tools pinned to
//! the versions this checkout builds and tests with (Cargo's dependencies, the SDK's npm lock
//! file, componentize-py in `requirements.txt`), so it builds from the package registries
//! alone and implements the very contract this manager hosts. Its provider answers instance
//! questions from the cloud simulator, so `provider call` works on it against a `cloud-sim`
//! before the author has written a line; a README says the next steps.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The longest provider name: a DNS label, as the scheme of provider IDs should be.
const MAX_NAME: usize = 63;

/// Files of a project: path and text.
type Files = &'static [(&'static str, &'static str)];

/// The languages `provider new` writes a provider in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    /// A `cdylib` crate built by cargo for `wasm32-wasip2`.
    #[default]
    Rust,
    /// An npm package built by componentize-js (`npm run build`).
    Typescript,
    /// A Python project built by componentize-py (`sh build.sh`).
    Python,
}

impl Language {
    /// The language's name as its users write it.
    pub fn title(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Typescript => "TypeScript",
            Language::Python => "Python",
        }
    }

    /// The project's own files (path and text, both templates) and the SDK's and the
    /// contract's, copied as this binary was built with them.
    fn files(self) -> (Files, Files) {
        match self {
            Language::Rust => (RUST, RUST_SDK),
            Language::Typescript => (TYPESCRIPT, TYPESCRIPT_SDK),
            Language::Python => (PYTHON, PYTHON_SDK),
        }
    }

    /// How to build the project at `dir`, and where the component is, for the provider
    /// `name`: what `provider new` tells the author.
    pub fn build_hint(self, name: &str, dir: &Path) -> String {
        let dir = shell_quoted(&dir.display().to_string());
        match self {
            Language::Rust => format!(
                "  cd {dir} && cargo build --target wasm32-wasip2 --release\nIt writes target/wasm32-wasip2/release/{}.wasm.",
                name.replace('-', "_")
            ),
            Language::Typescript => {
                format!("  cd {dir} && npm ci && npm run build\nIt writes target/{name}.wasm.")
            }
            Language::Python => format!(
                "  cd {dir} && python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && sh build.sh\nIt writes target/{name}.wasm."
            ),
        }
    }
}

/// A Rust provider's files: path and template.
const RUST: Files = &[
    ("Cargo.toml", include_str!("scaffold/rust/Cargo.toml.in")),
    ("README.md", include_str!("scaffold/rust/README.md.in")),
    ("src/lib.rs", include_str!("scaffold/rust/lib.rs.in")),
    (
        "wasm-ccm-sdk/Cargo.toml",
        include_str!("scaffold/rust/sdk-Cargo.toml.in"),
    ),
    (".gitignore", "/target\n"),
];

/// The Rust SDK's sources and the contract (the SDK's `wit_bindgen::generate!` reads `../wit`
/// from its own directory).
const RUST_SDK: Files = &[
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

/// A TypeScript provider's files: path and template. The lock file is the SDK's
/// (`package_lock`): `npm ci` installs the very tools this checkout's tests build with.
const TYPESCRIPT: Files = &[
    (
        "package.json",
        include_str!("scaffold/typescript/package.json.in"),
    ),
    (
        "README.md",
        include_str!("scaffold/typescript/README.md.in"),
    ),
    (
        "src/index.ts",
        include_str!("scaffold/typescript/index.ts.in"),
    ),
    (".gitignore", "/node_modules\n/target\n"),
    (
        ".npmrc",
        "# The build runs no package's install script (esbuild's only checks its binary).\nignore-scripts=true\n",
    ),
];

/// The TypeScript SDK's sources and its build script (which finds the SDK beside itself, in
/// `src/`), and the contract.
const TYPESCRIPT_SDK: Files = &[
    (
        "wit/provider.wit",
        include_str!("../../../wit/provider.wit"),
    ),
    (
        "wasm-ccm-sdk/build.mjs",
        include_str!("../../../guest-sdk-js/build.mjs"),
    ),
    (
        "wasm-ccm-sdk/src/errors.ts",
        include_str!("../../../guest-sdk-js/src/errors.ts"),
    ),
    (
        "wasm-ccm-sdk/src/host.ts",
        include_str!("../../../guest-sdk-js/src/host.ts"),
    ),
    (
        "wasm-ccm-sdk/src/http.ts",
        include_str!("../../../guest-sdk-js/src/http.ts"),
    ),
    (
        "wasm-ccm-sdk/src/index.ts",
        include_str!("../../../guest-sdk-js/src/index.ts"),
    ),
    (
        "wasm-ccm-sdk/src/provider.ts",
        include_str!("../../../guest-sdk-js/src/provider.ts"),
    ),
];

/// The TypeScript SDK's lock file, whose root package `package_lock` renames.
const SDK_PACKAGE_LOCK: &str = include_str!("../../../guest-sdk-js/package-lock.json");

/// A Python provider's files: path and template. The provider is the module `app`
/// (componentize-py's convention; a module named after the provider could shadow one of
/// Python's own, `json` or `test`, for the SDK).
const PYTHON: Files = &[
    (
        "requirements.txt",
        include_str!("scaffold/python/requirements.txt.in"),
    ),
    ("build.sh", include_str!("scaffold/python/build.sh.in")),
    ("README.md", include_str!("scaffold/python/README.md.in")),
    ("src/app.py", include_str!("scaffold/python/app.py.in")),
    (".gitignore", "/.venv\n/target\n__pycache__/\n"),
];

/// The Python SDK's package, the world Python providers are built for with the WASI
/// interfaces it names, and the contract (in the repository a link, here a copy).
const PYTHON_SDK: Files = &[
    (
        "wit/world.wit",
        include_str!("../../../guest-sdk-py/wit/world.wit"),
    ),
    (
        "wit/deps/provider/provider.wit",
        include_str!("../../../wit/provider.wit"),
    ),
    (
        "wit/deps/cli.wit",
        include_str!("../../../guest-sdk-py/wit/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../guest-sdk-py/wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../guest-sdk-py/wit/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../guest-sdk-py/wit/deps/http.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../guest-sdk-py/wit/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../guest-sdk-py/wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../guest-sdk-py/wit/deps/sockets.wit"),
    ),
    (
        "src/wasm_ccm_sdk/__init__.py",
        include_str!("../../../guest-sdk-py/wasm_ccm_sdk/__init__.py"),
    ),
    (
        "src/wasm_ccm_sdk/errors.py",
        include_str!("../../../guest-sdk-py/wasm_ccm_sdk/errors.py"),
    ),
    (
        "src/wasm_ccm_sdk/host.py",
        include_str!("../../../guest-sdk-py/wasm_ccm_sdk/host.py"),
    ),
    (
        "src/wasm_ccm_sdk/http.py",
        include_str!("../../../guest-sdk-py/wasm_ccm_sdk/http.py"),
    ),
    (
        "src/wasm_ccm_sdk/provider.py",
        include_str!("../../../guest-sdk-py/wasm_ccm_sdk/provider.py"),
    ),
];

/// Write a new provider named `name` in `language` into `dir` (`./NAME` when `None`); the
/// directory it wrote.
pub fn new_provider(name: &str, language: Language, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    let occupied = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        bail!(
            "{}: the directory is not empty; choose another with --dir",
            dir.display()
        );
    }
    let (own, sdk) = language.files();
    for (path, template) in own {
        write(&dir, path, &render(template, name))?;
    }
    for (path, text) in sdk {
        write(&dir, path, text)?;
    }
    if language == Language::Typescript {
        write(&dir, "package-lock.json", &package_lock(name))?;
    }
    Ok(dir)
}

/// The SDK's npm lock file for the package `name`: its root package renamed, every
/// dependency as it is.
fn package_lock(name: &str) -> String {
    SDK_PACKAGE_LOCK.replacen(
        "\"name\": \"@wasm-ccm/provider-sdk\"",
        &format!("\"name\": \"{name}\""),
        2,
    )
}

/// `NAME` must be a provider name that is also a crate and npm package name: a lowercase
/// letter, then lowercase letters, digits and `-`, at most 63 in all.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !starts_well || !rest_ok || name.ends_with('-') || name.len() > MAX_NAME {
        bail!(
            "NAME {name:?}: a provider's name starts its provider IDs (NAME://ID) and names its crate or package: use a lowercase letter, then lowercase letters, digits and '-' (not last), at most {MAX_NAME}"
        );
    }
    Ok(())
}

/// `template` with its placeholders filled in for the provider `name`.
fn render(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{file_name}}", &name.replace('-', "_"))
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
}

/// `word` as a shell reads it back: as it is when it is plain, else in single quotes.
fn shell_quoted(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./-+:=@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Write `text` to `path` under `dir`; a script (`#!`) is made executable.
fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    if text.starts_with("#!") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGUAGES: [Language; 3] = [Language::Rust, Language::Typescript, Language::Python];

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
    }

    #[test]
    fn build_hints_quote_the_directory_for_the_shell() {
        let hint = Language::Typescript.build_hint("a", Path::new("my dir/it's"));
        assert!(
            hint.starts_with(r"  cd 'my dir/it'\''s' && npm ci"),
            "{hint}"
        );
        let hint = Language::Rust.build_hint("my-cloud", Path::new("./my-cloud"));
        assert!(hint.starts_with("  cd ./my-cloud && cargo build"), "{hint}");
        assert!(hint.ends_with("release/my_cloud.wasm."), "{hint}");
    }

    #[test]
    fn every_placeholder_is_filled() {
        for language in LANGUAGES {
            for (path, template) in language.files().0 {
                let text = render(template, "my-cloud");
                assert!(!text.contains("{{"), "{language:?} {path}: {text}");
            }
        }
    }

    /// Every file of each SDK and of the contract (a directory of the repository) is written
    /// to the project (under `written_under`), and nothing else is written there.
    #[test]
    fn every_source_of_each_sdk_is_written() {
        let sdks = [
            (Language::Rust, "guest-sdk/src", "wasm-ccm-sdk/src/"),
            (
                Language::Typescript,
                "guest-sdk-js/src",
                "wasm-ccm-sdk/src/",
            ),
            (
                Language::Python,
                "guest-sdk-py/wasm_ccm_sdk",
                "src/wasm_ccm_sdk/",
            ),
            (Language::Python, "guest-sdk-py/wit/deps", "wit/deps/"),
            // The contract, whole.
            (Language::Rust, "wit", "wit/"),
            (Language::Typescript, "wit", "wit/"),
            (Language::Python, "wit", "wit/deps/provider/"),
        ];
        for (language, sdk, written_under) in sdks {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(sdk);
            let mut sources: Vec<String> = std::fs::read_dir(&dir)
                .unwrap_or_else(|error| panic!("{sdk}: {error}"))
                .map(|entry| entry.expect("an entry").path())
                .filter(|path| path.is_file())
                .map(|path| {
                    let name = path.file_name().expect("a file name").to_string_lossy();
                    format!("{written_under}{name}")
                })
                .collect();
            sources.sort();
            let mut written: Vec<&str> = language
                .files()
                .1
                .iter()
                .map(|(path, _)| *path)
                .filter(|path| {
                    path.strip_prefix(written_under)
                        .is_some_and(|name| !name.contains('/'))
                })
                .collect();
            written.sort();
            assert_eq!(
                written, sources,
                "the {language:?} SDK in scaffold.rs lists every file of {sdk}"
            );
        }
    }

    /// The SDK's manifest beside a new crate names the dependencies the workspace builds the
    /// SDK with, at the same versions.
    #[test]
    fn the_sdk_manifest_matches_the_workspace() {
        let workspace = include_str!("../../../Cargo.toml");
        let sdk = include_str!("../../../guest-sdk/Cargo.toml");
        let written = render(include_str!("scaffold/rust/sdk-Cargo.toml.in"), "x");
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
    }

    /// A TypeScript project pins the tools the SDK's own lock file does (so `npm ci` takes
    /// that lock), under its own name.
    #[test]
    fn a_typescript_project_pins_the_sdks_tools() {
        let sdk: serde_json::Value =
            serde_json::from_str(include_str!("../../../guest-sdk-js/package.json")).expect("JSON");
        let package: serde_json::Value = serde_json::from_str(&render(
            include_str!("scaffold/typescript/package.json.in"),
            "my-cloud",
        ))
        .expect("package.json is JSON");
        assert_eq!(package["name"], "my-cloud");
        assert_eq!(package["devDependencies"], sdk["devDependencies"]);
        let lock: serde_json::Value =
            serde_json::from_str(&package_lock("my-cloud")).expect("the lock is JSON");
        assert_eq!(lock["name"], "my-cloud");
        assert_eq!(lock["packages"][""]["name"], "my-cloud");
        assert_eq!(
            lock["packages"][""]["devDependencies"],
            sdk["devDependencies"]
        );
    }

    /// A Python project pins componentize-py as the tests do.
    #[test]
    fn a_python_project_pins_the_tests_componentize_py() {
        let requirements = render(
            include_str!("scaffold/python/requirements.txt.in"),
            "my-cloud",
        );
        let pin = requirements
            .lines()
            .find(|line| line.starts_with("componentize-py=="))
            .expect("componentize-py is pinned");
        assert!(
            include_str!("../../../tests/python-tools.txt")
                .lines()
                .any(|line| line == pin),
            "tests/python-tools.txt has {pin}"
        );
    }
}

//! The container image as an operator gets it: `image/build.sh`, typed as the install page
//! gives it, packs the manager binary the tests built (no release build, no daemon) and
//! pushes it to Debian's `docker-registry` on loopback; the test then reads the image back
//! over the registry's HTTP API, checks its config, labels and every file of its layer, and
//! runs the binary inside it with the image's own dynamic loader and libraries: a non-root user, the entrypoint and port, the OCI labels
//! (revision = git HEAD) also as annotations, a layer holding exactly the binary, its
//! libraries, the CA bundle, passwd, group and nsswitch.conf (no shell, no links). Two builds
//! of the same binary and commit give one digest. `make setup` installs umoci and skopeo.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use e2e::docs;
use e2e::registry::{Registry, RegistryOptions};

/// 2026-01-01T00:00:00Z: the mtime of every file and the image's `created`.
const SOURCE_DATE_EPOCH: &str = "1767225600";
const CREATED: &str = "2026-01-01T00:00:00Z";
const SOURCE: &str = "https://example.test/wasm-ccm";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails, saying how to install them, when the image tools are missing: a test that cannot
/// build the image must not pass.
fn require_image_tools() {
    for tool in ["umoci", "skopeo", "tar", "ldd"] {
        let found = Command::new(tool).arg("--version").output();
        assert!(
            found.is_ok_and(|output| output.status.success()),
            "`{tool}` is not installed: the image test builds with umoci and pushes with \
             skopeo; `make setup` (or tests/install-test-tools.sh) installs them"
        );
    }
}

fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8(run(command).stdout).expect("UTF-8 output")
}

fn git_head() -> String {
    stdout(
        Command::new("git")
            .arg("-C")
            .arg(workspace_root())
            .args(["rev-parse", "HEAD"]),
    )
    .trim()
    .to_owned()
}

/// `image/build.sh ARGS` on the binary under test, with fixed mtimes.
fn build_image(binary: &Path, args: &[&str]) -> Output {
    let root = workspace_root();
    run(Command::new("bash")
        .arg(root.join("image/build.sh"))
        .arg("--binary")
        .arg(binary)
        .args(["--source", SOURCE])
        .args(args)
        .env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
        .current_dir(&root))
}

/// The libraries and the dynamic loader `ldd` resolves for `binary`, as absolute paths.
fn linked_libraries(binary: &Path) -> Vec<PathBuf> {
    stdout(Command::new("ldd").arg(binary))
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, "=>", path, ..] if path.starts_with('/') => Some(PathBuf::from(path)),
                [path, ..] if path.starts_with('/') => Some(PathBuf::from(path)),
                _ => None,
            }
        })
        .collect()
}

/// The manifest digest an OCI layout's index.json names (the layout holds one image).
fn layout_manifest_digest(layout: &Path) -> String {
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json")).expect("the layout's index.json"),
    )
    .expect("index.json is JSON");
    index["manifests"][0]["digest"]
        .as_str()
        .expect("index.json names a manifest")
        .to_owned()
}

/// One entry of `tar -tvz`: `-rwxr-xr-x 0/0 112428320 2026-01-01 00:00 usr/local/bin/wasm-ccm`.
#[derive(Debug)]
struct LayerEntry {
    mode: String,
    owner: String,
    path: String,
}

fn layer_entries(layer: &Path) -> Vec<LayerEntry> {
    stdout(
        Command::new("tar")
            .args(["--numeric-owner", "-tvzf"])
            .arg(layer),
    )
    .lines()
    .map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields.len(), 6, "unexpected tar listing line {line:?}");
        LayerEntry {
            mode: fields[0].into(),
            owner: fields[1].into(),
            path: fields[5].trim_end_matches('/').into(),
        }
    })
    .collect()
}

async fn registry_blob(registry: &Registry, repository: &str, digest: &str) -> bytes::Bytes {
    let response = registry
        .get(&format!("/v2/{repository}/blobs/{digest}"), None)
        .await
        .expect("GET blob");
    assert_eq!(response.status(), 200, "blob {digest}");
    let body = response.into_body();
    assert_eq!(
        e2e::sha256_digest(&body),
        digest,
        "the registry's blob matches its digest"
    );
    body
}

#[tokio::test]
async fn pushed_image_runs_the_manager_as_nonroot_with_only_its_own_libraries() {
    require_image_tools();
    let binary = e2e::wasm_ccm_binary();
    let version_output = stdout(Command::new(&binary).arg("--version"));
    let version = version_output
        .split_whitespace()
        .nth(1)
        .expect("`wasm-ccm --version` prints a version")
        .to_owned();
    let registry = Registry::start(RegistryOptions::default()).await;
    let reference = registry.reference("wasm-ccm:dev");
    let dir = tempfile::tempdir().expect("temp dir");
    let layout = dir.path().join("oci");

    // The install page's build of a built binary, typed in the repository. Another commit
    // may land while the image builds: the revision is HEAD before or after.
    let typed = docs::substitute(
        &docs::block_starting(
            "docs/src/operators/install.md",
            "sh",
            "image/build.sh --binary",
        ),
        &[
            ("--binary PATH", &format!("--binary {}", binary.display())),
            ("--layout DIR", &format!("--layout {}", layout.display())),
            ("--tag TAG", "--tag dev"),
            ("--source URL", &format!("--source {SOURCE}")),
            ("127.0.0.1:5000", &registry.addr().to_string()),
        ],
    );
    let head_before = git_head();
    let build = run(Command::new("sh")
        .arg("-c")
        .arg(&typed)
        .env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
        .current_dir(workspace_root()));
    let heads = [head_before, git_head()];

    // The manifest as a client pulls it, by tag: the digest the layout and the script name.
    let response = registry
        .get("/v2/wasm-ccm/manifests/dev", None)
        .await
        .expect("GET manifest");
    assert_eq!(response.status(), 200, "{}", registry.log());
    let manifest_digest = e2e::sha256_digest(response.body());
    assert_eq!(
        manifest_digest,
        layout_manifest_digest(&layout),
        "skopeo kept the digest"
    );
    let log = String::from_utf8_lossy(&build.stderr);
    assert!(
        log.contains(&format!("pushed {reference}@{manifest_digest}")),
        "the script names what it pushed:\n{log}"
    );
    let manifest: serde_json::Value = serde_json::from_slice(response.body()).expect("JSON");
    // umoci leaves the manifest's optional `mediaType` out; the registry serves it by type.
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], OCI_MANIFEST);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer: {manifest:#}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );

    // The config: who runs what, and the OCI labels, also as manifest annotations.
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .expect("config digest");
    let config: serde_json::Value =
        serde_json::from_slice(&registry_blob(&registry, "wasm-ccm", config_digest).await)
            .expect("config JSON");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["created"], CREATED);
    let run_config = &config["config"];
    assert_eq!(run_config["User"], "65532:65532", "non-root: {config:#}");
    assert_eq!(
        run_config["Entrypoint"],
        serde_json::json!(["/usr/local/bin/wasm-ccm"])
    );
    assert_eq!(run_config["WorkingDir"], "/home/nonroot");
    assert_eq!(
        run_config["ExposedPorts"],
        serde_json::json!({ "10258/tcp": {} })
    );
    assert!(
        run_config["Env"]
            .as_array()
            .expect("Env")
            .contains(&"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".into()),
        "{config:#}"
    );
    let labels = &run_config["Labels"];
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .expect("a revision label");
    assert!(
        heads.iter().any(|head| head == revision),
        "revision {revision} is git HEAD ({heads:?})"
    );
    let expected_labels = serde_json::json!({
        "org.opencontainers.image.title": "wasm-ccm",
        "org.opencontainers.image.description":
            "Kubernetes cloud-controller-manager whose cloud providers are WebAssembly components",
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": CREATED,
    });
    assert_eq!(labels, &expected_labels);
    assert_eq!(manifest["annotations"], expected_labels);

    // The layer: exactly the manager, its libraries, the CA bundle, the user and group files,
    // nsswitch.conf and the copyright files of what came from Debian. No shell, no symlink.
    let layer_digest = layers[0]["digest"].as_str().expect("layer digest");
    let layer = dir.path().join("layer.tar.gz");
    std::fs::write(
        &layer,
        registry_blob(&registry, "wasm-ccm", layer_digest).await,
    )
    .expect("write the layer");
    let entries = layer_entries(&layer);
    let libraries = linked_libraries(&binary);
    assert!(
        libraries
            .iter()
            .any(|library| library.to_string_lossy().contains("libc.so")),
        "the manager links glibc: {libraries:?}"
    );
    let mut expected_files: BTreeSet<String> = [
        "usr/local/bin/wasm-ccm",
        "etc/ssl/certs/ca-certificates.crt",
        "etc/passwd",
        "etc/group",
        "etc/nsswitch.conf",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    expected_files.extend(
        libraries
            .iter()
            .map(|library| library.to_string_lossy().trim_start_matches('/').to_owned()),
    );
    let files: BTreeSet<String> = entries
        .iter()
        .filter(|entry| entry.mode.starts_with('-'))
        .map(|entry| entry.path.clone())
        .filter(|path| !(path.starts_with("usr/share/doc/") && path.ends_with("/copyright")))
        .collect();
    assert_eq!(files, expected_files, "the layer's files");
    for entry in &entries {
        assert!(
            entry.mode.starts_with('-') || entry.mode.starts_with('d'),
            "only files and directories, no links or devices: {entry:?}"
        );
        assert!(
            !entry.path.starts_with("bin") && !entry.path.starts_with("usr/bin"),
            "no shell or tools in the image: {entry:?}"
        );
        let owner = if entry.path == "home/nonroot" {
            "65532/65532"
        } else {
            "0/0"
        };
        assert_eq!(entry.owner, owner, "{entry:?}");
    }
    let mode_of = |path: &str| {
        let entry = entries.iter().find(|entry| entry.path == path);
        entry
            .unwrap_or_else(|| panic!("{path} is in the layer"))
            .mode
            .clone()
    };
    assert_eq!(mode_of("tmp"), "drwxrwxrwt");
    assert_eq!(mode_of("usr/local/bin/wasm-ccm"), "-rwxr-xr-x");
    for package in ["libc6", "ca-certificates"] {
        mode_of(&format!("usr/share/doc/{package}/copyright"));
    }

    // Unpacked, it holds the very binary that was built, and the non-root user.
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).expect("rootfs dir");
    run(Command::new("tar")
        .args(["--no-same-owner", "-xzf"])
        .arg(&layer)
        .arg("-C")
        .arg(&rootfs));
    assert!(!rootfs.join("bin/sh").exists(), "no /bin/sh");
    let read = |path: &str| std::fs::read(rootfs.join(path)).expect(path);
    assert_eq!(
        e2e::sha256_digest(&read("usr/local/bin/wasm-ccm")),
        e2e::sha256_digest(&std::fs::read(&binary).expect("the binary under test")),
    );
    let passwd = String::from_utf8(read("etc/passwd")).expect("UTF-8 passwd");
    assert!(
        passwd.contains("nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"),
        "{passwd}"
    );
    assert!(
        String::from_utf8(read("etc/group"))
            .expect("UTF-8")
            .contains("nonroot:x:65532:")
    );
    assert!(
        String::from_utf8(read("etc/ssl/certs/ca-certificates.crt"))
            .expect("UTF-8 bundle")
            .matches("BEGIN CERTIFICATE")
            .count()
            > 100,
        "the CA bundle holds the Mozilla roots"
    );

    // The binary runs on the image's loader and libraries alone, without a chroot: the loader
    // from the rootfs, the rootfs library directories first, and every library it resolves
    // must come from the rootfs.
    let loader = libraries
        .iter()
        .find(|library| {
            library
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("ld-linux"))
        })
        .expect("the dynamic loader");
    let library_path = libraries
        .iter()
        .filter_map(|library| library.parent())
        .map(|dir| rootfs.join(dir.strip_prefix("/").expect("absolute")))
        .map(|dir| dir.to_string_lossy().into_owned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
        .join(":");
    let in_image = |loader_args: &[&str], args: &[&str]| {
        let mut command = Command::new(rootfs.join(loader.strip_prefix("/").expect("absolute")));
        command
            .args(loader_args)
            .args(["--inhibit-cache", "--library-path", &library_path])
            .arg(rootfs.join("usr/local/bin/wasm-ccm"))
            .args(args)
            .env_clear();
        command
    };
    let resolved = stdout(&mut in_image(&["--list"], &[]));
    for line in resolved.lines().filter(|line| line.contains("=>")) {
        let path = line.split_whitespace().nth(2).expect("a resolved path");
        assert!(
            Path::new(path).starts_with(&rootfs),
            "{line:?} resolves outside the image:\n{resolved}"
        );
    }
    assert_eq!(stdout(&mut in_image(&[], &["--version"])), version_output);
}

#[test]
fn the_same_binary_and_commit_build_the_same_image() {
    require_image_tools();
    let binary = e2e::wasm_ccm_binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let digests: Vec<String> = ["first", "second"]
        .iter()
        .map(|name| {
            let layout = dir.path().join(name);
            build_image(
                &binary,
                &[
                    "--layout",
                    layout.to_str().expect("UTF-8 path"),
                    "--revision",
                    "0123456789abcdef0123456789abcdef01234567",
                ],
            );
            layout_manifest_digest(&layout)
        })
        .collect();
    assert_eq!(digests[0], digests[1], "two builds, one digest");
}

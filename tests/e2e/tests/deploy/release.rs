//! A release as a maintainer makes it and an operator installs it, against Debian's
//! `docker-registry` and the API emulator. In a copy of the tree made as a fresh clone (its
//! files committed), the releasing page's blocks are typed: the release key, `make
//! release-prepare`, and `release/release.sh publish` for linux/amd64 with the test build's
//! manager (the arm64 build is `make release-check`'s). The registry then holds an image
//! index naming the amd64 image, the chart with that index pinned by digest, both signed
//! (checked by the install page's `wasm-ccm artifact verify` and by `cosign.py`, an
//! independent implementation), and the SBOM attached to the index (read back by the page's
//! `wasm-ccm artifact attached`, and listed in the referrers fallback index). Published
//! again, the same commit gives the same index, chart archive and SBOM. The install page's
//! `helm install … oci://…` renders and applies on the emulator, the Deployment naming the
//! image by the index's digest; the next version, prepared in the copy and built from it,
//! is published, and the page's `helm show crds | kubectl apply` and `helm upgrade` move
//! the release to it: the Deployment names the new index, the values given are kept.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::TOKEN;
use e2e::chart::{self, NAMESPACE};
use e2e::docs::{self, Shell};
use e2e::registry::{Registry, RegistryOptions};
use e2e::testbed::Testbed;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use serde_json::Value;
use wasm_ccm::resource::CloudProvider;

const RELEASE: &str = "wasm-ccm";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `1.2.3` → `1.2.4`.
fn next_patch(version: &str) -> String {
    let (head, patch) = version.rsplit_once('.').expect("X.Y.Z");
    format!(
        "{head}.{}",
        patch.parse::<u32>().expect("a patch number") + 1
    )
}

/// A copy of the tree as a fresh clone has it: the files git tracks or would (not ignored),
/// as they are now, committed in a repository of their own.
fn fresh_clone(shell: &Shell) -> PathBuf {
    let clone = shell.path("wasm-ccm");
    std::fs::create_dir(&clone).expect("the clone's directory");
    let copied = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git ls-files -z --cached --others --exclude-standard \
             | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C '{}'",
            clone.display()
        ))
        .current_dir(repo())
        .status()
        .expect("copy the tree");
    assert!(copied.success(), "copying the tree failed");
    shell.typed(&format!(
        "cd {} && git init -q && git add -A && git commit -q -m 'The tree under test'",
        clone.display()
    ));
    clone
}

/// What `release.txt` says `key` is: `image: REG/acme/wasm-ccm:0.1.0@sha256:…`.
fn released(clone: &Path, version: &str, key: &str) -> String {
    let text = std::fs::read_to_string(clone.join(format!("target/dist/{version}/release.txt")))
        .expect("release.txt");
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("release.txt has no {key}: {text}"))
        .to_string()
}

fn digest_of(reference: &str) -> String {
    reference
        .rsplit_once('@')
        .expect("REFERENCE@DIGEST")
        .1
        .to_string()
}

/// `cosign.py verify` of `digest` in `repository` with `key`: the independent check of the
/// signature layout and of each signature.
fn cosign_py_verifies(registry: &Registry, repository: &str, digest: &str, key: &Path) {
    registry.cosign_py(serde_json::json!({
        "command": "verify",
        "repository": repository,
        "digest": digest,
        "key": key,
    }));
}

/// A block of the releasing page typed in `clone` with `substitutions` (the page's version
/// first: `0.1.0`).
fn typed_in(shell: &Shell, clone: &Path, block: &str, substitutions: &[(&str, &str)]) {
    shell.typed(&format!(
        "cd {}\n{}",
        clone.display(),
        docs::substitute(block, substitutions)
    ));
}

/// The releasing page's publish block for `version`, with this test's registry, binary and
/// key.
fn publish(shell: &Shell, clone: &Path, version: &str, registry: &Registry, binary: &Path) {
    typed_in(
        shell,
        clone,
        &docs::block_starting(
            "docs/src/contributing/releasing.md",
            "sh",
            "release/release.sh publish",
        ),
        &[
            ("0.1.0", version),
            ("127.0.0.1:5000", &registry.addr().to_string()),
            ("target/release/wasm-ccm", &binary.display().to_string()),
            (
                "~/release.pem",
                &shell.path("release.pem").display().to_string(),
            ),
        ],
    );
}

/// The releasing page's `make release-prepare` for `version`.
fn prepare(shell: &Shell, clone: &Path, version: &str) {
    let block = docs::block_starting(
        "docs/src/contributing/releasing.md",
        "sh",
        "make release-prepare",
    );
    typed_in(shell, clone, &block, &[("0.1.0", version)]);
}

/// The manager built from `clone` as its own build would, into the shared target directory
/// (only the workspace's own crates are compiled again); the path of the binary.
fn build_manager(clone: &Path) -> PathBuf {
    // target/debug/deps/THIS_TEST → target
    let target = std::env::current_exe()
        .expect("the test's own path")
        .ancestors()
        .nth(3)
        .expect("tests run from target/<profile>/deps")
        .to_path_buf();
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()));
    // Without what cargo set for this test (CARGO_MANIFEST_DIR, CARGO_PKG_*…): build scripts
    // that read them (ring's) would otherwise be run again, here and in the next build of
    // the tree.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CARGO_") && name != "CARGO_HOME" {
            cargo.env_remove(name);
        }
    }
    // Cargo puts the binary at target/debug/wasm-ccm, where the tree's own is: kept aside
    // and put back, so the tree's target directory is left as it was.
    let uplifted = target.join("debug/wasm-ccm");
    let own = target.join("debug/wasm-ccm.kept-by-the-release-test");
    let kept = std::fs::rename(&uplifted, &own).is_ok();
    let output = cargo
        // The native crates selected as `make test` builds them (the Makefile's NATIVE), so
        // features resolve as they did there and no dependency is compiled again.
        .args(["build", "--locked", "--bin", "wasm-ccm"])
        .args(
            [
                "wasm-ccm-host",
                "wasm-ccm",
                "wasm-ccm-sdk",
                "cloud-sim",
                "guest-builds",
                "e2e",
                "kube-emulator",
                "docs-book",
            ]
            .iter()
            .flat_map(|package| ["-p", package]),
        )
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(clone)
        .stdin(Stdio::null())
        .output()
        .expect("run cargo build");
    let binary = clone.with_file_name("wasm-ccm-next");
    let built = std::fs::copy(&uplifted, &binary);
    if kept {
        std::fs::rename(&own, &uplifted).expect("put the tree's manager back");
    }
    assert!(
        output.status.success(),
        "cargo build in the clone: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    built.expect("copy the clone's manager");
    binary
}

/// The image the release's Deployment runs.
async fn deployed_image(deployments: &Api<Deployment>) -> String {
    let deployment = deployments
        .get(RELEASE)
        .await
        .expect("the release's Deployment");
    let spec = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .expect("a pod spec");
    spec.containers[0].image.clone().expect("an image")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_published_signed_and_installed_and_upgraded_from_the_registry() {
    let version = env!("CARGO_PKG_VERSION").to_string();
    let next = next_patch(&version);
    let registry = Registry::start(RegistryOptions::default()).await;
    let host = registry.addr().to_string();
    let mut shell = Shell::new();
    shell.link("helm", &chart::helm());
    for (name, value) in [
        ("NAME", "Release Maintainer"),
        ("EMAIL", "maintainer@example.com"),
    ] {
        shell.env(&format!("GIT_AUTHOR_{name}"), value);
        shell.env(&format!("GIT_COMMITTER_{name}"), value);
    }
    // The maintainer's Rust toolchain, whatever the shell's HOME.
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    for (name, default) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
        let dir = std::env::var_os(name).map_or_else(|| home.join(default), PathBuf::from);
        shell.env(name, dir);
    }
    let clone = fresh_clone(&shell);

    // The release key, then the version prepared and published.
    shell.typed(&docs::block_starting(
        "docs/src/contributing/releasing.md",
        "sh",
        "openssl genpkey",
    ));
    prepare(&shell, &clone, &version);
    let changelog = std::fs::read_to_string(clone.join("CHANGELOG.md")).expect("CHANGELOG.md");
    assert!(
        changelog.contains(&format!("## [Unreleased]\n\n## [{version}] - 20")),
        "prepare moved [Unreleased] under the version: {changelog}"
    );
    shell.typed(&format!(
        "cd {} && git rev-parse -q --verify refs/tags/v{version}",
        clone.display()
    ));
    publish(&shell, &clone, &version, &registry, &e2e::wasm_ccm_binary());

    // The image index, naming the amd64 image, under the version's tag.
    let image = released(&clone, &version, "image");
    let index_digest = digest_of(&image);
    assert_eq!(
        image,
        format!("{host}/acme/wasm-ccm:{version}@{index_digest}")
    );
    let oras = registry.oras();
    let index = oras
        .manifest(&registry.reference(&format!("acme/wasm-ccm:{version}")))
        .await;
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let platforms: Vec<&Value> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|manifest| &manifest["platform"])
        .collect();
    assert_eq!(
        platforms,
        [&serde_json::json!({"architecture": "amd64", "os": "linux"})]
    );
    assert_eq!(
        index["annotations"]["org.opencontainers.image.version"],
        version.as_str()
    );

    // Signed, as the install page checks it and as cosign's layout says.
    let chart_reference = released(&clone, &version, "chart");
    let chart_digest = digest_of(&chart_reference);
    let verify = docs::block_starting(
        "docs/src/operators/install.md",
        "sh",
        "wasm-ccm artifact verify",
    );
    let verify = docs::substitute(
        &verify,
        &[
            ("ghcr.io/acme", &format!("{host}/acme")),
            (":0.1.0", &format!(":{version}")),
            (
                "--key release.pub",
                &format!("--key release.pub --insecure-registry {host}"),
            ),
        ],
    );
    let printed = shell.typed(&verify);
    assert!(
        printed.contains(&index_digest) && printed.contains(&chart_digest),
        "the page's verify commands print the digests they checked: {printed}"
    );
    let public_key = shell.path("release.pub");
    cosign_py_verifies(&registry, "acme/wasm-ccm", &index_digest, &public_key);
    cosign_py_verifies(
        &registry,
        "acme/charts/wasm-ccm",
        &chart_digest,
        &public_key,
    );
    let other = shell.typed(
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out other.pem \
         && openssl pkey -in other.pem -pubout -out other.pub && echo made",
    );
    assert_eq!(other.trim(), "made");
    let refused = shell.run(&format!(
        "wasm-ccm artifact verify oci://{host}/acme/wasm-ccm:{version} --key other.pub --insecure-registry {host}"
    ));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        refused.status.code() == Some(2) && stderr.contains("no valid signature by"),
        "another key's verify fails, saying so: {stderr}"
    );
    // The SBOM only with a signature by the key asked for.
    let unsigned = shell.run(&format!(
        "wasm-ccm artifact attached oci://{host}/acme/wasm-ccm:{version} \
         --artifact-type application/spdx+json --key other.pub --insecure-registry {host} -o x.json"
    ));
    let stderr = String::from_utf8_lossy(&unsigned.stderr);
    assert!(
        unsigned.status.code() == Some(1)
            && stderr.contains("left out")
            && stderr.contains("nothing of type application/spdx+json and signed by --key"),
        "an SBOM not signed by the key is left out: {stderr}"
    );

    // The SBOM, as published: the crates in the manager and the Debian packages in the image.
    let read_back =
        std::fs::read(shell.path("wasm-ccm.spdx.json")).expect("the SBOM the page wrote");
    let published = clone.join(format!(
        "target/dist/{version}/wasm-ccm-{version}.spdx.json"
    ));
    assert!(
        read_back == std::fs::read(published).expect("the SBOM publish wrote"),
        "the SBOM read back is the one published"
    );
    let sbom: Value = serde_json::from_slice(&read_back).expect("the SBOM is JSON");
    assert_eq!(sbom["spdxVersion"], "SPDX-2.3");
    let packages: Vec<(&str, &str)> = sbom["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            (
                package["name"].as_str().unwrap_or_default(),
                package["externalRefs"][0]["referenceLocator"]
                    .as_str()
                    .unwrap_or_default(),
            )
        })
        .collect();
    for (name, purl) in [
        ("wasmtime", "pkg:cargo/wasmtime@"),
        ("kube-client", "pkg:cargo/kube-client@"),
        ("libc6", "pkg:deb/debian/libc6@"),
        ("ca-certificates", "pkg:deb/debian/ca-certificates@"),
    ] {
        assert!(
            packages
                .iter()
                .any(|(n, p)| *n == name && p.starts_with(purl)),
            "the SBOM lists {name} ({purl}…): {packages:?}"
        );
    }
    assert_eq!(
        sbom["relationships"].as_array().map(Vec::len),
        Some(packages.len() - 1),
        "the image CONTAINS every other package"
    );
    let fallback = oras
        .manifest(&registry.reference(&format!("acme/wasm-ccm:{}", index_digest.replace(':', "-"))))
        .await;
    assert_eq!(
        fallback["manifests"][0]["artifactType"], "application/spdx+json",
        "the registry has no referrers API: the fallback index lists the SBOM: {fallback}"
    );

    // The same commit, published again: the same index, chart archive and SBOM.
    let dist = clone.join(format!("target/dist/{version}"));
    let first: Vec<Vec<u8>> = [
        format!("wasm-ccm-{version}.tgz"),
        format!("wasm-ccm-{version}.spdx.json"),
    ]
    .iter()
    .map(|name| std::fs::read(dist.join(name)).expect("a release file"))
    .collect();
    publish(&shell, &clone, &version, &registry, &e2e::wasm_ccm_binary());
    assert_eq!(released(&clone, &version, "image"), image);
    for (name, bytes) in [
        format!("wasm-ccm-{version}.tgz"),
        format!("wasm-ccm-{version}.spdx.json"),
    ]
    .iter()
    .zip(first)
    {
        assert!(
            std::fs::read(dist.join(name)).expect("a release file") == bytes,
            "{name} differs in a second publish of the same commit"
        );
    }

    // The install page's install, typed: the chart from the registry, its image the index.
    let bed = Testbed::start().await;
    let operator = chart::Operator::new(&bed.kubeconfig());
    operator.file(
        "cloud.json",
        "{\"api_url\": \"https://api.simcloud.example\"}\n",
    );
    operator.file("simcloud.yaml", &chart::install_values());
    let install = docs::block_starting(
        "docs/src/operators/install.md",
        "sh",
        "kubectl -n kube-system create secret generic simcloud",
    );
    operator.typed(&docs::substitute(
        &install,
        &[
            ("token=…", &format!("token={TOKEN}")),
            ("--docker-username=…", "--docker-username=acme"),
            ("--docker-password=…", "--docker-password=pull"),
            ("oci://ghcr.io/acme", &format!("oci://{host}/acme")),
            ("--version 0.1.0", &format!("--version {version}")),
            ("-f simcloud.yaml", "-f simcloud.yaml --plain-http"),
        ],
    ));
    let deployments: Api<Deployment> = Api::namespaced(bed.client.clone(), NAMESPACE);
    assert_eq!(
        deployed_image(&deployments).await,
        format!("{host}/acme/wasm-ccm@{index_digest}"),
        "the pod spec names the release's image by digest"
    );
    Api::<CloudProvider>::all(bed.client.clone())
        .get(RELEASE)
        .await
        .expect("the release's CloudProvider");

    // The next version: written down, prepared, built and published from the copy.
    let changelog = changelog.replacen(
        "## [Unreleased]\n",
        "## [Unreleased]\n\n### Fixed\n\n- What the next version fixes.\n",
        1,
    );
    std::fs::write(clone.join("CHANGELOG.md"), changelog).expect("write CHANGELOG.md");
    shell.typed(&format!(
        "cd {} && git commit -q -am 'What changed'",
        clone.display()
    ));
    prepare(&shell, &clone, &next);
    let chart_yaml =
        std::fs::read_to_string(clone.join("charts/wasm-ccm/Chart.yaml")).expect("Chart.yaml");
    assert!(
        chart_yaml.contains(&format!("\nversion: {next}\n"))
            && chart_yaml.contains(&format!("\nappVersion: \"{next}\"\n")),
        "prepare set the chart's versions: {chart_yaml}"
    );
    let binary = build_manager(&clone);
    publish(&shell, &clone, &next, &registry, &binary);
    let next_digest = digest_of(&released(&clone, &next, "image"));
    assert_ne!(next_digest, index_digest);

    // The install page's upgrade, typed.
    let upgrade = docs::block_starting("docs/src/operators/install.md", "sh", "helm show crds");
    operator.typed(&docs::substitute(
        &upgrade,
        &[
            ("oci://ghcr.io/acme", &format!("oci://{host}/acme")),
            ("--version 0.1.0", &format!("--version {next}")),
            (
                "--reset-then-reuse-values",
                "--reset-then-reuse-values --plain-http",
            ),
            ("| kubectl", "--plain-http | kubectl"),
        ],
    ));
    assert_eq!(
        deployed_image(&deployments).await,
        format!("{host}/acme/wasm-ccm@{next_digest}"),
        "the upgrade moved the pods to the next release's image"
    );
    let values = operator.helm(&["get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"]);
    let values: Value = serde_json::from_str(&values).expect("helm get values prints JSON");
    assert_eq!(
        values["provider"]["ref"], "oci://registry.example.com/acme/simcloud:v1.2.0",
        "the upgrade kept the values given at install"
    );
}

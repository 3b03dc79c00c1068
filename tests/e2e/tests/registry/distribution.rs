//! `wasm-ccm provider push|pull|inspect` and run mode with `--provider oci://…` against a real
//! registry: what an operator publishing and running providers from a registry sees.
//!
//! `provider push` then `pull` by tag, by digest and by both, byte-identical, ORAS reading the
//! media types and annotations we wrote and pulling the same bytes; `inspect` of an `oci://`
//! reference; the manager running an artifact ORAS pushed (`wasm_ccm_provider_info` naming
//! it), restarting pinned by digest with the registry stopped, from `--cache-dir` without
//! compiling, and refusing a tag with the registry down; refusals with their exact messages
//! (an unknown tag, a wrong pinned digest, a container image, a component that is no provider,
//! a blob tampered with in the registry's storage, missing and wrong credentials, never
//! printed, a plain-HTTP registry without `--insecure-registry`); and the registries page's
//! first block typed against a private registry over HTTPS.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use e2e::docs::{self, Shell};
use e2e::registry::{Credentials, Registry, RegistryOptions};
use e2e::testbed::{ManagerProcess, Testbed, eventually, is_uninitialized};
use e2e::{https, wasm_ccm_binary};

const WAIT: Duration = Duration::from_secs(60);

/// The smallest valid component: it has no exports, so it is no provider.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

pub(super) fn wasm_ccm(args: &[String]) -> Output {
    e2e::wasm_ccm_command(&wasm_ccm_binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run wasm-ccm")
}

pub(super) fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

pub(super) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(super) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The command failed with exit 2 and a message containing every one of `needles`.
pub(super) fn assert_refused(output: &Output, needles: &[&str]) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(!message.contains("panicked"), "{message}");
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in: {message}");
    }
}

pub(super) fn insecure(registry: &Registry) -> String {
    format!("--insecure-registry={}", registry.addr())
}

/// `provider push FILE oci://REF` with `extra` flags; the manifest digest it printed.
pub(super) fn push(registry: &Registry, file: &str, reference: &str, extra: &[&str]) -> String {
    let mut command = args(&[
        "provider",
        "push",
        file,
        &format!("oci://{}", registry.reference(reference)),
    ]);
    command.push(insecure(registry));
    command.extend(args(extra));
    let output = wasm_ccm(&command);
    assert!(output.status.success(), "push: {}", stderr(&output));
    let digest = stdout(&output).trim().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    digest
}

/// `provider pull oci://REF -o FILE` with `extra` flags.
pub(super) fn pull(registry: &Registry, reference: &str, file: &Path, extra: &[&str]) -> Output {
    let mut command = args(&[
        "provider",
        "pull",
        &format!("oci://{}", registry.reference(reference)),
        "-o",
        &file.display().to_string(),
    ]);
    command.extend(args(extra));
    wasm_ccm(&command)
}

// Multi-threaded: the cloud simulator serves `provider call` while the test waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_provider_pulls_back_byte_identical_and_oras_reads_the_cncf_layout() {
    let registry = Registry::start(RegistryOptions::default()).await;
    let created = "2026-11-24T00:00:00Z";
    let digest = push(
        &registry,
        guest_builds::SIMCLOUD,
        "providers/simcloud:v1",
        &[
            "--version=v1.0.0",
            "--source=https://example.com/acme/simcloud",
            &format!("--created={created}"),
        ],
    );
    // The same component and flags give the same digest: pushes are reproducible.
    let again = push(
        &registry,
        guest_builds::SIMCLOUD,
        "providers/simcloud:v1-again",
        &[
            "--version=v1.0.0",
            "--source=https://example.com/acme/simcloud",
            &format!("--created={created}"),
        ],
    );
    assert_eq!(digest, again);

    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read(guest_builds::SIMCLOUD).unwrap();
    let insecure = insecure(&registry);
    for (reference, name) in [
        ("providers/simcloud:v1".to_string(), "by-tag.wasm"),
        (format!("providers/simcloud@{digest}"), "by-digest.wasm"),
        (format!("providers/simcloud:v1@{digest}"), "both.wasm"),
    ] {
        let file = dir.path().join(name);
        let output = pull(&registry, &reference, &file, &[&insecure]);
        assert!(output.status.success(), "{reference}: {}", stderr(&output));
        assert_eq!(
            stdout(&output).trim(),
            digest,
            "pull prints the manifest digest"
        );
        assert!(
            std::fs::read(&file).unwrap() == original,
            "{reference}: bytes differ"
        );
    }

    // An independent client reads what we wrote: media types and annotations.
    let oras = registry.oras();
    let manifest = oras
        .manifest(&registry.reference("providers/simcloud:v1"))
        .await;
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["size"], original.len());
    let annotations = &manifest["annotations"];
    assert_eq!(annotations["org.opencontainers.image.version"], "v1.0.0");
    assert_eq!(
        annotations["org.opencontainers.image.source"],
        "https://example.com/acme/simcloud"
    );
    assert_eq!(annotations["org.opencontainers.image.created"], created);
    let pulled = oras
        .pull(&registry.reference("providers/simcloud:v1"), dir.path())
        .await;
    assert_eq!(pulled.len(), 1, "{pulled:?}");
    assert!(std::fs::read(&pulled[0]).unwrap() == original);

    // call runs the pulled provider under the sandbox and gate, as run mode would.
    let cloud = e2e::Cloud::start().await;
    cloud.sim.state().add_instance(cloud_sim::NewInstance {
        name: "node-1".into(),
        instance_type: "sim.large".into(),
        zone: "sim-central-1c".into(),
        ..cloud_sim::NewInstance::default()
    });
    let config = dir.path().join("cloud.json");
    std::fs::write(&config, cloud.simcloud_config()).unwrap();
    let url = cloud.sim.url();
    let output = wasm_ccm(&args(&[
        "provider",
        "call",
        &format!(
            "oci://{}",
            registry.reference(&format!("providers/simcloud@{digest}"))
        ),
        "instance-metadata",
        "--args",
        r#"{"node": {"name": "node-1"}}"#,
        "--config",
        &config.display().to_string(),
        "--allow",
        &url,
        "--credential",
        &format!("{url}=bearer:file:{}", cloud.token_file.path().display()),
        &insecure,
    ]));
    assert!(output.status.success(), "{}", stderr(&output));
    let metadata: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(metadata["instanceType"], "sim.large", "{metadata}");

    // inspect shows the manifest beside the component.
    let output = wasm_ccm(&args(&[
        "provider",
        "inspect",
        &format!("oci://{}", registry.reference("providers/simcloud:v1")),
        &insecure,
    ]));
    let text = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    for expected in [
        format!("manifest:  {digest} (application/vnd.oci.image.manifest.v1+json)"),
        "config:    application/vnd.wasm.config.v0+json".into(),
        "layers:    application/wasm".into(),
        "org.opencontainers.image.version: v1.0.0".into(),
        "satisfies the host contract: yes".into(),
    ] {
        assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
    }
}

#[tokio::test]
async fn the_manager_runs_an_oras_pushed_provider_and_restarts_from_the_cache_with_the_registry_down()
 {
    let bed = Testbed::start().await;
    let registry = Registry::start(RegistryOptions::default()).await;
    let digest = registry
        .oras()
        .push_wasm(
            Path::new(guest_builds::SIMCLOUD),
            &registry.reference("acme/simcloud:v2"),
        )
        .await;
    let cache = tempfile::tempdir().unwrap();
    let insecure_flag = insecure(&registry);
    // The testbed's flags with `provider` from the registry, cached in `cache`.
    let flags_for = |provider: &str, extra: Vec<String>| {
        let mut flags: Vec<String> = bed
            .provider_flags()
            .into_iter()
            .filter(|f| !f.starts_with("--provider="))
            .collect();
        flags.extend([
            format!("--provider={provider}"),
            insecure_flag.clone(),
            format!("--cache-dir={}", cache.path().display()),
        ]);
        flags.extend(extra);
        flags
    };
    let run = |provider: String| {
        let port = https::free_port();
        let flags = flags_for(
            &provider,
            vec![
                "--controllers=cloud-node".into(),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
            ],
        );
        ManagerProcess::spawn(&wasm_ccm_binary(), &flags, port, true)
    };
    let initialised = |name: &'static str| {
        let bed = &bed;
        async move {
            eventually(&format!("{name} initialised"), WAIT, || async {
                bed.node(name).await.filter(|node| !is_uninitialized(node))
            })
            .await
        }
    };
    let token = bed.emulator.token().to_owned();
    let metrics = |manager: &ManagerProcess| {
        let addr = manager.addr;
        let token = token.clone();
        async move {
            eventually("metrics", WAIT, || async {
                https::get_with_token(addr, "/metrics", &token)
                    .await
                    .ok()
                    .map(|(_, body)| body)
            })
            .await
        }
    };

    // From the registry, by tag.
    let by_tag = format!("oci://{}", registry.reference("acme/simcloud:v2"));
    let manager = run(by_tag.clone());
    bed.add_node("from-registry", "sim-central-1a").await;
    initialised("from-registry").await;
    let text = metrics(&manager).await;
    let info = text
        .lines()
        .find(|l| l.starts_with("wasm_ccm_provider_info{"))
        .unwrap_or_else(|| panic!("no wasm_ccm_provider_info in:\n{text}"));
    for label in [
        "provider=\"simcloud\"".to_string(),
        format!("digest=\"{digest}\""),
        format!("source=\"{by_tag}\""),
        format!("version=\"{}\"", &digest[..19]),
    ] {
        assert!(info.contains(&label), "{label} not in {info}");
    }
    drop(manager);

    // The registry goes away; a pinned digest starts from the cache: no download, no compile.
    registry.stop();
    let pinned = format!("oci://{}@{digest}", registry.reference("acme/simcloud"));
    let manager = run(pinned);
    bed.add_node("from-cache", "sim-central-1a").await;
    initialised("from-cache").await;
    let text = metrics(&manager).await;
    let compiles: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("wasm_ccm_sandbox_compiles_total{"))
        .collect();
    assert!(
        compiles
            .iter()
            .any(|l| l.contains("source=\"cache\"") && l.ends_with(" 1")),
        "{compiles:?}"
    );
    assert!(
        !compiles.iter().any(|l| l.contains("source=\"compile\"")),
        "{compiles:?}"
    );
    drop(manager);

    // A tag cannot be resolved without the registry: the manager says so and exits.
    let flags = flags_for(&by_tag, vec!["--secure-port=0".into()]);
    let output = wasm_ccm(&flags);
    assert_refused(
        &output,
        &[&format!(
            "--provider {by_tag}: registry unreachable after 4 attempts"
        )],
    );
}

#[tokio::test]
async fn bad_artifacts_are_refused_naming_what_is_wrong() {
    let registry = Registry::start(RegistryOptions::default()).await;
    let insecure = insecure(&registry);
    let digest = push(&registry, guest_builds::SIMCLOUD, "p/simcloud:v1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.wasm");
    let oci = |reference: &str| format!("oci://{}", registry.reference(reference));

    // An unknown tag.
    let output = pull(&registry, "p/simcloud:v9", &out, &[&insecure]);
    assert_refused(
        &output,
        &[&format!(
            "{}: not found in the registry (MANIFEST_UNKNOWN",
            oci("p/simcloud:v9")
        )],
    );

    // A pinned digest the tag does not have.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let output = pull(
        &registry,
        &format!("p/simcloud:v1@{wrong}"),
        &out,
        &[&insecure],
    );
    assert_refused(&output, &["not found in the registry"]);

    // A non-wasm artifact: a container image's media types.
    let text_file = dir.path().join("layer.tar");
    std::fs::write(&text_file, b"not a component").unwrap();
    registry
        .oras()
        .push(
            &text_file,
            &registry.reference("p/image:v1"),
            "application/vnd.oci.image.config.v1+json",
            "application/vnd.oci.image.layer.v1.tar",
            "{}",
        )
        .await;
    let output = pull(&registry, "p/image:v1", &out, &[&insecure]);
    assert_refused(
        &output,
        &[&format!(
            "{}: not a wasm component artifact: config application/vnd.oci.image.config.v1+json, layers [application/vnd.oci.image.layer.v1.tar]; expected one application/wasm layer",
            oci("p/image:v1")
        )],
    );

    // A component that is no provider: push refuses it, and one pushed by another tool is
    // refused by the manager's contract check.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, EMPTY_COMPONENT).unwrap();
    let output = wasm_ccm(&args(&[
        "provider",
        "push",
        &empty.display().to_string(),
        &oci("p/empty:v1"),
        &insecure,
    ]));
    assert_refused(
        &output,
        &["not pushed: the component does not satisfy the host contract"],
    );
    // The registry is asked first: without --insecure-registry the push fails on TLS
    // before the component is looked at (or compiled).
    let output = wasm_ccm(&args(&[
        "provider",
        "push",
        &empty.display().to_string(),
        &oci("p/empty:v1"),
    ]));
    assert_refused(&output, &["--insecure-registry"]);
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("host contract"),
        "{output:?}"
    );
    registry
        .oras()
        .push_wasm(&empty, &registry.reference("p/empty:v1"))
        .await;
    let output = wasm_ccm(&args(&[
        "provider",
        "inspect",
        &oci("p/empty:v1"),
        &insecure,
    ]));
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("satisfies the host contract: no"),
        "{}",
        stdout(&output)
    );

    // A blob tampered with in the registry's storage.
    let manifest = registry
        .oras()
        .manifest(&registry.reference("p/simcloud:v1"))
        .await;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let blob = registry.blob_path(&layer);
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    // With no cache: the earlier pulls' cache would answer for the digest.
    let output = pull(
        &registry,
        &format!("p/simcloud@{digest}"),
        &out,
        &[&insecure, "--no-cache"],
    );
    assert_refused(
        &output,
        &[&format!(
            "layer {layer} does not match its digest: expected {layer}, got sha256:"
        )],
    );
    assert!(!out.exists(), "nothing is written from a tampered artifact");
}

/// The registries page's first block, typed against a private registry: HTTPS (its
/// certificate trusted through `SSL_CERT_FILE`, as a private CA's would be) behind basic auth,
/// the login in `~/.docker/config.json`. The push prints the digest; the manager runs the
/// provider pinned by tag and digest with `--registry-config` (the login as a mounted Secret
/// would give it) and `--cache-dir`, and initialises a node; the pull gives the same bytes
/// back and inspect shows the manifest and the annotations pushed. The page's pull without
/// the login, or with a wrong password, is refused saying which; no password is printed.
#[tokio::test]
async fn the_registries_page_publishes_to_and_runs_from_a_private_registry_as_typed() {
    let user = Credentials::new("alice", "correct-horse-battery");
    let registry = Registry::start(RegistryOptions {
        auth: Some(user.clone()),
        tls: true,
        ..RegistryOptions::default()
    })
    .await;
    let bed = Testbed::start().await;
    let mut shell = Shell::new();
    shell
        .trust(registry.certificate_pem().expect("a certificate"))
        .env("RUST_LOG", "warn");
    std::fs::create_dir(shell.path(".docker")).unwrap();
    std::fs::write(
        shell.path(".docker/config.json"),
        registry.docker_config_json(),
    )
    .unwrap();
    let mounted = shell.path("mounted-config.json");
    std::fs::write(&mounted, registry.docker_config_json()).unwrap();
    std::fs::write(
        shell.path("wrong.json"),
        registry.docker_config_json_for(&Credentials::new("alice", "wrong-password-123")),
    )
    .unwrap();
    std::fs::copy(guest_builds::SIMCLOUD, shell.path("simcloud.wasm")).unwrap();

    let block = docs::substitute(
        &docs::block_starting(
            "docs/src/operators/registries.md",
            "sh",
            "wasm-ccm provider push simcloud.wasm",
        ),
        &[("registry.example.com", &registry.addr().to_string())],
    );
    let commands = docs::commands(&block);
    let [push, run, pull, inspect] = commands.as_slice() else {
        panic!("the page publishes, runs, pulls and inspects: {block}");
    };
    let digest = shell.typed(push).trim().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    // The manager, pinned, with the testbed's cluster and cloud for the page's `…`.
    let cache = tempfile::tempdir().unwrap();
    let port = https::free_port();
    let mut rest: Vec<String> = bed
        .provider_flags()
        .into_iter()
        .filter(|f| !f.starts_with("--provider=") && !f.starts_with("--cloud-provider="))
        .collect();
    rest.extend([
        "--controllers=cloud-node".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
    ]);
    let run = docs::substitute(
        run,
        &[
            ("sha256:4f1c…", &digest),
            (
                "/etc/wasm-ccm/registry/config.json",
                &mounted.display().to_string(),
            ),
            ("/var/cache/wasm-ccm", &cache.path().display().to_string()),
            ("…", &rest.join(" ")),
        ],
    );
    let manager = ManagerProcess {
        child: shell.spawn(&run),
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    };
    bed.add_node("from-registry", "sim-central-1a").await;
    eventually("from-registry initialised", WAIT, || async {
        bed.node("from-registry")
            .await
            .filter(|node| !is_uninitialized(node))
    })
    .await;
    drop(manager);

    // The page's pull, without the login and with a wrong one.
    let without = shell.run(&pull.replace("--registry-config ~/.docker/config.json", ""));
    assert_refused(
        &without,
        &[&format!(
            "the registry requires credentials (401); --registry-config has none for {}",
            registry.addr()
        )],
    );
    let wrong = shell.run(&pull.replace("~/.docker/config.json", "wrong.json"));
    assert_refused(
        &wrong,
        &[&format!(
            "the registry rejected the credentials --registry-config has for {} (401)",
            registry.addr()
        )],
    );
    assert!(!stderr(&wrong).contains("wrong-password-123"));

    std::fs::remove_file(shell.path("simcloud.wasm")).unwrap();
    let pulled = shell.run(pull);
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    assert_eq!(stdout(&pulled).trim(), digest);
    assert!(
        std::fs::read(shell.path("simcloud.wasm")).unwrap()
            == std::fs::read(guest_builds::SIMCLOUD).unwrap()
    );
    let printed = stderr(&pulled) + &stdout(&pulled);
    assert!(!printed.contains("correct-horse-battery"), "{printed}");

    let text = shell.typed(inspect);
    for expected in [
        format!("manifest:  {digest} (application/vnd.oci.image.manifest.v1+json)"),
        "org.opencontainers.image.version: v1.2.0".into(),
        "org.opencontainers.image.source: https://github.com/acme/simcloud".into(),
        "satisfies the host contract: yes".into(),
    ] {
        assert!(text.contains(&expected), "{expected:?} not in:\n{text}");
    }
}

#[tokio::test]
async fn a_plain_http_registry_needs_insecure_registry() {
    let registry = Registry::start(RegistryOptions::default()).await;
    push(&registry, guest_builds::SIMCLOUD, "p/simcloud:v1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let output = pull(&registry, "p/simcloud:v1", &dir.path().join("x.wasm"), &[]);
    assert_refused(
        &output,
        &[&format!(
            "if this registry serves plain HTTP, pass --insecure-registry {}",
            registry.addr()
        )],
    );
    // A malformed --insecure-registry is refused by the flag parser, naming the flag.
    let output = pull(
        &registry,
        "p/simcloud:v1",
        &dir.path().join("x.wasm"),
        &["--insecure-registry=http://127.0.0.1:5000"],
    );
    assert_refused(&output, &["--insecure-registry", "is not HOST:PORT"]);
}

#[tokio::test]
async fn processes_sharing_one_cache_dir_pull_at_once_then_a_tag_costs_one_request_and_a_digest_none()
 {
    let registry = Registry::start(RegistryOptions::default()).await;
    let digest = push(&registry, guest_builds::SIMCLOUD, "p/simcloud:v1", &[]);
    let dir = tempfile::tempdir().unwrap();
    let cache = format!("--cache-dir={}", dir.path().join("cache").display());
    let insecure = insecure(&registry);
    let pinned = format!("p/simcloud@{digest}");
    let original = std::fs::read(guest_builds::SIMCLOUD).unwrap();
    let pulls: Vec<_> = (0..3)
        .map(|i| {
            let mut command = e2e::wasm_ccm_command(&wasm_ccm_binary());
            command.args([
                "provider".to_string(),
                "pull".into(),
                format!("oci://{}", registry.reference(&pinned)),
                "-o".into(),
                dir.path().join(format!("{i}.wasm")).display().to_string(),
                cache.clone(),
                insecure.clone(),
            ]);
            command
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn pull")
        })
        .collect();
    for (i, mut pull) in pulls.into_iter().enumerate() {
        assert!(pull.wait().unwrap().success(), "pull {i}");
        assert!(std::fs::read(dir.path().join(format!("{i}.wasm"))).unwrap() == original);
    }
    // A tag is resolved on every start: one manifest request, no download when cached.
    let requests = |what: &str| {
        registry
            .log()
            .lines()
            .filter(|line| line.contains("http.request.method=GET") && line.contains(what))
            .count()
    };
    let (manifests, blobs) = (requests("/manifests/"), requests("/blobs/"));
    assert!(blobs > 0, "the first pulls downloaded: {}", registry.log());
    let output = pull(
        &registry,
        "p/simcloud:v1",
        &dir.path().join("tagged.wasm"),
        &[&cache, &insecure],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(requests("/manifests/"), manifests + 1, "{}", registry.log());
    assert_eq!(
        requests("/blobs/"),
        blobs,
        "nothing downloaded: {}",
        registry.log()
    );

    registry.stop();
    let out = dir.path().join("offline.wasm");
    let output = pull(&registry, &pinned, &out, &[&cache, &insecure]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(std::fs::read(&out).unwrap() == original);
}

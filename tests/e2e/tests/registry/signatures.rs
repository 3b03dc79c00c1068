//! Signed providers against a real registry: the registries page's block on signing typed
//! as an operator types it (keys made with openssl, `provider push --sign-key`, `provider
//! sign`, `provider verify`, `provider inspect`, the manager with `--provider-signature-key`);
//! run mode with `--provider-signature-key` (signed, unsigned, signed by another key, from the
//! cache with the registry down); a CloudProvider whose `spec.signature` keys
//! come from a Secret; and an independent implementation of cosign's format (`cosign.py`,
//! PyCA `cryptography`) whose signatures we accept and which accepts ours.
//!
//! Run mode refuses at start (exit 2, naming flag, key and digest) an unsigned version, one
//! signed by another key, a `file://` one and a private key given as the public one; with
//! the registry down the verified digest starts from the cache, and another key then needs
//! the registry. The `CloudProvider` refuses an unsigned v2 (`Verified` `False`,
//! `SignatureMissing`, an event) while v1 serves, and activates it once signed.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use e2e::cloud_provider::{
    NAME, NAMESPACE, active_digest, apply, cloud_provider, condition_is, install_crd,
    resource_config, simcloud_config, status_where, token_secret,
};
use e2e::docs::{self, Shell};
use e2e::https;
use e2e::registry::{Registry, RegistryOptions};
use e2e::testbed::{ManagerProcess, Testbed, eventually, is_uninitialized};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use wasm_ccm::resource::{ConditionStatus, condition};
use wasm_ccm_host::source::{
    ArtifactStore, DistributionSettings, PublicKey, SignaturePolicy, TrustedKeys,
};

use super::distribution::{args, assert_refused, insecure, push, stderr, stdout, wasm_ccm};

const WAIT: Duration = Duration::from_secs(60);

/// A shell command as the registries page gives it, run in `dir`; what it printed.
fn typed(dir: &Path, command: &str) -> String {
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    assert!(
        output.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The registries page's block on signing: its commands, with the test's registry in place of
/// the page's.
fn signing_block(registry: &Registry) -> Vec<String> {
    let block = docs::block_starting("docs/src/operators/registries.md", "sh", "openssl genpkey");
    docs::commands(&docs::substitute(
        &block,
        &[("registry.example.com", &registry.addr().to_string())],
    ))
}

/// A key pair made in `dir` with the registries page's `openssl` lines, typed (`NAME` for the
/// page's `signing`): `NAME.pem` (private, PKCS#8) and `NAME.pub`.
fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let block = docs::block_starting("docs/src/operators/registries.md", "sh", "openssl genpkey");
    let openssl: Vec<String> = docs::commands(&block)
        .into_iter()
        .filter(|command| command.starts_with("openssl "))
        .collect();
    assert_eq!(openssl.len(), 2, "the page makes a key pair: {block}");
    for command in openssl {
        typed(dir, &command.replace("signing", name));
    }
    (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.pub")),
    )
}

fn oci(registry: &Registry, reference: &str) -> String {
    format!("oci://{}", registry.reference(reference))
}

fn path(path: &Path) -> String {
    path.display().to_string()
}

/// `wasm-ccm provider sign oci://REFERENCE --key KEY --insecure-registry=…`, as typed.
fn sign(registry: &Registry, reference: &str, key: &Path) -> Output {
    wasm_ccm(&args(&[
        "provider",
        "sign",
        &oci(registry, reference),
        "--key",
        &path(key),
        &insecure(registry),
    ]))
}

/// The registries page's block on signing, typed against a registry over HTTPS (its
/// certificate trusted through `SSL_CERT_FILE`): a key pair, the push signed, a second
/// signature, verify, inspect listing both, and the manager run with the public key, which
/// initialises a node. Around it, by hand: what run mode refuses, and the verdict's cache.
#[tokio::test]
async fn run_mode_starts_only_signed_providers_and_a_verified_digest_starts_from_the_cache() {
    let bed = Testbed::start().await;
    let registry = Registry::start(RegistryOptions {
        tls: true,
        ..RegistryOptions::default()
    })
    .await;
    let mut shell = Shell::new();
    shell
        .trust(registry.certificate_pem().expect("a certificate"))
        .env("RUST_LOG", "warn");
    std::fs::copy(guest_builds::SIMCLOUD, shell.path("simcloud.wasm")).unwrap();
    let wasm_ccm = |args: &[String]| {
        shell
            .command("wasm-ccm")
            .args(args)
            .output()
            .expect("run wasm-ccm")
    };
    let commands = signing_block(&registry);
    let [_, _, push_signed, sign_again, verify, inspect, run] = commands.as_slice() else {
        panic!("the page makes keys, pushes, signs, verifies, inspects and runs: {commands:#?}");
    };
    let (signing, signing_pub) = key_pair(shell.dir(), "signing");
    let (other, _) = key_pair(shell.dir(), "other");

    // Signed at push, and once more; unsigned; signed by another key (three digests: the
    // versions differ).
    let signed = shell.typed(push_signed).trim().to_string();
    let output = shell.run(sign_again);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), signed);
    assert!(
        stderr(&output).contains("2 signature(s)"),
        "{}",
        stderr(&output)
    );
    let pushed = |reference: &str, version: &str| {
        let output = wasm_ccm(&args(&[
            "provider",
            "push",
            "simcloud.wasm",
            &oci(&registry, reference),
            "--version",
            version,
        ]));
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output).trim().to_string()
    };
    let unsigned = pushed("acme/simcloud:unsigned", "unsigned");
    let wrongly = pushed("acme/simcloud:other", "other");
    let output = wasm_ccm(&args(&[
        "provider",
        "sign",
        &oci(&registry, "acme/simcloud:other"),
        "--key",
        &path(&other),
    ]));
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), wrongly);
    assert!(
        stderr(&output).contains("1 signature(s)"),
        "{}",
        stderr(&output)
    );

    // provider verify: 0 when the key signed, 2 naming the reason when not.
    assert_eq!(shell.typed(verify).trim(), signed);
    for (version, refusal) in [
        ("unsigned", "no signature by --key"),
        ("other", "no valid signature by --key"),
    ] {
        let refused = shell.run(&verify.replace("simcloud:v1.2.0", &format!("simcloud:{version}")));
        assert_refused(&refused, &[refusal]);
    }

    // provider inspect lists the signatures, and the given key that verifies each.
    let text = shell.typed(inspect);
    assert!(text.contains("signatures: 2 (sha256-"), "{text}");
    assert_eq!(
        text.matches(&format!("  {signed}\n    verified with signing.pub"))
            .count(),
        2,
        "{text}"
    );

    let cache = tempfile::tempdir().unwrap();
    let flags_for = |provider: &str, extra: &[String]| {
        let mut flags: Vec<String> = bed
            .provider_flags()
            .into_iter()
            .filter(|f| !f.starts_with("--provider="))
            .collect();
        flags.extend([
            format!("--provider={provider}"),
            format!("--provider-signature-key={}", path(&signing_pub)),
            format!("--cache-dir={}", cache.path().display()),
        ]);
        flags.extend(extra.iter().cloned());
        flags
    };
    let refused_at_start =
        |provider: &str| wasm_ccm(&flags_for(provider, &["--secure-port=0".into()]));

    // Unsigned, or signed by a key not given: the manager refuses to start, naming the flag,
    // the key and the digest.
    let key_named = format!("--provider-signature-key [{} (sha256:", path(&signing_pub));
    assert_refused(
        &refused_at_start(&oci(&registry, "acme/simcloud:unsigned")),
        &["no signature by", &key_named, &unsigned, "sha256-"],
    );
    assert_refused(
        &refused_at_start(&oci(&registry, "acme/simcloud:other")),
        &["no valid signature by", &key_named, &wrongly],
    );
    // The fingerprint named is the one the registries page computes.
    let fingerprint = shell.typed("openssl pkey -pubin -in signing.pub -outform DER | sha256sum");
    let fingerprint = fingerprint.split_whitespace().next().unwrap_or_default();
    assert_refused(
        &refused_at_start(&oci(&registry, "acme/simcloud:unsigned")),
        &[&format!("signing.pub (sha256:{fingerprint})")],
    );
    // A key that is not a public key stops it before anything runs.
    let mut flags = flags_for(
        &oci(&registry, "acme/simcloud:v1.2.0"),
        &["--secure-port=0".into()],
    );
    flags.push(format!("--provider-signature-key={}", path(&signing)));
    assert_refused(
        &wasm_ccm(&flags),
        &[
            "--provider-signature-key",
            "signing.pem",
            "expected a \"PUBLIC KEY\"",
        ],
    );
    // A file has no signature artifact.
    assert_refused(
        &refused_at_start(&format!("file://{}", guest_builds::SIMCLOUD)),
        &["a file:// provider has no signature artifact"],
    );

    // Signed: the page's manager runs, with the testbed's cluster and cloud for its `…`.
    let serving = |port: u16| -> Vec<String> {
        vec![
            "--controllers=cloud-node".into(),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
        ]
    };
    let manager = |child: std::process::Child, port: u16| ManagerProcess {
        child,
        addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let initialised = |name: &'static str| {
        let bed = &bed;
        async move {
            bed.add_node(name, "sim-central-1a").await;
            eventually(&format!("{name} initialised"), WAIT, || async {
                bed.node(name).await.filter(|node| !is_uninitialized(node))
            })
            .await
        }
    };
    let port = https::free_port();
    let mut rest: Vec<String> = bed
        .provider_flags()
        .into_iter()
        .filter(|f| !f.starts_with("--provider="))
        .collect();
    rest.push(format!("--cache-dir={}", cache.path().display()));
    rest.extend(serving(port));
    let running = manager(
        shell.spawn(&docs::substitute(run, &[("…", &rest.join(" "))])),
        port,
    );
    initialised("signed").await;
    drop(running);

    // With the registry down, the pinned digest verified before starts from the cache: no
    // request, so no signature read (any would fail).
    registry.stop();
    let port = https::free_port();
    let pinned = flags_for(
        &format!("oci://{}@{signed}", registry.reference("acme/simcloud")),
        &serving(port),
    );
    let child = shell
        .command("wasm-ccm")
        .args(&pinned)
        .stdout(Stdio::null())
        .spawn()
        .expect("start wasm-ccm");
    let running = manager(child, port);
    initialised("from-cache").await;
    drop(running);
    // The verdict is per key: another key must be checked, which needs the registry.
    let mut flags = flags_for(
        &format!("oci://{}@{signed}", registry.reference("acme/simcloud")),
        &["--secure-port=0".into()],
    );
    flags.retain(|flag| !flag.starts_with("--provider-signature-key="));
    flags.push(format!(
        "--provider-signature-key={}",
        path(&shell.path("other.pub"))
    ));
    assert_refused(&wasm_ccm(&flags), &["cannot read the signatures"]);
}

#[tokio::test]
async fn signatures_interoperate_with_an_independent_cosign_implementation() {
    let registry = Registry::start(RegistryOptions::default()).await;
    let keys = tempfile::tempdir().unwrap();
    let (signing, signing_pub) = key_pair(keys.path(), "signing");
    let insecure_flag = insecure(&registry);
    let digest = push(&registry, guest_builds::SIMCLOUD, "acme/simcloud:v1", &[]);
    let output = sign(&registry, "acme/simcloud:v1", &signing);
    assert!(output.status.success(), "{}", stderr(&output));

    // Ours, read by an independent implementation: cosign's layout, and it verifies.
    let checked = registry.cosign_py(serde_json::json!({
        "command": "verify",
        "repository": "acme/simcloud",
        "digest": digest,
        "key": signing_pub,
    }));
    assert_eq!(checked, serde_json::json!({"layers": 1, "verified": 1}));

    // Theirs (its own key, payload and push, appended to ours), verified by us.
    let theirs = keys.path().join("theirs.pub");
    let signed = registry.cosign_py(serde_json::json!({
        "command": "sign",
        "repository": "acme/simcloud",
        "digest": digest,
        "key": theirs,
    }));
    assert_eq!(signed["signatures"], 2, "{signed}");
    for key in [&theirs, &signing_pub] {
        let output = wasm_ccm(&args(&[
            "provider",
            "verify",
            &oci(&registry, "acme/simcloud:v1"),
            "--key",
            &path(key),
            &insecure_flag,
        ]));
        assert!(
            output.status.success(),
            "{}: {}",
            key.display(),
            stderr(&output)
        );
    }
    // And the independent verifier still reads the artifact whole after our next append.
    let output = sign(&registry, &format!("acme/simcloud@{digest}"), &signing);
    assert!(
        stderr(&output).contains("3 signature(s)"),
        "{}",
        stderr(&output)
    );
    let checked = registry.cosign_py(serde_json::json!({
        "command": "verify",
        "repository": "acme/simcloud",
        "digest": digest,
        "key": signing_pub,
    }));
    assert_eq!(checked, serde_json::json!({"layers": 3, "verified": 2}));
}

/// The `Verified` condition's message once its reason is `reason` and the message contains
/// `needle`; v1 still active.
async fn refused_naming(bed: &Testbed, v1: &str, reason: &str, needle: &str) -> String {
    let status = status_where(bed, &format!("refused naming {needle}"), |status| {
        status.conditions.iter().any(|c| {
            c.type_ == condition::VERIFIED
                && c.status == ConditionStatus::False
                && c.reason == reason
                && c.message.contains(needle)
        })
    })
    .await;
    assert_eq!(active_digest(&status), v1, "{status:?}");
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == condition::VERIFIED)
        .map(|c| c.message)
        .unwrap_or_default()
}

/// The operator requires `operator.pub` (`--provider-signature-key`), the CloudProvider
/// `release.pub` from a Secret (`spec.signature.keys`): v2 runs only once both signed it.
#[tokio::test]
async fn a_cloud_provider_with_signature_keys_keeps_v1_serving_until_v2_is_signed() {
    let bed = Testbed::start().await;
    let registry = Registry::start(RegistryOptions::default()).await;
    let keys = tempfile::tempdir().unwrap();
    let (operator, operator_pub) = key_pair(keys.path(), "operator");
    let (release, release_pub) = key_pair(keys.path(), "release");
    let signed = |tag: &str, key: &Path| {
        let output = sign(&registry, tag, key);
        assert!(output.status.success(), "{}", stderr(&output));
    };
    let v1 = push(
        &registry,
        guest_builds::SIMCLOUD,
        "acme/simcloud:v1",
        &["--sign-key", &path(&operator)],
    );
    signed("acme/simcloud:v1", &release);
    let v2 = push(
        &registry,
        guest_builds::SIMCLOUD_V2,
        "acme/simcloud:v2",
        &[],
    );

    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    let secrets: Api<Secret> = Api::namespaced(bed.client.clone(), NAMESPACE);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "release-keys"},
        "stringData": {"cosign.pub": std::fs::read_to_string(&release_pub).unwrap()},
    }))
    .unwrap();
    secrets
        .patch(
            "release-keys",
            &PatchParams::apply("test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    let spec = |tag: &str| {
        let mut object = cloud_provider(&bed, guest_builds::SIMCLOUD, &simcloud_config(&bed));
        object["spec"]["provider"] = oci(&registry, tag).into();
        object["spec"]["signature"] = serde_json::json!({"keys": [
            {"secretKeyRef": {"name": "release-keys", "key": "cosign.pub", "namespace": NAMESPACE}},
        ]});
        object
    };
    apply(&bed, &spec("acme/simcloud:v1")).await;
    let cache = tempfile::tempdir().unwrap();
    let mut config = resource_config(&bed);
    let operator_key =
        PublicKey::from_pem(path(&operator_pub), &std::fs::read(&operator_pub).unwrap()).unwrap();
    config.distribution = DistributionSettings {
        insecure_registries: vec![registry.addr().to_string()],
        cache: Some(ArtifactStore::open(cache.path(), 512 << 20).unwrap()),
        signatures: SignaturePolicy::default().and(TrustedKeys {
            source: "--provider-signature-key".into(),
            keys: vec![operator_key],
        }),
        ..DistributionSettings::default()
    };
    let manager = bed.run(config);
    status_where(&bed, "v1 running", |status| active_digest(status) == v1).await;

    // v2 is not signed: refused naming both requirements and the digest; v1 serves.
    apply(&bed, &spec("acme/simcloud:v2")).await;
    let message = refused_naming(&bed, &v1, "SignatureMissing", &v2).await;
    for needle in [
        "--provider-signature-key [",
        "operator.pub (sha256:",
        " and spec.signature.keys [Secret kube-system/release-keys key cosign.pub (sha256:",
        "sha256-",
    ] {
        assert!(message.contains(needle), "{needle} not in {message}");
    }
    eventually("a SignatureMissing event", WAIT, || async {
        bed.event_reasons(NAME)
            .await
            .iter()
            .any(|reason| reason == "SignatureMissing")
            .then_some(())
    })
    .await;

    // Signed by the CloudProvider's key only: the spec cannot loosen the operator's policy.
    // A signature claims the digest now, but none by the operator's key: SignatureInvalid.
    signed("acme/simcloud:v2", &release);
    let message = refused_naming(&bed, &v1, "SignatureInvalid", "none verifies").await;
    assert!(
        message.contains("operator.pub") && !message.contains("spec.signature.keys"),
        "only the unmet requirement: {message}"
    );

    // Signed by the operator's key too: the retry activates it.
    signed("acme/simcloud:v2", &operator);
    status_where(&bed, "v2 activated once signed", |status| {
        active_digest(status) == v2
            && condition_is(
                status,
                condition::VERIFIED,
                ConditionStatus::True,
                "Verified",
            )
    })
    .await;
    manager.stop().await.unwrap();
}

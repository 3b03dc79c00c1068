//! Providers from a registry: from a pinned `oci://` reference to simcloud ready to call
//! (pull, verify, compile or load compiled code, `init`), against Debian's `docker-registry`
//! on loopback. Cold is a start with an empty `--cache-dir`; warm a restart served from it
//! (no registry request, no compile). Each start makes its own sandbox (engine) and
//! distribution client, as a process start does. The same again with a signature policy
//! (`--provider-signature-key`, a key made by openssl): cold reads and checks the signature;
//! warm meets the policy through the cache's verdict.

use std::sync::Arc;
use std::time::Instant;

use e2e::Cloud;
use e2e::registry::{Registry, RegistryOptions};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderSource};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::{
    ArtifactStore, Distribution, DistributionSettings, OciRef, ProviderRef, PushRequest,
    SignaturePolicy, SigningKey, TrustedKeys,
};

use super::{Stats, stats};

const STARTS: usize = 7;

/// Times from reference to a provider ready to call.
pub struct Measured {
    /// Empty cache, no signature policy.
    pub cold: Stats,
    /// From the cache, no signature policy.
    pub warm: Stats,
    /// Empty cache, a signature required.
    pub cold_signed: Stats,
    /// From the cache, a signature required (the verdict cached).
    pub warm_signed: Stats,
}

/// A P-256 key made as the registries page tells (openssl), signing `oci`; the policy requiring it.
async fn signed(distribution: &Distribution, oci: &OciRef) -> SignaturePolicy {
    let dir = tempfile::tempdir().expect("key dir");
    let pem = dir.path().join("signing.pem");
    let made = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&pem)
        .status()
        .expect("run openssl");
    assert!(made.success(), "openssl genpkey");
    let key = SigningKey::from_pem("signing.pem", &std::fs::read(&pem).expect("read the key"))
        .expect("a P-256 key");
    distribution.sign(oci, &key).await.expect("sign simcloud");
    SignaturePolicy::default().and(TrustedKeys {
        source: "--provider-signature-key".into(),
        keys: vec![key.public_key().clone()],
    })
}

/// Cold and warm times, without and with a signature policy.
pub async fn measure() -> Measured {
    let registry = Registry::start(RegistryOptions::default()).await;
    let cloud = Cloud::start().await;
    let settings =
        |cache: Option<ArtifactStore>, signatures: SignaturePolicy| DistributionSettings {
            insecure_registries: vec![registry.addr().to_string()],
            cache,
            signatures,
            ..DistributionSettings::default()
        };
    let tagged = match format!("oci://{}", registry.reference("bench/simcloud:v1")).parse() {
        Ok(ProviderRef::Oci(oci)) => oci,
        other => panic!("a tagged reference: {other:?}"),
    };
    let publisher = Distribution::new(settings(None, SignaturePolicy::default()));
    let digest = publisher
        .push(
            guest_builds::read(guest_builds::SIMCLOUD),
            &tagged,
            &PushRequest::default(),
        )
        .await
        .expect("push simcloud");
    let pinned: ProviderRef = format!("oci://{}@{digest}", registry.reference("bench/simcloud"))
        .parse()
        .expect("a pinned reference");
    let ProviderRef::Oci(pinned_oci) = &pinned else {
        unreachable!("an oci:// reference")
    };
    let policy = signed(&publisher, pinned_oci).await;

    let start = |store: ArtifactStore, signatures: SignaturePolicy| {
        let distribution = Distribution::new(settings(Some(store.clone()), signatures));
        let pinned = pinned.clone();
        let (cloud, digest) = (&cloud, &digest);
        async move {
            let started = Instant::now();
            let artifact = distribution.fetch(&pinned).await.expect("fetch");
            let metrics = Arc::new(Metrics::default());
            let sandbox = Sandbox::new(
                SandboxConfig {
                    cache_dir: Some(store.compiled_dir()),
                    ..SandboxConfig::default()
                },
                metrics.clone(),
            )
            .expect("sandbox");
            let gate = EgressGate::new(cloud.egress(), metrics.clone());
            let source = ProviderSource {
                artifact,
                cloud_config: Some(cloud.simcloud_config()),
            };
            let provider = Provider::load(&sandbox, gate, source, metrics)
                .await
                .expect("simcloud loads");
            let elapsed = started.elapsed();
            assert_eq!(&provider.identity().digest, digest);
            elapsed
        }
    };
    let (mut cold, mut warm, mut cold_signed, mut warm_signed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..STARTS {
        for (signatures, cold, warm) in [
            (SignaturePolicy::default(), &mut cold, &mut warm),
            (policy.clone(), &mut cold_signed, &mut warm_signed),
        ] {
            let dir = tempfile::tempdir().expect("cache dir");
            let store = ArtifactStore::open(dir.path(), 1 << 30).expect("cache");
            cold.push(start(store.clone(), signatures.clone()).await);
            warm.push(start(store, signatures).await);
        }
    }
    Measured {
        cold: stats(cold),
        warm: stats(warm),
        cold_signed: stats(cold_signed),
        warm_signed: stats(warm_signed),
    }
}

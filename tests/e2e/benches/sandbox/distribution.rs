//! Providers from a registry: from a pinned `oci://` reference to simcloud ready to call
//! (pull, verify, compile or load compiled code, `init`), against Debian's `docker-registry`
//! on loopback. Cold is a start with an empty `--cache-dir`; warm a restart served from it
//! (no registry request, no compile). Each start makes its own sandbox (engine) and
//! distribution client, as a process start does.

use std::sync::Arc;
use std::time::Instant;

use e2e::Cloud;
use e2e::registry::{Registry, RegistryOptions};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderSource};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::{
    ArtifactStore, Distribution, DistributionSettings, ProviderRef, PushRequest,
};

use super::{Stats, stats};

const STARTS: usize = 7;

/// (cold, warm) times from reference to a provider ready to call.
pub async fn measure() -> (Stats, Stats) {
    let registry = Registry::start(RegistryOptions::default()).await;
    let cloud = Cloud::start().await;
    let settings = |cache: Option<ArtifactStore>| DistributionSettings {
        insecure_registries: vec![registry.addr().to_string()],
        cache,
        ..DistributionSettings::default()
    };
    let tagged = match format!("oci://{}", registry.reference("bench/simcloud:v1")).parse() {
        Ok(ProviderRef::Oci(oci)) => oci,
        other => panic!("a tagged reference: {other:?}"),
    };
    let digest = Distribution::new(settings(None))
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

    let start = |store: ArtifactStore| {
        let distribution = Distribution::new(settings(Some(store.clone())));
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
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..STARTS {
        let dir = tempfile::tempdir().expect("cache dir");
        let store = ArtifactStore::open(dir.path(), 1 << 30).expect("cache");
        cold.push(start(store.clone()).await);
        warm.push(start(store).await);
    }
    (stats(cold), stats(warm))
}

//! Swapping the provider version of a running manager through its `CloudProvider`
//! (`--provider-resource`): the time from the spec change (a replace, as `kubectl edit`
//! does) to `status.active` naming the new version, seen on a watch of the object. Cold is
//! an `oci://` reference pinned by digest that is not in `--cache-dir` yet (pull, verify,
//! compile, `init`); cached is a swap between two versions both in it. Under load, the
//! provider calls that fail while versions are swapped back and forth as nodes and services
//! reconcile, from the manager's `/metrics`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::watcher::watch_object;
use serde_json::json;

use e2e::cloud_provider::{
    NAME, api, apply, cloud_provider, install_crd, resource_config, simcloud_config, status_where,
    token_secret,
};
use e2e::https;
use e2e::registry::{Registry, RegistryOptions};
use e2e::testbed::{RunningManager, Testbed, eventually, is_uninitialized};
use wasm_ccm::resource::CloudProvider;
use wasm_ccm_host::source::{
    ArtifactStore, Distribution, DistributionSettings, ProviderRef, PushRequest,
};

use super::{Stats, show, stats};

/// Managers started, each swapping once cold and then [`CACHED_SWAPS`] times cached.
const COLD_ROUNDS: usize = 3;
const CACHED_SWAPS: usize = 4;
/// The load: nodes not Ready, whose instances the lifecycle controller checks on every pass
/// (one pass after another: each takes longer than the 300 ms period), and Services created
/// while versions are swapped; each cloud request takes [`LATENCY_MS`], so calls are in
/// flight at every swap.
const LOAD_NODES: usize = 50;
const LOAD_SERVICES: usize = 20;
const LOAD_SWAPS: usize = 6;
const LATENCY_MS: u64 = 10;
/// Pause after an activation, so the next swap does not land on the resync of the last.
const SETTLE: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(30);
/// Call outcomes the contract expects in normal operation; any other is a failed call.
const EXPECTED: [&str; 5] = [
    "ok",
    "not-found",
    "retry-after",
    "not-implemented",
    "implemented-elsewhere",
];

/// simcloud v1 or v2 in the registry, pinned by digest.
struct Version {
    reference: String,
    digest: String,
}

/// One swap: from the replace to the new version active, and when the watch first saw each
/// rollout phase.
struct Swap {
    elapsed: Duration,
    phases: BTreeMap<String, Duration>,
}

/// Provider calls during the swaps under load.
#[derive(Default)]
struct Calls {
    made: u64,
    failed: u64,
    /// Failed calls by outcome.
    failures: BTreeMap<String, u64>,
}

/// Everything measured.
pub struct Measured {
    cold: Vec<Swap>,
    cached: Vec<Swap>,
    /// The swaps under load after the first (both versions cached).
    under_load: Vec<Swap>,
    calls: Calls,
}

pub async fn measure() -> Measured {
    let registry = Registry::start(RegistryOptions::default()).await;
    let v1 = push(&registry, guest_builds::SIMCLOUD, "v1").await;
    let v2 = push(&registry, guest_builds::SIMCLOUD_V2, "v2").await;
    let versions = [&v1, &v2];
    let mut cold = Vec::new();
    let mut cached = Vec::new();
    for _ in 0..COLD_ROUNDS {
        let bed = Testbed::start().await;
        let (manager, _cache) = follow(&bed, &registry, &v1, None).await;
        cold.push(swap(&bed, &v2).await);
        for i in 0..CACHED_SWAPS {
            tokio::time::sleep(SETTLE).await;
            cached.push(swap(&bed, versions[i % 2]).await);
        }
        manager.stop().await.expect("the manager stops cleanly");
    }
    let (under_load, calls) = under_load(&registry, &v1, &v2).await;
    Measured {
        cold,
        cached,
        under_load,
        calls,
    }
}

/// Push `wasm` as `bench/simcloud:TAG`; its pinned reference.
async fn push(registry: &Registry, wasm: &str, tag: &str) -> Version {
    let tagged = match format!(
        "oci://{}",
        registry.reference(&format!("bench/simcloud:{tag}"))
    )
    .parse()
    {
        Ok(ProviderRef::Oci(oci)) => oci,
        other => panic!("a tagged reference: {other:?}"),
    };
    let settings = DistributionSettings {
        insecure_registries: vec![registry.addr().to_string()],
        ..DistributionSettings::default()
    };
    let digest = Distribution::new(settings)
        .push(guest_builds::read(wasm), &tagged, &PushRequest::default())
        .await
        .expect("push simcloud");
    Version {
        reference: format!("oci://{}@{digest}", registry.reference("bench/simcloud")),
        digest,
    }
}

/// The testbed's `CloudProvider` naming `version`.
fn spec(bed: &Testbed, version: &Version) -> serde_json::Value {
    let mut spec = cloud_provider(bed, "unused", &simcloud_config(bed));
    spec["spec"]["provider"] = json!(version.reference);
    spec
}

/// A manager following the resource, which names `first`, with an empty `--cache-dir`
/// (returned: it lives as long as the manager), serving metrics on `port` if given; once
/// `first` is active.
async fn follow(
    bed: &Testbed,
    registry: &Registry,
    first: &Version,
    port: Option<u16>,
) -> (RunningManager, tempfile::TempDir) {
    install_crd(bed).await;
    token_secret(bed, e2e::TOKEN).await;
    apply(bed, &spec(bed, first)).await;
    let dir = tempfile::tempdir().expect("cache dir");
    let store = ArtifactStore::open(dir.path(), 1 << 30).expect("cache");
    let mut config = resource_config(bed);
    config.sandbox.cache_dir = Some(store.compiled_dir());
    config.distribution = DistributionSettings {
        insecure_registries: vec![registry.addr().to_string()],
        cache: Some(store),
        ..DistributionSettings::default()
    };
    if let Some(port) = port {
        config.serving.port = port;
    }
    let manager = bed.run(config);
    status_where(bed, "the first version active", |status| {
        status.active.as_ref().map(|a| a.digest.as_str()) == Some(first.digest.as_str())
    })
    .await;
    (manager, dir)
}

/// Replace the spec to name `version` and watch the object until `status.active` is it.
async fn swap(bed: &Testbed, version: &Version) -> Swap {
    let api = api(bed);
    let mut changes = watch_object(api.clone(), NAME).boxed();
    // The object as it is: the watch is set up before the change.
    changes
        .next()
        .await
        .expect("a watch event")
        .expect("watch the CloudProvider");
    let wanted: CloudProvider =
        serde_json::from_value(spec(bed, version)).expect("a CloudProvider");
    let mut object = api.get(NAME).await.expect("get the CloudProvider");
    object.spec = wanted.spec;
    let started = Instant::now();
    api.replace(NAME, &PostParams::default(), &object)
        .await
        .expect("replace the CloudProvider");
    let mut phases = BTreeMap::new();
    loop {
        let change = tokio::time::timeout(WAIT, changes.next())
            .await
            .unwrap_or_else(|_| panic!("{} active within {WAIT:?}", version.reference))
            .expect("a watch event")
            .expect("watch the CloudProvider");
        let Some(status) = change.and_then(|object| object.status) else {
            continue;
        };
        if let Some(candidate) = &status.candidate {
            phases
                .entry(format!("{:?}", candidate.phase))
                .or_insert_with(|| started.elapsed());
        }
        if status.active.as_ref().map(|a| a.digest.as_str()) == Some(version.digest.as_str()) {
            return Swap {
                elapsed: started.elapsed(),
                phases,
            };
        }
    }
}

/// Swap v1 and v2 [`LOAD_SWAPS`] times while the lifecycle controller checks
/// [`LOAD_NODES`] nodes and Services are created; the swaps, and the calls made and failed
/// from the first swap until the last Service's resync after the last.
async fn under_load(registry: &Registry, v1: &Version, v2: &Version) -> (Vec<Swap>, Calls) {
    let bed = Testbed::start().await;
    bed.cloud.sim.state().set_faults(cloud_sim::Faults {
        latency_ms: LATENCY_MS,
        ..cloud_sim::Faults::default()
    });
    for index in 0..LOAD_NODES {
        let name = format!("node-{index:02}");
        bed.add_instance(&name, "zone-a");
        bed.create_node(&unreachable_node(&name)).await;
    }
    let port = https::free_port();
    let (manager, _cache) = follow(&bed, registry, v1, Some(port)).await;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for index in 0..LOAD_NODES {
        eventually("every node initialised by v1", WAIT, || async {
            bed.node(&format!("node-{index:02}"))
                .await
                .filter(|node| !is_uninitialized(node))
        })
        .await;
    }
    let before = calls(&bed, addr).await;
    let churn = {
        let services = bed.services();
        tokio::spawn(async move {
            for index in 0..LOAD_SERVICES {
                services
                    .create(
                        &PostParams::default(),
                        &Testbed::lb_service(&format!("svc-{index:02}")),
                    )
                    .await
                    .expect("create a Service");
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    let mut swaps = Vec::new();
    for i in 0..LOAD_SWAPS {
        let version = if i % 2 == 0 { v2 } else { v1 };
        swaps.push(swap(&bed, version).await);
        tokio::time::sleep(SETTLE).await;
    }
    churn.await.expect("the Services are created");
    for index in 0..LOAD_SERVICES {
        eventually("every Service has an ingress", WAIT, || async {
            bed.service(&format!("svc-{index:02}"))
                .await
                .filter(|service| e2e::testbed::ingress_ip(service).is_some())
        })
        .await;
    }
    let after = calls(&bed, addr).await;
    manager.stop().await.expect("the manager stops cleanly");
    let mut failures = after.failures;
    for (outcome, count) in &before.failures {
        *failures.entry(outcome.clone()).or_default() -= count;
    }
    failures.retain(|_, count| *count > 0);
    // The first swap brought v2 into the cache.
    swaps.remove(0);
    let calls = Calls {
        made: after.made - before.made,
        failed: after.failed - before.failed,
        failures,
    };
    (swaps, calls)
}

/// A node whose kubelet stopped posting its status (Ready `Unknown`): the lifecycle
/// controller asks the provider about its instance (`instance-exists`, `instance-shutdown`)
/// on every pass.
fn unreachable_node(name: &str) -> k8s_openapi::api::core::v1::Node {
    let mut node = Testbed::kubelet_node(name);
    let conditions = node.status.as_mut().and_then(|s| s.conditions.as_mut());
    for condition in conditions.into_iter().flatten() {
        condition.status = "Unknown".into();
        condition.reason = Some("NodeStatusUnknown".into());
        condition.message = Some("Kubelet stopped posting node status.".into());
    }
    node
}

/// The manager's provider calls so far, from `wasm_ccm_provider_calls_total`.
async fn calls(bed: &Testbed, addr: std::net::SocketAddr) -> Calls {
    let (status, body) = https::get_with_token(addr, "/metrics", bed.emulator.token())
        .await
        .expect("scrape /metrics");
    assert_eq!(status, 200, "{body}");
    let mut calls = Calls::default();
    for line in body.lines() {
        let Some(labels) = line.strip_prefix("wasm_ccm_provider_calls_total{") else {
            continue;
        };
        let outcome = labels
            .split("outcome=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .expect("an outcome label");
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|value| value.parse().ok())
            .expect("a count");
        let count = count as u64;
        calls.made += count;
        if !EXPECTED.contains(&outcome) {
            calls.failed += count;
            *calls.failures.entry(outcome.to_string()).or_default() += count;
        }
    }
    assert!(calls.made > 0, "provider calls in /metrics: {body}");
    calls
}

fn elapsed(swaps: &[Swap]) -> Stats {
    stats(swaps.iter().map(|swap| swap.elapsed).collect())
}

/// The table's rows.
pub fn rows(measured: &Measured) -> Vec<(String, Stats)> {
    vec![
        (
            "swap simcloud v1 → v2 through the CloudProvider, oci:// pinned, empty --cache-dir: spec change to status.active (pull + verify + compile + init)".to_string(),
            elapsed(&measured.cold),
        ),
        (
            "swap simcloud v1 ⇄ v2, both in --cache-dir: spec change to status.active"
                .to_string(),
            elapsed(&measured.cached),
        ),
        (
            format!(
                "the same, under load ({LOAD_NODES} nodes not Ready checked continuously, Services created, {LATENCY_MS} ms per cloud request)"
            ),
            elapsed(&measured.under_load),
        ),
    ]
}

/// The goals, and where a swap's time goes.
pub fn summary(measured: &Measured) -> String {
    let met = |ok: bool| if ok { "**met**" } else { "**not met**" };
    let cold = elapsed(&measured.cold).median;
    let cached = elapsed(&measured.cached).median;
    let calls = &measured.calls;
    let failures = calls
        .failures
        .iter()
        .map(|(outcome, count)| format!("{count} {outcome}"))
        .collect::<Vec<_>>();
    let failed = if failures.is_empty() {
        "0".to_string()
    } else {
        format!("{} ({})", calls.failed, failures.join(", "))
    };
    let mut out = String::new();
    out.push_str("| swap through the CloudProvider | result | goal |\n|---|---|---|\n");
    out.push_str(&format!(
        "| spec change to active, cold (median) | {} | ≤ 1 s: {} |\n",
        show(cold),
        met(cold <= Duration::from_secs(1))
    ));
    out.push_str(&format!(
        "| spec change to active, cached (median) | {} | ≤ 100 ms: {} |\n",
        show(cached),
        met(cached <= Duration::from_millis(100))
    ));
    out.push_str(&format!(
        "| provider calls failed during {LOAD_SWAPS} swaps under load | {failed} of {} calls | 0: {} |\n",
        calls.made,
        met(calls.failed == 0)
    ));
    out.push('\n');
    out.push_str(&format!(
        "where a swap's time goes, medians as the watch saw the phases in status: cold {}; cached {}",
        breakdown(&measured.cold),
        breakdown(&measured.cached)
    ));
    out
}

/// Medians from the spec change to each phase seen, and from the last phase to active.
fn breakdown(swaps: &[Swap]) -> String {
    let mut steps = Vec::new();
    for phase in ["Fetching", "Verifying", "Compiling", "Initializing"] {
        let seen: Vec<Duration> = swaps
            .iter()
            .filter_map(|swap| swap.phases.get(phase).copied())
            .collect();
        if !seen.is_empty() {
            steps.push(format!("{phase} at {}", show(stats(seen).median)));
        }
    }
    steps.push(format!("active at {}", show(elapsed(swaps).median)));
    steps.join(", ")
}

//! Providers by language: the Rust simcloud (the reference) against its ports built with
//! componentize-js (TypeScript) and componentize-py (Python). Prints a table, asserts
//! nothing. For each: the component's size, compiling it with an empty compile cache, loading
//! its compiled code from the cache (a new sandbox), a fresh-store trivial call
//! (get-load-balancer-name), `instance-exists` (one GET to the cloud simulator every call)
//! and `instance-metadata` (the instance from the host cache after the first call), and the
//! process's resident memory after loading and calling it. Then a loaded Rust simcloud's
//! calls while nothing else runs and while the TypeScript component compiles beside them (a
//! compile runs off the async worker threads: the calls go on, slowed only by sharing the
//! CPU).
//!
//! Run: `cargo bench -p e2e --bench languages [-- rust|typescript|python|compile]`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::{Cloud, load, resident_bytes};
use wasm_ccm_host::contract::{Node, Service};
use wasm_ccm_host::egress::{EgressConfig, RateBudget};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::{Origin, Sandbox, SandboxConfig};

/// Cached loads, and calls of each kind, per provider.
const LOADS: usize = 5;
const CALLS: usize = 200;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let cloud = Cloud::start().await;
    let instance = cloud.sim.state().add_instance(cloud_sim::NewInstance {
        name: "node-1".into(),
        instance_type: "sim.small".into(),
        zone: "sim-central-1a".into(),
        private_ip: Some("10.0.0.1".into()),
        ..cloud_sim::NewInstance::default()
    });
    let node = Node {
        name: instance.name.clone(),
        provider_id: Some(format!("simcloud://{}", instance.id)),
        ..Node::default()
    };
    println!(
        "{:<11} {:>9} {:>10} {:>12} {:>14} {:>14} {:>16} {:>9}",
        "provider",
        "size",
        "compile",
        "cached load",
        "trivial call",
        "instance-exists",
        "instance-metadata",
        "RSS"
    );
    for (language, path) in [
        ("rust", guest_builds::SIMCLOUD),
        ("typescript", guest_builds::SIMCLOUD_TS),
        ("python", guest_builds::SIMCLOUD_PY),
    ] {
        if only.as_deref().is_some_and(|only| only != language) {
            continue;
        }
        let wasm: Arc<[u8]> = guest_builds::read(path).into();
        let cache = tempfile::tempdir().expect("temp dir");
        let sandbox = || {
            Sandbox::new(
                SandboxConfig {
                    cache_dir: Some(cache.path().to_path_buf()),
                    ..SandboxConfig::default()
                },
                Arc::new(Metrics::default()),
            )
            .expect("sandbox")
        };
        let started = Instant::now();
        let image = sandbox()
            .load(wasm.clone(), language)
            .await
            .expect("compiles");
        let compile = started.elapsed();
        assert_eq!(image.origin(), Origin::Compiled);
        let mut loads = Vec::new();
        for _ in 0..LOADS {
            let fresh = sandbox();
            let started = Instant::now();
            let image = fresh.load(wasm.clone(), language).await.expect("loads");
            loads.push(started.elapsed());
            assert_eq!(image.origin(), Origin::Cache);
        }
        let provider = load(
            &sandbox(),
            path,
            unthrottled(&cloud),
            Some(cloud.simcloud_config()),
        )
        .await
        .expect("the provider loads");
        let svc = Service {
            uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
            ..Service::default()
        };
        let trivial = time(CALLS, || async {
            provider
                .get_load_balancer_name("kubernetes", &svc)
                .await
                .expect("a name");
        })
        .await;
        let exists = time(CALLS, || async {
            assert!(provider.instance_exists(&node).await.expect("an answer"));
        })
        .await;
        let metadata = time(CALLS, || async {
            provider.instance_metadata(&node).await.expect("metadata");
        })
        .await;
        println!(
            "{:<11} {:>9} {:>10} {:>12} {:>14} {:>14} {:>16} {:>9}",
            language,
            format!("{:.2} MB", wasm.len() as f64 / 1e6),
            show(compile),
            show(median(loads)),
            show(trivial),
            show(exists),
            show(metadata),
            format!("{} MB", resident_bytes() / 1_000_000),
        );
        drop(provider);
    }
    println!(
        "(medians; compile: one run with an empty cache; RSS: the whole benchmark process \
         after the row, compiles included)"
    );
    if only.as_deref().is_none_or(|only| only == "compile") {
        calls_during_a_compile(&cloud, &node).await;
    }
}

/// The simulator's grant without its egress budget (50 requests/s by default), which would
/// throttle the loops, not measure them.
fn unthrottled(cloud: &Cloud) -> EgressConfig {
    EgressConfig {
        budget: RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        ..cloud.egress()
    }
}

/// `instance-exists` of a loaded Rust simcloud, one call after another: while nothing else
/// runs, then for as long as the TypeScript component compiles with an empty cache.
async fn calls_during_a_compile(cloud: &Cloud, node: &Node) {
    let sandbox =
        Sandbox::new(SandboxConfig::default(), Arc::new(Metrics::default())).expect("sandbox");
    let provider = load(
        &sandbox,
        guest_builds::SIMCLOUD,
        unthrottled(cloud),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("the provider loads");
    let call = || async {
        let started = Instant::now();
        assert!(provider.instance_exists(node).await.expect("an answer"));
        started.elapsed()
    };
    call().await;
    let mut idle = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        idle.push(call().await);
    }

    let cache = tempfile::tempdir().expect("temp dir");
    let compiling = Sandbox::new(
        SandboxConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            ..SandboxConfig::default()
        },
        Arc::new(Metrics::default()),
    )
    .expect("sandbox");
    let wasm: Arc<[u8]> = guest_builds::read(guest_builds::SIMCLOUD_TS).into();
    let compile = tokio::spawn(async move {
        let started = Instant::now();
        let image = compiling.load(wasm, "typescript").await.expect("compiles");
        assert_eq!(image.origin(), Origin::Compiled);
        started.elapsed()
    });
    let mut during = Vec::new();
    while !compile.is_finished() {
        during.push(call().await);
    }
    let compiled_in = compile.await.expect("the compile task");

    println!();
    println!(
        "{:<44} {:>7} {:>10} {:>10} {:>10}",
        "rust simcloud instance-exists", "calls", "median", "p99", "max"
    );
    for (label, samples) in [
        ("alone".to_string(), idle),
        (
            format!("while typescript compiles ({})", show(compiled_in)),
            during,
        ),
    ] {
        let sorted = sorted(samples);
        println!(
            "{:<44} {:>7} {:>10} {:>10} {:>10}",
            label,
            sorted.len(),
            show(sorted[sorted.len() / 2]),
            show(sorted[sorted.len() * 99 / 100]),
            show(sorted[sorted.len() - 1]),
        );
    }
}

fn sorted(mut samples: Vec<Duration>) -> Vec<Duration> {
    samples.sort();
    samples
}

/// The median time of `runs` calls of `call`, after one unmeasured call.
async fn time<F, Fut>(runs: usize, call: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    call().await;
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        call().await;
        samples.push(started.elapsed());
    }
    median(samples)
}

fn median(samples: Vec<Duration>) -> Duration {
    let sorted = sorted(samples);
    sorted[sorted.len() / 2]
}

fn show(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.1} µs")
    } else if micros < 1e6 {
        format!("{:.2} ms", micros / 1000.0)
    } else {
        format!("{:.2} s", micros / 1e6)
    }
}

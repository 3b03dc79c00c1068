//! Sandbox and egress benchmark: prints a table, asserts nothing.
//!
//! - per-call cost of a fresh Store + instantiate + trivial call (get-load-balancer-name),
//!   with the pooling allocator on and off;
//! - a load-balancer call with 5,000 nodes: passed as a list to a provider built without
//!   node sets (the `legacy` guest), with every label and annotation and with none declared;
//!   and lent as a node set (the `hostile` guest) of which the provider reads the provider
//!   IDs, or every node whole;
//! - compiling a provider vs loading its precompiled code from the cache;
//! - a pinned `oci://` reference to simcloud ready to call, from the local registry with an
//!   empty cache and again from the cache;
//! - simcloud instance-metadata (sandbox + guest + egress gate), the same HTTP request sent
//!   through the egress gate from the host side, and the same request made natively from Rust,
//!   all on a new connection each time (the gate's pool turned off): the gate's own overhead
//!   and the whole sandboxed call's, each against the native request; then the first two
//!   again over the gate's pooled keep-alive connections;
//! - 100 sequential requests to a TLS server on loopback behind a relay that delays every
//!   chunk 5 ms each way (a 10 ms round trip, as to a nearby cloud region): made by a
//!   sandboxed provider over pooled connections and over a new connection each, and by a
//!   native hyper client, pooled and not; with the server's count of full and resumed TLS
//!   handshakes; and what SigV4 signing adds (goal: at most 10%): a form POST to that server
//!   on loopback (no relay) over pooled connections, unsigned and signed by the gate, sent
//!   from the host side and by a sandboxed provider, in wall time and in the process's CPU
//!   time per request (which other processes' load does not inflate);
//! - swapping simcloud v1 and v2 through the `CloudProvider` of a running manager: from the
//!   spec change to the new version active, with an `oci://` reference not yet in
//!   `--cache-dir` and with both versions in it, and the provider calls that fail while
//!   versions are swapped under load.
//!
//! Run: `make bench` (or `cargo bench -p e2e --bench sandbox [-- GROUP]`, where GROUP is one
//! of `calls`, `nodes`, `compile`, `distribution`, `egress`, `rtt`, `swap` to run only that
//! group; `signing` runs the signing rows of `rtt` alone).

#[path = "sandbox/distribution.rs"]
mod distribution;
#[path = "sandbox/rtt.rs"]
mod rtt;
#[path = "sandbox/swap.rs"]
mod swap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::{Cloud, TOKEN, load, sandbox};
use native::get_native;
use wasm_ccm_host::answers::AnswerChecks;
use wasm_ccm_host::contract::{AddressKind, Node, NodeAddress, Service};
use wasm_ccm_host::egress::{Caller, EgressConfig, EgressGate, PoolLimits};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::{Origin, Sandbox, SandboxConfig};

const TRIVIAL_CALLS: usize = 20_000;
const HTTP_CALLS: usize = 1_000;
const NODE_CALLS: usize = 50;
const NODES: usize = 5_000;
const COMPILES: usize = 5;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    // cargo passes `--bench`; any other argument picks one group.
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with("--"));
    let wanted = |group: &str| only.as_deref().is_none_or(|only| only == group);
    let mut rows = Vec::new();
    let mut overhead = None;
    if wanted("calls") {
        for pooling in [true, false] {
            let stats = fresh_store_calls(pooling).await;
            let allocator = if pooling { "pooling" } else { "on-demand" };
            rows.push((
                format!("fresh Store + instantiate + trivial call ({allocator})"),
                stats,
            ));
        }
    }
    if wanted("nodes") {
        for (how, guest, config, svc) in [
            (
                "as a list (a provider without node sets), every label passed",
                guest_builds::LEGACY,
                None,
                "web",
            ),
            (
                "as a list (a provider without node sets), no label declared",
                guest_builds::LEGACY,
                Some("{}"),
                "web",
            ),
            (
                "lent as a node set, provider IDs read",
                guest_builds::HOSTILE,
                Some("{}"),
                "read-nodes:provider-ids",
            ),
            (
                "lent as a node set, whole nodes read, no label declared",
                guest_builds::HOSTILE,
                Some("{}"),
                "read-nodes:all",
            ),
        ] {
            rows.push((
                format!("update-load-balancer with {NODES} nodes {how}"),
                node_carrying_calls(guest, config, svc).await,
            ));
        }
    }
    if wanted("compile") {
        let (compile, cached) = compile_vs_cache().await;
        rows.push((
            "compile simcloud.wasm (Component::new)".to_string(),
            compile,
        ));
        rows.push(("load simcloud from the compile cache".to_string(), cached));
    }
    if wanted("distribution") {
        let measured = distribution::measure().await;
        rows.push((
            "oci:// pinned to simcloud ready: pull + verify + compile + init (empty cache)"
                .to_string(),
            measured.cold,
        ));
        rows.push((
            "oci:// pinned to simcloud ready, restart from --cache-dir (no request)".to_string(),
            measured.warm,
        ));
        rows.push((
            "the same, signature required: + read and check the signature (empty cache)"
                .to_string(),
            measured.cold_signed,
        ));
        rows.push((
            "the same, signature required, restart from --cache-dir (verdict cached, no request)"
                .to_string(),
            measured.warm_signed,
        ));
    }
    let mut rtt_summary = None;
    if wanted("rtt") || wanted("signing") {
        let (measured, summary) = rtt::measure(wanted("rtt")).await;
        rtt_summary = Some(summary);
        for row in measured {
            rows.push((row.name, row.stats));
        }
    }
    let mut swap_summary = None;
    if wanted("swap") {
        let measured = swap::measure().await;
        swap_summary = Some(swap::summary(&measured));
        rows.extend(swap::rows(&measured));
    }
    if wanted("egress") {
        let egress = egress_vs_native().await;
        overhead = Some(Overhead {
            whole_call: percent(&egress.provider_call, &egress.native),
            gate_only: percent(&egress.gate_only, &egress.native),
        });
        rows.push((
            "simcloud instance-metadata: sandbox + guest + egress gate".to_string(),
            egress.provider_call,
        ));
        rows.push((
            "the same HTTP request through the egress gate, host side".to_string(),
            egress.gate_only,
        ));
        rows.push((
            "the same HTTP request natively (hyper, new connection)".to_string(),
            egress.native,
        ));
        rows.push((
            "simcloud instance-metadata, pooled keep-alive connection".to_string(),
            egress.provider_call_pooled,
        ));
        rows.push((
            "the same HTTP request through the gate, host side, pooled".to_string(),
            egress.gate_pooled,
        ));
        rows.push((
            "the same HTTP request natively through hyper-util's client, new connection"
                .to_string(),
            egress.native_client,
        ));
    }

    println!();
    println!("| measurement | runs | median | p90 | p99 |");
    println!("|---|---:|---:|---:|---:|");
    for (name, s) in &rows {
        println!(
            "| {name} | {} | {} | {} | {} |",
            s.runs,
            show(s.median),
            show(s.p90),
            show(s.p99)
        );
    }
    if let Some(overhead) = overhead {
        println!();
        println!(
            "over a native loopback request (medians): egress gate {:+.1}%, whole sandboxed provider call {:+.1}%",
            overhead.gate_only, overhead.whole_call
        );
    }
    if let Some(summary) = rtt_summary {
        println!();
        println!("{summary}");
    }
    if let Some(summary) = swap_summary {
        println!();
        println!("{summary}");
    }
}

struct Overhead {
    whole_call: f64,
    gate_only: f64,
}

fn percent(measured: &Stats, baseline: &Stats) -> f64 {
    (measured.median.as_secs_f64() / baseline.median.as_secs_f64() - 1.0) * 100.0
}

struct EgressStats {
    provider_call: Stats,
    gate_only: Stats,
    native: Stats,
    provider_call_pooled: Stats,
    gate_pooled: Stats,
    native_client: Stats,
}

struct Stats {
    runs: usize,
    median: Duration,
    p90: Duration,
    p99: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Stats {
        runs: samples.len(),
        median: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    }
}

fn show(d: Duration) -> String {
    let micros = d.as_secs_f64() * 1e6;
    if micros < 1000.0 {
        format!("{micros:.1} µs")
    } else {
        format!("{:.2} ms", micros / 1000.0)
    }
}

async fn fresh_store_calls(pooling: bool) -> Stats {
    let sandbox = sandbox(SandboxConfig {
        pooling,
        ..SandboxConfig::default()
    });
    let provider = load(
        &sandbox,
        guest_builds::SIMCLOUD,
        EgressConfig::default(),
        Some(br#"{"api_url":"http://127.0.0.1:1"}"#.to_vec()),
    )
    .await
    .expect("simcloud loads");
    let svc = Service {
        name: "web".into(),
        uid: "3f2a-11ee".into(),
        ..Service::default()
    };
    for _ in 0..200 {
        provider
            .get_load_balancer_name("kubernetes", &svc)
            .await
            .expect("warm-up");
    }
    let mut samples = Vec::with_capacity(TRIVIAL_CALLS);
    for _ in 0..TRIVIAL_CALLS {
        let started = Instant::now();
        provider
            .get_load_balancer_name("kubernetes", &svc)
            .await
            .expect("call");
        samples.push(started.elapsed());
    }
    stats(samples)
}

/// Nodes as the service controller passes them after cloud-node initialised them: eight
/// labels, two annotations, two addresses and a provider ID each.
fn initialised_nodes() -> Vec<Node> {
    (0..NODES)
        .map(|i| {
            let name = format!("node-{i:05}");
            let zone = format!("sim-central-1{}", ["a", "b", "c"][i % 3]);
            let label = |key: &str, value: &str| (key.to_string(), value.to_string());
            Node {
                uid: format!("6c1c1a3e-0000-4000-8000-{i:012}"),
                labels: vec![
                    label("kubernetes.io/hostname", &name),
                    label("kubernetes.io/os", "linux"),
                    label("node.kubernetes.io/instance-type", "sim.small"),
                    label("beta.kubernetes.io/instance-type", "sim.small"),
                    label("topology.kubernetes.io/zone", &zone),
                    label("failure-domain.beta.kubernetes.io/zone", &zone),
                    label("topology.kubernetes.io/region", "sim-central-1"),
                    label("failure-domain.beta.kubernetes.io/region", "sim-central-1"),
                ],
                annotations: vec![
                    label("node.alpha.kubernetes.io/ttl", "0"),
                    label(
                        "volumes.kubernetes.io/controller-managed-attach-detach",
                        "true",
                    ),
                ],
                provider_id: Some(format!("simcloud://i-{i:08x}")),
                addresses: vec![
                    NodeAddress {
                        kind: AddressKind::InternalIP,
                        address: format!("10.0.{}.{}", i / 250, i % 250),
                    },
                    NodeAddress {
                        kind: AddressKind::Hostname,
                        address: name.clone(),
                    },
                ],
                pod_cidrs: vec![format!("10.244.{}.0/24", i % 250)],
                name,
            }
        })
        .collect()
}

/// `update-load-balancer` of Service `svc` with [`NODES`] nodes into `guest` (`legacy`, which
/// takes them as a list, or `hostile`, which reads the node set as `svc` says), with a cloud
/// config declaring the node metadata it reads (`None`: it declares nothing and gets
/// everything). Both answer with a report of what they read.
async fn node_carrying_calls(guest: &str, cloud_config: Option<&str>, svc: &str) -> Stats {
    let sandbox = sandbox(SandboxConfig::default());
    let provider = load(
        &sandbox,
        guest,
        EgressConfig::default(),
        cloud_config.map(|c| c.as_bytes().to_vec()),
    )
    .await
    .expect("the guest loads");
    let nodes: Arc<[Node]> = initialised_nodes().into();
    let svc = Service {
        name: svc.into(),
        ..Service::default()
    };
    let mut samples = Vec::with_capacity(NODE_CALLS);
    for _ in 0..NODE_CALLS + 5 {
        let started = Instant::now();
        let error = provider
            .update_load_balancer("kubernetes", &svc, &nodes)
            .await
            .expect_err("the guest reports what it read");
        samples.push(started.elapsed());
        assert!(
            error.to_string().contains(&format!("\"read\":{NODES}")),
            "{error}"
        );
    }
    stats(samples.split_off(5))
}

async fn compile_vs_cache() -> (Stats, Stats) {
    let wasm: Arc<[u8]> = guest_builds::read(guest_builds::SIMCLOUD).into();
    let mut compiled = Vec::new();
    let mut cached = Vec::new();
    for _ in 0..COMPILES {
        let dir = tempfile::tempdir().expect("temp dir");
        let sandbox = Sandbox::new(
            SandboxConfig {
                cache_dir: Some(dir.path().to_path_buf()),
                ..SandboxConfig::default()
            },
            Arc::new(Metrics::default()),
        )
        .expect("sandbox");
        let started = Instant::now();
        let image = sandbox
            .load(wasm.clone(), "simcloud")
            .await
            .expect("compiles");
        compiled.push(started.elapsed());
        assert_eq!(image.origin(), Origin::Compiled);
        let started = Instant::now();
        let image = sandbox.load(wasm.clone(), "simcloud").await.expect("loads");
        cached.push(started.elapsed());
        assert_eq!(image.origin(), Origin::Cache);
    }
    (stats(compiled), stats(cached))
}

async fn egress_vs_native() -> EgressStats {
    let cloud = Cloud::start().await;
    let instance = cloud.sim.state().add_instance(cloud_sim::NewInstance {
        name: "node-1".into(),
        instance_type: "sim.small".into(),
        zone: "sim-central-1a".into(),
        ..cloud_sim::NewInstance::default()
    });
    let pooled = EgressConfig {
        budget: wasm_ccm_host::egress::RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        ..cloud.egress()
    };
    // A new connection for every request, like the native baseline.
    let egress = EgressConfig {
        pool: PoolLimits {
            max_idle_per_host: 0,
            ..PoolLimits::default()
        },
        ..pooled.clone()
    };
    let gate = EgressGate::new(egress.clone(), Arc::new(Metrics::default()));
    let gate_pooled = EgressGate::new(pooled.clone(), Arc::new(Metrics::default()));
    let caller = Arc::new(Caller {
        provider: "bench".into(),
        version: "host".into(),
    });
    // Answers checked as the manager checks them.
    let checks = Arc::new(AnswerChecks::default());
    let provider = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::SIMCLOUD,
        egress,
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("simcloud loads")
    .with_checks(checks.clone());
    let provider_pooled = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::SIMCLOUD,
        pooled,
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("simcloud loads")
    .with_checks(checks);
    let node = Node {
        name: instance.name.clone(),
        ..Node::default()
    };
    let url = format!("{}/v1/instances?name={}", cloud.sim.url(), instance.name);

    let through_gate = |gate: &Arc<EgressGate>| {
        let request = http::Request::get(&url)
            .header("accept", "application/json")
            .body(bytes::Bytes::new())
            .expect("request");
        let gate = gate.clone();
        let caller = caller.clone();
        async move {
            let (status, body) = gate.send(caller, request).await.expect("gate sends");
            assert_eq!(status, 200);
            serde_json::from_slice::<serde_json::Value>(&body).expect("json")
        }
    };

    let mut provider_call = Vec::with_capacity(HTTP_CALLS);
    let mut gate_only = Vec::with_capacity(HTTP_CALLS);
    let mut native = Vec::with_capacity(HTTP_CALLS);
    let mut provider_call_pooled = Vec::with_capacity(HTTP_CALLS);
    let mut gate_pooled_only = Vec::with_capacity(HTTP_CALLS);
    for _ in 0..50 {
        provider.instance_metadata(&node).await.expect("warm-up");
        provider_pooled
            .instance_metadata(&node)
            .await
            .expect("warm-up");
        through_gate(&gate).await;
        through_gate(&gate_pooled).await;
        get_native(&url, TOKEN).await;
    }
    // hyper-util's pooled client with reuse off and its own connector: what the gate builds
    // on, without the gate.
    let native_client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let mut native_client_only = Vec::with_capacity(HTTP_CALLS);
    // Interleave, rotating the order, so all see the same machine conditions.
    for i in 0..HTTP_CALLS {
        for step in 0..6 {
            let started = Instant::now();
            match (i + step) % 6 {
                5 => {
                    native::get_client(&native_client, &url, TOKEN).await;
                    native_client_only.push(started.elapsed());
                }
                0 => {
                    provider.instance_metadata(&node).await.expect("metadata");
                    provider_call.push(started.elapsed());
                }
                1 => {
                    through_gate(&gate).await;
                    gate_only.push(started.elapsed());
                }
                2 => {
                    provider_pooled
                        .instance_metadata(&node)
                        .await
                        .expect("metadata");
                    provider_call_pooled.push(started.elapsed());
                }
                3 => {
                    through_gate(&gate_pooled).await;
                    gate_pooled_only.push(started.elapsed());
                }
                _ => {
                    get_native(&url, TOKEN).await;
                    native.push(started.elapsed());
                }
            }
        }
    }
    EgressStats {
        provider_call: stats(provider_call),
        gate_only: stats(gate_only),
        native: stats(native),
        provider_call_pooled: stats(provider_call_pooled),
        gate_pooled: stats(gate_pooled_only),
        native_client: stats(native_client_only),
    }
}

/// The native baseline: what a Rust provider linked into the manager would do.
mod native {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::TokioIo;

    /// GET `url` on a new connection with a bearer token and parse the JSON body.
    pub async fn get_native(url: &str, token: &str) -> serde_json::Value {
        let uri: hyper::Uri = url.parse().expect("url");
        let authority = uri.authority().expect("authority").to_string();
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let request = hyper::Request::get(uri.path_and_query().expect("path").as_str())
            .header("host", authority)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json")
            .body(Empty::<bytes::Bytes>::new())
            .expect("request");
        json_body(sender.send_request(request).await.expect("response")).await
    }

    /// GET `url` through `client` with a bearer token and parse the JSON body.
    pub async fn get_client<E>(
        client: &hyper_util::client::legacy::Client<E, Empty<bytes::Bytes>>,
        url: &str,
        token: &str,
    ) -> serde_json::Value
    where
        E: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
    {
        let request = hyper::Request::get(url)
            .header("authorization", format!("Bearer {token}"))
            .header("accept", "application/json")
            .body(Empty::<bytes::Bytes>::new())
            .expect("request");
        json_body(client.request(request).await.expect("response")).await
    }

    /// The whole body of `response`, parsed as JSON.
    async fn json_body(response: hyper::Response<hyper::body::Incoming>) -> serde_json::Value {
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        serde_json::from_slice(&body).expect("json")
    }
}

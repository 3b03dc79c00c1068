//! Scale benchmark: the optimised `wasm-ccm` binary managing N nodes and M LoadBalancer
//! Services in the Kubernetes API emulator, with simcloud against the cloud simulator at a
//! fixed latency per request. Prints a table, asserts nothing.
//!
//! Reports nodes initialised per second, the time until every load balancer has an ingress,
//! provider calls per node and per Service, cloud and kube API requests the manager made,
//! how many times each load balancer was updated after 100 more nodes joined, and the
//! manager's peak RSS.
//!
//! Run: `make bench-scale`, or `cargo bench -p e2e --bench scale`; `SCALE_NODES`,
//! `SCALE_SERVICES` and `SCALE_LATENCY_MS` override 5000, 1000 and 10.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloud_sim::{Faults, NewInstance};
use e2e::https;
use e2e::testbed::{ManagerProcess as Manager, Testbed, ingress_ip, is_uninitialized};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};

const ADDED_NODES: usize = 100;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

/// The manager's peak resident set size.
fn peak_rss_mib(manager: &Manager) -> f64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", manager.child.id())).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// CPU seconds (user + system, all threads) a process has used so far. Linux reports them
/// in clock ticks of 1/100 s (`USER_HZ`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Sum of a metric's series whose labels contain `filter`.
async fn metric(manager: &Manager, name: &str, filter: &str) -> f64 {
    let Ok((_, text)) = https::get(manager.addr, "/metrics").await else {
        return f64::NAN;
    };
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn run() {
    let nodes = setting("SCALE_NODES", 5000);
    let services = setting("SCALE_SERVICES", 1000);
    let latency = setting("SCALE_LATENCY_MS", 10) as u64;
    let binary = e2e::wasm_ccm_binary();
    let bed = Testbed::start().await;
    let state = bed.cloud.sim.state();
    for i in 0..nodes + ADDED_NODES {
        state.add_instance(NewInstance {
            name: format!("node-{i:05}"),
            instance_type: "sim.small".into(),
            zone: format!("sim-central-1{}", ["a", "b", "c"][i % 3]),
            private_ip: None,
            public_ip: None,
            public_ipv6: None,
            hostname: None,
        });
    }
    state.set_faults(Faults {
        latency_ms: latency,
        ..Faults::default()
    });

    let port = https::free_port();
    let mut args = bed.provider_flags();
    args.extend(
        [
            "--controllers=cloud-node,service".to_string(),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--kube-api-qps=1000".into(),
            "--kube-api-burst=2000".into(),
            "--concurrent-node-syncs=32".into(),
            "--concurrent-service-syncs=16".into(),
            "--egress-rate=100000".into(),
            "--egress-burst=100000".into(),
            "--max-concurrent-calls=32".into(),
        ]
        .map(String::from),
    );
    let manager = Manager::spawn(&binary, &args, port, true);
    while https::get(manager.addr, "/healthz").await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("scale: {nodes} nodes, {services} services, {latency} ms cloud latency");

    let started = Instant::now();
    let cpu_start = (
        cpu_seconds(manager.child.id()),
        cpu_seconds(std::process::id()),
    );
    create_nodes(&bed, 0..nodes).await;
    let created = started.elapsed();
    let nodes_done = wait_nodes_initialised(&bed, nodes, started).await;
    eprintln!("scale: nodes initialised after {nodes_done:.1?}");
    let peak_after_nodes = peak_rss_mib(&manager);
    let node_cpu = (
        cpu_seconds(manager.child.id()) - cpu_start.0,
        cpu_seconds(std::process::id()) - cpu_start.1,
    );

    state.clear_requests();
    bed.emulator.reset_requests();
    let lb_started = Instant::now();
    let cpu_before = (
        cpu_seconds(manager.child.id()),
        cpu_seconds(std::process::id()),
    );
    futures::stream::iter(0..services)
        .for_each_concurrent(64, |i| {
            let service = Testbed::lb_service(&format!("svc-{i:04}"));
            let api = bed.services();
            async move {
                api.create(&PostParams::default(), &service)
                    .await
                    .expect("create service");
            }
        })
        .await;
    let lbs_done = wait_ingress(&bed, services, lb_started).await;
    eprintln!("scale: load balancers ready after {lbs_done:.1?}");
    let lb_cpu = (
        cpu_seconds(manager.child.id()) - cpu_before.0,
        cpu_seconds(std::process::id()) - cpu_before.1,
    );

    let metadata_calls = metric(
        &manager,
        "wasm_ccm_provider_calls_total",
        "function=\"instance-metadata\"",
    )
    .await;
    let lb_calls = metric(&manager, "wasm_ccm_provider_calls_total", "-load-balancer").await;
    let cloud_requests_lbs = state.requests().len();
    let kube_requests = metric(&manager, "rest_client_requests_total", "").await;

    state.clear_requests();
    create_nodes(&bed, nodes..nodes + ADDED_NODES).await;
    wait_nodes_initialised(&bed, nodes + ADDED_NODES, Instant::now()).await;
    let targets = nodes + ADDED_NODES;
    let settle = Instant::now();
    while state
        .load_balancers()
        .iter()
        .any(|lb| lb.targets.len() != targets)
        && settle.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut updates: BTreeMap<String, usize> = BTreeMap::new();
    for request in state.requests() {
        if request.method == "PUT" && request.path.ends_with("/targets") {
            *updates.entry(request.path).or_default() += 1;
        }
    }
    let updated_once = updates.values().filter(|n| **n == 1).count();
    let updated_more = updates.values().filter(|n| **n > 1).count();
    let complete = state
        .load_balancers()
        .iter()
        .filter(|lb| lb.targets.len() == targets)
        .count();

    println!();
    println!("| measurement | result |");
    println!("|---|---|");
    println!("| nodes / services / cloud latency | {nodes} / {services} / {latency} ms |");
    println!(
        "| node objects created in | {:.1} s |",
        created.as_secs_f64()
    );
    println!(
        "| all nodes initialised after | {:.1} s ({:.0} nodes/s) |",
        nodes_done.as_secs_f64(),
        nodes as f64 / nodes_done.as_secs_f64()
    );
    println!(
        "| all load balancers with an ingress after | {:.1} s |",
        lbs_done.as_secs_f64()
    );
    println!(
        "| provider calls per node (instance-metadata) | {:.2} |",
        metadata_calls / nodes as f64
    );
    println!(
        "| provider calls per service (load-balancer functions) | {:.2} |",
        lb_calls / services as f64
    );
    println!(
        "| cloud requests while load balancers were made | {cloud_requests_lbs} ({:.1} per service) |",
        cloud_requests_lbs as f64 / services as f64
    );
    println!("| kube API requests by the manager (whole run) | {kube_requests} |");
    println!(
        "| CPU while nodes were initialised: manager / emulator + simulator + bench | {:.1} s / {:.1} s |",
        node_cpu.0, node_cpu.1
    );
    println!(
        "| CPU while load balancers were made: manager / emulator + simulator + bench | {:.1} s / {:.1} s |",
        lb_cpu.0, lb_cpu.1
    );
    println!(
        "| after {ADDED_NODES} more nodes: load balancers updated once / more than once / targeting every node | {updated_once} / {updated_more} / {complete} of {services} |"
    );
    println!(
        "| manager peak RSS after the nodes / at the end | {peak_after_nodes:.0} MiB / {:.0} MiB |",
        peak_rss_mib(&manager)
    );
}

async fn create_nodes(bed: &Testbed, range: std::ops::Range<usize>) {
    let api: Api<Node> = Api::all(bed.client.clone());
    futures::stream::iter(range)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            async move {
                api.create(
                    &PostParams::default(),
                    &Testbed::kubelet_node(&format!("node-{i:05}")),
                )
                .await
                .expect("create node");
            }
        })
        .await;
}

/// Wait until `count` objects listed by `api` are `done`; how long that took since `since`.
async fn wait_for<K>(
    api: Api<K>,
    what: &str,
    count: usize,
    since: Instant,
    done: impl Fn(&K) -> bool,
) -> Duration
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        let list = api.list(&ListParams::default()).await.expect("list");
        let finished = list.items.iter().filter(|item| done(item)).count();
        if finished >= count {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(600),
            "only {finished} of {count} {what} after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_nodes_initialised(bed: &Testbed, count: usize, since: Instant) -> Duration {
    let api: Api<Node> = Api::all(bed.client.clone());
    wait_for(api, "nodes initialised", count, since, |n| {
        !is_uninitialized(n)
    })
    .await
}

async fn wait_ingress(bed: &Testbed, count: usize, since: Instant) -> Duration {
    let done = |s: &Service| ingress_ip(s).is_some();
    wait_for(bed.services(), "load balancers ready", count, since, done).await
}

//! `make demo`: wasm-ccm managing a small cluster on this machine.
//!
//! It starts the Kubernetes API emulator and the cloud simulator on loopback, runs the
//! manager with the simcloud provider against them (through a kubeconfig and the egress
//! gate, as in production), registers a few nodes the way kubelets do and creates
//! LoadBalancer Services, then shows what the manager did: nodes initialised from the cloud,
//! services with load-balancer IPs, and the egress audit of the provider.
//!
//! Runs until Ctrl-C, or `--exit-after SECONDS`. Meanwhile the `kubectl` commands it prints
//! work: the emulator serves HTTPS with a CA of its own, written into the kubeconfig with the
//! bearer token (kubectl sends a token only over HTTPS).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use e2e::https;
use e2e::testbed::{Testbed, ingress_ip, is_uninitialized};
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use wasm_ccm::leader::{LeaseSettings, default_identity};

const NODES: [(&str, &str); 3] = [
    ("worker-a", "sim-central-1a"),
    ("worker-b", "sim-central-1b"),
    ("worker-c", "sim-central-1c"),
];
const SERVICES: [&str; 2] = ["web", "api"];

fn usage() -> ExitCode {
    eprintln!("usage: demo [--exit-after SECONDS]");
    ExitCode::from(2)
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut exit_after = None;
    while let Some(arg) = args.next() {
        let value = match arg.split_once('=') {
            Some(("--exit-after", value)) => value.to_string(),
            None if arg == "--exit-after" => match args.next() {
                Some(value) => value,
                None => return usage(),
            },
            _ => {
                eprintln!("demo: unknown argument {arg:?}");
                return usage();
            }
        };
        match value.parse::<u64>() {
            Ok(seconds) => exit_after = Some(Duration::from_secs(seconds)),
            Err(_) => {
                eprintln!("demo: --exit-after {value:?} is not a number of seconds");
                return usage();
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    run(exit_after).await
}

async fn run(exit_after: Option<Duration>) -> ExitCode {
    let started = Instant::now();
    println!("wasm-ccm demo");
    println!("=============\n");
    let bed = Testbed::start().await;
    println!(
        "  Kubernetes API emulator  {}  (HTTPS, its CA in the kubeconfig)",
        bed.emulator.url()
    );
    println!(
        "  cloud simulator          {}  (bearer token held by the host only)",
        bed.cloud.sim.url()
    );

    let port = https::free_port();
    let mut config = bed.config();
    config.serving.port = port;
    config.leader_election = Some(LeaseSettings {
        namespace: "kube-system".into(),
        name: "cloud-controller-manager".into(),
        identity: default_identity(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    });
    config.settings.load_balancer_drift_period = Duration::from_secs(30);
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], port));
    println!(
        "  wasm-ccm                 provider {} (simcloud), egress granted to {}",
        guest_builds::SIMCLOUD,
        bed.cloud.sim.url()
    );
    println!(
        "                           health and metrics on https://{metrics_addr}/healthz, /metrics"
    );
    println!(
        "  kubeconfig               {}\n",
        bed.kubeconfig().display()
    );
    let manager = bed.run(config);

    println!(
        "Registering nodes as kubelets with --cloud-provider=external do (tainted uninitialized):"
    );
    for (name, zone) in NODES {
        bed.add_node(name, zone).await;
        println!("  + node {name}");
    }
    println!("Creating LoadBalancer Services:");
    for name in SERVICES {
        bed.services()
            .create(&PostParams::default(), &Testbed::lb_service(name))
            .await
            .expect("create service");
        println!("  + service default/{name}");
    }
    println!("\nProgress:");
    let mut done_nodes = BTreeSet::new();
    let mut done_services = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (done_nodes.len() < NODES.len() || done_services.len() < SERVICES.len())
        && Instant::now() < deadline
    {
        for (name, _) in NODES {
            if done_nodes.contains(name) {
                continue;
            }
            if let Some(node) = bed.node(name).await.filter(|n| !is_uninitialized(n)) {
                println!(
                    "  {:>5.1}s  node {name} initialised as {}",
                    started.elapsed().as_secs_f64(),
                    provider_id(&node)
                );
                done_nodes.insert(name);
            }
        }
        for name in SERVICES {
            if done_services.contains(name) {
                continue;
            }
            if let Some(ip) = bed.service(name).await.as_ref().and_then(ingress_ip) {
                println!(
                    "  {:>5.1}s  service default/{name} has load balancer {ip}",
                    started.elapsed().as_secs_f64()
                );
                done_services.insert(name);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    println!("\nNodes:");
    println!(
        "  {:<10} {:<22} {:<16} {:<15} {:<5} addresses",
        "NAME", "PROVIDER ID", "ZONE", "TYPE", "TAINT"
    );
    for (name, _) in NODES {
        let Some(node) = bed.node(name).await else {
            continue;
        };
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_else(|| "-".into());
        println!(
            "  {:<10} {:<22} {:<16} {:<15} {:<5} {}",
            name,
            provider_id(&node),
            label("topology.kubernetes.io/zone"),
            label("node.kubernetes.io/instance-type"),
            if is_uninitialized(&node) {
                "yes"
            } else {
                "gone"
            },
            addresses(&node)
        );
    }
    println!("\nServices:");
    println!(
        "  {:<16} {:<16} {:<8} {:<10}",
        "NAME", "LOAD BALANCER", "IP MODE", "FINALIZER"
    );
    for name in SERVICES {
        let Some(service) = bed.service(name).await else {
            continue;
        };
        let mode = service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .and_then(|i| i.first())
            .and_then(|i| i.ip_mode.clone())
            .unwrap_or_else(|| "-".into());
        let finalizer = service.metadata.finalizers.as_ref().is_some_and(|f| {
            f.iter()
                .any(|f| f == "service.kubernetes.io/load-balancer-cleanup")
        });
        println!(
            "  {:<16} {:<16} {:<8} {:<10}",
            format!("default/{name}"),
            ingress_ip(&service).unwrap_or_else(|| "(pending)".into()),
            mode,
            if finalizer { "yes" } else { "no" }
        );
    }
    println!("\nEgress audit (every request the provider made, from wasm-ccm's /metrics):");
    match https::get(metrics_addr, "/metrics").await {
        Ok((_, metrics)) => print_audit(&metrics),
        Err(error) => println!("  could not read /metrics: {error}"),
    }
    println!(
        "\nThe cloud simulator saw {} requests, all with the token the host injected; the provider never saw it.",
        bed.cloud.sim.state().requests().len()
    );

    let kubeconfig = bed.kubeconfig();
    println!("\nkubectl works against the cluster while the demo runs:");
    for command in ["get nodes -o wide", "get services -A"] {
        println!("  kubectl --kubeconfig {} {command}", kubeconfig.display());
    }

    match exit_after {
        Some(limit) => {
            let left = limit.saturating_sub(started.elapsed());
            println!("\nExiting in {}s (--exit-after).", left.as_secs());
            tokio::select! {
                () = tokio::time::sleep(left) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            println!("\nThe manager keeps running. Ctrl-C to stop.");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    let complete = done_nodes.len() == NODES.len() && done_services.len() == SERVICES.len();
    if let Err(error) = manager.stop().await {
        eprintln!("demo: the manager failed: {error}");
        return ExitCode::FAILURE;
    }
    if complete {
        ExitCode::SUCCESS
    } else {
        eprintln!("demo: not everything converged within a minute");
        ExitCode::FAILURE
    }
}

fn provider_id(node: &Node) -> String {
    node.spec
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_else(|| "-".into())
}

fn addresses(node: &Node) -> String {
    let list: Vec<String> = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .map(|a| format!("{}={}", a.type_, a.address))
        .collect();
    list.join(" ")
}

/// Requests per destination and outcome, from `wasm_ccm_egress_requests_total`.
fn print_audit(metrics: &str) {
    let mut per_host: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("wasm_ccm_egress_requests_total{"))
    {
        let label = |name: &str| {
            let start = line.find(&format!("{name}=\""))? + name.len() + 2;
            let end = line[start..].find('"')? + start;
            Some(line[start..end].to_string())
        };
        let (Some(host), Some(outcome)) = (label("host"), label("outcome")) else {
            continue;
        };
        let count = line
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        *per_host
            .entry(host)
            .or_default()
            .entry(outcome)
            .or_default() += count;
    }
    if per_host.is_empty() {
        println!("  no requests yet");
    }
    for (host, outcomes) in per_host {
        let total: u64 = outcomes.values().sum();
        let denied = outcomes.get("denied").copied().unwrap_or(0);
        let detail: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}: {n}")).collect();
        println!(
            "  {host:<28} {total:>4} requests ({}), denied: {denied}",
            detail.join(", ")
        );
    }
}

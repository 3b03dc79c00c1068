//! `make demo`: wasm-ccm managing a small cluster on this machine with two providers side by
//! side, and swapping one's version under running controllers while the other serves on.
//!
//! It starts the Kubernetes API emulator and two cloud simulators on loopback (a cloud and an
//! edge site, each with its own token and address ranges), installs the `CloudProvider` CRD,
//! puts each simulator's token in a Secret, creates two `CloudProvider`s, `simcloud` (the
//! default for Services without a class, nodes not at the edge) and `edgecloud` (simcloud
//! named `edgecloud` by its cloud config, nodes labelled for the edge, Services of class
//! `wasm-ccm.io/edgecloud`), and runs the manager following both (`--provider-resource
//! simcloud,edgecloud`, through a kubeconfig and the egress gate, as in production). It
//! registers nodes the way kubelets do and creates LoadBalancer Services; once they converge
//! it swaps simcloud for a second build (v2) by replacing the resource's spec, as `kubectl
//! edit` would, and waits until v2 is active and every simcloud Service shows v2's ingress
//! hostname. Then it shows what the manager did: nodes initialised from each cloud, services
//! with load balancers, the `CloudProvider`s, the calls each version answered and how many
//! failed (none), and the egress audit of the providers.
//!
//! Runs until Ctrl-C, or `--exit-after SECONDS`. Meanwhile the `kubectl` commands it prints
//! work: the emulator serves HTTPS with a CA of its own, written into the kubeconfig with the
//! bearer token (kubectl sends a token only over HTTPS).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::testbed::{Testbed, ingress_ip, is_uninitialized};
use e2e::{Cloud, cloud_provider, https};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::PostParams;
use wasm_ccm::leader::{LeaseSettings, default_identity};
use wasm_ccm::resource::{CloudProvider, CloudProviderStatus, ProviderVersion, condition};

const NODES: [(&str, &str); 3] = [
    ("worker-a", "sim-central-1a"),
    ("worker-b", "sim-central-1b"),
    ("worker-c", "sim-central-1c"),
];
const SERVICES: [&str; 2] = ["web", "api"];
/// The second provider: its CloudProvider's name and the name it reports.
const EDGE: &str = "edgecloud";
/// The nodes of the edge site, in the second simulator, labelled [`SITE`]`=edge`.
const EDGE_NODES: [(&str, &str); 2] = [("edge-a", "edge-west-1a"), ("edge-b", "edge-west-1b")];
/// The Services whose load balancers the edge provider makes (their class).
const EDGE_SERVICES: [&str; 1] = ["cdn"];
const EDGE_CLASS: &str = "wasm-ccm.io/edgecloud";
/// The node label the two providers' node selectors read.
const SITE: &str = "topology.example.com/site";
/// The Secret holding the edge simulator's token.
const EDGE_TOKEN_SECRET: &str = "edgecloud-token";

/// The simcloud CloudProvider running `wasm`: every node not at the edge, and the default
/// for Services without a class.
fn simcloud_spec(bed: &Testbed, wasm: &str, cloud_config: &str) -> serde_json::Value {
    let mut spec = cloud_provider::cloud_provider(bed, wasm, cloud_config);
    spec["spec"]["nodeSelector"] = serde_json::json!({
        "matchExpressions": [{"key": SITE, "operator": "NotIn", "values": ["edge"]}],
    });
    spec["spec"]["default"] = serde_json::json!(true);
    spec
}

/// The edgecloud CloudProvider: simcloud v1 named `edgecloud` against the edge simulator.
fn edge_spec(edge: &Cloud) -> serde_json::Value {
    let url = edge.sim.url();
    serde_json::json!({
        "apiVersion": "wasm-ccm.io/v1alpha1",
        "kind": "CloudProvider",
        "metadata": {"name": EDGE},
        "spec": {
            "provider": format!("file://{}", guest_builds::SIMCLOUD),
            "name": EDGE,
            "cloudConfig": {"inline": serde_json::json!({"api_url": url, "name": EDGE}).to_string()},
            "egress": {"allowedHosts": [url]},
            "credentials": [{
                "host": url,
                "secretKeyRef": {"name": EDGE_TOKEN_SECRET, "key": "token", "namespace": cloud_provider::NAMESPACE},
            }],
            "nodeSelector": {"matchLabels": {SITE: "edge"}},
            "loadBalancerClass": EDGE_CLASS,
        },
    })
}

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
    let edge = Cloud::second().await;
    println!(
        "  edge cloud simulator     {}  (another cloud: its own token and addresses)",
        edge.sim.url()
    );

    // What an operator installs: the CRD, each token in a Secret, and a resource per
    // provider, simcloud naming v1.
    cloud_provider::install_crd(&bed).await;
    cloud_provider::token_secret(&bed, e2e::TOKEN).await;
    cloud_provider::secret(&bed, EDGE_TOKEN_SECRET, e2e::SECOND_TOKEN).await;
    let cloud_config = cloud_provider::simcloud_config(&bed);
    cloud_provider::apply(
        &bed,
        &simcloud_spec(&bed, guest_builds::SIMCLOUD, &cloud_config),
    )
    .await;
    cloud_provider::apply(&bed, &edge_spec(&edge)).await;

    let port = https::free_port();
    let mut config = cloud_provider::resource_config(&bed);
    if let wasm_ccm::manager::ProviderMode::Resource { names, .. } = &mut config.provider {
        names.push(EDGE.into());
    }
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
        "  CloudProvider {:<10} provider file://{} (simcloud, v1)",
        cloud_provider::NAME,
        guest_builds::SIMCLOUD
    );
    println!(
        "                           egress granted to {}, its token from Secret {}/{}",
        bed.cloud.sim.url(),
        cloud_provider::NAMESPACE,
        cloud_provider::TOKEN_SECRET
    );
    println!("                           nodes without {SITE}=edge, Services without a class");
    println!(
        "  CloudProvider {EDGE:<10} provider file://{} (simcloud named {EDGE}, v1)",
        guest_builds::SIMCLOUD
    );
    println!(
        "                           egress granted to {}, its token from Secret {}/{EDGE_TOKEN_SECRET}",
        edge.sim.url(),
        cloud_provider::NAMESPACE,
    );
    println!("                           nodes with {SITE}=edge, Services of class {EDGE_CLASS}");
    println!(
        "  wasm-ccm                 --provider-resource {},{EDGE}: runs the versions the resources name, side by side",
        cloud_provider::NAME
    );
    println!(
        "                           health and metrics on https://{metrics_addr}/healthz, /metrics"
    );
    println!(
        "                           (/metrics needs a token: curl -k -H \"Authorization: Bearer {}\" …)",
        bed.emulator.token()
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
    for (name, zone) in EDGE_NODES {
        add_edge_node(&bed, &edge, name, zone).await;
        println!("  + node {name} ({SITE}=edge)");
    }
    println!("Creating LoadBalancer Services:");
    for name in SERVICES {
        bed.services()
            .create(&PostParams::default(), &Testbed::lb_service(name))
            .await
            .expect("create service");
        println!("  + service default/{name}");
    }
    for name in EDGE_SERVICES {
        let mut service = Testbed::lb_service(name);
        if let Some(spec) = service.spec.as_mut() {
            spec.load_balancer_class = Some(EDGE_CLASS.into());
        }
        bed.services()
            .create(&PostParams::default(), &service)
            .await
            .expect("create service");
        println!("  + service default/{name} (loadBalancerClass {EDGE_CLASS})");
    }
    println!("\nProgress:");
    let (v1, converged) = first_convergence(&bed, started).await;

    // The swap: the spec edited as `kubectl edit cloudprovider simcloud` would, while the
    // controllers keep running.
    let stamp = guest_builds::SIMCLOUD_V2_BUILD;
    println!(
        "\nSwapping simcloud to {stamp} through the CloudProvider (spec.provider replaced, as kubectl edit would):"
    );
    println!("  spec.provider: file://{}", guest_builds::SIMCLOUD);
    println!("              -> file://{}", guest_builds::SIMCLOUD_V2);
    cloud_provider::apply(
        &bed,
        &simcloud_spec(&bed, guest_builds::SIMCLOUD_V2, &cloud_config),
    )
    .await;
    let (v2, swapped) = swap_to_v2(&bed, started).await;

    print_nodes(&bed).await;
    print_services(&bed).await;

    println!("\nCloudProviders (the columns of kubectl get cloudproviders -o wide):");
    let object = cloud_provider::api(&bed)
        .get_opt(cloud_provider::NAME)
        .await
        .ok()
        .flatten();
    let edge_object = cloud_provider::api(&bed).get_opt(EDGE).await.ok().flatten();
    print_cloud_providers(&[&object, &edge_object]);

    // As Prometheus scrapes: with a token the API server vouches for (the emulator's admin).
    let metrics = https::get_with_token(metrics_addr, "/metrics", bed.emulator.token()).await;
    println!("\nProvider calls per version (wasm_ccm_provider_calls_total, from /metrics):");
    let status = object
        .as_ref()
        .and_then(|o| o.status.clone())
        .unwrap_or_default();
    let edge_status = edge_object
        .as_ref()
        .and_then(|o| o.status.clone())
        .unwrap_or_default();
    let edge_version = edge_status.active.as_ref().and_then(|a| a.version.clone());
    let named: Vec<(String, String)> = [
        (v1, "v1".to_string(), &status),
        (v2, stamp.to_string(), &status),
        (edge_version, format!("{EDGE} v1"), &edge_status),
    ]
    .into_iter()
    .filter_map(|(version, build, status)| {
        let version = version?;
        let what = format!("{build} ({})", role(status, &version));
        Some((version, what))
    })
    .collect();
    let failed = match &metrics {
        Ok((_, metrics)) => Some(print_calls(metrics, &named)),
        Err(error) => {
            println!("  could not read /metrics: {error}");
            None
        }
    };
    println!("\nEgress audit (every request the provider made, from wasm-ccm's /metrics):");
    match &metrics {
        Ok((_, metrics)) => print_audit(metrics),
        Err(error) => println!("  could not read /metrics: {error}"),
    }
    println!(
        "\nThe cloud simulator saw {} requests, all with the token the host injected; the provider never saw it.",
        bed.cloud.sim.state().requests().len()
    );

    let kubeconfig = bed.kubeconfig();
    println!("\nkubectl works against the cluster while the demo runs:");
    for command in [
        "get nodes -o wide".to_string(),
        "get services -A".to_string(),
        "get cloudproviders -o wide".to_string(),
        format!("describe cloudprovider {}", cloud_provider::NAME),
        format!("describe cloudprovider {EDGE}"),
    ] {
        println!("  kubectl --kubeconfig {} {command}", kubeconfig.display());
    }
    println!("or, for every kubectl of a shell:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!(
        "then a LoadBalancer Service and a Deployment as kubectl makes them (the manager gives the Service a load balancer):"
    );
    for command in [
        "kubectl create service loadbalancer hello --tcp=80:8080",
        "kubectl create deployment hello --image=nginx --port=8080",
        "kubectl get service hello",
    ] {
        println!("  {command}");
    }
    println!(
        r#"The emulator serves what a cloud-controller-manager reads and writes (nodes, services,
events, leases, secrets, CRDs and the rest of the built-in kinds as stored objects) but runs
no pods: `kubectl get pods` says the server doesn't have a resource type "pods", and
`kubectl describe node` prints "Pods: not authorized"."#
    );

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
    if let Err(error) = manager.stop().await {
        eprintln!("demo: the manager failed: {error}");
        return ExitCode::FAILURE;
    }
    if !converged {
        eprintln!("demo: not everything converged within a minute");
        return ExitCode::FAILURE;
    }
    if !swapped {
        eprintln!(
            "demo: the swap to {stamp} did not finish within a minute; the CloudProvider's conditions above say why"
        );
        return ExitCode::FAILURE;
    }
    match failed {
        Some(0) => ExitCode::SUCCESS,
        Some(failed) => {
            eprintln!("demo: {failed} provider calls failed");
            ExitCode::FAILURE
        }
        None => ExitCode::FAILURE,
    }
}

/// Every node of the demo, the cloud's and the edge's.
fn all_nodes() -> impl Iterator<Item = (&'static str, &'static str)> {
    NODES.into_iter().chain(EDGE_NODES)
}

/// Every Service of the demo, the default provider's and the edge's.
fn all_services() -> impl Iterator<Item = &'static str> {
    SERVICES.into_iter().chain(EDGE_SERVICES)
}

/// An instance `name` in the edge simulator, and its node as its kubelet registers it,
/// labelled for the edge.
async fn add_edge_node(bed: &Testbed, edge: &Cloud, name: &str, zone: &str) {
    edge.sim.state().add_instance(cloud_sim::NewInstance {
        name: name.into(),
        instance_type: "edge.small".into(),
        zone: zone.into(),
        ..cloud_sim::NewInstance::default()
    });
    let mut node = Testbed::kubelet_node(name);
    node.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(SITE.into(), "edge".into());
    bed.create_node(&node).await;
}

/// Wait (a minute at most) until v1 and the edge provider are active, every node initialised
/// and every Service has a load balancer, printing each as it happens: v1's version, and
/// whether all happened.
async fn first_convergence(bed: &Testbed, started: Instant) -> (Option<String>, bool) {
    let mut v1 = None;
    let mut edge = None;
    let mut done_nodes = BTreeSet::new();
    let mut done_services = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = |v1: &Option<String>, nodes: &BTreeSet<_>, services: &BTreeSet<_>| {
        v1.is_some()
            && nodes.len() == NODES.len() + EDGE_NODES.len()
            && services.len() == SERVICES.len() + EDGE_SERVICES.len()
    };
    while !(done(&v1, &done_nodes, &done_services) && edge.is_some()) && Instant::now() < deadline {
        if v1.is_none()
            && let Some((version, note)) =
                activated(bed, cloud_provider::NAME, guest_builds::SIMCLOUD).await
        {
            println!(
                "  {:>5.1}s  CloudProvider {}: {note}",
                secs(started),
                cloud_provider::NAME
            );
            v1 = Some(version);
        }
        if edge.is_none()
            && let Some((version, note)) = activated(bed, EDGE, guest_builds::SIMCLOUD).await
        {
            println!("  {:>5.1}s  CloudProvider {EDGE}: {note}", secs(started));
            edge = Some(version);
        }
        for (name, _) in all_nodes() {
            if done_nodes.contains(name) {
                continue;
            }
            if let Some(node) = bed.node(name).await.filter(|n| !is_uninitialized(n)) {
                println!(
                    "  {:>5.1}s  node {name} initialised as {}",
                    secs(started),
                    provider_id(&node)
                );
                done_nodes.insert(name);
            }
        }
        for name in all_services() {
            if done_services.contains(name) {
                continue;
            }
            if let Some(ip) = bed.service(name).await.as_ref().and_then(ingress_ip) {
                println!(
                    "  {:>5.1}s  service default/{name} has load balancer {ip}",
                    secs(started)
                );
                done_services.insert(name);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converged = done(&v1, &done_nodes, &done_services) && edge.is_some();
    (v1, converged)
}

/// Wait (a minute at most) until v2 is active and every Service shows its ingress hostname,
/// printing each as it happens: v2's version, and whether all happened.
async fn swap_to_v2(bed: &Testbed, started: Instant) -> (Option<String>, bool) {
    let stamp = guest_builds::SIMCLOUD_V2_BUILD;
    let mut v2 = None;
    let mut on_v2 = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (v2.is_none() || on_v2.len() < SERVICES.len()) && Instant::now() < deadline {
        if v2.is_none()
            && let Some((version, note)) =
                activated(bed, cloud_provider::NAME, guest_builds::SIMCLOUD_V2).await
        {
            println!(
                "  {:>5.1}s  CloudProvider {}: {note}",
                secs(started),
                cloud_provider::NAME
            );
            v2 = Some(version);
        }
        for name in SERVICES {
            if on_v2.contains(name) {
                continue;
            }
            let service = bed.service(name).await;
            if let Some(hostname) = service
                .as_ref()
                .and_then(|s| hostnames(s).find(|h| h.starts_with(&format!("{stamp}."))))
            {
                println!(
                    "  {:>5.1}s  service default/{name} resynced through {stamp}: ingress hostname {hostname}",
                    secs(started)
                );
                on_v2.insert(name);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let swapped = v2.is_some() && on_v2.len() == SERVICES.len();
    (v2, swapped)
}

fn secs(started: Instant) -> f64 {
    started.elapsed().as_secs_f64()
}

async fn print_nodes(bed: &Testbed) {
    println!("\nNodes:");
    println!(
        "  {:<10} {:<22} {:<16} {:<15} {:<5} addresses",
        "NAME", "PROVIDER ID", "ZONE", "TYPE", "TAINT"
    );
    for (name, _) in all_nodes() {
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
}

async fn print_services(bed: &Testbed) {
    println!("\nServices:");
    println!(
        "  {:<16} {:<16} {:<8} {:<10} {:<22} HOSTNAME",
        "NAME", "LOAD BALANCER", "IP MODE", "FINALIZER", "CLASS"
    );
    for name in all_services() {
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
        // Upstream's, or a provider's own (`<provider>.wasm-ccm.io/load-balancer-cleanup`).
        let finalizer = service
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f.ends_with("/load-balancer-cleanup")));
        let class = service
            .spec
            .as_ref()
            .and_then(|s| s.load_balancer_class.clone())
            .unwrap_or_else(|| "-".into());
        let hostname = hostnames(&service).next().unwrap_or_else(|| "-".into());
        println!(
            "  {:<16} {:<16} {:<8} {:<10} {:<22} {hostname}",
            format!("default/{name}"),
            ingress_ip(&service).unwrap_or_else(|| "(pending)".into()),
            mode,
            if finalizer { "yes" } else { "no" },
            class
        );
    }
}

/// Once the `CloudProvider` `resource` has `wasm` active: its version (`NAME@sha256:<12
/// hex>`) and what the manager said when it activated it (the `Activated` event's note).
async fn activated(bed: &Testbed, resource: &str, wasm: &str) -> Option<(String, String)> {
    let object = cloud_provider::api(bed).get_opt(resource).await.ok()??;
    let status = object.status?;
    let active = status.active.as_ref()?;
    if !active.reference.ends_with(wasm) {
        return None;
    }
    let version = active.version.clone()?;
    let note = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::PROGRESSING && c.reason == "Activated")
        .map_or_else(|| format!("{version} active"), |c| c.message.clone());
    Some((version, note))
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

/// The hostnames of a Service's load-balancer ingress points.
fn hostnames(service: &Service) -> impl Iterator<Item = String> + '_ {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.hostname.clone())
}

/// The `CloudProvider`s as `kubectl get cloudproviders -o wide` shows them (its printer
/// columns), each followed by its conditions.
fn print_cloud_providers(objects: &[&Option<CloudProvider>]) {
    println!(
        "  {:<10} {:<10} {:<30} {:<6} {:<12} {:<10} {:<5} {:<50} REASON",
        "NAME", "PROVIDER", "ACTIVE", "READY", "PROGRESSING", "SPEC", "AGE", "REFERENCE"
    );
    for object in objects {
        match object {
            Some(object) => print_cloud_provider(object),
            None => println!("  (missing)"),
        }
    }
}

/// One `CloudProvider`'s row, then its conditions.
fn print_cloud_provider(object: &CloudProvider) {
    let status = object.status.clone().unwrap_or_default();
    let condition = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    let age = object
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
            Some(format!(
                "{}s",
                (now.as_secs() as i64 - t.0.as_second()).max(0)
            ))
        })
        .unwrap_or_else(|| "-".into());
    let status_of =
        |type_: &str| condition(type_).map_or("-".into(), |c| format!("{:?}", c.status));
    println!(
        "  {:<10} {:<10} {:<30} {:<6} {:<12} {:<10} {:<5} {:<50} {}",
        object.metadata.name.as_deref().unwrap_or("-"),
        object.spec.name,
        status
            .active
            .as_ref()
            .and_then(|a| a.version.as_deref())
            .unwrap_or("-"),
        status_of(condition::READY),
        status_of(condition::PROGRESSING),
        condition(condition::SPEC_APPLIED).map_or("-", |c| c.reason.as_str()),
        age,
        object.spec.provider,
        condition(condition::READY).map_or("-", |c| c.reason.as_str()),
    );
    for c in &status.conditions {
        println!(
            "    {:<16} {:<6} {:<16} {}",
            c.type_,
            format!("{:?}", c.status),
            c.reason,
            c.message
        );
    }
}

/// Calls per provider version, by outcome, from `wasm_ccm_provider_calls_total`. `named` lists
/// the demo's versions in the order they ran, each as status names it (`NAME@sha256:<12
/// hex>`: the metric's `provider` and `version` labels) with what it is. Returns how many
/// calls failed.
fn print_calls(metrics: &str, named: &[(String, String)]) -> u64 {
    let mut per_version: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    for (sample, count) in samples(metrics, "wasm_ccm_provider_calls_total") {
        let (Some(provider), Some(version), Some(outcome)) = (
            label(sample, "provider"),
            label(sample, "version"),
            label(sample, "outcome"),
        ) else {
            continue;
        };
        *per_version
            .entry(format!("{provider}@{version}"))
            .or_default()
            .entry(outcome)
            .or_default() += count;
    }
    let mut rows: Vec<(String, String, BTreeMap<&str, u64>)> = named
        .iter()
        .filter_map(|(version, what)| {
            let outcomes = per_version.remove(version)?;
            Some((version.clone(), what.clone(), outcomes))
        })
        .collect();
    rows.extend(
        per_version
            .into_iter()
            .map(|(version, outcomes)| (version, "another version".into(), outcomes)),
    );
    let (mut total, mut failed) = (0, 0);
    for (version, what, outcomes) in rows {
        let calls: u64 = outcomes.values().sum();
        let failures: u64 = outcomes
            .iter()
            .filter(|(outcome, _)| !ANSWERS.contains(outcome))
            .map(|(_, n)| n)
            .sum();
        let detail: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}: {n}")).collect();
        println!(
            "  {version:<30} {what:<40} {calls:>4} calls, {failures} failed ({})",
            detail.join(", ")
        );
        total += calls;
        failed += failures;
    }
    if total == 0 {
        println!("  no calls yet");
    } else {
        println!(
            "  {failed} of {total} calls failed across the swap (not-found and retry-after are answers, not failures)."
        );
    }
    failed
}

/// What `version` (`NAME@sha256:<12 hex>`) is to the `CloudProvider`.
fn role(status: &CloudProviderStatus, version: &str) -> &'static str {
    let is = |v: Option<&ProviderVersion>| v.and_then(|v| v.version.as_deref()) == Some(version);
    if is(status.active.as_ref()) {
        "active"
    } else if is(status.previous.as_ref()) {
        "previous, kept warm for a rollback"
    } else {
        "unloaded"
    }
}

/// Call outcomes that are answers the contract expects, not failures of the version.
const ANSWERS: [&str; 5] = [
    "ok",
    "not-found",
    "retry-after",
    "not-implemented",
    "implemented-elsewhere",
];

/// Requests per grant and outcome, from `wasm_ccm_egress_requests_total`.
fn print_audit(metrics: &str) {
    let mut per_grant: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (sample, count) in samples(metrics, "wasm_ccm_egress_requests_total") {
        let (Some(grant), Some(outcome)) = (label(sample, "grant"), label(sample, "outcome"))
        else {
            continue;
        };
        *per_grant
            .entry(grant.to_string())
            .or_default()
            .entry(outcome.to_string())
            .or_default() += count;
    }
    if per_grant.is_empty() {
        println!("  no requests yet");
    }
    for (grant, outcomes) in per_grant {
        let total: u64 = outcomes.values().sum();
        let denied = outcomes.get("denied").copied().unwrap_or(0);
        let detail: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o}: {n}")).collect();
        println!(
            "  {grant:<28} {total:>4} requests ({}), denied: {denied}",
            detail.join(", ")
        );
    }
}

/// The samples of counter `name` in Prometheus text: each line and its value.
fn samples<'a>(metrics: &'a str, name: &str) -> impl Iterator<Item = (&'a str, u64)> {
    let prefix = format!("{name}{{");
    metrics
        .lines()
        .filter(move |line| line.starts_with(&prefix))
        .map(|line| {
            let count = line
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(0.0) as u64;
            (line, count)
        })
}

/// The value of label `name` in a sample line.
fn label<'a>(sample: &'a str, name: &str) -> Option<&'a str> {
    let start = sample.find(&format!("{name}=\""))? + name.len() + 2;
    let end = sample[start..].find('"')? + start;
    Some(&sample[start..end])
}

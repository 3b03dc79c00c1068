//! `/metrics` as a Prometheus user reads it, from the binary: every family is served as the
//! metrics reference page (`docs/src/operators/metrics-reference.md`) lists it (name, type,
//! labels, help) and none it does not list; the counters a dashboard or alert reads (the
//! provider's cache and log budgets, the work queues' retries) exist at 0 from the start;
//! every provider series carries the name `init` reported, `init` included, not the
//! component file's name; histogram bounds read as written (`0.00025`, not
//! `0.00025000000000000006`). And the requests a provider's `init` makes, before it has
//! said its name, are counted under the name it must report.
//!
//! The page is generated from what the manager serves: when they differ, the test writes the
//! page as it should be to `target/tmp/metrics-reference.md` and names it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::testbed::{ManagerProcess, Testbed, eventually, ingress_ip, is_uninitialized};
use e2e::{docs, https, wasm_ccm_binary};
use kube::api::PostParams;

const PAGE: &str = "docs/src/operators/metrics-reference.md";
const WAIT: Duration = Duration::from_secs(60);

/// Families that are not served until something happens that this test does not do (a
/// family without series is left out of `/metrics`): name, type, labels, help, and what
/// makes the first series.
const LATER: &[(&str, &str, &str, &str, &str)] = &[
    (
        "wasm_ccm_fleet_nodes",
        "gauge",
        "member, state",
        "Nodes by the provider that serves them; contested (several providers claim them) and \
         unowned (none does) are touched by none.",
        "a manager serving several CloudProviders",
    ),
    (
        "wasm_ccm_egress_signed_requests_total",
        "counter",
        "provider, version, grant, service, action, outcome",
        "Requests the gate signed for AWS or refused to sign, by grant, service, API action and \
     outcome.",
        "the first request the egress gate signs for AWS, or refuses to sign",
    ),
];

/// Counters that must read 0, not be missing, before anything happened to them: the
/// series' name and a label it has.
const AT_ZERO: &[(&str, &str)] = &[
    (
        "wasm_ccm_provider_cache_evictions_total",
        "provider=\"simcloud\"",
    ),
    (
        "wasm_ccm_provider_cache_refused_total",
        "limit=\"over-budget\"",
    ),
    (
        "wasm_ccm_provider_cache_refused_total",
        "limit=\"key-too-long\"",
    ),
    (
        "wasm_ccm_provider_cache_refused_total",
        "limit=\"value-too-large\"",
    ),
    (
        "wasm_ccm_provider_log_lines_dropped_total",
        "limit=\"lines-per-call\"",
    ),
    (
        "wasm_ccm_provider_log_lines_dropped_total",
        "limit=\"bytes-per-call\"",
    ),
    (
        "wasm_ccm_provider_log_lines_dropped_total",
        "limit=\"rate\"",
    ),
    ("workqueue_retries_total", "name=\"Nodes\""),
    ("workqueue_retries_total", "name=\"service\""),
];

/// One metric family as served: its type, help and the label names of its series.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
    series: usize,
}

/// The families of an OpenMetrics text, by the name a query uses (`_total` for counters).
fn families(text: &str) -> BTreeMap<String, Family> {
    let mut by_family: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            by_family.entry(name.to_string()).or_default().kind = kind.to_string();
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("# HELP name help");
            by_family.entry(name.to_string()).or_default().help = help.to_string();
        } else if !line.starts_with('#') && !line.is_empty() {
            let name_end = line.find(['{', ' ']).expect("a sample");
            let name = &line[..name_end];
            let family = ["_total", "_bucket", "_sum", "_count", "_created"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| by_family.contains_key(*base))
                })
                .unwrap_or(name);
            let entry = by_family.entry(family.to_string()).or_default();
            entry.series += 1;
            if let Some(labels) = line[name_end..].strip_prefix('{') {
                let labels = &labels[..labels.rfind('}').expect("closed labels")];
                for pair in split_labels(labels) {
                    let key = pair.split_once('=').expect("name=value").0;
                    if key != "le" {
                        entry.labels.insert(key.to_string());
                    }
                }
            }
        }
    }
    by_family
        .into_iter()
        .map(|(name, family)| {
            let name = if family.kind == "counter" {
                format!("{name}_total")
            } else {
                name
            };
            (name, family)
        })
        .collect()
}

/// `a="x",b="y, z"` split at the commas between pairs.
fn split_labels(labels: &str) -> Vec<&str> {
    let mut pairs = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (at, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                pairs.push(&labels[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if start < labels.len() {
        pairs.push(&labels[start..]);
    }
    pairs
}

/// The reference page as the served families make it.
fn page(families: &BTreeMap<String, Family>) -> String {
    let mut page = String::from(
        "# Metrics reference\n\n\
         Every metric `/metrics` serves, generated from a running manager by\n\
         `tests/e2e/tests/manager/metrics.rs`, which fails when this page and what the manager\n\
         serves differ. The `provider` label is the name the provider reports from `init`\n\
         (`--cloud-provider`, a CloudProvider's `spec.name`), from `init`'s first request on;\n\
         `version` is `sha256:` and the first 12 hex digits of the version's digest (the\n\
         manifest's for an OCI artifact, the component's for a file), as the `CloudProvider`\n\
         status's `version` has it after `NAME@`; a version's series go when it is unloaded.\n\
         Counters a dashboard alerts on (the cache and log budgets, the work queues' retries)\n\
         are served at 0 from the start. How to read them: [health and metrics](metrics.md).\n\n\
         | metric | type | labels | what it is |\n|---|---|---|---|\n",
    );
    for (name, family) in families {
        page.push_str(&format!(
            "| `{name}` | {} | {} | {} |\n",
            family.kind,
            quoted(family.labels.iter().map(String::as_str)),
            family.help.replace('|', "\\|")
        ));
    }
    for (name, kind, labels, help, when) in LATER {
        page.push_str(&format!(
            "| `{name}` | {kind} | {} | {help} Served from {when}. |\n",
            quoted(labels.split(", "))
        ));
    }
    page
}

fn quoted<'a>(labels: impl Iterator<Item = &'a str>) -> String {
    labels
        .map(|label| format!("`{label}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Significant digits of a number as written (`0.00025` has 2; `1e-8` has 1).
fn significant_digits(number: &str) -> usize {
    let mantissa = number.split(['e', 'E']).next().unwrap_or(number);
    mantissa
        .chars()
        .filter(char::is_ascii_digit)
        .skip_while(|c| *c == '0')
        .collect::<String>()
        .trim_end_matches('0')
        .len()
}

#[tokio::test]
async fn metrics_are_served_as_the_reference_page_lists_them() {
    let bed = Testbed::start().await;
    bed.add_node("worker-1", "sim-central-1a").await;
    bed.services()
        .create(&PostParams::default(), &Testbed::lb_service("web"))
        .await
        .expect("create the Service");
    // The second build of simcloud: its file is simcloud-v2.wasm, the name it reports is
    // `simcloud`.
    let port = https::free_port();
    let mut flags = bed.provider_flags();
    flags.retain(|flag| !flag.starts_with("--provider="));
    flags.extend([
        format!("--provider=file://{}", guest_builds::SIMCLOUD_V2),
        "--controllers=cloud-node,service".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--leader-elect".into(),
    ]);
    let manager = ManagerProcess::spawn(&wasm_ccm_binary(), &flags, port, true);
    eventually("worker-1 initialised", WAIT, || async {
        bed.node("worker-1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    eventually("web balanced", WAIT, || async {
        bed.service("web").await.as_ref().and_then(ingress_ip)
    })
    .await;
    let (status, text) = https::get_with_token(manager.addr, "/metrics", bed.emulator.token())
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200, "{text}");

    for (name, label) in AT_ZERO {
        let line = text
            .lines()
            .find(|line| line.starts_with(&format!("{name}{{")) && line.contains(label))
            .unwrap_or_else(|| panic!("no {name}{{{label}}} at start:\n{text}"));
        assert!(line.ends_with(" 0"), "{line}");
    }
    for line in text.lines().filter(|line| line.contains("provider=\"")) {
        assert!(
            line.contains("provider=\"simcloud\""),
            "every series names the provider as init did: {line}"
        );
    }
    assert!(
        text.contains("wasm_ccm_provider_calls_total{provider=\"simcloud\",version=")
            && text.contains("function=\"init\",outcome=\"ok\"} 1"),
        "init is counted under the provider's name:\n{text}"
    );
    for line in text.lines().filter(|line| line.contains("le=\"")) {
        let le = line
            .split("le=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        let le = le.expect("a bound");
        assert!(
            le == "+Inf" || significant_digits(le) <= 5,
            "a bucket bound reads as written: {line}"
        );
    }

    let served = families(&text);
    for (name, family) in &served {
        assert!(family.series > 0, "{name} is served without series");
    }
    for (name, ..) in LATER {
        assert!(
            !served.contains_key(*name),
            "{name} is served at start: move it from LATER to what the scrape lists"
        );
    }
    let expected = page(&served);
    let documented = docs::page(PAGE);
    if documented != expected {
        let written =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("metrics-reference.md");
        std::fs::write(&written, &expected).expect("write the expected page");
        panic!(
            "{PAGE} differs from what the manager serves; the page as it should be is {}",
            written.display()
        );
    }
}

/// What `init` does before it has answered is recorded under the name the operator said it
/// must report (`--cloud-provider`, `spec.name`), not the file's: one `provider` label per
/// provider from its first request on.
#[tokio::test]
async fn the_requests_init_makes_carry_the_name_it_must_report() {
    use std::sync::Arc;
    use wasm_ccm_host::egress::EgressGate;
    use wasm_ccm_host::metrics::Metrics;
    use wasm_ccm_host::provider::Compiled;
    use wasm_ccm_host::source::Artifact;

    let cloud = e2e::Cloud::start().await;
    let metrics = Arc::new(Metrics::default());
    let sandbox = e2e::sandbox(e2e::sandbox_config());
    let path = guest_builds::ROLLOUT;
    let artifact = Artifact::from_bytes(path, guest_builds::read(path).into());
    let config =
        serde_json::json!({"name": "simcloud", "initRequest": cloud.sim.url() + "/healthz"});
    let provider = Compiled::new(&sandbox, artifact)
        .await
        .expect("compiles")
        .expecting("simcloud")
        .init(
            EgressGate::new(cloud.egress(), metrics.clone()),
            Some(config.to_string().into_bytes()),
            metrics.clone(),
        )
        .await
        .expect("init answers");
    assert_eq!(provider.capabilities().name, "simcloud");
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics render");
    let requests: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("wasm_ccm_egress_requests_total{"))
        .collect();
    assert_eq!(requests.len(), 1, "{text}");
    assert!(requests[0].contains(r#"provider="simcloud""#), "{text}");
    assert!(
        !text.contains(r#"provider="rollout""#),
        "the file's name is on no series: {text}"
    );
}

/// Initialising a node updates its main resource without its status or `managedFields`
/// (the API server ignores both there and keeps the stored ones, which are most of a Node's
/// bytes): the bytes the manager counts for that PUT are a fraction of the node's, and the
/// kubelet's status is still whole.
#[tokio::test]
async fn a_node_update_sends_neither_status_nor_managed_fields_and_both_are_kept() {
    use k8s_openapi::api::core::v1::ContainerImage;

    let bed = Testbed::start().await;
    bed.add_instance("worker-1", "sim-central-1a");
    let mut node = Testbed::kubelet_node("worker-1");
    let images: Vec<ContainerImage> = (0..200)
        .map(|i| ContainerImage {
            names: Some(vec![format!(
                "registry.example.com/team-{i:03}/service@sha256:{}",
                "0".repeat(64)
            )]),
            size_bytes: Some(100_000_000 + i),
        })
        .collect();
    node.status.as_mut().expect("a kubelet's status").images = Some(images);
    let node_bytes = serde_json::to_vec(&node).unwrap().len();
    bed.create_node(&node).await;

    let port = https::free_port();
    let mut flags = bed.provider_flags();
    flags.extend([
        "--controllers=cloud-node".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--leader-elect=false".into(),
    ]);
    let manager = ManagerProcess::spawn(&wasm_ccm_binary(), &flags, port, true);
    let initialised = eventually("worker-1 initialised", WAIT, || async {
        bed.node("worker-1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    let status = initialised.status.expect("the status");
    assert_eq!(status.images.map(|images| images.len()), Some(200));
    assert!(status.conditions.is_some_and(|c| !c.is_empty()));

    let (_, text) = https::get_with_token(manager.addr, "/metrics", bed.emulator.token())
        .await
        .expect("GET /metrics");
    let bytes = |name: &str, client: &str, method: &str| -> f64 {
        text.lines()
            .filter(|line| {
                line.starts_with(&format!("{name}{{"))
                    && line.contains(&format!("client=\"{client}\""))
                    && line.contains(&format!("method=\"{method}\""))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let put = bytes(
        "wasm_ccm_rest_client_request_bytes_total",
        "cloud-node-controller",
        "PUT",
    );
    assert!(
        put > 0.0 && put < 2048.0 && node_bytes > 20_000,
        "the PUT sent {put} bytes of a {node_bytes}-byte node:\n{text}"
    );
    // The stored node, status and all, comes back in the response; the informers' list and
    // watch are counted as they stream.
    let answered = bytes(
        "wasm_ccm_rest_client_response_bytes_total",
        "cloud-node-controller",
        "PUT",
    );
    assert!(answered as usize > node_bytes, "{answered}:\n{text}");
    assert!(
        bytes(
            "wasm_ccm_rest_client_response_bytes_total",
            "shared-informers",
            "GET"
        ) as usize
            > node_bytes,
        "{text}"
    );
}

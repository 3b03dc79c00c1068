//! simcloud ported to other languages (`guests/simcloud-ts`, TypeScript with componentize-js
//! and `guest-sdk-js`; `guests/simcloud-py`, Python with componentize-py and `guest-sdk-py`;
//! both built from source in every test run), each loaded through the host and held to the
//! Rust simcloud as the reference: every scenario runs once per language in a module named
//! after it, against the same cloud simulator as the Rust simcloud, and compares what both
//! answer and which requests (and bodies) the simulator received, in order.
//!
//! The scenarios: the instance calls on running, stopped, deleted, missing and foreign
//! nodes (and the same capabilities); `init` naming what is wrong in the cloud config; the
//! cloud's throttling as `retry-after`; a request the egress gate refuses as a provider
//! error naming it; a load balancer's life (its name, a port without node port refused,
//! `retry-after` while provisioning, then its ingress, an update to other nodes, deleting it
//! twice), also with the PROXY protocol from the cloud config; a load balancer targeting
//! only the nodes whose labels match the Service's target-node-labels annotation (a
//! malformed one, or one naming a label the cloud config does not declare, an error naming
//! it), with the configured label keys declared by `init`; routes (created, created
//! again, a CIDR routed elsewhere, a missing node, listed, deleted by id, by CIDR and by
//! name, deleted again); and a manager running the port initialising a Node.
//!
//! Adding a language is one line in `every_language!` at the end.

use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{Faults, InstanceStatus};
use e2e::simcloud_fixtures::{
    add_instance, node_named, node_with_id, node_with_provider_id, requests_since, simcloud_port,
};
use e2e::testbed::{Testbed, eventually, has_taint, is_uninitialized};
use e2e::{Cloud, load, sandbox, sandbox_config, simcloud};
use wasm_ccm::controllers::ControllerSelection;
use wasm_ccm_host::contract::{Node, Protocol, Route, Service, ServicePort};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError, ProviderLoadError};

/// A port of simcloud: what tests call it, and its component. Every port loads as the Rust
/// simcloud does (`simcloud_port`: the tests' sandbox settings, the default limits).
struct Language {
    name: &'static str,
    /// A `guest_builds` path.
    component: &'static str,
}

impl Language {
    /// The port with the cloud config `config`, granted the simulator of `cloud`.
    async fn load(
        &self,
        cloud: &Cloud,
        config: Option<serde_json::Value>,
    ) -> Result<Provider, ProviderLoadError> {
        simcloud_port(self.component, cloud.egress(), config).await
    }

    /// The Rust simcloud and the port, both with the cloud config `config`, granted the
    /// simulator of `cloud`.
    async fn beside_the_rust_simcloud(
        &self,
        cloud: &Cloud,
        config: serde_json::Value,
    ) -> (Provider, Provider) {
        let rust = simcloud_port(guest_builds::SIMCLOUD, cloud.egress(), Some(config.clone()))
            .await
            .expect("simcloud loads");
        let port = self
            .load(cloud, Some(config))
            .await
            .expect("the port loads");
        (rust, port)
    }

    /// The port against `cloud`, as `e2e::simcloud` loads the Rust one.
    async fn against(&self, cloud: &Cloud) -> Provider {
        let config = serde_json::json!({ "api_url": cloud.sim.url() });
        self.load(cloud, Some(config))
            .await
            .unwrap_or_else(|error| panic!("the {} simcloud loads: {error}", self.name))
    }
}

/// An answer as text: the value, or the error's outcome and kind.
fn show(answer: Result<String, ProviderError>) -> String {
    match answer {
        Ok(answer) => answer,
        Err(error) => format!("{}: {}", error.outcome(), error.kind),
    }
}

/// The requests the simulator received from `start` on, split at `middle`: what the first
/// provider asked, then what the second asked.
fn requests_of_each(cloud: &Cloud, start: usize, middle: usize) -> (Vec<String>, Vec<String>) {
    let mut first = requests_since(cloud, start);
    let second = first.split_off(middle - start);
    (first, second)
}

/// What differs from run to run in the cloud's load balancers: their IDs, IPs and
/// hostnames.
fn load_balancer_values(cloud: &Cloud) -> Vec<String> {
    cloud
        .sim
        .state()
        .load_balancers()
        .iter()
        .flat_map(|lb| [Some(lb.id.clone()), lb.ip.clone(), lb.hostname.clone()])
        .flatten()
        .collect()
}

/// `answers` and the requests the simulator received from `start` on, as text, with each
/// of `variable` written `{lb}`, so two providers' runs compare.
fn with_load_balancers_hidden(
    cloud: &Cloud,
    start: usize,
    variable: &[String],
    answers: Vec<String>,
) -> (Vec<String>, Vec<String>) {
    let hide = |text: String| {
        variable
            .iter()
            .fold(text, |text, value| text.replace(value.as_str(), "{lb}"))
    };
    let requests = cloud.sim.state().requests()[start..]
        .iter()
        .map(|r| hide(format!("{} {}?{:?} {}", r.method, r.path, r.query, r.body)))
        .collect();
    (answers.into_iter().map(hide).collect(), requests)
}

/// What `p` answers to the three instance calls for each of `nodes`, in order, as text.
async fn instance_answers(p: &Provider, nodes: &[Node]) -> Vec<String> {
    let mut answers = Vec::new();
    for node in nodes {
        let metadata = p.instance_metadata(node).await;
        answers.push(show(metadata.map(|m| format!("{m:?}"))));
        let exists = p.instance_exists(node).await;
        answers.push(show(exists.map(|e| format!("exists={e}"))));
        let shutdown = p.instance_shutdown(node).await;
        answers.push(show(shutdown.map(|s| format!("shutdown={s}"))));
    }
    answers
}

async fn instances_as_the_rust_simcloud(language: &Language) {
    let cloud = Cloud::start().await;
    let running = add_instance(&cloud, "node-a", 21);
    let stopped = add_instance(&cloud, "node-b", 22);
    let deleted = add_instance(&cloud, "node-c", 23);
    let state = cloud.sim.state();
    assert!(state.set_instance_status(&stopped.id, InstanceStatus::Stopped));
    assert!(state.set_instance_status(&deleted.id, InstanceStatus::Deleted));
    let rust = simcloud(&cloud).await;
    let port = language.against(&cloud).await;

    let capabilities = port.capabilities();
    assert_eq!(capabilities, rust.capabilities(), "{}", language.name);
    assert_eq!(capabilities.name, "simcloud");
    assert!(capabilities.instances && capabilities.has_cluster_id);
    assert!(capabilities.load_balancer && capabilities.routes);

    let nodes = [
        node_named(&running.name),
        node_with_id(&running.name, &running.id),
        node_with_provider_id(&running.name, &format!("simcloud:///{}", running.id)),
        node_named(&stopped.name),
        node_with_id(&stopped.name, &stopped.id),
        node_named(&deleted.name),
        node_with_id(&deleted.name, &deleted.id),
        node_named("no-such-node"),
        node_with_id("gone", "i-00000000"),
        node_with_provider_id("foreign", "aws:///eu-west-1a/i-0123"),
    ];
    let start = state.requests().len();
    let expected = instance_answers(&rust, &nodes).await;
    let middle = state.requests().len();
    let answers = instance_answers(&port, &nodes).await;
    assert_eq!(answers, expected, "{}", language.name);
    assert!(
        answers[0].contains(&format!("simcloud://{}", running.id))
            && answers[0].contains("203.0.113.21")
            && answers[0].contains("2001:db8::21")
            && answers[0].contains("simcloud.example/instance-id"),
        "{answers:?}"
    );
    assert!(answers.iter().any(|a| a == "shutdown=true"), "{answers:?}");
    assert!(answers.iter().any(|a| a == "exists=false"), "{answers:?}");
    assert!(
        answers.iter().any(|a| a.starts_with("not-found")),
        "{answers:?}"
    );
    assert!(
        answers.iter().any(|a| a.contains("not a simcloud:// one")),
        "{answers:?}"
    );
    // The same requests in the same order: same URLs, same query encoding, same cache use.
    let (reference, requests) = requests_of_each(&cloud, start, middle);
    assert_eq!(requests, reference, "{}", language.name);
    // Every request carried the token the host injected; the provider never saw it.
    assert!(
        state.requests()[middle..].iter().all(|r| r.authorized),
        "a request of the {} simcloud lacked the host's credential",
        language.name
    );
}

async fn init_names_what_is_wrong_in_the_cloud_config(language: &Language) {
    let cloud = Cloud::start().await;
    let url = cloud.sim.url();
    for (config, named) in [
        (None, "\"api_url\" is required"),
        (Some(serde_json::json!({})), "\"api_url\" is required"),
        (
            Some(serde_json::json!({ "api_url": "ftp://x" })),
            "\"api_url\" must be an http",
        ),
        (
            Some(serde_json::json!({ "api_url": "http://h?q=1" })),
            "\"api_url\" must be an http",
        ),
        (
            Some(serde_json::json!({ "api_url": 7 })),
            "\"api_url\" must be a string",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "proxy_protocl": true })),
            "unknown field \"proxy_protocl\"",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "proxy_protocol": "yes" })),
            "\"proxy_protocol\" must be true or false",
        ),
        (
            Some(serde_json::json!(["api_url"])),
            "expected a JSON object",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "target_node_label_keys": "tier" })),
            "\"target_node_label_keys\" must be a list of node label keys such as \
             [\"node-role.example.com/lb\"]: got \"tier\"",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "target_node_label_keys": ["-tier"] })),
            "\"-tier\" is not a label key",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "target_node_label_keys": ["tier", "tier"] })),
            "\"tier\" is listed twice",
        ),
    ] {
        let described = format!("{} simcloud, {config:?}", language.name);
        // The reference refuses it too.
        simcloud_port(guest_builds::SIMCLOUD, cloud.egress(), config.clone())
            .await
            .err()
            .unwrap_or_else(|| panic!("the Rust simcloud refuses {config:?}"));
        let error = language
            .load(&cloud, config)
            .await
            .err()
            .unwrap_or_else(|| panic!("init must refuse: {described}"));
        let ProviderLoadError::Init { error: init, .. } = &error else {
            panic!("{described}: expected an init error, got {error:?}");
        };
        assert_eq!(init.outcome(), "other", "{described}: {init}");
        assert!(init.to_string().contains(named), "{described}: {init}");
    }
    // Bytes that are no JSON at all.
    let error = load(
        &sandbox(sandbox_config()),
        language.component,
        cloud.egress(),
        Some(b"api_url: x".to_vec()),
    )
    .await
    .err()
    .expect("init refuses YAML");
    assert!(
        error.to_string().contains("invalid cloud config"),
        "{}: {error}",
        language.name
    );
    // A valid one, with a trailing slash and the PROXY protocol, loads.
    let config = serde_json::json!({ "api_url": format!("{url}/"), "proxy_protocol": true });
    language
        .load(&cloud, Some(config))
        .await
        .expect("a valid cloud config is accepted");
    assert!(
        cloud.sim.state().requests().is_empty(),
        "init asks no cloud"
    );
}

async fn turns_throttling_into_retry_after(language: &Language) {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-a", 21);
    let rust = simcloud(&cloud).await;
    let port = language.against(&cloud).await;
    let node = node_with_id("node-a", &instance.id);
    for p in [&rust, &port] {
        cloud.sim.state().set_faults(Faults {
            throttle_next: 1,
            retry_after_secs: 7,
            ..Faults::default()
        });
        let error = p
            .instance_exists(&node)
            .await
            .expect_err("a 429 is no answer");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(7)), "{error}");
        cloud.sim.state().set_faults(Faults {
            fail_next: 1,
            fail_status: 503,
            ..Faults::default()
        });
        let error = p
            .instance_exists(&node)
            .await
            .expect_err("a 503 is no answer");
        assert_eq!(
            error.outcome(),
            "other",
            "a 503 without Retry-After: {error}"
        );
        assert!(error.to_string().contains("answered 503"), "{error}");
        assert!(
            p.instance_exists(&node)
                .await
                .expect("the cloud answers again")
        );
    }
}

async fn refused_egress_is_a_provider_error(language: &Language) {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-a", 21);
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    // Nothing granted: the simulator is not an allowed host.
    let refused = |component: &'static str| {
        simcloud_port(component, EgressConfig::default(), Some(config.clone()))
    };
    let rust = refused(guest_builds::SIMCLOUD)
        .await
        .expect("init makes no request");
    let port = refused(language.component)
        .await
        .expect("init makes no request");
    let node = node_named("node-a");
    let reference = rust.instance_exists(&node).await.unwrap_err();
    let error = port
        .instance_exists(&node)
        .await
        .expect_err("the gate refuses the request");
    assert_eq!(error.outcome(), reference.outcome(), "{error}");
    assert_eq!(error.outcome(), "egress-denied", "{error}");
    let ErrorKind::EgressDenied { message, .. } = &error.kind else {
        panic!("expected egress denied, got {error}");
    };
    let request = format!("request GET {}/v1/instances?name=node-a", cloud.sim.url());
    assert!(
        message.contains(&request) && message.contains("refused"),
        "the provider's own message names the request and the refusal: {message}"
    );
    assert!(cloud.sim.state().requests().is_empty());
}

/// A LoadBalancer Service with a TCP and a UDP port and a source range.
fn web_service() -> Service {
    let port = |name: &str, protocol, port, node_port| ServicePort {
        name: Some(name.into()),
        protocol,
        port,
        node_port: Some(node_port),
        ..ServicePort::default()
    };
    Service {
        name: "web".into(),
        namespace: "shop".into(),
        uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
        ports: vec![
            port("http", Protocol::Tcp, 80, 30080),
            port("dns", Protocol::Udp, 53, 30053),
        ],
        load_balancer_source_ranges: vec!["192.0.2.0/24".into()],
        ..Service::default()
    }
}

/// A load balancer's life through `p`, first targeting `all`, then updated to `updated`:
/// what it answered and the requests and bodies the simulator received, with what differs
/// between two load balancers (id, address) as `{lb}`.
async fn load_balancer_answers(
    cloud: &Cloud,
    p: &Provider,
    all: &[Node],
    updated: &[Node],
) -> (Vec<String>, Vec<String>) {
    let all: Arc<[Node]> = all.into();
    let updated: Arc<[Node]> = updated.into();
    let svc = web_service();
    let start = cloud.sim.state().requests().len();
    let mut answers = Vec::new();
    let name = p.get_load_balancer_name("kubernetes", &svc).await;
    answers.push(show(name));
    let mut unported = web_service();
    unported.ports[1].node_port = None;
    let ensured = p.ensure_load_balancer("kubernetes", &unported, &all).await;
    answers.push(show(ensured.map(|s| format!("{s:?}"))));
    let got = p.get_load_balancer("kubernetes", &svc).await;
    answers.push(show(got.map(|s| format!("{s:?}"))));
    let ensured = p.ensure_load_balancer("kubernetes", &svc, &all).await;
    answers.push(show(ensured.map(|s| format!("{s:?}"))));
    // Longer than the simulator's 300 ms of provisioning.
    tokio::time::sleep(Duration::from_millis(450)).await;
    for _ in 0..2 {
        let ensured = p.ensure_load_balancer("kubernetes", &svc, &all).await;
        answers.push(show(ensured.map(|s| format!("{s:?}"))));
    }
    let got = p.get_load_balancer("kubernetes", &svc).await;
    answers.push(show(got.map(|s| format!("{s:?}"))));
    let done = p.update_load_balancer("kubernetes", &svc, &updated).await;
    answers.push(show(done.map(|()| "updated".to_string())));
    let variable = load_balancer_values(cloud);
    for _ in 0..2 {
        let deleted = p.ensure_load_balancer_deleted("kubernetes", &svc).await;
        answers.push(show(deleted.map(|()| "deleted".to_string())));
    }
    let got = p.get_load_balancer("kubernetes", &svc).await;
    answers.push(show(got.map(|s| format!("{s:?}"))));
    with_load_balancers_hidden(cloud, start, &variable, answers)
}

/// A load balancer's life through the port and the Rust simcloud, both with
/// `proxy_protocol` in their cloud config.
async fn balances_load_as_the_rust_simcloud(language: &Language, proxy_protocol: bool) {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let gone = "i-00000000";
    let all = [
        node_with_id("node-1", &i1.id),
        node_with_id("node-2", &i2.id),
        // A Node outliving its instance, and one of another cloud: neither is a target.
        node_with_id("gone", gone),
        node_with_provider_id("foreign", "aws:///eu-west-1a/i-0123"),
    ];
    let updated = [all[1].clone(), all[2].clone()];
    let config =
        serde_json::json!({ "api_url": cloud.sim.url(), "proxy_protocol": proxy_protocol });
    let (rust, port) = language.beside_the_rust_simcloud(&cloud, config).await;

    let (expected, expected_requests) = load_balancer_answers(&cloud, &rust, &all, &updated).await;
    assert!(cloud.sim.state().load_balancers().is_empty());
    let (answers, requests) = load_balancer_answers(&cloud, &port, &all, &updated).await;
    assert_eq!(answers, expected, "{}", language.name);
    assert_eq!(requests, expected_requests, "{}", language.name);
    assert_eq!(
        answers[0], "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6",
        "upstream's default name"
    );
    assert!(
        answers[1].starts_with("other")
            && answers[1].contains("service port dns (53) has no node port"),
        "{answers:?}"
    );
    assert_eq!(answers[2], "None", "{answers:?}");
    assert!(answers[3].starts_with("retry-after"), "{answers:?}");
    let mode = if proxy_protocol { "Proxy" } else { "VIP" };
    assert!(
        answers[4].contains("{lb}") && answers[4].contains(mode),
        "{answers:?}"
    );
    assert_eq!(answers[4], answers[5], "ensure again is idempotent");
    assert_eq!(
        answers[6],
        format!("Some({})", answers[4]),
        "get agrees with ensure"
    );
    assert_eq!(
        &answers[7..10],
        ["updated", "deleted", "deleted"],
        "{answers:?}"
    );
    assert_eq!(answers[10], "None", "{answers:?}");
    // Nothing was sent for the port without node port; the create names both live targets,
    // the listeners, the source range and the protocol; the update only the second node.
    assert!(
        requests[0].starts_with("GET /v1/load-balancers?"),
        "the first request is the first get's: {requests:?}"
    );
    let create = requests
        .iter()
        .find(|r| r.starts_with("POST "))
        .expect("a create");
    for part in [
        format!("\"targets\":[\"{}\",\"{}\"]", i1.id, i2.id),
        r#""listeners":[{"port":80,"protocol":"tcp","node_port":30080},{"port":53,"protocol":"udp","node_port":30053}]"#.to_string(),
        r#""source_ranges":["192.0.2.0/24"]"#.to_string(),
        format!("\"proxy_protocol\":{proxy_protocol}"),
    ] {
        assert!(create.contains(&part), "{part} in {create}");
    }
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PUT ")
                && r.ends_with(&format!("{{\"targets\":[\"{}\"]}}", i2.id))),
        "{requests:?}"
    );
    assert!(
        !requests.iter().any(|r| r.contains(gone)),
        "a gone instance is never a target: {requests:?}"
    );
    assert!(cloud.sim.state().load_balancers().is_empty());
}

/// The label key the target-node-labels scenario chooses nodes by, besides `tier`.
const LB_ROLE: &str = "node-role.simcloud.test/lb";
/// The Service annotation choosing target nodes by their labels.
const TARGET_NODE_LABELS: &str = "simcloud.wasm-ccm.io/load-balancer-target-node-labels";

/// `web_service()` with the target-node-labels annotation `value`, if any.
fn service_targeting(value: Option<&str>) -> Service {
    Service {
        annotations: value
            .map(|value| (TARGET_NODE_LABELS.to_string(), value.to_string()))
            .into_iter()
            .collect(),
        ..web_service()
    }
}

/// A load balancer's life through `p` with target-node-labels over `nodes`: refused
/// annotations (which ask the cloud nothing), created for the nodes one annotation matches,
/// updated to those another matches, a malformed one on update, then ensured without the
/// annotation, deleted. What it answered (each write followed by the simulator's targets) and
/// the requests and bodies the simulator received, with the load balancer's id and address as
/// `{lb}`.
async fn target_node_label_answers(
    cloud: &Cloud,
    p: &Provider,
    nodes: &[Node],
) -> (Vec<String>, Vec<String>) {
    let nodes: Arc<[Node]> = nodes.into();
    let start = cloud.sim.state().requests().len();
    let targets = || match cloud.sim.state().load_balancers().as_slice() {
        [lb] => format!("targets {:?}", lb.targets),
        other => format!("{} load balancers", other.len()),
    };
    let mut answers = Vec::new();
    for malformed in ["=edge", "topology.kubernetes.io/zone=sim-central-1a"] {
        let svc = service_targeting(Some(malformed));
        let ensured = p.ensure_load_balancer("kubernetes", &svc, &nodes).await;
        answers.push(show(ensured.map(|s| format!("{s:?}"))));
    }
    assert_eq!(
        cloud.sim.state().requests().len(),
        start,
        "a refused annotation asks the cloud nothing"
    );
    let edge = service_targeting(Some(&format!(" {LB_ROLE} = edge , tier ")));
    let ensured = p.ensure_load_balancer("kubernetes", &edge, &nodes).await;
    answers.push(show(ensured.map(|s| format!("{s:?}"))));
    // Longer than the simulator's 300 ms of provisioning.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let ensured = p.ensure_load_balancer("kubernetes", &edge, &nodes).await;
    answers.push(show(ensured.map(|s| format!("{s:?}"))));
    answers.push(targets());
    let gold = service_targeting(Some("tier=gold"));
    let done = p.update_load_balancer("kubernetes", &gold, &nodes).await;
    answers.push(show(done.map(|()| "updated".to_string())));
    answers.push(targets());
    let before = cloud.sim.state().requests().len();
    let malformed = service_targeting(Some("tier=gold=silver"));
    let done = p
        .update_load_balancer("kubernetes", &malformed, &nodes)
        .await;
    answers.push(show(done.map(|()| "updated".to_string())));
    assert_eq!(
        cloud.sim.state().requests().len(),
        before,
        "a malformed annotation on update asks the cloud nothing"
    );
    let every = service_targeting(None);
    let ensured = p.ensure_load_balancer("kubernetes", &every, &nodes).await;
    answers.push(show(ensured.map(|s| format!("{s:?}"))));
    answers.push(targets());
    let variable = load_balancer_values(cloud);
    let deleted = p.ensure_load_balancer_deleted("kubernetes", &every).await;
    answers.push(show(deleted.map(|()| "deleted".to_string())));
    with_load_balancers_hidden(cloud, start, &variable, answers)
}

/// A Service's target-node-labels annotation through the port and the Rust simcloud, both
/// declaring the two label keys it may name: only the nodes with every label (and value)
/// become targets, a malformed annotation is an error naming it, and without it every node
/// is a target again.
async fn targets_nodes_by_their_labels_as_the_rust_simcloud(language: &Language) {
    let cloud = Cloud::start().await;
    let instances: Vec<_> = (1..=4)
        .map(|n| add_instance(&cloud, &format!("node-{n}"), 10 + n))
        .collect();
    let id = |n: usize| instances[n - 1].id.clone();
    let labelled = |node: Node, labels: &[(&str, &str)]| Node {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..node
    };
    let node = |n: usize| node_with_id(&format!("node-{n}"), &id(n));
    let nodes = [
        labelled(
            node(1),
            &[
                (LB_ROLE, "edge"),
                ("tier", "gold"),
                ("kubernetes.io/os", "linux"),
            ],
        ),
        labelled(node(2), &[(LB_ROLE, "edge")]),
        labelled(node(3), &[(LB_ROLE, "inner"), ("tier", "gold")]),
        labelled(node(4), &[("tier", ""), (LB_ROLE, "edge")]),
        // Matches every annotation but is of another cloud: never a target.
        labelled(
            node_with_provider_id("foreign", "aws:///eu-west-1a/i-0123"),
            &[(LB_ROLE, "edge"), ("tier", "gold")],
        ),
    ];
    let config = serde_json::json!({
        "api_url": cloud.sim.url(),
        "target_node_label_keys": [LB_ROLE, "tier"],
    });
    let (rust, port) = language.beside_the_rust_simcloud(&cloud, config).await;
    assert_eq!(
        port.capabilities(),
        rust.capabilities(),
        "{}",
        language.name
    );
    let declared = port
        .capabilities()
        .node_metadata
        .clone()
        .unwrap_or_default();
    assert_eq!(
        declared
            .labels
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["node-role.simcloud.test/lb", "tier"],
        "init declares exactly the configured label keys"
    );
    assert!(declared.annotations.is_empty(), "{declared:?}");

    let (expected, expected_requests) = target_node_label_answers(&cloud, &rust, &nodes).await;
    assert!(cloud.sim.state().load_balancers().is_empty());
    let (answers, requests) = target_node_label_answers(&cloud, &port, &nodes).await;
    assert_eq!(answers, expected, "{}", language.name);
    assert_eq!(requests, expected_requests, "{}", language.name);
    let refusal = format!("other: service shop/web: {TARGET_NODE_LABELS} ");
    assert!(
        answers[0].starts_with(&refusal)
            && answers[0].ends_with("entry \"=edge\" has no label key"),
        "{answers:?}"
    );
    assert!(
        answers[1].starts_with(&refusal)
            && answers[1].contains("names node label \"topology.kubernetes.io/zone\"")
            && answers[1].contains(
                "add it to \"target_node_label_keys\" in the cloud config \
                 (now [\"node-role.simcloud.test/lb\", \"tier\"])"
            ),
        "{answers:?}"
    );
    assert!(answers[2].starts_with("retry-after"), "{answers:?}");
    assert!(answers[3].contains("{lb}"), "{answers:?}");
    assert_eq!(
        answers[4],
        format!("targets {:?}", [id(1), id(4)]),
        "edge nodes with any tier"
    );
    assert_eq!(answers[5], "updated", "{answers:?}");
    assert_eq!(
        answers[6],
        format!("targets {:?}", [id(1), id(3)]),
        "gold nodes of any role"
    );
    assert!(
        answers[7].starts_with(&refusal)
            && answers[7].ends_with(
                "entry \"tier=gold=silver\" has more than one '=': write key=value or key"
            ),
        "{answers:?}"
    );
    assert_eq!(
        answers[8], answers[3],
        "the same ingress without the annotation"
    );
    assert_eq!(
        answers[9],
        format!("targets {:?}", [id(1), id(2), id(3), id(4)]),
        "without the annotation, every node of this cloud"
    );
    assert_eq!(answers[10], "deleted", "{answers:?}");
    assert!(cloud.sim.state().load_balancers().is_empty());
}

/// The same route operations through `p`: what it answered, and the requests and bodies the
/// simulator received, with route ids (new for every route) as `{id}`.
async fn route_answers(cloud: &Cloud, p: &Provider) -> (Vec<String>, Vec<String>) {
    let route = |node: &str, cidr: &str| Route {
        target_node: node.into(),
        destination_cidr: cidr.into(),
        ..Route::default()
    };
    let start = cloud.sim.state().requests().len();
    let mut answers = Vec::new();
    let created = route("node-1", "10.244.1.0/24");
    for (hint, wanted) in [
        ("uid-node-1", created.clone()),
        ("uid-node-1", created.clone()),
        ("uid-node-2", route("node-2", "10.244.1.0/24")),
        ("uid-ghost", route("ghost", "10.244.3.0/24")),
        ("uid-node-2", route("node-2", "10.244.2.0/24")),
        ("uid-node-2", route("node-2", "fd00:10:244:2::/64")),
    ] {
        let done = p.create_route("kubernetes", hint, &wanted).await;
        answers.push(show(done.map(|()| "created".to_string())));
    }
    let listed = p.list_routes("kubernetes").await.expect("routes listed");
    let ids: Vec<String> = listed.iter().map(|r| r.name.clone()).collect();
    answers.push(format!(
        "{:?}",
        listed
            .iter()
            .map(|r| Route {
                name: "{id}".into(),
                ..r.clone()
            })
            .collect::<Vec<_>>()
    ));
    let first = listed
        .iter()
        .find(|r| r.destination_cidr == "10.244.1.0/24")
        .expect("the first route is listed")
        .clone();
    let by_cidr = Route {
        name: String::new(),
        ..route("node-2", "10.244.2.0/24")
    };
    let by_name = Route {
        name: "kubernetes-uid-node-2-fd00-10-244-2---64".into(),
        ..route("node-2", "fd00:10:244:2::/64")
    };
    for gone in [first.clone(), first, by_cidr, by_name] {
        let done = p.delete_route("kubernetes", &gone).await;
        answers.push(show(done.map(|()| "deleted".to_string())));
    }
    let listed = p.list_routes("kubernetes").await.expect("routes listed");
    answers.push(format!("{listed:?}"));
    let requests = cloud.sim.state().requests()[start..]
        .iter()
        .map(|r| {
            let mut path = r.path.clone();
            for id in &ids {
                path = path.replace(id.as_str(), "{id}");
            }
            format!("{} {path}?{:?} {}", r.method, r.query, r.body)
        })
        .collect();
    (answers, requests)
}

async fn routes_as_the_rust_simcloud(language: &Language) {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    add_instance(&cloud, "node-2", 12);
    let rust = simcloud(&cloud).await;
    let port = language.against(&cloud).await;

    let (expected, expected_requests) = route_answers(&cloud, &rust).await;
    assert!(cloud.sim.state().routes().is_empty());
    let (answers, requests) = route_answers(&cloud, &port).await;
    assert_eq!(answers, expected, "{}", language.name);
    assert_eq!(requests, expected_requests, "{}", language.name);
    assert_eq!(&answers[..2], ["created", "created"], "{answers:?}");
    assert!(
        answers[2].starts_with("other") && answers[2].contains("already routes 10.244.1.0/24"),
        "{answers:?}"
    );
    assert!(answers[3].starts_with("not-found"), "{answers:?}");
    assert_eq!(&answers[4..6], ["created", "created"], "{answers:?}");
    for listed in [
        "node-1",
        "node-2",
        "10.244.1.0/24",
        "10.244.2.0/24",
        "fd00:10:244:2::/64",
    ] {
        assert!(answers[6].contains(listed), "{listed}: {answers:?}");
    }
    assert_eq!(
        &answers[7..11],
        ["deleted", "deleted", "deleted", "deleted"],
        "by id, again, by CIDR, by name: {answers:?}"
    );
    assert_eq!(answers[11], "[]", "{answers:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.contains(r#""name":"kubernetes-uid-node-2-fd00-10-244-2---64""#)),
        "{requests:?}"
    );
    assert!(cloud.sim.state().routes().is_empty());
}

async fn a_manager_running_it_initialises_a_node(language: &Language) {
    let bed = Testbed::start().await;
    let id = bed.add_node("worker-1", "sim-central-1a").await;
    // Compile into the tests' shared compile cache first: a cold compile of a TypeScript or
    // Python component takes 12-35 s (longer while other tests compile it too), which is not
    // what this waits for.
    language.against(&bed.cloud).await;
    let mut config = bed.config();
    config.provider = bed.provider(language.component, "simcloud");
    config.controllers = "cloud-node".parse::<ControllerSelection>().unwrap();
    let manager = bed.run(config);
    // Not a speed bound: the machine running the tests may be loaded.
    let node = eventually("worker-1 initialised", Duration::from_secs(120), || async {
        bed.node("worker-1")
            .await
            .filter(|node| !is_uninitialized(node))
    })
    .await;
    let spec = node.spec.clone().unwrap_or_default();
    assert_eq!(spec.provider_id, Some(format!("simcloud://{id}")));
    assert!(!has_taint(
        &node,
        "node.cloudprovider.kubernetes.io/uninitialized"
    ));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("sim-central-1a")
    );
    assert_eq!(
        labels
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str),
        Some("sim.small")
    );
    assert_eq!(
        labels.get("simcloud.example/instance-id"),
        Some(&id),
        "the provider's own label: {labels:?}"
    );
    if let Err(error) = manager.stop().await {
        panic!("the manager did not stop cleanly: {error:#}");
    }
}

/// For each `module: language`, a module of that name with one test per scenario.
macro_rules! every_language {
    ($($module:ident: $language:expr),+ $(,)?) => {$(
        mod $module {
            use super::*;

            const LANGUAGE: Language = $language;

            #[tokio::test]
            async fn answers_instance_calls_as_the_rust_simcloud() {
                instances_as_the_rust_simcloud(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn init_names_what_is_wrong_in_the_cloud_config() {
                super::init_names_what_is_wrong_in_the_cloud_config(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn turns_throttling_into_retry_after() {
                super::turns_throttling_into_retry_after(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn refused_egress_is_a_provider_error() {
                super::refused_egress_is_a_provider_error(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn balances_load_as_the_rust_simcloud() {
                super::balances_load_as_the_rust_simcloud(&LANGUAGE, false).await;
            }

            #[tokio::test]
            async fn balances_load_with_the_proxy_protocol_as_the_rust_simcloud() {
                super::balances_load_as_the_rust_simcloud(&LANGUAGE, true).await;
            }

            #[tokio::test]
            async fn targets_nodes_by_their_labels_as_the_rust_simcloud() {
                super::targets_nodes_by_their_labels_as_the_rust_simcloud(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn routes_as_the_rust_simcloud() {
                super::routes_as_the_rust_simcloud(&LANGUAGE).await;
            }

            #[tokio::test]
            async fn a_manager_running_it_initialises_a_node() {
                super::a_manager_running_it_initialises_a_node(&LANGUAGE).await;
            }
        }
    )+};
}

every_language! {
    typescript: Language { name: "TypeScript", component: guest_builds::SIMCLOUD_TS },
    python: Language { name: "Python", component: guest_builds::SIMCLOUD_PY },
}

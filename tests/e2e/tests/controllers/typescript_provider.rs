//! A provider written in TypeScript (`guests/simcloud-ts`, built from source with
//! componentize-js and the TypeScript SDK in `guest-sdk-js`) loaded through the host like the
//! Rust simcloud: its `init` validates the cloud config as simcloud's does, its instance
//! answers and the requests it makes to the cloud simulator are those of the Rust simcloud,
//! the cloud's throttling reaches the host as `retry-after`, a request the egress gate refuses
//! is a provider error, what it has not ported answers `not-implemented`, and the manager
//! initialises a Node with it.

use std::time::Duration;

use cloud_sim::{Faults, Instance, InstanceStatus};
use e2e::simcloud_fixtures::{add_instance, node_named, requests_since, simcloud_port};
use e2e::testbed::{Testbed, eventually, has_taint, is_uninitialized};
use e2e::{Cloud, load, sandbox, sandbox_config, simcloud};
use wasm_ccm::controllers::ControllerSelection;
use wasm_ccm_host::contract::{Node, Service};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoadError};

/// An initialised node whose provider ID is `provider_id`, as written.
fn node_with(name: &str, provider_id: &str) -> Node {
    Node {
        provider_id: Some(provider_id.into()),
        ..node_named(name)
    }
}

/// The requests the simulator received in `range`, as `METHOD /path[?query]`.
fn requests(cloud: &Cloud, range: std::ops::Range<usize>) -> Vec<String> {
    requests_since(cloud, range.start)[..range.len()].to_vec()
}

/// The TypeScript simcloud against `cloud`, granted the simulator.
async fn typescript_simcloud_of(cloud: &Cloud) -> Provider {
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    simcloud_port(guest_builds::SIMCLOUD_TS, cloud.egress(), Some(config))
        .await
        .expect("the TypeScript simcloud loads")
}

/// What `p` answers to the three instance calls for each of `nodes`, in order, as text.
async fn instance_answers(p: &Provider, nodes: &[Node]) -> Vec<String> {
    let show = |answer: Result<String, ProviderError>| match answer {
        Ok(answer) => answer,
        Err(error) => format!("{}: {}", error.outcome(), error.kind),
    };
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

#[tokio::test]
async fn typescript_simcloud_answers_and_asks_as_the_rust_one() {
    let cloud = Cloud::start().await;
    let running = add_instance(&cloud, "node-a", 21);
    let stopped = add_instance(&cloud, "node-b", 22);
    let deleted = add_instance(&cloud, "node-c", 23);
    let state = cloud.sim.state();
    assert!(state.set_instance_status(&stopped.id, InstanceStatus::Stopped));
    assert!(state.set_instance_status(&deleted.id, InstanceStatus::Deleted));
    let rust = simcloud(&cloud).await;
    let typescript = typescript_simcloud_of(&cloud).await;

    let capabilities = typescript.capabilities();
    assert_eq!(capabilities.name, "simcloud");
    assert!(capabilities.instances && capabilities.has_cluster_id);
    assert!(!capabilities.load_balancer && !capabilities.routes);

    let id = |instance: &Instance| format!("simcloud://{}", instance.id);
    let nodes = [
        node_named(&running.name),
        node_with(&running.name, &id(&running)),
        node_with(&running.name, &format!("simcloud:///{}", running.id)),
        node_named(&stopped.name),
        node_with(&stopped.name, &id(&stopped)),
        node_named(&deleted.name),
        node_with(&deleted.name, &id(&deleted)),
        node_named("no-such-node"),
        node_with("gone", "simcloud://i-00000000"),
        node_with("foreign", "aws:///eu-west-1a/i-0123"),
    ];
    let start = state.requests().len();
    let expected = instance_answers(&rust, &nodes).await;
    let middle = state.requests().len();
    let answers = instance_answers(&typescript, &nodes).await;
    let end = state.requests().len();
    assert_eq!(answers, expected);
    assert!(
        answers[0].contains(&id(&running))
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
    assert_eq!(
        requests(&cloud, middle..end),
        requests(&cloud, start..middle)
    );
    // Every request carried the token the host injected; the provider never saw it.
    assert!(
        state.requests()[middle..end].iter().all(|r| r.authorized),
        "a request of the TypeScript provider lacked the host's credential"
    );
}

#[tokio::test]
async fn typescript_simcloud_init_names_what_is_wrong_in_the_cloud_config() {
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
    ] {
        let described = format!("{config:?}");
        let error = simcloud_port(guest_builds::SIMCLOUD_TS, cloud.egress(), config)
            .await
            .err()
            .unwrap_or_else(|| panic!("init must refuse {described}"));
        let ProviderLoadError::Init { error: init, .. } = &error else {
            panic!("{described}: expected an init error, got {error:?}");
        };
        assert_eq!(init.outcome(), "error", "{described}: {init}");
        assert!(init.to_string().contains(named), "{described}: {init}");
    }
    // Bytes that are no JSON at all.
    let error = load(
        &sandbox(sandbox_config()),
        guest_builds::SIMCLOUD_TS,
        cloud.egress(),
        Some(b"api_url: x".to_vec()),
    )
    .await
    .err()
    .expect("init refuses YAML");
    assert!(
        error.to_string().contains("invalid cloud config"),
        "{error}"
    );
    // A valid one, with a trailing slash and the PROXY protocol, loads.
    let config = serde_json::json!({ "api_url": format!("{url}/"), "proxy_protocol": true });
    simcloud_port(guest_builds::SIMCLOUD_TS, cloud.egress(), Some(config))
        .await
        .expect("a valid cloud config is accepted");
}

#[tokio::test]
async fn typescript_simcloud_turns_throttling_into_retry_after() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-a", 21);
    let p = typescript_simcloud_of(&cloud).await;
    let node = node_with("node-a", &format!("simcloud://{}", instance.id));
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
        "error",
        "a 503 without Retry-After: {error}"
    );
    assert!(error.to_string().contains("answered 503"), "{error}");
    assert!(
        p.instance_exists(&node)
            .await
            .expect("the cloud answers again")
    );
}

#[tokio::test]
async fn typescript_simcloud_refused_egress_is_a_provider_error() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-a", 21);
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    // Nothing granted: the simulator is not an allowed host.
    let p = simcloud_port(
        guest_builds::SIMCLOUD_TS,
        EgressConfig::default(),
        Some(config),
    )
    .await
    .expect("init makes no request");
    let error = p
        .instance_exists(&node_named("node-a"))
        .await
        .expect_err("the gate refuses the request");
    assert_eq!(error.outcome(), "egress-denied", "{error}");
    let message = error.to_string();
    assert!(
        message.contains("request GET") && message.contains("refused"),
        "the provider's own message names the request and the refusal: {message}"
    );
    assert!(cloud.sim.state().requests().is_empty());
}

#[tokio::test]
async fn typescript_simcloud_answers_not_implemented_for_what_it_has_not_ported() {
    let cloud = Cloud::start().await;
    let p = typescript_simcloud_of(&cloud).await;
    let svc = Service {
        name: "web".into(),
        namespace: "shop".into(),
        uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
        ..Service::default()
    };
    let error = p.get_load_balancer("kubernetes", &svc).await.unwrap_err();
    assert!(error.is_not_implemented(), "{error}");
    let error = p
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap_err();
    assert!(error.is_not_implemented(), "{error}");
    let error = p.list_routes("kubernetes").await.unwrap_err();
    assert!(error.is_not_implemented(), "{error}");
    // The name needs no cloud: the SDK's default is upstream's `DefaultLoadBalancerName`.
    assert_eq!(
        p.get_load_balancer_name("kubernetes", &svc).await.unwrap(),
        "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6"
    );
    assert!(cloud.sim.state().requests().is_empty());
}

#[tokio::test]
async fn the_manager_initialises_a_node_with_the_typescript_simcloud() {
    let bed = Testbed::start().await;
    let id = bed.add_node("ts-node-1", "sim-central-1a").await;
    let mut config = bed.config();
    config.provider = bed.provider(guest_builds::SIMCLOUD_TS, "simcloud");
    config.controllers = "cloud-node".parse::<ControllerSelection>().unwrap();
    let manager = bed.run(config);
    // Not a speed bound: the manager compiles the 12.7 MB component first when the compile
    // cache lacks it (about 25 s alone, over a minute while other tests compile it too).
    let node = eventually(
        "ts-node-1 initialised",
        Duration::from_secs(300),
        || async { bed.node("ts-node-1").await.filter(|n| !is_uninitialized(n)) },
    )
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
        "the provider's own label"
    );
    if let Err(error) = manager.stop().await {
        panic!("the manager did not stop cleanly: {error:#}");
    }
}

//! A provider written in Python (`guests/simcloud-py`, built from source with componentize-py
//! and the Python SDK in `guest-sdk-py`) loaded through the host like the Rust simcloud: its
//! `init` validates the cloud config as simcloud's does, its instance answers and the requests
//! it makes to the cloud simulator are those of the Rust simcloud, the cloud's throttling
//! reaches the host as `retry-after`, its load balancers and routes are made and removed as
//! the Rust simcloud's, a request the egress gate refuses is a provider error,
//! and a manager running it initialises a Node.

use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{Faults, Instance, InstanceStatus};
use e2e::simcloud_fixtures::{
    add_instance, node_named, node_with_id, requests_since, simcloud_port,
};
use e2e::testbed::{Testbed, eventually, is_uninitialized};
use e2e::{Cloud, simcloud};
use wasm_ccm::controllers::ControllerSelection;
use wasm_ccm_host::contract::{Node, Protocol, Route, Service, ServicePort};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoadError};

const WAIT: Duration = Duration::from_secs(30);

/// What one provider answers to the instance calls, in a fixed order, as text.
async fn instance_answers(p: &Provider, running: &Instance, stopped: &Instance) -> Vec<String> {
    let show = |answer: Result<String, ProviderError>| match answer {
        Ok(answer) => answer,
        Err(error) => format!("{}: {}", error.outcome(), error.kind),
    };
    let mut answers = Vec::new();
    for node in [
        node_named(&running.name),
        node_with_id(&running.name, &running.id),
        node_named(&stopped.name),
        node_with_id(&stopped.name, &stopped.id),
        node_named("no-such-node"),
        node_with_id("gone", "i-00000000"),
    ] {
        let metadata = p.instance_metadata(&node).await;
        answers.push(show(metadata.map(|m| format!("{m:?}"))));
        let exists = p.instance_exists(&node).await;
        answers.push(show(exists.map(|e| format!("exists={e}"))));
        let shutdown = p.instance_shutdown(&node).await;
        answers.push(show(shutdown.map(|s| format!("shutdown={s}"))));
    }
    answers
}

#[tokio::test]
async fn python_simcloud_answers_and_asks_as_the_rust_one() {
    let cloud = Cloud::start().await;
    let running = add_instance(&cloud, "node-1", 11);
    let stopped = add_instance(&cloud, "node-2", 12);
    assert!(
        cloud
            .sim
            .state()
            .set_instance_status(&stopped.id, InstanceStatus::Stopped)
    );
    let rust = simcloud(&cloud).await;
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    let python = simcloud_port(guest_builds::SIMCLOUD_PY, cloud.egress(), Some(config))
        .await
        .expect("the Python simcloud loads");

    assert_eq!(python.capabilities(), rust.capabilities());
    assert!(python.capabilities().load_balancer && python.capabilities().routes);

    let start = cloud.sim.state().requests().len();
    let expected = instance_answers(&rust, &running, &stopped).await;
    let middle = cloud.sim.state().requests().len();
    let answers = instance_answers(&python, &running, &stopped).await;
    assert_eq!(answers, expected);
    assert!(
        answers[0].contains("simcloud://") && answers[0].contains("203.0.113.11"),
        "{answers:?}"
    );
    assert!(answers.iter().any(|a| a == "shutdown=true"), "{answers:?}");
    assert!(
        answers.iter().any(|a| a.starts_with("not-found")),
        "{answers:?}"
    );
    assert_eq!(
        requests_since(&cloud, middle),
        requests_since(&cloud, start)[..middle - start]
    );
    // Every request carried the token the host injected, none the provider set.
    assert!(
        cloud.sim.state().requests()[middle..]
            .iter()
            .all(|r| r.authorized),
        "a request of the Python provider lacked the host's credential"
    );
}

/// The same route operations through `p`: what it answered, and the requests and bodies the
/// simulator received, with route ids (new for every route) as `{id}`.
async fn route_answers(cloud: &Cloud, p: &Provider) -> (Vec<String>, Vec<String>) {
    let show = |answer: Result<String, ProviderError>| match answer {
        Ok(answer) => answer,
        Err(error) => format!("{}: {}", error.outcome(), error.kind),
    };
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
    for gone in [listed[0].clone(), listed[0].clone()] {
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

#[tokio::test]
async fn python_simcloud_routes_as_the_rust_one() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    add_instance(&cloud, "node-2", 12);
    let rust = simcloud(&cloud).await;
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    let python = simcloud_port(guest_builds::SIMCLOUD_PY, cloud.egress(), Some(config))
        .await
        .expect("the Python simcloud loads");

    let (expected, expected_requests) = route_answers(&cloud, &rust).await;
    assert!(cloud.sim.state().routes().is_empty());
    let (answers, requests) = route_answers(&cloud, &python).await;
    assert_eq!(answers, expected);
    assert_eq!(requests, expected_requests);
    assert_eq!(&answers[..2], ["created", "created"], "{answers:?}");
    assert!(answers[2].contains("10.244.1.0/24"), "{answers:?}");
    assert!(answers[3].starts_with("not-found"), "{answers:?}");
    assert!(answers[4].contains("node-1"), "{answers:?}");
    assert_eq!(&answers[5..7], ["deleted", "deleted"], "{answers:?}");
    assert!(cloud.sim.state().routes().is_empty());
}

#[tokio::test]
async fn python_simcloud_init_names_what_is_wrong_in_the_cloud_config() {
    let cloud = Cloud::start().await;
    let url = cloud.sim.url();
    for (config, named) in [
        (None, "api_url"),
        (Some(serde_json::json!({ "api_url": "ftp://x" })), "api_url"),
        (Some(serde_json::json!({ "api_url": 7 })), "api_url"),
        (
            Some(serde_json::json!({ "api_url": url, "proxy_protocl": true })),
            "proxy_protocl",
        ),
        (
            Some(serde_json::json!({ "api_url": url, "proxy_protocol": "yes" })),
            "proxy_protocol",
        ),
        (Some(serde_json::json!(["api_url"])), "JSON object"),
    ] {
        let described = format!("{config:?}");
        let error = simcloud_port(guest_builds::SIMCLOUD_PY, cloud.egress(), config)
            .await
            .err()
            .unwrap_or_else(|| panic!("init must refuse {described}"));
        let ProviderLoadError::Init { error: init, .. } = &error else {
            panic!("{described}: expected an init error, got {error:?}");
        };
        assert_eq!(init.outcome(), "error", "{described}: {init}");
        assert!(init.to_string().contains(named), "{described}: {init}");
    }
}

#[tokio::test]
async fn python_simcloud_turns_throttling_into_retry_after() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    let p = simcloud_port(guest_builds::SIMCLOUD_PY, cloud.egress(), Some(config))
        .await
        .unwrap();
    cloud.sim.state().set_faults(Faults {
        throttle_next: 1,
        retry_after_secs: 7,
        ..Faults::default()
    });
    let error = p
        .instance_exists(&node_with_id("node-1", &instance.id))
        .await
        .expect_err("a 429 is no answer");
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)), "{error}");
    cloud.sim.state().set_faults(Faults {
        fail_next: 1,
        fail_status: 503,
        ..Faults::default()
    });
    let error = p.instance_exists(&node_named("node-1")).await.unwrap_err();
    assert_eq!(
        error.outcome(),
        "error",
        "a 503 without Retry-After: {error}"
    );
    assert!(p.instance_exists(&node_named("node-1")).await.unwrap());
}

#[tokio::test]
async fn python_simcloud_refused_egress_is_a_provider_error() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    // Nothing granted: the simulator is not an allowed host.
    let p = simcloud_port(
        guest_builds::SIMCLOUD_PY,
        EgressConfig::default(),
        Some(config),
    )
    .await
    .expect("init makes no request");
    let error = p
        .instance_exists(&node_named("node-1"))
        .await
        .expect_err("the gate refuses the request");
    assert_eq!(error.outcome(), "egress-denied", "{error}");
    assert!(
        error.to_string().contains("egress denied by the host"),
        "the provider's own message names the refusal: {error}"
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

/// A load balancer's life through `p`: what it answered and the requests and bodies the
/// simulator received, with what differs between two load balancers (id, address) as `{lb}`.
async fn load_balancer_answers(
    cloud: &Cloud,
    p: &Provider,
    nodes: &[Node],
) -> (Vec<String>, Vec<String>) {
    let all: Arc<[Node]> = nodes.into();
    let last: Arc<[Node]> = nodes[1..].into();
    let show = |answer: Result<String, ProviderError>| match answer {
        Ok(answer) => answer,
        Err(error) => format!("{}: {}", error.outcome(), error.kind),
    };
    let svc = web_service();
    let start = cloud.sim.state().requests().len();
    let mut answers = Vec::new();
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
    let updated = p.update_load_balancer("kubernetes", &svc, &last).await;
    answers.push(show(updated.map(|()| "updated".to_string())));
    let variable: Vec<String> = cloud
        .sim
        .state()
        .load_balancers()
        .iter()
        .flat_map(|lb| [Some(lb.id.clone()), lb.ip.clone(), lb.hostname.clone()])
        .flatten()
        .collect();
    for _ in 0..2 {
        let deleted = p.ensure_load_balancer_deleted("kubernetes", &svc).await;
        answers.push(show(deleted.map(|()| "deleted".to_string())));
    }
    let got = p.get_load_balancer("kubernetes", &svc).await;
    answers.push(show(got.map(|s| format!("{s:?}"))));
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

#[tokio::test]
async fn python_simcloud_balances_load_as_the_rust_one() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let nodes = [
        node_with_id("node-1", &i1.id),
        node_with_id("node-2", &i2.id),
    ];
    let rust = simcloud(&cloud).await;
    let config = serde_json::json!({ "api_url": cloud.sim.url() });
    let python = simcloud_port(guest_builds::SIMCLOUD_PY, cloud.egress(), Some(config))
        .await
        .expect("the Python simcloud loads");

    let (expected, expected_requests) = load_balancer_answers(&cloud, &rust, &nodes).await;
    let (answers, requests) = load_balancer_answers(&cloud, &python, &nodes).await;
    assert_eq!(answers, expected);
    assert_eq!(requests, expected_requests);
    assert_eq!(answers[0], "None", "{answers:?}");
    assert!(answers[1].starts_with("retry-after"), "{answers:?}");
    assert!(
        answers[2].contains("{lb}") && answers[2].contains("VIP"),
        "{answers:?}"
    );
    assert_eq!(answers[2], answers[3], "ensure again is idempotent");
    assert_eq!(
        &answers[5..8],
        ["updated", "deleted", "deleted"],
        "{answers:?}"
    );
    assert_eq!(answers[8], "None", "{answers:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("PUT ") && r.contains(&i2.id)),
        "{requests:?}"
    );
}

#[tokio::test]
async fn a_manager_running_the_python_simcloud_initialises_a_node() {
    let bed = Testbed::start().await;
    let id = bed.add_node("py-worker-1", "sim-central-1a").await;
    // Compile into the tests' shared compile cache first: a cold compile of the component
    // takes 20-35 s (longer while other tests compile it too), which is not what this waits
    // for.
    let config = serde_json::json!({ "api_url": bed.cloud.sim.url() });
    simcloud_port(guest_builds::SIMCLOUD_PY, bed.cloud.egress(), Some(config))
        .await
        .expect("the Python simcloud loads");
    let mut config = bed.config();
    config.provider = bed.provider(guest_builds::SIMCLOUD_PY, "simcloud");
    config.controllers = "cloud-node".parse::<ControllerSelection>().unwrap();
    let manager = bed.run(config);
    let node = eventually("py-worker-1 initialised", WAIT, || async {
        bed.node("py-worker-1")
            .await
            .filter(|node| !is_uninitialized(node))
    })
    .await;
    let spec = node.spec.unwrap_or_default();
    assert_eq!(spec.provider_id, Some(format!("simcloud://{id}")));
    let labels = node.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("topology.kubernetes.io/zone")
            .map(String::as_str),
        Some("sim-central-1a")
    );
    assert_eq!(
        labels.get("simcloud.example/instance-id"),
        Some(&id),
        "{labels:?}"
    );
    manager.stop().await.unwrap();
}

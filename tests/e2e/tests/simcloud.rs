//! End-to-end tests of the reference provider (`guests/simcloud`) against the cloud simulator:
//! every contract function, called through the typed facade a controller uses, checked both by
//! what the facade returns and by what the simulator saw and holds afterwards.

use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{
    Faults, Instance, InstanceStatus, LoadBalancerStatus, NewInstance, Protocol as SimProtocol,
};
use e2e::simcloud_fixtures::{add_instance, node_named, node_with_id};
use e2e::{Cloud, TOKEN, load, sandbox, simcloud};
use wasm_ccm_host::contract::{
    AddressKind, IpMode, LbStatus, Node, NodeAddress, PortStatus, Protocol, Route, Service,
    ServicePort,
};
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderLoadError};
use wasm_ccm_host::sandbox::SandboxConfig;

const CLUSTER: &str = "kubernetes";
/// A Service UID as Kubernetes writes them: 32 hex digits and four dashes.
const SVC_UID: &str = "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b";
/// Longer than the harness's 300 ms provisioning time.
const PROVISIONED: Duration = Duration::from_millis(450);

// ---- fixtures -------------------------------------------------------------------------------

/// An initialised node: its provider ID points at `instance`.
fn node_of(instance: &Instance) -> Node {
    node_with_id(&instance.name, &instance.id)
}

fn port(name: &str, protocol: Protocol, port: i32, node_port: Option<i32>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol,
        port,
        node_port,
        ..ServicePort::default()
    }
}

/// A LoadBalancer Service with an HTTP (TCP) and a DNS (UDP) port and a source range.
fn web_service() -> Service {
    Service {
        name: "web".into(),
        namespace: "shop".into(),
        uid: SVC_UID.into(),
        ports: vec![
            port("http", Protocol::Tcp, 80, Some(30080)),
            port("dns", Protocol::Udp, 53, Some(30053)),
        ],
        load_balancer_source_ranges: vec!["192.0.2.0/24".into()],
        ..Service::default()
    }
}

/// `"a"` + the UID without dashes, cut to 32 characters (upstream's `DefaultLoadBalancerName`).
fn expected_lb_name(uid: &str) -> String {
    let mut name: String = std::iter::once('a')
        .chain(uid.chars().filter(|c| *c != '-'))
        .collect();
    name.truncate(32);
    name
}

fn listener(port: i32, protocol: SimProtocol, node_port: i32) -> cloud_sim::Listener {
    cloud_sim::Listener {
        port,
        protocol,
        node_port,
    }
}

/// simcloud loaded against `cloud` with a cloud config of our choosing.
async fn simcloud_with(
    cloud: &Cloud,
    config: serde_json::Value,
) -> Result<Provider, ProviderLoadError> {
    let sandbox = sandbox(e2e::sandbox_config());
    let config = Some(config.to_string().into_bytes());
    load(&sandbox, guest_builds::SIMCLOUD, cloud.egress(), config).await
}

/// The requests the simulator received, as `METHOD /path[?query]`.
fn requests(cloud: &Cloud) -> Vec<String> {
    cloud
        .sim
        .state()
        .requests()
        .iter()
        .map(|r| match &r.query {
            Some(query) => format!("{} {}?{query}", r.method, r.path),
            None => format!("{} {}", r.method, r.path),
        })
        .collect()
}

/// The requests that changed something (everything but GET).
fn writes(cloud: &Cloud) -> Vec<String> {
    requests(cloud)
        .into_iter()
        .filter(|r| !r.starts_with("GET "))
        .collect()
}

/// `error` is a plain provider error: not `not-found`, not a retry, not a sandbox failure.
fn assert_plain_error(error: &ProviderError) {
    assert!(!error.is_not_found(), "must not be not-found: {error}");
    assert_eq!(error.retry_after(), None, "must not be a retry: {error}");
    assert_eq!(error.outcome(), "other", "{error}");
}

/// Ensure until the load balancer is active (at most a few attempts).
async fn ensure_active(p: &Provider, svc: &Service, nodes: &[Node]) -> LbStatus {
    for _ in 0..10 {
        match p
            .ensure_load_balancer(CLUSTER, svc, &Arc::from(nodes))
            .await
        {
            Ok(status) => return status,
            Err(error) if error.retry_after().is_some() => tokio::time::sleep(PROVISIONED).await,
            Err(error) => panic!("ensure-load-balancer failed: {error}"),
        }
    }
    panic!("the load balancer never became active");
}

// ---- init -----------------------------------------------------------------------------------

#[tokio::test]
async fn init_reports_simcloud_with_every_capability() {
    let cloud = Cloud::start().await;
    let p = simcloud(&cloud).await;
    let caps = p.capabilities();
    assert_eq!(caps.name, "simcloud");
    assert!(caps.instances && caps.load_balancer && caps.routes && caps.has_cluster_id);
    assert!(p.label().starts_with("simcloud@sha256:"), "{}", p.label());
    assert!(p.digest().starts_with("sha256:") && p.digest().len() == 7 + 64);
    assert!(requests(&cloud).is_empty(), "init must not call the cloud");
}

#[tokio::test]
async fn init_without_cloud_config_fails_naming_api_url() {
    let cloud = Cloud::start().await;
    let sandbox = sandbox(e2e::sandbox_config());
    let error = load(&sandbox, guest_builds::SIMCLOUD, cloud.egress(), None)
        .await
        .err()
        .expect("init must refuse a missing config");
    assert!(matches!(error, ProviderLoadError::Init { .. }), "{error:?}");
    assert!(error.to_string().contains("api_url"), "{error}");
}

#[tokio::test]
async fn init_with_a_bad_api_url_fails_naming_api_url() {
    let cloud = Cloud::start().await;
    for bad in ["ftp://example.com", "not a url", "http://", "http://x/?q=1"] {
        let error = simcloud_with(&cloud, serde_json::json!({ "api_url": bad }))
            .await
            .err()
            .unwrap_or_else(|| panic!("init must refuse api_url {bad:?}"));
        let ProviderLoadError::Init { error: init, .. } = &error else {
            panic!("api_url {bad:?}: expected an init error, got {error:?}");
        };
        assert!(init.to_string().contains("api_url"), "{init}");
        assert!(
            init.to_string().contains(bad),
            "names the bad value: {init}"
        );
    }
}

#[tokio::test]
async fn init_refuses_unknown_config_fields() {
    let cloud = Cloud::start().await;
    let config = serde_json::json!({ "api_url": cloud.sim.url(), "proxy_protocl": true });
    let error = simcloud_with(&cloud, config)
        .await
        .err()
        .expect("typo refused");
    assert!(matches!(error, ProviderLoadError::Init { .. }), "{error:?}");
    assert!(error.to_string().contains("proxy_protocl"), "{error}");
}

// ---- instance-metadata ----------------------------------------------------------------------

#[tokio::test]
async fn instance_metadata_by_name_describes_the_instance() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;

    let md = p.instance_metadata(&node_named("node-1")).await.unwrap();
    assert_eq!(md.provider_id, format!("simcloud://{}", instance.id));
    assert_eq!(md.instance_type, "sim.medium");
    assert_eq!(md.zone, "sim-central-1b");
    assert_eq!(md.region, "sim-central-1");
    let address = |kind, address: &str| NodeAddress {
        kind,
        address: address.into(),
    };
    assert_eq!(
        md.node_addresses,
        vec![
            address(AddressKind::InternalIP, "10.0.1.11"),
            address(AddressKind::ExternalIP, "203.0.113.11"),
            address(AddressKind::ExternalIP, "2001:db8::11"),
            address(AddressKind::Hostname, "node-1.sim.internal"),
        ]
    );
    assert_eq!(
        md.additional_labels,
        vec![(
            "simcloud.example/instance-id".to_string(),
            instance.id.clone()
        )]
    );
    assert_eq!(
        requests(&cloud),
        vec!["GET /v1/instances?name=node-1".to_string()]
    );
}

#[tokio::test]
async fn instance_metadata_by_provider_id_reads_the_instance_by_id() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    let instance = add_instance(&cloud, "node-2", 12);
    let p = simcloud(&cloud).await;

    // The node's name is stale: the provider ID wins.
    let node = Node {
        name: "renamed".into(),
        ..node_of(&instance)
    };
    let md = p.instance_metadata(&node).await.unwrap();
    assert_eq!(md.provider_id, format!("simcloud://{}", instance.id));
    assert!(md.node_addresses.contains(&NodeAddress {
        kind: AddressKind::InternalIP,
        address: "10.0.1.12".into()
    }));
    assert_eq!(
        requests(&cloud),
        vec![format!("GET /v1/instances/{}", instance.id)]
    );
}

#[tokio::test]
async fn instance_metadata_of_an_unknown_node_is_not_found() {
    let cloud = Cloud::start().await;
    let gone = add_instance(&cloud, "node-gone", 13);
    cloud.sim.state().delete_instance(&gone.id);
    let p = simcloud(&cloud).await;

    let by_name = p.instance_metadata(&node_named("ghost")).await.unwrap_err();
    assert!(by_name.is_not_found(), "{by_name}");
    let by_id = Node {
        provider_id: Some("simcloud://i-00000000".into()),
        ..node_named("ghost")
    };
    let error = p.instance_metadata(&by_id).await.unwrap_err();
    assert!(error.is_not_found(), "{error}");
    let deleted = p.instance_metadata(&node_of(&gone)).await.unwrap_err();
    assert!(
        deleted.is_not_found(),
        "a deleted instance is gone: {deleted}"
    );
}

#[tokio::test]
async fn instance_metadata_of_a_foreign_provider_id_is_an_error_not_absence() {
    let cloud = Cloud::start().await;
    let p = simcloud(&cloud).await;
    let node = Node {
        provider_id: Some("aws:///us-east-1a/i-0123".into()),
        ..node_named("node-1")
    };
    let error = p.instance_metadata(&node).await.unwrap_err();
    assert_plain_error(&error);
    assert!(
        error.to_string().contains("aws:///us-east-1a/i-0123"),
        "{error}"
    );
    let exists = p.instance_exists(&node).await;
    assert!(
        exists.is_err(),
        "exists must not answer for a foreign ID: {exists:?}"
    );
    assert!(requests(&cloud).is_empty());
}

// ---- instance-exists / instance-shutdown ----------------------------------------------------

#[tokio::test]
async fn instance_exists_for_running_and_stopped_instances() {
    let cloud = Cloud::start().await;
    let running = add_instance(&cloud, "node-1", 11);
    let stopped = add_instance(&cloud, "node-2", 12);
    assert!(
        cloud
            .sim
            .state()
            .set_instance_status(&stopped.id, InstanceStatus::Stopped)
    );
    let p = simcloud(&cloud).await;

    for instance in [&running, &stopped] {
        assert!(
            p.instance_exists(&node_of(instance)).await.unwrap(),
            "{}",
            instance.name
        );
        assert!(
            p.instance_exists(&node_named(&instance.name))
                .await
                .unwrap(),
            "{}",
            instance.name
        );
    }
}

#[tokio::test]
async fn instance_exists_is_false_for_deleted_and_unknown_instances() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    // Warm the provider's instance cache first: exists must not answer from it.
    p.instance_metadata(&node_of(&instance)).await.unwrap();
    assert!(cloud.sim.state().delete_instance(&instance.id));

    assert!(!p.instance_exists(&node_of(&instance)).await.unwrap());
    assert!(!p.instance_exists(&node_named("node-1")).await.unwrap());
    assert!(
        !p.instance_exists(&node_named("never-existed"))
            .await
            .unwrap()
    );
    let unknown_id = Node {
        provider_id: Some("simcloud://i-0badc0de".into()),
        ..node_named("never-existed")
    };
    assert!(!p.instance_exists(&unknown_id).await.unwrap());
}

#[tokio::test]
async fn instance_exists_is_an_error_not_false_when_the_cloud_fails() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    cloud.sim.state().set_faults(Faults {
        fail_next: 2,
        ..Faults::default()
    });

    // A 500 says nothing about the instance: the lifecycle controller must not delete the node.
    let by_id = p.instance_exists(&node_of(&instance)).await;
    let error = by_id.expect_err("a 500 must not read as absence");
    assert_plain_error(&error);
    assert!(error.to_string().contains("500"), "{error}");
    let by_name = p.instance_exists(&node_named("node-1")).await;
    assert_plain_error(&by_name.expect_err("a 500 must not read as absence"));

    let statuses: Vec<u16> = cloud
        .sim
        .state()
        .requests()
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, vec![500, 500]);
    // Once the cloud recovers, the answer is right again.
    assert!(p.instance_exists(&node_of(&instance)).await.unwrap());
}

#[tokio::test]
async fn instance_exists_is_an_error_on_a_503_too() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    cloud.sim.state().set_faults(Faults {
        fail_next: 1,
        fail_status: 503,
        ..Faults::default()
    });
    let error = p.instance_exists(&node_of(&instance)).await.unwrap_err();
    assert!(!error.is_not_found(), "{error}");
}

#[tokio::test]
async fn instance_shutdown_is_true_only_for_stopped_instances() {
    let cloud = Cloud::start().await;
    let running = add_instance(&cloud, "node-1", 11);
    let stopped = add_instance(&cloud, "node-2", 12);
    cloud
        .sim
        .state()
        .set_instance_status(&stopped.id, InstanceStatus::Stopped);
    let p = simcloud(&cloud).await;

    assert!(!p.instance_shutdown(&node_of(&running)).await.unwrap());
    assert!(p.instance_shutdown(&node_of(&stopped)).await.unwrap());
    assert!(p.instance_shutdown(&node_named("node-2")).await.unwrap());

    // State changes show immediately: shutdown reads fresh, not from the cache.
    cloud
        .sim
        .state()
        .set_instance_status(&running.id, InstanceStatus::Stopped);
    assert!(p.instance_shutdown(&node_of(&running)).await.unwrap());
    cloud
        .sim
        .state()
        .set_instance_status(&running.id, InstanceStatus::Running);
    assert!(!p.instance_shutdown(&node_of(&running)).await.unwrap());

    cloud.sim.state().delete_instance(&stopped.id);
    let error = p.instance_shutdown(&node_of(&stopped)).await.unwrap_err();
    assert!(error.is_not_found(), "{error}");
}

// ---- credentials and throttling -------------------------------------------------------------

#[tokio::test]
async fn every_request_carries_the_token_and_no_result_contains_it() {
    let cloud = Cloud::start().await;
    let instance = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let node = node_of(&instance);
    let svc = web_service();

    let mut seen = Vec::new();
    seen.push(format!(
        "{:?}",
        p.instance_metadata(&node_named("node-1")).await
    ));
    seen.push(format!("{:?}", p.instance_exists(&node).await));
    seen.push(format!("{:?}", p.instance_shutdown(&node).await));
    seen.push(format!("{:?}", p.get_load_balancer(CLUSTER, &svc).await));
    seen.push(format!(
        "{:?}",
        p.ensure_load_balancer(CLUSTER, &svc, &Arc::from([node.clone()]))
            .await
    ));
    seen.push(format!(
        "{:?}",
        p.update_load_balancer(CLUSTER, &svc, &Arc::from([])).await
    ));
    seen.push(format!("{:?}", p.list_routes(CLUSTER).await));
    seen.push(format!(
        "{:?}",
        p.instance_metadata(&node_named("ghost")).await
    ));
    cloud.sim.state().set_faults(Faults {
        fail_next: 1,
        ..Faults::default()
    });
    seen.push(format!("{:?}", p.instance_exists(&node).await));
    seen.push(format!(
        "{:?}",
        p.ensure_load_balancer_deleted(CLUSTER, &svc).await
    ));
    for audit in p.egress().audit().recent() {
        seen.push(serde_json::to_string(&audit).unwrap());
    }

    let log = cloud.sim.state().requests();
    assert!(log.len() >= 10, "{log:?}");
    for request in &log {
        assert!(
            request.authorized,
            "{} {} reached the cloud without the token",
            request.method, request.path
        );
        assert!(!request.body.contains(TOKEN));
    }
    for text in &seen {
        assert!(
            !text.contains(TOKEN),
            "the token leaked into a result: {text}"
        );
    }
}

#[tokio::test]
async fn a_429_with_retry_after_becomes_a_retry_after_error() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    cloud.sim.state().set_faults(Faults {
        throttle_next: 1,
        retry_after_secs: 7,
        ..Faults::default()
    });
    let error = p
        .instance_metadata(&node_named("node-1"))
        .await
        .unwrap_err();
    assert_eq!(error.retry_after(), Some(Duration::from_secs(7)), "{error}");
    assert_eq!(error.outcome(), "retry-after");
    assert_eq!(cloud.sim.state().requests()[0].status, 429);
    // The next attempt goes through.
    p.instance_metadata(&node_named("node-1")).await.unwrap();
}

// ---- load balancers -------------------------------------------------------------------------

#[tokio::test]
async fn get_load_balancer_name_is_upstreams_default_name() {
    let cloud = Cloud::start().await;
    let p = simcloud(&cloud).await;
    let svc = web_service();
    let name = p.get_load_balancer_name(CLUSTER, &svc).await.unwrap();
    assert_eq!(name, "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6");
    assert_eq!(name, expected_lb_name(SVC_UID));
    assert_eq!(name.len(), 32);
    assert_eq!(
        p.get_load_balancer_name(CLUSTER, &svc).await.unwrap(),
        name,
        "deterministic"
    );
    let renamed = Service {
        name: "other".into(),
        namespace: "elsewhere".into(),
        ..svc.clone()
    };
    assert_eq!(
        p.get_load_balancer_name("other-cluster", &renamed)
            .await
            .unwrap(),
        name,
        "depends on the UID only"
    );
    let short = Service {
        uid: "ab-cd".into(),
        ..svc
    };
    assert_eq!(
        p.get_load_balancer_name(CLUSTER, &short).await.unwrap(),
        "aabcd"
    );
    assert!(requests(&cloud).is_empty(), "naming needs no cloud call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_load_balancer_provisions_then_reports_an_active_status() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let p = simcloud(&cloud).await;
    let svc = web_service();
    // A node without a provider ID (not initialised yet) cannot be a target.
    let nodes = [node_of(&i1), node_of(&i2), node_named("node-3")];

    assert_eq!(p.get_load_balancer(CLUSTER, &svc).await.unwrap(), None);

    let first = p
        .ensure_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
        .await
        .unwrap_err();
    assert_eq!(first.retry_after(), Some(Duration::from_secs(2)), "{first}");
    assert!(first.to_string().contains("provision"), "{first}");

    let lbs = cloud.sim.state().load_balancers();
    assert_eq!(lbs.len(), 1);
    let lb = &lbs[0];
    assert_eq!(lb.name, expected_lb_name(SVC_UID));
    assert_eq!(lb.cluster, CLUSTER);
    assert_eq!(lb.service_uid, SVC_UID);
    assert_eq!(
        lb.listeners,
        vec![
            listener(80, SimProtocol::Tcp, 30080),
            listener(53, SimProtocol::Udp, 30053)
        ]
    );
    assert_eq!(lb.targets, vec![i1.id.clone(), i2.id.clone()]);
    assert_eq!(lb.source_ranges, vec!["192.0.2.0/24".to_string()]);
    assert!(!lb.proxy_protocol);

    // Still provisioning: it exists, without an ingress point. (Checked only if the simulator
    // still says so afterwards, so a very slow machine cannot make this flaky.)
    let provisioning = p.get_load_balancer(CLUSTER, &svc).await.unwrap();
    assert!(provisioning.is_some());
    if cloud.sim.state().load_balancers()[0].status == LoadBalancerStatus::Provisioning {
        assert_eq!(provisioning, Some(LbStatus { ingress: vec![] }));
    }

    tokio::time::sleep(PROVISIONED).await;
    let status = p
        .ensure_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
        .await
        .unwrap();
    let lb = cloud.sim.state().load_balancers().remove(0);
    assert_eq!(lb.status, LoadBalancerStatus::Active);
    let ip = lb.ip.clone().expect("an active load balancer has an IP");
    assert_eq!(status.ingress.len(), 1);
    let ingress = &status.ingress[0];
    assert_eq!(ingress.ip.as_deref(), Some(ip.as_str()));
    assert_eq!(ingress.hostname, None);
    assert_eq!(ingress.ip_mode, Some(IpMode::VIP));
    assert_eq!(
        ingress.ports,
        vec![
            PortStatus {
                port: 80,
                protocol: Protocol::Tcp,
                error: None
            },
            PortStatus {
                port: 53,
                protocol: Protocol::Udp,
                error: None
            },
        ]
    );
    assert_eq!(
        p.get_load_balancer(CLUSTER, &svc).await.unwrap(),
        Some(status.clone())
    );
    // Another cluster's view does not see this cluster's load balancer.
    assert_eq!(
        p.get_load_balancer("other-cluster", &svc).await.unwrap(),
        None
    );

    // Ensure is idempotent: nothing changed, so nothing is written.
    cloud.sim.state().clear_requests();
    assert_eq!(
        p.ensure_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
            .await
            .unwrap(),
        status
    );
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
    assert_eq!(cloud.sim.state().load_balancers().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_load_balancer_changes_only_the_targets() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let i3 = add_instance(&cloud, "node-3", 13);
    let p = simcloud(&cloud).await;
    let svc = web_service();
    let status = ensure_active(&p, &svc, &[node_of(&i1), node_of(&i2)]).await;
    let before = cloud.sim.state().load_balancers().remove(0);

    cloud.sim.state().clear_requests();
    p.update_load_balancer(CLUSTER, &svc, &Arc::from([node_of(&i2), node_of(&i3)]))
        .await
        .unwrap();
    let after = cloud.sim.state().load_balancers().remove(0);
    assert_eq!(after.targets, vec![i2.id.clone(), i3.id.clone()]);
    assert_eq!(after.listeners, before.listeners);
    assert_eq!(after.source_ranges, before.source_ranges);
    assert_eq!(after.ip, before.ip);
    assert_eq!(after.status, LoadBalancerStatus::Active);
    assert_eq!(
        writes(&cloud),
        vec![format!("PUT /v1/load-balancers/{}/targets", before.id)]
    );

    // The same nodes in another order: nothing to do.
    cloud.sim.state().clear_requests();
    p.update_load_balancer(CLUSTER, &svc, &Arc::from([node_of(&i3), node_of(&i2)]))
        .await
        .unwrap();
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
    assert_eq!(
        p.get_load_balancer(CLUSTER, &svc).await.unwrap(),
        Some(status)
    );
}

#[tokio::test]
async fn a_load_balancer_with_thousands_of_targets_is_created_and_updated() {
    // Request bodies of tens of KiB: the SDK once hung on bodies over two 4 KiB chunks.
    let cloud = Cloud::start().await;
    let nodes: Vec<Node> = (0..6000)
        .map(|i| {
            let instance = cloud.sim.state().add_instance(NewInstance {
                name: format!("node-{i}"),
                instance_type: "sim.small".into(),
                zone: "sim-central-1a".into(),
                private_ip: None,
                public_ip: None,
                public_ipv6: None,
                hostname: None,
            });
            node_of(&instance)
        })
        .collect();
    // One call slot: these calls weigh two and three (one more per MiB of node data in the
    // guest), more than all slots, and must still run, not wait forever.
    let one_slot = sandbox(SandboxConfig {
        max_concurrent_calls: 1,
        ..e2e::sandbox_config()
    });
    let p = load(
        &one_slot,
        guest_builds::SIMCLOUD,
        cloud.egress(),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("simcloud loads");
    let svc = web_service();
    ensure_active(&p, &svc, &nodes[..3000]).await;
    assert_eq!(cloud.sim.state().load_balancers()[0].targets.len(), 3000);
    p.update_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
        .await
        .unwrap();
    assert_eq!(cloud.sim.state().load_balancers()[0].targets.len(), 6000);
}

#[tokio::test]
async fn a_node_whose_instance_is_gone_is_left_out_not_failing_the_load_balancer() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let p = simcloud(&cloud).await;
    let svc = web_service();
    let nodes = [node_of(&i1), node_of(&i2)];
    ensure_active(&p, &svc, &nodes).await;

    // The instance is terminated; its Node lingers until the lifecycle controller acts.
    // A node added meanwhile makes a write necessary: the gone instance is left out of it.
    assert!(cloud.sim.state().delete_instance(&i2.id));
    let i3 = add_instance(&cloud, "node-3", 13);
    let nodes = [node_of(&i1), node_of(&i2), node_of(&i3)];
    p.update_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
        .await
        .unwrap();
    let lb = cloud.sim.state().load_balancers().remove(0);
    assert_eq!(lb.targets, vec![i1.id.clone(), i3.id.clone()]);

    // Ensuring with the same nodes finds nothing to change.
    cloud.sim.state().clear_requests();
    p.ensure_load_balancer(CLUSTER, &svc, &Arc::from(&nodes[..]))
        .await
        .unwrap();
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));

    // A new Service created while the stale Node exists gets only the live instances.
    let other = Service {
        name: "api".into(),
        uid: "0a1b2c3d-0000-4000-8000-000000000001".into(),
        ..web_service()
    };
    let provisioning = p
        .ensure_load_balancer(CLUSTER, &other, &Arc::from(&nodes[..]))
        .await
        .unwrap_err();
    assert!(provisioning.retry_after().is_some(), "{provisioning}");
    let created = cloud
        .sim
        .state()
        .load_balancers()
        .into_iter()
        .find(|l| l.service_uid == other.uid)
        .unwrap();
    assert_eq!(created.targets, vec![i1.id.clone(), i3.id.clone()]);
}

#[tokio::test]
async fn update_load_balancer_of_a_missing_load_balancer_is_not_found() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let error = p
        .update_load_balancer(CLUSTER, &web_service(), &Arc::from([node_of(&i1)]))
        .await
        .unwrap_err();
    assert!(error.is_not_found(), "{error}");
    assert!(cloud.sim.state().load_balancers().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_load_balancer_with_changed_ports_updates_it_in_place() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let nodes = [node_of(&i1)];
    let svc = web_service();
    let before = ensure_active(&p, &svc, &nodes).await;
    let lb = cloud.sim.state().load_balancers().remove(0);

    let changed = Service {
        ports: vec![
            port("http", Protocol::Tcp, 8080, Some(30080)),
            port("https", Protocol::Tcp, 443, Some(30443)),
        ],
        load_balancer_source_ranges: vec!["192.0.2.0/24".into(), "198.51.100.0/24".into()],
        ..svc.clone()
    };
    cloud.sim.state().clear_requests();
    let status = p
        .ensure_load_balancer(CLUSTER, &changed, &Arc::from(&nodes[..]))
        .await
        .unwrap();
    assert_eq!(
        writes(&cloud),
        vec![format!("PUT /v1/load-balancers/{}", lb.id)]
    );

    let lbs = cloud.sim.state().load_balancers();
    assert_eq!(lbs.len(), 1, "updated, not recreated");
    let updated = &lbs[0];
    assert_eq!(updated.id, lb.id);
    assert_eq!(
        updated.listeners,
        vec![
            listener(8080, SimProtocol::Tcp, 30080),
            listener(443, SimProtocol::Tcp, 30443)
        ]
    );
    assert_eq!(
        updated.source_ranges,
        vec!["192.0.2.0/24".to_string(), "198.51.100.0/24".to_string()]
    );
    assert_eq!(updated.targets, vec![i1.id.clone()]);
    assert_eq!(
        status.ingress[0].ip, before.ingress[0].ip,
        "the address survives an update"
    );
    assert_eq!(
        status.ingress[0].ports,
        vec![
            PortStatus {
                port: 8080,
                protocol: Protocol::Tcp,
                error: None
            },
            PortStatus {
                port: 443,
                protocol: Protocol::Tcp,
                error: None
            },
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_load_balancer_deleted_removes_it_and_is_ok_when_gone() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let svc = web_service();
    ensure_active(&p, &svc, &[node_of(&i1)]).await;
    let id = cloud.sim.state().load_balancers()[0].id.clone();

    cloud.sim.state().clear_requests();
    p.ensure_load_balancer_deleted(CLUSTER, &svc).await.unwrap();
    assert!(cloud.sim.state().load_balancers().is_empty());
    assert_eq!(
        writes(&cloud),
        vec![format!("DELETE /v1/load-balancers/{id}")]
    );
    assert_eq!(p.get_load_balancer(CLUSTER, &svc).await.unwrap(), None);

    // Again: already gone is success, and nothing is deleted.
    cloud.sim.state().clear_requests();
    p.ensure_load_balancer_deleted(CLUSTER, &svc).await.unwrap();
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
}

#[tokio::test]
async fn ensure_load_balancer_deleted_is_ok_after_an_out_of_band_delete() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let svc = web_service();
    let provisioning = p
        .ensure_load_balancer(CLUSTER, &svc, &Arc::from([node_of(&i1)]))
        .await
        .unwrap_err();
    assert!(provisioning.retry_after().is_some(), "{provisioning}");
    let id = cloud.sim.state().load_balancers()[0].id.clone();
    assert!(
        cloud.sim.state().delete_load_balancer(&id),
        "deleted in the console"
    );

    p.ensure_load_balancer_deleted(CLUSTER, &svc).await.unwrap();
    assert_eq!(p.get_load_balancer(CLUSTER, &svc).await.unwrap(), None);
    // Ensuring again recreates it.
    let again = p
        .ensure_load_balancer(CLUSTER, &svc, &Arc::from([node_of(&i1)]))
        .await
        .unwrap_err();
    assert!(again.retry_after().is_some(), "{again}");
    let lbs = cloud.sim.state().load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_ne!(lbs[0].id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_config_makes_the_ip_mode_proxy() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let config = serde_json::json!({ "api_url": cloud.sim.url(), "proxy_protocol": true });
    let p = simcloud_with(&cloud, config).await.unwrap();
    let svc = web_service();
    let status = ensure_active(&p, &svc, &[node_of(&i1)]).await;
    assert!(cloud.sim.state().load_balancers()[0].proxy_protocol);
    assert_eq!(status.ingress[0].ip_mode, Some(IpMode::Proxy));
    assert!(status.ingress[0].ip.is_some());
}

#[tokio::test]
async fn a_service_port_without_a_node_port_is_an_error_naming_the_port() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let p = simcloud(&cloud).await;
    let svc = Service {
        ports: vec![
            port("http", Protocol::Tcp, 80, Some(30080)),
            port("metrics", Protocol::Tcp, 9100, None),
        ],
        ..web_service()
    };
    let error = p
        .ensure_load_balancer(CLUSTER, &svc, &Arc::from([node_of(&i1)]))
        .await
        .unwrap_err();
    assert_plain_error(&error);
    let message = error.to_string();
    assert!(
        message.contains("metrics") && message.contains("9100"),
        "{message}"
    );
    assert!(message.contains("node port"), "{message}");
    assert!(cloud.sim.state().load_balancers().is_empty());
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
}

// ---- routes ---------------------------------------------------------------------------------

fn route_to(node: &str, cidr: &str) -> Route {
    Route {
        target_node: node.into(),
        destination_cidr: cidr.into(),
        ..Route::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_are_created_listed_blackholed_and_deleted() {
    let cloud = Cloud::start().await;
    let i1 = add_instance(&cloud, "node-1", 11);
    let i2 = add_instance(&cloud, "node-2", 12);
    let p = simcloud(&cloud).await;
    assert!(p.list_routes(CLUSTER).await.unwrap().is_empty());

    // node-1 is dual-stack: two CIDRs under one name hint.
    p.create_route(CLUSTER, "uid-node-1", &route_to("node-1", "10.244.1.0/24"))
        .await
        .unwrap();
    p.create_route(
        CLUSTER,
        "uid-node-1",
        &route_to("node-1", "fd00:10:244:1::/64"),
    )
    .await
    .unwrap();
    p.create_route(CLUSTER, "uid-node-2", &route_to("node-2", "10.244.2.0/24"))
        .await
        .unwrap();

    let sim_routes = cloud.sim.state().routes();
    assert_eq!(sim_routes.len(), 3);
    let names: Vec<&str> = sim_routes.iter().map(|r| r.name.as_str()).collect();
    assert_ne!(
        names[0], names[1],
        "the two CIDRs of one node get distinct names"
    );
    assert!(
        names.iter().all(|n| n.starts_with("kubernetes-uid-node-")),
        "{names:?}"
    );
    let targets: Vec<&str> = sim_routes
        .iter()
        .map(|r| r.target_instance.as_str())
        .collect();
    assert_eq!(
        targets,
        vec![i1.id.as_str(), i1.id.as_str(), i2.id.as_str()]
    );
    assert!(sim_routes.iter().all(|r| r.cluster == CLUSTER));

    let listed = p.list_routes(CLUSTER).await.unwrap();
    let view: Vec<(&str, &str, bool)> = listed
        .iter()
        .map(|r| {
            (
                r.target_node.as_str(),
                r.destination_cidr.as_str(),
                r.blackhole,
            )
        })
        .collect();
    assert_eq!(
        view,
        vec![
            ("node-1", "10.244.1.0/24", false),
            ("node-1", "fd00:10:244:1::/64", false),
            ("node-2", "10.244.2.0/24", false),
        ]
    );
    for (route, sim) in listed.iter().zip(&sim_routes) {
        assert_eq!(
            route.name, sim.id,
            "list-routes names routes by their cloud id"
        );
    }
    assert!(p.list_routes("other-cluster").await.unwrap().is_empty());

    // node-2's instance is terminated: its route goes nowhere.
    cloud.sim.state().delete_instance(&i2.id);
    let listed = p.list_routes(CLUSTER).await.unwrap();
    let dead = listed
        .iter()
        .find(|r| r.destination_cidr == "10.244.2.0/24")
        .unwrap();
    assert!(dead.blackhole, "{dead:?}");
    assert!(
        listed.iter().filter(|r| r.blackhole).count() == 1,
        "{listed:?}"
    );

    p.delete_route(CLUSTER, dead).await.unwrap();
    let remaining: Vec<String> = cloud
        .sim
        .state()
        .routes()
        .into_iter()
        .map(|r| r.destination_cidr)
        .collect();
    assert_eq!(
        remaining,
        vec![
            "10.244.1.0/24".to_string(),
            "fd00:10:244:1::/64".to_string()
        ]
    );
    assert_eq!(p.list_routes(CLUSTER).await.unwrap().len(), 2);

    // Deleting it again, or a route the cloud never had, succeeds without a DELETE.
    cloud.sim.state().clear_requests();
    p.delete_route(CLUSTER, dead).await.unwrap();
    let never = Route {
        name: "r-00000000".into(),
        ..route_to("node-9", "10.244.9.0/24")
    };
    p.delete_route(CLUSTER, &never).await.unwrap();
    assert!(writes(&cloud).is_empty(), "{:?}", writes(&cloud));
    assert_eq!(cloud.sim.state().routes().len(), 2);
}

#[tokio::test]
async fn create_route_is_idempotent_and_refuses_unknown_nodes() {
    let cloud = Cloud::start().await;
    add_instance(&cloud, "node-1", 11);
    add_instance(&cloud, "node-2", 12);
    let p = simcloud(&cloud).await;
    let route = route_to("node-1", "10.244.1.0/24");
    p.create_route(CLUSTER, "uid-node-1", &route).await.unwrap();
    p.create_route(CLUSTER, "uid-node-1", &route).await.unwrap();
    assert_eq!(
        cloud.sim.state().routes().len(),
        1,
        "the second create is a no-op"
    );

    // The same CIDR to another node is a conflict, not silently accepted.
    let stolen = p
        .create_route(CLUSTER, "uid-node-2", &route_to("node-2", "10.244.1.0/24"))
        .await
        .unwrap_err();
    assert_plain_error(&stolen);
    assert!(stolen.to_string().contains("10.244.1.0/24"), "{stolen}");

    let ghost = p
        .create_route(CLUSTER, "uid-ghost", &route_to("ghost", "10.244.3.0/24"))
        .await
        .unwrap_err();
    assert!(ghost.is_not_found(), "{ghost}");
    assert_eq!(cloud.sim.state().routes().len(), 1);
}

// ---- concurrency ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_metadata_calls_on_one_provider_all_succeed() {
    let cloud = Cloud::start().await;
    let instances: Vec<Instance> = (0..5u8)
        .map(|i| add_instance(&cloud, &format!("node-{i}"), 20 + i))
        .collect();
    let p = simcloud(&cloud).await;

    let mut calls = tokio::task::JoinSet::new();
    for call in 0..50 {
        let p = p.clone();
        let instance = instances[call % instances.len()].clone();
        calls.spawn(async move {
            // Half by name, half by provider ID.
            let node = if call % 2 == 0 {
                node_named(&instance.name)
            } else {
                node_of(&instance)
            };
            (instance, p.instance_metadata(&node).await)
        });
    }
    let mut ok = 0;
    while let Some(joined) = calls.join_next().await {
        let (instance, result) = joined.expect("task did not panic");
        let md = result.unwrap_or_else(|e| panic!("{}: {e}", instance.name));
        assert_eq!(md.provider_id, format!("simcloud://{}", instance.id));
        assert_eq!(md.node_addresses[0].address, instance.private_ip);
        ok += 1;
    }
    assert_eq!(ok, 50);
    assert!(
        cloud
            .sim
            .state()
            .requests()
            .iter()
            .all(|r| r.status == 200 && r.authorized)
    );
}

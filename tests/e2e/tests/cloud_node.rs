//! cloud-node controller end to end: the manager running simcloud initialises nodes in the
//! Kubernetes API emulator from instances in the cloud simulator.
//!
//! Initialisation (providerID, labels, addresses, `Synced`), an instance that appears late,
//! 409 conflicts on node updates, `provided-node-ip`, a dropped watch, addresses following the
//! cloud on the periodic sync; each controller calling as its own client. With event writes
//! hanging, 50 nodes are initialised before any event is written, one event write is in
//! flight, and the events a queue of 4 could not hold are counted in
//! `wasm_ccm_events_dropped_total`. With 600 nodes (more than a page) and another replica
//! holding the Lease, the standby's informers make one `LIST` and one `WATCH` each of nodes
//! and services and no controller runs; once the Lease is released it leads, initialises a
//! new node, and nothing lists again.

use std::time::Duration;

use e2e::testbed::{NOT_READY, Testbed, eventually, is_uninitialized};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_emulator::DelayRule;
use wasm_ccm::controllers::ControllerSelection;

const WAIT: Duration = Duration::from_secs(20);

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn addresses(node: &Node) -> Vec<(String, String)> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|list| {
            list.iter()
                .map(|a| (a.type_.clone(), a.address.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn initialised(bed: &Testbed, name: &str) -> Node {
    eventually(&format!("node {name} initialised"), WAIT, || async {
        bed.node(name).await.filter(|node| !is_uninitialized(node))
    })
    .await
}

fn only(controllers: &str, bed: &Testbed) -> wasm_ccm::manager::ManagerConfig {
    let mut config = bed.config();
    config.controllers = controllers.parse::<ControllerSelection>().unwrap();
    config
}

#[tokio::test]
async fn uninitialised_node_gets_provider_id_labels_and_addresses_and_loses_the_taint() {
    let bed = Testbed::start().await;
    let id = bed.add_node("worker-1", "sim-central-1a").await;
    let manager = bed.run(only("cloud-node", &bed));

    let node = initialised(&bed, "worker-1").await;
    let spec = node.spec.as_ref().unwrap();
    let taints: Vec<(&str, &str)> = spec
        .taints
        .iter()
        .flatten()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        [(NOT_READY, "NoSchedule")],
        "only the cloud taint goes; the API server's not-ready taint is a kube-controller-manager's to remove"
    );
    assert_eq!(
        spec.provider_id.as_deref(),
        Some(format!("simcloud://{id}").as_str())
    );
    assert_eq!(
        label(&node, "node.kubernetes.io/instance-type"),
        Some("sim.small")
    );
    assert_eq!(
        label(&node, "beta.kubernetes.io/instance-type"),
        Some("sim.small")
    );
    assert_eq!(
        label(&node, "topology.kubernetes.io/zone"),
        Some("sim-central-1a")
    );
    assert_eq!(
        label(&node, "failure-domain.beta.kubernetes.io/zone"),
        Some("sim-central-1a")
    );
    assert_eq!(
        label(&node, "topology.kubernetes.io/region"),
        Some("sim-central-1")
    );
    assert_eq!(
        label(&node, "failure-domain.beta.kubernetes.io/region"),
        Some("sim-central-1")
    );
    let instance = bed
        .cloud
        .sim
        .state()
        .instances()
        .into_iter()
        .find(|i| i.id == id)
        .unwrap();
    let node = eventually("addresses", WAIT, || async {
        bed.node("worker-1")
            .await
            .filter(|n| !addresses(n).is_empty())
    })
    .await;
    let addresses = addresses(&node);
    assert!(
        addresses.contains(&("InternalIP".into(), instance.private_ip.clone())),
        "{addresses:?}"
    );
    assert!(
        addresses.iter().any(|(kind, _)| kind == "Hostname"),
        "{addresses:?}"
    );
    assert!(
        addresses
            .iter()
            .all(|(kind, address)| !kind.is_empty() && !address.is_empty()),
        "{addresses:?}"
    );
    let reasons = eventually("Synced event", WAIT, || async {
        let reasons = bed.event_reasons("worker-1").await;
        reasons.contains(&"Synced".to_string()).then_some(reasons)
    })
    .await;
    assert_eq!(reasons, ["Synced"]);
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn node_without_an_instance_stays_tainted_until_the_instance_appears() {
    let bed = Testbed::start().await;
    bed.create_node(&Testbed::kubelet_node("late-1")).await;
    let manager = bed.run(only("cloud-node", &bed));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let node = bed.node("late-1").await.unwrap();
    assert!(is_uninitialized(&node), "no instance, no initialisation");
    assert!(node.spec.as_ref().unwrap().provider_id.is_none());

    bed.add_instance("late-1", "sim-central-1b");
    let node = initialised(&bed, "late-1").await;
    assert_eq!(
        label(&node, "topology.kubernetes.io/zone"),
        Some("sim-central-1b")
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn conflicting_node_updates_are_retried() {
    let bed = Testbed::start().await;
    bed.add_node("busy-1", "sim-central-1a").await;
    bed.emulator.faults().conflict_next_updates("nodes", 3);
    let manager = bed.run(only("cloud-node", &bed));
    let node = initialised(&bed, "busy-1").await;
    assert!(node.spec.unwrap().provider_id.is_some());
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn provided_node_ip_the_cloud_does_not_know_keeps_the_node_tainted() {
    let bed = Testbed::start().await;
    bed.add_instance("ip-1", "sim-central-1a");
    let mut node = Testbed::kubelet_node("ip-1");
    node.metadata.annotations = Some(
        [(
            "alpha.kubernetes.io/provided-node-ip".to_string(),
            "192.0.2.99".to_string(),
        )]
        .into(),
    );
    bed.create_node(&node).await;
    let manager = bed.run(only("cloud-node", &bed));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(is_uninitialized(&bed.node("ip-1").await.unwrap()));

    // The kubelet corrects its IP to one the cloud has: the node is initialised.
    let private_ip = bed.cloud.sim.state().instances()[0].private_ip.clone();
    let patch = serde_json::json!({"metadata": {"annotations": {"alpha.kubernetes.io/provided-node-ip": private_ip}}});
    Api::<Node>::all(bed.client.clone())
        .patch("ip-1", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    initialised(&bed, "ip-1").await;
    let node = eventually("addresses", WAIT, || async {
        bed.node("ip-1").await.filter(|n| !addresses(n).is_empty())
    })
    .await;
    assert_eq!(
        addresses(&node)[0],
        ("InternalIP".to_string(), private_ip),
        "the provided IP leads"
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn nodes_added_after_a_dropped_watch_are_still_initialised() {
    let bed = Testbed::start().await;
    bed.add_node("before-1", "sim-central-1a").await;
    let manager = bed.run(only("cloud-node", &bed));
    initialised(&bed, "before-1").await;
    bed.emulator.faults().drop_watches();
    bed.add_node("after-1", "sim-central-1a").await;
    initialised(&bed, "after-1").await;
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn addresses_follow_the_cloud_on_the_periodic_sync() {
    let bed = Testbed::start().await;
    let id = bed.add_node("moving-1", "sim-central-1a").await;
    let mut config = only("cloud-node", &bed);
    config.settings.node_status_update_frequency = Duration::from_millis(300);
    let manager = bed.run(config);
    initialised(&bed, "moving-1").await;
    let external = |node: &Node| {
        addresses(node)
            .into_iter()
            .find(|(kind, _)| kind == "ExternalIP")
            .map(|(_, address)| address)
    };

    assert!(
        bed.cloud
            .sim
            .state()
            .set_public_ip(&id, Some("203.0.113.77".into()))
    );
    eventually("the new external IP on the node", WAIT, || async {
        bed.node("moving-1")
            .await
            .filter(|n| external(n).as_deref() == Some("203.0.113.77"))
    })
    .await;
    assert!(bed.cloud.sim.state().set_public_ip(&id, None));
    let node = eventually("the external IP gone from the node", WAIT, || async {
        bed.node("moving-1").await.filter(|n| external(n).is_none())
    })
    .await;
    assert!(
        addresses(&node)
            .iter()
            .any(|(kind, _)| kind == "InternalIP")
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn each_controller_calls_the_api_server_as_its_own_client() {
    // Upstream gives every controller, the shared informers, leader election and the
    // event recorder a client of its own; the user agent names it, so the API server's
    // audit log (here, the emulator's request counts) tells them apart.
    let bed = Testbed::start().await;
    bed.add_instance("worker-1", "sim-central-1a");
    let mut node = Testbed::kubelet_node("worker-1");
    node.spec.get_or_insert_default().pod_cidr = Some("10.244.1.0/24".into());
    bed.create_node(&node).await;
    bed.services()
        .create(&Default::default(), &Testbed::lb_service("web"))
        .await
        .expect("create service");
    let mut config = bed.config();
    config.leader_election = Some(wasm_ccm::leader::LeaseSettings {
        identity: "agents-test".into(),
        ..Default::default()
    });
    let manager = bed.run(config);

    initialised(&bed, "worker-1").await;
    let counts = bed
        .requests_seen(
            "requests from every client",
            WAIT,
            &[
                ("shared-informers", "watch", "nodes"),
                ("shared-informers", "watch", "services"),
                ("leader-election", "create", "leases.coordination.k8s.io"),
                ("cloud-node-controller", "update", "nodes"),
                ("service-controller", "patch", "services/status"),
                ("route-controller", "patch", "nodes/status"),
                ("event-recorder", "create", "events.events.k8s.io"),
            ],
        )
        .await;
    let agents: Vec<&String> = counts.by_user_agent.keys().collect();
    let version = env!("CARGO_PKG_VERSION");
    let os = std::env::consts::OS;
    for client in [
        "cloud-node-controller",
        "service-controller",
        "shared-informers",
    ] {
        assert!(
            agents.iter().any(
                |agent| agent.starts_with(&format!("wasm-ccm/{version} ({os}/"))
                    && agent.ends_with(&format!(") {client}"))
            ),
            "a user agent wasm-ccm/<version> (<os>/<arch>) {client} in {agents:?}"
        );
    }
    assert_eq!(
        counts.client("node-controller").total(),
        0,
        "the lifecycle controller is not running, so its client made no request: {agents:?}"
    );
    assert_eq!(
        counts.client("cloud-node-controller").get("list", "nodes")
            + counts.client("service-controller").get("watch", "services"),
        0,
        "controllers read through the shared informers, not their own clients"
    );
    manager.stop().await.unwrap();
}

/// client-go's shared informer factory: one LIST and one WATCH of each resource for the
/// whole manager, whichever controllers run, the LIST answered from the watch cache in one
/// response (600 nodes are more than a page of 500). They start before the Lease is held, so
/// a standby's caches are full before it leads, and the new leader lists nothing again.
#[tokio::test]
async fn one_list_and_one_watch_per_resource_filled_on_a_standby_and_kept_when_it_leads() {
    const NODES: usize = 600;
    let bed = Testbed::start().await;
    for i in 0..NODES {
        let name = format!("ready-{i}");
        bed.add_instance(&name, "sim-central-1a");
        let mut node = Testbed::kubelet_node(&name);
        node.spec.get_or_insert_default().taints = None;
        bed.create_node(&node).await;
    }
    let leases: Api<Lease> = Api::namespaced(bed.client.clone(), "kube-system");
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let held = Lease {
        metadata: ObjectMeta {
            name: Some("cloud-controller-manager".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("another-replica".into()),
            lease_duration_seconds: Some(60),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..Default::default()
        }),
    };
    leases
        .create(&Default::default(), &held)
        .await
        .expect("create lease");
    let mut config = bed.config();
    config.leader_election = Some(wasm_ccm::leader::LeaseSettings {
        identity: "standby-test".into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
        ..Default::default()
    });
    let manager = bed.run(config);

    let standby = bed
        .requests_seen(
            "the standby's informers watching",
            WAIT,
            &[
                ("shared-informers", "watch", "nodes"),
                ("shared-informers", "watch", "services"),
            ],
        )
        .await;
    let lease = leases.get("cloud-controller-manager").await.unwrap();
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("another-replica"),
        "still a standby"
    );
    for client in [
        "cloud-node-controller",
        "node-controller",
        "service-controller",
        "route-controller",
    ] {
        assert_eq!(
            standby.client(client).total(),
            0,
            "{client} runs on a standby"
        );
    }

    // The other replica steps down: its lease released, as a clean shutdown does.
    let mut released = leases.get("cloud-controller-manager").await.unwrap();
    released.spec.get_or_insert_default().holder_identity = None;
    leases
        .replace("cloud-controller-manager", &Default::default(), &released)
        .await
        .expect("release the lease");
    bed.add_node("fresh-1", "sim-central-1a").await;
    initialised(&bed, "fresh-1").await;

    let counts = bed.emulator.requests();
    let informers = counts.client("shared-informers");
    for resource in ["nodes", "services"] {
        assert_eq!(
            (
                informers.get("list", resource),
                informers.get("watch", resource)
            ),
            (1, 1),
            "one list and one watch of {resource}: {:?}",
            counts.by_user_agent
        );
        let elsewhere: u64 = ["list", "watch"]
            .iter()
            .map(|verb| counts.get(verb, resource))
            .sum::<u64>()
            - 2;
        assert_eq!(elsewhere, 0, "{resource} read only through the informers");
    }
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn nodes_are_initialised_while_event_writes_hang_and_a_full_queue_drops_events() {
    // Every event write hangs for a minute. Nodes' state must not wait behind an event: all
    // are initialised while the first event write is still held. With a queue of 4, the
    // events that find it full are dropped and counted in /metrics, as client-go's
    // broadcaster drops them.
    const NODES: u64 = 50;
    const QUEUE: u64 = 4;
    let bed = Testbed::start().await;
    bed.emulator.faults().delay(
        DelayRule::new(Duration::from_secs(60))
            .method("POST")
            .path_contains("/events"),
    );
    for i in 0..NODES {
        bed.add_node(&format!("worker-{i}"), "sim-central-1a").await;
    }
    let mut config = only("cloud-node", &bed);
    config.settings.event_queue_length = QUEUE as usize;
    let port = e2e::https::free_port();
    config.serving.port = port;
    let manager = bed.run(config);

    for i in 0..NODES {
        initialised(&bed, &format!("worker-{i}")).await;
    }
    let counts = bed
        .requests_seen(
            "an event write held by the emulator",
            WAIT,
            &[("event-recorder", "create", "events.events.k8s.io")],
        )
        .await;
    assert_eq!(
        counts
            .client("event-recorder")
            .get("create", "events.events.k8s.io"),
        1,
        "one event write at a time per controller: the first still hangs"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(bed.client.clone());
    let written = events.list(&Default::default()).await.expect("list events");
    assert!(
        written.items.is_empty(),
        "every node was initialised before any event was written: {:?}",
        written.items
    );

    let addr = ([127, 0, 0, 1], port).into();
    let dropped = eventually(
        "wasm_ccm_events_dropped_total in /metrics",
        WAIT,
        || async {
            let (_, metrics) = e2e::https::get_with_token(addr, "/metrics", bed.emulator.token())
                .await
                .ok()?;
            metrics
                .lines()
                .find_map(|line| {
                    line.strip_prefix(
                        "wasm_ccm_events_dropped_total{component=\"cloud-node-controller\"} ",
                    )
                })?
                .parse::<u64>()
                .ok()
                .filter(|&dropped| dropped >= NODES - QUEUE - 1)
        },
    )
    .await;
    assert!(
        dropped <= NODES - QUEUE,
        "{dropped} dropped: one Synced event per node, {QUEUE} queued, at most one being written"
    );
    manager.stop().await.unwrap();
}

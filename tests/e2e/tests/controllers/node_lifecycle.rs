//! cloud-node-lifecycle and route controllers end to end: nodes whose instance is gone are
//! deleted, never on cloud 500s; a provider that traps leaves the node tainted and the
//! manager running; the shutdown taint goes on and off;
//! a busy lifecycle controller does not delay another controller's writes; routes follow pod
//! CIDRs, stale and blackholed routes are removed, with `FailedToCreateRoute` and
//! `NetworkUnavailable`.

use std::time::{Duration, Instant};

use cloud_sim::{Faults, InstanceStatus};
use e2e::testbed::{NOT_READY, RunningManager, Testbed, eventually, has_taint, is_uninitialized};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use wasm_ccm::controllers::ControllerSelection;

const WAIT: Duration = Duration::from_secs(20);
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

async fn start(bed: &Testbed, controllers: &str, nodes: &[&str]) -> (RunningManager, Vec<String>) {
    let mut ids = Vec::new();
    for name in nodes {
        ids.push(bed.add_node(name, "sim-central-1a").await);
    }
    let mut config = bed.config();
    config.controllers = controllers.parse::<ControllerSelection>().unwrap();
    let manager = bed.run(config);
    for name in nodes {
        eventually(&format!("{name} initialised"), WAIT, || async {
            bed.node(name).await.filter(|n| !is_uninitialized(n))
        })
        .await;
    }
    (manager, ids)
}

/// Report the node Ready or not, as its kubelet (or the node-lifecycle controller) would.
async fn set_ready(bed: &Testbed, name: &str, ready: bool) {
    let status = if ready { "True" } else { "Unknown" };
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "Test",
        "lastHeartbeatTime": "2026-11-21T00:00:00Z", "lastTransitionTime": "2026-11-21T00:00:00Z"
    }]}});
    Api::<Node>::all(bed.client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("set Ready");
}

#[tokio::test]
async fn not_ready_node_whose_instance_is_gone_is_deleted_with_an_event() {
    let bed = Testbed::start().await;
    let (manager, ids) = start(
        &bed,
        "cloud-node,cloud-node-lifecycle",
        &["gone-1", "kept-1"],
    )
    .await;
    assert!(bed.cloud.sim.state().delete_instance(&ids[0]));
    set_ready(&bed, "gone-1", false).await;
    set_ready(&bed, "kept-1", false).await;
    eventually("gone-1 deleted", WAIT, || async {
        bed.node("gone-1").await.is_none().then_some(())
    })
    .await;
    let reasons = eventually("DeletingNode event", WAIT, || async {
        let reasons = bed.event_reasons("gone-1").await;
        reasons.contains(&"DeletingNode".into()).then_some(reasons)
    })
    .await;
    assert!(!reasons.contains(&"DeletingNodeFailed".to_string()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        bed.node("kept-1").await.is_some(),
        "a node whose instance exists stays"
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn provider_errors_never_delete_a_node() {
    let bed = Testbed::start().await;
    let (manager, ids) = start(&bed, "cloud-node,cloud-node-lifecycle", &["doomed-1"]).await;
    bed.cloud.sim.state().set_faults(Faults {
        error_rate: 1.0,
        ..Faults::default()
    });
    assert!(bed.cloud.sim.state().delete_instance(&ids[0]));
    set_ready(&bed, "doomed-1", false).await;
    // Several monitor periods of 500s from the cloud: the node stays.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        bed.node("doomed-1").await.is_some(),
        "deleted on a provider error"
    );
    // Once the cloud answers, the definite absence deletes it (so the test above could fail).
    bed.cloud.sim.state().set_faults(Faults::default());
    eventually("doomed-1 deleted", WAIT, || async {
        bed.node("doomed-1").await.is_none().then_some(())
    })
    .await;
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn shut_down_instance_taints_the_node_until_it_is_ready_again() {
    let bed = Testbed::start().await;
    let (manager, ids) = start(&bed, "cloud-node,cloud-node-lifecycle", &["sleepy-1"]).await;
    bed.cloud
        .sim
        .state()
        .set_instance_status(&ids[0], InstanceStatus::Stopped);
    set_ready(&bed, "sleepy-1", false).await;
    let node = eventually("shutdown taint", WAIT, || async {
        bed.node("sleepy-1")
            .await
            .filter(|n| has_taint(n, SHUTDOWN))
    })
    .await;
    assert!(
        has_taint(&node, NOT_READY),
        "the whole taint list is patched: the API server's not-ready taint stays"
    );
    bed.cloud
        .sim
        .state()
        .set_instance_status(&ids[0], InstanceStatus::Running);
    set_ready(&bed, "sleepy-1", true).await;
    let node = eventually("shutdown taint removed", WAIT, || async {
        bed.node("sleepy-1")
            .await
            .filter(|n| !has_taint(n, SHUTDOWN))
    })
    .await;
    assert!(has_taint(&node, NOT_READY), "only the shutdown taint goes");
    assert!(node.spec.unwrap().provider_id.is_some());
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn a_provider_that_traps_leaves_the_node_tainted_and_the_manager_running() {
    let bed = Testbed::start().await;
    bed.create_node(&Testbed::kubelet_node("trap")).await;
    let mut config = bed.config();
    config.provider = bed.provider(guest_builds::HOSTILE, "hostile");
    config.controllers = "cloud-node,cloud-node-lifecycle"
        .parse::<ControllerSelection>()
        .unwrap();
    let manager = bed.run(config);
    set_ready(&bed, "trap", false).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let node = bed.node("trap").await.expect("never deleted");
    assert!(is_uninitialized(&node), "a trap initialises nothing");
    manager.stop().await.expect("the manager ran until stopped");
}

fn condition(node: &Node, kind: &str) -> Option<(String, Option<String>)> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_busy_lifecycle_controller_does_not_delay_another_controllers_writes() {
    // After a mass instance loss the lifecycle controller has many nodes to delete; at
    // 1 QPS and a burst of 2 these take it ten seconds and more. Each controller has its
    // own budget, so a node registering meanwhile is initialised by the cloud-node
    // controller at once instead of queueing behind the deletions.
    const QPS: f64 = 1.0;
    const BURST: u32 = 2;
    const LOST: u64 = 12;
    let bed = Testbed::start().await;
    for i in 0..LOST {
        let mut node = Testbed::kubelet_node(&format!("lost-{i}"));
        let spec = node.spec.get_or_insert_default();
        spec.taints = None;
        spec.provider_id = Some(format!("simcloud://i-lost-{i}"));
        for condition in node
            .status
            .iter_mut()
            .flat_map(|s| s.conditions.iter_mut().flatten())
        {
            condition.status = "Unknown".into();
        }
        bed.create_node(&node).await;
    }
    let mut config = bed.config();
    config.controllers = "cloud-node,cloud-node-lifecycle"
        .parse::<ControllerSelection>()
        .unwrap();
    config.cluster.qps = QPS;
    config.cluster.burst = BURST;
    let started = Instant::now();
    let manager = bed.run(config);
    // The informers' own budget lets their two lists go at once and their two watches a
    // second apart; the new node is registered once both watch and deletions are under way.
    eventually(
        "the informers watching, the lifecycle controller deleting",
        WAIT,
        || async {
            let counts = bed.emulator.requests();
            let informers = counts.client("shared-informers");
            let watching =
                informers.get("watch", "nodes") > 0 && informers.get("watch", "services") > 0;
            let deleted = counts.client("node-controller").get("delete", "nodes");
            (watching && deleted >= 2).then_some(())
        },
    )
    .await;

    bed.add_node("fresh-1", "sim-central-1a").await;
    let registered = Instant::now();
    eventually("fresh-1 initialised", WAIT, || async {
        bed.node("fresh-1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    let took = registered.elapsed();
    let elapsed = started.elapsed().as_secs_f64();

    let counts = bed.emulator.requests();
    let deleted = counts.client("node-controller").get("delete", "nodes");
    assert!(
        deleted < LOST,
        "the lifecycle controller is still busy ({deleted} of {LOST} deleted)"
    );
    assert!(
        deleted as f64 <= f64::from(BURST) + QPS * elapsed + 1.0,
        "the lifecycle controller is held to its own budget: {deleted} deletions in {elapsed:.1}s"
    );
    assert!(
        counts
            .client("cloud-node-controller")
            .get("update", "nodes")
            >= 1,
        "{:?}",
        counts.by_user_agent
    );
    assert!(
        took < Duration::from_secs(1),
        "initialised {took:?} after registering; one request of its own budget needs no wait, \
         while the lifecycle controller's next deletion waits a second for its token: {:#?}",
        counts.by_user_agent
    );
    manager.stop().await.unwrap();
}

/// Assign the node its pod CIDR as node IPAM does, with both fields; `podCIDR` alone
/// when `only_pod_cidr`, as older allocators do (the API server fills `podCIDRs`).
async fn set_pod_cidr(bed: &Testbed, name: &str, cidr: &str, only_pod_cidr: bool) {
    let patch = if only_pod_cidr {
        serde_json::json!({"spec": {"podCIDR": cidr}})
    } else {
        serde_json::json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
    };
    Api::<Node>::all(bed.client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("set pod CIDR");
}

#[tokio::test]
async fn routes_follow_pod_cidrs_and_stale_routes_are_removed() {
    let bed = Testbed::start().await;
    let (manager, _) = start(&bed, "cloud-node,route", &["r-1", "r-2"]).await;
    set_pod_cidr(&bed, "r-1", "10.244.1.0/24", false).await;
    // r-2 gets podCIDR alone: the API server fills podCIDRs, which routes follow.
    set_pod_cidr(&bed, "r-2", "10.244.2.0/24", true).await;
    eventually("two routes", WAIT, || async {
        (bed.cloud.sim.state().routes().len() == 2).then_some(())
    })
    .await;
    let node = eventually("NetworkUnavailable False", WAIT, || async {
        bed.node("r-1").await.filter(|n| {
            condition(n, "NetworkUnavailable")
                == Some(("False".into(), Some("RouteCreated".into())))
        })
    })
    .await;
    assert!(node.spec.unwrap().pod_cidrs.is_some());

    // The node goes away: its route is stale and is removed; the other stays.
    Api::<Node>::all(bed.client.clone())
        .delete("r-2", &Default::default())
        .await
        .unwrap();
    let routes = eventually("stale route removed", WAIT, || async {
        let routes = bed.cloud.sim.state().routes();
        (routes.len() == 1).then_some(routes)
    })
    .await;
    assert_eq!(routes[0].destination_cidr, "10.244.1.0/24");
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn a_blackholed_route_is_removed_and_its_node_reported_without_network() {
    let bed = Testbed::start().await;
    let (manager, ids) = start(&bed, "cloud-node,route", &["ok-1", "lost-1"]).await;
    set_pod_cidr(&bed, "ok-1", "10.244.1.0/24", false).await;
    set_pod_cidr(&bed, "lost-1", "10.244.2.0/24", false).await;
    eventually("two routes", WAIT, || async {
        (bed.cloud.sim.state().routes().len() == 2).then_some(())
    })
    .await;

    // The instance behind lost-1 is terminated: its route becomes a blackhole. The
    // controller removes it, cannot create it again, and says so on the node.
    assert!(bed.cloud.sim.state().delete_instance(&ids[1]));
    let routes = eventually("the blackholed route removed", WAIT, || async {
        let routes = bed.cloud.sim.state().routes();
        (routes.len() == 1).then_some(routes)
    })
    .await;
    assert_eq!(routes[0].destination_cidr, "10.244.1.0/24");
    eventually("NetworkUnavailable True on lost-1", WAIT, || async {
        bed.node("lost-1").await.filter(|n| {
            condition(n, "NetworkUnavailable")
                == Some(("True".into(), Some("NoRouteCreated".into())))
        })
    })
    .await;
    let reasons = eventually("FailedToCreateRoute event", WAIT, || async {
        let reasons = bed.event_reasons("lost-1").await;
        reasons
            .contains(&"FailedToCreateRoute".into())
            .then_some(reasons)
    })
    .await;
    assert!(!reasons.is_empty());
    let ok = bed.node("ok-1").await.unwrap();
    assert_eq!(
        condition(&ok, "NetworkUnavailable"),
        Some(("False".into(), Some("RouteCreated".into())))
    );
    manager.stop().await.unwrap();
}

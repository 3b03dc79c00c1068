//! Several providers in one manager (`--provider-resource cloud,edge`): two cloud
//! simulators, each with its own token, served by simcloud under two names (`simcloud` and,
//! by its cloud config, `edgecloud`); nodes go to a provider by providerID scheme or node
//! selector, load balancers by class; each is swapped, rolled back and cut off on its own.

use std::collections::BTreeMap;
use std::time::Duration;

use cloud_sim::{Faults, NewInstance};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use e2e::Cloud;
use e2e::cloud_provider::{
    NAMESPACE, TOKEN_SECRET, apply, condition_is, install_crd, resource_config, token_secret,
};
use e2e::testbed::{Testbed, eventually, ingress_hostname, ingress_ip, is_uninitialized};
use wasm_ccm::manager::{ManagerConfig, ProviderMode};
use wasm_ccm::resource::{CloudProvider, CloudProviderStatus, ConditionStatus, condition};

const WAIT: Duration = Duration::from_secs(30);
/// The Secret holding the second cloud's token.
const EDGE_TOKEN_SECRET: &str = "edgecloud-token";
/// The load-balancer classes of the two providers.
const CLOUD_CLASS: &str = "wasm-ccm.io/simcloud";
const EDGE_CLASS: &str = "wasm-ccm.io/edgecloud";
/// The node label the providers' node selectors read.
const SITE: &str = "topology.example.com/site";
/// The cleanup finalizers of the two providers.
const CLOUD_FINALIZER: &str = "cloud.wasm-ccm.io/load-balancer-cleanup";
const EDGE_FINALIZER: &str = "edge.wasm-ccm.io/load-balancer-cleanup";

/// A CloudProvider named `resource` running `wasm` as `name` against `cloud`, granted it
/// with the token in `secret`, serving nodes with `site` in `sites` and Services of
/// `class`, rolled back within 2 minutes after 10 calls.
fn provider_spec(
    resource: &str,
    wasm: &str,
    config: serde_json::Value,
    cloud: &Cloud,
    secret: &str,
    sites: &[&str],
    class: &str,
) -> serde_json::Value {
    let url = cloud.sim.url();
    json!({
        "apiVersion": "wasm-ccm.io/v1alpha1",
        "kind": "CloudProvider",
        "metadata": {"name": resource},
        "spec": {
            "provider": format!("file://{wasm}"),
            "name": config["name"].as_str().unwrap_or("simcloud"),
            "cloudConfig": {"inline": config.to_string()},
            "egress": {"allowedHosts": [url]},
            "credentials": [{
                "host": url,
                "secretKeyRef": {"name": secret, "key": "token", "namespace": NAMESPACE},
            }],
            "rollout": {"rollback": {"window": "2m", "minimumCalls": 10}},
            "nodeSelector": {"matchExpressions": [{"key": SITE, "operator": "In", "values": sites}]},
            "loadBalancerClass": class,
        },
    })
}

/// The `cloud` provider: simcloud against the testbed's simulator, the default for
/// Services without a class; `wasm` and `config` as given.
fn cloud_spec(bed: &Testbed, wasm: &str, config: serde_json::Value) -> serde_json::Value {
    let mut spec = provider_spec(
        "cloud",
        wasm,
        config,
        &bed.cloud,
        TOKEN_SECRET,
        &["cloud", "both"],
        CLOUD_CLASS,
    );
    spec["spec"]["default"] = json!(true);
    spec
}

/// The `edge` provider: `wasm` (a simcloud build) named `edgecloud` against `edge`.
fn edge_spec(edge: &Cloud, wasm: &str) -> serde_json::Value {
    provider_spec(
        "edge",
        wasm,
        json!({"api_url": edge.sim.url(), "name": "edgecloud"}),
        edge,
        EDGE_TOKEN_SECRET,
        &["edge", "both"],
        EDGE_CLASS,
    )
}

fn simcloud_config(bed: &Testbed) -> serde_json::Value {
    json!({"api_url": bed.cloud.sim.url()})
}

/// The status of CloudProvider `name` once `check` holds for it.
async fn status_of(
    bed: &Testbed,
    name: &str,
    what: &str,
    check: impl Fn(&CloudProviderStatus) -> bool,
) -> CloudProviderStatus {
    let api: Api<CloudProvider> = Api::all(bed.client.clone());
    eventually(what, WAIT, || async {
        let status = api.get(name).await.ok()?.status?;
        check(&status).then_some(status)
    })
    .await
}

/// A kubelet-registered node `name` labelled with `site`.
async fn node_at(bed: &Testbed, name: &str, site: &str) {
    let mut node = Testbed::kubelet_node(name);
    node.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(SITE.into(), site.into());
    bed.create_node(&node).await;
}

/// An instance `name` in the second cloud and its node; the instance id.
async fn edge_node(bed: &Testbed, edge: &Cloud, name: &str) -> String {
    let id = edge
        .sim
        .state()
        .add_instance(NewInstance {
            name: name.into(),
            instance_type: "edge.small".into(),
            zone: "edge-west-1a".into(),
            ..NewInstance::default()
        })
        .id;
    node_at(bed, name, "edge").await;
    id
}

/// An instance `name` in the testbed's cloud and its node; the instance id.
async fn cloud_node(bed: &Testbed, name: &str) -> String {
    let id = bed.add_instance(name, "zone-a");
    node_at(bed, name, "cloud").await;
    id
}

/// A LoadBalancer Service `name` of `class`.
async fn service(bed: &Testbed, name: &str, class: Option<&str>) {
    let mut service = Testbed::lb_service(name);
    service.spec.as_mut().unwrap().load_balancer_class = class.map(String::from);
    bed.services()
        .create(&PostParams::default(), &service)
        .await
        .expect("create the Service");
}

async fn initialised(bed: &Testbed, name: &str) -> Node {
    eventually(&format!("{name} initialised"), WAIT, || async {
        bed.node(name).await.filter(|node| !is_uninitialized(node))
    })
    .await
}

fn provider_id(node: &Node) -> String {
    node.spec
        .as_ref()
        .and_then(|spec| spec.provider_id.clone())
        .unwrap_or_default()
}

async fn with_ingress(bed: &Testbed, name: &str, check: impl Fn(&Service) -> bool) -> Service {
    eventually(&format!("{name} has its ingress"), WAIT, || async {
        bed.service(name).await.filter(|service| check(service))
    })
    .await
}

fn finalizers(service: &Service) -> Vec<String> {
    service.metadata.finalizers.clone().unwrap_or_default()
}

/// A manager serving the CloudProviders `names`, with the testbed's flags.
fn serving(bed: &Testbed, names: &[&str]) -> ManagerConfig {
    let mut config = resource_config(bed);
    let ProviderMode::Resource { names: served, .. } = &mut config.provider else {
        unreachable!("resource_config follows a resource");
    };
    *served = names.iter().map(|name| name.to_string()).collect();
    config
}

/// Warning events about the objects whose names start with one of `prefixes`, except a
/// load balancer with no nodes yet: failed reconciles.
async fn warnings_about(bed: &Testbed, prefixes: &[&str]) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(bed.client.clone());
    events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| event.type_.as_deref() == Some("Warning"))
        .filter(|event| event.reason.as_deref() != Some("UnAvailableLoadBalancer"))
        .filter_map(|event| {
            let name = event.regarding.and_then(|r| r.name).unwrap_or_default();
            prefixes
                .iter()
                .any(|prefix| name.starts_with(prefix))
                .then(|| {
                    format!(
                        "{} {name}: {}",
                        event.reason.unwrap_or_default(),
                        event.note.unwrap_or_default()
                    )
                })
        })
        .collect()
}

/// The CRD, both tokens, both providers, two nodes and a Service each, one node both
/// select, one neither does, and a Service of a class neither serves.
async fn two_clouds(bed: &Testbed, edge: &Cloud) -> (Vec<String>, Vec<String>) {
    install_crd(bed).await;
    token_secret(bed, e2e::TOKEN).await;
    e2e::cloud_provider::secret(bed, EDGE_TOKEN_SECRET, e2e::SECOND_TOKEN).await;
    apply(
        bed,
        &cloud_spec(bed, guest_builds::SIMCLOUD, simcloud_config(bed)),
    )
    .await;
    apply(bed, &edge_spec(edge, guest_builds::SIMCLOUD)).await;
    let mut cloud_ids = Vec::new();
    let mut edge_ids = Vec::new();
    for index in 0..2 {
        cloud_ids.push(cloud_node(bed, &format!("cloud-{index}")).await);
        edge_ids.push(edge_node(bed, edge, &format!("edge-{index}")).await);
    }
    node_at(bed, "both-0", "both").await;
    node_at(bed, "moon-0", "moon").await;
    service(bed, "svc-default", None).await;
    service(bed, "svc-edge", Some(EDGE_CLASS)).await;
    service(bed, "svc-other", Some("example.com/other")).await;
    (cloud_ids, edge_ids)
}

#[tokio::test]
async fn several_providers_serve_their_own_nodes_and_load_balancers_and_change_apart() {
    let bed = Testbed::start().await;
    let edge = Cloud::second().await;
    let (cloud_ids, edge_ids) = two_clouds(&bed, &edge).await;
    let manager = bed.run(serving(&bed, &["cloud", "edge"]));

    // Nodes by selector, each initialised by its own provider from its own cloud.
    for index in 0..2 {
        let node = initialised(&bed, &format!("cloud-{index}")).await;
        assert_eq!(
            provider_id(&node),
            format!("simcloud://{}", cloud_ids[index])
        );
        let node = initialised(&bed, &format!("edge-{index}")).await;
        assert_eq!(
            provider_id(&node),
            format!("edgecloud://{}", edge_ids[index])
        );
        let zone = &node.metadata.labels.as_ref().unwrap()["topology.kubernetes.io/zone"];
        assert_eq!(zone, "edge-west-1a");
    }

    // Load balancers by class: each in its own cloud, in front of its own nodes.
    let default = with_ingress(&bed, "svc-default", |s| {
        ingress_ip(s).is_some_and(|ip| ip.starts_with("198.51.100."))
    })
    .await;
    assert_eq!(finalizers(&default), [CLOUD_FINALIZER]);
    let edged = with_ingress(&bed, "svc-edge", |s| {
        ingress_ip(s).is_some_and(|ip| ip.starts_with("203.0.113."))
    })
    .await;
    assert_eq!(finalizers(&edged), [EDGE_FINALIZER]);
    // Each provider's events say which provider's controllers made them.
    let ensured = eventually("svc-edge's EnsuredLoadBalancer", WAIT, || async {
        let events = bed.events_about("svc-edge").await;
        events
            .into_iter()
            .find(|event| event.reason.as_deref() == Some("EnsuredLoadBalancer"))
    })
    .await;
    assert_eq!(
        ensured.reporting_instance.as_deref(),
        Some("test-manager/edge")
    );
    assert_eq!(
        ensured.reporting_controller.as_deref(),
        Some("service-controller")
    );
    let targets = |cloud: &Cloud| {
        let lbs = cloud.sim.state().load_balancers();
        assert_eq!(lbs.len(), 1, "one load balancer in each cloud: {lbs:?}");
        let mut targets = lbs[0].targets.clone();
        targets.sort();
        targets
    };
    eventually("each load balancer targets its own nodes", WAIT, || async {
        let (mut cloud_wanted, mut edge_wanted) = (cloud_ids.clone(), edge_ids.clone());
        cloud_wanted.sort();
        edge_wanted.sort();
        (targets(&bed.cloud) == cloud_wanted && targets(&edge) == edge_wanted).then_some(())
    })
    .await;

    // A node both select, and one neither does, are reported and left alone, as is a
    // Service of a class neither has.
    let contested = eventually("both-0 reported", WAIT, || async {
        let events = bed.events_about("both-0").await;
        events
            .into_iter()
            .find(|event| event.reason.as_deref() == Some("ProviderContested"))
    })
    .await;
    let note = contested.note.unwrap_or_default();
    assert!(note.contains("cloud, edge"), "{note}");
    for (resource, other) in [("cloud", "edge"), ("edge", "cloud")] {
        let status = status_of(
            &bed,
            resource,
            "the contested node on the condition",
            |status| {
                condition_is(
                    status,
                    condition::NODES_UNCONTESTED,
                    ConditionStatus::False,
                    "NodesContested",
                )
            },
        )
        .await;
        let message = &status
            .conditions
            .iter()
            .find(|c| c.type_ == condition::NODES_UNCONTESTED)
            .unwrap()
            .message;
        assert!(
            message.contains(&format!("both-0 (also {other})")),
            "{message}"
        );
    }
    eventually("moon-0 reported", WAIT, || async {
        let reasons = bed.event_reasons("moon-0").await;
        reasons.contains(&"NoProvider".to_string()).then_some(())
    })
    .await;
    for name in ["both-0", "moon-0"] {
        let node = bed.node(name).await.unwrap();
        assert!(
            is_uninitialized(&node) && provider_id(&node).is_empty(),
            "{name}: {node:?}"
        );
    }
    // Relabelled out of both selectors, it is contested no more.
    Api::<Node>::all(bed.client.clone())
        .patch(
            "both-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {SITE: "moon"}}})),
        )
        .await
        .expect("relabel both-0");
    for resource in ["cloud", "edge"] {
        status_of(&bed, resource, "no contested node left", |status| {
            condition_is(
                status,
                condition::NODES_UNCONTESTED,
                ConditionStatus::True,
                "NoContestedNodes",
            )
        })
        .await;
    }
    let other = bed.service("svc-other").await.unwrap();
    assert!(
        finalizers(&other).is_empty() && ingress_ip(&other).is_none(),
        "{other:?}"
    );

    // `edge` rolls out simcloud v2 while `cloud` rolls out a version that traps and is
    // rolled back: edge serves on, with not one failed call.
    let v2 = e2e::sha256_digest(&guest_builds::read(guest_builds::SIMCLOUD_V2));
    apply(&bed, &edge_spec(&edge, guest_builds::SIMCLOUD_V2)).await;
    apply(
        &bed,
        &cloud_spec(
            &bed,
            guest_builds::ROLLOUT,
            json!({"name": "simcloud", "trapEvery": 2}),
        ),
    )
    .await;
    status_of(&bed, "cloud", "cloud rolled back", |status| {
        condition_is(
            status,
            condition::ROLLED_BACK,
            ConditionStatus::True,
            "FailureRate",
        )
    })
    .await;
    status_of(&bed, "edge", "edge runs v2", |status| {
        status
            .active
            .as_ref()
            .is_some_and(|active| active.digest == v2)
    })
    .await;
    let stamp = guest_builds::SIMCLOUD_V2_BUILD;
    with_ingress(&bed, "svc-edge", |s| {
        ingress_hostname(s).is_some_and(|host| host.starts_with(&format!("{stamp}.")))
    })
    .await;
    let late = edge_node(&bed, &edge, "edge-2").await;
    let node = initialised(&bed, "edge-2").await;
    assert_eq!(provider_id(&node), format!("edgecloud://{late}"));
    assert_eq!(
        node.metadata
            .labels
            .as_ref()
            .unwrap()
            .get("simcloud.wasm-ccm.io/build"),
        Some(&stamp.to_string())
    );
    let status = status_of(&bed, "edge", "edge's calls counted", |status| {
        status
            .version_calls
            .iter()
            .any(|v| v.digest == v2 && v.calls > 0)
    })
    .await;
    for version in &status.version_calls {
        assert_eq!(version.failures, 0, "edge failed calls: {status:?}");
    }
    let warnings = warnings_about(&bed, &["edge-", "svc-edge"]).await;
    assert!(warnings.is_empty(), "{warnings:?}");

    // The first cloud down: the second's nodes keep being initialised.
    bed.cloud.sim.state().set_faults(Faults {
        error_rate: 1.0,
        ..Faults::default()
    });
    let later = edge_node(&bed, &edge, "edge-3").await;
    let node = initialised(&bed, "edge-3").await;
    assert_eq!(provider_id(&node), format!("edgecloud://{later}"));

    // A spec edit that gives the class to no one leaves the load balancer and its status as
    // they are; deleting the Service still deletes it, by its provider's finalizer.
    let before = bed.service("svc-edge").await.unwrap();
    let mut moved = edge_spec(&edge, guest_builds::SIMCLOUD_V2);
    moved["spec"]["loadBalancerClass"] = json!("wasm-ccm.io/elsewhere");
    apply(&bed, &moved).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = bed.service("svc-edge").await.unwrap();
    assert_eq!(after.status, before.status);
    assert_eq!(finalizers(&after), [EDGE_FINALIZER]);
    assert_eq!(edge.sim.state().load_balancers().len(), 1);

    // Deleting the edge Service deletes its load balancer in its own cloud only.
    bed.services()
        .delete("svc-edge", &Default::default())
        .await
        .expect("delete svc-edge");
    eventually("svc-edge's load balancer deleted", WAIT, || async {
        (edge.sim.state().load_balancers().is_empty() && bed.service("svc-edge").await.is_none())
            .then_some(())
    })
    .await;
    assert_eq!(bed.cloud.sim.state().load_balancers().len(), 1);
    manager.stop().await.unwrap();
}

/// A provider that answers for a node a providerID in another provider's name (to hand it
/// over, or take one of its instances) is refused: the node is left uninitialised, the
/// answer named in a Warning event, and the other provider's node untouched.
#[tokio::test]
async fn several_providers_an_answer_in_another_providers_name_is_refused() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    apply(
        &bed,
        &cloud_spec(&bed, guest_builds::SIMCLOUD, simcloud_config(&bed)),
    )
    .await;
    let stolen = cloud_node(&bed, "cloud-0").await;
    apply(
        &bed,
        &json!({
            "apiVersion": "wasm-ccm.io/v1alpha1",
            "kind": "CloudProvider",
            "metadata": {"name": "rogue"},
            "spec": {
                "provider": format!("file://{}", guest_builds::HOSTILE),
                "name": "hostile",
                "nodeSelector": {"matchLabels": {SITE: "rogue"}},
            },
        }),
    )
    .await;
    let mut node = Testbed::kubelet_node("rogue-0");
    node.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(SITE.into(), "rogue".into());
    node.metadata.annotations = Some(BTreeMap::from([(
        "hostile.wasm-ccm.io/metadata".to_string(),
        json!({"providerID": format!("simcloud://{stolen}")}).to_string(),
    )]));
    bed.create_node(&node).await;
    let manager = bed.run(serving(&bed, &["cloud", "rogue"]));

    let node = initialised(&bed, "cloud-0").await;
    assert_eq!(provider_id(&node), format!("simcloud://{stolen}"));
    let refused = eventually("rogue-0's answer refused", WAIT, || async {
        let events = bed.events_about("rogue-0").await;
        events
            .into_iter()
            .find(|event| event.reason.as_deref() == Some("InvalidProviderAnswer"))
    })
    .await;
    let note = refused.note.unwrap_or_default();
    assert!(
        note.contains("providerID") && note.contains("hostile://"),
        "{note}"
    );
    let rogue = bed.node("rogue-0").await.unwrap();
    assert!(
        is_uninitialized(&rogue) && provider_id(&rogue).is_empty(),
        "{rogue:?}"
    );
    manager.stop().await.unwrap();
}

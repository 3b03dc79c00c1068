//! A provider's answers reach the cluster only once the host has checked them: the hostile
//! provider answers what a Service's or node's annotation dictates, and each answer that
//! could capture traffic or mislabel a node (the `kubernetes` Service's cluster IP,
//! loopback or the metadata service as ingress, a node's own address, a reserved label, a
//! foreign or changed providerID) gets a Warning `InvalidProviderAnswer` naming the
//! provider version, the field and the value, and leaves the object as it was; the next
//! valid answer is written.

use std::time::Duration;

use e2e::testbed::{Testbed, eventually, ingress_ip, is_uninitialized};
use k8s_openapi::api::core::v1::{Node, NodeAddress, Service};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_ccm::controllers::ControllerSelection;
use wasm_ccm::manager::{ManagerConfig, ProviderMode, ProviderSettings};
use wasm_ccm_host::source::ProviderRef;

const WAIT: Duration = Duration::from_secs(30);
const INGRESS: &str = "hostile.wasm-ccm.io/ingress";
const METADATA: &str = "hostile.wasm-ccm.io/metadata";

/// The hostile provider without a cloud config (so it sees every annotation), running
/// `controllers`, tuned by `tune`.
pub(crate) fn hostile(
    bed: &Testbed,
    controllers: &str,
    tune: impl FnOnce(&mut ManagerConfig),
) -> e2e::testbed::RunningManager {
    let mut config = bed.config();
    config.provider = ProviderMode::Flags(ProviderSettings {
        reference: ProviderRef::File(guest_builds::HOSTILE.into()),
        name: "hostile".into(),
        cloud_config: None,
        allow_untagged_cloud: false,
    });
    config.controllers = controllers.parse::<ControllerSelection>().unwrap();
    config.settings.node_address_dns_suffixes = vec!["hostile.internal".into()];
    tune(&mut config);
    bed.run(config)
}

/// The notes of the `InvalidProviderAnswer` events about the object named `name`.
pub(crate) async fn refusals(bed: &Testbed, name: &str) -> Vec<String> {
    bed.events_about(name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidProviderAnswer"))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.note)
        .collect()
}

/// Wait for a refusal about `name` whose note holds every one of `parts`; return the note.
async fn refused(bed: &Testbed, name: &str, parts: &[&str]) -> String {
    eventually(
        &format!("a refusal about {name} naming {parts:?}"),
        WAIT,
        || async {
            refusals(bed, name)
                .await
                .into_iter()
                .find(|note| parts.iter().all(|part| note.contains(part)))
        },
    )
    .await
}

/// A LoadBalancer Service whose load balancer the hostile provider answers with `ingress`.
fn service(name: &str, ingress: serde_json::Value) -> Service {
    let mut service = Testbed::lb_service(name);
    service.metadata.annotations = Some(
        [(INGRESS.to_string(), ingress.to_string())]
            .into_iter()
            .collect(),
    );
    service
}

/// Make the hostile provider answer `ingress` for Service `name` from now on.
async fn answer_ingress(bed: &Testbed, name: &str, ingress: serde_json::Value) {
    let patch = json!({"metadata": {"annotations": {INGRESS: ingress.to_string()}}});
    bed.services()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch service");
}

fn no_ingress(service: &Service) -> bool {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_none_or(|ingress| ingress.is_empty())
}

/// The `kubernetes` Service's cluster IP: the first of the Service range, 10.96.0.1 here as
/// on a kubeadm cluster.
async fn api_server_cluster_ip(bed: &Testbed) -> String {
    let kubernetes = Api::<Service>::namespaced(bed.client.clone(), "default")
        .get("kubernetes")
        .await
        .expect("the kubernetes Service");
    kubernetes.spec.unwrap().cluster_ip.expect("a cluster IP")
}

#[tokio::test]
async fn ingress_that_would_capture_the_api_server_loopback_or_metadata_traffic_is_refused() {
    // As against a real kube-apiserver with kubeadm's --service-cluster-ip-range.
    let bed = Testbed::start().await;
    let cluster_ip = api_server_cluster_ip(&bed).await;
    assert_eq!(cluster_ip, "10.96.0.1");
    let manager = hostile(&bed, "service", |config| {
        config.settings.service_cidrs = Some("10.96.0.0/12".parse().unwrap());
    });
    bed.services()
        .create(
            &PostParams::default(),
            &service("web", json!([{"ip": cluster_ip}])),
        )
        .await
        .expect("create service");

    let note = refused(
        &bed,
        "web",
        &["ingress[0].ip \"10.96.0.1\"", "--service-cluster-ip-range"],
    )
    .await;
    assert!(
        note.contains("provider hostile@sha256:"),
        "names the version: {note}"
    );
    assert!(note.contains("ensure-load-balancer"), "{note}");
    for (ip, why) in [
        ("127.0.0.1", "a loopback address"),
        (
            "169.254.169.254",
            "a link-local (where cloud metadata services answer) address",
        ),
    ] {
        answer_ingress(&bed, "web", json!([{"ip": ip}])).await;
        let refusal = format!("ingress[0].ip \"{ip}\": {why}");
        refused(&bed, "web", &[refusal.as_str()]).await;
    }
    let service = bed.service("web").await.unwrap();
    assert!(
        no_ingress(&service),
        "nothing written: {:?}",
        service.status
    );
    let condition = service
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "wasm-ccm.io/LoadBalancerError")
        .expect("the error condition");
    assert_eq!(condition.reason, "InvalidProviderAnswer");

    answer_ingress(
        &bed,
        "web",
        json!([{"ip": "198.51.100.10", "ipMode": "vip"}]),
    )
    .await;
    let service = eventually("the valid ingress written", WAIT, || async {
        bed.service("web").await.filter(|s| ingress_ip(s).is_some())
    })
    .await;
    assert_eq!(ingress_ip(&service).as_deref(), Some("198.51.100.10"));
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn without_the_service_range_the_cluster_ips_of_existing_services_are_still_refused() {
    let bed = Testbed::start().await;
    let cluster_ip = api_server_cluster_ip(&bed).await;
    let manager = hostile(&bed, "service", |_| {});
    bed.services()
        .create(
            &PostParams::default(),
            &service("web", json!([{"ip": cluster_ip}])),
        )
        .await
        .expect("create service");
    let refusal = format!(
        "ingress[0].ip \"{cluster_ip}\": already the cluster IP of Service default/kubernetes"
    );
    refused(&bed, "web", &[refusal.as_str()]).await;
    assert!(no_ingress(&bed.service("web").await.unwrap()));
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn ingress_that_is_a_node_a_pod_an_ip_named_as_host_or_outside_the_pools_is_refused() {
    let bed = Testbed::start().await;
    let mut node = Testbed::kubelet_node("n1");
    node.status.as_mut().unwrap().addresses = Some(vec![NodeAddress {
        type_: "InternalIP".into(),
        address: "10.0.0.7".into(),
    }]);
    bed.create_node(&node).await;
    let manager = hostile(&bed, "service", |config| {
        config.settings.load_balancer_ip_ranges = Some("203.0.113.0/24".parse().unwrap());
    });
    bed.services()
        .create(
            &PostParams::default(),
            &service("web", json!([{"ip": "10.0.0.7"}])),
        )
        .await
        .expect("create service");
    refused(
        &bed,
        "web",
        &["ingress[0].ip \"10.0.0.7\": already the InternalIP of node n1"],
    )
    .await;
    for (ingress, refusal) in [
        (
            json!([{"ip": "10.244.1.9"}]),
            "ingress[0].ip \"10.244.1.9\": inside the pod network 10.244.0.0/16 (--cluster-cidr)",
        ),
        (
            json!([{"hostname": "10.96.0.1"}]),
            "ingress[0].hostname \"10.96.0.1\": an IP address where a DNS name is required",
        ),
        (
            json!([{"ip": "198.51.100.10"}]),
            "ingress[0].ip \"198.51.100.10\": outside --load-balancer-ip-ranges 203.0.113.0/24",
        ),
        (
            json!([{"ip": "203.0.113.10", "ports": [{"port": 6443, "protocol": "tcp"}]}]),
            "ingress[0].ports[0] \"6443/Tcp\": not a port of the Service",
        ),
    ] {
        answer_ingress(&bed, "web", ingress).await;
        refused(&bed, "web", &[refusal]).await;
    }
    assert!(no_ingress(&bed.service("web").await.unwrap()));

    answer_ingress(
        &bed,
        "web",
        json!([{"ip": "203.0.113.10"}, {"hostname": "lb-web.example.com"}]),
    )
    .await;
    let service = eventually("the valid ingress written", WAIT, || async {
        bed.service("web").await.filter(|s| ingress_ip(s).is_some())
    })
    .await;
    assert_eq!(ingress_ip(&service).as_deref(), Some("203.0.113.10"));
    let ingress = service
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(ingress[1].hostname.as_deref(), Some("lb-web.example.com"));
    manager.stop().await.unwrap();
}

/// A kubelet-registered node whose instance metadata the hostile provider answers with
/// `metadata`.
pub(crate) fn node(name: &str, metadata: serde_json::Value) -> Node {
    let mut node = Testbed::kubelet_node(name);
    node.metadata.annotations = Some(
        [(METADATA.to_string(), metadata.to_string())]
            .into_iter()
            .collect(),
    );
    node
}

/// Make the hostile provider answer `metadata` for node `name` from now on.
async fn answer_metadata(bed: &Testbed, name: &str, metadata: serde_json::Value) {
    let patch = json!({"metadata": {"annotations": {METADATA: metadata.to_string()}}});
    Api::<Node>::all(bed.client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch node");
}

fn valid_metadata() -> serde_json::Value {
    json!({
        "providerID": "hostile://i-1",
        "instanceType": "h1.small",
        "zone": "zone-a",
        "region": "region-1",
        "addresses": [["InternalIP", "10.0.0.5"], ["Hostname", "n1.hostile.internal"]],
        "labels": [["hostile.example/rack", "r7"]],
    })
}

/// [`valid_metadata`] answering `addresses`.
fn with_addresses(addresses: serde_json::Value) -> serde_json::Value {
    let mut metadata = valid_metadata();
    metadata["addresses"] = addresses;
    metadata
}

/// The node as the provider left it: taint, providerID, labels and addresses.
fn untouched(node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    is_uninitialized(node)
        && node.spec.as_ref().unwrap().provider_id.is_none()
        && !labels
            .keys()
            .any(|k| k.starts_with("topology.") || k.contains("instance-type"))
        && !labels.contains_key("hostile.example/rack")
        && node
            .status
            .as_ref()
            .unwrap()
            .addresses
            .as_ref()
            .is_none_or(|a| a.is_empty())
}

#[tokio::test]
async fn bad_instance_metadata_leaves_the_node_tainted_until_a_valid_answer() {
    let bed = Testbed::start().await;
    let with = |field: &str, value: serde_json::Value| {
        let mut metadata = valid_metadata();
        metadata[field] = value;
        metadata
    };
    bed.create_node(&node(
        "n1",
        with("addresses", json!([["InternalIP", "127.0.0.1"]])),
    ))
    .await;
    let manager = hostile(&bed, "cloud-node", |_| {});
    let note = refused(
        &bed,
        "n1",
        &["nodeAddresses[0].address (InternalIP) \"127.0.0.1\": a loopback address"],
    )
    .await;
    assert!(note.contains("provider hostile@sha256:"), "{note}");
    assert!(note.contains("instance-metadata"), "{note}");
    for (metadata, refusal) in [
        (
            with("addresses", json!([["ExternalIP", "169.254.169.254"]])),
            "nodeAddresses[0].address (ExternalIP) \"169.254.169.254\": a link-local",
        ),
        (
            with("addresses", json!([["Hostname", "127.0.0.1"]])),
            "nodeAddresses[0].address (Hostname) \"127.0.0.1\": an IP address where a DNS name is required",
        ),
        (
            with("providerID", json!("aws:///us-east-1a/i-1")),
            "providerID \"aws:///us-east-1a/i-1\": not a provider ID of this provider: it must start with hostile://",
        ),
        (
            with(
                "labels",
                json!([["node-role.kubernetes.io/control-plane", ""]]),
            ),
            "additionalLabels[0].key \"node-role.kubernetes.io/control-plane\": in the reserved kubernetes.io namespace",
        ),
        (
            with(
                "labels",
                json!([[
                    "node.kubernetes.io/exclude-from-external-load-balancers",
                    "true"
                ]]),
            ),
            "in the reserved kubernetes.io namespace",
        ),
        (
            with("zone", json!("zone a")),
            "zone \"zone a\": not a label value",
        ),
    ] {
        answer_metadata(&bed, "n1", metadata).await;
        refused(&bed, "n1", &[refusal]).await;
        let node = bed.node("n1").await.unwrap();
        assert!(untouched(&node), "after {refusal}: {node:?}");
    }

    answer_metadata(&bed, "n1", valid_metadata()).await;
    let node = eventually("n1 initialised", WAIT, || async {
        bed.node("n1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    assert_eq!(
        node.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("hostile://i-1")
    );
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["topology.kubernetes.io/zone"], "zone-a");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "h1.small");
    assert_eq!(labels["hostile.example/rack"], "r7");
    eventually("n1's addresses written", WAIT, || async {
        addresses(&bed.node("n1").await?)
            .eq(&["InternalIP 10.0.0.5", "Hostname n1.hostile.internal"])
            .then_some(())
    })
    .await;
    manager.stop().await.unwrap();
}

fn addresses(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(|all| {
            all.iter()
                .map(|a| format!("{} {}", a.type_, a.address))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_answer_changing_an_initialised_nodes_provider_id_writes_none_of_its_addresses() {
    let bed = Testbed::start().await;
    let mut moved = valid_metadata();
    moved["providerID"] = json!("hostile://i-2");
    moved["addresses"] = json!([["InternalIP", "10.0.0.8"]]);
    let mut initialised = node("n1", moved);
    let spec = initialised.spec.as_mut().unwrap();
    spec.taints = None;
    spec.provider_id = Some("hostile://i-1".into());
    bed.create_node(&initialised).await;
    let manager = hostile(&bed, "cloud-node", |config| {
        config.settings.node_status_update_frequency = Duration::from_millis(200);
    });
    refused(
        &bed,
        "n1",
        &["providerID \"hostile://i-2\": the node's providerID is \"hostile://i-1\", and a providerID never changes"],
    )
    .await;
    assert_eq!(
        addresses(&bed.node("n1").await.unwrap()),
        Vec::<String>::new()
    );

    let mut same = valid_metadata();
    same["addresses"] = json!([["InternalIP", "10.0.0.8"]]);
    answer_metadata(&bed, "n1", same).await;
    eventually(
        "the address of the node's own instance written",
        WAIT,
        || async {
            addresses(&bed.node("n1").await?)
                .eq(&["InternalIP 10.0.0.8"])
                .then_some(())
        },
    )
    .await;
    let node = bed.node("n1").await.unwrap();
    assert_eq!(
        node.spec.unwrap().provider_id.as_deref(),
        Some("hostile://i-1")
    );
    manager.stop().await.unwrap();
}

/// As against a real kube-apiserver with kubeadm's ranges: addresses that would send the API
/// server's connections to kubelets (exec, logs, port-forward) to a host the provider chose,
/// a pod, or the `kubernetes` Service are refused, each named; the node stays tainted until
/// an answer of its own name and a free address.
#[tokio::test]
async fn node_addresses_that_would_redirect_the_api_servers_kubelet_connections_are_refused() {
    let bed = Testbed::start().await;
    bed.create_node(&node(
        "n1",
        with_addresses(json!([
            ["Hostname", "kubelet.attacker.example"],
            ["InternalIP", "10.244.1.5"],
            ["ExternalIP", "10.96.0.1"],
        ])),
    ))
    .await;
    let manager = hostile(&bed, "cloud-node", |config| {
        config.settings.service_cidrs = Some("10.96.0.0/16".parse().unwrap());
        config.settings.cluster_cidrs = Some("10.244.0.0/16".parse().unwrap());
    });
    let note = refused(
        &bed,
        "n1",
        &[
            "nodeAddresses[0].address (Hostname) \"kubelet.attacker.example\": neither the node's name nor under a suffix of --node-address-dns-suffixes (hostile.internal)",
            "nodeAddresses[1].address (InternalIP) \"10.244.1.5\": inside the pod network 10.244.0.0/16 (--cluster-cidr)",
            "nodeAddresses[2].address (ExternalIP) \"10.96.0.1\": inside the Service cluster IP range 10.96.0.0/16 (--service-cluster-ip-range)",
        ],
    )
    .await;
    assert!(note.contains("instance-metadata"), "{note}");
    assert!(untouched(&bed.node("n1").await.unwrap()));

    answer_metadata(
        &bed,
        "n1",
        with_addresses(json!([
            ["Hostname", "n1"],
            ["InternalDNS", "n1.hostile.internal"],
            ["InternalIP", "10.0.0.5"]
        ])),
    )
    .await;
    eventually(
        "n1's own names and a free address written",
        WAIT,
        || async {
            let node = bed.node("n1").await?;
            let written = [
                "Hostname n1",
                "InternalDNS n1.hostile.internal",
                "InternalIP 10.0.0.5",
            ];
            (!is_uninitialized(&node) && addresses(&node) == written).then_some(())
        },
    )
    .await;

    // Another node may not take a name n1 holds, under an allowed suffix as it is.
    bed.create_node(&node(
        "n2",
        with_addresses(json!([
            ["Hostname", "n1.hostile.internal"],
            ["InternalIP", "10.0.0.6"]
        ])),
    ))
    .await;
    refused(
        &bed,
        "n2",
        &["nodeAddresses[0].address (Hostname) \"n1.hostile.internal\": already the InternalDNS of node n1"],
    )
    .await;
    assert!(untouched(&bed.node("n2").await.unwrap()));
    manager.stop().await.unwrap();
}

/// A name answered for one node before the node of that name joined passes its check then;
/// once that node is there, the periodic address sync removes it (with a Warning naming it)
/// and refuses it from then on, so the API server's connections for the first node never go
/// to the second.
#[tokio::test]
async fn a_name_written_before_its_node_joined_is_removed_once_that_node_is_there() {
    let bed = Testbed::start().await;
    bed.create_node(&node(
        "n2",
        with_addresses(json!([
            ["InternalIP", "10.0.0.6"],
            ["InternalDNS", "n1.hostile.internal"]
        ])),
    ))
    .await;
    let manager = hostile(&bed, "cloud-node", |config| {
        config.settings.node_status_update_frequency = Duration::from_millis(300);
    });
    eventually(
        "n2 initialised with the name nobody holds yet",
        WAIT,
        || async {
            let node = bed.node("n2").await?;
            (addresses(&node) == ["InternalIP 10.0.0.6", "InternalDNS n1.hostile.internal"])
                .then_some(())
        },
    )
    .await;

    bed.create_node(&node(
        "n1",
        with_addresses(json!([["Hostname", "n1"], ["InternalIP", "10.0.0.5"]])),
    ))
    .await;
    eventually("the name of n1 gone from n2", WAIT, || async {
        let node = bed.node("n2").await?;
        (addresses(&node) == ["InternalIP 10.0.0.6"]).then_some(())
    })
    .await;
    let removed = eventually("the Warning about it", WAIT, || async {
        let events = bed.events_about("n2").await;
        events
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("AddressNamesAnotherNode"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(
        removed.contains("InternalDNS n1.hostile.internal"),
        "{removed}"
    );
    refused(
        &bed,
        "n2",
        &["nodeAddresses[1].address (InternalDNS) \"n1.hostile.internal\": already the"],
    )
    .await;

    // A node named by its FQDN beside one named by the short name keeps its own name.
    bed.create_node(&node(
        "n1.hostile.internal",
        with_addresses(json!([
            ["Hostname", "n1.hostile.internal"],
            ["InternalIP", "10.0.0.7"]
        ])),
    ))
    .await;
    let own = ["Hostname n1.hostile.internal", "InternalIP 10.0.0.7"];
    eventually("the FQDN-named node initialised", WAIT, || async {
        let node = bed.node("n1.hostile.internal").await?;
        (addresses(&node) == own).then_some(())
    })
    .await;
    // Several address syncs later: still there, never removed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let node = bed.node("n1.hostile.internal").await.unwrap();
    assert_eq!(addresses(&node), own);
    let reasons = bed.event_reasons("n1.hostile.internal").await;
    assert!(
        !reasons.iter().any(|r| r == "AddressNamesAnotherNode"),
        "{reasons:?}"
    );
    manager.stop().await.unwrap();
}

/// A provider answering `retry-after 0` with a fresh MiB of text on every call is called
/// about once a second, not in a loop, and writes nothing while the wait is within its
/// grace; one answering `other` so backs off, and its condition and event carry at most
/// 1 KiB of its text, escaped on one line.
#[tokio::test]
async fn a_provider_answering_retry_after_0_with_a_mib_of_text_is_neither_looped_nor_quoted_whole()
{
    let bed = Testbed::start().await;
    let probe = |path: &str| format!("{}/v1/{path}", bed.cloud.sim.url());
    let flood = |kind: &str, path: &str| json!({"kind": kind, "delayMs": 0, "bytes": 1 << 20, "fetch": probe(path)});
    for (name, error) in [
        ("waiting", flood("retry-after", "retry-probe")),
        ("failing", flood("other", "other-probe")),
    ] {
        let mut service = Testbed::lb_service(name);
        service.metadata.annotations = Some(
            [("hostile.wasm-ccm.io/error".to_string(), error.to_string())]
                .into_iter()
                .collect(),
        );
        bed.services()
            .create(&PostParams::default(), &service)
            .await
            .unwrap();
    }
    let manager = hostile(&bed, "service", |_| {});
    let calls = |path: &str| {
        let path = format!("/v1/{path}");
        bed.cloud
            .sim
            .state()
            .requests()
            .iter()
            .filter(|r| r.path == path)
            .count()
    };
    eventually("the first retry-after", WAIT, || async {
        (calls("retry-probe") > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let waiting = calls("retry-probe");
    assert!(
        (2..=7).contains(&waiting),
        "called about once a second in 4 s, not in a loop: {waiting}"
    );
    assert!(
        calls("other-probe") <= 3,
        "backed off from 5 s: {}",
        calls("other-probe")
    );
    let reasons = bed.event_reasons("waiting").await;
    assert!(
        !reasons.contains(&"SyncLoadBalancerFailed".to_string()),
        "no failure reported within the grace: {reasons:?}"
    );
    let waiting = bed.service("waiting").await.unwrap();
    assert!(
        waiting
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .is_empty(),
        "no condition within the grace"
    );

    let failing = eventually("the failing Service's condition", WAIT, || async {
        let service = bed.service("failing").await?;
        let conditions = service.status?.conditions?;
        conditions
            .into_iter()
            .find(|c| c.type_ == "wasm-ccm.io/LoadBalancerError")
    })
    .await;
    assert_eq!(failing.reason, "ProviderError");
    assert!(failing.message.len() <= 1500, "{}", failing.message.len());
    assert!(
        !failing.message.contains('\n'),
        "one line: {}",
        failing.message
    );
    assert!(
        failing.message.contains("\\n2026-01-01"),
        "{}",
        failing.message
    );
    let notes: Vec<String> = bed
        .events_about("failing")
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(!notes.is_empty());
    assert!(
        notes.iter().all(|n| n.len() <= 1024 && !n.contains('\n')),
        "{notes:?}"
    );
    manager.stop().await.unwrap();
}

//! The manager's informer cache against the API emulator: what it keeps of an object (not
//! its `managedFields`, nor of a Node's status what no controller reads). How often the
//! informers list and watch is tested in `cloud_node.rs`.

use e2e::testbed::Testbed;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use wasm_ccm::controllers::Informer;

/// A kubelet's Node, applied, is cached without its field managers and with only the
/// addresses and conditions of its status.
#[tokio::test]
async fn the_cache_keeps_objects_without_their_managed_fields_nor_unread_status() {
    let bed = Testbed::start().await;
    let nodes: Api<Node> = Api::all(bed.client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "applied", "labels": {"kubernetes.io/os": "linux"}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"cpu": "2"},
            "nodeInfo": {"machineID": "m", "systemUUID": "u", "bootID": "b",
                "kernelVersion": "6.1", "osImage": "Debian", "containerRuntimeVersion": "c",
                "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": "amd64"},
            "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1000}],
        },
    }))
    .unwrap();
    nodes
        .patch(
            "applied",
            &PatchParams::apply("kubelet"),
            &Patch::Apply(&node),
        )
        .await
        .unwrap();
    let stored = nodes.get("applied").await.unwrap();
    assert!(
        stored.metadata.managed_fields.is_some(),
        "the API server records the field manager"
    );

    let stop = CancellationToken::new();
    let informer = Informer::start(
        nodes.clone(),
        wasm_ccm::controllers::node_addresses,
        wasm_ccm::controllers::node_cached,
        stop.clone(),
    );
    informer.wait_synced().await;
    let cached = informer.get("applied").expect("cached");
    assert_eq!(cached.metadata.managed_fields, None);
    assert_eq!(cached.metadata.labels, stored.metadata.labels);
    let (status, stored_status) = (
        cached.status.clone().expect("a status"),
        stored.status.clone().expect("a stored status"),
    );
    assert_eq!(status.addresses, stored_status.addresses);
    assert_eq!(status.conditions, stored_status.conditions);
    assert!(stored_status.node_info.is_some() && stored_status.images.is_some());
    assert_eq!(
        (status.node_info, status.images, status.capacity),
        (None, None, None)
    );
    stop.cancel();
}

//! The manager's informer cache against the API emulator: what it keeps of an object (not
//! its `managedFields`). How often the informers list and watch is tested in `cloud_node.rs`.

use e2e::testbed::Testbed;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use tokio_util::sync::CancellationToken;
use wasm_ccm::controllers::Informer;

#[tokio::test]
async fn the_cache_keeps_objects_without_their_managed_fields() {
    let bed = Testbed::start().await;
    let nodes: Api<Node> = Api::all(bed.client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "applied", "labels": {"kubernetes.io/os": "linux"}},
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
    let informer = Informer::start(nodes, wasm_ccm::controllers::node_addresses, stop.clone());
    informer.wait_synced().await;
    let cached = informer.get("applied").expect("cached");
    assert_eq!(cached.metadata.managed_fields, None);
    assert_eq!(cached.metadata.labels, stored.metadata.labels);
    stop.cancel();
}

//! Merge, JSON and strategic merge patches on the lists a CCM patches:
//! taints, addresses, conditions, finalizers, ports; and server-side
//! apply's field ownership.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::{self, create_node, start, status};

#[tokio::test]
async fn taints_are_atomic_and_a_resource_version_in_a_patch_is_a_precondition() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let node = create_node(&cluster.client, "n1").await;
    let rv = node.resource_version().unwrap();
    let patch = json!({
        "metadata": {"resourceVersion": rv},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/shutdown", "effect": "NoSchedule"}]}
    });
    let patched = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(patch.clone()),
        )
        .await
        .unwrap();
    let taints = patched.spec.unwrap().taints.unwrap();
    assert_eq!(
        taints.len(),
        1,
        "spec.taints has no merge key: the list is replaced"
    );
    assert_eq!(taints[0].key, "node.cloudprovider.kubernetes.io/shutdown");

    let stale = status(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn addresses_and_conditions_merge_by_type_on_the_status_subresource() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    create_node(&cluster.client, "n1").await;
    let patched = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.9"}, {"type": "ExternalIP", "address": "203.0.113.9"}],
                "conditions": [{"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "ok",
                                "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}]
            }})),
        )
        .await
        .unwrap();
    let status = patched.status.unwrap();
    let addresses: Vec<(String, String)> = status
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert_eq!(
        addresses,
        [
            ("Hostname".to_owned(), "n1".to_owned()),
            ("InternalIP".to_owned(), "10.0.0.9".to_owned()),
            ("ExternalIP".to_owned(), "203.0.113.9".to_owned()),
        ],
        "merged by type in place; new items after the server items that precede them"
    );
    let conditions: Vec<String> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(conditions, ["NetworkUnavailable", "Ready"]);

    let reordered = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {
                "$setElementOrder/addresses": [{"type": "Hostname"}, {"type": "InternalIP"}, {"type": "ExternalIP"}],
                "addresses": [{"type": "ExternalIP", "$patch": "delete"}]
            }})),
        )
        .await
        .unwrap();
    let types: Vec<String> = reordered
        .status
        .unwrap()
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| a.type_)
        .collect();
    assert_eq!(types, ["Hostname", "InternalIP"]);
}

#[tokio::test]
async fn finalizers_merge_as_a_set_and_ports_by_port() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    services
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let add = json!({"metadata": {"finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}});
    services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(add.clone()),
        )
        .await
        .unwrap();
    let twice = services
        .patch("web", &PatchParams::default(), &Patch::Strategic(add))
        .await
        .unwrap();
    assert_eq!(
        twice.finalizers(),
        ["service.kubernetes.io/load-balancer-cleanup"]
    );

    let ports = services
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}),
            ),
        )
        .await
        .unwrap();
    let ports = ports.spec.unwrap().ports.unwrap();
    assert_eq!(ports.len(), 2, "ports merge on port");
    assert!(
        ports.iter().all(|p| p.node_port.is_some()),
        "new ports get node ports"
    );

    let removed = services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["service.kubernetes.io/load-balancer-cleanup"]}})),
        )
        .await
        .unwrap();
    assert!(
        removed.finalizers().is_empty(),
        "service status patches may change metadata, as the CCM relies on"
    );
}

#[tokio::test]
async fn merge_and_json_patches_follow_their_rfcs() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    create_node(&cluster.client, "n1").await;
    let merged = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"kubernetes.io/hostname": null, "a": "b"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels().len(), 1);
    assert_eq!(merged.labels()["a"], "b");

    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/a", "value": "b"},
        {"op": "add", "path": "/spec/providerID", "value": "sim://i-1"}
    ]))
    .unwrap();
    let json = nodes
        .patch("n1", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    assert_eq!(json.spec.unwrap().provider_id.as_deref(), Some("sim://i-1"));

    let failing: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/metadata/labels/a", "value": "zzz"}]),
    )
    .unwrap();
    let err = status(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    let missing = status(
        nodes
            .patch("nope", &PatchParams::default(), &Patch::Merge(json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(missing.code, 404);
}

#[tokio::test]
async fn an_apply_removes_what_its_manager_stopped_applying_and_no_one_else_owns() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let apply = |manager: &'static str, data: serde_json::Value| {
        let maps = maps.clone();
        async move {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data});
            maps.patch("cfg", &PatchParams::apply(manager), &Patch::Apply(&body))
                .await
                .unwrap()
                .data
                .unwrap_or_default()
        }
    };
    let keys = |data: std::collections::BTreeMap<String, String>| {
        data.into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(apply("helm", json!({"a": "1", "b": "2"})).await),
        ["a=1", "b=2"]
    );
    assert_eq!(
        keys(apply("ops", json!({"c": "3"})).await),
        ["a=1", "b=2", "c=3"]
    );
    // `helm` owns `a` and `b` only: it may drop `b`, never `c`.
    assert_eq!(
        keys(apply("helm", json!({"a": "1", "c": "3"})).await),
        ["a=1", "c=3"]
    );
    assert_eq!(keys(apply("helm", json!({"a": "1"})).await), ["a=1", "c=3"]);
    let unchanged = maps.get("cfg").await.unwrap().resource_version();
    apply("helm", json!({"a": "1"})).await;
    assert_eq!(
        maps.get("cfg").await.unwrap().resource_version(),
        unchanged,
        "an apply that changes nothing writes nothing"
    );

    // A write that changes `a` takes it from `helm`, which then leaves it;
    // owning nothing, `helm` loses its entry until it applies again.
    maps.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "edited"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        keys(apply("helm", json!({"z": "26"})).await),
        ["a=edited", "c=3", "z=26"]
    );
    let managers: Vec<(String, String)> = maps
        .get("cfg")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert_eq!(
        managers,
        [
            ("ops".into(), "Apply".into()),
            ("helm".into(), "Apply".into())
        ]
    );
}

//! What a real apiserver rejects, the emulator rejects the same way: 422
//! Invalid with field causes, and nothing stored.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::{self, create_node, start, status};

#[tokio::test]
async fn node_rules_taints_names_and_provider_id() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let mut bad = harness::node("n1");
    bad.spec.as_mut().unwrap().taints.as_mut().unwrap()[0].effect = "Sometimes".into();
    let err = status(
        nodes
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "Node \"n1\" is invalid: metadata.taints[0].effect: Unsupported value: \"Sometimes\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
    );
    let causes = err.details.unwrap().causes;
    assert_eq!(causes[0].field, "metadata.taints[0].effect");
    assert_eq!(causes[0].reason, "FieldValueNotSupported");
    assert!(
        nodes.get_opt("n1").await.unwrap().is_none(),
        "nothing stored"
    );

    let err = status(
        nodes
            .create(&PostParams::default(), &harness::node("Bad_Name"))
            .await
            .unwrap_err(),
    );
    assert!(err.message.starts_with("Node \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", err.message);

    create_node(&cluster.client, "n1").await;
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"providerID": "sim://i-1"}})),
        )
        .await
        .unwrap();
    let err = status(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": "sim://i-2"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"n1\" is invalid: spec.providerID: Forbidden: node updates may not change providerID except from \"\" to valid"
    );
    let err = status(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"bad key": "x"}}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let err = status(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["not a finalizer"]}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message
            .contains("metadata.finalizers: Invalid value: \"not a finalizer\""),
        "{}",
        err.message
    );
    let duplicate = status(
        nodes
            .patch_status("n1", &PatchParams::default(), &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.1"}
            ]}})))
            .await
            .unwrap_err(),
    );
    assert!(
        duplicate
            .message
            .contains("status.addresses[1]: Duplicate value"),
        "{}",
        duplicate.message
    );
}

#[tokio::test]
async fn service_rules_ports_types_and_set_once_fields() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    let err = status(
        services
            .create(&PostParams::default(), &harness::load_balancer("1web"))
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.contains("a DNS-1035 label must consist of"),
        "{}",
        err.message
    );

    let mut bad = harness::load_balancer("web");
    bad.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 70000;
    bad.spec.as_mut().unwrap().type_ = Some("Magic".into());
    let err = status(
        services
            .create(&PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    let fields: Vec<String> = err
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(fields.contains(&"spec.type".to_owned()), "{fields:?}");
    assert!(
        fields.contains(&"spec.ports[0].port".to_owned()),
        "{fields:?}"
    );

    let mut classed = harness::load_balancer("web");
    classed.spec.as_mut().unwrap().load_balancer_class = Some("example.com/internal".into());
    services
        .create(&PostParams::default(), &classed)
        .await
        .unwrap();
    let err = status(
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"loadBalancerClass": "example.com/other"}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.contains(
            "spec.loadBalancerClass: Invalid value: \"example.com/other\": may not change once set"
        ),
        "{}",
        err.message
    );
    let err = status(
        services
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"clusterIP": "10.96.0.99", "clusterIPs": ["10.96.0.99"]}}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.contains("may not change once set"),
        "{}",
        err.message
    );

    let err = status(
        services
            .patch_status(
                "kubernetes",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message
            .contains("may only be used when `spec.type` is 'LoadBalancer'"),
        "{}",
        err.message
    );
    let err = status(
        services
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"loadBalancer": {"ingress": [{"ip": "not-an-ip"}]}}}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message
            .contains("status.loadBalancer.ingress[0].ip: Invalid value"),
        "{}",
        err.message
    );

    let mut taken = harness::load_balancer("other");
    taken.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].node_port = services
        .get("web")
        .await
        .unwrap()
        .spec
        .unwrap()
        .ports
        .unwrap()[0]
        .node_port;
    let err = status(
        services
            .create(&PostParams::default(), &taken)
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.contains("provided port is already allocated"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn config_maps_reject_bad_keys_and_changes_when_immutable() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"bad key": "v"}}))
            .unwrap();
    assert_eq!(
        status(maps.create(&PostParams::default(), &bad).await.unwrap_err()).code,
        422
    );
    let frozen: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "b"}, "data": {"k": "v"}, "immutable": true}),
    )
    .unwrap();
    maps.create(&PostParams::default(), &frozen).await.unwrap();
    let err = status(
        maps.patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message
            .contains("data: Forbidden: field is immutable when `immutable` is set"),
        "{}",
        err.message
    );
}

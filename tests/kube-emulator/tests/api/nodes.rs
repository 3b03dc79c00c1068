//! Nodes as a real kube-apiserver keeps them: the admission taint every new
//! Node gets, `podCIDR` and `podCIDRs` in step, `allocatable` defaulted from
//! `capacity`, `externalID` and `uid` immutable, and `$patch` directives in
//! the taint list (which has no merge key) kept as sent.

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{self, Cluster, create_node, start, status};

const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// Sends `body` with `method` to `path`: the status code, the warnings and the body.
async fn send(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Vec<String>, Value) {
    let answer = harness::send(cluster, method, path, content_type, &body.to_string()).await;
    (answer.code, answer.warnings, answer.body)
}

fn taints(node: &Node) -> Vec<(String, Option<String>, String)> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect()
}

fn pod_cidrs(node: &Node) -> (Option<String>, Option<Vec<String>>) {
    let spec = node.spec.clone().unwrap_or_default();
    (spec.pod_cidr, spec.pod_cidrs)
}

#[tokio::test]
async fn admission_taints_every_new_node_not_ready() {
    let cluster = start().await;
    let node = create_node(&cluster.client, "n1").await;
    assert_eq!(
        taints(&node),
        [
            (
                "node.cloudprovider.kubernetes.io/uninitialized".to_owned(),
                Some("true".to_owned()),
                "NoSchedule".to_owned()
            ),
            (NOT_READY.to_owned(), None, "NoSchedule".to_owned()),
        ],
        "appended after the kubelet's taints, without a value"
    );

    // A kubelet that registers with the taint already (any value) keeps its own.
    let mut own: Node = harness::node("n2");
    own.spec.as_mut().unwrap().taints = Some(vec![
        serde_json::from_value(
            json!({"key": NOT_READY, "value": "kubelet", "effect": "NoSchedule"}),
        )
        .unwrap(),
        serde_json::from_value(json!({"key": NOT_READY, "effect": "NoExecute"})).unwrap(),
    ]);
    let created = Api::<Node>::all(cluster.client.clone())
        .create(&PostParams::default(), &own)
        .await
        .unwrap();
    assert_eq!(
        taints(&created),
        [
            (
                NOT_READY.to_owned(),
                Some("kubelet".to_owned()),
                "NoSchedule".to_owned()
            ),
            (NOT_READY.to_owned(), None, "NoExecute".to_owned()),
        ]
    );

    // Only creation is admitted so: a taint removed later stays removed.
    let nodes = Api::<Node>::all(cluster.client.clone());
    let cleared = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
    assert!(taints(&cleared).is_empty());
}

#[tokio::test]
async fn pod_cidr_and_pod_cidrs_are_kept_in_step_and_pod_cidr_wins() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let with = |name: &str, spec: Value| -> Node {
        let mut node = serde_json::to_value(harness::node(name)).unwrap();
        for (key, value) in spec.as_object().unwrap() {
            node["spec"][key] = value.clone();
        }
        serde_json::from_value(node).unwrap()
    };
    let single = nodes
        .create(
            &PostParams::default(),
            &with("single", json!({"podCIDR": "10.244.1.0/24"})),
        )
        .await
        .unwrap();
    assert_eq!(
        pod_cidrs(&single),
        (
            Some("10.244.1.0/24".into()),
            Some(vec!["10.244.1.0/24".into()])
        ),
        "podCIDR alone fills podCIDRs, which route controllers read"
    );
    let list = nodes
        .create(
            &PostParams::default(),
            &with(
                "list",
                json!({"podCIDRs": ["10.244.2.0/24", "fd00:2::/64"]}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        pod_cidrs(&list),
        (
            Some("10.244.2.0/24".into()),
            Some(vec!["10.244.2.0/24".into(), "fd00:2::/64".into()])
        )
    );
    let differ = nodes
        .create(
            &PostParams::default(),
            &with(
                "differ",
                json!({"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.4.0/24", "fd00:4::/64"]}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        pod_cidrs(&differ),
        (
            Some("10.244.3.0/24".into()),
            Some(vec!["10.244.3.0/24".into()])
        ),
        "a podCIDR that does not lead the list replaces it"
    );

    // Patching podCIDRs alone is ignored: the stored podCIDR still wins.
    let patched = nodes
        .patch(
            "single",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"podCIDRs": ["10.244.9.0/24"]}})),
        )
        .await
        .unwrap();
    assert_eq!(pod_cidrs(&patched), pod_cidrs(&single));
    assert_eq!(
        patched.resource_version(),
        single.resource_version(),
        "nothing written"
    );
    // A node without CIDRs gets them from podCIDR alone, once.
    create_node(&cluster.client, "later").await;
    let assigned = nodes
        .patch(
            "later",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"podCIDR": "10.244.5.0/24"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        pod_cidrs(&assigned).1,
        Some(vec!["10.244.5.0/24".to_owned()])
    );
    let err = status(
        nodes
            .patch(
                "later",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"podCIDR": "10.244.6.0/24"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"later\" is invalid: spec.podCIDRs: Forbidden: node updates may not change podCIDR except from \"\" to valid"
    );

    let err = status(
        nodes
            .create(
                &PostParams::default(),
                &with(
                    "two-v4",
                    json!({"podCIDRs": ["10.244.7.0/24", "10.244.8.0/24"]}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"two-v4\" is invalid: spec.podCIDRs: Invalid value: []string{\"10.244.7.0/24\", \"10.244.8.0/24\"}: may specify no more than one CIDR for each IP family"
    );
    let err = status(
        nodes
            .create(
                &PostParams::default(),
                &with("bad", json!({"podCIDR": "10.244.0.0/33"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"bad\" is invalid: spec.podCIDRs[0]: Invalid value: \"10.244.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
    );
    assert!(nodes.get_opt("bad").await.unwrap().is_none());
}

#[tokio::test]
async fn allocatable_defaults_to_capacity_and_both_are_validated() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let mut node = serde_json::to_value(harness::node("n1")).unwrap();
    node["status"]["capacity"] = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
    let created = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .unwrap();
    let node_status = created.status.unwrap();
    assert_eq!(node_status.allocatable, node_status.capacity);

    // A status write that sets only capacity gets allocatable from it too.
    let written = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/status/capacity", "value": {"cpu": "8"}},
                    {"op": "remove", "path": "/status/allocatable"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let node_status = written.status.unwrap();
    assert_eq!(
        serde_json::to_value(&node_status.allocatable).unwrap(),
        json!({"cpu": "8"})
    );

    let mut negative = serde_json::to_value(harness::node("n2")).unwrap();
    negative["status"]["capacity"] = json!({"cpu": "-1"});
    let err = status(
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(negative).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"n2\" is invalid: [status.capacity.cpu: Invalid value: \"-1\": must be greater than or equal to 0, status.allocatable.cpu: Invalid value: \"-1\": must be greater than or equal to 0]",
        "the defaulted allocatable is validated as well"
    );

    let mut malformed = serde_json::to_value(harness::node("n3")).unwrap();
    malformed["status"]["capacity"] = json!({"cpu": "4 cores"});
    let (code, _, body) = send(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/nodes",
        "application/json",
        &malformed,
    )
    .await;
    assert_eq!(code, 400, "a quantity that does not parse fails decoding");
    assert_eq!(
        body["message"],
        "Node in version \"v1\" cannot be handled as a Node: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}

#[tokio::test]
async fn external_id_is_deprecated_and_immutable() {
    let cluster = start().await;
    let mut node = serde_json::to_value(harness::node("n1")).unwrap();
    node["spec"]["externalID"] = json!("i-123");
    let (code, warnings, _) = send(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/nodes",
        "application/json",
        &node,
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        ["299 - \"spec.externalID: this field is deprecated, and is unused by Kubernetes\""]
    );
    let err = status(
        Api::<Node>::all(cluster.client.clone())
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"externalID": "i-456"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Node \"n1\" is invalid: spec.externalID: Forbidden: may not be updated"
    );
}

#[tokio::test]
async fn a_patched_uid_is_invalid_while_a_put_uid_is_a_precondition() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let node = create_node(&cluster.client, "n1").await;
    let other = "0b0b0b0b-0000-4000-8000-000000000000";
    let err = status(
        nodes
            .patch(
                "n1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"uid": other}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        format!(
            "Node \"n1\" is invalid: metadata.uid: Invalid value: \"{other}\": field is immutable"
        )
    );

    let mut put = node.clone();
    put.metadata.uid = Some(other.into());
    let err = status(
        nodes
            .replace("n1", &PostParams::default(), &put)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        format!(
            "Operation cannot be fulfilled on nodes \"n1\": Precondition failed: UID in precondition: {other}, UID in object meta: {}",
            node.uid().unwrap()
        )
    );

    // The same for every kind.
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "m"}})).unwrap(),
    )
    .await
    .unwrap();
    let err = status(
        maps.patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"uid": other}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn a_delete_directive_in_a_taint_keeps_the_taint_with_a_warning() {
    let cluster = start().await;
    create_node(&cluster.client, "n1").await;
    let patch = json!({"spec": {"taints": [
        {"key": "example.com/a", "effect": "NoSchedule", "$patch": "delete"},
        {"key": "example.com/b", "effect": "NoSchedule"}
    ]}});
    let (code, warnings, body) = send(
        &cluster,
        reqwest::Method::PATCH,
        "/api/v1/nodes/n1",
        "application/strategic-merge-patch+json",
        &patch,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["spec"]["taints"],
        json!([
            {"key": "example.com/a", "effect": "NoSchedule"},
            {"key": "example.com/b", "effect": "NoSchedule"}
        ]),
        "taints have no merge key: the list is replaced as sent"
    );
    assert_eq!(
        warnings,
        ["299 - \"unknown field \\\"spec.taints[0].$patch\\\"\""]
    );
}

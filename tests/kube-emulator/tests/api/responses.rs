//! Response shapes as a real kube-apiserver v1.32 gives them: what Go's
//! `omitempty` leaves out of an object, validation messages that print Go
//! values, and `PartialObjectMetadata[List]` for metadata clients.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Cluster, get, http_client, send, start, within};

const MAPS: &str = "/api/v1/namespaces/default/configmaps";

fn has_metadata_field(object: &Value, field: &str) -> bool {
    object["metadata"].get(field).is_some()
}

async fn put(cluster: &Cluster, path: &str, body: &Value) -> Value {
    let answer = send(
        cluster,
        Method::PUT,
        path,
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(answer.code, 200, "{}", answer.body);
    answer.body
}

#[tokio::test]
async fn the_last_finalizer_removed_leaves_no_finalizers_field() {
    // ObjectMeta's finalizers, labels, annotations and ownerReferences are
    // `omitempty`: once the last one goes, upstream stores and answers the
    // object without the field, whether a PUT or a patch removed it.
    let cluster = start().await;
    let created = send(
        &cluster,
        Method::POST,
        MAPS,
        "application/json",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "held", "finalizers": ["example.com/hold"], "labels": {"a": "b"}}})
        .to_string(),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);

    let mut released = created.body.clone();
    released["metadata"]["finalizers"] = json!([]);
    released["metadata"]["labels"] = json!({});
    released["metadata"]["annotations"] = json!({});
    let answered = put(&cluster, &format!("{MAPS}/held"), &released).await;
    for field in ["finalizers", "labels", "annotations"] {
        assert!(
            !has_metadata_field(&answered, field),
            "PUT answer: {answered}"
        );
    }
    let stored = get(&cluster, &format!("{MAPS}/held")).await.body;
    assert!(
        !has_metadata_field(&stored, "finalizers"),
        "stored: {stored}"
    );

    let mut held = stored.clone();
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    put(&cluster, &format!("{MAPS}/held"), &held).await;
    for (content_type, patch) in [
        (
            "application/json-patch+json",
            r#"[{"op": "remove", "path": "/metadata/finalizers/0"}]"#,
        ),
        (
            "application/merge-patch+json",
            r#"{"metadata": {"finalizers": []}}"#,
        ),
        (
            "application/strategic-merge-patch+json",
            r#"{"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}}"#,
        ),
    ] {
        let answer = send(
            &cluster,
            Method::PATCH,
            &format!("{MAPS}/held"),
            content_type,
            patch,
        )
        .await;
        assert_eq!(answer.code, 200, "{content_type}: {}", answer.body);
        assert!(
            !has_metadata_field(&answer.body, "finalizers"),
            "{content_type}: {}",
            answer.body
        );
        put(&cluster, &format!("{MAPS}/held"), &held_again(&answer.body)).await;
    }
}

/// The object with its finalizer back, for the next removal.
fn held_again(object: &Value) -> Value {
    let mut object = object.clone();
    object["metadata"]["finalizers"] = json!(["example.com/hold"]);
    object
}

#[tokio::test]
async fn a_changed_cluster_ip_is_reported_with_the_new_ips_in_go_syntax() {
    // validateUpgradeDowngradeClusterIPs: field.Invalid on
    // spec.clusterIPs[0] with the new `[]string` clusterIPs, printed %#v.
    let cluster = start().await;
    let path = "/api/v1/namespaces/default/services";
    let created = send(
        &cluster,
        Method::POST,
        path,
        "application/json",
        &json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                "spec": {"clusterIP": "10.96.0.40", "ports": [{"port": 80}]}})
        .to_string(),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let mut moved = created.body.clone();
    moved["spec"]["clusterIP"] = json!("10.96.0.50");
    moved["spec"]["clusterIPs"] = json!(["10.96.0.50"]);
    let answer = send(
        &cluster,
        Method::PUT,
        &format!("{path}/web"),
        "application/json",
        &moved.to_string(),
    )
    .await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        message.contains(
            r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.0.50"}: may not change once set"#
        ),
        "{message}"
    );

    // An old client changes only the singular field: normalizeClusterIPs carries it into
    // clusterIPs, so the message names the new value, not the old one.
    let mut singular = created.body.clone();
    singular["spec"]["clusterIP"] = json!("10.96.0.60");
    let answer = send(
        &cluster,
        Method::PUT,
        &format!("{path}/web"),
        "application/json",
        &singular.to_string(),
    )
    .await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    let message = answer.body["message"].as_str().unwrap();
    assert!(
        message.contains(r#"Invalid value: []string{"10.96.0.60"}: may not change once set"#),
        "{message}"
    );
}

#[tokio::test]
async fn metadata_clients_get_partial_objects_lists_and_watch_events() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    for name in ["a", "b"] {
        let map = json!({"metadata": {"name": name, "labels": {"app": "web"}}, "data": {"k": "v"}});
        maps.create(
            &PostParams::default(),
            &serde_json::from_value(map).unwrap(),
        )
        .await
        .unwrap();
    }
    let one = maps.get_metadata("a").await.unwrap();
    let types = one.types.as_ref().unwrap();
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    assert_eq!(one.metadata.labels.as_ref().unwrap()["app"], "web");

    let page = maps
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap();
    let types = page.types.clone();
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadataList")
    );
    assert_eq!(page.items.len(), 1);
    assert!(
        page.metadata.continue_.is_some(),
        "the list keeps its paging"
    );
    assert_eq!(page.metadata.remaining_item_count, Some(1));
    assert_eq!(
        page.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );

    let mut events = maps
        .watch_metadata(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    match within(5, events.try_next()).await.unwrap().unwrap() {
        WatchEvent::Added(object) => {
            assert_eq!(object.metadata.name.as_deref(), Some("a"));
            assert_eq!(
                object.types.as_ref().map(|t| t.kind.as_str()),
                Some("PartialObjectMetadata")
            );
        }
        other => panic!("unexpected {other:?}"),
    }

    // The other form than the endpoint returns negotiates, then fails
    // converting, as upstream's transform does, naming the internal type.
    let ask = |path: &str, accept: &str| {
        http_client(&cluster.emulator)
            .get(format!("{}{path}", cluster.emulator.url()))
            .bearer_auth("kube-emulator")
            .header("accept", accept)
            .send()
    };
    for (path, accept, message) in [
        (
            MAPS.to_owned(),
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)",
        ),
        (
            format!("{MAPS}/a"),
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            "you requested PartialObjectMetadataList, but the requested object is not a list (*core.ConfigMap)",
        ),
        (
            "/apis/apps/v1/deployments".to_owned(),
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json",
            "you requested PartialObjectMetadata, but the requested object is a list (*apps.DeploymentList)",
        ),
    ] {
        let response = ask(&path, accept).await.unwrap();
        assert_eq!(response.status(), 406, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": message, "reason": "NotAcceptable", "code": 406})
        );
    }
}

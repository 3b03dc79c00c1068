//! Events through both APIs, and kube-runtime's event recorder.

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::harness::{create_node, send, start, status};

#[tokio::test]
async fn the_recorder_writes_events_visible_through_both_apis() {
    let cluster = start().await;
    let node = create_node(&cluster.client, "n1").await;
    let recorder = Recorder::new(
        cluster.client.clone(),
        Reporter {
            controller: "cloud-node-controller".into(),
            instance: None,
        },
    );
    let reference: ObjectReference = node.object_ref(&());
    let event = RecordedEvent {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("Node synced successfully".into()),
        action: "Sync".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();

    let new_api = Api::<Event>::namespaced(cluster.client.clone(), "default");
    let events = new_api
        .list(&ListParams::default().fields("regarding.name=n1,reason=Synced"))
        .await
        .unwrap();
    assert_eq!(events.items.len(), 1, "the repeat became a series");
    assert_eq!(events.items[0].series.as_ref().map(|s| s.count), Some(2));

    let core = Api::<CoreEvent>::namespaced(cluster.client.clone(), "default");
    let events = core
        .list(&ListParams::default().fields("involvedObject.kind=Node,involvedObject.name=n1"))
        .await
        .unwrap();
    assert_eq!(events.items.len(), 1);
    let seen = &events.items[0];
    assert_eq!(seen.message.as_deref(), Some("Node synced successfully"));
    assert_eq!(
        seen.reporting_component.as_deref(),
        Some("cloud-node-controller")
    );
    assert_eq!(seen.involved_object.name.as_deref(), Some("n1"));
    assert!(seen.name_any().starts_with("n1."));
}

#[tokio::test]
async fn events_are_validated_per_api_version() {
    let cluster = start().await;
    let new_api = Api::<Event>::namespaced(cluster.client.clone(), "default");
    let missing: Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "regarding": {"kind": "Node", "name": "n1"},
        "type": "Normal"
    }))
    .unwrap();
    let err = status(
        new_api
            .create(&PostParams::default(), &missing)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let fields: Vec<String> = err
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(
        fields.contains(&"reportingController".to_owned()),
        "{fields:?}"
    );
    assert!(fields.contains(&"action".to_owned()), "{fields:?}");

    let core = Api::<CoreEvent>::namespaced(cluster.client.clone(), "default");
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e2"},
        "involvedObject": {"kind": "Service", "namespace": "default", "name": "web"},
        "reason": "EnsuringLoadBalancer",
        "message": "Ensuring load balancer",
        "type": "Normal",
        "source": {"component": "service-controller"},
        "count": 1
    }))
    .unwrap();
    core.create(&PostParams::default(), &legacy).await.unwrap();
    let mismatched: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e3"},
        "involvedObject": {"kind": "Service", "namespace": "other", "name": "web"}
    }))
    .unwrap();
    let err = status(
        core.create(&PostParams::default(), &mismatched)
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.contains(
            "involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"
        ),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_event_time_without_six_fractional_digits_is_refused() {
    // eventTime is a metav1.MicroTime in both APIs: decoded with
    // RFC3339Micro, so whole seconds fail JSON decoding (400).
    let cluster = start().await;
    let answer = send(
        &cluster,
        reqwest::Method::POST,
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "application/json",
        &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
                "eventTime": "2025-01-01T00:00:00Z", "regarding": {"kind": "Node", "name": "n1"},
                "reportingController": "example.com/ccm", "reportingInstance": "ccm-1",
                "action": "Sync", "reason": "Synced", "type": "Normal"})
        .to_string(),
    )
    .await;
    assert_eq!(answer.code, 400, "{}", answer.body);
    assert_eq!(
        answer.body["message"],
        r#"Event in version "v1" cannot be handled as a Event: parsing time "2025-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
    );
}

const EVENTS_V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

#[tokio::test]
async fn events_k8s_io_creates_get_every_error_of_validate_event_create() {
    let cluster = start().await;
    let long = |n: usize| "x".repeat(n);
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "regarding": {"kind": "Node", "name": "n1"},
        "reportingController": "not a qualified name", "reportingInstance": long(129),
        "action": long(129), "reason": "", "note": long(1025), "type": "Info",
        "series": {"lastObservedTime": "2025-01-01T00:00:01.000000Z"},
        "deprecatedCount": 3, "deprecatedSource": {"component": "kubelet"},
        "deprecatedFirstTimestamp": "2025-01-01T00:00:00Z"
    });
    let answer = send(
        &cluster,
        reqwest::Method::POST,
        EVENTS_V1,
        "application/json",
        &event.to_string(),
    )
    .await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    let expected = [
        r#"reportingController: Invalid value: "not a qualified name": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
        r#"reportingInstance: Invalid value: "": can have at most 128 characters"#,
        r#"action: Invalid value: "": can have at most 128 characters"#,
        "reason: Required value",
        r#"message: Invalid value: "": can have at most 1024 characters"#,
        r#"series.count: Invalid value: "": should be at least 2"#,
        r#"type: Invalid value: "": has invalid value: Info"#,
        r#"firstTimestamp: Invalid value: "": needs to be unset"#,
        r#"count: Invalid value: "": needs to be unset"#,
        r#"source: Invalid value: "": needs to be unset"#,
    ];
    assert_eq!(
        answer.body["message"],
        format!(
            "Event.events.k8s.io \"e1\" is invalid: [{}]",
            expected.join(", ")
        )
    );

    // Through core/v1 only the legacy rules apply, and they name the
    // controller by that version's field.
    let core = json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e2"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "involvedObject": {"kind": "Node", "name": "n1"},
        "reportingInstance": "ccm-0", "action": "Sync", "reason": "Synced", "type": "Info"
    });
    let answer = send(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/namespaces/default/events",
        "application/json",
        &core.to_string(),
    )
    .await;
    assert_eq!(
        answer.body["details"]["causes"][0]["field"], "reportingComponent",
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn events_k8s_io_updates_may_change_only_the_series() {
    let cluster = start().await;
    let events = Api::<Event>::namespaced(cluster.client.clone(), "default");
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "e1"},
        "eventTime": "2025-01-01T00:00:00.000000Z",
        "regarding": {"kind": "Node", "name": "n1"},
        "reportingController": "example.com/ccm", "reportingInstance": "ccm-0",
        "action": "Sync", "reason": "Synced", "note": "synced", "type": "Normal"
    }))
    .unwrap();
    events.create(&PostParams::default(), &event).await.unwrap();
    let series = json!({"series": {"count": 2, "lastObservedTime": "2025-01-01T00:01:00.000000Z"}});
    events
        .patch("e1", &PatchParams::default(), &Patch::Merge(&series))
        .await
        .unwrap();
    let changed = json!({
        "action": "Resync", "reportingController": "example.com/other",
        "reportingInstance": "ccm-1", "reason": null, "eventTime": "2025-01-01T00:00:00.000001Z"
    });
    let err = status(
        events
            .patch("e1", &PatchParams::default(), &Patch::Merge(&changed))
            .await
            .unwrap_err(),
    );
    let fields: Vec<String> = err
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let immutable = "field is immutable";
    assert_eq!(
        fields,
        [
            "reason: Required value".to_owned(),
            format!(r#"reason: Invalid value: "": {immutable}"#),
            format!(r#"reason: Invalid value: "": {immutable}"#),
            format!(r#"eventTime: Invalid value: "2025-01-01T00:00:00.000001Z": {immutable}"#),
            format!(r#"action: Invalid value: "Resync": {immutable}"#),
            format!(r#"reportingController: Invalid value: "example.com/other": {immutable}"#),
            format!(r#"reportingInstance: Invalid value: "ccm-1": {immutable}"#),
        ]
    );
}

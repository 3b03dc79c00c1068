//! Events through both APIs, and kube-runtime's event recorder.

use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
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

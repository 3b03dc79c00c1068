//! Fault injection and request counting, from the library and over the
//! admin endpoint.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube_emulator::FailRule;
use serde_json::json;

use crate::harness::{create_node, http_client, start, status};

#[tokio::test]
async fn injected_failures_latency_and_conflicts_hit_the_next_requests() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    create_node(&cluster.client, "n1").await;
    let faults = cluster.emulator.faults();

    faults.fail_next(
        FailRule::new(2, 500)
            .method("GET")
            .path_contains("/nodes/n1"),
    );
    nodes
        .list(&ListParams::default())
        .await
        .expect("lists do not match the rule");
    for _ in 0..2 {
        let err = status(nodes.get("n1").await.unwrap_err());
        assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    }
    nodes.get("n1").await.expect("the rule is used up");

    faults.set_latency(Duration::from_millis(150));
    let started = Instant::now();
    nodes.get("n1").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
    faults.set_latency(Duration::ZERO);

    faults.conflict_next_updates("nodes", 1);
    let patch = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    let err = status(
        nodes
            .patch("n1", &PatchParams::default(), &patch)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    nodes
        .patch("n1", &PatchParams::default(), &patch)
        .await
        .unwrap();

    let counts = cluster.emulator.requests();
    assert_eq!(counts.get("get", "nodes"), 4);
    assert_eq!(counts.get("list", "nodes"), 1);
    assert_eq!(counts.get("patch", "nodes"), 2);
    assert_eq!(counts.get("create", "nodes"), 1);
}

#[tokio::test]
async fn the_admin_endpoint_drives_faults_and_reports_requests_per_user_agent() {
    let cluster = start().await;
    create_node(&cluster.client, "n1").await;
    let http = http_client(&cluster.emulator);
    let url = cluster.emulator.url();
    let state: serde_json::Value = http
        .post(format!("{url}/_emulator/faults"))
        .json(&json!({"failNext": {"count": 1, "status": 503, "method": "DELETE"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["failures"][0]["status"], 503);
    let deleted = http
        .delete(format!("{url}/api/v1/nodes/n1"))
        .bearer_auth("kube-emulator")
        .header("user-agent", "cleaner/1.0 (linux/amd64) node-cleaner")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 503);
    let body: serde_json::Value = deleted.json().await.unwrap();
    assert_eq!(body["reason"], "ServiceUnavailable");

    let cleared = http
        .post(format!("{url}/_emulator/faults"))
        .json(&json!("clear"))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 200);
    let counts: serde_json::Value = http
        .get(format!("{url}/_emulator/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counts["counts"]["delete nodes"], 1);
    assert_eq!(counts["counts"]["create nodes"], 1);
    assert_eq!(
        counts["byUserAgent"]["cleaner/1.0 (linux/amd64) node-cleaner"]["delete nodes"], 1,
        "each request is counted under its user agent: {counts}"
    );
    let bad = http
        .post(format!("{url}/_emulator/faults"))
        .json(&json!({"nonsense": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

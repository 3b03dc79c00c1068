//! Instances: creation defaults, conflicts, lifecycle, soft deletion.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::Harness;

#[tokio::test]
async fn create_fills_in_defaults() {
    let h = Harness::start().await;
    let created = h
        .post(
            "/v1/instances",
            json!({"name": "node-1", "instance_type": "sim.small", "zone": "sim-central-1a"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.json);
    let instance = &created.json;
    let id = instance["id"].as_str().expect("id");
    assert!(id.starts_with("i-") && id.len() == 10, "{id}");
    assert!(id[2..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert_eq!(instance["status"], "running");
    assert_eq!(instance["region"], "sim-central-1");
    assert_eq!(instance["hostname"], "node-1");
    assert!(
        instance["private_ip"]
            .as_str()
            .expect("private_ip")
            .starts_with("10.0.")
    );
    assert_eq!(instance["public_ip"], json!(null));
    assert_eq!(h.get(&format!("/v1/instances/{id}")).await.json, *instance);
}

#[tokio::test]
async fn duplicate_live_name_conflicts() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let body = json!({"name": "node-1", "instance_type": "sim.small", "zone": "z"});
    let duplicate = h.post("/v1/instances", body.clone()).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.code(), "conflict");
    assert!(
        duplicate.message().contains(&node.id),
        "{}",
        duplicate.message()
    );

    assert_eq!(
        h.delete(&format!("/v1/instances/{}", node.id)).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        h.post("/v1/instances", body).await.status,
        StatusCode::CREATED,
        "name is free once deleted"
    );
}

#[tokio::test]
async fn explicit_addresses_are_validated() {
    let h = Harness::start().await;
    let bad = h
        .post(
            "/v1/instances",
            json!({"name": "n", "instance_type": "t", "zone": "z", "public_ipv6": "1.2.3.4"}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.message().starts_with("public_ipv6:"),
        "{}",
        bad.message()
    );

    let body = json!({"name": "n", "instance_type": "t", "zone": "z", "private_ip": "10.9.0.1",
        "public_ip": "203.0.113.7", "public_ipv6": "2001:db8::7", "hostname": "n.example"});
    let created = h.post("/v1/instances", body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.json);
    assert_eq!(created.json["public_ipv6"], "2001:db8::7");
    assert_eq!(created.json["hostname"], "n.example");

    let clash = h
        .post(
            "/v1/instances",
            json!({"name": "m", "instance_type": "t", "zone": "z", "private_ip": "10.9.0.1"}),
        )
        .await;
    assert_eq!(clash.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn stop_start_and_delete() {
    let h = Harness::start().await;
    let id = h.instance("node-1").id;
    let path = format!("/v1/instances/{id}");

    assert_eq!(
        h.post(&format!("{path}/stop"), json!({})).await.json["status"],
        "stopped"
    );
    assert_eq!(
        h.post(&format!("{path}/start"), json!({})).await.json["status"],
        "running"
    );

    assert_eq!(h.delete(&path).await.status, StatusCode::NO_CONTENT);
    let deleted = h.get(&path).await;
    assert_eq!(
        deleted.status,
        StatusCode::OK,
        "deleted instances stay readable"
    );
    assert_eq!(deleted.json["status"], "deleted");
    assert_eq!(h.get("/v1/instances").await.json["instances"], json!([]));
    assert_eq!(
        h.post(&format!("{path}/start"), json!({})).await.status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        h.delete(&path).await.status,
        StatusCode::NO_CONTENT,
        "delete is idempotent"
    );
}

#[tokio::test]
async fn list_filters_by_name_and_unknown_ids_are_404() {
    let h = Harness::start().await;
    h.instance("a");
    let b = h.instance("b");
    let listed = h.get("/v1/instances?name=b").await.json;
    assert_eq!(listed["instances"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["instances"][0]["id"], b.id.as_str());
    assert_eq!(
        h.get("/v1/instances").await.json["instances"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    let missing = h.get("/v1/instances/i-00000000").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.code(), "not_found");
}

#[tokio::test]
async fn malformed_json_is_400_and_unknown_fields_422() {
    let h = Harness::start().await;
    let malformed = h
        .http
        .post(format!("{}/v1/instances", h.sim.url()))
        .bearer_auth(crate::harness::TOKEN)
        .body("{\"name\": ")
        .send()
        .await
        .expect("send");
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = malformed.json().await.expect("json error body");
    assert_eq!(body["error"]["code"], "invalid");

    let typo = h
        .post(
            "/v1/instances",
            json!({"name": "n", "instance_type": "t", "zone": "z", "privateIp": "10.0.0.9"}),
        )
        .await;
    assert_eq!(typo.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(typo.message().contains("privateIp"), "{}", typo.message());
}

//! Routes: CIDR validation, per-cluster conflicts, computed blackholes.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::Harness;

#[tokio::test]
async fn route_becomes_blackhole_when_target_deleted() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let body = json!({"name": "pods-node-1", "cluster": "c1", "destination_cidr": "10.244.1.0/24",
        "target_instance": node.id});
    let created = h.post("/v1/routes", body).await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.json);
    assert!(created.json["id"].as_str().expect("id").starts_with("r-"));
    assert_eq!(created.json["blackhole"], false);

    assert_eq!(
        h.delete(&format!("/v1/instances/{}", node.id)).await.status,
        StatusCode::NO_CONTENT
    );
    let routes = h.get("/v1/routes?cluster=c1").await.json;
    assert_eq!(routes["routes"][0]["blackhole"], true);
    assert!(h.sim.state().routes()[0].blackhole);
}

#[tokio::test]
async fn unknown_target_is_a_blackhole() {
    let h = Harness::start().await;
    let body = json!({"name": "r", "cluster": "c1", "destination_cidr": "10.244.9.0/24",
        "target_instance": "i-ffffffff"});
    assert_eq!(h.post("/v1/routes", body).await.json["blackhole"], true);
}

#[tokio::test]
async fn duplicate_cidr_conflicts_within_a_cluster_only() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let route = |cluster: &str, cidr: &str| json!({"name": "r", "cluster": cluster, "destination_cidr": cidr, "target_instance": node.id});
    assert_eq!(
        h.post("/v1/routes", route("c1", "10.244.1.0/24"))
            .await
            .status,
        StatusCode::CREATED
    );
    let duplicate = h.post("/v1/routes", route("c1", "10.244.1.0/24")).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.code(), "conflict");
    assert_eq!(
        h.post("/v1/routes", route("c2", "10.244.1.0/24"))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        h.post("/v1/routes", route("c1", "fd00:10:244::/64"))
            .await
            .status,
        StatusCode::CREATED
    );

    assert_eq!(
        h.get("/v1/routes?cluster=c1").await.json["routes"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        h.get("/v1/routes").await.json["routes"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
}

#[tokio::test]
async fn bad_cidr_is_invalid_and_delete_works() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let bad = h
        .post(
            "/v1/routes",
            json!({"name": "r", "cluster": "c1", "destination_cidr": "10.244.1.0/33",
            "target_instance": node.id}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.message().starts_with("destination_cidr:"),
        "{}",
        bad.message()
    );

    let created = h
        .post(
            "/v1/routes",
            json!({"name": "r", "cluster": "c1", "destination_cidr": "10.244.1.0/24",
            "target_instance": node.id}),
        )
        .await;
    let path = format!("/v1/routes/{}", created.json["id"].as_str().expect("id"));
    assert_eq!(h.delete(&path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(h.delete(&path).await.status, StatusCode::NOT_FOUND);
}

//! Load balancers: asynchronous provisioning, validation, updates, deletion.

use std::time::{Duration, Instant};

use cloud_sim::LoadBalancerStatus;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::{Harness, LB_PROVISION, reply};

fn lb_body(name: &str, targets: &[&str]) -> Value {
    json!({
        "name": name,
        "cluster": "c1",
        "service_uid": format!("uid-{name}"),
        "listeners": [{"port": 80, "protocol": "tcp", "node_port": 30080}],
        "targets": targets,
    })
}

/// Polls until the load balancer is active, failing after a generous bound.
async fn wait_active(h: &Harness, id: &str) -> Value {
    let deadline = Instant::now() + LB_PROVISION * 20;
    loop {
        let lb = h.get(&format!("/v1/load-balancers/{id}")).await.json;
        if lb["status"] == "active" {
            return lb;
        }
        assert!(
            Instant::now() < deadline,
            "load balancer never became active: {lb}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn provisioning_then_active_with_unique_ips() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let created = h
        .post("/v1/load-balancers", lb_body("web", &[&node.id]))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.json);
    assert_eq!(created.json["status"], "provisioning");
    assert_eq!(created.json["ip"], Value::Null);
    let id = created.json["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("lb-") && id.len() == 11, "{id}");

    let other = h.post("/v1/load-balancers", lb_body("api", &[])).await.json;
    let first = wait_active(&h, &id).await;
    let second = wait_active(&h, other["id"].as_str().expect("id")).await;
    assert_eq!(first["ip"], "198.51.100.1");
    assert_eq!(second["ip"], "198.51.100.2");
    assert_eq!(first["targets"], json!([node.id]));
    assert!(first["created_at_ms"].as_u64().expect("created_at_ms") > 0);

    let filtered = h.get("/v1/load-balancers?name=api&cluster=c1").await.json;
    assert_eq!(filtered["load_balancers"].as_array().map(Vec::len), Some(1));
    let other_cluster = h.get("/v1/load-balancers?cluster=c2").await.json;
    assert_eq!(other_cluster["load_balancers"], json!([]));
}

#[tokio::test]
async fn duplicate_name_conflicts() {
    let h = Harness::start().await;
    assert_eq!(
        h.post("/v1/load-balancers", lb_body("web", &[]))
            .await
            .status,
        StatusCode::CREATED
    );
    let duplicate = h.post("/v1/load-balancers", lb_body("web", &[])).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.code(), "conflict");
}

#[tokio::test]
async fn validation_names_the_bad_field() {
    let h = Harness::start().await;
    let node = h.instance("node-1");
    let gone = h.instance("node-2");
    h.sim.state().delete_instance(&gone.id);

    let mut cases = Vec::new();
    let mut bad_port = lb_body("a", &[]);
    bad_port["listeners"][0]["port"] = json!(0);
    cases.push((bad_port, "listeners[0].port"));
    let mut bad_node_port = lb_body("b", &[]);
    bad_node_port["listeners"][0]["node_port"] = json!(70000);
    cases.push((bad_node_port, "listeners[0].node_port"));
    let mut bad_protocol = lb_body("c", &[]);
    bad_protocol["listeners"][0]["protocol"] = json!("http");
    cases.push((bad_protocol, "listeners[0].protocol"));
    cases.push((lb_body("d", &[&node.id, "i-deadbeef"]), "targets[1]"));
    cases.push((lb_body("e", &[&gone.id]), "targets[0]"));
    let mut bad_range = lb_body("f", &[]);
    bad_range["source_ranges"] = json!(["10.0.0.0/8", "everyone"]);
    cases.push((bad_range, "source_ranges[1]"));
    let mut no_listeners = lb_body("g", &[]);
    no_listeners["listeners"] = json!([]);
    cases.push((no_listeners, "listeners"));

    for (body, field) in cases {
        let reply = h.post("/v1/load-balancers", body).await;
        assert_eq!(
            reply.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {:?}",
            reply.json
        );
        assert_eq!(reply.code(), "invalid");
        assert!(
            reply.message().contains(field),
            "expected {field} in {:?}",
            reply.message()
        );
    }
    assert!(
        h.sim.state().load_balancers().is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn updates_keep_status_and_ip() {
    let h = Harness::start().await;
    let a = h.instance("a");
    let b = h.instance("b");
    let id = h
        .post("/v1/load-balancers", lb_body("web", &[&a.id]))
        .await
        .json["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let active = wait_active(&h, &id).await;

    let update = json!({
        "listeners": [{"port": 443, "protocol": "tcp", "node_port": 30443},
                      {"port": 53, "protocol": "udp", "node_port": 30053}],
        "targets": [a.id, b.id],
        "source_ranges": ["192.0.2.0/24"],
        "proxy_protocol": true,
    });
    let updated = h.put(&format!("/v1/load-balancers/{id}"), update).await;
    assert_eq!(updated.status, StatusCode::OK, "{:?}", updated.json);
    assert_eq!(updated.json["ip"], active["ip"]);
    assert_eq!(updated.json["status"], "active");
    assert_eq!(updated.json["listeners"][1]["protocol"], "udp");
    assert_eq!(updated.json["proxy_protocol"], true);

    let retargeted = h
        .put(
            &format!("/v1/load-balancers/{id}/targets"),
            json!({"targets": [b.id]}),
        )
        .await;
    assert_eq!(retargeted.json["targets"], json!([b.id]));
    assert_eq!(retargeted.json["source_ranges"], json!(["192.0.2.0/24"]));
    let counts = reply(h.http.get(format!("{}/_admin/target-counts", h.sim.url()))).await;
    assert_eq!(
        counts.json,
        json!({"load_balancers": [{"id": id, "name": "web", "targets": 1}]})
    );

    let missing = h
        .put(
            "/v1/load-balancers/lb-00000000/targets",
            json!({"targets": ["i-nope"]}),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn delete_via_api_and_out_of_band() {
    let h = Harness::start().await;
    let first = h.post("/v1/load-balancers", lb_body("one", &[])).await.json;
    let second = h.post("/v1/load-balancers", lb_body("two", &[])).await.json;
    let first_path = format!("/v1/load-balancers/{}", first["id"].as_str().expect("id"));

    assert_eq!(h.delete(&first_path).await.status, StatusCode::NO_CONTENT);
    assert_eq!(h.get(&first_path).await.status, StatusCode::NOT_FOUND);
    assert_eq!(h.delete(&first_path).await.status, StatusCode::NOT_FOUND);

    let second_id = second["id"].as_str().expect("id");
    assert!(h.sim.state().delete_load_balancer(second_id));
    assert!(!h.sim.state().delete_load_balancer(second_id));
    assert_eq!(
        h.get("/v1/load-balancers").await.json["load_balancers"],
        json!([])
    );
}

#[tokio::test]
async fn state_handle_sees_provisioning_complete() {
    let h = Harness::start().await;
    h.post("/v1/load-balancers", lb_body("web", &[])).await;
    let state = h.sim.state();
    assert_eq!(
        state.load_balancers()[0].status,
        LoadBalancerStatus::Provisioning
    );
    tokio::time::sleep(LB_PROVISION + Duration::from_millis(20)).await;
    let lb = &state.load_balancers()[0];
    assert_eq!(lb.status, LoadBalancerStatus::Active);
    assert_eq!(lb.ip.as_deref(), Some("198.51.100.1"));
}

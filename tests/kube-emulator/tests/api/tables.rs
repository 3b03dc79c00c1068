//! Table output, what `kubectl get` asks for: upstream's columns and cells,
//! the `-o wide` ones at priority 1, rows carrying their metadata, and
//! one-row tables in watches.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{Cluster, create_node, http_client, load_balancer, start};

/// What kubectl sends.
const KUBECTL_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn get_table(cluster: &Cluster, path: &str, accept: &str) -> (u16, Value) {
    let response = http_client(&cluster.emulator)
        .get(format!("{}{path}", cluster.emulator.url()))
        .bearer_auth("kube-emulator")
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    (code, response.json().await.unwrap())
}

fn column_names(table: &Value) -> Vec<(String, u64)> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["priority"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn nodes_print_status_roles_version_and_wide_columns() {
    let cluster = start().await;
    create_node(&cluster.client, "n1").await;
    let (code, table) = get_table(&cluster, "/api/v1/nodes", KUBECTL_ACCEPT).await;
    assert_eq!(code, 200, "{table}");
    assert_eq!(
        (table["kind"].as_str(), table["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1"))
    );
    assert!(table["metadata"]["resourceVersion"].is_string(), "{table}");
    let columns = column_names(&table);
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    assert!(columns[..5].iter().all(|(_, p)| *p == 0));
    assert!(columns[5..].iter().all(|(_, p)| *p == 1), "wide columns");
    let row = &table["rows"][0];
    let cells = row["cells"].as_array().unwrap();
    assert_eq!(cells[..3], [json!("n1"), json!("Ready"), json!("<none>")]);
    assert_eq!(cells[5..7], [json!("10.0.0.1"), json!("<none>")]);
    assert_eq!(cells[7], "<unknown>", "no nodeInfo yet");
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(row["object"]["metadata"]["name"], "n1");
}

#[tokio::test]
async fn load_balancer_services_print_their_ingress_ip() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    services
        .create(&PostParams::default(), &load_balancer("web"))
        .await
        .unwrap();
    let (_, table) = get_table(
        &cluster,
        "/api/v1/namespaces/default/services/web",
        KUBECTL_ACCEPT,
    )
    .await;
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[1], "LoadBalancer");
    assert_eq!(cells[3], "<pending>");
    assert!(
        cells[4].as_str().unwrap().starts_with("80:3"),
        "port and node port: {cells}"
    );
    assert_eq!(cells[6], "app=web");

    let ingress = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&ingress))
        .await
        .unwrap();
    let (_, table) = get_table(&cluster, "/api/v1/services", KUBECTL_ACCEPT).await;
    let rows = table["rows"].as_array().unwrap();
    let web = rows
        .iter()
        .find(|r| r["cells"][0] == "web")
        .expect("web is listed");
    assert_eq!(web["cells"][3], "203.0.113.7");
    assert_eq!(web["object"]["metadata"]["namespace"], "default");
}

#[tokio::test]
async fn include_object_and_the_v1beta1_table_are_honoured() {
    let cluster = start().await;
    create_node(&cluster.client, "n1").await;
    let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    let (_, table) = get_table(&cluster, "/api/v1/nodes?includeObject=None", beta).await;
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1beta1");
    assert!(table["rows"][0]["object"].is_null());
    let (_, table) = get_table(&cluster, "/api/v1/nodes/n1?includeObject=Object", beta).await;
    assert_eq!(table["rows"][0]["object"]["kind"], "Node");
    let (code, status) = get_table(&cluster, "/api/v1/nodes?includeObject=All", beta).await;
    assert_eq!((code, status["reason"].as_str()), (400, Some("BadRequest")));
    let (code, _) = get_table(&cluster, "/api/v1/nodes", "application/json;as=Table").await;
    assert_eq!(code, 406, "a Table without its group and version");
}

#[tokio::test]
async fn watches_send_one_row_tables() {
    let cluster = start().await;
    create_node(&cluster.client, "n1").await;
    let response = http_client(&cluster.emulator)
        .get(format!(
            "{}/api/v1/nodes?watch=true&timeoutSeconds=1",
            cluster.emulator.url()
        ))
        .bearer_auth("kube-emulator")
        .header("accept", KUBECTL_ACCEPT)
        .send()
        .await
        .unwrap();
    let body = response.text().await.unwrap();
    let first: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Table");
    assert_eq!(first["object"]["rows"][0]["cells"][0], "n1");
}

#[tokio::test]
async fn pods_are_forbidden_rather_than_missing() {
    let cluster = start().await;
    let (code, status) = get_table(
        &cluster,
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1",
        "application/json",
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "pods is forbidden: kube-emulator does not serve pods"
    );
}

//! Table output, what `kubectl get` asks for: upstream's columns and cells,
//! the `-o wide` ones at priority 1, rows carrying their metadata, and
//! one-row tables in watches.

use std::time::Duration;

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

/// A cluster-scoped `gadgets.example.com` CRD with `columns` as its
/// `additionalPrinterColumns`.
fn gadget_crd(columns: Value) -> String {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
                 "names": {"plural": "gadgets", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "additionalPrinterColumns": columns,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}})
    .to_string()
}

async fn post(cluster: &Cluster, path: &str, body: &str) -> crate::harness::Answer {
    crate::harness::send(
        cluster,
        reqwest::Method::POST,
        path,
        "application/json",
        body,
    )
    .await
}

#[tokio::test]
async fn custom_resources_print_their_crd_printer_columns() {
    let cluster = start().await;
    let columns = json!([
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Ready", "type": "string", "description": "Ready?",
         "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Color", "type": "string", "priority": 1, "jsonPath": ".spec.color"}
    ]);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let created = post(&cluster, crds, &gadget_crd(columns)).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let gadgets = "/apis/example.com/v1/gadgets";
    let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "g1"}, "spec": {"size": 3}});
    let mut answer = post(&cluster, gadgets, &gadget.to_string()).await;
    for _ in 0..50 {
        if answer.code != 404 {
            break;
        }
        // The CRD is established asynchronously.
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = post(&cluster, gadgets, &gadget.to_string()).await;
    }
    assert_eq!(answer.code, 201, "{}", answer.body);
    // Status goes through its subresource (a create drops it).
    let status = json!({"status": {"conditions": [{"type": "Synced", "status": "False"},
                                                  {"type": "Ready", "status": "True"}]}});
    let written = crate::harness::send(
        &cluster,
        reqwest::Method::PATCH,
        &format!("{gadgets}/g1/status"),
        "application/merge-patch+json",
        &status.to_string(),
    )
    .await;
    assert_eq!(written.code, 200, "{}", written.body);

    let (code, table) = get_table(&cluster, gadgets, KUBECTL_ACCEPT).await;
    assert_eq!(code, 200, "{table}");
    assert_eq!(
        column_names(&table),
        [
            ("Name".to_owned(), 0),
            ("Size".to_owned(), 0),
            ("Ready".to_owned(), 0),
            ("Age".to_owned(), 0),
            ("Color".to_owned(), 1)
        ],
        "the declared columns replace the default Age: {table}"
    );
    let definitions = &table["columnDefinitions"];
    assert_eq!(definitions[1]["type"], "integer");
    assert_eq!(definitions[2]["description"], "Ready?");
    assert_eq!(
        definitions[4]["description"],
        "Custom resource definition column (in JSONPath format): .spec.color"
    );
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(
        cells[..3],
        [json!("g1"), json!(3), json!("True")],
        "{table}"
    );
    assert!(cells[3].as_str().unwrap().ends_with('s'), "an age: {table}");
    assert_eq!(cells[4], Value::Null, "no color: kubectl prints a blank");

    // The same columns for one object.
    let (code, one) = get_table(&cluster, &format!("{gadgets}/g1"), KUBECTL_ACCEPT).await;
    assert_eq!(code, 200, "{one}");
    assert_eq!(one["rows"][0]["cells"][2], "True");
}

#[tokio::test]
async fn a_crd_with_a_bad_printer_column_is_invalid() {
    let cluster = start().await;
    let columns = json!([
        {"name": "Size", "type": "int", "jsonPath": ".spec.size"},
        {"name": "Color", "type": "string", "jsonPath": ".spec[color"}
    ]);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let answer = post(&cluster, crds, &gadget_crd(columns)).await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    let fields: Vec<&str> = answer.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.versions[0].additionalPrinterColumns[0].type",
            "spec.versions[0].additionalPrinterColumns[1].JSONPath"
        ],
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn workloads_print_their_counts_and_wide_template_columns() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
    let cluster = start().await;
    let template = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                   "containers": [{"name": "web", "image": "nginx:1.27"},
                                                  {"name": "proxy", "image": "envoy:1"}]}});
    let spec =
        json!({"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template});
    let deployments = Api::<Deployment>::namespaced(cluster.client.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec})).unwrap(),
        )
        .await
        .unwrap();
    let progress = json!({"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 1}});
    deployments
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&progress))
        .await
        .unwrap();
    let (_, table) = get_table(
        &cluster,
        "/apis/apps/v1/namespaces/default/deployments",
        KUBECTL_ACCEPT,
    )
    .await;
    let names: Vec<String> = column_names(&table).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    let cells = table["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(cells[..4], [json!("web"), json!("2/3"), json!(3), json!(1)]);
    assert_eq!(
        cells[5..],
        [
            json!("web,proxy"),
            json!("nginx:1.27,envoy:1"),
            json!("app=web")
        ]
    );

    let daemon_sets = Api::<DaemonSet>::namespaced(cluster.client.clone(), "default");
    let mut spec = spec.clone();
    spec.as_object_mut().unwrap().remove("replicas");
    daemon_sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": spec})).unwrap(),
        )
        .await
        .unwrap();
    let (_, table) = get_table(
        &cluster,
        "/apis/apps/v1/namespaces/default/daemonsets/web",
        KUBECTL_ACCEPT,
    )
    .await;
    let columns = column_names(&table);
    let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Desired",
            "Current",
            "Ready",
            "Up-to-date",
            "Available",
            "Node Selector",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert!(columns[8..].iter().all(|(_, p)| *p == 1), "wide columns");
    assert_eq!(table["columnDefinitions"][1]["type"], "integer");
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        cells.as_array().unwrap()[..7],
        [
            json!("web"),
            json!(0),
            json!(0),
            json!(0),
            json!(0),
            json!(0),
            json!("kubernetes.io/os=linux")
        ]
    );
}

//! OpenAPI v3, as kubectl's and Helm's field validation read it: a root
//! listing every served group-version with its document's hashed URL, and
//! documents whose PATCH operations name their kind and take
//! `fieldValidation`; a CRD's versions come and go with it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

use kube_emulator::{Authorization, EmulatorOptions};

use crate::harness::{
    Cluster, get, http_client, send_as, service_account_token, start, start_with, within,
};

/// The root's `serverRelativeURL` for `key` (`api/v1`, `apis/apps/v1`).
fn document_url(root: &Value, key: &str) -> Option<String> {
    root["paths"][key]["serverRelativeURL"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test]
async fn the_root_lists_each_served_group_version_with_its_hash() {
    let cluster = start().await;
    let root = get(&cluster, "/openapi/v3").await;
    assert_eq!(root.code, 200, "{}", root.body);
    for key in [
        "api/v1",
        "apis/apps/v1",
        "apis/coordination.k8s.io/v1",
        "apis/events.k8s.io/v1",
        "apis/apiextensions.k8s.io/v1",
        "apis/networking.k8s.io/v1",
        "apis/rbac.authorization.k8s.io/v1",
    ] {
        let url = document_url(&root.body, key).unwrap_or_else(|| panic!("{key}: {}", root.body));
        assert!(
            url.starts_with(&format!("/openapi/v3/{key}?hash=")),
            "{url}"
        );
    }
    assert_eq!(
        root.body["paths"].as_object().unwrap().len(),
        7,
        "{}",
        root.body
    );
}

#[tokio::test]
async fn a_group_version_document_names_the_kind_of_each_patch_and_its_parameters() {
    let cluster = start().await;
    let root = get(&cluster, "/openapi/v3").await;
    let url = document_url(&root.body, "apis/apps/v1").unwrap();
    let doc = get(&cluster, &url).await;
    assert_eq!(doc.code, 200, "{}", doc.body);
    assert_eq!(doc.body["openapi"], "3.0.0");
    let object = &doc.body["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &object["patch"];
    assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "kind": "Deployment", "version": "v1"})
    );
    let parameters: Vec<&str> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        parameters,
        ["dryRun", "fieldManager", "fieldValidation", "force"]
    );
    assert_eq!(
        object["get"]["operationId"],
        "readAppsV1NamespacedDeployment"
    );
    assert_eq!(
        doc.body["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}/status"]["put"]["operationId"],
        "replaceAppsV1NamespacedDaemonSetStatus"
    );
    assert_eq!(
        doc.body["paths"]["/apis/apps/v1/deployments"]["get"]["operationId"],
        "listAppsV1DeploymentForAllNamespaces"
    );

    let core = get(&cluster, &document_url(&root.body, "api/v1").unwrap()).await;
    let nodes = &core.body["paths"]["/api/v1/nodes/{name}"]["patch"];
    assert_eq!(nodes["operationId"], "patchCoreV1Node");
    assert_eq!(nodes["x-kubernetes-group-version-kind"]["kind"], "Node");
}

#[tokio::test]
async fn documents_are_cached_by_hash_and_a_stale_hash_is_redirected() {
    let cluster = start().await;
    let root = get(&cluster, "/openapi/v3").await;
    let url = document_url(&root.body, "apis/apps/v1").unwrap();
    let client = http_client(&cluster.emulator);
    let response = client
        .get(format!("{}{url}", cluster.emulator.url()))
        .bearer_auth("kube-emulator")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert_eq!(headers["cache-control"], "public, immutable");
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let hash = url.split("hash=").nth(1).unwrap();
    assert_eq!(etag, format!("\"{hash}\""));

    let revalidated = client
        .get(format!("{}{url}", cluster.emulator.url()))
        .bearer_auth("kube-emulator")
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(revalidated.status(), 304);

    let no_redirects = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(
            cluster.emulator.ca_certificate_pem().as_bytes(),
        )
        .unwrap()])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let stale = no_redirects
        .get(format!(
            "{}/openapi/v3/apis/apps/v1?hash=0123",
            cluster.emulator.url()
        ))
        .bearer_auth("kube-emulator")
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 301);
    assert_eq!(stale.headers()["location"], url.as_str());
}

async fn install_gadgets(cluster: &Cluster) -> Api<CustomResourceDefinition> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    within(
        5,
        await_condition(
            crds.clone(),
            "gadgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();
    crds
}

#[tokio::test]
async fn a_crd_version_is_listed_while_established_and_gone_once_deleted() {
    let cluster = start().await;
    let root = get(&cluster, "/openapi/v3").await;
    assert!(document_url(&root.body, "apis/example.com/v1").is_none());

    let crds = install_gadgets(&cluster).await;
    let root = get(&cluster, "/openapi/v3").await;
    let url = document_url(&root.body, "apis/example.com/v1").expect("listed once established");
    let doc = get(&cluster, &url).await;
    let patch =
        &doc.body["paths"]["/apis/example.com/v1/namespaces/{namespace}/gadgets/{name}"]["patch"];
    assert_eq!(patch["operationId"], "patchExampleComV1NamespacedGadget");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "example.com", "kind": "Gadget", "version": "v1"})
    );

    let uid = crds
        .get("gadgets.example.com")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    crds.delete("gadgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    within(
        5,
        await_condition(crds, "gadgets.example.com", conditions::is_deleted(&uid)),
    )
    .await
    .unwrap();
    let root = get(&cluster, "/openapi/v3").await;
    assert!(
        document_url(&root.body, "apis/example.com/v1").is_none(),
        "{}",
        root.body
    );
    // What upstream's handler writes for a group-version it does not have: nothing.
    let gone = http_client(&cluster.emulator)
        .get(format!("{}{url}", cluster.emulator.url()))
        .bearer_auth("kube-emulator")
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 200);
    assert_eq!(gone.bytes().await.unwrap().len(), 0);
}

#[tokio::test]
async fn openapi_needs_a_token_and_v2_is_not_served() {
    let cluster = start().await;
    let anonymous = http_client(&cluster.emulator)
        .get(format!("{}/openapi/v3", cluster.emulator.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = send_as(
        &cluster,
        "not-a-token",
        reqwest::Method::GET,
        "/openapi/v3/apis/apps/v1",
        "application/json",
        "",
    )
    .await;
    assert_eq!(wrong.code, 401);
    assert_eq!(get(&cluster, "/openapi/v2").await.code, 404);
}

#[tokio::test]
async fn under_rbac_any_authenticated_user_may_read_openapi_as_system_discovery_allows() {
    let cluster = start_with(EmulatorOptions {
        authorization: Authorization::Rbac,
        ..EmulatorOptions::default()
    })
    .await;
    let token = service_account_token(&cluster, "kube-system", "ccm").await;
    let read = |method: reqwest::Method, path: &'static str| {
        let cluster = &cluster;
        let token = token.clone();
        async move { send_as(cluster, &token, method, path, "application/json", "").await }
    };
    assert_eq!(read(reqwest::Method::GET, "/openapi/v3").await.code, 200);
    assert_eq!(
        read(reqwest::Method::GET, "/openapi/v3/apis/apps/v1")
            .await
            .code,
        200
    );
    let posted = read(reqwest::Method::POST, "/openapi/v3").await;
    assert_eq!(posted.code, 403, "{}", posted.body);
    assert_eq!(
        posted.body["message"],
        "forbidden: User \"system:serviceaccount:kube-system:ccm\" cannot post path \"/openapi/v3\""
    );
}

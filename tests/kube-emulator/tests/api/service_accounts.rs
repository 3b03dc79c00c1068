//! ServiceAccounts and their `token` subresource, as a real kube-apiserver
//! v1.32 serves them: tokens from `TokenRequest`s authenticate as the
//! account until they expire or the account goes, and the request counts
//! say which user made each request.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_emulator::{ADMIN_USER, EmulatorOptions, service_account_user};
use serde_json::json;

use crate::harness::{
    Answer, Cluster, client_with_token, get, http_client, send, start, start_with, status,
};

fn account(name: &str) -> ServiceAccount {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("service account literal")
}

fn token_request(seconds: Option<i64>) -> TokenRequest {
    TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: seconds,
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    }
}

/// A TokenRequest for kube-system/node-controller with `body`, sent as the admin.
async fn request_token(cluster: &Cluster, body: serde_json::Value) -> Answer {
    send(
        cluster,
        reqwest::Method::POST,
        "/api/v1/namespaces/kube-system/serviceaccounts/node-controller/token",
        "application/json",
        &body.to_string(),
    )
    .await
}

/// What a GET of the node list with `token` answers.
async fn list_nodes_code(cluster: &Cluster, token: &str) -> u16 {
    http_client(&cluster.emulator)
        .get(format!("{}/api/v1/nodes", cluster.emulator.url()))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

#[tokio::test]
async fn service_accounts_are_created_got_and_listed_in_their_namespace() {
    let cluster = start().await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "kube-system");
    let created = accounts
        .create(&PostParams::default(), &account("node-controller"))
        .await
        .expect("created");
    assert!(created.metadata.uid.is_some());
    let again = accounts
        .create(&PostParams::default(), &account("node-controller"))
        .await
        .expect_err("a second create");
    let again = status(again);
    assert_eq!((again.code, again.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        again.message,
        r#"serviceaccounts "node-controller" already exists"#
    );
    let got = accounts.get("node-controller").await.expect("got");
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let elsewhere = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "default");
    let missing = status(elsewhere.get("node-controller").await.expect_err("absent"));
    assert_eq!(missing.code, 404);
    assert_eq!(
        missing.message,
        r#"serviceaccounts "node-controller" not found"#
    );
    let names: Vec<String> = Api::<ServiceAccount>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .expect("listed")
        .items
        .into_iter()
        .filter_map(|a| a.metadata.name)
        .collect();
    assert_eq!(names, ["node-controller"]);
    let bad = status(
        accounts
            .create(&PostParams::default(), &account("Not_A_Name"))
            .await
            .expect_err("an invalid name"),
    );
    assert_eq!(bad.code, 422);
    let discovery = get(&cluster, "/api/v1").await.body;
    let token = discovery["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .expect("the token subresource is discoverable");
    assert_eq!(token["kind"], "TokenRequest");
    assert_eq!(token["group"], "authentication.k8s.io");
    assert_eq!(token["verbs"], json!(["create"]));
}

#[tokio::test]
async fn a_token_request_answers_a_token_that_authenticates_as_the_service_account() {
    let cluster = start().await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "kube-system");
    accounts
        .create(&PostParams::default(), &account("service-controller"))
        .await
        .expect("created");
    cluster.emulator.reset_requests();
    let before = Timestamp::now();
    let answer = accounts
        .create_token_request(
            "service-controller",
            &PostParams::default(),
            &token_request(None),
        )
        .await
        .expect("a token");
    assert_eq!(
        answer.spec.expiration_seconds,
        Some(3600),
        "upstream's default"
    );
    assert_eq!(
        answer.spec.audiences,
        ["https://kubernetes.default.svc.cluster.local"]
    );
    assert_eq!(answer.metadata.name.as_deref(), Some("service-controller"));
    let status = answer.status.expect("a status");
    assert!(!status.token.is_empty());
    let lifetime = status.expiration_timestamp.0.duration_since(before);
    assert!(
        (3598..=3601).contains(&lifetime.as_secs()),
        "expires in an hour: {lifetime:?}"
    );

    let robot = client_with_token(&cluster.emulator, &status.token).await;
    Api::<Node>::all(robot)
        .list(&ListParams::default())
        .await
        .expect("the token authenticates");
    let user = service_account_user("kube-system", "service-controller");
    assert_eq!(user, "system:serviceaccount:kube-system:service-controller");
    let counts = cluster.emulator.requests();
    assert_eq!(counts.user(&user).get("list", "nodes"), 1);
    assert_eq!(counts.user(&user).total(), 1);
    assert_eq!(
        counts
            .user(ADMIN_USER)
            .get("create", "serviceaccounts/token"),
        1
    );
    assert_eq!(counts.by_user.len(), 2, "{:?}", counts.by_user);
}

#[tokio::test]
async fn token_requests_are_checked_as_upstream_checks_them() {
    let cluster = start().await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "kube-system");
    let missing = status(
        accounts
            .create_token_request("ghost", &PostParams::default(), &token_request(Some(3600)))
            .await
            .expect_err("no such account"),
    );
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, r#"serviceaccounts "ghost" not found"#);

    accounts
        .create(&PostParams::default(), &account("route-controller"))
        .await
        .expect("created");
    let short = status(
        accounts
            .create_token_request(
                "route-controller",
                &PostParams::default(),
                &token_request(Some(599)),
            )
            .await
            .expect_err("shorter than ten minutes"),
    );
    assert_eq!((short.code, short.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        short.message,
        r#"TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"#
    );
    let renamed = send(
        &cluster,
        reqwest::Method::POST,
        "/api/v1/namespaces/kube-system/serviceaccounts/route-controller/token",
        "application/json",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "other"}, "spec": {}}).to_string(),
    )
    .await;
    assert_eq!(renamed.code, 422);
    assert_eq!(
        renamed.body["message"],
        r#"TokenRequest.authentication.k8s.io "route-controller" is invalid: metadata.name: Invalid value: "other": must match the service account name if specified"#
    );
    let ten_minutes = accounts
        .create_token_request(
            "route-controller",
            &PostParams::default(),
            &token_request(Some(600)),
        )
        .await
        .expect("ten minutes is the shortest allowed");
    assert_eq!(ten_minutes.spec.expiration_seconds, Some(600));
}

#[tokio::test]
async fn a_token_is_refused_with_401_once_expired_unknown_or_its_service_account_gone() {
    let cluster = start_with(EmulatorOptions {
        max_token_expiration: Some(Duration::from_secs(1)),
        ..EmulatorOptions::default()
    })
    .await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "kube-system");
    accounts
        .create(&PostParams::default(), &account("node-controller"))
        .await
        .expect("created");
    let answer = request_token(&cluster, json!({"spec": {"expirationSeconds": 3600}})).await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.warnings,
        [r#"299 - "requested expiration of 3600 seconds shortened to 1 seconds""#]
    );
    assert_eq!(answer.body["spec"]["expirationSeconds"], 1);
    let token = answer.body["status"]["token"].as_str().expect("a token");
    assert_eq!(list_nodes_code(&cluster, token).await, 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(list_nodes_code(&cluster, token).await, 401, "expired");
    assert_eq!(list_nodes_code(&cluster, "made-up").await, 401, "unknown");
    assert_eq!(
        cluster
            .emulator
            .requests()
            .unauthorized
            .values()
            .sum::<u64>(),
        2,
        "the 401s are counted"
    );

    // Without the limit, so the token outlives the test.
    let cluster = start().await;
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), "kube-system");
    accounts
        .create(&PostParams::default(), &account("node-controller"))
        .await
        .expect("created");
    let fresh = request_token(&cluster, json!({})).await;
    let token = fresh.body["status"]["token"].as_str().expect("a token");
    assert_eq!(list_nodes_code(&cluster, token).await, 200);
    accounts
        .delete("node-controller", &DeleteParams::default())
        .await
        .expect("deleted");
    assert_eq!(
        list_nodes_code(&cluster, token).await,
        401,
        "the account is gone"
    );
    accounts
        .create(&PostParams::default(), &account("node-controller"))
        .await
        .expect("created again");
    assert_eq!(
        list_nodes_code(&cluster, token).await,
        401,
        "a new account of the same name is another account"
    );
}

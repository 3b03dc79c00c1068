//! Starting an emulator and a kube-rs client for it.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, Service, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::KubeConfigOptions;
use kube::{Client, Config};
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::{Value, json};

/// An emulator and a client that reaches it through its kubeconfig.
pub struct Cluster {
    pub emulator: Emulator,
    pub client: Client,
}

pub async fn start() -> Cluster {
    start_with(EmulatorOptions {
        bookmark_interval: Duration::from_millis(200),
        ..EmulatorOptions::default()
    })
    .await
}

pub async fn start_with(options: EmulatorOptions) -> Cluster {
    let emulator = Emulator::start("127.0.0.1:0".parse().expect("address"), options)
        .await
        .expect("emulator starts");
    let client = client_for(&emulator).await;
    Cluster { emulator, client }
}

pub async fn client_for(emulator: &Emulator) -> Client {
    let config =
        Config::from_custom_kubeconfig(emulator.kubeconfig(), &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is usable");
    Client::try_from(config).expect("client builds")
}

/// A client that presents `token` instead of the kubeconfig's.
pub async fn client_with_token(emulator: &Emulator, token: &str) -> Client {
    let mut config =
        Config::from_custom_kubeconfig(emulator.kubeconfig(), &KubeConfigOptions::default())
            .await
            .expect("kubeconfig is usable");
    config.auth_info.token = Some(token.to_owned().into());
    Client::try_from(config).expect("client builds")
}

/// Creates the ServiceAccount `namespace/name` as the admin; a token of it.
pub async fn service_account_token(cluster: &Cluster, namespace: &str, name: &str) -> String {
    let accounts = Api::<ServiceAccount>::namespaced(cluster.client.clone(), namespace);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("account literal");
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("service account created");
    accounts
        .create_token_request(name, &PostParams::default(), &TokenRequest::default())
        .await
        .expect("a token")
        .status
        .expect("a token request status")
        .token
}

/// An HTTP client for requests a kube-rs client would not make as-is
/// (no token, odd parameters, the admin endpoints). It trusts only the
/// emulator's CA, as the kubeconfig does.
pub fn http_client(emulator: &Emulator) -> reqwest::Client {
    http_client_trusting(emulator.ca_certificate_pem())
}

/// An HTTP client that trusts only the CA certificate `ca_pem`.
pub fn http_client_trusting(ca_pem: &str) -> reqwest::Client {
    // reqwest is built without a bundled crypto provider; ring is the one
    // the rest of the workspace uses. Already installed is fine.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("a PEM certificate");
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .build()
        .expect("HTTP client builds")
}

/// The `kube-emulator` binary, listening on a free loopback port, with its
/// kubeconfig written to `kubeconfig`; killed when dropped.
pub struct Binary {
    pub child: tokio::process::Child,
    /// The URL it announced.
    pub url: String,
}

pub async fn spawn_binary(kubeconfig: &Path) -> Binary {
    spawn_binary_with(kubeconfig, &[]).await
}

/// [`spawn_binary`] with more flags.
pub async fn spawn_binary_with(kubeconfig: &Path, flags: &[&str]) -> Binary {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(kubeconfig)
        .args(flags)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kube-emulator starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let line = within(10, tokio::io::BufReader::new(stdout).lines().next_line())
        .await
        .expect("stdout readable")
        .expect("kube-emulator announces itself");
    let url = line
        .strip_prefix("kube-emulator listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Binary { child, url }
}

/// Runs the real kubectl with `args` (see [`kube_emulator::kubectl`]); what it printed.
pub async fn kubectl(cache_dir: &Path, args: &[&str]) -> String {
    kube_emulator::kubectl(cache_dir, args)
        .await
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The Status of a failed call.
pub fn status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
                            "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}]
        }
    }))
    .expect("node literal")
}

pub fn load_balancer(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    }))
    .expect("service literal")
}

pub async fn create_node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node(name))
        .await
        .expect("node created")
}

pub async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace literal");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
}

/// Awaits `f` for at most `secs` seconds.
pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("timed out")
}

/// An answer: status code, `Warning` headers and JSON body.
pub struct Answer {
    pub code: u16,
    pub warnings: Vec<String>,
    pub body: Value,
}

/// Sends `body` (sent as is, so it may repeat keys) with `method` to `path`.
pub async fn send(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> Answer {
    send_as(cluster, "kube-emulator", method, path, content_type, body).await
}

/// [`send`], presenting `token`.
pub async fn send_as(
    cluster: &Cluster,
    token: &str,
    method: reqwest::Method,
    path: &str,
    content_type: &str,
    body: &str,
) -> Answer {
    let response = http_client(&cluster.emulator)
        .request(method, format!("{}{path}", cluster.emulator.url()))
        .bearer_auth(token)
        .header("content-type", content_type)
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        code,
        warnings,
        body,
    }
}

pub async fn get(cluster: &Cluster, path: &str) -> Answer {
    send(cluster, reqwest::Method::GET, path, "application/json", "").await
}

//! Starting an emulator and a kube-rs client for it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::api::{Api, PostParams};
use kube::config::KubeConfigOptions;
use kube::{Client, Config};
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::json;

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

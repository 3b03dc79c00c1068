//! Stock kubectl against the `kube-emulator` binary, with nothing but the
//! kubeconfig it writes: the commands someone looking at a CCM's work
//! types, and the output they expect; and its `create` subcommands, whose
//! typed clients write protobuf.

use std::path::PathBuf;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Config, Resource};
use serde_json::{Value, json};

use crate::harness::{self, kubectl, spawn_binary};

/// A node the way a CCM leaves it, its load-balanced service, the leader
/// election lease and an event, written through the same kubeconfig.
async fn populate(client: &Client) {
    let node = Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &harness::node("worker-a"))
        .await
        .unwrap();
    let services = Api::<Service>::namespaced(client.clone(), "default");
    services
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let ingress =
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ipMode": "VIP"}]}}});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&ingress))
        .await
        .unwrap();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"holderIdentity": "ccm-0_4f2c", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "cloud-node-controller".into(),
            instance: None,
        },
    );
    let reference: ObjectReference = node.object_ref(&());
    let synced = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("Node synced successfully".into()),
        action: "Sync".into(),
        secondary: None,
    };
    recorder.publish(&synced, &reference).await.unwrap();
}

/// The line of `table` whose first column (after the namespace, with
/// `-A`) is `name`, split into columns.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.iter().take(2).any(|c| *c == name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

#[tokio::test]
async fn kubectl_works_with_the_kubeconfig_the_binary_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let cache = dir.path().join("kubectl-cache");
    let _binary = spawn_binary(&kubeconfig).await;
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    populate(&Client::try_from(config).unwrap()).await;
    let path = kubeconfig.to_str().unwrap();
    let run = |args: &'static [&'static str]| {
        let mut all = vec!["--kubeconfig", path];
        all.extend(args);
        let cache = cache.clone();
        async move { kubectl(&cache, &all).await }
    };

    let nodes = run(&["get", "nodes"]).await;
    assert!(
        nodes.starts_with("NAME") && nodes.contains("STATUS") && nodes.contains("VERSION"),
        "{nodes}"
    );
    assert_eq!(
        row(&nodes, "worker-a")[..3],
        ["worker-a", "Ready", "<none>"]
    );

    let wide = run(&["get", "nodes", "-o", "wide"]).await;
    assert!(wide.contains("INTERNAL-IP"), "{wide}");
    assert!(row(&wide, "worker-a").contains(&"10.0.0.1"), "{wide}");

    let services = run(&["get", "services", "-A"]).await;
    assert_eq!(
        row(&services, "kubernetes")[..4],
        ["default", "kubernetes", "ClusterIP", "10.96.0.1"]
    );
    let web = row(&services, "web");
    assert_eq!(
        [web[2], web[4]],
        ["LoadBalancer", "203.0.113.7"],
        "{services}"
    );

    let described = run(&["describe", "node", "worker-a"]).await;
    for expected in [
        "Name:               worker-a",
        "InternalIP:  10.0.0.1",
        "Pods:",
        "Node synced successfully",
    ] {
        assert!(
            described.contains(expected),
            "{expected:?} in:\n{described}"
        );
    }

    let leases = run(&["get", "lease", "-n", "kube-system"]).await;
    assert_eq!(
        row(&leases, "cloud-controller-manager")[..2],
        ["cloud-controller-manager", "ccm-0_4f2c"]
    );

    let events = run(&["get", "events", "-A"]).await;
    let synced = row(&events, "default");
    assert!(
        synced.contains(&"Synced") && synced.contains(&"node/worker-a"),
        "{events}"
    );

    let watched = run(&["get", "nodes", "--watch", "--request-timeout=1s"]).await;
    assert_eq!(row(&watched, "worker-a")[1], "Ready", "{watched}");
}

/// Stock kubectl against the binary's kubeconfig, its discovery cache in a
/// directory of its own.
struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// The emulator's binary writing its kubeconfig into `dir`, and kubectl for it.
    async fn start(dir: &std::path::Path) -> (Kubectl, harness::Binary) {
        let kubeconfig = dir.join("kubeconfig");
        let binary = spawn_binary(&kubeconfig).await;
        let kubectl = Kubectl {
            kubeconfig,
            cache: dir.join("kubectl-cache"),
        };
        (kubectl, binary)
    }

    async fn run(&self, args: &[&str]) -> String {
        let kubeconfig = self.kubeconfig.to_str().unwrap();
        let all = [&["--kubeconfig", kubeconfig], args].concat();
        kubectl(&self.cache, &all).await
    }

    /// `kubectl get … -o json` of one object.
    async fn get(&self, args: &[&str]) -> Value {
        let printed = self.run(&[&["get"], args, &["-o", "json"]].concat()).await;
        serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{e}: {printed}"))
    }
}

#[tokio::test]
async fn kubectl_create_subcommands_send_protobuf_the_emulator_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (kubectl, _binary) = Kubectl::start(dir.path()).await;

    kubectl
        .run(&["create", "service", "loadbalancer", "web", "--tcp=80:8080"])
        .await;
    let service = kubectl.get(&["service", "web"]).await;
    assert_eq!(service["spec"]["type"], "LoadBalancer", "{service}");
    assert_eq!(service["spec"]["selector"], json!({"app": "web"}));
    let port = &service["spec"]["ports"][0];
    assert_eq!(
        [
            &port["name"],
            &port["port"],
            &port["targetPort"],
            &port["protocol"]
        ],
        [&json!("80-8080"), &json!(80), &json!(8080), &json!("TCP")],
        "{service}"
    );

    let created = kubectl
        .run(&[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--port=80",
            "--replicas=2",
        ])
        .await;
    assert_eq!(created.trim(), "deployment.apps/web created");
    let deployment = kubectl.get(&["deployment", "web"]).await;
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2, "{deployment}");
    assert_eq!(spec["selector"], json!({"matchLabels": {"app": "web"}}));
    assert_eq!(
        spec["template"]["metadata"]["labels"],
        json!({"app": "web"})
    );
    let container = &spec["template"]["spec"]["containers"][0];
    assert_eq!(
        [&container["name"], &container["image"]],
        [&json!("nginx"), &json!("nginx")]
    );
    assert_eq!(container["ports"][0]["containerPort"], 80, "{deployment}");
    kubectl
        .run(&[
            "create",
            "deployment",
            "sleeper",
            "--image=busybox",
            "--",
            "sleep",
            "3600",
        ])
        .await;
    let sleeper = kubectl.get(&["deployment", "sleeper"]).await;
    assert_eq!(
        sleeper["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["sleep", "3600"])
    );

    kubectl.run(&["create", "namespace", "team"]).await;
    assert_eq!(
        kubectl.get(&["namespace", "team"]).await["status"]["phase"],
        "Active"
    );
    kubectl
        .run(&["create", "serviceaccount", "robot", "-n", "team"])
        .await;
    let token = kubectl
        .run(&["create", "token", "robot", "-n", "team", "--duration=1h"])
        .await;
    assert!(!token.trim().is_empty(), "a token: {token:?}");

    kubectl
        .run(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=services",
            "-n",
            "team",
        ])
        .await;
    assert_eq!(
        kubectl.get(&["role", "reader", "-n", "team"]).await["rules"],
        json!([{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]}])
    );
    kubectl
        .run(&[
            "create",
            "clusterrole",
            "viewer",
            "--verb=get",
            "--resource=deployments.apps",
        ])
        .await;
    assert_eq!(
        kubectl.get(&["clusterrole", "viewer"]).await["rules"],
        json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}])
    );
    kubectl
        .run(&[
            "create",
            "rolebinding",
            "read",
            "--role=reader",
            "--serviceaccount=team:robot",
            "-n",
            "team",
        ])
        .await;
    let binding = kubectl.get(&["rolebinding", "read", "-n", "team"]).await;
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "robot", "namespace": "team"}])
    );
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
    kubectl
        .run(&[
            "create",
            "clusterrolebinding",
            "view",
            "--clusterrole=viewer",
            "--user=alice",
        ])
        .await;
    assert_eq!(
        kubectl.get(&["clusterrolebinding", "view"]).await["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}])
    );

    // `apply` sends JSON and patches: it keeps working beside them.
    let manifest = dir.path().join("api.yaml");
    let service = |port: u16, tier: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  labels:\n    tier: {tier}\n\
             spec:\n  selector:\n    app: api\n  ports:\n  - port: {port}\n    targetPort: 8080\n"
        )
    };
    let path = manifest.to_str().unwrap();
    std::fs::write(&manifest, service(80, "front")).unwrap();
    kubectl.run(&["apply", "-f", path]).await;
    std::fs::write(&manifest, service(8081, "back")).unwrap();
    let applied = kubectl.run(&["apply", "-f", path]).await;
    assert_eq!(applied.trim(), "service/api configured");
    let api = kubectl.get(&["service", "api"]).await;
    assert_eq!(api["metadata"]["labels"], json!({"tier": "back"}));
    assert_eq!(api["spec"]["ports"][0]["port"], 8081, "{api}");
    assert_eq!(api["spec"]["ports"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn kubectl_taint_replaces_the_whole_taint_list_in_its_patches() {
    // `spec.taints` has no patch merge key upstream (`+listType=atomic`):
    // kubectl's two-way strategic merge patch sends the whole new list,
    // or `null` once it is empty.
    let dir = tempfile::tempdir().unwrap();
    let (kubectl, _binary) = Kubectl::start(dir.path()).await;
    let manifest = dir.path().join("node.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n",
    )
    .unwrap();
    kubectl
        .run(&["create", "-f", manifest.to_str().unwrap()])
        .await;
    let taints = |node: Value| node["spec"].get("taints").cloned();
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});

    let added = kubectl
        .run(&["taint", "nodes", "n1", "example.com/gpu=true:NoSchedule"])
        .await;
    assert_eq!(added.trim(), "node/n1 tainted");
    assert_eq!(
        taints(kubectl.get(&["node", "n1"]).await),
        Some(json!([
            {"key": "example.com/gpu", "value": "true", "effect": "NoSchedule"},
            not_ready
        ])),
        "stored as kubectl sent it, its new taint first"
    );
    let removed = kubectl
        .run(&["taint", "nodes", "n1", "example.com/gpu:NoSchedule-"])
        .await;
    assert_eq!(removed.trim(), "node/n1 untainted");
    assert_eq!(
        taints(kubectl.get(&["node", "n1"]).await),
        Some(json!([not_ready]))
    );
    kubectl
        .run(&["taint", "nodes", "n1", "node.kubernetes.io/not-ready-"])
        .await;
    assert_eq!(taints(kubectl.get(&["node", "n1"]).await), None);
}

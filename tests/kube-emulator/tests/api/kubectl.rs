//! Stock kubectl against the `kube-emulator` binary, with nothing but the
//! kubeconfig it writes: the commands someone looking at a CCM's work
//! types, and the output they expect.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Config, Resource};
use serde_json::json;

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

//! A release of the chart, installed, upgraded, rolled back and uninstalled with the install page's
//! commands, typed: `kubectl create secret …`, `helm install … -f simcloud.yaml` (the
//! page's values, read from it, with this test's registry and cloud in place of the example
//! hosts), `helm upgrade --reuse-values --set provider.ref=…`, `helm rollback`, `helm
//! uninstall`, against the API emulator with RBAC enforced. The manager runs as the chart's
//! two pods would (the stored Deployment's arguments and volumes, its ServiceAccount's token;
//! see `e2e::pod`), pulling the provider from a registry with the mounted pull secret. The
//! cluster lives a little meanwhile (nodes join, get routes, shut down and go away; load
//! balancers are made and one deleted), Prometheus scrapes `/metrics` with its ServiceAccount's
//! token, and the release's RBAC is compared with what the manager asked the API server for:
//! every request allowed, and every rule used (system:auth-delegator's by the scrape's reviews).
//! The upgrade leaves the Deployment's generation as it was and swaps the provider in both
//! pods; the rollback runs v1.2.0 again from the cache, downloading nothing; no pod restarts
//! and no Warning event is recorded; at the uninstall the pods exit cleanly on SIGTERM, the
//! remaining load balancer stays in the cloud and its Service, deleted, waits on its finalizer.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cloud_sim::InstanceStatus;
use e2e::TOKEN;
use e2e::chart::{self, Grant, NAMESPACE, Operator, Rendered};
use e2e::cloud_provider::{active_reference, simcloud_config};
use e2e::docs;
use e2e::pod::Pod;
use e2e::registry::{Credentials, Registry, RegistryOptions};
use e2e::testbed::{Testbed, eventually, has_taint, is_uninitialized};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube_emulator::{Authorization, EmulatorOptions};
use serde_json::json;
use wasm_ccm::resource::CloudProvider;

const RELEASE: &str = "wasm-ccm";
const WAIT: Duration = Duration::from_secs(60);
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
const REGISTRY_USER: &str = "acme";
const REGISTRY_PASSWORD: &str = "pull-7f3a";

/// The install page's values with this test's registry and cloud in place of the
/// example hosts.
fn install_values(registry: &Registry, bed: &Testbed) -> String {
    chart::install_values()
        .replace("registry.example.com", &registry.addr().to_string())
        .replace("https://api.simcloud.example", &bed.cloud.sim.url())
}

/// What the test adds: its registry is plain HTTP, two replicas elect a leader, the node and
/// route controllers look often, and a Prometheus ServiceAccount may read /metrics.
fn test_values(registry: &Registry) -> String {
    format!(
        "registry: {{insecure: ['{}']}}
replicas: 2
extraArgs: [--node-monitor-period=300ms, --route-reconciliation-period=500ms]
metrics:
  reader: {{subjects: [{{kind: ServiceAccount, name: {PROMETHEUS}, namespace: {NAMESPACE}}}]}}
",
        registry.addr()
    )
}

/// The ServiceAccount Prometheus scrapes as.
const PROMETHEUS: &str = "prometheus";

/// Prometheus scrapes each pod with its ServiceAccount's token, bound by the release to the
/// metrics-reader role: the manager has the API server review the token and the access (as
/// the release's system:auth-delegator binding allows) and answers; without a token, 401.
async fn scraped_by_prometheus(bed: &Testbed, pods: &[Pod]) {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(PROMETHEUS.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(bed.client.clone(), NAMESPACE)
        .create(&PostParams::default(), &account)
        .await
        .expect("create Prometheus's ServiceAccount");
    let token = e2e::pod::service_account_token(&bed.client, NAMESPACE, PROMETHEUS).await;
    for pod in pods {
        let (code, body) = e2e::https::get_with_token(pod.addr(), "/metrics", &token)
            .await
            .expect("an answer");
        assert_eq!(code, 200, "{}: {body}", pod.name);
        assert!(body.contains("wasm_ccm_build_info"), "{}: {body}", pod.name);
        let (code, _) = e2e::https::get(pod.addr(), "/metrics")
            .await
            .expect("an answer");
        assert_eq!(code, 401, "{}: /metrics without a token", pod.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_release_runs_as_its_service_account_and_upgrades_the_provider_in_place() {
    let registry = Registry::start(RegistryOptions {
        auth: Some(Credentials::new(REGISTRY_USER, REGISTRY_PASSWORD)),
        ..RegistryOptions::default()
    })
    .await;
    let oras = registry.oras();
    for (wasm, tag) in [
        (guest_builds::SIMCLOUD, "v1.2.0"),
        (guest_builds::SIMCLOUD_V2, "v1.3.0"),
    ] {
        let reference = registry.reference(&format!("acme/simcloud:{tag}"));
        oras.push_wasm(Path::new(wasm), &reference).await;
    }
    let bed = Testbed::start_with(EmulatorOptions {
        authorization: Authorization::Rbac,
        ..EmulatorOptions::default()
    })
    .await;
    let operator = Operator::new(&bed.kubeconfig());

    // The install page's block, typed: the token's Secret, the cloud config, the registry's
    // pull secret, then the release, with this test's values file after the page's.
    operator.file("cloud.json", &simcloud_config(&bed));
    operator.file("simcloud.yaml", &install_values(&registry, &bed));
    operator.file("test.yaml", &test_values(&registry));
    let notes = operator.typed(&docs::substitute(
        &docs::block_starting(
            "docs/src/operators/install.md",
            "sh",
            "kubectl -n kube-system create secret generic simcloud",
        ),
        &[
            ("token=…", &format!("token={TOKEN}")),
            ("registry.example.com", &registry.addr().to_string()),
            (
                "--docker-username=…",
                &format!("--docker-username={REGISTRY_USER}"),
            ),
            (
                "--docker-password=…",
                &format!("--docker-password={REGISTRY_PASSWORD}"),
            ),
            ("-f simcloud.yaml", "-f simcloud.yaml -f test.yaml"),
            // The tree's chart, as the page says a checkout installs it.
            (
                "oci://ghcr.io/acme/charts/wasm-ccm --version 0.1.0",
                "charts/wasm-ccm",
            ),
        ],
    ));

    let deployments: Api<Deployment> = Api::namespaced(bed.client.clone(), NAMESPACE);
    let installed = deployments
        .get(RELEASE)
        .await
        .expect("the release's Deployment");
    let workload = serde_json::to_value(&installed).expect("JSON");
    let kubeconfig = bed.emulator.kubeconfig();
    let mut pods = Vec::new();
    for name in ["wasm-ccm-0", "wasm-ccm-1"] {
        pods.push(Pod::start(&workload, name, &kubeconfig, &bed.client).await);
    }
    for pod in &pods {
        pod.ready().await;
    }
    let cloud_providers: Api<CloudProvider> = Api::all(bed.client.clone());
    let active = |tag: &'static str| {
        let cloud_providers = cloud_providers.clone();
        async move {
            eventually(&format!("{tag} active"), WAIT, || async {
                let status = cloud_providers.get(RELEASE).await.ok()?.status?;
                active_reference(&status)
                    .ends_with(&format!("acme/simcloud:{tag}"))
                    .then_some(())
            })
            .await
        }
    };
    active("v1.2.0").await;
    // The release's notes tell the operator how to see the active version and its status;
    // those commands, run as printed, show them.
    let shown: Vec<String> = notes
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("kubectl") && line.contains("cloudprovider"))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().skip(1).collect();
            operator.kubectl(&words)
        })
        .collect();
    assert!(
        matches!(&shown[..], [get, describe]
            if get.contains("acme/simcloud:v1.2.0")
                && describe.contains("Ready") && describe.contains("Activated")),
        "the notes' commands show the active version and its conditions: {notes}\n{shown:#?}"
    );

    live_a_little(&bed).await;
    scraped_by_prometheus(&bed, &pods).await;

    // The install page's upgrade, typed: only the CloudProvider changes, the Deployment is
    // not rolled.
    operator.typed(&docs::substitute(
        &docs::block_starting(
            "docs/src/operators/install.md",
            "sh",
            "helm upgrade wasm-ccm oci://",
        ),
        &[
            ("registry.example.com", &registry.addr().to_string()),
            (
                "oci://ghcr.io/acme/charts/wasm-ccm --version 0.1.0",
                "charts/wasm-ccm",
            ),
        ],
    ));
    let upgraded = deployments
        .get(RELEASE)
        .await
        .expect("the release's Deployment");
    assert_eq!(
        (upgraded.metadata.generation, &upgraded.spec),
        (installed.metadata.generation, &installed.spec),
        "a provider upgrade must not change the pods"
    );
    active("v1.3.0").await;
    served_by_v2(&bed, "kept", true).await;

    // A load balancer goes with its Service.
    bed.services()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete the Service");
    eventually(
        "the Service web and its load balancer gone",
        WAIT,
        || async {
            (bed.service("web").await.is_none()
                && bed.cloud.sim.state().load_balancers().len() == 1)
                .then_some(())
        },
    )
    .await;

    // The install page's `helm rollback`: the first revision's values again. Each pod still has
    // v1.2.0 in its cache: nothing is downloaded.
    let downloads = blob_downloads(&registry);
    assert!(
        downloads >= 4,
        "each pod downloaded both versions: {downloads} blobs"
    );
    operator.helm(&["rollback", RELEASE, "1", "-n", NAMESPACE]);
    active("v1.2.0").await;
    served_by_v2(&bed, "kept", false).await;
    assert_eq!(
        blob_downloads(&registry),
        downloads,
        "a rollback to a cached version downloads nothing"
    );

    for pod in &mut pods {
        assert!(pod.running(), "{} exited or restarted", pod.name);
    }
    let warnings: Vec<String> = Api::<Event>::all(bed.client.clone())
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| !route_of_a_node_whose_instance_is_gone(e))
        .map(|e| format!("{:?}: {:?}", e.reason, e.note))
        .collect();
    assert!(warnings.is_empty(), "no reconcile may fail: {warnings:#?}");
    let manifest = operator.helm(&["get", "manifest", RELEASE, "-n", NAMESPACE]);
    let release = chart::parse(&manifest);
    let account = chart::only(&release, "ServiceAccount").name().to_string();
    rbac_is_what_the_manager_uses(&bed, &release, &account);

    // The install page's `helm uninstall`: the pods stop (cleanly, on SIGTERM) as their Deployment
    // goes, then the release's objects; the CRD stays.
    for pod in &mut pods {
        let exit = pod.terminate().await;
        assert!(exit.success(), "{} exited with {exit} on SIGTERM", pod.name);
    }
    operator.helm(&["uninstall", RELEASE, "-n", NAMESPACE]);
    assert!(
        cloud_providers
            .get_opt(RELEASE)
            .await
            .expect("get")
            .is_none()
    );
    assert!(deployments.get_opt(RELEASE).await.expect("get").is_none());
    // The cloud keeps the load balancer; its Service keeps the finalizer, so deleting it
    // leaves it terminating until a manager runs again.
    bed.services()
        .delete("kept", &DeleteParams::default())
        .await
        .expect("delete the Service");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = bed
        .service("kept")
        .await
        .expect("the Service waits for its finalizer");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert_eq!(
        kept.metadata.finalizers.unwrap_or_default(),
        ["service.kubernetes.io/load-balancer-cleanup"]
    );
    assert_eq!(bed.cloud.sim.state().load_balancers().len(), 1);
}

/// Wait until the ingress of Service `name` says it was (`true`) or was not (`false`) made by
/// simcloud v1.3.0, whose ingress has a hostname under its build stamp.
async fn served_by_v2(bed: &Testbed, name: &str, v2: bool) {
    let stamp = format!("{}.", guest_builds::SIMCLOUD_V2_BUILD);
    let what = format!(
        "Service {name} reconciled by v1.{}.0",
        if v2 { 3 } else { 2 }
    );
    eventually(&what, WAIT, || async {
        let ingress = bed.service(name).await?.status?.load_balancer?.ingress?;
        let stamped = ingress
            .iter()
            .any(|i| i.hostname.as_deref().is_some_and(|h| h.starts_with(&stamp)));
        (!ingress.is_empty() && stamped == v2).then_some(())
    })
    .await;
}

/// How many blobs the registry has served so far.
fn blob_downloads(registry: &Registry) -> usize {
    registry
        .log()
        .lines()
        .filter(|line| line.contains("\"GET /v2/") && line.contains("/blobs/"))
        .count()
}

/// Three nodes join and get routes; one shuts down, one goes away; two LoadBalancer
/// Services get their load balancers. Every controller reads and writes what it does on a
/// real cluster.
async fn live_a_little(bed: &Testbed) {
    let nodes: Api<Node> = Api::all(bed.client.clone());
    // The first node update meets a conflict, so the node is read again (as the lifecycle
    // controller's taint patch is, below).
    bed.emulator.faults().conflict_next_updates("nodes", 1);
    let mut ids = BTreeMap::new();
    for (index, name) in ["node-a", "node-b", "node-c"].into_iter().enumerate() {
        ids.insert(name, bed.add_instance(name, "zone-1"));
        let mut node = Testbed::kubelet_node(name);
        let spec = node.spec.as_mut().expect("a spec");
        let cidr = format!("10.244.{index}.0/24");
        spec.pod_cidr = Some(cidr.clone());
        spec.pod_cidrs = Some(vec![cidr]);
        bed.create_node(&node).await;
    }
    eventually("nodes initialised and routed", WAIT, || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let initialised = list.items.iter().all(|n| !is_uninitialized(n));
        (initialised && bed.cloud.sim.state().routes().len() == 3).then_some(())
    })
    .await;

    for name in ["web", "kept"] {
        bed.services()
            .create(&PostParams::default(), &Testbed::lb_service(name))
            .await
            .expect("create a LoadBalancer Service");
    }
    eventually("the load balancers' ingress", WAIT, || async {
        for name in ["web", "kept"] {
            e2e::testbed::ingress_ip(&bed.service(name).await?)?;
        }
        Some(())
    })
    .await;

    let state = bed.cloud.sim.state();
    bed.emulator.faults().conflict_next_updates("nodes", 1);
    state.set_instance_status(&ids["node-b"], InstanceStatus::Stopped);
    assert!(state.delete_instance(&ids["node-c"]));
    for name in ["node-b", "node-c"] {
        set_not_ready(bed, name).await;
    }
    eventually("node-b tainted shut down, node-c deleted", WAIT, || async {
        let b = bed.node("node-b").await?;
        (has_taint(&b, SHUTDOWN) && bed.node("node-c").await.is_none()).then_some(())
    })
    .await;
}

/// node-c's instance is deleted before the lifecycle controller deletes the Node: in that
/// window the route controller, as upstream's, removes the blackholed route and may try to
/// make it again for the Node still there, which the cloud refuses (`FailedToCreateRoute`).
fn route_of_a_node_whose_instance_is_gone(event: &Event) -> bool {
    event.reason.as_deref() == Some("FailedToCreateRoute")
        && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("node-c")
}

/// Report the node's Ready condition Unknown, as the node-lifecycle controller does when
/// its kubelet stops posting.
async fn set_not_ready(bed: &Testbed, name: &str) {
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
        "lastHeartbeatTime": "2026-11-24T00:00:00Z", "lastTransitionTime": "2026-11-24T00:00:00Z"
    }]}});
    Api::<Node>::all(bed.client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("set Ready Unknown");
}

/// The chart's RBAC is exactly what the manager used: the API server refused none of its
/// requests, and each verb on each resource the rendered roles grant was asked for at least
/// once (by name where the rule names objects).
fn rbac_is_what_the_manager_uses(bed: &Testbed, objects: &[Rendered], account: &str) {
    let user = kube_emulator::service_account_user(NAMESPACE, account);
    let decisions: Vec<_> = bed
        .emulator
        .authorizations()
        .into_iter()
        .filter(|d| d.attributes.user == user)
        .collect();
    let refused: Vec<String> = decisions
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| format!("{:?}", d.attributes))
        .collect();
    assert!(
        refused.is_empty(),
        "the chart's RBAC refuses requests the manager makes: {refused:#?}"
    );
    let used = |grant: &Grant| {
        decisions.iter().any(|d| {
            let a = &d.attributes;
            let resource = match a.subresource.as_str() {
                "" => a.resource.clone(),
                sub => format!("{}/{sub}", a.resource),
            };
            a.verb == grant.verb
                && a.api_group == grant.group
                && resource == grant.resource
                && grant.namespace.as_ref().is_none_or(|ns| *ns == a.namespace)
                && (grant.names.is_empty() || grant.names.contains(&a.name))
        })
    };
    let grants = chart::grants(objects, NAMESPACE, account);
    let unused: Vec<&Grant> = grants.iter().filter(|g| !used(g)).collect();
    assert!(
        unused.is_empty(),
        "the chart grants what the manager never asked for: {unused:#?}"
    );
}

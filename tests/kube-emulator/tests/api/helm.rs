//! Stock Helm 4 against the emulator, with nothing but its kubeconfig: the
//! commands a user types (`install`, `upgrade --reuse-values --set`,
//! `history`, `rollback`, `list`, `uninstall`) of a chart with a
//! Deployment, a ServiceAccount, RBAC, a ConfigMap, a CRD in `crds/` and
//! a custom resource, and the cluster after each, read through kube-rs.
//! Helm validates through OpenAPI v3, applies server-side, waits for the
//! CRD, and keeps its releases in Secrets it writes in protobuf.

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::harness::start;

const NAMESPACE: &str = "gadgets";

/// Where `make setup` (tests/install-chart-tools.sh) installs helm, from
/// the repository root; `$HELM` overrides it.
const HELM: &str = "target/test-tools/helm/helm";

/// The helm binary; a test that needs it fails, never skips, without it.
fn helm_binary() -> PathBuf {
    let binary = std::env::var_os("HELM").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .join(HELM)
        },
        PathBuf::from,
    );
    assert!(
        binary.is_file(),
        "helm is not installed at {}: run `make setup` (or tests/install-chart-tools.sh), or set HELM to its path",
        binary.display()
    );
    binary
}

/// Helm with its own home and the emulator's kubeconfig.
struct Helm {
    binary: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Helm {
    fn new(emulator: &kube_emulator::Emulator) -> Helm {
        let home = tempfile::tempdir().unwrap();
        let kubeconfig = home.path().join("kubeconfig");
        emulator.write_kubeconfig(&kubeconfig).unwrap();
        Helm {
            binary: helm_binary(),
            home,
            kubeconfig,
        }
    }

    /// Runs `helm args…`; what it printed, or a panic with its stderr.
    async fn run(&self, args: &[&str]) -> String {
        let home = self.home.path();
        let output = tokio::process::Command::new(&self.binary)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECACHEDIR", home.join("kube-cache"))
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "helm {} failed ({}):\n{}{stdout}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

fn chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/api/fixtures/gadget")
        .display()
        .to_string()
}

fn gadgets(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Gadget"));
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

/// The release's Secrets, by name, with their `status` label.
async fn releases(client: &Client) -> Vec<(String, String)> {
    let secrets = Api::<Secret>::namespaced(client.clone(), NAMESPACE);
    let list = secrets
        .list(&ListParams::default().labels("owner=helm,name=demo"))
        .await
        .unwrap();
    list.items
        .iter()
        .map(|s| {
            assert_eq!(s.type_.as_deref(), Some("helm.sh/release.v1"));
            (
                s.metadata.name.clone().unwrap(),
                s.metadata.labels.as_ref().unwrap()["status"].clone(),
            )
        })
        .collect()
}

/// What the chart's values turned into: the Deployment's replicas,
/// generation and pod annotations, the ConfigMap's and the Gadget's
/// greeting.
async fn rendered(client: &Client) -> (i32, i64, Value, String, Value) {
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    let generation = deployment.meta().generation.unwrap();
    let spec = deployment.spec.unwrap();
    let annotations = json!(spec.template.metadata.unwrap().annotations);
    let config = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    let gadget = gadgets(client).get("demo").await.unwrap();
    (
        spec.replicas.unwrap(),
        generation,
        annotations,
        config.data.unwrap()["greeting"].clone(),
        gadget.data["spec"]["greeting"].clone(),
    )
}

/// Whether `name` no longer exists.
async fn gone<K>(api: Api<K>, name: &str) -> bool
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_none()
}

/// The revisions `helm history` prints: number, status, description.
fn history(printed: &str) -> Vec<(String, String, String)> {
    printed
        .lines()
        .skip(1)
        .map(|line| {
            let cells: Vec<&str> = line.split('\t').map(str::trim).collect();
            (
                cells[0].to_owned(),
                cells[2].to_owned(),
                cells[cells.len() - 1].to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn helm_installs_upgrades_rolls_back_and_uninstalls_a_chart() {
    let cluster = start().await;
    let client = cluster.client.clone();
    let helm = Helm::new(&cluster.emulator);
    let chart = chart();

    let installed = helm
        .run(&[
            "install",
            "demo",
            &chart,
            "-n",
            NAMESPACE,
            "--create-namespace",
        ])
        .await;
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("gadgets.example.com")
        .await
        .unwrap();
    let established = crd.status.unwrap().conditions.unwrap();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    assert_eq!(
        rendered(&client).await,
        (1, 1, Value::Null, "hello".into(), json!("hello"))
    );
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    let annotations = deployment.metadata.annotations.unwrap();
    assert_eq!(annotations["meta.helm.sh/release-name"], "demo");
    assert_eq!(
        deployment.metadata.managed_fields.unwrap()[0]
            .manager
            .as_deref(),
        Some("helm"),
        "applied server-side"
    );
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    let role = Api::<ClusterRole>::all(client.clone())
        .get("demo-gadget")
        .await
        .unwrap();
    assert_eq!(
        role.rules.unwrap()[0].resources.as_ref().unwrap()[0],
        "gadgets"
    );
    let binding = Api::<ClusterRoleBinding>::all(client.clone())
        .get("demo-gadget")
        .await
        .unwrap();
    assert_eq!(
        binding.subjects.unwrap()[0].namespace.as_deref(),
        Some(NAMESPACE)
    );
    Api::<Role>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE)
        .get("demo")
        .await
        .unwrap();
    assert_eq!(
        releases(&client).await,
        [("sh.helm.release.v1.demo.v1".into(), "deployed".into())]
    );

    helm.run(&[
        "upgrade",
        "demo",
        &chart,
        "-n",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "greeting=hi,replicas=2,podAnnotations.checksum=abc",
    ])
    .await;
    assert_eq!(
        rendered(&client).await,
        (2, 2, json!({"checksum": "abc"}), "hi".into(), json!("hi"))
    );
    assert_eq!(
        releases(&client).await,
        [
            ("sh.helm.release.v1.demo.v1".into(), "superseded".into()),
            ("sh.helm.release.v1.demo.v2".into(), "deployed".into()),
        ]
    );
    let printed = helm.run(&["history", "demo", "-n", NAMESPACE]).await;
    assert_eq!(
        history(&printed),
        [
            ("1".into(), "superseded".into(), "Install complete".into()),
            ("2".into(), "deployed".into(), "Upgrade complete".into()),
        ],
        "{printed}"
    );

    // Revision 1 never rendered the pod annotation: applying it again
    // takes the annotation away, as field ownership does on a real server.
    helm.run(&["rollback", "demo", "1", "-n", NAMESPACE]).await;
    assert_eq!(
        rendered(&client).await,
        (1, 3, Value::Null, "hello".into(), json!("hello"))
    );
    let printed = helm.run(&["history", "demo", "-n", NAMESPACE]).await;
    assert_eq!(
        history(&printed)[2],
        ("3".into(), "deployed".into(), "Rollback to 1".into()),
        "{printed}"
    );
    let listed = helm.run(&["list", "-n", NAMESPACE]).await;
    let row: Vec<&str> = listed
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .map(str::trim)
        .collect();
    assert_eq!(
        [row[0], row[1], row[2], row[4]],
        ["demo", NAMESPACE, "3", "deployed"],
        "{listed}"
    );

    let uninstalled = helm.run(&["uninstall", "demo", "-n", NAMESPACE]).await;
    assert!(
        uninstalled.contains("release \"demo\" uninstalled"),
        "{uninstalled}"
    );
    assert!(gone::<Deployment>(Api::namespaced(client.clone(), NAMESPACE), "demo").await);
    assert!(gone::<ConfigMap>(Api::namespaced(client.clone(), NAMESPACE), "demo").await);
    assert!(gone::<ServiceAccount>(Api::namespaced(client.clone(), NAMESPACE), "demo").await);
    assert!(gone::<RoleBinding>(Api::namespaced(client.clone(), NAMESPACE), "demo").await);
    assert!(gone::<ClusterRoleBinding>(Api::all(client.clone()), "demo-gadget").await);
    assert!(gone(gadgets(&client), "demo").await);
    assert!(releases(&client).await.is_empty());
    // Helm leaves the CRDs of `crds/` installed.
    Api::<CustomResourceDefinition>::all(client.clone())
        .get("gadgets.example.com")
        .await
        .unwrap();
}

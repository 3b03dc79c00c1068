//! The `CloudProvider` resource against the Kubernetes API emulator, through a kubeconfig as
//! in production: the committed CRD is accepted and established, the docs' example is
//! stored and read back unchanged through `Api<CloudProvider>`, the schema refuses what it
//! can tell is wrong, spec and status are written apart, and `kubectl get cloudproviders`
//! prints the printer columns.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, ResourceExt};
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::{Value, json};
use wasm_ccm::resource::{
    CloudProvider, CloudProviderStatus, Condition, ConditionStatus, ProviderVersion,
    RolloutStrategy, condition,
};

const CRD_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml"
);

/// The example of the docs' "The CloudProvider resource" page, as YAML: its first yaml block.
fn documented_example() -> String {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/operators/cloudprovider.md"
    ))
    .expect("docs/src/operators/cloudprovider.md");
    let block = page
        .split_once("```yaml\n")
        .expect("the page has a yaml example")
        .1;
    block
        .split_once("```")
        .expect("a closed block")
        .0
        .to_owned()
}

/// An emulator with the committed CRD installed and established, and a client for it.
async fn cluster() -> (Emulator, Client) {
    let emulator = Emulator::start("127.0.0.1:0".parse().unwrap(), EmulatorOptions::default())
        .await
        .expect("emulator starts");
    let config = Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default()).await;
    let client = Client::try_from(config.unwrap()).unwrap();
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&std::fs::read_to_string(CRD_FILE).unwrap()).unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|err| panic!("the API server refuses the committed CRD: {err}"));
    let established = await_condition(
        crds,
        "cloudproviders.wasm-ccm.io",
        conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(10), established)
        .await
        .expect("the CRD is established within 10s")
        .unwrap();
    (emulator, client)
}

fn example() -> CloudProvider {
    serde_saphyr::from_str(&documented_example())
        .expect("the documented example is a CloudProvider")
}

/// Now, to the second, as the API server stores times.
fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap())
}

fn condition(type_: &str, status: ConditionStatus, reason: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message: String::new(),
        last_transition_time: now(),
        observed_generation: Some(1),
    }
}

fn active_status() -> CloudProviderStatus {
    let digest = "sha256:4f1c2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7";
    CloudProviderStatus {
        observed_generation: Some(1),
        active: Some(ProviderVersion {
            reference: "oci://registry.example.com/acme/simcloud:v1.2.0".to_owned(),
            digest: digest.to_owned(),
            version: Some("simcloud@sha256:4f1c2a3b4c5d".to_owned()),
            since: Some(now()),
        }),
        conditions: vec![
            condition(condition::READY, ConditionStatus::True, "Active"),
            condition(condition::PROGRESSING, ConditionStatus::False, "Done"),
            condition(
                condition::SPEC_APPLIED,
                ConditionStatus::False,
                "InvalidSpec",
            ),
        ],
        ..CloudProviderStatus::default()
    }
}

#[test]
fn resource_documented_example_names_only_fields_of_the_types() {
    // Unknown fields would be dropped silently by serde (and pruned by the API server):
    // what the example says must survive a round trip through the types.
    let written: Value = serde_saphyr::from_str(&documented_example()).unwrap();
    let typed = serde_json::to_value(example()).unwrap();
    assert!(same(&typed, &written), "{typed:#}\nis not\n{written:#}");
}

/// Equal, numbers by value (the types write 50 as 50.0 when it is a rate).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

#[tokio::test]
async fn resource_example_is_stored_and_read_back_unchanged() {
    let (_emulator, client) = cluster().await;
    let providers = Api::<CloudProvider>::all(client);
    let created = providers
        .create(&PostParams::default(), &example())
        .await
        .unwrap_or_else(|err| panic!("the API server refuses the documented example: {err}"));
    let read = providers.get("simcloud").await.unwrap();
    assert_eq!(
        read.spec,
        example().spec,
        "nothing pruned or defaulted away"
    );
    assert_eq!(read.spec, created.spec);
    assert_eq!(
        read.spec.rollout.as_ref().unwrap().strategy,
        Some(RolloutStrategy::Shadow)
    );
    assert_eq!(read.metadata.generation, Some(1));
}

#[tokio::test]
async fn resource_with_a_bad_enum_or_bound_or_pattern_is_refused_with_422() {
    let (_emulator, client) = cluster().await;
    // Untyped, as kubectl would send it: the types cannot say Canary.
    let untyped = Api::<DynamicObject>::all_with(client, &ApiResource::erase::<CloudProvider>(&()));
    let mut bad = serde_json::to_value(example()).unwrap();
    bad["spec"]["rollout"]["strategy"] = json!("Canary");
    bad["spec"]["digest"] = json!("sha256:4f1c");
    bad["spec"]["limits"]["maxConcurrentCalls"] = json!(0);
    bad["spec"]["credentials"][0]["type"] = json!("Basic");
    let bad: DynamicObject = serde_json::from_value(bad).unwrap();
    let error = untyped
        .create(&PostParams::default(), &bad)
        .await
        .expect_err("an invalid CloudProvider is refused");
    let kube::Error::Api(status) = error else {
        panic!("not an API error: {error}");
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{}",
        status.message
    );
    let mut fields: Vec<String> = status
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "spec.credentials[0].type",
            "spec.digest",
            "spec.limits.maxConcurrentCalls",
            "spec.rollout.strategy"
        ],
        "{}",
        status.message
    );
}

#[tokio::test]
async fn resource_status_and_spec_are_written_apart() {
    let (_emulator, client) = cluster().await;
    let providers = Api::<CloudProvider>::all(client);
    let created = providers
        .create(&PostParams::default(), &example())
        .await
        .unwrap();

    // A status write through /status changes neither the spec nor the generation.
    // One status value throughout: `active_status()` stamps the time, which may tick between calls.
    let status = active_status();
    let mut with_status = created.clone();
    with_status.status = Some(status.clone());
    with_status.spec.name = "renamed-through-status".to_owned();
    let written = providers
        .replace_status("simcloud", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(
        written.spec,
        example().spec,
        "spec unchanged by a status write"
    );
    assert_eq!(written.status, Some(status.clone()));
    assert_eq!(written.metadata.generation, Some(1));

    // A spec write through the main resource keeps the status and bumps the generation.
    let patch = json!({"spec": {"provider": "oci://registry.example.com/acme/simcloud:v1.3.0"},
                       "status": {"observedGeneration": 99}});
    let updated = providers
        .patch("simcloud", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        updated.spec.provider,
        "oci://registry.example.com/acme/simcloud:v1.3.0"
    );
    assert_eq!(
        updated.status,
        Some(status),
        "status unchanged by a spec write"
    );
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(updated.name_any(), "simcloud");
}

/// The line of `table` whose first column is `name`, split into columns.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

#[tokio::test]
async fn resource_printer_columns_show_in_kubectl_get() {
    let (emulator, client) = cluster().await;
    let providers = Api::<CloudProvider>::all(client);
    providers
        .create(&PostParams::default(), &example())
        .await
        .unwrap();
    let mut pending = example();
    pending.metadata.name = Some("pending".to_owned());
    providers
        .create(&PostParams::default(), &pending)
        .await
        .unwrap();
    let status = json!({"status": active_status()});
    providers
        .patch_status("simcloud", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
    let cache = dir.path().join("kubectl-cache");
    let kubectl = |args: &'static [&'static str]| {
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend(args);
        let cache = cache.clone();
        async move {
            kube_emulator::kubectl(&cache, &all)
                .await
                .unwrap_or_else(|err| panic!("{err}"))
        }
    };

    let table = kubectl(&["get", "cloudproviders"]).await;
    assert_eq!(
        table
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        [
            "NAME",
            "PROVIDER",
            "ACTIVE",
            "READY",
            "PROGRESSING",
            "SPEC",
            "AGE"
        ],
        "{table}"
    );
    assert_eq!(
        row(&table, "simcloud")[..6],
        [
            "simcloud",
            "simcloud",
            "simcloud@sha256:4f1c2a3b4c5d",
            "True",
            "False",
            "InvalidSpec"
        ],
        "a refused spec shows beside the version that keeps serving: {table}"
    );
    assert_eq!(
        row(&table, "pending")[..2],
        ["pending", "simcloud"],
        "no status yet: the status columns are blank, Age follows: {table}"
    );
    assert_eq!(row(&table, "pending").len(), 3, "{table}");

    let wide = kubectl(&["get", "cloudproviders", "-o", "wide"]).await;
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header[header.len() - 2..],
        ["REFERENCE", "REASON"],
        "{wide}"
    );
    let simcloud = row(&wide, "simcloud");
    assert_eq!(
        simcloud[simcloud.len() - 2..],
        ["oci://registry.example.com/acme/simcloud:v1.2.0", "Active"],
        "{wide}"
    );
}

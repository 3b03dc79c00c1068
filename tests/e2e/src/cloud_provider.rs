//! A `CloudProvider` for the testbed: the CRD installed into the emulator, the simulator's
//! token in a Secret, a resource naming a guest, and a manager that follows it
//! (`--provider-resource`). Shared by the hot-swap tests, the demo and the benchmarks.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use wasm_ccm::manager::{ManagerConfig, ProviderMode};
use wasm_ccm::resource::{CloudProvider, CloudProviderStatus, ConditionStatus};

use crate::testbed::{Testbed, eventually};

/// The CRD the chart ships.
const CRD: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml"
));
/// The resource's name.
pub const NAME: &str = "simcloud";
/// Where the token Secret lives.
pub const NAMESPACE: &str = "kube-system";
/// The Secret holding the simulator's token (key `token`).
pub const TOKEN_SECRET: &str = "simcloud-token";
const WAIT: Duration = Duration::from_secs(30);

/// Install the CloudProvider CRD into the testbed's API server and wait until it is
/// established.
pub async fn install_crd(bed: &Testbed) {
    install_crd_into(&bed.client).await;
}

/// Install the CloudProvider CRD the chart ships through `client` and wait until it is
/// established.
pub async fn install_crd_into(client: &kube::Client) {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(CRD).expect("the CRD parses");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    tokio::time::timeout(
        WAIT,
        await_condition(
            crds,
            "cloudproviders.wasm-ccm.io",
            conditions::is_crd_established(),
        ),
    )
    .await
    .expect("the CRD is established in time")
    .expect("watch the CRD");
}

/// Create or update the Secret holding the simulator's token.
pub async fn token_secret(bed: &Testbed, token: &str) {
    secret(bed, TOKEN_SECRET, token).await;
}

/// Create or update the Secret `name` in [`NAMESPACE`] holding `token` under `token`.
pub async fn secret(bed: &Testbed, name: &str, token: &str) {
    let secrets: Api<Secret> = Api::namespaced(bed.client.clone(), NAMESPACE);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name},
        "stringData": {"token": token},
    }))
    .expect("a Secret");
    secrets
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("apply the token Secret");
}

/// A `CloudProvider` running the component at `wasm`, configured with `config`, granted
/// the simulator with the token from the Secret, rolled back within 2 minutes after 10
/// calls.
pub fn cloud_provider(bed: &Testbed, wasm: &str, config: &str) -> serde_json::Value {
    let sim = bed.cloud.sim.url();
    json!({
        "apiVersion": "wasm-ccm.io/v1alpha1",
        "kind": "CloudProvider",
        "metadata": {"name": NAME},
        "spec": {
            "provider": format!("file://{wasm}"),
            "name": "simcloud",
            "cloudConfig": {"inline": config},
            "egress": {"allowedHosts": [sim]},
            "credentials": [{
                "host": sim,
                "secretKeyRef": {"name": TOKEN_SECRET, "key": "token", "namespace": NAMESPACE},
            }],
            "rollout": {"rollback": {"window": "2m", "minimumCalls": 10}},
        },
    })
}

/// The simcloud cloud config of the testbed, as the spec carries it inline.
pub fn simcloud_config(bed: &Testbed) -> String {
    String::from_utf8(bed.cloud.simcloud_config()).expect("JSON is UTF-8")
}

/// The CloudProvider API.
pub fn api(bed: &Testbed) -> Api<CloudProvider> {
    Api::all(bed.client.clone())
}

/// Create the CloudProvider `object` names, or replace its spec (as `kubectl edit` does:
/// read, change, write, and again when the manager wrote in between, e.g. its rollback
/// record).
pub async fn apply(bed: &Testbed, object: &serde_json::Value) {
    let wanted: CloudProvider = serde_json::from_value(object.clone()).expect("a CloudProvider");
    let name = wanted.metadata.name.clone().expect("a named CloudProvider");
    let api = api(bed);
    for _ in 0..10 {
        let written = match api.get_opt(&name).await.expect("get the CloudProvider") {
            None => api.create(&PostParams::default(), &wanted).await,
            Some(mut current) => {
                current.spec = wanted.spec.clone();
                api.replace(&name, &PostParams::default(), &current).await
            }
        };
        match written {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => panic!("write the CloudProvider {name}: {error}"),
        }
    }
    panic!("the CloudProvider {name} kept changing under 10 writes");
}

/// A manager following the resource, with the testbed's egress flags as defaults (no
/// grants or credentials: those come from the spec).
pub fn resource_config(bed: &Testbed) -> ManagerConfig {
    let mut config = bed.config();
    config.provider = ProviderMode::Resource {
        names: vec![NAME.into()],
        allow_untagged_cloud: false,
        grant_ceiling: None,
        tag_check_interval: Duration::from_secs(300),
    };
    config.egress.allow.clear();
    config.egress.credentials.clear();
    config
}

/// The status once `check` holds for it (waiting up to 30 s); `what` names the wait.
pub async fn status_where(
    bed: &Testbed,
    what: &str,
    check: impl Fn(&CloudProviderStatus) -> bool,
) -> CloudProviderStatus {
    eventually(what, WAIT, || async {
        let object = api(bed).get(NAME).await.ok()?;
        let status = object.status?;
        check(&status).then_some(status)
    })
    .await
}

/// The reference of the active version, or "".
pub fn active_reference(status: &CloudProviderStatus) -> &str {
    status.active.as_ref().map_or("", |a| a.reference.as_str())
}

/// The digest of the active version, or "".
pub fn active_digest(status: &CloudProviderStatus) -> &str {
    status.active.as_ref().map_or("", |a| a.digest.as_str())
}

/// Whether `status` has the condition `type_` at `value` with `reason`.
pub fn condition_is(
    status: &CloudProviderStatus,
    type_: &str,
    value: ConditionStatus,
    reason: &str,
) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == value && c.reason == reason)
}

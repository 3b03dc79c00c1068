//! CustomResourceDefinitions: creating one makes its resource servable;
//! custom resources get schema pruning, defaults and validation,
//! generation tracking and a status subresource; deleting the CRD deletes
//! its instances.

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::harness::{start, status, within};

/// The spec of a provider, as the manager's cluster-scoped resource might look.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ccm.example.com",
    version = "v1",
    kind = "Provider",
    status = "ProviderStatus",
    shortname = "prov"
)]
pub struct ProviderSpec {
    reference: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replicas: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ProviderStatus {
    active: Option<String>,
}

async fn install(client: &Client) {
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.create(&PostParams::default(), &Provider::crd())
        .await
        .unwrap();
    within(
        5,
        await_condition(
            crds,
            "providers.ccm.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();
}

fn provider(name: &str, reference: &str) -> Provider {
    Provider::new(
        name,
        ProviderSpec {
            reference: reference.into(),
            replicas: None,
        },
    )
}

#[tokio::test]
async fn a_crd_makes_its_resource_servable_with_generation_and_status() {
    let cluster = start().await;
    let providers = Api::<Provider>::all(cluster.client.clone());
    let err = status(providers.list(&Default::default()).await.unwrap_err());
    assert_eq!(err.code, 404, "not served before the CRD exists");
    install(&cluster.client).await;

    let created = providers
        .create(&PostParams::default(), &provider("p1", "oci://r/p:v1"))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let mut update = created.clone();
    update.spec.reference = "oci://r/p:v2".into();
    update.status = Some(ProviderStatus {
        active: Some("ignored".into()),
    });
    let updated = providers
        .replace("p1", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(
        updated.status, None,
        "the main resource cannot write status"
    );

    let with_status = providers
        .patch_status(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"reference": "ignored"}, "metadata": {"labels": {"ignored": "yes"}}, "status": {"active": "v2"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        with_status
            .status
            .as_ref()
            .and_then(|s| s.active.as_deref()),
        Some("v2")
    );
    assert_eq!(with_status.spec.reference, "oci://r/p:v2");
    assert!(
        with_status.labels().is_empty(),
        "custom resource status updates change only status"
    );
    assert_eq!(with_status.metadata.generation, Some(2));

    let mut unversioned = with_status.clone();
    unversioned.metadata.resource_version = None;
    let err = status(
        providers
            .replace("p1", &PostParams::default(), &unversioned)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "providers.ccm.example.com \"p1\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let err = status(
        providers
            .patch(
                "p1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 415, "no strategic merge for custom resources");
}

#[tokio::test]
async fn custom_resources_are_pruned_defaulted_and_validated_by_their_schema() {
    let cluster = start().await;
    install(&cluster.client).await;
    let gvk = GroupVersionKind::gvk("ccm.example.com", "v1", "Provider");
    let dynamic =
        Api::<DynamicObject>::all_with(cluster.client.clone(), &ApiResource::from_gvk(&gvk));
    let object = |spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "ccm.example.com/v1", "kind": "Provider", "metadata": {"name": "p"}, "spec": spec})).unwrap()
    };
    let err = status(
        dynamic
            .create(&PostParams::default(), &object(json!({"reference": 7})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Provider.ccm.example.com \"p\" is invalid: spec.reference: Invalid value: \"integer\": spec.reference in body must be of type string: \"integer\""
    );
    let err = status(
        dynamic
            .create(&PostParams::default(), &object(json!({})))
            .await
            .unwrap_err(),
    );
    assert!(
        err.message.ends_with("spec.reference: Required value"),
        "{}",
        err.message
    );
    let created = dynamic
        .create(
            &PostParams::default(),
            &object(json!({"reference": "oci://x", "junk": true})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"],
        json!({"reference": "oci://x"}),
        "unknown fields are pruned"
    );
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_instances_and_stops_serving() {
    let cluster = start().await;
    install(&cluster.client).await;
    let providers = Api::<Provider>::all(cluster.client.clone());
    providers
        .create(&PostParams::default(), &provider("p1", "oci://x"))
        .await
        .unwrap();
    let mut held = provider("p2", "oci://y");
    held.metadata.finalizers = Some(vec!["ccm.example.com/cleanup".into()]);
    providers
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    let mut watch = providers
        .watch(&Default::default(), "0")
        .await
        .unwrap()
        .boxed();

    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    crds.delete("providers.ccm.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = crds.get("providers.ccm.example.com").await.unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "held by the instance with a finalizer"
    );
    let err = status(
        providers
            .create(&PostParams::default(), &provider("p3", "oci://z"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 405);

    providers
        .patch(
            "p2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(
        crds.get_opt("providers.ccm.example.com")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        status(providers.list(&Default::default()).await.unwrap_err()).code,
        404
    );
    // The watch saw both instances and their deletion, then ends.
    let mut events = 0;
    while within(5, watch.next()).await.is_some() {
        events += 1;
    }
    assert!(
        events >= 4,
        "two ADDED, a MODIFIED and DELETEDs, got {events}"
    );
}

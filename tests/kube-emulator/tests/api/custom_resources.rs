//! CustomResourceDefinitions: creating one makes its resource servable
//! (and a CRD breaking upstream's schema or naming rules is a 422); custom
//! resources get schema pruning, defaults and validation (type errors as
//! `FieldValueTypeInvalid`, duplicates in `set` and `map` lists, the kind),
//! generation tracking and a status subresource; deleting the CRD is
//! asynchronous, as upstream's finalizer deletes its instances first.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
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

/// A Provider as a dynamic object, for bodies the typed struct cannot hold.
fn dynamic_providers(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ccm.example.com", "v1", "Provider");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn dynamic(body: serde_json::Value) -> DynamicObject {
    serde_json::from_value(body).unwrap()
}

#[tokio::test]
async fn a_type_error_in_a_custom_resource_is_field_value_type_invalid() {
    let cluster = start().await;
    install(&cluster.client).await;
    let err = status(
        dynamic_providers(&cluster.client)
            .create(
                &PostParams::default(),
                &dynamic(json!({"apiVersion": "ccm.example.com/v1", "kind": "Provider",
                    "metadata": {"name": "p"}, "spec": {"reference": "oci://x", "replicas": "two"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Provider.ccm.example.com \"p\" is invalid: spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
    let cause = &err.details.unwrap().causes[0];
    assert_eq!(cause.reason, "FieldValueTypeInvalid");
    assert_eq!(cause.field, "spec.replicas");
}

#[tokio::test]
async fn a_custom_resource_of_another_kind_is_invalid_not_a_bad_request() {
    let cluster = start().await;
    install(&cluster.client).await;
    // Upstream decodes any kind into an unstructured object and names it in
    // the error; the strategy's type-meta check rejects it.
    let err = status(
        dynamic_providers(&cluster.client)
            .create(
                &PostParams::default(),
                &dynamic(json!({"apiVersion": "ccm.example.com/v1", "kind": "Gadget",
                    "metadata": {"name": "p"}, "spec": {"reference": "oci://x"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "Gadget.ccm.example.com \"p\" is invalid: kind: Invalid value: \"Gadget\": must be Provider"
    );
    let details = err.details.unwrap();
    assert_eq!(
        (details.kind.as_str(), details.group.as_str()),
        ("Gadget", "ccm.example.com")
    );
    assert_eq!(details.causes[0].field, "kind");
}

/// A cluster-scoped `widgets.example.com` CRD with `spec` as given.
fn widget_crd(spec: serde_json::Value) -> CustomResourceDefinition {
    let mut crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    for (key, value) in spec.as_object().unwrap() {
        crd["spec"][key] = value.clone();
    }
    serde_json::from_value(crd).unwrap()
}

fn one_version(schema: serde_json::Value) -> serde_json::Value {
    json!({"versions": [{"name": "v1", "served": true, "storage": true,
                         "schema": {"openAPIV3Schema": schema}}]})
}

async fn create_crd_error(client: &Client, crd: &CustomResourceDefinition) -> kube::core::Status {
    let err = Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), crd)
        .await
        .unwrap_err();
    let err = status(err);
    assert_eq!(
        (err.code, err.reason.as_str()),
        (422, "Invalid"),
        "{}",
        err.message
    );
    err
}

const INVALID_WIDGETS: &str =
    "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: ";

#[tokio::test]
async fn a_crd_schema_without_a_type_is_rejected_as_not_structural() {
    let cluster = start().await;
    let client = &cluster.client;
    // One schema shared by every version is reported under spec.validation,
    // where upstream's conversion to the internal type moves it.
    let err = create_crd_error(
        client,
        &widget_crd(one_version(
            json!({"properties": {"spec": {"type": "object"}}}),
        )),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root"
        )
    );
    let err = create_crd_error(
        client,
        &widget_crd(one_version(json!({"type": "object", "properties": {
            "spec": {"properties": {"size": {"type": "integer"}}},
            "tags": {"type": "array"}
        }}))),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}[spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields, \
             spec.validation.openAPIV3Schema.properties[tags].items: Required value: must be specified]"
        )
    );
    assert_eq!(err.details.unwrap().causes[0].reason, "FieldValueRequired");
    // Versions with schemas of their own are reported per version.
    let err = create_crd_error(
        client,
        &widget_crd(json!({"versions": [
            {"name": "v1", "served": true, "storage": true,
             "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "served": true, "storage": false,
             "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {}}}}}
        ]})),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}spec.versions[1].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
        )
    );
    let err = create_crd_error(
        client,
        &widget_crd(one_version(
            json!({"type": "object", "properties": {"spec": {
            "type": "object", "properties": {"ports": {
                "type": "array", "x-kubernetes-list-type": "map",
                "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}}}),
        )),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}spec.validation.openAPIV3Schema.properties[spec].properties[ports].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        )
    );
}

#[tokio::test]
async fn a_crd_whose_kind_breaks_the_naming_rules_is_rejected() {
    let cluster = start().await;
    let client = &cluster.client;
    let err = create_crd_error(
        client,
        &widget_crd(json!({"names": {"plural": "widgets", "singular": "widget",
                                     "kind": "Wid_get", "listKind": "WidgetList"}})),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}spec.names.kind: Invalid value: \"Wid_get\": may have mixed case, but should otherwise match: \
             a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, \
             and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    );
    let err = create_crd_error(
        client,
        &widget_crd(
            json!({"names": {"plural": "widgets", "kind": "Widget", "listKind": "Widget"}}),
        ),
    )
    .await;
    assert_eq!(
        err.message,
        format!(
            "{INVALID_WIDGETS}spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same"
        )
    );
}

#[tokio::test]
async fn duplicates_in_set_and_map_lists_are_rejected() {
    let cluster = start().await;
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    let crd = widget_crd(one_version(
        json!({"type": "object", "properties": {"spec": {
        "type": "object", "properties": {
            "zones": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": {"type": "string"}, "port": {"type": "integer"}}}}}}}}),
    ));
    crds.create(&PostParams::default(), &crd).await.unwrap();
    within(
        5,
        await_condition(
            crds,
            "widgets.example.com",
            conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let widgets =
        Api::<DynamicObject>::all_with(cluster.client.clone(), &ApiResource::from_gvk(&gvk));
    let widget = |spec: serde_json::Value| {
        dynamic(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w"}, "spec": spec}))
    };
    let err = status(
        widgets
            .create(
                &PostParams::default(),
                &widget(json!({"zones": ["a", "b", "a"],
                               "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Widget.example.com \"w\" is invalid: [spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"http\"}, \
         spec.zones[2]: Duplicate value: \"a\"]"
    );
    let causes = err.details.unwrap().causes;
    assert_eq!(causes[0].reason, "FieldValueDuplicate");
    assert_eq!(causes[1].field, "spec.zones[2]");
    widgets
        .create(
            &PostParams::default(),
            &widget(json!({"zones": ["a", "b"],
                           "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 80}]})),
        )
        .await
        .unwrap();
    let err = status(
        widgets
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"zones": ["b", "b"]}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Widget.example.com \"w\" is invalid: spec.zones[1]: Duplicate value: \"b\""
    );
}

/// Polls `f` every 20 ms until it is true, for at most 5 s.
async fn eventually<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    within(5, async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The next event of a watch, within 5 s.
async fn next_event<K>(watch: &mut BoxStream<'_, kube::Result<WatchEvent<K>>>) -> WatchEvent<K> {
    within(5, watch.next())
        .await
        .expect("an event")
        .expect("a watch event")
}

fn terminating(crd: &CustomResourceDefinition) -> Option<(String, String)> {
    crd.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Terminating")
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn deleting_a_crd_is_asynchronous_and_its_instances_go_first() {
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
    let listed = providers.list(&Default::default()).await.unwrap();
    let mut watch = providers
        .watch(
            &WatchParams::default(),
            listed.metadata.resource_version.as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();

    // The DELETE only marks the CRD, as upstream's REST.Delete does.
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    let marked = crds
        .delete("providers.ccm.example.com", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the CRD, not a Status: it is not gone yet");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.metadata.finalizers.as_deref(),
        Some(&["customresourcecleanup.apiextensions.k8s.io".to_owned()][..])
    );
    assert_eq!(
        terminating(&marked),
        Some(("True".into(), "InstanceDeletionPending".into()))
    );

    // Meanwhile no new instance may be created.
    let err = status(
        providers
            .create(&PostParams::default(), &provider("p3", "oci://z"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (405, "MethodNotAllowed"));
    assert_eq!(
        err.message,
        "create not allowed while custom resource definition is terminating"
    );
    let details = err.details.unwrap();
    assert_eq!(
        (details.group.as_str(), details.kind.as_str()),
        ("ccm.example.com", "providers")
    );

    // The finalizer deletes the instances: watchers see p1 go and p2 marked.
    match next_event(&mut watch).await {
        WatchEvent::Deleted(p) => assert_eq!(p.name_any(), "p1"),
        other => panic!("expected p1 DELETED, got {other:?}"),
    }
    match next_event(&mut watch).await {
        WatchEvent::Modified(p) => {
            assert_eq!(p.name_any(), "p2");
            assert!(p.metadata.deletion_timestamp.is_some());
        }
        other => panic!("expected p2 marked for deletion, got {other:?}"),
    }
    // p2's finalizer holds the CRD, which says why.
    eventually(|| async {
        let crd = crds.get("providers.ccm.example.com").await.unwrap();
        terminating(&crd) == Some(("True".into(), "InstanceDeletionInProgress".into()))
    })
    .await;
    assert!(
        crds.get_opt("providers.ccm.example.com")
            .await
            .unwrap()
            .is_some()
    );

    providers
        .patch(
            "p2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    match next_event(&mut watch).await {
        WatchEvent::Deleted(p) => assert_eq!(p.name_any(), "p2"),
        other => panic!("expected p2 DELETED, got {other:?}"),
    }
    // Then the CRD goes, and its resource with it: the watch ends.
    assert!(within(5, watch.next()).await.is_none(), "the watch ends");
    eventually(|| async {
        crds.get_opt("providers.ccm.example.com")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert_eq!(
        status(providers.list(&Default::default()).await.unwrap_err()).code,
        404
    );
}

#[tokio::test]
async fn deleting_a_crd_without_instances_lets_it_go_at_once() {
    let cluster = start().await;
    install(&cluster.client).await;
    let crds = Api::<CustomResourceDefinition>::all(cluster.client.clone());
    let mut watch = crds
        .watch(
            &WatchParams::default().fields("metadata.name=providers.ccm.example.com"),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    crds.delete("providers.ccm.example.com", &DeleteParams::default())
        .await
        .unwrap();
    // Marked by the DELETE, then the finalizer's progress; the update that
    // removes its finalizer is not written: the CRD is deleted as it was.
    let mut reasons = Vec::new();
    loop {
        match next_event(&mut watch).await {
            WatchEvent::Added(_) | WatchEvent::Bookmark(_) => {}
            WatchEvent::Modified(crd) => reasons.extend(terminating(&crd).map(|t| t.1)),
            WatchEvent::Deleted(_) => break,
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(
        reasons,
        ["InstanceDeletionPending", "InstanceDeletionInProgress"]
    );
    assert!(
        crds.get_opt("providers.ccm.example.com")
            .await
            .unwrap()
            .is_none()
    );
}

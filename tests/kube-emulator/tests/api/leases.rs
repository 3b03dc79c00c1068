//! Leases, the leader election lock: CRUD, conflicts, and no
//! unconditional updates.

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use reqwest::Method;
use serde_json::json;

use crate::harness::{get, send, start, status};

fn lease(holder: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": "2025-01-01T00:00:00.000000Z",
                 "renewTime": "2025-01-01T00:00:00.000000Z", "leaseTransitions": 0}
    }))
    .unwrap()
}

#[tokio::test]
async fn leases_are_created_renewed_and_contended() {
    let cluster = start().await;
    let leases = Api::<Lease>::namespaced(cluster.client.clone(), "kube-system");
    let created = leases
        .create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();
    let err = status(
        leases
            .create(&PostParams::default(), &lease("b"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "leases.coordination.k8s.io \"cloud-controller-manager\" already exists"
    );

    let mut renew = created.clone();
    renew.spec.as_mut().unwrap().renew_time =
        serde_json::from_value(json!("2025-01-01T00:00:10.000000Z")).unwrap();
    let renewed = leases
        .replace("cloud-controller-manager", &PostParams::default(), &renew)
        .await
        .unwrap();

    let mut steal = created.clone();
    steal.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let err = status(
        leases
            .replace("cloud-controller-manager", &PostParams::default(), &steal)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.details.as_ref().map(|d| d.group.as_str()),
        Some("coordination.k8s.io")
    );

    let mut blind = renewed.clone();
    blind.metadata.resource_version = None;
    let err = status(
        leases
            .replace("cloud-controller-manager", &PostParams::default(), &blind)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422, "leases never allow unconditional updates");

    let err = status(
        leases
            .patch(
                "cloud-controller-manager",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"leaseDurationSeconds": 0}})),
            )
            .await
            .unwrap_err(),
    );
    assert!(
        err.message
            .contains("spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        "{}",
        err.message
    );

    let mut other = lease("c");
    other.metadata.name = Some("other".into());
    let put = leases
        .replace("other", &PostParams::default(), &other)
        .await
        .unwrap();
    assert_eq!(put.name_any(), "other", "a PUT creates a lease");
}

#[tokio::test]
async fn micro_times_need_exactly_six_fractional_digits_on_every_write() {
    // kube-apiserver decodes acquireTime and renewTime (metav1.MicroTime)
    // with time.Parse(RFC3339Micro): anything but six fractional digits
    // fails JSON decoding, a 400 for a create or update and the patcher's
    // 422 on `patch` for a patch. Nothing is normalised or stored.
    let cluster = start().await;
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
    let body = |renew: &str| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "cloud-controller-manager"},
               "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": renew}})
        .to_string()
    };
    let refused = send(
        &cluster,
        Method::POST,
        path,
        "application/json",
        &body("2024-01-01T00:00:00Z"),
    )
    .await;
    assert_eq!(
        (refused.code, &refused.body["reason"]),
        (400, &json!("BadRequest"))
    );
    assert_eq!(
        refused.body["message"],
        r#"Lease in version "v1" cannot be handled as a Lease: parsing time "2024-01-01T00:00:00Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#
    );

    // Six digits in any offset are accepted, and answered in UTC.
    let created = send(
        &cluster,
        Method::POST,
        path,
        "application/json",
        &body("2024-01-01T02:00:00.000000+02:00"),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(
        created.body["spec"]["renewTime"],
        "2024-01-01T00:00:00.000000Z"
    );

    let mut update = created.body.clone();
    update["spec"]["acquireTime"] = json!("2024-01-01T00:00:00.5Z");
    let refused = send(
        &cluster,
        Method::PUT,
        &format!("{path}/cloud-controller-manager"),
        "application/json",
        &update.to_string(),
    )
    .await;
    assert_eq!(refused.code, 400);
    assert_eq!(
        refused.body["message"],
        r#"Lease in version "v1" cannot be handled as a Lease: parsing time "2024-01-01T00:00:00.5Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse ".5Z" as ".000000""#
    );

    let detail = r#"parsing time "2024-01-01T00:00:10Z" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "Z" as ".000000""#;
    let merge = send(
        &cluster,
        Method::PATCH,
        &format!("{path}/cloud-controller-manager"),
        "application/merge-patch+json",
        r#"{"spec": {"renewTime": "2024-01-01T00:00:10Z"}}"#,
    )
    .await;
    assert_eq!(
        (merge.code, &merge.body["reason"]),
        (422, &json!("Invalid"))
    );
    let message = merge.body["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "{"#)
            && message.ends_with(&format!(r#"}}": {detail}"#)),
        "{message}"
    );
    let strategic = send(
        &cluster,
        Method::PATCH,
        &format!("{path}/cloud-controller-manager"),
        "application/strategic-merge-patch+json",
        r#"{"spec": {"renewTime": "2024-01-01T00:00:10Z"}}"#,
    )
    .await;
    assert_eq!(strategic.code, 422);
    assert_eq!(
        strategic.body["message"],
        format!(
            r#" "" is invalid: patch: Invalid value: "map[spec:map[renewTime:2024-01-01T00:00:10Z]]": {detail}"#
        )
    );
    assert_eq!(
        strategic.body["details"],
        json!({"causes": [{"reason": "FieldValueInvalid", "field": "patch",
            "message": format!(r#"Invalid value: "map[spec:map[renewTime:2024-01-01T00:00:10Z]]": {detail}"#)}]})
    );

    let stored = get(&cluster, &format!("{path}/cloud-controller-manager")).await;
    assert_eq!(
        stored.body["spec"]["renewTime"],
        "2024-01-01T00:00:00.000000Z"
    );
    assert!(stored.body["spec"].get("acquireTime").is_none());
}

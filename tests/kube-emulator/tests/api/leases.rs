//! Leases, the leader election lock: CRUD, conflicts, and no
//! unconditional updates.

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::{start, status};

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

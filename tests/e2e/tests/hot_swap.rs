//! Run mode from a `CloudProvider` resource (`--provider-resource`), against the API
//! emulator and the cloud simulator: the first version comes from the resource, a spec
//! change swaps it under running controllers without one failed reconcile, every refused
//! rollout leaves the active version serving with a condition and an Event, credentials
//! come from a watched Secret, a version failing more than the one before it is rolled
//! back, and the Rust simcloud is swapped for its TypeScript and then its Python port as for
//! a new version of itself.
//!
//! Also: the refused rollouts one by one (a truncated component, a digest mismatch, a missing
//! export, an extra import, a failing `init`, a wrong name, a dropped capability, an unusable
//! spec, a grant outside `--egress-grant-ceiling`); grants and limits changed in place and a
//! new cloud config re-`init`ing the same component; a Secret missing (`Degraded`), wrong,
//! rotated or not readable, and never in the status; a restart inside the rollback window (the
//! previous version loaded again, the new one rolled back when it fails afterwards) and after
//! a rollback; a status patched to name another version, ignored after a restart; a shadow
//! promoted after agreeing, and one whose divergence blocks promotion and is never acted on;
//! a standby warm before failover, writing nothing while it stands by, and following the
//! leader's rollback.

use std::collections::HashMap;
use std::time::Duration;

use cloud_sim::Faults;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use e2e::cloud_provider::{
    NAME, active_digest, active_reference, api, apply, cloud_provider, condition_is, install_crd,
    resource_config, simcloud_config, status_where, token_secret,
};
use e2e::testbed::{Testbed, eventually, is_uninitialized};
use wasm_ccm::resource::{CandidatePhase, CloudProviderStatus, ConditionStatus, condition};

const WAIT: Duration = Duration::from_secs(30);

/// The node `name` once it is initialised (waiting up to 30 s); `what` names the wait.
async fn initialised(bed: &Testbed, name: &str, what: &str) -> k8s_openapi::api::core::v1::Node {
    eventually(what, WAIT, || async {
        bed.node(name).await.filter(|node| !is_uninitialized(node))
    })
    .await
}

/// The message of condition `type_`, which must be set.
fn message_of<'a>(status: &'a CloudProviderStatus, type_: &str) -> &'a str {
    &status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition: {status:?}"))
        .message
}

/// The status once condition `type_` is `value` for `reason` (waiting up to 30 s); `what`
/// names the wait.
async fn reached(
    bed: &Testbed,
    what: &str,
    type_: &str,
    value: ConditionStatus,
    reason: &str,
) -> CloudProviderStatus {
    status_where(bed, what, |status| {
        condition_is(status, type_, value, reason)
    })
    .await
}

/// Create (or set) the CloudProvider naming simcloud v1.
async fn apply_v1(bed: &Testbed) {
    apply(
        bed,
        &cloud_provider(bed, guest_builds::SIMCLOUD, &simcloud_config(bed)),
    )
    .await;
}

/// `count` nodes and LoadBalancer Services (`node-N`, `svc-N`), then a manager running
/// simcloud v1 from the CloudProvider, once every Service has v1's ingress.
async fn v1_serving(bed: &Testbed, count: usize) -> e2e::testbed::RunningManager {
    v1_serving_with(bed, count, resource_config(bed)).await
}

/// [`v1_serving`], the manager run with `config`.
async fn v1_serving_with(
    bed: &Testbed,
    count: usize,
    config: wasm_ccm::manager::ManagerConfig,
) -> e2e::testbed::RunningManager {
    for index in 0..count {
        bed.add_node(&format!("node-{index}"), "zone-a").await;
        bed.services()
            .create(
                &PostParams::default(),
                &Testbed::lb_service(&format!("svc-{index}")),
            )
            .await
            .unwrap();
    }
    apply_v1(bed).await;
    let manager = bed.run(config);
    for index in 0..count {
        eventually("every service has an ingress from v1", WAIT, || async {
            bed.service(&format!("svc-{index}"))
                .await
                .filter(|service| e2e::testbed::ingress_ip(service).is_some())
        })
        .await;
    }
    manager
}

/// Warning events about anything but the CloudProvider, except a load balancer with no
/// nodes yet: failed reconciles.
async fn failed_reconciles(bed: &Testbed) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(bed.client.clone());
    events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| event.type_.as_deref() == Some("Warning"))
        .filter(|event| {
            event.regarding.as_ref().and_then(|r| r.kind.as_deref()) != Some("CloudProvider")
        })
        .filter(|event| event.reason.as_deref() != Some("UnAvailableLoadBalancer"))
        .map(|event| {
            format!(
                "{} {}: {}",
                event.reason.unwrap_or_default(),
                event.regarding.and_then(|r| r.name).unwrap_or_default(),
                event.note.unwrap_or_default()
            )
        })
        .collect()
}

/// The events with `reason` about the CloudProvider.
async fn events_about(bed: &Testbed, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(bed.client.clone());
    events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some(reason))
        .filter(|event| event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NAME))
        .collect()
}

/// How many times an event with `reason` was recorded about the CloudProvider (a repeated
/// event is one object with a series count).
async fn times_recorded(bed: &Testbed, reason: &str) -> i32 {
    events_about(bed, reason)
        .await
        .into_iter()
        .map(|event| event.series.map_or(1, |series| series.count))
        .sum()
}

/// The notes of the events with `reason` about the CloudProvider.
async fn notes(bed: &Testbed, reason: &str) -> Vec<String> {
    events_about(bed, reason)
        .await
        .into_iter()
        .filter_map(|event| event.note)
        .collect()
}

fn hostnames(service: &k8s_openapi::api::core::v1::Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ingress| ingress.iter().filter_map(|i| i.hostname.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn hot_swap_without_a_resource_the_manager_waits_then_runs_the_version_it_names() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    bed.add_node("node-a", "zone-a").await;
    let port = e2e::https::free_port();
    let mut config = resource_config(&bed);
    config.serving.port = port;
    let manager = bed.run(config);
    let addr = ([127, 0, 0, 1], port).into();
    // Serving, not ready (the reason is logged, not served), no controller running.
    let readyz = eventually("/readyz answers", WAIT, || async {
        e2e::https::get(addr, "/readyz?verbose").await.ok()
    })
    .await;
    assert_eq!(readyz.0, 500, "{readyz:?}");
    assert!(readyz.1.contains("[-]provider failed"), "{}", readyz.1);
    let (healthz, _) = e2e::https::get(addr, "/healthz").await.unwrap();
    assert_eq!(healthz, 200, "alive while waiting for a version");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = bed.node("node-a").await.unwrap();
    assert!(
        is_uninitialized(&node),
        "no controller runs before a version is active"
    );

    apply_v1(&bed).await;
    let status = reached(
        &bed,
        "the first version active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{status:?}"
    );
    assert!(condition_is(
        &status,
        condition::FETCHED,
        ConditionStatus::True,
        "Fetched"
    ));
    assert!(condition_is(
        &status,
        condition::VERIFIED,
        ConditionStatus::True,
        "Verified"
    ));
    assert!(status.candidate.is_none());
    let node = initialised(&bed, "node-a", "node-a initialised").await;
    assert!(
        node.spec
            .unwrap()
            .provider_id
            .unwrap()
            .starts_with("simcloud://")
    );
    assert!(
        bed.event_reasons(NAME)
            .await
            .contains(&"Activated".to_string())
    );
    let (readyz, body) = e2e::https::get(addr, "/readyz?verbose").await.unwrap();
    assert_eq!(readyz, 200, "{body}");
    assert!(body.contains("[+]provider ok"), "{body}");
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_v1_to_v2_under_load_with_no_failed_reconcile() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    // Calls take a while, so some are in flight whenever the swap happens.
    bed.cloud.sim.state().set_faults(Faults {
        latency_ms: 20,
        ..Faults::default()
    });
    let manager = v1_serving(&bed, 4).await;
    let lbs_before = bed.cloud.sim.state().load_balancers().len();

    // Keep nodes and services changing while the version is swapped.
    let churn = {
        let client = bed.client.clone();
        tokio::spawn(async move {
            let services: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(client, "default");
            for index in 4..10 {
                services
                    .create(
                        &PostParams::default(),
                        &Testbed::lb_service(&format!("svc-{index}")),
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };
    let spec = cloud_provider(&bed, guest_builds::SIMCLOUD_V2, &simcloud_config(&bed));
    apply(&bed, &spec).await;
    churn.await.unwrap();

    let status = status_where(&bed, "v2 active", |status| {
        active_reference(status).ends_with("/simcloud-v2.wasm")
    })
    .await;
    bed.add_node("node-after", "zone-b").await;
    assert!(
        status
            .previous
            .as_ref()
            .unwrap()
            .reference
            .ends_with("/simcloud.wasm")
    );
    assert!(condition_is(
        &status,
        condition::PROGRESSING,
        ConditionStatus::False,
        "Activated"
    ));
    let stamp = guest_builds::SIMCLOUD_V2_BUILD;
    for index in 0..10 {
        let service = eventually("every service shows v2's ingress", WAIT, || async {
            bed.service(&format!("svc-{index}"))
                .await
                .filter(|service| {
                    hostnames(service)
                        .iter()
                        .any(|hostname| hostname.starts_with(&format!("{stamp}.")))
                })
        })
        .await;
        assert!(e2e::testbed::ingress_ip(&service).is_some(), "{service:?}");
    }
    let node = initialised(
        &bed,
        "node-after",
        "a node added after the swap is initialised by v2",
    )
    .await;
    assert_eq!(
        node.labels()
            .get("simcloud.wasm-ccm.io/build")
            .map(String::as_str),
        Some(stamp),
        "v2 initialised it"
    );
    assert_eq!(
        bed.cloud.sim.state().load_balancers().len(),
        lbs_before + 6,
        "v2 adopted v1's load balancers and made only the new services'"
    );
    assert_eq!(failed_reconciles(&bed).await, Vec::<String>::new());
    manager.stop().await.unwrap();
}

/// Swap the running manager to the component at `path` (`language` names it in waits), then
/// add a node and a LoadBalancer Service: once the version is active, both are served by
/// it, and its calls so far have no failure.
async fn swap_to(bed: &Testbed, path: &str, language: &str, node: &str, service: &str) {
    let digest = e2e::sha256_digest(&guest_builds::read(path));
    apply(bed, &cloud_provider(bed, path, &simcloud_config(bed))).await;
    bed.add_node(node, "zone-b").await;
    bed.services()
        .create(&PostParams::default(), &Testbed::lb_service(service))
        .await
        .unwrap();
    status_where(bed, &format!("the {language} simcloud active"), |status| {
        active_digest(status) == digest
    })
    .await;
    initialised(bed, node, &format!("{node} initialised")).await;
    eventually(&format!("{service} has an ingress"), WAIT, || async {
        bed.service(service)
            .await
            .filter(|service| e2e::testbed::ingress_ip(service).is_some())
    })
    .await;
    let status = status_where(
        bed,
        &format!("calls of the {language} simcloud"),
        |status| {
            status
                .version_calls
                .iter()
                .any(|version| version.digest == digest && version.calls > 0)
        },
    )
    .await;
    let calls = status
        .version_calls
        .iter()
        .find(|version| version.digest == digest)
        .expect("the version's calls");
    assert_eq!(calls.failures, 0, "{language}: {status:?}");
}

/// A provider is swapped for one written in another language as for a new version of
/// itself: the Rust simcloud, then its TypeScript port, then its Python port, under running
/// controllers with nodes and Services arriving, without one failed reconcile, and each
/// port adopts the load balancers the version before it made.
#[tokio::test]
async fn hot_swap_rust_to_typescript_to_python_with_no_failed_reconcile() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    let manager = v1_serving(&bed, 3).await;

    swap_to(
        &bed,
        guest_builds::SIMCLOUD_TS,
        "TypeScript",
        "node-ts",
        "svc-ts",
    )
    .await;
    swap_to(
        &bed,
        guest_builds::SIMCLOUD_PY,
        "Python",
        "node-py",
        "svc-py",
    )
    .await;

    assert_eq!(
        bed.cloud.sim.state().load_balancers().len(),
        5,
        "one load balancer per Service: each port adopted those made before it"
    );
    assert_eq!(failed_reconciles(&bed).await, Vec::<String>::new());
    manager.stop().await.unwrap();
}

/// Apply `spec` to the running v1 and wait until its rollout is refused with `reason`.
async fn refused(bed: &Testbed, spec: serde_json::Value, reason: &str) -> CloudProviderStatus {
    apply(bed, &spec).await;
    let status = status_where(bed, reason, |status| {
        condition_is(
            status,
            condition::PROGRESSING,
            ConditionStatus::False,
            reason,
        )
    })
    .await;
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{reason}: v1 keeps serving: {status:?}"
    );
    assert!(
        condition_is(&status, condition::READY, ConditionStatus::True, "Active"),
        "{reason}: {status:?}"
    );
    assert!(status.candidate.is_none(), "{reason}: {status:?}");
    // False, or Unknown for a refusal tried again (a failed init).
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == condition::SPEC_APPLIED
                && c.reason == reason
                && c.status != ConditionStatus::True),
        "{reason}: the spec is not what runs: {status:?}"
    );
    eventually(&format!("a {reason} event"), WAIT, || async {
        bed.event_reasons(NAME)
            .await
            .contains(&reason.to_string())
            .then_some(())
    })
    .await;
    status
}

#[tokio::test]
async fn hot_swap_refused_rollouts_leave_v1_serving_with_the_reason() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    let v1 = cloud_provider(&bed, guest_builds::SIMCLOUD, &simcloud_config(&bed));
    apply(&bed, &v1).await;
    let manager = bed.run(resource_config(&bed));
    reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();

    // Not a component at all.
    let corrupt = dir.path().join("corrupt.wasm");
    let mut bytes = guest_builds::read(guest_builds::SIMCLOUD_V2);
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&corrupt, bytes).unwrap();
    let status = refused(
        &bed,
        cloud_provider(&bed, corrupt.to_str().unwrap(), &simcloud_config(&bed)),
        "InvalidComponent",
    )
    .await;
    assert!(condition_is(
        &status,
        condition::VERIFIED,
        ConditionStatus::False,
        "InvalidComponent"
    ));

    // A pinned digest the file does not have.
    let mut pinned = cloud_provider(&bed, guest_builds::SIMCLOUD_V2, &simcloud_config(&bed));
    pinned["spec"]["digest"] = json!(format!("sha256:{}", "0".repeat(64)));
    let status = refused(&bed, pinned, "DigestMismatch").await;
    let message = message_of(&status, condition::VERIFIED);
    assert!(message.contains("spec.digest"), "{message}");
    // Not tried again until the spec changes.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(times_recorded(&bed, "DigestMismatch").await, 1);

    // A component without the contract's exports.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\0\x01\0").unwrap();
    refused(
        &bed,
        cloud_provider(&bed, empty.to_str().unwrap(), &simcloud_config(&bed)),
        "MissingExport",
    )
    .await;

    // An import no host offers.
    refused(
        &bed,
        cloud_provider(&bed, guest_builds::OVERREACH, &simcloud_config(&bed)),
        "UnsatisfiedImport",
    )
    .await;

    // init fails.
    refused(
        &bed,
        cloud_provider(
            &bed,
            guest_builds::ROLLOUT,
            r#"{"failInit": "no such region"}"#,
        ),
        "InitFailed",
    )
    .await;

    // Another provider's name.
    let status = refused(
        &bed,
        cloud_provider(&bed, guest_builds::ROLLOUT, r#"{"name": "rollout"}"#),
        "WrongName",
    )
    .await;
    let message = message_of(&status, condition::VERIFIED);
    assert!(message.contains("\"rollout\""), "{message}");
    let progressing = message_of(&status, condition::PROGRESSING);
    assert!(
        progressing.ends_with("fix the spec to try again"),
        "{progressing}"
    );

    // A capability a running controller needs.
    let status = refused(
        &bed,
        cloud_provider(
            &bed,
            guest_builds::ROLLOUT,
            r#"{"name": "simcloud", "loadBalancer": false}"#,
        ),
        "CapabilityDropped",
    )
    .await;
    let message = message_of(&status, condition::VERIFIED);
    assert!(
        message.contains("load-balancer (needed by service-lb-controller)"),
        "{message}"
    );
    let progressing = message_of(&status, condition::PROGRESSING);
    assert!(
        progressing.contains("or restart the manager without the controllers that need it (--controllers=*,-NAME) to try again"),
        "the fix may be the manager's flag, not the spec: {progressing}"
    );
    // `kubectl get` shows the refusal beside the version that keeps serving.
    let row = cloud_provider_row(&bed).await;
    assert_eq!(
        ["ACTIVE", "READY", "PROGRESSING", "SPEC"].map(|column| row[column].as_str()),
        ["simcloud@sha256:", "True", "False", "CapabilityDropped"],
        "{row:?}"
    );

    // A spec the manager cannot use.
    let mut bad = cloud_provider(&bed, guest_builds::SIMCLOUD_V2, &simcloud_config(&bed));
    bad["spec"]["egress"]["allowedHosts"] = json!(["https://*.*.example.com"]);
    let status = refused(&bed, bad, "InvalidSpec").await;
    let message = message_of(&status, condition::PROGRESSING);
    assert!(message.contains("spec.egress.allowedHosts[0]"), "{message}");

    // v1 served throughout: a new node is initialised by it.
    bed.add_node("late", "zone-a").await;
    initialised(&bed, "late", "v1 still initialises nodes").await;

    // The spec back to v1: it is what runs, and the refusal is over.
    apply(&bed, &v1).await;
    let status = reached(
        &bed,
        "v1's spec applied",
        condition::SPEC_APPLIED,
        ConditionStatus::True,
        "Applied",
    )
    .await;
    assert!(
        condition_is(
            &status,
            condition::PROGRESSING,
            ConditionStatus::False,
            "Kept"
        ),
        "{status:?}"
    );
    assert_eq!(cloud_provider_row(&bed).await["SPEC"], "Applied");
    manager.stop().await.unwrap();
}

/// The `kubectl get cloudproviders` row of the testbed's CloudProvider, by column header
/// (the active version cut after its digest's prefix, which differs by build).
async fn cloud_provider_row(bed: &Testbed) -> HashMap<String, String> {
    let cache = tempfile::tempdir().unwrap();
    let kubeconfig = bed.kubeconfig();
    let table = kube_emulator::kubectl(
        cache.path(),
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "get",
            "cloudproviders",
        ],
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let mut lines = table.lines().map(|line| line.split_whitespace());
    let header = lines.next().expect("a header");
    let row = lines
        .map(Iterator::collect::<Vec<_>>)
        .find(|cells| cells.first() == Some(&NAME))
        .unwrap_or_else(|| panic!("no row for {NAME} in:\n{table}"));
    header
        .zip(row)
        .map(|(column, cell)| {
            let cell = match column {
                "ACTIVE" => cell.split_inclusive(':').next().unwrap_or(cell),
                _ => cell,
            };
            (column.to_string(), cell.to_string())
        })
        .collect()
}

#[tokio::test]
async fn hot_swap_credentials_come_from_a_watched_secret() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    apply_v1(&bed).await;
    let manager = bed.run(resource_config(&bed));
    // No Secret yet: the version runs, degraded, and its requests carry no token.
    let status = reached(
        &bed,
        "Degraded for the missing Secret",
        condition::DEGRADED,
        ConditionStatus::True,
        "CredentialMissing",
    )
    .await;
    let message = message_of(&status, condition::DEGRADED);
    assert!(
        message.contains("Secret kube-system/simcloud-token not found"),
        "{message}"
    );

    // A wrong token: the cloud refuses the provider's requests.
    token_secret(&bed, "expired-token").await;
    bed.add_node("node-a", "zone-a").await;
    eventually("requests with the wrong token", WAIT, || async {
        bed.cloud
            .sim
            .state()
            .requests()
            .iter()
            .any(|request| request.status == 401)
            .then_some(())
    })
    .await;
    assert!(is_uninitialized(&bed.node("node-a").await.unwrap()));

    // Rotated: the next request carries the new value.
    token_secret(&bed, e2e::TOKEN).await;
    initialised(&bed, "node-a", "node-a initialised with the rotated token").await;
    reached(
        &bed,
        "no longer Degraded",
        condition::DEGRADED,
        ConditionStatus::False,
        "AsExpected",
    )
    .await;
    let leaked = serde_json::to_string(&api(&bed).get(NAME).await.unwrap()).unwrap();
    assert!(
        !leaked.contains(e2e::TOKEN),
        "the token never reaches status"
    );
    manager.stop().await.unwrap();
}

/// Once the CloudProvider reports a rollback for the failure rate, simcloud v1 active again.
async fn rolled_back_to_v1(bed: &Testbed) -> CloudProviderStatus {
    let status = reached(
        bed,
        "rolled back",
        condition::ROLLED_BACK,
        ConditionStatus::True,
        "FailureRate",
    )
    .await;
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{status:?}"
    );
    status
}

#[tokio::test]
async fn hot_swap_a_version_that_fails_more_is_rolled_back() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    roll_out_a_trapping_version(&bed).await;
    let status = rolled_back_to_v1(&bed).await;
    assert!(
        status
            .previous
            .as_ref()
            .unwrap()
            .reference
            .ends_with("/rollout.wasm")
    );
    let message = message_of(&status, condition::ROLLED_BACK);
    assert!(
        message.contains("over the threshold of 10 points"),
        "{message}"
    );
    assert!(
        bed.event_reasons(NAME)
            .await
            .contains(&"RolledBack".to_string())
    );

    // v1 serves again, and the rolled-back spec is not retried.
    bed.add_node("late", "zone-a").await;
    let node = initialised(&bed, "late", "v1 initialises a new node").await;
    assert!(
        node.spec
            .unwrap()
            .provider_id
            .unwrap()
            .starts_with("simcloud://")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{status:?}"
    );
    manager.stop().await.unwrap();
}

/// A version whose every load-balancer answer the host refuses (a loopback ingress) is
/// rolled back as one that traps: a refused answer is a failed call of the version that
/// gave it, and no Service ever shows the refused address.
#[tokio::test]
async fn hot_swap_a_version_whose_answers_the_host_refuses_is_rolled_back() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    // No lifecycle checks: after the swap the new version's only calls are the Services'.
    let mut config = resource_config(&bed);
    config.controllers = "cloud-node,service".parse().unwrap();
    let manager = v1_serving_with(&bed, 3, config).await;
    let mut refusing = cloud_provider(
        &bed,
        guest_builds::ROLLOUT,
        r#"{"name": "simcloud", "refuseLoadBalancers": true}"#,
    );
    refusing["spec"]["rollout"] = json!({"rollback": {"minimumCalls": 3}});
    apply(&bed, &refusing).await;
    rolled_back_to_v1(&bed).await;
    let reasons = bed.event_reasons("svc-0").await;
    assert!(
        reasons.contains(&"InvalidProviderAnswer".to_string()),
        "{reasons:?}"
    );
    for index in 0..3 {
        let service = bed.service(&format!("svc-{index}")).await.unwrap();
        assert_ne!(
            e2e::testbed::ingress_ip(&service).as_deref(),
            Some("127.0.0.1"),
            "a refused answer is never written"
        );
    }
    manager.stop().await.unwrap();
}

/// `cloud_provider` with the Shadow strategy, promoting after `agreeing` agreeing answers.
fn shadowed(bed: &Testbed, wasm: &str, agreeing: u64) -> serde_json::Value {
    let mut spec = cloud_provider(bed, wasm, &simcloud_config(bed));
    spec["spec"]["rollout"]["strategy"] = json!("Shadow");
    spec["spec"]["rollout"]["shadow"] = json!({"agreeingCalls": agreeing});
    spec
}

/// The CRD, the token Secret, three nodes and the CloudProvider naming simcloud v1.
async fn three_nodes_and_v1(bed: &Testbed) {
    install_crd(bed).await;
    token_secret(bed, e2e::TOKEN).await;
    for index in 0..3 {
        bed.add_node(&format!("node-{index}"), "zone-a").await;
    }
    apply_v1(bed).await;
}

/// Once v1 has initialised the three nodes.
async fn three_nodes_initialised(bed: &Testbed) {
    for index in 0..3 {
        eventually("v1 initialises the nodes", WAIT, || async {
            bed.node(&format!("node-{index}"))
                .await
                .filter(|node| !is_uninitialized(node))
        })
        .await;
    }
}

/// After v1 has answered the lifecycle controller's checks a while, roll out a version that
/// traps on every other call.
async fn roll_out_a_trapping_version(bed: &Testbed) {
    tokio::time::sleep(Duration::from_secs(1)).await;
    apply(
        bed,
        &cloud_provider(
            bed,
            guest_builds::ROLLOUT,
            r#"{"name": "simcloud", "trapEvery": 2}"#,
        ),
    )
    .await;
}

/// A bed with v1 active and three initialised nodes whose lifecycle checks keep the
/// read-only calls coming.
async fn v1_with_nodes(bed: &Testbed) -> e2e::testbed::RunningManager {
    three_nodes_and_v1(bed).await;
    let manager = bed.run(resource_config(bed));
    three_nodes_initialised(bed).await;
    manager
}

#[tokio::test]
async fn hot_swap_a_shadow_that_agrees_is_promoted() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    apply(&bed, &shadowed(&bed, guest_builds::SIMCLOUD_V2, 20)).await;
    let status = status_where(&bed, "v2 promoted", |status| {
        active_reference(status).ends_with("/simcloud-v2.wasm")
    })
    .await;
    assert!(condition_is(
        &status,
        condition::PROGRESSING,
        ConditionStatus::False,
        "Activated"
    ));
    assert!(
        status.shadow.is_none() && status.candidate.is_none(),
        "{status:?}"
    );
    let reasons = bed.event_reasons(NAME).await;
    assert!(reasons.contains(&"Shadowing".to_string()), "{reasons:?}");
    assert_eq!(
        times_recorded(&bed, "Activated").await,
        2,
        "v1, then v2 once promoted"
    );
    assert_eq!(failed_reconciles(&bed).await, Vec::<String>::new());
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_a_diverging_shadow_is_not_promoted_and_never_acted_on() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    apply(&bed, &shadowed(&bed, guest_builds::SIMCLOUD_V2, 1_000_000)).await;
    status_where(&bed, "v2 shadowing", |status| {
        status
            .candidate
            .as_ref()
            .is_some_and(|candidate| candidate.phase == CandidatePhase::Shadowing)
    })
    .await;
    // A new node: v1 initialises it, v2's answer (with its build label) is only compared.
    bed.add_node("late", "zone-a").await;
    let status = reached(
        &bed,
        "the divergence reported",
        condition::PROGRESSING,
        ConditionStatus::True,
        "ShadowDiverged",
    )
    .await;
    let shadow = status.shadow.clone().expect("shadow status");
    assert!(shadow.diverging_calls >= 1, "{shadow:?}");
    let divergence = &shadow.divergences[0];
    assert_eq!(divergence.function, "instance-metadata");
    assert!(
        divergence.diff.contains("simcloud.wasm-ccm.io/build")
            && divergence.diff.contains("(candidate)"),
        "{}",
        divergence.diff
    );
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "v1 stays active"
    );
    let node = initialised(&bed, "late", "v1 initialises the new node").await;
    assert!(
        !node.labels().contains_key("simcloud.wasm-ccm.io/build"),
        "the shadow's answer was not acted on: {:?}",
        node.labels()
    );
    assert!(
        bed.event_reasons(NAME)
            .await
            .contains(&"ShadowDiverged".to_string())
    );
    manager.stop().await.unwrap();
}

/// A replica following the resource with leader election (a 2 s lease) as `identity`,
/// serving health and metrics on `port`.
fn replica(bed: &Testbed, identity: &str, port: u16) -> wasm_ccm::manager::ManagerConfig {
    use wasm_ccm::leader::LeaseSettings;
    use wasm_ccm::serving::{AuthConfig, ServingConfig, TlsSource};

    let mut config = resource_config(bed);
    config.leader_election = Some(LeaseSettings {
        namespace: "kube-system".into(),
        name: "cloud-controller-manager".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    });
    config.settings.identity = identity.into();
    config.serving = ServingConfig {
        bind_address: [127, 0, 0, 1].into(),
        port,
        tls: TlsSource::SelfSigned,
        auth: AuthConfig::default(),
    };
    config
}

#[tokio::test]
async fn hot_swap_a_standby_follows_the_resource_warm_and_only_the_leader_writes() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    apply_v1(&bed).await;
    let (leader_port, standby_port) = (e2e::https::free_port(), e2e::https::free_port());
    let leader = bed.run(replica(&bed, "replica-a", leader_port));
    let first = reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    let standby = bed.run(replica(&bed, "replica-b", standby_port));
    let standby_addr = ([127, 0, 0, 1], standby_port).into();
    // The standby loaded the version too: ready, and its metrics name it.
    let metrics = eventually("the standby has the version loaded", WAIT, || async {
        let (status, _) = e2e::https::get(standby_addr, "/readyz").await.ok()?;
        let (_, metrics) =
            e2e::https::get_with_token(standby_addr, "/metrics", bed.emulator.token())
                .await
                .ok()?;
        (status == 200 && metrics.contains("wasm_ccm_provider_info{")).then_some(metrics)
    })
    .await;
    let digest = &first.active.as_ref().unwrap().digest;
    assert!(metrics.contains(digest.as_str()), "{metrics}");

    // The leader dies; the standby takes over with the version it has, loading nothing.
    leader.kill();
    bed.add_node("after-failover", "zone-a").await;
    initialised(
        &bed,
        "after-failover",
        "the standby initialises a node as leader",
    )
    .await;
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert_eq!(
        status.active.as_ref().unwrap().since,
        first.active.as_ref().unwrap().since,
        "no new activation after the failover: {status:?}"
    );
    assert_eq!(
        times_recorded(&bed, "Activated").await,
        1,
        "only the leader recorded the activation"
    );
    standby.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_a_standby_follows_the_leaders_rollback() {
    let bed = Testbed::start().await;
    three_nodes_and_v1(&bed).await;
    let leader = bed.run(replica(&bed, "replica-a", e2e::https::free_port()));
    reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    let standby = bed.run(replica(&bed, "replica-b", e2e::https::free_port()));
    three_nodes_initialised(&bed).await;
    roll_out_a_trapping_version(&bed).await;
    reached(
        &bed,
        "rolled back by the leader",
        condition::ROLLED_BACK,
        ConditionStatus::True,
        "FailureRate",
    )
    .await;
    // The standby, which activated the same version, follows; after a failover v1 serves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    leader.kill();
    bed.add_node("after-failover", "zone-a").await;
    let node = initialised(&bed, "after-failover", "the new leader initialises a node").await;
    assert!(
        node.spec
            .unwrap()
            .provider_id
            .unwrap()
            .starts_with("simcloud://"),
        "v1, not the rolled-back version, answered"
    );
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{status:?}"
    );
    standby.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_grants_and_call_limits_apply_in_place_and_a_new_cloud_config_reinits() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    let mut spec = cloud_provider(&bed, guest_builds::SIMCLOUD, &simcloud_config(&bed));
    apply(&bed, &spec).await;
    let manager = bed.run(resource_config(&bed));
    let first = reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    let first_active = first.active.clone().unwrap();

    // No grant: applied in place (no init, no new activation), and the next request is
    // refused.
    spec["spec"]["egress"]["allowedHosts"] = json!([]);
    apply(&bed, &spec).await;
    eventually("a Reconfigured event", WAIT, || async {
        bed.event_reasons(NAME)
            .await
            .contains(&"Reconfigured".to_string())
            .then_some(())
    })
    .await;
    bed.add_node("ungranted", "zone-a").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(is_uninitialized(&bed.node("ungranted").await.unwrap()));
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert_eq!(
        status.active,
        Some(first_active.clone()),
        "the same activation"
    );

    // Granted again: the node is initialised by the same version.
    spec["spec"]["egress"]["allowedHosts"] = json!([bed.cloud.sim.url()]);
    apply(&bed, &spec).await;
    initialised(&bed, "ungranted", "the node initialised once granted").await;

    // A call limit applies in place too: answers larger than 64 bytes now fail the call.
    spec["spec"]["limits"] = json!({"maxResultSize": "64"});
    apply(&bed, &spec).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    bed.add_node("capped", "zone-a").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(is_uninitialized(&bed.node("capped").await.unwrap()));
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert_eq!(
        status.active,
        Some(first_active.clone()),
        "still the same activation"
    );
    spec["spec"].as_object_mut().unwrap().remove("limits");
    apply(&bed, &spec).await;
    initialised(&bed, "capped", "the node initialised under the default cap").await;

    // Memory and concurrency: the same version moves to a new engine, still no init.
    spec["spec"]["limits"] = json!({"memory": "32Mi", "maxConcurrentCalls": 16});
    apply(&bed, &spec).await;
    let moved = "an engine with 33554432 bytes of memory per call and 16 calls at once";
    eventually("the version moved to the new engine", WAIT, || async {
        notes(&bed, "Reconfigured")
            .await
            .iter()
            .any(|note| note.contains(moved))
            .then_some(())
    })
    .await;
    bed.add_node("new-engine", "zone-a").await;
    initialised(&bed, "new-engine", "a node initialised on the new engine").await;
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert_eq!(
        status.active,
        Some(first_active.clone()),
        "still the same activation"
    );
    assert_eq!(
        times_recorded(&bed, "Activated").await,
        1,
        "no init, no activation"
    );

    // Another cloud config: the same component, init again, activated as a rollout.
    let config: serde_json::Value = serde_json::from_str(&simcloud_config(&bed)).unwrap();
    spec["spec"]["cloudConfig"]["inline"] = json!(serde_json::to_string_pretty(&config).unwrap());
    apply(&bed, &spec).await;
    let status = status_where(&bed, "re-initialised", |status| {
        status.active.as_ref().and_then(|a| a.since.clone()) != first_active.since
    })
    .await;
    let active = status.active.unwrap();
    assert_eq!(active.digest, first_active.digest, "the same component");
    assert_eq!(times_recorded(&bed, "Activated").await, 2);
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_the_binary_follows_the_resource_named_by_its_flag() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    bed.add_node("node-a", "zone-a").await;
    let port = e2e::https::free_port();
    let args = vec![
        format!("--provider-resource={NAME}"),
        format!("--kubeconfig={}", bed.kubeconfig().display()),
        "--controllers=cloud-node".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
    ];
    let manager = e2e::testbed::ManagerProcess::spawn(&e2e::wasm_ccm_binary(), &args, port, false);
    let (status, _) = eventually("the binary serves /readyz", WAIT, || async {
        e2e::https::get(manager.addr, "/readyz").await.ok()
    })
    .await;
    assert_eq!(status, 500, "not ready without the resource");
    apply_v1(&bed).await;
    initialised(&bed, "node-a", "node-a initialised by the binary").await;
    let (status, _) = e2e::https::get(manager.addr, "/readyz").await.unwrap();
    assert_eq!(status, 200);
    let status = reached(
        &bed,
        "the binary wrote the status",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;
    assert!(active_reference(&status).ends_with("/simcloud.wasm"));
}

#[tokio::test]
async fn hot_swap_a_restart_after_a_rollback_runs_the_version_rolled_back_to() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // v2 meets a cloud that fails every request: it fails where v1 did not.
    bed.cloud.sim.state().set_faults(Faults {
        error_rate: 1.0,
        ..Faults::default()
    });
    apply(
        &bed,
        &cloud_provider(&bed, guest_builds::SIMCLOUD_V2, &simcloud_config(&bed)),
    )
    .await;
    reached(
        &bed,
        "rolled back",
        condition::ROLLED_BACK,
        ConditionStatus::True,
        "FailureRate",
    )
    .await;
    bed.cloud.sim.state().set_faults(Faults::default());
    manager.stop().await.unwrap();

    // Started again with the spec still naming v2: v1 runs, and the rollback stands.
    let manager = bed.run(resource_config(&bed));
    bed.add_node("after-restart", "zone-a").await;
    let node = initialised(
        &bed,
        "after-restart",
        "a node initialised after the restart",
    )
    .await;
    assert!(
        !node.labels().contains_key("simcloud.wasm-ccm.io/build"),
        "v1 initialised it, not the rolled-back v2: {:?}",
        node.labels()
    );
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert!(
        active_reference(&status).ends_with("/simcloud.wasm"),
        "{status:?}"
    );
    assert!(condition_is(
        &status,
        condition::ROLLED_BACK,
        ConditionStatus::True,
        "FailureRate"
    ));
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_a_secret_the_manager_may_not_read_is_named_and_does_not_block_the_rollout() {
    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    // The manager's account may not read Secrets (as when the chart's values do not name
    // one the resource references).
    bed.emulator
        .faults()
        .fail_next(kube_emulator::FailRule::new(10_000, 403).path_contains("/secrets"));
    apply_v1(&bed).await;
    let manager = bed.run(resource_config(&bed));
    let status = status_where(
        &bed,
        "active, degraded by the unreadable Secret",
        |status| {
            condition_is(status, condition::READY, ConditionStatus::True, "Active")
                && condition_is(
                    status,
                    condition::DEGRADED,
                    ConditionStatus::True,
                    "CredentialMissing",
                )
        },
    )
    .await;
    let message = message_of(&status, condition::DEGRADED);
    assert!(
        message.contains("Secret kube-system/simcloud-token cannot be read: the manager's account may not list and watch it by name"),
        "{message}"
    );

    // Granted: the watch reads it, and the provider's requests carry the token again.
    bed.emulator.faults().clear();
    reached(
        &bed,
        "no longer Degraded",
        condition::DEGRADED,
        ConditionStatus::False,
        "AsExpected",
    )
    .await;
    bed.add_node("node-a", "zone-a").await;
    initialised(&bed, "node-a", "node-a initialised with the token").await;
    manager.stop().await.unwrap();
}

/// The `wasm-ccm.io/rollback` record on the CloudProvider, once it names a window of the
/// current generation.
async fn rollback_record(bed: &Testbed) -> serde_json::Value {
    eventually("the rollback record", WAIT, || async {
        let object = api(bed).get(NAME).await.ok()?;
        let text = object.annotations().get("wasm-ccm.io/rollback")?.clone();
        let record: serde_json::Value = serde_json::from_str(&text).ok()?;
        (record["generation"] == json!(object.metadata.generation)).then_some(record)
    })
    .await
}

#[tokio::test]
async fn hot_swap_a_restart_inside_the_rollback_window_still_rolls_a_failing_version_back() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    let v1 = reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await
    .active
    .unwrap();
    // v2 answers the three nodes, and fails the instance calls of nodes named bad-*.
    let mut spec = cloud_provider(
        &bed,
        guest_builds::ROLLOUT,
        r#"{"name": "simcloud", "failNodes": "bad-"}"#,
    );
    spec["spec"]["rollout"]["rollback"]["window"] = json!("10m");
    apply(&bed, &spec).await;
    let status = status_where(&bed, "v2 active, v1 kept for a rollback", |status| {
        active_reference(status).ends_with("/rollout.wasm") && status.rollback_window_end.is_some()
    })
    .await;
    assert_eq!(status.previous.as_ref().unwrap().digest, v1.digest);
    let record = rollback_record(&bed).await;
    assert_eq!(record["previousDigest"], json!(v1.digest));
    assert_eq!(record["rolledBack"], json!(false));

    // Restarted mid-window (a node drained), the manager runs v2 and loads v1 again.
    manager.stop().await.unwrap();
    let manager = bed.run(resource_config(&bed));
    eventually("the window restored", WAIT, || async {
        (!notes(&bed, "RollbackWindowRestored").await.is_empty()).then_some(())
    })
    .await;
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert!(
        active_reference(&status).ends_with("/rollout.wasm"),
        "{status:?}"
    );
    assert_eq!(
        status.previous.as_ref().unwrap().digest,
        v1.digest,
        "{status:?}"
    );

    // Now v2 fails: rolled back to v1, which serves the nodes v2 failed.
    for index in 0..3 {
        bed.add_node(&format!("bad-{index}"), "zone-a").await;
    }
    let status = reached(
        &bed,
        "rolled back after the restart",
        condition::ROLLED_BACK,
        ConditionStatus::True,
        "FailureRate",
    )
    .await;
    assert_eq!(
        status.active.as_ref().unwrap().digest,
        v1.digest,
        "{status:?}"
    );
    assert!(
        status
            .previous
            .as_ref()
            .unwrap()
            .reference
            .ends_with("/rollout.wasm"),
        "{status:?}"
    );
    for index in 0..3 {
        let node = initialised(&bed, &format!("bad-{index}"), "v1 initialises the node").await;
        assert!(
            node.spec
                .unwrap()
                .provider_id
                .unwrap()
                .starts_with("simcloud://"),
            "v1 answered"
        );
    }
    // Nothing failed where a controller would report it: no failed reconcile.
    let failed = failed_reconciles(&bed).await;
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(rollback_record(&bed).await["rolledBack"], json!(true));
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_a_status_patched_to_name_another_version_does_not_make_it_run_after_a_restart() {
    let bed = Testbed::start().await;
    let manager = v1_with_nodes(&bed).await;
    let v1 = reached(
        &bed,
        "v1 active",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await
    .active
    .unwrap();
    manager.stop().await.unwrap();

    // Someone who may patch the status only names the rollout guest as rolled back to, and
    // as the previous version inside an open window.
    let other = e2e::sha256_digest(&guest_builds::read(guest_builds::ROLLOUT));
    let reference = format!("file://{}", guest_builds::ROLLOUT);
    let generation = api(&bed).get(NAME).await.unwrap().metadata.generation;
    let forged = json!({"status": {
        "active": {"reference": reference, "digest": other},
        "previous": {"reference": reference, "digest": other},
        "rollbackWindowEnd": "2099-01-01T00:00:00Z",
        "conditions": [{
            "type": "RolledBack", "status": "True", "reason": "FailureRate",
            "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": generation,
        }],
    }});
    api(&bed)
        .patch_status(
            NAME,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&forged),
        )
        .await
        .unwrap();

    // Restarted, the manager runs the spec's version, and keeps nothing to roll back to.
    let manager = bed.run(resource_config(&bed));
    bed.add_node("after-restart", "zone-a").await;
    let node = initialised(
        &bed,
        "after-restart",
        "a node initialised after the restart",
    )
    .await;
    assert!(
        node.spec
            .unwrap()
            .provider_id
            .unwrap()
            .starts_with("simcloud://"),
        "the spec's version answered, not the one the status named"
    );
    let status = status_where(&bed, "the status corrected", |status| {
        status
            .active
            .as_ref()
            .is_some_and(|active| active.digest == v1.digest)
    })
    .await;
    assert_eq!(status.previous, None, "{status:?}");
    assert_eq!(status.rollback_window_end, None, "{status:?}");
    assert!(
        !condition_is(
            &status,
            condition::ROLLED_BACK,
            ConditionStatus::True,
            "FailureRate"
        ),
        "{status:?}"
    );
    assert!(notes(&bed, "RollbackWindowRestored").await.is_empty());
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn hot_swap_a_grant_outside_the_ceiling_is_refused_and_the_active_version_keeps_serving() {
    use wasm_ccm::manager::ProviderMode;
    use wasm_ccm::rollout::ceiling::GrantCeiling;

    let bed = Testbed::start().await;
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    let spec = cloud_provider(&bed, guest_builds::SIMCLOUD, &simcloud_config(&bed));
    apply(&bed, &spec).await;
    let mut config = resource_config(&bed);
    let ceiling = GrantCeiling::new(vec![bed.cloud.sim.url().parse().unwrap()]);
    config.provider = ProviderMode::Resource {
        names: vec![NAME.into()],
        allow_untagged_cloud: false,
        grant_ceiling: ceiling,
        tag_check_interval: Duration::from_secs(300),
    };
    let manager = bed.run(config);
    reached(
        &bed,
        "v1 active within the ceiling",
        condition::READY,
        ConditionStatus::True,
        "Active",
    )
    .await;

    // An IP literal (which skips the internal-address check by design), a credential sent
    // elsewhere, and the cloud config read from the credential's own Secret key.
    let sim = bed.cloud.sim.url();
    let token_ref = json!({"name": e2e::cloud_provider::TOKEN_SECRET, "key": "token",
                           "namespace": e2e::cloud_provider::NAMESPACE});
    let cases = [
        (
            json!({"egress": {"allowedHosts": [sim, "http://10.0.0.1:8080"]}}),
            "spec.egress.allowedHosts[1]: http://10.0.0.1:8080 is outside the grant ceiling the manager runs with (--egress-grant-ceiling",
        ),
        (
            json!({"credentials": [{"host": "https://collector.example", "secretKeyRef": token_ref}]}),
            "spec.credentials[0].host: https://collector.example is outside the grant ceiling",
        ),
        (
            json!({"cloudConfig": {"secretKeyRef": token_ref}}),
            "spec.cloudConfig.secretKeyRef: Secret kube-system/simcloud-token key \"token\" is also spec.credentials[0].secretKeyRef",
        ),
    ];
    for (index, (change, message)) in cases.into_iter().enumerate() {
        let mut refused = spec.clone();
        for (field, value) in change.as_object().unwrap() {
            refused["spec"][field] = value.clone();
        }
        apply(&bed, &refused).await;
        let status = status_where(&bed, message, |status| {
            condition_is(
                status,
                condition::PROGRESSING,
                ConditionStatus::False,
                "InvalidSpec",
            ) && message_of(status, condition::PROGRESSING).contains(message)
        })
        .await;
        assert!(condition_is(
            &status,
            condition::READY,
            ConditionStatus::True,
            "Active"
        ));
        // The active version keeps serving, with the grants it had.
        let node = format!("node-{index}");
        bed.add_node(&node, "zone-a").await;
        initialised(&bed, &node, "v1 initialises a node meanwhile").await;
        assert!(
            notes(&bed, "InvalidSpec")
                .await
                .iter()
                .any(|note| note.contains(message)),
            "an InvalidSpec event says it"
        );
    }
    manager.stop().await.unwrap();
}

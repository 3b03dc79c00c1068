//! No silent tag drift: a `CloudProvider` naming a tag and no digest, against a real
//! registry where the tag is pushed again to another build. The digest the tag named when
//! the spec rolled out keeps running, on a standby started later and after a failover or a
//! restart; the moved tag is reported (`TagCurrent`, event `TagMoved`); it runs only after a
//! spec change, or at once with `rollout.followTag`.
//!
//! A change of the cloud config resolves the tag afresh; with `rollout.followTag` the moved
//! tag is rolled out (the previous version kept for the rollback window) and run after a
//! restart, or first shadowed under `strategy: Shadow`; a registry down while checking is
//! reported (`TagCurrent` `Unknown`, `CheckFailed`) and changes nothing else.

use std::time::Duration;

use e2e::cloud_provider::{
    NAME, active_digest, api, apply, cloud_provider, condition_is, install_crd, resource_config,
    simcloud_config, status_where, token_secret,
};
use e2e::registry::{Registry, RegistryOptions};
use e2e::testbed::{Testbed, eventually, is_uninitialized};
use kube::ResourceExt;
use wasm_ccm::manager::{ManagerConfig, ProviderMode};
use wasm_ccm::resource::{CandidatePhase, ConditionStatus, condition};
use wasm_ccm_host::source::{ArtifactStore, DistributionSettings};

use super::distribution;

const WAIT: Duration = Duration::from_secs(60);
/// The label simcloud v2 adds to the nodes it initialises.
const V2_LABEL: &str = "simcloud.wasm-ccm.io/build";
const RECORD: &str = "wasm-ccm.io/resolved";

/// Push `file` as `reference` with `provider push`, off the runtime's threads: a replica's
/// lease is renewed meanwhile.
fn push(registry: &Registry, file: &str, reference: &str, extra: &[&str]) -> String {
    tokio::task::block_in_place(|| distribution::push(registry, file, reference, extra))
}

/// A manager following the resource, fetching from `registry` into `cache`, checking the
/// tag every second.
fn config(bed: &Testbed, registry: &Registry, cache: &std::path::Path) -> ManagerConfig {
    let mut config = resource_config(bed);
    config.provider = ProviderMode::Resource {
        names: vec![NAME.into()],
        allow_untagged_cloud: false,
        grant_ceiling: None,
        tag_check_interval: Duration::from_secs(1),
    };
    config.distribution = DistributionSettings {
        insecure_registries: vec![registry.addr().to_string()],
        cache: Some(ArtifactStore::open(cache, 512 << 20).expect("open the cache")),
        ..DistributionSettings::default()
    };
    config
}

/// `config` as a replica with leader election (a 2 s lease) named `identity`, serving
/// metrics on `port`.
fn replica(mut config: ManagerConfig, identity: &str, port: u16) -> ManagerConfig {
    use wasm_ccm::leader::LeaseSettings;

    config.leader_election = Some(LeaseSettings {
        namespace: "kube-system".into(),
        name: "cloud-controller-manager".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    });
    config.settings.identity = identity.into();
    config.serving.port = port;
    config
}

/// The CloudProvider naming `tag` in `registry` (no digest), with `follow_tag`.
fn tagged(bed: &Testbed, registry: &Registry, tag: &str, follow_tag: bool) -> serde_json::Value {
    let mut spec = cloud_provider(bed, guest_builds::SIMCLOUD, &simcloud_config(bed));
    spec["spec"]["provider"] = format!("oci://{}", registry.reference(tag)).into();
    spec["spec"]["rollout"]["followTag"] = follow_tag.into();
    spec
}

/// A testbed with the CloudProvider CRD and the simulator's token, and a registry whose
/// `acme/simcloud:stable` names simcloud v1; v1's digest.
async fn stable_tag_on_v1() -> (Testbed, Registry, String) {
    let bed = Testbed::start().await;
    let registry = Registry::start(RegistryOptions::default()).await;
    let v1 = push(
        &registry,
        guest_builds::SIMCLOUD,
        "acme/simcloud:stable",
        &[],
    );
    install_crd(&bed).await;
    token_secret(&bed, e2e::TOKEN).await;
    (bed, registry, v1)
}

/// The resolved-tag record on the resource, once it names `digest`.
async fn recorded(bed: &Testbed, digest: &str) -> serde_json::Value {
    eventually(&format!("the record names {digest}"), WAIT, || async {
        let object = api(bed).get(NAME).await.ok()?;
        let text = object.annotations().get(RECORD)?.clone();
        let record: serde_json::Value = serde_json::from_str(&text).expect("the record is JSON");
        (record["digest"] == digest).then_some(record)
    })
    .await
}

/// The node `name`, added now, once initialised; whether v2 initialised it.
async fn initialised_by_v2(bed: &Testbed, name: &str) -> bool {
    bed.add_node(name, "zone-a").await;
    let node = eventually(&format!("{name} initialised"), WAIT, || async {
        bed.node(name).await.filter(|node| !is_uninitialized(node))
    })
    .await;
    node.labels().contains_key(V2_LABEL)
}

/// The notes of the `reason` events about the CloudProvider, and how often each was
/// recorded.
async fn events(bed: &Testbed, reason: &str) -> Vec<(String, i32)> {
    bed.events_about(NAME)
        .await
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some(reason))
        .map(|event| {
            let count = event.series.map_or(1, |series| series.count);
            (event.note.unwrap_or_default(), count)
        })
        .collect()
}

// Multi-threaded: pushes block a thread while the replicas renew their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_reported_and_the_recorded_digest_runs_on_a_standby_after_failover_until_the_spec_changes()
 {
    let (bed, registry, v1) = stable_tag_on_v1().await;
    let spec = tagged(&bed, &registry, "acme/simcloud:stable", false);
    apply(&bed, &spec).await;
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port_a, port_b) = (e2e::https::free_port(), e2e::https::free_port());
    let leader = bed.run(replica(
        config(&bed, &registry, cache_a.path()),
        "replica-a",
        port_a,
    ));

    let status = status_where(&bed, "the tag resolved and running", |status| {
        active_digest(status) == v1
            && condition_is(
                status,
                condition::TAG_CURRENT,
                ConditionStatus::True,
                "Current",
            )
    })
    .await;
    let generation = api(&bed)
        .get(NAME)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let record = recorded(&bed, &v1).await;
    assert_eq!(record["generation"], generation);
    assert_eq!(record["reference"], spec["spec"]["provider"]);
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == condition::TAG_CURRENT && c.message.contains(&v1)),
        "{status:?}"
    );

    // The tag is pushed again, to another build: reported, not run.
    let v2 = push(
        &registry,
        guest_builds::SIMCLOUD_V2,
        "acme/simcloud:stable",
        &[],
    );
    assert_ne!(v1, v2);
    let status = status_where(&bed, "the moved tag reported", |status| {
        condition_is(
            status,
            condition::TAG_CURRENT,
            ConditionStatus::False,
            "TagMoved",
        )
    })
    .await;
    assert_eq!(active_digest(&status), v1, "{status:?}");
    let deadline = tokio::time::Instant::now() + WAIT;
    while events(&bed, "TagMoved").await.is_empty() {
        if tokio::time::Instant::now() > deadline {
            let all: Vec<_> = bed
                .events_about(NAME)
                .await
                .into_iter()
                .map(|e| (e.reason, e.action, e.note, e.reporting_instance))
                .collect();
            let status = api(&bed).get(NAME).await.unwrap().status;
            panic!("no TagMoved event: {all:#?}\n{status:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A few more checks: still one event for the new digest.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let moved = events(&bed, "TagMoved").await;
    assert_eq!(
        moved.len(),
        1,
        "{moved:?} {:?}",
        bed.event_reasons(NAME).await
    );
    let (note, count) = &moved[0];
    assert_eq!(*count, 1, "once per new digest, not every check: {moved:?}");
    for needle in [
        v1.as_str(),
        v2.as_str(),
        "acme/simcloud:stable",
        "spec.digest",
    ] {
        assert!(note.contains(needle), "{needle} not in {note}");
    }
    assert!(!initialised_by_v2(&bed, "before-failover").await, "v1 runs");

    // A standby started now loads the recorded digest, not the one the tag names.
    let standby = bed.run(replica(
        config(&bed, &registry, cache_b.path()),
        "replica-b",
        port_b,
    ));
    let standby_addr = ([127, 0, 0, 1], port_b).into();
    let info = eventually("the standby has a version loaded", WAIT, || async {
        let (status, _) = e2e::https::get(standby_addr, "/readyz").await.ok()?;
        let (_, metrics) =
            e2e::https::get_with_token(standby_addr, "/metrics", bed.emulator.token())
                .await
                .ok()?;
        let info: Vec<String> = metrics
            .lines()
            .filter(|line| line.starts_with("wasm_ccm_provider_info{"))
            .map(str::to_string)
            .collect();
        (status == 200 && !info.is_empty()).then_some(info)
    })
    .await;
    assert!(
        info.len() == 1 && info[0].contains(&format!("digest=\"{v1}\"")),
        "{info:?}"
    );

    // The leader stops; the standby takes over, still running v1, and does not report the
    // move again.
    leader.stop().await.unwrap();
    assert!(
        !initialised_by_v2(&bed, "after-failover").await,
        "v1 runs after the failover"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = api(&bed).get(NAME).await.unwrap().status.unwrap();
    assert_eq!(active_digest(&status), v1, "{status:?}");
    assert!(
        condition_is(
            &status,
            condition::TAG_CURRENT,
            ConditionStatus::False,
            "TagMoved"
        ),
        "{status:?}"
    );
    let moved = events(&bed, "TagMoved").await;
    assert_eq!(
        moved.iter().map(|(_, count)| count).sum::<i32>(),
        1,
        "{moved:?}"
    );

    // And a manager restarted (from its cache) runs v1 as well.
    standby.stop().await.unwrap();
    let manager = bed.run(config(&bed, &registry, cache_a.path()));
    assert!(
        !initialised_by_v2(&bed, "after-restart").await,
        "v1 runs after a restart"
    );

    // A spec change that rolls a version out (here the cloud config) resolves the tag
    // afresh: v2 runs, recorded for the new generation.
    let mut changed = spec.clone();
    changed["spec"]["cloudConfig"]["inline"] = format!("{} ", simcloud_config(&bed)).into();
    apply(&bed, &changed).await;
    let status = status_where(&bed, "the tag resolved afresh", |status| {
        active_digest(status) == v2
    })
    .await;
    let record = recorded(&bed, &v2).await;
    assert_eq!(record["generation"], generation + 1);
    status_where(&bed, "the tag current again", |status| {
        condition_is(
            status,
            condition::TAG_CURRENT,
            ConditionStatus::True,
            "Current",
        )
    })
    .await;
    assert_eq!(
        status.previous.as_ref().map(|p| p.digest.as_str()),
        Some(v1.as_str())
    );
    assert!(initialised_by_v2(&bed, "after-the-spec-change").await);
    manager.stop().await.unwrap();
}

// Multi-threaded: pushes block a thread while the replicas renew their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_follow_tag_a_moved_tag_is_rolled_out_and_a_restart_runs_it() {
    let (bed, registry, v1) = stable_tag_on_v1().await;
    apply(
        &bed,
        &tagged(&bed, &registry, "acme/simcloud:stable", false),
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let manager = bed.run(config(&bed, &registry, cache.path()));
    status_where(&bed, "v1 running", |status| active_digest(status) == v1).await;
    recorded(&bed, &v1).await;

    // Turning followTag on changes nothing that runs: v1 stays recorded for the new
    // generation.
    apply(&bed, &tagged(&bed, &registry, "acme/simcloud:stable", true)).await;
    let generation = api(&bed)
        .get(NAME)
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    let record = eventually("v1 recorded for the new generation", WAIT, || async {
        let record = recorded(&bed, &v1).await;
        (record["generation"] == generation).then_some(record)
    })
    .await;
    assert_eq!(record["digest"], v1);

    // A registry that cannot be asked is reported, and changes nothing that runs.
    registry.stop();
    let status = status_where(&bed, "the failed check reported", |status| {
        condition_is(
            status,
            condition::TAG_CURRENT,
            ConditionStatus::Unknown,
            "CheckFailed",
        )
    })
    .await;
    assert_eq!(active_digest(&status), v1, "{status:?}");
    registry.restart().await;
    status_where(&bed, "the tag checked again", |status| {
        condition_is(
            status,
            condition::TAG_CURRENT,
            ConditionStatus::True,
            "Current",
        )
    })
    .await;

    // The tag moves: the new digest is rolled out as a new version is.
    let v2 = push(
        &registry,
        guest_builds::SIMCLOUD_V2,
        "acme/simcloud:stable",
        &[],
    );
    let status = status_where(&bed, "the moved tag rolled out", |status| {
        active_digest(status) == v2
            && condition_is(
                status,
                condition::PROGRESSING,
                ConditionStatus::False,
                "Activated",
            )
    })
    .await;
    assert_eq!(
        status.previous.as_ref().map(|p| p.digest.as_str()),
        Some(v1.as_str()),
        "v1 kept for a rollback: {status:?}"
    );
    assert!(status.rollback_window_end.is_some(), "{status:?}");
    let record = recorded(&bed, &v2).await;
    assert_eq!(record["generation"], generation);
    // Events are written after the status, from their own queue: TagMoved, then v2's
    // Activated.
    eventually("TagMoved, then Activated", WAIT, || async {
        let reasons = bed.event_reasons(NAME).await;
        let moved = reasons.iter().position(|r| r == "TagMoved");
        let activated = reasons.iter().rposition(|r| r == "Activated");
        (moved.is_some() && moved < activated).then_some(())
    })
    .await;
    let (note, _) = &events(&bed, "TagMoved").await[0];
    assert!(note.contains("spec.rollout.followTag"), "{note}");
    assert!(initialised_by_v2(&bed, "after-the-move").await);

    // Restarted, the manager runs the digest rolled out, from the cache.
    manager.stop().await.unwrap();
    let manager = bed.run(config(&bed, &registry, cache.path()));
    assert!(initialised_by_v2(&bed, "after-the-restart").await);
    let status = status_where(&bed, "v2 after the restart", |status| {
        condition_is(
            status,
            condition::TAG_CURRENT,
            ConditionStatus::True,
            "Current",
        )
    })
    .await;
    assert_eq!(active_digest(&status), v2, "{status:?}");
    manager.stop().await.unwrap();
}

// Multi-threaded: pushes block a thread while the replicas renew their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_follow_tag_under_the_shadow_strategy_a_moved_tag_is_shadowed_first() {
    let (bed, registry, v1) = stable_tag_on_v1().await;
    let mut spec = tagged(&bed, &registry, "acme/simcloud:stable", true);
    spec["spec"]["rollout"]["strategy"] = "Shadow".into();
    spec["spec"]["rollout"]["shadow"] = serde_json::json!({"agreeingCalls": 1_000_000});
    apply(&bed, &spec).await;
    let cache = tempfile::tempdir().unwrap();
    let manager = bed.run(config(&bed, &registry, cache.path()));
    status_where(&bed, "v1 running", |status| active_digest(status) == v1).await;
    recorded(&bed, &v1).await;

    let v2 = push(
        &registry,
        guest_builds::SIMCLOUD_V2,
        "acme/simcloud:stable",
        &[],
    );
    let status = status_where(&bed, "the moved tag shadowing", |status| {
        status.candidate.as_ref().is_some_and(|candidate| {
            candidate.phase == CandidatePhase::Shadowing
                && candidate.digest.as_deref() == Some(v2.as_str())
        })
    })
    .await;
    assert_eq!(
        active_digest(&status),
        v1,
        "v1 answers meanwhile: {status:?}"
    );
    eventually("the Shadowing event", WAIT, || async {
        let reasons = bed.event_reasons(NAME).await;
        reasons.contains(&"Shadowing".to_string()).then_some(())
    })
    .await;
    // Not recorded until it is activated.
    assert_eq!(recorded(&bed, &v1).await["digest"], v1);
    manager.stop().await.unwrap();
}

// Multi-threaded: pushes block a thread while the replicas renew their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_follow_tag_a_standby_runs_the_digest_the_leader_shadowed_and_promoted() {
    let (bed, registry, v1) = stable_tag_on_v1().await;
    // Nodes whose lifecycle checks give the shadow read-only calls to agree on.
    for index in 0..3 {
        bed.add_node(&format!("node-{index}"), "zone-a").await;
    }
    let mut spec = tagged(&bed, &registry, "acme/simcloud:stable", true);
    spec["spec"]["rollout"]["strategy"] = "Shadow".into();
    spec["spec"]["rollout"]["shadow"] = serde_json::json!({"agreeingCalls": 20});
    apply(&bed, &spec).await;
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (port_a, port_b) = (e2e::https::free_port(), e2e::https::free_port());
    let leader = bed.run(replica(
        config(&bed, &registry, cache_a.path()),
        "replica-a",
        port_a,
    ));
    status_where(&bed, "v1 running", |status| active_digest(status) == v1).await;
    recorded(&bed, &v1).await;
    let standby = bed.run(replica(
        config(&bed, &registry, cache_b.path()),
        "replica-b",
        port_b,
    ));
    let standby_addr = ([127, 0, 0, 1], port_b).into();
    let loaded = |digest: String| {
        let bed = &bed;
        async move {
            eventually(&format!("the standby loads {digest}"), WAIT, || async {
                let (_, metrics) =
                    e2e::https::get_with_token(standby_addr, "/metrics", bed.emulator.token())
                        .await
                        .ok()?;
                metrics
                    .lines()
                    .any(|line| {
                        line.starts_with("wasm_ccm_provider_info{")
                            && line.contains(&format!("digest=\"{digest}\""))
                    })
                    .then_some(())
            })
            .await
        }
    };
    loaded(v1.clone()).await;

    // The tag moves: the leader shadows v2 and promotes it; the standby loads the digest
    // the leader recorded, without a shadow of its own (it has no calls to compare).
    let v2 = push(
        &registry,
        guest_builds::SIMCLOUD_V2,
        "acme/simcloud:stable",
        &[],
    );
    status_where(&bed, "v2 promoted by the leader", |status| {
        active_digest(status) == v2
    })
    .await;
    // Events are written after the status, from their own queue.
    eventually("the leader's Shadowing event", WAIT, || async {
        let reasons = bed.event_reasons(NAME).await;
        reasons.contains(&"Shadowing".to_string()).then_some(())
    })
    .await;
    recorded(&bed, &v2).await;
    loaded(v2.clone()).await;

    // The leader stops: the standby takes over running v2, activated as it followed the
    // record (a standby records no event), not promoted from a shadow of its own now.
    leader.stop().await.unwrap();
    assert!(
        initialised_by_v2(&bed, "after-failover").await,
        "the standby runs the digest the leader rolled out"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let activated = events(&bed, "Activated").await;
    assert_eq!(
        activated.iter().map(|(_, count)| count).sum::<i32>(),
        2,
        "v1 and v2, by the first leader only: {activated:?}"
    );
    standby.stop().await.unwrap();
}

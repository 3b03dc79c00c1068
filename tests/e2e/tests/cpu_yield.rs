//! A provider that computes without pause cannot starve the manager: the `wasm-ccm` binary,
//! held to two tokio workers, runs four provider calls that spin until their deadline, and
//! meanwhile `/healthz` answers promptly, the leader keeps renewing its Lease, and the four
//! calls run side by side instead of one after another.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::https;
use e2e::testbed::{ManagerProcess, Testbed, eventually};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;

const WAIT: Duration = Duration::from_secs(30);
/// The provider's call deadline: long enough that the spinning calls overlap the checks.
const CALL_TIMEOUT: Duration = Duration::from_secs(6);
const SPINNING_NODES: usize = 4;
const TOKIO_WORKERS: usize = 2;
/// The slowest `/healthz` answer allowed while the calls spin: a fifth of the chart's probe
/// timeout (5 s), and a sixth of a call's deadline, which a provider that never yielded would
/// hold the workers for. Well above what a busy test machine adds to a TLS round trip.
const HEALTHZ_WITHIN: Duration = Duration::from_secs(1);

/// The manager with the hostile provider, initialising four nodes at once, on two workers.
fn spawn_manager(bed: &Testbed) -> ManagerProcess {
    let port = https::free_port();
    let child = e2e::wasm_ccm_command(&e2e::wasm_ccm_binary())
        .args([
            format!("--provider=file://{}", guest_builds::HOSTILE),
            "--cloud-provider=hostile".into(),
            format!("--kubeconfig={}", bed.kubeconfig().display()),
            "--controllers=cloud-node".into(),
            format!("--concurrent-node-syncs={SPINNING_NODES}"),
            format!("--timeout={}s", CALL_TIMEOUT.as_secs()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--leader-elect-lease-duration=2s".into(),
            "--leader-elect-renew-deadline=1500ms".into(),
            "--leader-elect-retry-period=300ms".into(),
        ])
        .env("TOKIO_WORKER_THREADS", TOKIO_WORKERS.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wasm-ccm");
    ManagerProcess {
        child,
        addr: ([127, 0, 0, 1], port).into(),
    }
}

/// The value of every sample of `metric` whose labels include all of `labels`, summed.
async fn metric(
    bed: &Testbed,
    manager: &ManagerProcess,
    metric: &str,
    labels: &[&str],
) -> Option<f64> {
    let (_, body) = https::get_with_token(manager.addr, "/metrics", bed.emulator.token())
        .await
        .ok()?;
    let samples = body
        .lines()
        .filter(|line| line.starts_with(metric) && labels.iter().all(|l| line.contains(l)));
    let values: Vec<f64> = samples
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

async fn lease_renewed(bed: &Testbed) -> Option<(String, MicroTime)> {
    let lease = Api::<Lease>::namespaced(bed.client.clone(), "kube-system")
        .get_opt("cloud-controller-manager")
        .await
        .ok()??;
    let spec = lease.spec?;
    Some((spec.holder_identity?, spec.renew_time?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinning_providers_leave_health_and_the_lease_alone() {
    let bed = Testbed::start().await;
    let manager = spawn_manager(&bed);
    // Leading, and ready: its provider loaded (it may win the Lease while it compiles).
    eventually("the manager leads, ready", WAIT, || async {
        let leading = metric(&bed, &manager, "leader_election_master_status", &[]).await?;
        let (ready, _) = https::get(manager.addr, "/readyz").await.ok()?;
        (leading == 1.0 && ready == 200).then_some(())
    })
    .await;

    // Nodes whose instance-metadata call computes until the deadline traps it.
    let created = Instant::now();
    for i in 0..SPINNING_NODES {
        let mut node = Testbed::kubelet_node(&format!("spin-{i}"));
        node.metadata.labels = Some(BTreeMap::from([(
            "hostile.wasm-ccm.io/command".to_string(),
            "loop".to_string(),
        )]));
        bed.create_node(&node).await;
    }
    eventually("the nodes queued", WAIT, || async {
        let adds = metric(&bed, &manager, "workqueue_adds_total", &["name=\"Nodes\""]);
        adds.await.filter(|n| *n >= SPINNING_NODES as f64)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // While they spin: health answers promptly, and the Lease is renewed.
    let (holder, renewed_before) = lease_renewed(&bed).await.expect("a lease");
    let mut slowest = Duration::ZERO;
    let window = Instant::now();
    while window.elapsed() < CALL_TIMEOUT / 2 {
        let asked = Instant::now();
        let (status, body) = https::get(manager.addr, "/healthz").await.expect("healthz");
        slowest = slowest.max(asked.elapsed());
        assert_eq!(status, 200, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (holder_after, renewed_after) = lease_renewed(&bed).await.expect("a lease");
    let deadlines = metric(
        &bed,
        &manager,
        "wasm_ccm_provider_calls_total",
        &["deadline"],
    )
    .await;
    assert_eq!(
        deadlines, None,
        "the checks ran while every call still spun"
    );
    assert!(
        slowest < HEALTHZ_WITHIN,
        "/healthz took {slowest:?} while {SPINNING_NODES} provider calls spun on {TOKIO_WORKERS} workers"
    );
    assert_eq!(holder_after, holder, "the leader kept its lease");
    assert!(
        renewed_after.0 > renewed_before.0,
        "the lease was renewed while providers spun: {renewed_before:?} -> {renewed_after:?}"
    );

    // The four calls ran side by side: all hit their deadline about one deadline after the
    // nodes appeared, not four deadlines.
    eventually("every spinning call hit its deadline", WAIT, || async {
        let deadlines = metric(
            &bed,
            &manager,
            "wasm_ccm_provider_calls_total",
            &["deadline"],
        );
        deadlines.await.filter(|n| *n >= SPINNING_NODES as f64)
    })
    .await;
    let all_failed = created.elapsed();
    assert!(
        all_failed < CALL_TIMEOUT * 2,
        "{SPINNING_NODES} spinning calls took {all_failed:?} with a {CALL_TIMEOUT:?} deadline: they ran one after another"
    );
}

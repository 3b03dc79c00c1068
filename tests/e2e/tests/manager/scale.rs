//! The scale benchmark's remote mode, as the benchmarks page tells someone with a real
//! cluster to run it: the cluster reached only through a kubeconfig file and the cloud
//! simulator only through its URL and token (here both happen to run in this process), set
//! through the variables the page names. A small run reports its three phases and leaves the cluster and the cloud
//! as it found them; a wrong or missing variable is named.

use std::collections::BTreeMap;
use std::time::Duration;

use cloud_sim::{CloudSim, SimOptions};
use e2e::loopback;
use e2e::scale::{self, LABEL, NAMESPACE, Settings, Target};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Api;
use kube::api::ListParams;
use kube_emulator::{Emulator, EmulatorOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_bench_runs_against_a_cluster_and_a_cloud_given_by_kubeconfig_and_url() {
    let emulator = Emulator::start(loopback(), EmulatorOptions::default())
        .await
        .expect("emulator starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    emulator.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let cloud = CloudSim::start(
        loopback(),
        SimOptions {
            token: "bench-token".into(),
            lb_provision: Duration::from_millis(100),
            ..SimOptions::default()
        },
    )
    .await
    .expect("cloud-sim starts");

    // The variables the benchmarks page tells a reader with a cluster to set.
    let variables = BTreeMap::from([
        ("SCALE_KUBECONFIG", kubeconfig.display().to_string()),
        ("SCALE_CLOUD_URL", cloud.url()),
        ("SCALE_CLOUD_TOKEN", "bench-token".to_string()),
        ("SCALE_NODES", "20".into()),
        ("SCALE_SERVICES", "3".into()),
        ("SCALE_LATENCY_MS", "1".into()),
    ]);
    let settings = Settings::from_vars(|name| variables.get(name).cloned())
        .expect("the documented variables are understood");
    assert!(matches!(settings.target, Target::Remote { .. }));
    let report = scale::run(settings).await;

    let table = report.to_string();
    eprintln!("{table}");
    assert!(
        table.contains("| 20 nodes initialised from process start |")
            && table.contains("| 3 load balancers with an ingress |"),
        "{table}"
    );
    let [nodes, load_balancers, churn] = &report.phases[..] else {
        panic!("three phases: {table}");
    };
    assert_eq!(
        nodes.provider_calls, 21.0,
        "the provider's init at start, then one instance-metadata per node: {table}"
    );
    // It started with leader election, cold then warm (the nodes the cold start initialised
    // were put back: the warm start initialised all 20), and the start-up rows are there;
    // the emulator has no
    // /metrics for the manager's LISTs, which the bench says rather than failing.
    assert!(report.start_up.lease_acquired.is_ok(), "{table}");
    assert!(
        table.contains("| first node initialised after process start, cold (empty cache: compiles) | ")
            && table.contains("| first node initialised after process start, warm (restart: cache filled) | ")
            && report.start_up.cold_first_after_start > 0.0
            && table.contains(
                "| LIST nodes / services by the manager, process start to all nodes initialised | not available ("
            ),
        "{table}"
    );
    // Its writes by client come from its own /metrics: the nodes' (an update each, and an
    // address patch each but for the last few, which may still be in flight when the last
    // taint goes and the phase ends), the Lease's, and a Synced event per node (some maybe
    // written just after the phase).
    let writes = nodes.writes_by_client;
    assert!(writes.state >= 30.0, "{writes:?}: {table}");
    assert!(writes.lease >= 1.0, "{writes:?}: {table}");
    assert!(
        writes.events + report.trailing.posts >= 20.0,
        "{writes:?}: {table}"
    );
    assert!(
        nodes.requests.get("PUT").is_some_and(|n| *n >= 20.0),
        "{table}"
    );
    assert!(
        load_balancers.writes() >= 3.0 * 2.0,
        "a finalizer and a status per Service"
    );
    assert!(churn.manager_cpu >= 0.0 && load_balancers.wall > Duration::ZERO);
    assert_eq!(
        (report.updated_once, report.updated_more, report.complete),
        (3, 0, 3),
        "{table}"
    );

    // The bench cleaned up after itself: no Node, Service or namespace, no load balancer.
    let config = kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
        .await
        .expect("kubeconfig");
    let client = kube::Client::try_from(config).expect("client");
    let left = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(LABEL))
        .await
        .expect("list nodes")
        .items;
    assert!(left.is_empty(), "{} bench nodes left", left.len());
    assert!(
        Api::<Namespace>::all(client)
            .get_opt(NAMESPACE)
            .await
            .expect("get namespace")
            .is_none()
    );
    assert!(cloud.state().load_balancers().is_empty());
}

#[test]
fn scale_bench_variables_are_checked_naming_the_wrong_one() {
    let from = |pairs: &[(&str, &str)]| {
        let pairs: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|name| pairs.get(name).cloned())
    };
    let local = from(&[]).expect("no variables: the defaults, in process");
    assert_eq!(
        (local.nodes, local.services, local.latency_ms),
        (5000, 1000, 10)
    );
    assert!(matches!(local.target, Target::InProcess));
    let half = from(&[("SCALE_KUBECONFIG", "/kc")]).err().unwrap();
    assert!(
        half.contains("SCALE_KUBECONFIG and SCALE_CLOUD_URL"),
        "{half}"
    );
    let tokenless = from(&[("SCALE_KUBECONFIG", "/kc"), ("SCALE_CLOUD_URL", "http://c")])
        .err()
        .unwrap();
    assert!(tokenless.starts_with("SCALE_CLOUD_TOKEN"), "{tokenless}");
    let bad = from(&[("SCALE_NODES", "lots")]).err().unwrap();
    assert!(bad.contains("SCALE_NODES=\"lots\""), "{bad}");
    assert_eq!(local.providers, 1);
    let three = from(&[("SCALE_PROVIDERS", "3")]).err().unwrap();
    assert!(three.contains("SCALE_PROVIDERS=3"), "{three}");
}

/// `SCALE_PROVIDERS=2`: the same totals served by two providers in one manager, each
/// initialising its half of the nodes and making the load balancers of its half of the
/// Services, each load balancer in front of its provider's nodes and updated once when more
/// join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_bench_with_two_providers_splits_the_nodes_and_services_between_them() {
    let variables = BTreeMap::from([
        ("SCALE_NODES", "20".to_string()),
        ("SCALE_SERVICES", "4".into()),
        ("SCALE_LATENCY_MS", "1".into()),
        ("SCALE_PROVIDERS", "2".into()),
    ]);
    let settings = Settings::from_vars(|name| variables.get(name).cloned())
        .expect("the documented variables are understood");
    let report = scale::run(settings).await;
    let table = report.to_string();
    eprintln!("{table}");
    assert!(
        table.contains("20 nodes, 4 services, 2 providers sharing them"),
        "{table}"
    );
    let [nodes, ..] = &report.phases[..] else {
        panic!("three phases: {table}");
    };
    assert_eq!(
        nodes.provider_calls, 22.0,
        "each provider's init, then one instance-metadata per node: {table}"
    );
    assert_eq!(
        (report.updated_once, report.updated_more, report.complete),
        (4, 0, 4),
        "{table}"
    );
}

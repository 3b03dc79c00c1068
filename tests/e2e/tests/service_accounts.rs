//! `--use-service-account-credentials` end to end: each controller calls the Kubernetes API
//! emulator as its own ServiceAccount, with tokens from the TokenRequest API that the
//! manager's own client asks for, refreshed before they expire; the shared informers,
//! leader election and the event recorders keep the kubeconfig's credentials, as upstream.
//! The accounts are created if missing; tokens of 2 seconds are refreshed; a TokenRequest
//! refused with 403 is logged naming the account and the API error while the binary keeps
//! running, and it recovers once granted.

use std::io::Read;
use std::time::Duration;

use e2e::testbed::{Testbed, eventually, is_uninitialized};
use e2e::wasm_ccm_binary;
use k8s_openapi::api::core::v1::{Node, ServiceAccount, Taint};
use kube::Api;
use kube::api::PostParams;
use kube_emulator::{ADMIN_USER, EmulatorOptions, FailRule, FaultCommand, service_account_user};
use wasm_ccm::controllers::ControllerSelection;

const WAIT: Duration = Duration::from_secs(30);

fn account(name: &str) -> String {
    service_account_user("kube-system", name)
}

/// The users a client of the manager called as.
fn users(counts: &kube_emulator::RequestCounts, client: &str) -> Vec<String> {
    counts.client(client).by_user.keys().cloned().collect()
}

async fn accounts(bed: &Testbed) -> Vec<String> {
    Api::<ServiceAccount>::namespaced(bed.client.clone(), "kube-system")
        .list(&Default::default())
        .await
        .expect("list service accounts")
        .items
        .into_iter()
        .filter_map(|a| a.metadata.name)
        .collect()
}

#[tokio::test]
async fn each_controller_calls_as_its_own_service_account_created_if_missing() {
    let bed = Testbed::start().await;
    // One account exists already: it is used, not created again.
    Api::<ServiceAccount>::namespaced(bed.client.clone(), "kube-system")
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "route-controller"}}))
                .unwrap(),
        )
        .await
        .expect("create route-controller");
    bed.add_instance("worker-1", "sim-central-1a");
    let mut node = Testbed::kubelet_node("worker-1");
    node.spec.get_or_insert_default().pod_cidr = Some("10.244.1.0/24".into());
    bed.create_node(&node).await;
    // A Ready node with the shutdown taint: the lifecycle controller removes it.
    bed.add_instance("worker-2", "sim-central-1a");
    let mut shut = Testbed::kubelet_node("worker-2");
    let spec = shut.spec.get_or_insert_default();
    spec.provider_id = None;
    spec.taints = Some(vec![Taint {
        key: "node.cloudprovider.kubernetes.io/shutdown".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    }]);
    bed.create_node(&shut).await;
    bed.services()
        .create(&Default::default(), &Testbed::lb_service("web"))
        .await
        .expect("create service");
    let mut config = bed.config();
    config.cluster.use_service_account_credentials = true;
    config.leader_election = Some(wasm_ccm::leader::LeaseSettings {
        identity: "accounts-test".into(),
        ..Default::default()
    });
    let manager = bed.run(config);

    let counts = bed
        .requests_seen(
            "requests from every controller",
            WAIT,
            &[
                ("cloud-node-controller", "update", "nodes"),
                ("node-controller", "patch", "nodes"),
                ("service-controller", "patch", "services/status"),
                ("route-controller", "patch", "nodes/status"),
                ("event-recorder", "create", "events.events.k8s.io"),
            ],
        )
        .await;
    assert_eq!(
        users(&counts, "cloud-node-controller"),
        [account("node-controller")],
        "the cloud-node controller acts as node-controller, as upstream"
    );
    assert_eq!(
        users(&counts, "node-controller"),
        [account("node-controller")]
    );
    assert_eq!(
        users(&counts, "service-controller"),
        [account("service-controller")]
    );
    assert_eq!(
        users(&counts, "route-controller"),
        [account("route-controller")]
    );
    for root in [
        "shared-informers",
        "leader-election",
        "event-recorder",
        "cloud-controller-manager",
    ] {
        assert_eq!(
            users(&counts, root),
            [ADMIN_USER],
            "{root} keeps the kubeconfig's credentials"
        );
    }
    let manager_client = counts.client("cloud-controller-manager");
    assert_eq!(
        manager_client.get("create", "serviceaccounts"),
        2,
        "only the missing accounts are created"
    );
    assert_eq!(
        counts.get("create", "serviceaccounts/token"),
        3,
        "one token per account (cloud-node and lifecycle share node-controller's), asked by the manager's own client: {:?}",
        counts.by_user_agent
    );
    assert_eq!(manager_client.get("create", "serviceaccounts/token"), 3);
    assert!(counts.unauthorized.is_empty(), "{:?}", counts.unauthorized);
    let mut names = accounts(&bed).await;
    names.sort();
    assert_eq!(
        names,
        ["node-controller", "route-controller", "service-controller"]
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn service_account_tokens_are_refreshed_before_they_expire() {
    // The emulator shortens every token to 2 s (as the API server's
    // --service-account-max-token-expiration, but shorter than a real one may be), so the
    // service controller needs several tokens for three services created 2.5 s apart.
    let bed = Testbed::start_with(EmulatorOptions {
        max_token_expiration: Some(Duration::from_secs(2)),
        ..EmulatorOptions::default()
    })
    .await;
    bed.add_node("worker-1", "sim-central-1a").await;
    let mut config = bed.config();
    config.cluster.use_service_account_credentials = true;
    config.controllers = "service".parse::<ControllerSelection>().unwrap();
    let manager = bed.run(config);

    for name in ["web-1", "web-2", "web-3"] {
        bed.services()
            .create(&Default::default(), &Testbed::lb_service(name))
            .await
            .expect("create service");
        eventually(&format!("{name} has a load balancer"), WAIT, || async {
            bed.service(name)
                .await
                .and_then(|s| e2e::testbed::ingress_ip(&s))
        })
        .await;
        // Longer than a token lives: the next service needs a new one.
        tokio::time::sleep(Duration::from_millis(2500)).await;
    }
    let counts = bed.emulator.requests();
    let controller = counts.client("service-controller");
    assert_eq!(
        users(&counts, "service-controller"),
        [account("service-controller")]
    );
    assert!(controller.get("patch", "services/status") >= 3);
    assert!(
        controller.unauthorized.is_empty(),
        "no request went out with an expired token: {:?}",
        controller.unauthorized
    );
    let tokens = counts.get("create", "serviceaccounts/token");
    assert!(
        tokens >= 3,
        "a token per service at least, each asked before the last expired: {tokens}"
    );
    assert_eq!(
        counts
            .client("cloud-controller-manager")
            .get("create", "serviceaccounts"),
        1,
        "the account is created once; later refreshes find it"
    );
    manager.stop().await.unwrap();
}

#[tokio::test]
async fn a_failing_token_request_is_a_clear_error_and_the_manager_keeps_running() {
    let bed = Testbed::start().await;
    let forbidden = r#"serviceaccounts "node-controller" is forbidden: User "kube-emulator" cannot create resource "serviceaccounts/token" in API group "" in the namespace "kube-system""#;
    let mut rule = FailRule::new(10_000, 403)
        .method("POST")
        .path_contains("/token");
    rule.message = Some(forbidden.into());
    bed.emulator.faults().fail_next(rule);
    bed.add_node("worker-1", "sim-central-1a").await;
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut args = bed.provider_flags();
    args.extend([
        "--controllers=cloud-node".to_string(),
        "--use-service-account-credentials".into(),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
    ]);
    let mut child = e2e::wasm_ccm_command(&wasm_ccm_binary())
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().expect("log file"))
        .spawn()
        .expect("start wasm-ccm");

    eventually("the TokenRequest retried", WAIT, || async {
        (bed.emulator
            .requests()
            .get("create", "serviceaccounts/token")
            >= 3)
            .then_some(())
    })
    .await;
    assert!(
        child.try_wait().expect("wait").is_none(),
        "the manager keeps running"
    );
    let node = bed.node("worker-1").await.expect("node");
    assert!(is_uninitialized(&node), "no token, no initialisation");

    // Granted: the next refresh succeeds and the controller catches up.
    bed.emulator.faults().apply(FaultCommand::Clear);
    eventually("worker-1 initialised", WAIT, || async {
        bed.node("worker-1")
            .await
            .filter(|node: &Node| !is_uninitialized(node))
    })
    .await;
    child.kill().expect("kill");
    child.wait().expect("wait");
    let mut stderr = String::new();
    log.reopen()
        .expect("log file")
        .read_to_string(&mut stderr)
        .expect("read log");
    let expected = format!(
        "service account kube-system/node-controller: TokenRequest failed: 403 Forbidden: {forbidden}; with --use-service-account-credentials the manager's own credentials need create on serviceaccounts/token in kube-system"
    );
    assert!(stderr.contains(&expected), "{expected}\nnot in:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

//! `wasm-ccm` run mode through the binary: flags, serving, and two managers electing a leader.
//! Bad flags are refused naming the flag; the standby takes over when the leader is killed
//! (`kill -9`); `/healthz` and `/metrics` are served over HTTPS; the running page's command,
//! typed, runs every controller, and a clean shutdown releases the lease.

use std::net::SocketAddr;
use std::process::{Command, Output};
use std::time::Duration;

use e2e::docs::{self, Shell};
use e2e::https;
use e2e::testbed::{ManagerProcess as Manager, Testbed, eventually, is_uninitialized};
use e2e::wasm_ccm_binary;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

const WAIT: Duration = Duration::from_secs(30);

/// The flags that run simcloud against `bed`, serving on `port`.
fn flags(bed: &Testbed, port: u16) -> Vec<String> {
    let mut flags = bed.provider_flags();
    flags.extend([
        "--controllers=cloud-node".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
    ]);
    flags
}

fn run_to_end(args: &[String]) -> Output {
    e2e::wasm_ccm_command(&wasm_ccm_binary())
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run wasm-ccm")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `args` with each of `extra` added, replacing a flag of the same name.
fn with(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    for flag in extra {
        let name = flag.split('=').next().unwrap_or_default();
        args.retain(|arg| arg.split('=').next() != Some(name));
        args.push(flag.to_string());
    }
    args
}

#[tokio::test]
async fn bad_flags_are_refused_naming_the_flag() {
    let bed = Testbed::start().await;
    let base = flags(&bed, 0);
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--cloud-provider=simcloud".into()],
            "--provider or --provider-resource is required",
        ),
        (
            with(base.clone(), &["--provider-resource=simcloud"]),
            "the argument '--provider <REFERENCE>' cannot be used with '--provider-resource <NAME[,NAME]>'",
        ),
        (
            vec![
                "--provider-resource=simcloud".into(),
                format!("--allow={}", bed.cloud.sim.url()),
            ],
            "--allow cannot be used with --provider-resource: the CloudProvider simcloud grants hosts (spec.egress.allowedHosts)",
        ),
        (
            vec![
                "--provider-resource=simcloud".into(),
                "--cloud-provider=simcloud".into(),
            ],
            "--cloud-provider cannot be used with --provider-resource: the CloudProvider simcloud names the provider (spec.name)",
        ),
        (
            base.iter()
                .filter(|f| !f.starts_with("--cloud-provider"))
                .cloned()
                .collect(),
            "--cloud-provider is required",
        ),
        (
            with(
                base.clone(),
                &["--registry-config=/nonexistent/config.json"],
            ),
            "--registry-config /nonexistent/config.json: No such file",
        ),
        (
            with(base.clone(), &["--cache-dir=/dev/null/cache"]),
            "--cache-dir /dev/null/cache",
        ),
        (
            with(base.clone(), &["--provider=oci://ghcr.io/Acme/p"]),
            "--provider \"oci://ghcr.io/Acme/p\": repository \"Acme/p\": component \"Acme\"",
        ),
        (
            with(base.clone(), &["--cluster-cidr=10.0.0.0/8,10.1.0.0/16"]),
            "--cluster-cidr",
        ),
        (with(base.clone(), &["--controllers=*,-routes"]), "-routes"),
        (
            with(base.clone(), &["--concurrent-service-syncs=0"]),
            "--concurrent-service-syncs",
        ),
        (
            with(base.clone(), &["--node-monitor-period=soon"]),
            "--node-monitor-period",
        ),
        (
            with(base.clone(), &["--leader-elect-renew-deadline=20s"]),
            "--leader-elect-renew-deadline",
        ),
        (
            with(base.clone(), &["--leader-elect-resource-lock=endpoints"]),
            "only \"leases\"",
        ),
        (
            with(base.clone(), &["--kubeconfig=/nonexistent/kubeconfig"]),
            "--kubeconfig /nonexistent/kubeconfig",
        ),
        (
            with(base.clone(), &["--provider=file:///nonexistent.wasm"]),
            "--provider file:///nonexistent.wasm",
        ),
    ];
    for (args, expected) in cases {
        let output = run_to_end(&args);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
        assert!(
            message.contains(expected),
            "{args:?}: expected {expected:?} in {message}"
        );
        assert!(!message.contains("panicked"), "{message}");
        assert_eq!(
            message.matches("os error").count(),
            message.contains("os error") as usize,
            "{args:?}: the I/O error is told once: {message}"
        );
    }
}

#[test]
fn an_unreadable_credential_is_refused_before_anything_connects() {
    for (rule, problem) in [
        (
            "http://127.0.0.1:8080=bearer:env:WASM_CCM_RUN_MODE_UNSET_TOKEN",
            "environment variable WASM_CCM_RUN_MODE_UNSET_TOKEN is not set",
        ),
        (
            "http://127.0.0.1:8080=header:X-Auth-Token:file:/nonexistent/wasm-ccm/token",
            "cannot read /nonexistent/wasm-ccm/token",
        ),
    ] {
        // The kubeconfig does not exist either: the credential is refused before the
        // manager tries the cluster.
        let args: Vec<String> = vec![
            format!("--provider=file://{}", guest_builds::SIMCLOUD),
            "--cloud-provider=simcloud".into(),
            "--kubeconfig=/nonexistent/kubeconfig".into(),
            "--allow=http://127.0.0.1:8080".into(),
            format!("--credential={rule}"),
        ];
        let output = run_to_end(&args);
        let message = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{rule}: {message}");
        assert!(
            message.contains(&format!("--credential {rule}: ")),
            "the flag and the rule: {message}"
        );
        assert!(message.contains(problem), "{message}");
        assert!(!message.contains("kubeconfig"), "{message}");
    }
}

/// As a Helm chart's `extraArgs`, appended after the chart's own arguments, override them.
#[tokio::test]
async fn a_repeated_flag_overrides_the_earlier_one_and_controllers_lists_join() {
    let bed = Testbed::start().await;
    let port = https::free_port();
    let mut args = flags(&bed, port); // with --controllers=cloud-node
    args.extend(
        [
            "--leader-elect=true",
            "--node-monitor-period=1s",
            "--leader-elect=false",
            "--controllers=service",
            "--node-monitor-period=2s",
        ]
        .map(String::from),
    );
    let manager = Manager::spawn(&wasm_ccm_binary(), &args, port, false);
    let health = eventually("both controllers running", WAIT, || async {
        let (status, body) = https::get(manager.addr, "/healthz?verbose").await.ok()?;
        (status == 200 && body.contains("service-lb-controller")).then_some(body)
    })
    .await;
    assert!(health.contains("[+]cloud-node-controller ok"), "{health}");
    assert!(health.contains("[+]service-lb-controller ok"), "{health}");
    assert!(
        !health.contains("leaderElection"),
        "--leader-elect=false came last: {health}"
    );
    assert_eq!(holder(&bed).await, None, "no Lease without leader election");
    bed.add_node("n1", "sim-central-1a").await;
    eventually("n1 initialised without a leader", WAIT, || async {
        bed.node("n1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
}

/// Without `--cache-dir`, compiled code is kept in the user's cache directory
/// (`$XDG_CACHE_HOME/wasm-ccm`), sealed as in a named one: a restart compiles nothing.
/// `--no-cache` writes nothing there.
#[tokio::test]
async fn a_restart_without_cache_dir_loads_from_the_users_cache_directory() {
    use std::os::unix::fs::PermissionsExt;

    let bed = Testbed::start().await;
    let cache_home = tempfile::tempdir().unwrap();
    let start = |extra: &[&str]| {
        let port = https::free_port();
        let mut command = e2e::wasm_ccm_command(&wasm_ccm_binary());
        command
            .args(with(flags(&bed, port), &["--leader-elect=false"]))
            .args(extra)
            .env("XDG_CACHE_HOME", cache_home.path());
        Manager::spawn_command(command, port, true)
    };
    let compiles = |manager: &Manager, node: &'static str| {
        let bed = &bed;
        let addr = manager.addr;
        async move {
            bed.add_node(node, "sim-central-1a").await;
            eventually(&format!("{node} initialised"), WAIT, || async {
                bed.node(node).await.filter(|n| !is_uninitialized(n))
            })
            .await;
            let (_, metrics) = https::get_with_token(addr, "/metrics", bed.emulator.token())
                .await
                .expect("metrics");
            metrics
                .lines()
                .filter(|line| line.starts_with("wasm_ccm_sandbox_compiles_total{"))
                .map(|line| {
                    let source = line
                        .split("source=\"")
                        .nth(1)
                        .and_then(|s| s.split('"').next());
                    format!(
                        "{}={}",
                        source.unwrap_or("?"),
                        line.rsplit(' ').next().unwrap_or("?")
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let compiled = cache_home.path().join("wasm-ccm/compiled");

    let no_cache = start(&["--no-cache"]);
    assert_eq!(compiles(&no_cache, "uncached").await, ["compile=1"]);
    drop(no_cache);
    assert!(
        !cache_home.path().join("wasm-ccm").exists(),
        "--no-cache wrote a cache"
    );

    let first = start(&[]);
    assert_eq!(compiles(&first, "first").await, ["compile=1"]);
    drop(first);
    let key = std::fs::metadata(compiled.join("key")).expect("the sealing key");
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    let entries = std::fs::read_dir(&compiled)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".cwasm"))
        .count();
    assert_eq!(entries, 1, "one compiled entry in {}", compiled.display());

    let restarted = start(&[]);
    assert_eq!(compiles(&restarted, "restarted").await, ["cache=1"]);
}

#[tokio::test]
async fn a_provider_reporting_another_name_is_refused() {
    let bed = Testbed::start().await;
    let output = run_to_end(&with(flags(&bed, 0), &["--cloud-provider=aws"]));
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(message.contains("--cloud-provider aws"), "{message}");
    assert!(message.contains("\"simcloud\""), "{message}");
}

/// An `init` that fails names both flags that may be wrong: the cloud config, and the
/// provider name (simcloud run as `aws` with a config it cannot use).
#[tokio::test]
async fn a_failed_init_is_reported_naming_the_provider_and_its_cloud_config() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("aws.json");
    std::fs::write(&config, r#"{"api_url": "ftp://nowhere"}"#).unwrap();
    let cloud_config = format!("--cloud-config={}", config.display());
    let output = run_to_end(&with(
        flags(&bed, 0),
        &["--cloud-provider=aws", &cloud_config],
    ));
    let message = stderr(&output);
    assert_ne!(output.status.code(), Some(0), "{message}");
    for named in [
        "init failed, run as --cloud-provider aws",
        &format!("--cloud-config {}", config.display()),
        "api_url",
        "simcloud.wasm",
    ] {
        assert!(message.contains(named), "names {named:?}: {message}");
    }
}

#[tokio::test]
async fn routes_without_a_cluster_cidr_are_refused_naming_the_fix() {
    let bed = Testbed::start().await;
    let args: Vec<String> = flags(&bed, 0)
        .into_iter()
        .map(|f| {
            if f.starts_with("--controllers") {
                "--controllers=*".into()
            } else {
                f
            }
        })
        .collect();
    let output = run_to_end(&args);
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(message.contains("--cluster-cidr is required"), "{message}");
    assert!(
        message.contains("--configure-cloud-routes=false"),
        "{message}"
    );
}

fn spawn(bed: &Testbed, extra: &[&str]) -> Manager {
    let port = https::free_port();
    Manager::spawn(
        &wasm_ccm_binary(),
        &with(flags(bed, port), extra),
        port,
        false,
    )
}

async fn is_leading(bed: &Testbed, manager: &Manager) -> Option<bool> {
    let (_, metrics) = https::get_with_token(manager.addr, "/metrics", bed.emulator.token())
        .await
        .ok()?;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("leader_election_master_status"))?;
    Some(line.ends_with(" 1"))
}

async fn holder(bed: &Testbed) -> Option<String> {
    Api::<Lease>::namespaced(bed.client.clone(), "kube-system")
        .get_opt("cloud-controller-manager")
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

const LEASE: [&str; 3] = [
    "--leader-elect-lease-duration=2s",
    "--leader-elect-renew-deadline=1500ms",
    "--leader-elect-retry-period=300ms",
];

#[tokio::test]
async fn the_standby_takes_over_when_the_leader_is_killed() {
    let bed = Testbed::start().await;
    let first = spawn(&bed, &LEASE);
    let second = spawn(&bed, &LEASE);
    let old_holder = eventually("a leader", WAIT, || async { holder(&bed).await }).await;
    let (mut leader, standby) = eventually("one leads, one stands by", WAIT, || async {
        match (
            is_leading(&bed, &first).await?,
            is_leading(&bed, &second).await?,
        ) {
            (true, false) => Some((0, 1)),
            (false, true) => Some((1, 0)),
            _ => None,
        }
    })
    .await;
    let mut managers = [first, second];

    // Served over HTTPS, with upstream's checks; the leader's controllers start once its
    // provider has loaded, which it did while it sought the Lease.
    let body = eventually("the leader's controllers", WAIT, || async {
        let (status, body) = https::get(managers[leader].addr, "/healthz?verbose")
            .await
            .ok()?;
        (status == 200 && body.contains("[+]cloud-node-controller ok")).then_some(body)
    })
    .await;
    assert!(body.contains("[+]leaderElection ok"), "{body}");
    // The standby is ready once its provider has loaded: it waits only for the Lease.
    eventually("the standby ready", WAIT, || async {
        let (status, _) = https::get(managers[standby].addr, "/readyz").await.ok()?;
        (status == 200).then_some(())
    })
    .await;
    let (_, standby_health) = https::get(managers[standby].addr, "/healthz?verbose")
        .await
        .unwrap();
    assert!(
        !standby_health.contains("cloud-node-controller"),
        "a standby runs no controllers: {standby_health}"
    );

    bed.add_node("before", "sim-central-1a").await;
    eventually("before initialised", WAIT, || async {
        bed.node("before").await.filter(|n| !is_uninitialized(n))
    })
    .await;

    // Kill the leader without a chance to release the lease.
    managers[leader].child.kill().expect("kill the leader");
    managers[leader].child.wait().expect("reap the leader");
    leader = standby;
    bed.add_node("after", "sim-central-1a").await;
    eventually("after initialised by the new leader", WAIT, || async {
        bed.node("after").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    assert_eq!(is_leading(&bed, &managers[leader]).await, Some(true));
    let new_holder = holder(&bed).await.expect("a holder");
    assert_ne!(new_holder, old_holder);
    let (_, metrics) =
        https::get_with_token(managers[leader].addr, "/metrics", bed.emulator.token())
            .await
            .unwrap();
    for name in [
        "node_controller_cloud_provider_taint_removal_delay_seconds_bucket",
        "running_managed_controllers{",
        "rest_client_requests_total{",
        "rest_client_request_duration_seconds_bucket{",
        "process_resident_memory_bytes ",
        "workqueue_adds_total{name=\"Nodes\"}",
        "workqueue_unfinished_work_seconds{name=\"Nodes\"}",
        "workqueue_longest_running_processor_seconds{name=\"Nodes\"}",
        "wasm_ccm_provider_calls_total{",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
}

/// The running page's "Outside a pod" block, typed: the emulator started (on a free port,
/// apart, so the test stops it), its kubeconfig's namespace printed, the CRD created
/// through `KUBECONFIG`.
#[tokio::test]
async fn the_outside_a_pod_block_starts_the_emulator_and_reads_its_namespace() {
    let block = docs::block_starting(
        "docs/src/operators/running.md",
        "sh",
        "kube-emulator --listen",
    );
    let shell = Shell::new();
    shell.link("kube-emulator", &e2e::kube_emulator_binary());
    let (emulator, rest) = block.split_once('\n').expect("more than the emulator");
    let emulator = emulator
        .strip_suffix(" &")
        .unwrap_or_else(|| panic!("the emulator runs in the background: {emulator}"))
        .replace("127.0.0.1:6443", "127.0.0.1:0");
    let _emulator = tokio::process::Command::from(shell.sh(&format!("exec {emulator}")))
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("run kube-emulator");
    // The emulator is another process: blocking this test's thread while it serves is fine.
    let printed = shell.typed(rest);
    assert!(printed.starts_with("default"), "{printed}");
    assert!(
        printed.contains(
            "customresourcedefinition.apiextensions.k8s.io/cloudproviders.wasm-ccm.io created"
        ),
        "{printed}"
    );
}

/// The running page's command, typed with the testbed in place of its paths and host
/// (`~/.kube/config` the testbed's kubeconfig) and a port of its own: it runs every
/// controller and leads, with leader election on as upstream's default, initialises a node,
/// and releases the lease on a clean shutdown (SIGTERM).
#[tokio::test]
async fn the_documented_command_runs_and_a_clean_shutdown_releases_the_lease() {
    let bed = Testbed::start().await;
    let mut shell = Shell::new();
    shell.env("RUST_LOG", "warn");
    std::fs::create_dir(shell.path(".kube")).expect("~/.kube");
    std::fs::copy(bed.kubeconfig(), shell.path(".kube/config")).expect("~/.kube/config");
    let port = https::free_port();
    let command = docs::substitute(
        &docs::block_starting(
            "docs/src/operators/running.md",
            "sh",
            "wasm-ccm --provider file://",
        ),
        &[
            (
                "file:///opt/providers/simcloud.wasm",
                &format!("file://{}", guest_builds::SIMCLOUD),
            ),
            (
                "/etc/simcloud/cloud.json",
                &bed.cloud_config().display().to_string(),
            ),
            ("https://api.simcloud.example", &bed.cloud.sim.url()),
            (
                "/var/run/secrets/simcloud/token",
                &bed.cloud.token_file.path().display().to_string(),
            ),
            // Other tests' managers serve beside it.
            (
                "--concurrent-service-syncs 10",
                &format!(
                    "--concurrent-service-syncs 10 --bind-address 127.0.0.1 --secure-port {port}"
                ),
            ),
        ],
    );
    let mut manager = Manager {
        child: shell.spawn(&command),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    eventually("leading", WAIT, || async {
        is_leading(&bed, &manager).await.filter(|l| *l)
    })
    .await;
    // Leading (the Lease won while the provider loaded), then its controllers start.
    eventually("every controller running", WAIT, || async {
        let (_, health) = https::get(manager.addr, "/healthz?verbose").await.ok()?;
        [
            "cloud-node-controller",
            "cloud-node-lifecycle-controller",
            "service-lb-controller",
            "node-route-controller",
        ]
        .iter()
        .all(|controller| health.contains(&format!("[+]{controller} ok")))
        .then_some(())
    })
    .await;
    bed.add_node("n1", "sim-central-1a").await;
    eventually("n1 initialised", WAIT, || async {
        bed.node("n1").await.filter(|n| !is_uninitialized(n))
    })
    .await;
    assert!(holder(&bed).await.is_some());
    let pid = manager.child.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || {
        let exit = manager.child.wait().expect("wait");
        drop(manager);
        exit
    })
    .await
    .unwrap();
    assert!(exit.success(), "exit status {exit}");
    assert_eq!(holder(&bed).await, None, "the lease was given up");
}

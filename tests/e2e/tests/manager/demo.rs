//! `make demo`: the demo runs two providers side by side (simcloud, and simcloud named
//! edgecloud against a second simulator), each initialising its own nodes and making the
//! load balancers of its own Services, and swaps simcloud to v2 through its `CloudProvider`
//! with no failed call of either; the `kubectl` commands it prints work as printed, with the real kubectl, against the
//! cluster it runs, and so do the other commands someone watching it would type: its
//! `export KUBECONFIG=` line, and the `kubectl create service loadbalancer` and `create
//! deployment` it suggests (kubectl sends protobuf), the Service then given a load balancer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use e2e::testbed::eventually;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Runs kubectl as the demo's reader would, its discovery cache in `cache`; what it printed.
async fn kubectl(cache: &Path, args: &[&str]) -> String {
    kube_emulator::kubectl(cache, args)
        .await
        .unwrap_or_else(|err| panic!("{err} (this test runs the kubectl commands the demo prints)"))
}

/// The demo's output up to the line starting with `until` (trimmed), or a panic with all of it.
async fn read_until(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    until: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    let read = async {
        while let Some(line) = lines.next_line().await.expect("demo stdout") {
            let done = line.trim_start().starts_with(until);
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    };
    let found = tokio::time::timeout(Duration::from_secs(120), read)
        .await
        .unwrap_or(false);
    assert!(
        found,
        "the demo never printed {until:?}; it printed:\n{}",
        seen.join("\n")
    );
    seen
}

/// The cells of the row of `table` that names `name` in its first two columns.
fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.iter().take(2).any(|c| *c == name))
        .unwrap_or_else(|| panic!("no row for {name} in:\n{table}"))
}

fn interrupt(demo: &Child) {
    let pid = demo.id().expect("demo running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
}

/// The calls of one version, from the demo's summary line
/// `simcloud@sha256:… v2 (active)   12 calls, 0 failed (ok: 12)`: version, role, calls, failed.
fn calls_line(line: &str) -> Option<(&str, &str, u64, u64)> {
    let (head, tail) = line.split_once(" calls, ")?;
    let (version, head) = head.trim().split_once(' ')?;
    let (role, calls) = head.trim().rsplit_once(' ')?;
    let failed = tail.split_once(" failed")?.0;
    Some((
        version,
        role.trim(),
        calls.parse().ok()?,
        failed.parse().ok()?,
    ))
}

#[tokio::test]
async fn the_demo_swaps_to_v2_with_no_failed_call_and_its_kubectl_commands_show_it() {
    let mut demo = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--exit-after", "300"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the demo");
    let mut lines = BufReader::new(demo.stdout.take().expect("piped")).lines();
    let transcript = read_until(&mut lines, "Exiting in").await;

    let emulator = transcript
        .iter()
        .find_map(|l| l.trim().strip_prefix("Kubernetes API emulator"))
        .expect("the demo names the emulator");
    assert!(
        emulator.trim().starts_with("https://127.0.0.1:"),
        "{emulator}"
    );
    // "service default/web has load balancer 10.x.y.z", per service.
    let load_balancers: BTreeMap<&str, &str> = transcript
        .iter()
        .filter_map(|l| {
            l.split_once("service default/")?
                .1
                .split_once(" has load balancer ")
        })
        .collect();
    assert_eq!(
        load_balancers.keys().copied().collect::<Vec<_>>(),
        ["api", "cdn", "web"],
        "{transcript:#?}"
    );
    // Each provider's load balancers from its own cloud, its nodes from its own.
    assert!(
        load_balancers["cdn"].starts_with("203.0.113."),
        "{transcript:#?}"
    );
    assert!(
        load_balancers["web"].starts_with("198.51.100."),
        "{transcript:#?}"
    );
    for (node, scheme) in [("worker-a", "simcloud://"), ("edge-a", "edgecloud://")] {
        assert!(
            transcript
                .iter()
                .any(|l| l.contains(&format!("node {node} initialised as {scheme}"))),
            "{node} initialised by its own provider: {transcript:#?}"
        );
    }

    // The swap: v2 activated through the resource, then every Service resynced through it.
    let v2 = transcript
        .iter()
        .find_map(|l| {
            let note = l.split_once("CloudProvider simcloud: ")?.1;
            note.contains("simcloud-v2.wasm) activated in ")
                .then(|| note.split_whitespace().next())?
        })
        .unwrap_or_else(|| panic!("the demo activates v2: {transcript:#?}"));
    let stamp = guest_builds::SIMCLOUD_V2_BUILD;
    for name in ["api", "web"] {
        assert!(
            transcript.iter().any(|l| l.contains(&format!(
                "service default/{name} resynced through {stamp}: ingress hostname {stamp}."
            ))),
            "{name} shows v2's hostname: {transcript:#?}"
        );
    }
    // Calls per version: v1's before the swap, v2's after, none failed.
    let calls: Vec<_> = transcript.iter().filter_map(|l| calls_line(l)).collect();
    assert!(
        calls
            .iter()
            .any(|(version, role, n, _)| *version == v2 && *role == "v2 (active)" && *n > 0),
        "v2 active with calls: {calls:?}"
    );
    assert!(
        calls.iter().any(|(version, role, n, _)| *version != v2
            && role.starts_with("v1 (previous")
            && *n > 0),
        "v1 with calls: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|(version, role, n, _)| version.starts_with("edgecloud@")
                && *role == "edgecloud v1 (active)"
                && *n > 0),
        "edgecloud serving beside: {calls:?}"
    );
    assert!(
        calls.iter().all(|(.., failed)| *failed == 0),
        "no call failed: {calls:?}"
    );
    assert!(
        transcript
            .iter()
            .any(|l| l.trim().starts_with("0 of ") && l.contains(" calls failed")),
        "{transcript:#?}"
    );

    let commands: Vec<Vec<&str>> = transcript
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("kubectl --kubeconfig "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        commands.len() >= 2,
        "the demo prints kubectl commands: {transcript:#?}"
    );

    let cache = tempfile::tempdir().expect("temp dir");
    for command in &commands {
        // The exact command, with `kubectl` resolved as the shell would (or `$KUBECTL`).
        let printed = kubectl(cache.path(), &command[1..]).await;
        match &command[3..] {
            ["get", "nodes", ..] => {
                for node in ["worker-a", "worker-b", "worker-c", "edge-a", "edge-b"] {
                    let cells = row(&printed, node);
                    if command.contains(&"wide") {
                        assert!(printed.contains("INTERNAL-IP"), "{printed}");
                    }
                    assert_eq!(cells[2], "<none>", "no roles: {printed}");
                    assert_eq!(
                        (cells[1], cells[4]),
                        ("Ready", e2e::testbed::KUBELET_VERSION),
                        "the kubelet's Ready condition and version: {printed}"
                    );
                }
            }
            ["get", "services", ..] => {
                for (name, ip) in &load_balancers {
                    let cells = row(&printed, name);
                    assert!(
                        cells.contains(&"LoadBalancer") && cells.contains(ip),
                        "{name} with {ip} in:\n{printed}"
                    );
                }
            }
            ["get", "cloudproviders", "-o", "wide"] => {
                let cells = row(&printed, "simcloud");
                assert_eq!(
                    (cells[2], cells[3], cells[4], cells[5]),
                    (v2, "True", "False", "Applied"),
                    "v2 active, ready, not progressing, its spec applied: {printed}"
                );
                assert!(
                    cells[7].ends_with("/simcloud-v2.wasm") && cells[8] == "Active",
                    "{printed}"
                );
                let edge = row(&printed, "edgecloud");
                assert!(
                    edge[2].starts_with("edgecloud@sha256:") && edge[3] == "True",
                    "edgecloud active and ready beside: {printed}"
                );
            }
            ["describe", "cloudprovider", "simcloud"] => {
                assert!(
                    printed.contains(&format!("Version:    {v2}")),
                    "v2 active: {printed}"
                );
                let events = printed.split_once("Events:").map_or("", |(_, e)| e);
                assert!(events.contains("Activated"), "{printed}");
            }
            ["describe", "cloudprovider", "edgecloud"] => {
                assert!(
                    printed.contains("Version:    edgecloud@sha256:"),
                    "edgecloud active: {printed}"
                );
            }
            _ => panic!("a printed command this test does not know: {command:?}"),
        }
    }
    for printed in [["get", "nodes"], ["get", "cloudproviders"]] {
        assert!(
            commands.iter().any(|c| c[3..5] == printed),
            "{printed:?} in {commands:?}"
        );
    }

    // What a user types next, with the same kubeconfig.
    let kubeconfig = PathBuf::from(commands[0][2]);
    let kubeconfig = kubeconfig.to_str().expect("UTF-8 path");
    let run = |args: &'static [&'static str]| {
        let mut all = vec!["--kubeconfig", kubeconfig];
        all.extend(args);
        let cache = cache.path().to_owned();
        async move { kubectl(&cache, &all).await }
    };
    let described = run(&["describe", "node", "worker-a"]).await;
    assert!(
        described.contains("ProviderID:") && described.contains("simcloud://"),
        "{described}"
    );
    assert!(
        described.contains("Pods:") && described.contains("not authorized"),
        "no pods, as the demo says: {described}"
    );
    let leases = run(&["get", "lease", "-n", "kube-system"]).await;
    assert_eq!(
        row(&leases, "cloud-controller-manager").len(),
        3,
        "{leases}"
    );
    let events = run(&["get", "events", "-A"]).await;
    assert!(
        events.contains("EnsuredLoadBalancer") && events.contains("service/web"),
        "{events}"
    );

    // The export line, typed as printed, then a plain `kubectl`.
    let export = transcript
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("export KUBECONFIG="))
        .expect("the demo prints an export KUBECONFIG= line");
    assert_eq!(export, format!("export KUBECONFIG={kubeconfig}"));
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let shell = |commands: String| {
        let cache = cache.path().to_owned();
        async move {
            tokio::process::Command::new("sh")
                .arg("-c")
                .arg(format!("set -e\n{export}\n{commands}"))
                .env_remove("KUBECONFIG")
                .env("KUBECACHEDIR", cache)
                .output()
                .await
                .expect("run sh")
        }
    };
    let typed = shell(format!("{program} get nodes")).await;
    let nodes = String::from_utf8_lossy(&typed.stdout);
    assert!(
        typed.status.success() && nodes.contains("worker-a"),
        "{typed:?}"
    );
    // What the demo suggests next, as printed (kubectl sends these objects as protobuf).
    let suggested: Vec<&str> = transcript
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("kubectl create ") || l.starts_with("kubectl get service "))
        .collect();
    assert_eq!(suggested.len(), 3, "{transcript:#?}");
    let typed = shell(
        suggested
            .join("\n")
            .replace("kubectl ", &format!("{program} ")),
    )
    .await;
    let printed = String::from_utf8_lossy(&typed.stdout);
    assert!(
        typed.status.success()
            && printed.contains("service/hello created")
            && printed.contains("deployment.apps/hello created"),
        "{typed:?}"
    );
    let ingress = eventually(
        "the manager gives hello a load balancer",
        Duration::from_secs(30),
        || {
            let shell = &shell;
            let program = &program;
            async move {
                let typed = shell(format!(
                    "{program} get service hello -o jsonpath={{.status.loadBalancer.ingress[0].ip}}"
                ))
                .await;
                let ip = String::from_utf8_lossy(&typed.stdout).trim().to_string();
                (!ip.is_empty()).then_some(ip)
            }
        },
    )
    .await;
    assert!(ingress.parse::<std::net::IpAddr>().is_ok(), "{ingress}");
    // No pods, and kubectl says why.
    let pods = kube_emulator::kubectl(cache.path(), &["--kubeconfig", kubeconfig, "get", "pods"])
        .await
        .expect_err("the emulator serves no pods");
    assert!(
        pods.contains(r#"the server doesn't have a resource type "pods""#),
        "{pods}"
    );

    interrupt(&demo);
    let exit = tokio::time::timeout(Duration::from_secs(30), demo.wait())
        .await
        .expect("the demo stops on Ctrl-C")
        .expect("demo exit status");
    assert!(exit.success(), "{exit:?}");
}

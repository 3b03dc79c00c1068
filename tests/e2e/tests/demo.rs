//! `make demo`: the `kubectl` commands the demo prints work as printed, with the real kubectl,
//! against the cluster it runs, and so do the other commands someone watching it would type.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

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

#[tokio::test]
async fn the_kubectl_commands_the_demo_prints_show_its_nodes_and_load_balancers() {
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
        ["api", "web"],
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
                for node in ["worker-a", "worker-b", "worker-c"] {
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
            _ => panic!("a printed command this test does not know: {command:?}"),
        }
    }
    assert!(
        commands.iter().any(|c| c[3..5] == ["get", "nodes"]),
        "{commands:?}"
    );

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

    interrupt(&demo);
    let exit = tokio::time::timeout(Duration::from_secs(30), demo.wait())
        .await
        .expect("the demo stops on Ctrl-C")
        .expect("demo exit status");
    assert!(exit.success(), "{exit:?}");
}

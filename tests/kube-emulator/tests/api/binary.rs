//! The `kube-emulator` binary: writes a kubeconfig kube-rs reads, serves
//! it, and stops cleanly on SIGTERM.

use std::process::Stdio;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::harness::within;

#[tokio::test]
async fn the_binary_writes_a_kubeconfig_and_serves_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-emulator"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = within(10, BufReader::new(stdout).lines().next_line())
        .await
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("kube-emulator listening on ")
        .expect("announces its address");
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");

    let config = Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    let client = Client::try_from(config).unwrap();
    let namespaces = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    let names: Vec<String> = namespaces
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exit = within(10, child.wait()).await.unwrap();
    assert!(exit.success(), "{exit:?}");
}

//! The `kube-emulator` binary: writes a kubeconfig kube-rs reads, serves
//! it over HTTPS, and stops cleanly on SIGTERM.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::harness::{http_client, http_client_trusting, spawn_binary, start, within};

#[tokio::test]
async fn the_binary_writes_a_kubeconfig_and_serves_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut binary = spawn_binary(&kubeconfig).await;
    assert!(
        binary.url.starts_with("https://127.0.0.1:"),
        "{}",
        binary.url
    );

    let config = Kubeconfig::read_from(&kubeconfig).unwrap();
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    assert!(
        cluster.certificate_authority_data.is_some(),
        "the kubeconfig carries the emulator's CA"
    );
    assert_eq!(cluster.insecure_skip_tls_verify, None);
    let config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        binary.url
    );
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

    let pid = binary.child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exit = within(10, binary.child.wait()).await.unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test]
async fn clients_without_this_emulators_ca_are_refused() {
    let cluster = start().await;
    // Every start makes a new CA: another run's kubeconfig does not fit.
    let other = start().await;
    let stranger = http_client_trusting(other.emulator.ca_certificate_pem());
    let err = stranger
        .get(format!("{}/version", cluster.emulator.url()))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err:?}");
    let plain = cluster.emulator.url().replacen("https://", "http://", 1);
    let answered = http_client(&cluster.emulator)
        .get(format!("{plain}/version"))
        .send()
        .await;
    assert!(
        answered.is_err_and(|e| !e.is_status()),
        "plain HTTP is not served"
    );
}

//! The chart's pod without a kubelet: the container of a Deployment or DaemonSet, as the
//! cluster stores it, run as the `wasm-ccm` binary with its arguments, as the pod's
//! ServiceAccount, with its volumes as directories.
//!
//! What a kubelet would do, done by hand:
//! - an `emptyDir` is a fresh directory, a `secret` volume the Secret's items written as files
//!   (read through the cluster, as the kubelet reads them);
//! - every argument naming a path under a mount is pointed at that directory;
//! - the in-cluster config becomes a kubeconfig holding a token for the pod's
//!   ServiceAccount from the TokenRequest API, as the projected token volume holds one, so
//!   every request is made, and authorised, as that ServiceAccount;
//! - the secure port becomes a free loopback one (tests bind only 127.0.0.1);
//! - the readiness probe is asked over HTTPS on the probe's path.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use serde_json::Value;

use crate::https;

/// The manager started as one pod of a Deployment or DaemonSet.
pub struct Pod {
    pub name: String,
    child: Child,
    port: u16,
    readiness_path: String,
    dir: tempfile::TempDir,
}

impl Pod {
    /// Start a pod `name` of `workload` (a Deployment or DaemonSet as the cluster stores
    /// it), against the API server of `kubeconfig` (the admin's, used only for what the
    /// kubelet and the token issuer do), with its ServiceAccount's identity. `client` is that
    /// admin's client.
    pub async fn start(
        workload: &Value,
        name: &str,
        kubeconfig: &Kubeconfig,
        client: &kube::Client,
    ) -> Pod {
        let namespace = workload["metadata"]["namespace"]
            .as_str()
            .expect("the workload's namespace");
        let spec = &workload["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        let dir = tempfile::tempdir().expect("pod dir");

        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let volume_name = mount["name"].as_str().expect("a mount's volume name");
            let volume = spec["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == volume_name)
                .unwrap_or_else(|| panic!("volume {volume_name} is mounted but not declared"));
            let local = dir.path().join("volumes").join(volume_name);
            std::fs::create_dir_all(&local).expect("volume dir");
            fill_volume(volume, &local, namespace, client).await;
            let mount_path = mount["mountPath"].as_str().expect("a mountPath");
            mounts.push((mount_path.to_string(), local));
        }
        // The longest mount path first, so a nested mount wins.
        mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));

        let account = spec["serviceAccountName"]
            .as_str()
            .expect("the pod's serviceAccountName");
        let kubeconfig_path = dir.path().join("kubeconfig");
        write_service_account_kubeconfig(kubeconfig, client, namespace, account, &kubeconfig_path)
            .await;

        let port = https::free_port();
        let mut args: Vec<String> = container["args"]
            .as_array()
            .expect("the container's args")
            .iter()
            .map(|arg| {
                let arg = arg.as_str().expect("a string argument");
                local_arg(arg, &mounts, port)
            })
            .collect();
        args.push("--bind-address=127.0.0.1".into());
        args.push(format!("--kubeconfig={}", kubeconfig_path.display()));

        let log = std::fs::File::create(dir.path().join("log")).expect("log file");
        let child = crate::wasm_ccm_command(&crate::wasm_ccm_binary())
            .args(&args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start wasm-ccm");
        let readiness_path = container["readinessProbe"]["httpGet"]["path"]
            .as_str()
            .expect("a readiness probe path")
            .to_string();
        Pod {
            name: name.to_string(),
            child,
            port,
            readiness_path,
            dir,
        }
    }

    /// Wait until the readiness probe succeeds; panics with the pod's log after a minute.
    pub async fn ready(&self) {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            if let Ok((200, _)) = https::get(addr, &self.readiness_path).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "{} not ready ({}) after a minute; its log:\n{}",
            self.name,
            self.readiness_path,
            self.log()
        );
    }

    /// Where its secure port listens (the probes' port, moved to loopback).
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Still the process it was started as: it neither exited nor was restarted.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait on the pod").is_none()
    }

    /// Stop it as the kubelet stops a deleted pod's container: SIGTERM, then wait (up to the
    /// default 30 s grace period). How it exited.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        crate::terminate(&mut self.child, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("{} still running 30 s after SIGTERM", self.name))
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).expect("the pod's log")
    }
}

impl Drop for Pod {
    /// Kill the process; when a test is failing, print the warnings and errors it logged (a
    /// request the API server refused shows there).
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
            let problems: Vec<&str> = log
                .lines()
                .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
                .collect();
            let last = &problems[problems.len().saturating_sub(30)..];
            eprintln!(
                "--- {}: its last warnings and errors ---\n{}",
                self.name,
                last.join("\n")
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Make `local` hold what the kubelet would mount for `volume`.
async fn fill_volume(volume: &Value, local: &Path, namespace: &str, client: &kube::Client) {
    if volume.get("emptyDir").is_some() {
        return;
    }
    let Some(source) = volume.get("secret") else {
        panic!("the pod has a volume kind the tests cannot mount: {volume}");
    };
    let name = source["secretName"].as_str().expect("secretName");
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap_or_else(|error| panic!("the kubelet cannot read Secret {name}: {error}"));
    let data = secret.data.unwrap_or_default();
    let items: Vec<(String, String)> = match source["items"].as_array() {
        Some(items) => items
            .iter()
            .map(|item| {
                let key = item["key"].as_str().expect("an item's key");
                (key.to_string(), item["path"].as_str().expect("path").into())
            })
            .collect(),
        None => data.keys().map(|key| (key.clone(), key.clone())).collect(),
    };
    for (key, path) in items {
        let ByteString(bytes) = data
            .get(&key)
            .unwrap_or_else(|| panic!("Secret {name} has no key {key}"));
        std::fs::write(local.join(path), bytes).expect("write a secret item");
    }
}

/// `arg` with a path under a mount pointed at the mount's directory, and the secure port
/// replaced by `port`.
fn local_arg(arg: &str, mounts: &[(String, PathBuf)], port: u16) -> String {
    let Some((flag, value)) = arg.split_once('=') else {
        return arg.to_string();
    };
    if flag == "--secure-port" {
        return format!("{flag}={port}");
    }
    for (mount_path, local) in mounts {
        if let Some(rest) = value.strip_prefix(mount_path.as_str()) {
            return format!("{flag}={}{rest}", local.display());
        }
    }
    arg.to_string()
}

/// A fresh token (an hour long) of the ServiceAccount `namespace`/`account` from the
/// TokenRequest API, as a projected token volume holds one; `client` is the admin's.
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    account: &str,
) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|error| panic!("a token for ServiceAccount {account}: {error}"));
    issued.status.expect("a token").token
}

/// A kubeconfig for the admin's cluster holding a fresh token of `account` instead, with
/// the pod's namespace as its default.
async fn write_service_account_kubeconfig(
    admin: &Kubeconfig,
    client: &kube::Client,
    namespace: &str,
    account: &str,
    path: &Path,
) {
    let token = service_account_token(client, namespace, account).await;
    let mut kubeconfig = admin.clone();
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.token = Some(token.clone().into());
        }
    }
    // In a pod the client's default namespace is the pod's (the token volume's `namespace`).
    for context in &mut kubeconfig.contexts {
        if let Some(context) = context.context.as_mut() {
            context.namespace = Some(namespace.to_string());
        }
    }
    let json = serde_json::to_string(&kubeconfig).expect("a kubeconfig serializes");
    std::fs::write(path, json).expect("write the pod's kubeconfig");
}

//! Shared set-up for the end-to-end tests and benchmarks: a cloud simulator on loopback, a
//! bearer token in a file, providers loaded from the guests built from source, the
//! `wasm-ccm` binary, a whole cluster for controller tests ([`testbed`]), an HTTPS
//! client for the manager's secure port ([`https`]) and a real OCI registry with ORAS as an
//! independent client of it ([`registry`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cloud_sim::{CloudSim, SimOptions};
use wasm_ccm_host::egress::{CredentialRule, EgressConfig, EgressGate, HostPattern};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderLoadError, ProviderSource};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::Artifact;

pub mod https;
pub mod registry;
pub mod testbed;

/// The token every test cloud requires; tests assert it never reaches a provider.
pub const TOKEN: &str = "sim-token-6f1d2c9a-never-visible-to-guests";

/// A cloud simulator and the token file that grants access to it.
pub struct Cloud {
    pub sim: CloudSim,
    pub token_file: tempfile::NamedTempFile,
}

impl Cloud {
    /// A simulator on 127.0.0.1 with quick load-balancer provisioning.
    pub async fn start() -> Cloud {
        let options = SimOptions {
            token: TOKEN.into(),
            lb_provision: Duration::from_millis(300),
            ..SimOptions::default()
        };
        let sim = CloudSim::start(loopback(), options)
            .await
            .expect("cloud-sim starts");
        let token_file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(token_file.path(), format!("{TOKEN}\n")).expect("write token");
        Cloud { sim, token_file }
    }

    /// `http://127.0.0.1:PORT` as an allow-list entry.
    pub fn grant(&self) -> HostPattern {
        self.sim.url().parse().expect("sim URL is a host pattern")
    }

    /// Inject the token as a bearer credential into requests to the simulator.
    pub fn credential(&self) -> CredentialRule {
        format!(
            "{}=bearer:file:{}",
            self.sim.url(),
            self.token_file.path().display()
        )
        .parse()
        .expect("credential rule")
    }

    /// Egress that reaches the simulator, with its credential.
    pub fn egress(&self) -> EgressConfig {
        EgressConfig {
            allow: vec![self.grant()],
            credentials: vec![self.credential()],
            ..EgressConfig::default()
        }
    }

    /// simcloud's cloud config pointing at this simulator.
    pub fn simcloud_config(&self) -> Vec<u8> {
        serde_json::json!({ "api_url": self.sim.url() })
            .to_string()
            .into_bytes()
    }
}

/// `127.0.0.1:0`.
pub fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A sandbox with test-friendly limits.
pub fn sandbox(config: SandboxConfig) -> Sandbox {
    Sandbox::new(config, Arc::new(Metrics::default())).expect("sandbox")
}

/// Load the guest at `path` with `egress` and `cloud_config`.
pub async fn load(
    sandbox: &Sandbox,
    path: &str,
    egress: EgressConfig,
    cloud_config: Option<Vec<u8>>,
) -> Result<Provider, ProviderLoadError> {
    let metrics = Arc::new(Metrics::default());
    let gate = EgressGate::new(egress, metrics.clone());
    let source = ProviderSource {
        artifact: Artifact::from_bytes(path, guest_builds::read(path).into()),
        cloud_config,
    };
    Provider::load(sandbox, gate, source, metrics).await
}

/// simcloud loaded against `cloud`.
pub async fn simcloud(cloud: &Cloud) -> Provider {
    let sandbox = sandbox(SandboxConfig::default());
    load(
        &sandbox,
        guest_builds::SIMCLOUD,
        cloud.egress(),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("simcloud loads")
}

/// The `wasm-ccm` binary, built on first use (once per test process) with
/// `cargo build -p wasm-ccm --bin wasm-ccm` in the workspace root.
///
/// `CARGO_BIN_EXE_wasm-ccm` exists only for the tests of the crate that owns the binary, so
/// the e2e tests build it themselves. The path is the `executable` cargo reports, so
/// `CARGO_TARGET_DIR` and `build.target-dir` are respected. Blocking.
pub fn wasm_ccm_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_wasm_ccm(false)).clone()
}

/// As [`wasm_ccm_binary`], but an optimised build (for benchmarks).
pub fn wasm_ccm_release_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| build_wasm_ccm(true)).clone()
}

fn build_wasm_ccm(release: bool) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(&cargo);
    // Cargo runs this test with the e2e package's own variables (`CARGO_MANIFEST_DIR`,
    // `CARGO_PKG_*`…). Build scripts that track them (ring's does) would see a change and
    // rebuild half the tree on every run, then again on the next plain `cargo build`.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let per_package = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&&*name);
        if per_package {
            build.env_remove(&*name);
        }
    }
    let output = build
        .current_dir(&root)
        .args(["build", "-p", "wasm-ccm", "--bin", "wasm-ccm"])
        .args(release.then_some("--release"))
        .arg("--message-format=json-render-diagnostics")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", cargo.to_string_lossy()));
    assert!(
        output.status.success(),
        "cargo build -p wasm-ccm failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let reported = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "wasm-ccm")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from));
    let binary = reported.unwrap_or_else(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(|dir| root.join(dir))
            .unwrap_or_else(|| root.join("target"));
        target
            .join(if release { "release" } else { "debug" })
            .join(format!("wasm-ccm{}", std::env::consts::EXE_SUFFIX))
    });
    assert!(
        binary.is_file(),
        "no wasm-ccm binary at {}",
        binary.display()
    );
    binary
}

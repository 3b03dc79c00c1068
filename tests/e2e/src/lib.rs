//! Shared set-up for the end-to-end tests and benchmarks: a cloud simulator on loopback, a
//! bearer token in a file, and providers loaded from the guests built from source.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{CloudSim, SimOptions};
use wasm_ccm::egress::{CredentialRule, EgressConfig, EgressGate, HostPattern};
use wasm_ccm::metrics::Metrics;
use wasm_ccm::provider::{Provider, ProviderLoadError, ProviderSource};
use wasm_ccm::sandbox::{Sandbox, SandboxConfig};

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
        wasm: guest_builds::read(path).into(),
        origin: path.to_string(),
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

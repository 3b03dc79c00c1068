//! Shared set-up for the end-to-end tests and benchmarks: a cloud simulator on loopback, a
//! bearer token in a file, providers loaded from the guests built from source (through one
//! compile cache for every test, [`sandbox_config`]), the `wasm-ccm` binary, a whole cluster
//! for controller tests ([`testbed`]), an HTTPS client for the manager's secure port
//! ([`https`]), a real OCI registry with ORAS as an
//! independent client of it ([`registry`]), moto as an independent AWS implementation
//! ([`moto`]) and a cluster's AWS side seeded in it ([`aws`]), a `CloudProvider` resource
//! for the testbed ([`cloud_provider`]), the Helm chart rendered by `helm template`
//! ([`chart`]), and its pod run as the `wasm-ccm` binary without a kubelet ([`pod`]), and
//! the scale benchmark ([`scale`]), and the docs' pages as tests read them ([`docs`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{CloudSim, SimOptions};
use wasm_ccm_host::answers::AnswerChecks;
use wasm_ccm_host::egress::{CredentialRule, EgressConfig, EgressGate, HostPattern};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderLoadError, ProviderSource};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::Artifact;

pub mod aws;
pub mod chart;
pub mod cloud_provider;
pub mod docs;
pub mod https;
pub mod moto;
pub mod pod;
pub mod registry;
pub mod scale;
pub mod simcloud_fixtures;
pub mod testbed;

/// The token every test cloud requires; tests assert it never reaches a provider.
pub const TOKEN: &str = "sim-token-6f1d2c9a-never-visible-to-guests";
/// The token of [`Cloud::second`].
pub const SECOND_TOKEN: &str = "edge-token-0b7e4d31-never-visible-to-guests";

/// A cloud simulator and the token file that grants access to it.
pub struct Cloud {
    pub sim: CloudSim,
    pub token_file: tempfile::NamedTempFile,
}

impl Cloud {
    /// A simulator on 127.0.0.1 with quick load-balancer provisioning.
    pub async fn start() -> Cloud {
        Cloud::provisioning_for(Duration::from_millis(300)).await
    }

    /// A simulator on 127.0.0.1 whose new load balancers stay `provisioning` for `time`.
    pub async fn provisioning_for(time: Duration) -> Cloud {
        Cloud::start_with(SimOptions {
            token: TOKEN.into(),
            lb_provision: time,
            ..SimOptions::default()
        })
        .await
    }

    /// A second cloud beside [`Cloud::start`]'s, as another provider's: its own token
    /// ([`SECOND_TOKEN`]), region, and private and load-balancer address ranges.
    pub async fn second() -> Cloud {
        Cloud::start_with(SimOptions {
            token: SECOND_TOKEN.into(),
            lb_provision: Duration::from_millis(300),
            region: "edge-west-1".into(),
            private_ip_base: std::net::Ipv4Addr::new(10, 1, 0, 0),
            lb_ip_base: std::net::Ipv4Addr::new(203, 0, 113, 0),
        })
        .await
    }

    /// A simulator on 127.0.0.1 with `options`, its token written to a file.
    pub async fn start_with(options: SimOptions) -> Cloud {
        let token = options.token.clone();
        let sim = CloudSim::start(loopback(), options)
            .await
            .expect("cloud-sim starts");
        let token_file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(token_file.path(), format!("{token}\n")).expect("write token");
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
    // As `provider call` loads: answers as the provider gave them (the hostile guest's
    // reports ride in answers no manager would write).
    Provider::load(sandbox, gate, source, metrics)
        .await
        .map(|provider| provider.with_checks(Arc::new(AnswerChecks::unenforced())))
}

/// The hostile guest (`tests/guests/hostile`) with `config` and `egress`, counting its calls
/// and egress into the returned metrics.
pub async fn hostile_counted(
    config: SandboxConfig,
    egress: EgressConfig,
) -> (Provider, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let gate = EgressGate::new(egress, metrics.clone());
    let path = guest_builds::HOSTILE;
    let source = ProviderSource {
        artifact: Artifact::from_bytes(path, guest_builds::read(path).into()),
        cloud_config: None,
    };
    let provider = Provider::load(&sandbox(config), gate, source, metrics.clone())
        .await
        .expect("hostile guest loads")
        .with_checks(Arc::new(AnswerChecks::unenforced()));
    (provider, metrics)
}

/// Resident memory of this process, which hosts the sandbox, from /proc/self/status. It is
/// the whole process's, so a test measuring it must run alone in its process: `make test`
/// (cargo-nextest) runs every test in a process of its own; under plain `cargo test`, run such
/// a test by its name, or with `--test-threads=1`.
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

/// Stop `child` as a clean shutdown is asked for (SIGTERM, as the kubelet and Ctrl-C do) and
/// wait up to `grace` for it to exit: how it exited, or `None` if it still runs (or the
/// signal could not be sent).
pub async fn terminate(
    child: &mut std::process::Child,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(status);
    }
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .is_ok_and(|status| status.success());
    let deadline = std::time::Instant::now() + grace;
    while sent && std::time::Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// `target/<profile>/`, where the running test or benchmark was built.
fn profile_dir() -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    test.parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps")
        .to_path_buf()
}

/// The sandbox settings tests run providers with: the defaults, and one compile cache for
/// every test of every run (the `compiled/` directory of [`shared_cache_dir`], the host's own
/// cache, keyed by the component's digest and the engine's settings), so a guest is
/// compiled once per engine configuration instead of once per test: compiling was half the
/// CPU time of the controller tests. A test about compiling or the cache sets a `cache_dir`
/// of its own; the benchmarks keep the plain defaults, so what they time includes compiling.
pub fn sandbox_config() -> SandboxConfig {
    SandboxConfig {
        cache_dir: Some(shared_cache_dir().join("compiled")),
        ..SandboxConfig::default()
    }
}

/// The cache of the `wasm-ccm` processes tests run (`target/<profile>/test-cache/wasm-ccm`,
/// their default one: see [`wasm_ccm_command`]): its compiled code is [`sandbox_config`]'s,
/// so a TypeScript or Python component (10-25 s to compile) is compiled once per test run,
/// whichever test or process needs it first (the cache locks an entry while it is compiled).
pub fn shared_cache_dir() -> PathBuf {
    test_cache_home().join("wasm-ccm")
}

/// The `XDG_CACHE_HOME` of the `wasm-ccm` processes tests run.
fn test_cache_home() -> PathBuf {
    profile_dir().join("test-cache")
}

/// `binary` (a `wasm-ccm`) as tests run it: its default cache is [`shared_cache_dir`]
/// (`XDG_CACHE_HOME`), never the user's own `~/.cache`. A test about downloading or
/// compiling gives a `--cache-dir` of its own, or `--no-cache`.
pub fn wasm_ccm_command(binary: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(binary);
    command.env("XDG_CACHE_HOME", test_cache_home());
    command
}

/// simcloud loaded against `cloud`.
pub async fn simcloud(cloud: &Cloud) -> Provider {
    let sandbox = sandbox(sandbox_config());
    load(
        &sandbox,
        guest_builds::SIMCLOUD,
        cloud.egress(),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("simcloud loads")
}

/// The JSON report of the hostile guest (`tests/guests/hostile`) for `command`: the node
/// named `command` is its argument, the `report` label of the metadata its answer.
pub async fn hostile_report(provider: &Provider, command: &str) -> serde_json::Value {
    let node = wasm_ccm_host::contract::Node {
        name: command.to_string(),
        ..Default::default()
    };
    let metadata = provider
        .instance_metadata(&node)
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"));
    let (_, report) = metadata
        .additional_labels
        .iter()
        .find(|(key, _)| key == "report")
        .expect("hostile guest reports");
    serde_json::from_str(report).expect("report is JSON")
}

/// The `wasm-ccm` binary under test: `runtime/src/main.rs`, built by the same `cargo test` (or
/// `cargo bench`) that runs the tests, as this package's `wasm-ccm-under-test` binary, in the
/// profile of the running test. (Building it with a nested `cargo build -p wasm-ccm` would
/// resolve other features than the workspace build and recompile about forty crates.)
///
/// Cargo builds a package's binaries into `target/<profile>/` before it runs the package's
/// integration tests and benchmarks, which run from `target/<profile>/deps/`.
pub fn wasm_ccm_binary() -> PathBuf {
    built_binary(
        "wasm-ccm-under-test",
        "run the tests with cargo test (or cargo bench)",
    )
}

/// The `cloud-sim` binary, for tests that type a documented `cloud-sim` command: the
/// workspace test build (`make test`) builds it, for the simulator's own integration tests.
pub fn cloud_sim_binary() -> PathBuf {
    built_binary(
        "cloud-sim",
        "run the tests of the whole workspace (make test)",
    )
}

/// The API emulator's binary, as a reader runs it (`target/<profile>/kube-emulator`): the
/// workspace test build builds it.
pub fn kube_emulator_binary() -> PathBuf {
    built_binary(
        "kube-emulator",
        "run the tests of the whole workspace (make test)",
    )
}

/// `target/<profile>/NAME`, which must have been built; `remedy` says how when it was not.
fn built_binary(name: &str, remedy: &str) -> PathBuf {
    let binary = profile_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "no {name} binary at {}: {remedy}",
        binary.display()
    );
    binary
}

/// The venv of the Python tools the tests run (tests/python-tools.txt), under the workspace
/// root; keep in step with `PYTHON_TOOLS` in tests/install-test-tools.sh.
const PYTHON_TOOLS: &str = "target/test-tools/python";

/// `bin/<program>` of the Python tools' venv (`python`, `moto_server`, `kubernetes-validate`),
/// or a failure naming what is missing and what installs it.
pub fn python_tool(program: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(PYTHON_TOOLS)
        .join("bin")
        .join(program);
    assert!(
        path.is_file(),
        "{program} is not installed ({} is missing): `make test` (or `make setup`, \
         tests/install-test-tools.sh) installs the tools of tests/python-tools.txt",
        path.display()
    );
    path
}

/// npm's cache of the TypeScript build tools (`guest-sdk-js/package-lock.json`), from which
/// a test runs a reader's `npm ci` offline; keep in step with `JS_TOOLS` in
/// tests/install-test-tools.sh.
const NPM_CACHE: &str = "target/test-tools/js/npm-cache";
/// componentize-py's wheel, from which a test runs a reader's `pip install -r
/// requirements.txt` offline; keep in step with `PYTHON_WHEELS` in tests/install-test-tools.sh.
const PYTHON_WHEELS: &str = "target/test-tools/python-wheels";

/// The environment that makes a reader's `npm ci` (`npm_config_cache`, `npm_config_offline`)
/// and `pip install` (`PIP_NO_INDEX`, `PIP_FIND_LINKS`) take the packages `make setup`
/// fetched, with no network; a failure naming what is missing and what installs it.
pub fn offline_package_env() -> Vec<(&'static str, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for dir in [NPM_CACHE, PYTHON_WHEELS] {
        assert!(
            root.join(dir).is_dir(),
            "{dir} is missing: `make test` (or `make setup`, tests/install-test-tools.sh) \
             fetches the packages the authors' pages install"
        );
    }
    vec![
        ("npm_config_cache", root.join(NPM_CACHE)),
        ("npm_config_offline", PathBuf::from("true")),
        ("PIP_NO_INDEX", PathBuf::from("1")),
        ("PIP_FIND_LINKS", root.join(PYTHON_WHEELS)),
    ]
}

/// `sha256:<hex>` of `bytes`: a digest as OCI and the CloudProvider's status write it.
pub fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

//! A whole cluster on loopback for controller tests: the Kubernetes API emulator, the cloud
//! simulator, and the manager running simcloud against both, reached only through a
//! kubeconfig file and the simulator's URL, as in production.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cloud_sim::NewInstance;
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Service,
    ServicePort, ServiceSpec, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_emulator::{Emulator, EmulatorOptions};
use tokio_util::sync::CancellationToken;
use wasm_ccm::cluster::ClusterSettings;
use wasm_ccm::controllers::{ControllerSelection, ControllerSettings};
use wasm_ccm::manager::{self, ManagerConfig, ProviderMode, ProviderSettings};
use wasm_ccm::serving::{AuthConfig, ServingConfig, TlsSource};
use wasm_ccm_host::source::{DistributionSettings, ProviderRef};

use crate::{Cloud, loopback};

pub const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// The taint the API server's admission puts on every new Node.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The version the kubelets of [`Testbed::kubelet_node`] report.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// The emulator, the simulator, a client for the tests, and files the manager reads.
pub struct Testbed {
    pub cloud: Cloud,
    pub emulator: Emulator,
    pub client: kube::Client,
    dir: tempfile::TempDir,
}

/// A manager running in this process.
pub struct RunningManager {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), manager::ManagerError>>,
}

impl RunningManager {
    /// Stop it cleanly (as SIGTERM does) and return how it ended.
    pub async fn stop(self) -> Result<(), manager::ManagerError> {
        self.stop.cancel();
        self.task.await.expect("manager task")
    }

    /// Kill it: no clean shutdown, as a crashed process.
    pub fn kill(self) {
        self.task.abort();
    }
}

impl Testbed {
    pub async fn start() -> Testbed {
        Testbed::start_with(EmulatorOptions::default()).await
    }

    /// As [`Testbed::start`], with an emulator configured by `options`.
    pub async fn start_with(options: EmulatorOptions) -> Testbed {
        let cloud = Cloud::start().await;
        let emulator = Emulator::start(loopback(), options)
            .await
            .expect("emulator starts");
        let config =
            kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
                .await
                .expect("kubeconfig");
        let client = kube::Client::try_from(config).expect("client");
        let dir = tempfile::tempdir().expect("temp dir");
        emulator
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("write kubeconfig");
        std::fs::write(dir.path().join("cloud.json"), cloud.simcloud_config()).expect("config");
        Testbed {
            cloud,
            emulator,
            client,
            dir,
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn cloud_config(&self) -> PathBuf {
        self.dir.path().join("cloud.json")
    }

    /// The `wasm-ccm` flags that run simcloud against this testbed: provider, cloud config,
    /// kubeconfig, and the simulator granted with its token.
    pub fn provider_flags(&self) -> Vec<String> {
        let sim = self.cloud.sim.url();
        vec![
            format!("--provider=file://{}", guest_builds::SIMCLOUD),
            "--cloud-provider=simcloud".into(),
            format!("--cloud-config={}", self.cloud_config().display()),
            format!("--kubeconfig={}", self.kubeconfig().display()),
            format!("--allow={sim}"),
            format!(
                "--credential={sim}=bearer:file:{}",
                self.cloud.token_file.path().display()
            ),
        ]
    }

    /// A configuration for simcloud against this testbed: every controller, no leader
    /// election, no serving, and short periods so tests are quick.
    pub fn config(&self) -> ManagerConfig {
        ManagerConfig {
            provider: self.provider(guest_builds::SIMCLOUD, "simcloud"),
            distribution: DistributionSettings::default(),
            egress: self.cloud.egress(),
            sandbox: crate::sandbox_config(),
            cluster: ClusterSettings {
                kubeconfig: Some(self.kubeconfig()),
                qps: 200.0,
                burst: 400,
                use_service_account_credentials: false,
            },
            controllers: ControllerSelection::default(),
            settings: ControllerSettings {
                cluster_name: "kubernetes".into(),
                cluster_cidrs: Some("10.244.0.0/16".parse().expect("cidr")),
                service_cidrs: None,
                load_balancer_ip_ranges: None,
                load_balancer_ip_sharing: false,
                node_address_dns_suffixes: Vec::new(),
                configure_cloud_routes: true,
                route_reconciliation_period: Duration::from_millis(500),
                node_monitor_period: Duration::from_millis(300),
                node_status_update_frequency: Duration::from_secs(300),
                concurrent_node_syncs: 2,
                concurrent_node_status_updates: 0,
                concurrent_service_syncs: 2,
                load_balancer_drift_period: Duration::ZERO,
                identity: "test-manager".into(),
                event_queue_length: wasm_ccm::controllers::QUEUE_LENGTH,
                event_retry_interval: wasm_ccm::controllers::RETRY_INTERVAL,
            },
            leader_election: None,
            serving: ServingConfig {
                bind_address: [127, 0, 0, 1].into(),
                port: 0,
                tls: TlsSource::SelfSigned,
                auth: AuthConfig::default(),
            },
        }
    }

    /// The component at `wasm`, reporting `name`, with this testbed's cloud config, as flags
    /// name it.
    pub fn provider(&self, wasm: &str, name: &str) -> ProviderMode {
        Testbed::provider_configured(wasm, name, self.cloud_config())
    }

    /// The component at `wasm`, reporting `name`, with the cloud config file at
    /// `cloud_config`, as flags name it: a provider for another cloud than the simulator.
    pub fn provider_configured(wasm: &str, name: &str, cloud_config: PathBuf) -> ProviderMode {
        ProviderMode::Flags(ProviderSettings {
            reference: ProviderRef::File(wasm.into()),
            name: name.into(),
            cloud_config: Some(cloud_config),
            allow_untagged_cloud: false,
        })
    }

    /// Run a manager with `config` in this process.
    pub fn run(&self, config: ManagerConfig) -> RunningManager {
        let stop = CancellationToken::new();
        let task = tokio::spawn(manager::run(config, stop.clone()));
        RunningManager { stop, task }
    }

    /// An instance in the cloud named `name` in `zone`; returns its id.
    pub fn add_instance(&self, name: &str, zone: &str) -> String {
        self.cloud
            .sim
            .state()
            .add_instance(NewInstance {
                name: name.into(),
                instance_type: "sim.small".into(),
                zone: zone.into(),
                private_ip: None,
                public_ip: None,
                public_ipv6: None,
                hostname: None,
            })
            .id
    }

    /// A Node as a kubelet with `--cloud-provider=external` registers and reports it:
    /// tainted uninitialized, no providerID or addresses, Ready, with its system info and
    /// capacity. The API server adds `node.kubernetes.io/not-ready:NoSchedule` on
    /// creation; a kube-controller-manager would remove it once the node is Ready, but
    /// none runs here, so it stays next to the taints the controllers handle.
    pub fn kubelet_node(name: &str) -> Node {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([
                    ("kubernetes.io/hostname".to_string(), name.to_string()),
                    ("kubernetes.io/os".to_string(), "linux".to_string()),
                    ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: UNINITIALIZED.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(BTreeMap::from([
                    ("cpu".to_string(), Quantity("2".into())),
                    ("memory".to_string(), Quantity("4Gi".into())),
                    ("pods".to_string(), Quantity("110".into())),
                ])),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    reason: Some("KubeletReady".into()),
                    message: Some("kubelet is posting ready status".into()),
                    last_heartbeat_time: Some(now.clone()),
                    last_transition_time: Some(now),
                }]),
                node_info: Some(NodeSystemInfo {
                    architecture: "amd64".into(),
                    boot_id: format!("boot-{name}"),
                    container_runtime_version: "containerd://2.0.0".into(),
                    kernel_version: "6.1.0".into(),
                    kube_proxy_version: String::new(),
                    kubelet_version: KUBELET_VERSION.into(),
                    machine_id: format!("machine-{name}"),
                    operating_system: "linux".into(),
                    os_image: "Debian GNU/Linux 12 (bookworm)".into(),
                    system_uuid: format!("uuid-{name}"),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    pub async fn create_node(&self, node: &Node) -> Node {
        Api::<Node>::all(self.client.clone())
            .create(&PostParams::default(), node)
            .await
            .expect("create node")
    }

    /// An instance and its kubelet-registered node.
    pub async fn add_node(&self, name: &str, zone: &str) -> String {
        let id = self.add_instance(name, zone);
        self.create_node(&Self::kubelet_node(name)).await;
        id
    }

    pub async fn node(&self, name: &str) -> Option<Node> {
        Api::<Node>::all(self.client.clone())
            .get_opt(name)
            .await
            .expect("get node")
    }

    /// A `type: LoadBalancer` Service with one TCP port.
    pub fn lb_service(name: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![ServicePort {
                    name: Some("http".into()),
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn services(&self) -> Api<Service> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub async fn service(&self, name: &str) -> Option<Service> {
        self.services().get_opt(name).await.expect("get service")
    }

    /// The emulator's request counts once every `(client, verb, resource)` of `expected` has
    /// been seen at least once (waiting up to `timeout`); `what` names the wait.
    pub async fn requests_seen(
        &self,
        what: &str,
        timeout: Duration,
        expected: &[(&str, &str, &str)],
    ) -> kube_emulator::RequestCounts {
        eventually(what, timeout, || async {
            let counts = self.emulator.requests();
            let seen = expected
                .iter()
                .all(|(client, verb, resource)| counts.client(client).get(verb, resource) > 0);
            seen.then_some(counts)
        })
        .await
    }

    /// The events about the object named `name`, oldest first.
    pub async fn events_about(&self, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        let mut list: Vec<_> = events
            .list(&Default::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        list
    }

    /// `reason`s of the events about the object named `name`, oldest first.
    pub async fn event_reasons(&self, name: &str) -> Vec<String> {
        let events = self.events_about(name).await;
        events.into_iter().filter_map(|e| e.reason).collect()
    }
}

/// Poll `check` until it returns `Some`, failing with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether `node` still has the uninitialized taint.
pub fn is_uninitialized(node: &Node) -> bool {
    has_taint(node, UNINITIALIZED)
}

/// Whether `node` has a taint with `key`.
pub fn has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The first ingress IP in a Service's load-balancer status.
pub fn ingress_ip(service: &Service) -> Option<String> {
    first_ingress(service)?.ip.clone()
}

/// The first ingress hostname in a Service's load-balancer status (a cloud whose load
/// balancers are reached by name, as AWS's).
pub fn ingress_hostname(service: &Service) -> Option<String> {
    first_ingress(service)?.hostname.clone()
}

fn first_ingress(service: &Service) -> Option<&LoadBalancerIngress> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()
}

/// A `wasm-ccm` process serving on `addr`; killed when dropped.
pub struct ManagerProcess {
    pub child: std::process::Child,
    pub addr: std::net::SocketAddr,
}

impl ManagerProcess {
    /// Start `binary` with `args`, serving on loopback `port`; its output is discarded
    /// except errors, which go to this process's stderr when `show_errors`.
    pub fn spawn(
        binary: &std::path::Path,
        args: &[String],
        port: u16,
        show_errors: bool,
    ) -> ManagerProcess {
        let mut command = crate::wasm_ccm_command(binary);
        command.args(args);
        ManagerProcess::spawn_command(command, port, show_errors)
    }

    /// Start `command`, a `wasm-ccm` with its arguments (and environment) set, as
    /// [`ManagerProcess::spawn`] does.
    pub fn spawn_command(
        mut command: std::process::Command,
        port: u16,
        show_errors: bool,
    ) -> ManagerProcess {
        use std::process::Stdio;
        let child = command
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(if show_errors {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("start wasm-ccm");
        ManagerProcess {
            child,
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

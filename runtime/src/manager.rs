//! Run mode: everything `wasm-ccm` does as a cloud-controller-manager, in order:
//!
//! 1. with flags: load the provider (`--provider`), `init` it with `--cloud-config`, and
//!    check it is the `--cloud-provider` the operator named;
//! 2. connect to the API server and start the shared informers (one list and watch of Nodes
//!    and of Services), so their caches fill while the Lease is sought and stay warm on a
//!    standby; serve `/healthz`, `/readyz`, `/livez` and `/metrics`;
//! 3. with `--provider-resource`: follow the `CloudProvider` ([`crate::rollout`]), reporting
//!    not-ready with the reason until a version is active;
//! 4. decide which controllers run (selected *and* supported);
//! 5. with `--leader-elect`, wait for the Lease; then run the controllers until leadership is
//!    lost or the process is asked to stop. They call the provider through a
//!    [`ProviderSlot`], which a rollout swaps under them.
//!
//! Losing the lease stops every controller at once; the informers keep watching, and the
//! manager campaigns again as a standby with its caches warm (upstream exits instead, to be
//! restarted by the kubelet). A clean shutdown releases the lease so a standby takes over
//! without waiting it out.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cluster::{self, ClientMetrics, Clients, ClusterSettings};
use crate::controllers::{
    self, Context, Controller, ControllerClients, ControllerMetrics, ControllerSelection,
    ControllerSettings, EventBroadcaster, EventMetrics, Informer, QueueMetrics,
};
use crate::leader::{LeaderElector, LeaseSettings};
use crate::rollout::ceiling::GrantCeiling;
use crate::rollout::spec::Defaults;
use crate::rollout::{self, RolloutSettings};
use crate::serving::{self, HealthChecks, Probe, ServingConfig};
use wasm_ccm_host::answers::AnswerChecks;
use wasm_ccm_host::egress::{EgressConfig, EgressGate};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Compiled, Provider, ProviderLoadError, ProviderSlot};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::{self, Distribution, DistributionSettings, ProviderRef};

/// Where the provider comes from and what it is told.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// `--provider`: where the component comes from.
    pub reference: ProviderRef,
    /// `--cloud-provider`: the name the provider must report.
    pub name: String,
    /// `--cloud-config`.
    pub cloud_config: Option<PathBuf>,
    /// `--allow-untagged-cloud`.
    pub allow_untagged_cloud: bool,
}

/// Where the provider version comes from.
#[derive(Debug, Clone)]
pub enum ProviderMode {
    /// Flags name it, for the life of the process.
    Flags(ProviderSettings),
    /// `--provider-resource NAME`: a `CloudProvider` names it, and rollouts swap it. The
    /// egress and sandbox flags are the defaults its spec overrides.
    Resource {
        /// The `CloudProvider`'s name.
        name: String,
        /// `--allow-untagged-cloud`.
        allow_untagged_cloud: bool,
        /// `--egress-grant-ceiling`: what the resource may grant; `None`, anything.
        grant_ceiling: Option<GrantCeiling>,
        /// `--tag-check-interval`: how often an unpinned tag is checked; zero, never.
        tag_check_interval: std::time::Duration,
    },
}

/// Everything run mode needs, validated.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// The component to load and the name it must report (`--provider`, `--cloud-provider`,
    /// `--cloud-config`, `--allow-untagged-cloud`), or the resource that says so.
    pub provider: ProviderMode,
    /// Registries, their credentials and the artifact cache (`--insecure-registry`,
    /// `--registry-config`, `--cache-dir`).
    pub distribution: DistributionSettings,
    /// The hosts the provider may reach and the credentials injected (`--allow`,
    /// `--credential`, `--egress-*`).
    pub egress: EgressConfig,
    /// Limits of every provider call (`--memory-limit`, `--timeout`, `--provider-cache-size`...).
    pub sandbox: SandboxConfig,
    /// How to reach the API server (`--kubeconfig`), and each client's budget
    /// (`--kube-api-qps`, `--kube-api-burst`).
    pub cluster: ClusterSettings,
    /// `--controllers`; of those, only the ones the provider supports start.
    pub controllers: ControllerSelection,
    /// Cluster name and CIDRs, periods and concurrency of the controllers.
    pub settings: ControllerSettings,
    /// `None` with `--leader-elect=false`.
    pub leader_election: Option<LeaseSettings>,
    /// Where `/healthz`, `/readyz`, `/livez` and `/metrics` are served (`--bind-address`,
    /// `--secure-port`, `--tls-*`).
    pub serving: ServingConfig,
}

/// Why the manager could not start.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The provider component cannot be had. (Its error is part of the message, not a
    /// `source`, so `{:#}` does not print it twice.)
    #[error("--provider {0}")]
    Provider(source::FetchError),
    /// The cloud configuration file cannot be read.
    #[error("--cloud-config {path}: {error}")]
    CloudConfig {
        /// The path as given.
        path: String,
        /// Why it cannot be read.
        error: std::io::Error,
    },
    /// The component cannot run as a provider, or its `init` failed.
    #[error(transparent)]
    Load(#[from] wasm_ccm_host::provider::ProviderLoadError),
    /// The provider's `init` reports a name other than `--cloud-provider`.
    #[error(
        "--cloud-provider {wanted}: the provider at {path} reports its name as {actual:?}; pass --cloud-provider={actual} if this is the provider you meant"
    )]
    WrongProvider {
        /// `--cloud-provider`.
        wanted: String,
        /// `capabilities.name` from the provider's `init`.
        actual: String,
        /// `--provider`, as given.
        path: String,
    },
    /// The provider has no cluster ID and `--allow-untagged-cloud` is not set.
    #[error(
        "provider {provider} reports no cluster ID (has-cluster-id = false); pass --allow-untagged-cloud to run anyway"
    )]
    Untagged {
        /// The provider as `name@sha256:<12 hex>`.
        provider: String,
    },
    /// A selected controller cannot run with these flags.
    #[error(transparent)]
    Start(#[from] controllers::StartError),
    /// The Kubernetes client cannot be built.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// The health and metrics endpoints cannot be served.
    #[error(transparent)]
    Serving(#[from] serving::ServingError),
    /// Leader election cannot run.
    #[error(transparent)]
    Leader(#[from] crate::leader::LeaderError),
    /// The wasm engine cannot be set up.
    #[error(transparent)]
    Sandbox(#[from] wasm_ccm_host::sandbox::LoadError),
}

/// Run until `shutdown` is cancelled.
pub async fn run(config: ManagerConfig, shutdown: CancellationToken) -> Result<(), ManagerError> {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::default());
    metrics.register(&mut registry);
    let controller_metrics = ControllerMetrics::default();
    controller_metrics.register(&mut registry);
    let queue_metrics = QueueMetrics::default();
    queue_metrics.register(&mut registry);
    let client_metrics = ClientMetrics::default();
    client_metrics.register(&mut registry);
    let event_metrics = EventMetrics::default();
    event_metrics.register(&mut registry);
    crate::process_metrics::register(&mut registry);

    // With flags, the provider loads first: a bad flag fails before anything connects.
    let planned = std::sync::OnceLock::new();
    let flagged = match &config.provider {
        ProviderMode::Flags(settings) => {
            let provider = load_provider(&config, settings, metrics.clone()).await?;
            let _ = planned.set(controllers::plan(
                &config.controllers,
                &provider,
                &config.settings,
            )?);
            Ok(provider)
        }
        ProviderMode::Resource {
            name,
            allow_untagged_cloud,
            grant_ceiling,
            tag_check_interval,
        } => Err((
            name.clone(),
            *allow_untagged_cloud,
            grant_ceiling.clone(),
            *tag_check_interval,
        )),
    };
    let clients = Clients::connect(&config.cluster, &client_metrics).await?;
    let controller_clients = ControllerClients::new(&clients)?;
    // Whether this replica leads: only the leader writes events and the CloudProvider's
    // status.
    let leading = watch::Sender::new(config.leader_election.is_none());
    let events = EventBroadcaster::new(
        clients.client(cluster::EVENT_RECORDER)?,
        &config.settings.identity,
        (
            config.settings.event_queue_length,
            config.settings.event_retry_interval,
        ),
        event_metrics,
        leading.subscribe(),
        shutdown.clone(),
    );
    // Started before the Lease is sought: a new leader's controllers find the caches
    // filled, and a standby's stay warm. They keep the manager's own client, as upstream's
    // shared informers do with --use-service-account-credentials.
    let informers = {
        let client = clients.client(cluster::SHARED_INFORMERS)?;
        Informers {
            nodes: Informer::start(
                kube::Api::all(client.clone()),
                controllers::node_addresses,
                shutdown.clone(),
            ),
            services: Informer::start(
                kube::Api::all(client),
                controllers::service_addresses,
                shutdown.clone(),
            ),
        }
    };

    // Every provider answer is checked against the operator's ranges and what these caches
    // hold before a controller sees it.
    let answer_checks = Arc::new(AnswerChecks::new(
        config.settings.answer_policy(),
        Arc::new(controllers::ClusterView::new(
            informers.nodes.clone(),
            informers.services.clone(),
        )),
    ));

    let elector = match config.leader_election.clone() {
        None => None,
        Some(lease) => Some(LeaderElector::new(
            clients.client(cluster::LEADER_ELECTION)?,
            lease,
        )),
    };
    if let Some(elector) = &elector {
        elector.register(&mut registry);
    }
    let health = HealthChecks::default();
    if let Some(elector) = &elector {
        health.add(
            "leaderElection",
            &[Probe::Healthz, Probe::Livez],
            elector.health_check(),
        );
    }
    // `Err`: the resource named, --allow-untagged-cloud, the ceiling and the tag check's
    // interval, for the rollout to follow.
    let provider = match flagged {
        Ok(provider) => Versions::Fixed(ProviderSlot::new(provider, answer_checks)),
        Err((resource, allow_untagged_cloud, grant_ceiling, tag_check_interval)) => {
            let handle = rollout::start(
                RolloutSettings {
                    resource,
                    defaults: Defaults {
                        egress: config.egress.clone(),
                        sandbox: config.sandbox.clone(),
                    },
                    distribution: config.distribution.clone(),
                    allow_untagged_cloud,
                    grant_ceiling,
                    tag_check_interval,
                    answer_checks,
                },
                clients.manager(),
                events.sink("wasm-ccm"),
                metrics.clone(),
                leading.subscribe(),
                shutdown.clone(),
            );
            health.add("provider", &[Probe::Readyz], handle.readiness());
            Versions::Rollout(tokio::sync::Mutex::new(handle))
        }
    };
    let serving = serving::serve(
        config.serving.clone(),
        health.clone(),
        Arc::new(registry),
        clients.client(cluster::DELEGATED_AUTH)?,
        shutdown.clone(),
    )
    .await?;
    tracing::info!(
        serving = ?serving.as_ref().map(|s| s.local_addr()),
        leader_election = elector.is_some(),
        "wasm-ccm started"
    );

    let term = Term {
        clients: controller_clients,
        events,
        informers,
        provider,
        planned,
        selection: config.controllers.clone(),
        settings: config.settings.clone(),
        metrics: controller_metrics,
        queues: queue_metrics,
        health,
    };
    match elector {
        None => term.run(shutdown.clone()).await?,
        Some(elector) => loop {
            let Some(leadership) = elector.acquire(&shutdown).await? else {
                break;
            };
            leading.send_replace(true);
            let stop = leadership.lost().child_token();
            let shutdown_link = {
                let stop = stop.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    shutdown.cancelled().await;
                    stop.cancel();
                })
            };
            let ran = term.run(stop).await;
            leading.send_replace(false);
            shutdown_link.abort();
            if shutdown.is_cancelled() || ran.is_err() {
                leadership.release().await;
                ran?;
                break;
            }
            tracing::error!(
                "leadership lost: stopped every controller; campaigning again as a standby"
            );
        },
    }
    tracing::info!("wasm-ccm stopped");
    Ok(())
}

async fn load_provider(
    config: &ManagerConfig,
    settings: &ProviderSettings,
    metrics: Arc<Metrics>,
) -> Result<Provider, ManagerError> {
    let artifact = Distribution::new(config.distribution.clone())
        .fetch(&settings.reference)
        .await
        .map_err(ManagerError::Provider)?;
    let reference = artifact.identity.reference.clone();
    let cloud_config = match &settings.cloud_config {
        None => None,
        Some(path) => {
            Some(
                tokio::fs::read(path)
                    .await
                    .map_err(|error| ManagerError::CloudConfig {
                        path: path.display().to_string(),
                        error,
                    })?,
            )
        }
    };
    let sandbox = Sandbox::new(config.sandbox.clone(), metrics.clone())?;
    let gate = EgressGate::new(config.egress.clone(), metrics.clone());
    let provider = Compiled::new(&sandbox, artifact)
        .await
        .map_err(ProviderLoadError::Load)?
        .expecting(&settings.name)
        .init(gate, cloud_config, metrics)
        .await?;
    let capabilities = provider.capabilities();
    if capabilities.name != settings.name {
        return Err(ManagerError::WrongProvider {
            wanted: settings.name.clone(),
            actual: capabilities.name.clone(),
            path: reference,
        });
    }
    if !capabilities.has_cluster_id && !settings.allow_untagged_cloud {
        return Err(ManagerError::Untagged {
            provider: provider.label(),
        });
    }
    Ok(provider)
}

/// Where the controllers' provider comes from.
enum Versions {
    /// Loaded from flags at start.
    Fixed(ProviderSlot),
    /// Rolled out from the `CloudProvider`; the first version may not be active yet.
    Rollout(tokio::sync::Mutex<rollout::RolloutHandle>),
}

/// The caches and change feeds every controller reads, for the life of the process.
struct Informers {
    nodes: Informer<Node>,
    services: Informer<Service>,
}

/// What one period of running the controllers needs (one leadership term, or the whole
/// life of the process without leader election).
struct Term {
    clients: ControllerClients,
    /// The controllers' event queues, kept across terms.
    events: EventBroadcaster,
    /// The shared informers, kept across terms.
    informers: Informers,
    provider: Versions,
    /// The controllers that run, decided with the first active version.
    planned: std::sync::OnceLock<Vec<Controller>>,
    selection: ControllerSelection,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    queues: QueueMetrics,
    health: HealthChecks,
}

impl Term {
    /// Wait for an active provider version, start the controllers; return once `stop` is
    /// cancelled and all stopped.
    async fn run(&self, stop: CancellationToken) -> Result<(), ManagerError> {
        let slot = match &self.provider {
            Versions::Fixed(slot) => slot.clone(),
            Versions::Rollout(handle) => {
                let mut handle = handle.lock().await;
                let Some(slot) = handle.first_version(&stop).await else {
                    return Ok(());
                };
                slot
            }
        };
        let planned = match self.planned.get() {
            Some(planned) => planned,
            None => {
                let provider = slot.current();
                let planned = controllers::plan(&self.selection, &provider, &self.settings)?;
                let names: Vec<&str> = planned.iter().map(|c| c.name()).collect();
                tracing::info!(
                    provider = %provider.label(),
                    source = %provider.identity().reference,
                    digest = %provider.identity().digest,
                    controllers = ?names,
                    "starting controllers"
                );
                if let Versions::Rollout(handle) = &self.provider {
                    handle.lock().await.require(planned.clone());
                }
                self.planned.get_or_init(|| planned)
            }
        };
        let context = Arc::new(Context {
            clients: self.clients.clone(),
            events: self.events.clone(),
            provider: slot,
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            queues: self.queues.clone(),
            nodes: self.informers.nodes.clone(),
            services: self.informers.services.clone(),
        });
        controllers::run(planned, context, &self.health, stop).await;
        Ok(())
    }
}

//! Run mode: everything `wasm-ccm` does as a cloud-controller-manager, in order:
//!
//! 1. connect to the API server and start the shared informers (one list and watch of Nodes
//!    and of Services), so their caches fill while the provider loads and the Lease is
//!    sought, and stay warm on a standby;
//! 2. with `--provider-resource`: follow each `CloudProvider` named ([`crate::rollout`]),
//!    reporting not-ready with the reason until a version of each is active; in both modes,
//!    serve `/healthz`, `/readyz`, `/livez` and `/metrics`;
//! 3. with flags: load the provider (`--provider`), `init` it with `--cloud-config`, and
//!    check it is the `--cloud-provider` the operator named, while the informers fill and
//!    (with `--leader-elect`) the Lease is sought, reporting not-ready until it has loaded:
//!    a cold start's compile overlaps both, and a provider that cannot load stops the
//!    manager as soon as it fails (giving the Lease up if it was won meanwhile);
//! 4. decide which controllers run for each provider (selected *and* supported);
//! 5. with `--leader-elect`, wait for the Lease; then run each provider's controllers, as
//!    soon as it has an active version, until leadership is lost or the process is asked to
//!    stop. They call the provider through a [`ProviderSlot`], which its rollout swaps under
//!    them, and see only its nodes and Services ([`crate::controllers::fleet`]): with
//!    several providers, each has its own controllers, queues and workers, so a provider
//!    with no version yet, or a slow cloud, holds up no other.
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
use crate::controllers::fleet::{self, Fleet, FleetMetrics, Scope};
use crate::controllers::{
    self, Context, Controller, ControllerClients, ControllerMetrics, ControllerSelection,
    ControllerSettings, EventBroadcaster, EventMetrics, Informer, QueueMetrics,
};
use crate::leader::{LeaderElector, Leadership, LeaseSettings};
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
    /// `--provider-resource NAME[,NAME]`: each `CloudProvider` names a provider, and its
    /// rollouts swap it. The egress and sandbox flags are the defaults each spec overrides.
    Resource {
        /// The `CloudProvider`s' names, at least one, each once.
        names: Vec<String>,
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
    /// The component cannot run as a provider.
    #[error(transparent)]
    Load(#[from] wasm_ccm_host::provider::ProviderLoadError),
    /// The provider's `init` failed: its cloud config, or a component other than the
    /// `--cloud-provider` named (which only its own `init` can tell).
    #[error(
        "--provider {path}: init failed, run as --cloud-provider {name} with --cloud-config {cloud_config}: {error}; check the cloud config, and that --cloud-provider names this component's provider"
    )]
    Init {
        /// `--cloud-provider`.
        name: String,
        /// `--provider`, as given.
        path: String,
        /// `--cloud-config`, or `(none)`.
        cloud_config: String,
        /// How `init` failed.
        error: wasm_ccm_host::provider::ProviderError,
    },
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

    let fleet_metrics = FleetMetrics::default();
    fleet_metrics.register(&mut registry);

    let clients = Clients::connect(&config.cluster, &client_metrics).await?;
    let controller_clients = ControllerClients::new(&clients)?;
    // Whether this replica leads: only the leader writes events and the CloudProvider's
    // status.
    let leading = watch::Sender::new(config.leader_election.is_none());
    let event_client = clients.client(cluster::EVENT_RECORDER)?;
    // Each provider's controllers report as `IDENTITY/RESOURCE` when there are several, with
    // queues of their own: one provider's events never crowd out another's.
    let broadcaster = |instance: &str| {
        EventBroadcaster::new(
            event_client.clone(),
            instance,
            (
                config.settings.event_queue_length,
                config.settings.event_retry_interval,
            ),
            event_metrics.clone(),
            leading.subscribe(),
            shutdown.clone(),
        )
    };
    let events = broadcaster(&config.settings.identity);
    // Started before the Lease is sought: a new leader's controllers find the caches
    // filled, and a standby's stay warm. They keep the manager's own client, as upstream's
    // shared informers do with --use-service-account-credentials.
    let informers = {
        let client = clients.client(cluster::SHARED_INFORMERS)?;
        Informers {
            nodes: Informer::start(
                kube::Api::all(client.clone()),
                controllers::node_addresses,
                controllers::node_cached,
                shutdown.clone(),
            ),
            services: Informer::start(
                kube::Api::all(client),
                controllers::service_addresses,
                |_| {},
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
    // With `--provider-resource`, each provider's rollout starts now, beside the informers.
    // Every provider's answers are checked by the same checks, so two cannot both take one
    // address.
    let (fleet, mut members) = match &config.provider {
        ProviderMode::Flags(settings) => (Fleet::of_flags(&settings.name), Vec::new()),
        ProviderMode::Resource {
            names,
            allow_untagged_cloud,
            grant_ceiling,
            tag_check_interval,
        } => {
            let fleet = Fleet::of_resources(names);
            let several = fleet.several();
            let members = names
                .iter()
                .map(|resource| {
                    let handle = rollout::start(
                        RolloutSettings {
                            resource: resource.clone(),
                            defaults: Defaults {
                                egress: config.egress.clone(),
                                sandbox: config.sandbox.clone(),
                            },
                            distribution: config.distribution.clone(),
                            allow_untagged_cloud: *allow_untagged_cloud,
                            grant_ceiling: grant_ceiling.clone(),
                            tag_check_interval: *tag_check_interval,
                            answer_checks: answer_checks.clone(),
                            fleet: fleet.clone(),
                        },
                        clients.manager(),
                        events.sink("wasm-ccm"),
                        metrics.clone(),
                        leading.subscribe(),
                        shutdown.clone(),
                    );
                    let check = match several {
                        false => "provider".to_string(),
                        true => format!("provider-{resource}"),
                    };
                    health.add(&check, &[Probe::Readyz], handle.readiness());
                    let events = match several {
                        false => events.clone(),
                        true => {
                            broadcaster(&reporting_instance(&config.settings.identity, resource))
                        }
                    };
                    Member {
                        scope: fleet.scope(resource),
                        versions: Versions::Rollout(tokio::sync::Mutex::new(handle)),
                        planned: std::sync::OnceLock::new(),
                        events,
                    }
                })
                .collect();
            (fleet, members)
        }
    };
    // With flags, the provider loads (fetch, compile, `init`) while the informers fill and
    // the Lease is sought (polled from the wait for the Lease below), not ready until it
    // has; a provider that cannot load stops the manager as soon as it fails, leader or not.
    let readiness = health.clone();
    let loading = match &config.provider {
        ProviderMode::Flags(settings) => {
            let reason = format!("loading --provider of {}", settings.name);
            health.add("provider", &[Probe::Readyz], move || Err(reason.clone()));
            Some((settings.name.clone(), async {
                let provider = load_provider(&config, settings, metrics.clone()).await?;
                let planned = controllers::plan(&config.controllers, &provider, &config.settings)?;
                // Ready as a standby too: only the controllers wait for the Lease.
                readiness.remove("provider");
                Ok((provider, planned))
            }))
        }
        ProviderMode::Resource { .. } => None,
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

    // The flagged provider, and with leader election the first term's Lease, both awaited.
    let mut won = None;
    if let Some((name, loading)) = loading {
        let Some(((provider, controllers), leadership)) =
            load_while_campaigning(loading, elector.as_ref(), &shutdown).await?
        else {
            tracing::info!("wasm-ccm stopped while its provider loaded");
            return Ok(());
        };
        members.push(Member {
            scope: fleet.scope(&name),
            versions: Versions::Fixed(ProviderSlot::new(provider, answer_checks)),
            planned: controllers.into(),
            events: events.clone(),
        });
        won = leadership;
    }

    let term = Term {
        clients: controller_clients,
        events,
        informers,
        fleet,
        fleet_metrics,
        members,
        selection: config.controllers.clone(),
        settings: config.settings.clone(),
        metrics: controller_metrics,
        queues: queue_metrics,
        health,
    };
    match elector {
        None => term.run(shutdown.clone()).await?,
        Some(elector) => loop {
            let leadership = match won.take() {
                Some(leadership) => leadership,
                None => match elector.acquire(&shutdown).await? {
                    Some(leadership) => leadership,
                    None => break,
                },
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

/// Wait for `loading` and, with an elector, for the Lease, at once: a load that fails ends
/// the wait (giving the Lease up if it was won). The leadership is `None` without an elector
/// or if `shutdown` came once the load was done; `Ok(None)`: `shutdown` came during the
/// load (the Lease given up if it was won).
async fn load_while_campaigning<Loaded>(
    loading: impl Future<Output = Result<Loaded, ManagerError>>,
    elector: Option<&LeaderElector>,
    shutdown: &CancellationToken,
) -> Result<Option<(Loaded, Option<Leadership>)>, ManagerError> {
    tokio::pin!(loading);
    let Some(elector) = elector else {
        return tokio::select! {
            loaded = &mut loading => Ok(Some((loaded?, None))),
            () = shutdown.cancelled() => Ok(None),
        };
    };
    let acquiring = elector.acquire(shutdown);
    tokio::pin!(acquiring);
    tokio::select! {
        loaded = &mut loading => {
            let loaded = loaded?;
            // Ends with `None` if `shutdown` comes first.
            Ok(Some((loaded, acquiring.await?)))
        }
        acquired = &mut acquiring => {
            let leadership = acquired?;
            let loaded = tokio::select! {
                loaded = &mut loading => loaded,
                () = shutdown.cancelled() => {
                    if let Some(leadership) = leadership {
                        leadership.release().await;
                    }
                    return Ok(None);
                }
            };
            match loaded {
                Ok(loaded) => Ok(Some((loaded, leadership))),
                Err(error) => {
                    if let Some(leadership) = leadership {
                        leadership.release().await;
                    }
                    Err(error)
                }
            }
        }
    }
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
        .await
        .map_err(|error| match error {
            ProviderLoadError::Init { error, .. } => ManagerError::Init {
                name: settings.name.clone(),
                path: reference.clone(),
                cloud_config: settings
                    .cloud_config
                    .as_ref()
                    .map_or_else(|| "(none)".into(), |path| path.display().to_string()),
                error,
            },
            other => other.into(),
        })?;
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

/// One provider the manager serves, and where its versions come from.
struct Member {
    /// Its nodes and Services.
    scope: Scope,
    versions: Versions,
    /// The controllers that run for it, decided with its first active version.
    planned: std::sync::OnceLock<Vec<Controller>>,
    /// Where its controllers' events go.
    events: EventBroadcaster,
}

/// The events' reporting instance of one provider's controllers: `IDENTITY/RESOURCE`, cut
/// to the 128 bytes the API server takes.
fn reporting_instance(identity: &str, resource: &str) -> String {
    let mut instance = format!("{identity}/{resource}");
    let mut end = instance.len().min(128);
    while !instance.is_char_boundary(end) {
        end -= 1;
    }
    instance.truncate(end);
    instance
}

/// Where a provider's versions come from.
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
    /// Which provider serves which nodes and Services.
    fleet: Arc<Fleet>,
    fleet_metrics: FleetMetrics,
    /// Each provider served.
    members: Vec<Member>,
    selection: ControllerSelection,
    settings: ControllerSettings,
    metrics: ControllerMetrics,
    queues: QueueMetrics,
    health: HealthChecks,
}

impl Term {
    /// Run each provider's controllers once it has an active version (and, with several
    /// providers, report the nodes none or several claim); return once `stop` is cancelled
    /// and all stopped.
    async fn run(&self, stop: CancellationToken) -> Result<(), ManagerError> {
        let report = async {
            if self.fleet.several() {
                fleet::report(
                    self.fleet.clone(),
                    self.informers.nodes.clone(),
                    self.events.sink("wasm-ccm"),
                    self.fleet_metrics.clone(),
                    stop.clone(),
                )
                .await;
            }
            Ok(())
        };
        let members = self
            .members
            .iter()
            .map(|member| self.run_member(member, &stop));
        futures::future::try_join(futures::future::try_join_all(members), report).await?;
        Ok(())
    }

    /// Wait for `member`'s first active version, start its controllers; return once `stop`
    /// is cancelled and all stopped.
    async fn run_member(
        &self,
        member: &Member,
        stop: &CancellationToken,
    ) -> Result<(), ManagerError> {
        let slot = match &member.versions {
            Versions::Fixed(slot) => slot.clone(),
            Versions::Rollout(handle) => {
                let mut handle = handle.lock().await;
                let Some(slot) = handle.first_version(stop).await else {
                    return Ok(());
                };
                slot
            }
        };
        let planned = match member.planned.get() {
            Some(planned) => planned,
            None => {
                let provider = slot.current();
                let planned = match controllers::plan(&self.selection, &provider, &self.settings) {
                    Ok(planned) => planned,
                    // Beside others, one provider that cannot start holds up none of them: it
                    // is reported, and the manager not ready, until it is fixed and restarted.
                    Err(error) if self.fleet.several() => {
                        let member = member.scope.member();
                        tracing::error!(%member, %error, "not starting this provider's controllers");
                        let reason = format!("CloudProvider {member}: {error}");
                        let check = format!("controllers-{member}");
                        self.health
                            .add(&check, &[Probe::Readyz], move || Err(reason.clone()));
                        // A later term plans again (the version may have changed).
                        stop.cancelled().await;
                        self.health.remove(&check);
                        return Ok(());
                    }
                    Err(error) => return Err(error.into()),
                };
                let names: Vec<&str> = planned.iter().map(|c| c.name()).collect();
                tracing::info!(
                    member = %member.scope.member(),
                    provider = %provider.label(),
                    source = %provider.identity().reference,
                    digest = %provider.identity().digest,
                    controllers = ?names,
                    "starting controllers"
                );
                if let Versions::Rollout(handle) = &member.versions {
                    handle.lock().await.require(planned.clone());
                }
                member.planned.get_or_init(|| planned)
            }
        };
        let context = Arc::new(Context {
            clients: self.clients.clone(),
            events: member.events.clone(),
            provider: slot,
            scope: member.scope.clone(),
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            queues: self.queues.clone(),
            nodes: self.informers.nodes.clone(),
            services: self.informers.services.clone(),
        });
        controllers::run(planned, context, &self.health, stop.clone()).await;
        Ok(())
    }
}

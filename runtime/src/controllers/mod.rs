//! The four upstream cloud-controller-manager controllers, driven by shared informers and
//! calling the provider through its typed facade.
//!
//! Each controller is one module with a `run(context, stop)` future that works until `stop`
//! is cancelled (leadership lost, or shutdown). [`plan`] decides which run, as upstream:
//! the ones `--controllers` selects *and* the provider supports.

mod addresses;
mod cloud_node;
mod events;
pub mod fleet;
mod informer;
mod metrics;
mod node_lifecycle;
mod route;
mod selection;
mod service_lb;
mod views;
mod workqueue;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Service, Taint};
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;

pub use addresses::{ClusterView, node_addresses, service_addresses};
pub use events::{EventBroadcaster, EventMetrics, EventSink, QUEUE_LENGTH, RETRY_INTERVAL};
pub use informer::Informer;
pub use metrics::ControllerMetrics;
pub use selection::{Controller, ControllerSelection, SelectionError};
pub use workqueue::QueueMetrics;

use crate::cluster::{Clients, ClusterError};
use crate::serving::{HealthChecks, Probe};
use wasm_ccm_host::answers::AnswerPolicy;
use wasm_ccm_host::cidr::{CidrList, DualStackCidrs};
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderSlot};

/// Settings of the controllers, from flags.
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// `--cluster-name`, passed to load-balancer and route calls.
    pub cluster_name: String,
    /// `--cluster-cidr`.
    pub cluster_cidrs: Option<DualStackCidrs>,
    /// `--service-cluster-ip-range`: no load-balancer ingress IP inside it.
    pub service_cidrs: Option<DualStackCidrs>,
    /// `--load-balancer-ip-ranges`: load-balancer ingress IPs only inside these.
    pub load_balancer_ip_ranges: Option<CidrList>,
    /// `--load-balancer-ip-sharing`: an ingress IP another Service holds is written anyway.
    pub load_balancer_ip_sharing: bool,
    /// `--node-address-dns-suffixes`: the DNS names a node's addresses may have besides the
    /// node's own name.
    pub node_address_dns_suffixes: Vec<String>,
    /// `--configure-cloud-routes`.
    pub configure_cloud_routes: bool,
    /// `--route-reconciliation-period`.
    pub route_reconciliation_period: Duration,
    /// `--node-monitor-period`: how often the lifecycle controller checks every node.
    pub node_monitor_period: Duration,
    /// `--node-status-update-frequency`: how often node addresses are refreshed.
    pub node_status_update_frequency: Duration,
    /// `--concurrent-node-syncs`: cloud-node workers.
    pub concurrent_node_syncs: usize,
    /// `--concurrent-node-status-updates`: node address updates at once.
    pub concurrent_node_status_updates: usize,
    /// `--concurrent-service-syncs`: service-lb workers.
    pub concurrent_service_syncs: usize,
    /// How often each load balancer is checked against the cloud (0 = never).
    pub load_balancer_drift_period: Duration,
    /// This process, as events' reporting instance.
    pub identity: String,
    /// Events each controller (and the rollout) may have waiting to be written, beyond which
    /// they are dropped and counted: [`QUEUE_LENGTH`], client-go's, with no flag as upstream
    /// has none (tests make it small).
    pub event_queue_length: usize,
    /// Time between two tries of an event write that may pass: [`RETRY_INTERVAL`],
    /// client-go's, with no flag as upstream has none (tests make it short).
    pub event_retry_interval: Duration,
}

impl ControllerSettings {
    /// What the provider facade checks answers against before a controller sees them.
    pub fn answer_policy(&self) -> AnswerPolicy {
        AnswerPolicy {
            service_cidrs: self.service_cidrs.clone(),
            cluster_cidrs: self.cluster_cidrs.clone(),
            load_balancer_ranges: self.load_balancer_ip_ranges.clone(),
            node_dns_suffixes: Some(self.node_address_dns_suffixes.clone()),
            shared_ingress_ips: self.load_balancer_ip_sharing,
        }
    }
}

/// The API clients of the controllers, one per controller, each with its own QPS/burst
/// budget and user agent (see [`crate::cluster`]); their events go through the
/// [`EventBroadcaster`]'s client.
#[derive(Clone)]
pub struct ControllerClients {
    cloud_node: kube::Client,
    node_lifecycle: kube::Client,
    service_lb: kube::Client,
    node_route: kube::Client,
}

impl ControllerClients {
    /// A client for each controller, named as [`Controller::client_name`] says (acting as
    /// its [`Controller::service_account`] with `--use-service-account-credentials`).
    pub fn new(clients: &Clients) -> Result<ControllerClients, ClusterError> {
        let client = |controller: Controller| {
            clients.controller(controller.client_name(), controller.service_account())
        };
        Ok(ControllerClients {
            cloud_node: client(Controller::CloudNode)?,
            node_lifecycle: client(Controller::CloudNodeLifecycle)?,
            service_lb: client(Controller::ServiceLoadBalancer)?,
            node_route: client(Controller::NodeRoute)?,
        })
    }

    fn of(&self, controller: Controller) -> &kube::Client {
        match controller {
            Controller::CloudNode => &self.cloud_node,
            Controller::CloudNodeLifecycle => &self.node_lifecycle,
            Controller::ServiceLoadBalancer => &self.service_lb,
            Controller::NodeRoute => &self.node_route,
        }
    }
}

/// What every controller shares.
pub struct Context {
    /// The Kubernetes API: each controller's own client.
    pub clients: ControllerClients,
    /// Where the controllers' events are queued, apart from their state writes.
    pub events: EventBroadcaster,
    /// The cloud: the active provider version, swapped under the controllers by a rollout.
    pub provider: ProviderSlot,
    /// Which nodes and Services are this provider's, when the manager serves several.
    pub scope: fleet::Scope,
    /// From flags.
    pub settings: ControllerSettings,
    /// Upstream's controller metrics.
    pub metrics: ControllerMetrics,
    /// The `workqueue_*` metrics of every queue.
    pub queues: QueueMetrics,
    /// The shared node cache and change feed.
    pub nodes: Informer<Node>,
    /// The shared service cache and change feed.
    pub services: Informer<Service>,
}

impl Context {
    /// The API client of `controller`, with its own budget and user agent.
    fn client(&self, controller: Controller) -> &kube::Client {
        self.clients.of(controller)
    }

    fn events(&self, controller: Controller) -> EventSink {
        self.events.sink(controller.event_component())
    }

    /// `name`, followed by this provider's when the manager serves several: the name of a
    /// work queue (its `workqueue_*` metrics) or a health check.
    fn named(&self, name: &str) -> String {
        if self.scope.several() {
            format!("{name}-{}", self.scope.member())
        } else {
            name.to_string()
        }
    }
}

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Routes would run without the pod network to route.
    #[error(
        "--cluster-cidr is required: the route controller is enabled (--configure-cloud-routes=true) and provider {provider} supports routes; set it, or disable routes with --configure-cloud-routes=false or --controllers=*,-route"
    )]
    MissingClusterCidr {
        /// The provider, as its label names it.
        provider: String,
    },
}

/// The controllers that will run: selected and supported. The reasons others are skipped
/// are logged, as upstream does.
pub fn plan(
    selection: &ControllerSelection,
    provider: &Provider,
    settings: &ControllerSettings,
) -> Result<Vec<Controller>, StartError> {
    let capabilities = provider.capabilities();
    let mut planned = Vec::new();
    for controller in selection.enabled() {
        let skip = match controller {
            Controller::CloudNode | Controller::CloudNodeLifecycle if !capabilities.instances => {
                Some("the provider does not support instances")
            }
            Controller::ServiceLoadBalancer if !capabilities.load_balancer => {
                Some("the provider does not support load balancers")
            }
            Controller::NodeRoute if !settings.configure_cloud_routes => {
                Some("--configure-cloud-routes is false")
            }
            Controller::NodeRoute if !capabilities.routes => {
                Some("the provider does not support routes")
            }
            Controller::NodeRoute if settings.cluster_cidrs.is_none() => {
                return Err(StartError::MissingClusterCidr {
                    provider: provider.label(),
                });
            }
            _ => None,
        };
        match skip {
            Some(reason) => tracing::warn!(controller = %controller, "not starting: {reason}"),
            None => planned.push(controller),
        }
    }
    Ok(planned)
}

/// Run `controllers` until `stop` is cancelled, each with a health check named after it
/// (and its provider, when the manager serves several, whose name its logs then carry).
pub async fn run(
    controllers: &[Controller],
    context: Arc<Context>,
    health: &HealthChecks,
    stop: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    for &controller in controllers {
        let alive = Arc::new(AtomicBool::new(true));
        let check = alive.clone();
        health.add(
            &context.named(controller.name()),
            &[Probe::Healthz],
            move || {
                if check.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("the controller stopped".to_string())
                }
            },
        );
        context.metrics.set_running(controller, true);
        let running = OnDrop::new({
            let context = context.clone();
            move || {
                alive.store(false, Ordering::Relaxed);
                context.metrics.set_running(controller, false);
            }
        });
        let span = if context.scope.several() {
            tracing::info_span!("provider", resource = %context.scope.member())
        } else {
            tracing::Span::none()
        };
        let context = context.clone();
        let stop = stop.clone();
        tasks.spawn(tracing::Instrument::instrument(
            async move {
                let _running = running;
                tracing::info!(controller = %controller, "starting");
                match controller {
                    Controller::CloudNode => cloud_node::run(context.clone(), stop).await,
                    Controller::CloudNodeLifecycle => {
                        node_lifecycle::run(context.clone(), stop).await
                    }
                    Controller::ServiceLoadBalancer => service_lb::run(context.clone(), stop).await,
                    Controller::NodeRoute => route::run(context.clone(), stop).await,
                }
                tracing::info!(controller = %controller, "stopped");
            },
            span,
        ));
    }
    while let Some(ended) = tasks.join_next().await {
        if let Err(error) = ended
            && error.is_panic()
        {
            tracing::error!("a controller panicked; its health check fails from now on");
        }
    }
    for controller in controllers {
        health.remove(&context.named(controller.name()));
    }
}

/// Runs a closure when dropped: a controller's task holds one that marks it stopped (in its
/// health check and `running_managed_controllers`) however the task ends: returned,
/// panicked or aborted.
struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    fn new(on_drop: F) -> Self {
        OnDrop(Some(on_drop))
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(on_drop) = self.0.take() {
            on_drop();
        }
    }
}

/// Once the node cache is filled, run `work` every `period` (the next run waits for the
/// last to finish) until `stop` is cancelled: the ticker of the lifecycle and route
/// controllers.
async fn every_period<F, Fut>(
    context: &Context,
    period: Duration,
    stop: &CancellationToken,
    mut work: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    tokio::select! {
        () = stop.cancelled() => return,
        () = context.nodes.wait_synced() => {}
    }
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => work().await,
        }
    }
}

/// Why one sync of one object failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The provider's call failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the call was for, naming the object.
        action: String,
        /// What the API said.
        source: kube::Error,
    },
    /// What the provider answered, or what a node says, cannot be used.
    #[error("{0}")]
    Invalid(String),
}

/// The reason of the Warning event about an object whose provider answer was refused.
const INVALID_ANSWER: &str = "InvalidProviderAnswer";

/// Record the Warning `InvalidProviderAnswer` about `regarding` if `error` is an answer the
/// provider facade refused, `outcome` saying what was left unwritten; whether it was. The
/// refusals are the event's action too, so each distinct refusal is an event of its own and
/// only repeats of one become a series.
fn warn_refused(
    events: &EventSink,
    regarding: ObjectReference,
    error: &SyncError,
    outcome: &str,
) -> bool {
    let Some(refusals) = error.refusals() else {
        return false;
    };
    events.record(
        regarding,
        EventType::Warning,
        INVALID_ANSWER,
        refusals.to_string(),
        format!("{error}; {outcome}"),
    );
    true
}

impl SyncError {
    /// The refused fields, if the provider's answer was refused.
    fn refusals(&self) -> Option<&wasm_ccm_host::answers::Refusals> {
        match self {
            SyncError::Provider(error) => error.refusals(),
            _ => None,
        }
    }

    fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> SyncError {
        let action = action.into();
        move |source| SyncError::Kube { action, source }
    }

    /// The fixed delay the provider asked for.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            SyncError::Provider(error) => error.retry_after(),
            _ => None,
        }
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// A jittered pause between conflict retries: `base * (1 + rand)` as client-go's `wait.Jitter`.
async fn conflict_pause(base: Duration) {
    let jitter: f64 = rand::random();
    tokio::time::sleep(base.mul_f64(1.0 + jitter)).await;
}

/// Update a node with `change`, starting from `cached` and re-reading it after each
/// conflict, as upstream's `RetryOnConflict`. Returns the stored node, or `None` if `change`
/// had nothing to do.
async fn update_node(
    client: &kube::Client,
    cached: &Node,
    steps: u32,
    pause: Duration,
    mut change: impl FnMut(&mut Node) -> Result<(), SyncError>,
) -> Result<Option<Node>, SyncError> {
    let api: Api<Node> = Api::all(client.clone());
    let name = cached.metadata.name.clone().unwrap_or_default();
    let mut current = cached.clone();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut wanted = current.clone();
        change(&mut wanted)?;
        if wanted == current {
            return Ok(None);
        }
        match api
            .replace(&name, &PostParams::default(), &update_body(&wanted))
            .await
        {
            Ok(stored) => return Ok(Some(stored)),
            Err(error) if is_conflict(&error) && attempt < steps => {
                conflict_pause(pause).await;
                current = api
                    .get(&name)
                    .await
                    .map_err(SyncError::kube(format!("reading node {name}")))?;
            }
            Err(error) => return Err(SyncError::kube(format!("updating node {name}"))(error)),
        }
    }
}

/// What an update of the main resource sends of `node`: neither its status nor its
/// `managedFields`, which the API server ignores there (it keeps the stored ones) and which
/// are most of a Node's bytes.
fn update_body(node: &Node) -> Node {
    Node {
        metadata: kube::api::ObjectMeta {
            managed_fields: None,
            ..node.metadata.clone()
        },
        spec: node.spec.clone(),
        status: None,
    }
}

/// `node` as the node cache holds it: of its status only the addresses and conditions,
/// which are all the controllers read (a node update is sent without status, and status
/// writes are patches). The rest (`nodeInfo`, `capacity`, `allocatable`, `images`,
/// `volumesAttached`...) is most of a kubelet's Node: at 15,000 nodes, tens of MB the
/// manager would hold for nothing.
pub fn node_cached(node: &mut Node) {
    if let Some(status) = node.status.take() {
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: status.addresses,
            conditions: status.conditions,
            ..Default::default()
        });
    }
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_deref())
        .unwrap_or_default()
}

fn has_taint(node: &Node, key: &str) -> bool {
    taints(node).iter().any(|taint| taint.key == key)
}

fn labels(node: &Node) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    node.metadata.labels.as_ref().unwrap_or(&EMPTY)
}

fn name_of(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_controller_task_that_panics_is_marked_stopped() {
        let alive = Arc::new(AtomicBool::new(true));
        let running = OnDrop::new({
            let alive = alive.clone();
            move || alive.store(false, Ordering::Relaxed)
        });
        let task = tokio::spawn(async move {
            let _running = running;
            panic!("a controller bug");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert!(!alive.load(Ordering::Relaxed));
    }
}

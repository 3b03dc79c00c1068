//! service-lb: a cloud load balancer for every `type: LoadBalancer` Service without a
//! `loadBalancerClass`, as upstream's service controller (with several providers, for the
//! Services of this provider's class, or without one if it is the default: see
//! [`crate::controllers::fleet`]):
//!
//! - the finalizer `service.kubernetes.io/load-balancer-cleanup` (beside other providers,
//!   this provider's own) is added before any cloud call and removed only after the load
//!   balancer is gone, so a deleted Service never leaks one;
//! - ensure, update and delete with upstream's node predicates, status ingress written to
//!   the status subresource, upstream's events;
//! - `retry-after` is honoured as asked (within 1 s and 5 min, as the sandbox clamps it)
//!   until it has lasted [`RETRY_AFTER_GRACE`]; then, and on other failures, a Service backs
//!   off from 5 s to 300 s (never sooner than the provider asked), with
//!   `--concurrent-service-syncs` workers; a worker leaves what a sync has left to write (the
//!   status, a failure's condition and event) in flight while it syncs the next Services
//!   (the Service stays processing and locked until it is written), so the workers wait on
//!   the cloud and not also on the API server;
//! - a node-set change updates each load balancer at most once per burst of node changes,
//!   passing the Service as it is *now* (upstream passes a stale cached copy);
//! - after a rollout activates another provider version, every Service is synced once
//!   through it (by the same workers), so the new version's behaviour applies everywhere.
//!
//! Beyond upstream: nodes still carrying the uninitialized taint are not targets (they have
//! no providerID yet, so each would cost an extra update); a periodic drift check
//! re-ensures load balancers deleted out of band; and the Service carries a
//! `wasm-ccm.io/LoadBalancerError` condition describing the last failure, removed on
//! success. A `retry-after` (a load balancer still provisioning, a throttled cloud) is not a
//! failure until it has lasted [`RETRY_AFTER_GRACE`]: until then it writes nothing (no
//! warning, no condition, no repeated `EnsuringLoadBalancer`), so a Service that waits out
//! its provisioning costs fewer API writes than upstream's. `EnsuringLoadBalancer` is
//! announced only for a load balancer the cloud takes a while to make ([`ENSURING_NOTICE`]),
//! so one made within seconds costs three writes (finalizer, `EnsuredLoadBalancer`, status) where
//! upstream's design costs four (six with a `retry-after`). Calls for one Service never
//! overlap.
//!
//! The status a provider answers reaches this controller only once the provider facade has
//! checked it ([`wasm_ccm_host::answers::AnswerChecks::load_balancer_status`]): no
//! special-use or platform address, nothing inside `--service-cluster-ip-range` or
//! `--cluster-cidr`, no node's address, no Service's cluster IP (nor, without
//! `--load-balancer-ip-sharing`, another Service's ingress, external IP or
//! `loadBalancerIP`), only `--load-balancer-ip-ranges` when set, DNS names as hostnames. A
//! refused answer is a failed call: it gets a Warning `InvalidProviderAnswer` naming each
//! field and value and the condition, leaves the status as it was, and is retried with
//! backoff like a provider error.
//!
//! What a failing provider costs is bounded whatever it answers: a Service is synced at most
//! once a second while it waits out `retry-after` answers, and with backoff once they have
//! lasted [`RETRY_AFTER_GRACE`]; its condition is written only when its reason or message
//! changes (the message cut to [`MAX_CONDITION_MESSAGE`]), and its events pass the
//! recorder's spam filter.
//!
//! This module owns the controller and the sync of one Service; [`predicates`] decides which
//! Services and changes matter, [`lb_targets`] keeps the nodes load balancers send traffic
//! to, [`node_sync`] follows node changes and [`drift`] checks the cloud.

mod drift;
mod lb_targets;
mod node_sync;
mod predicates;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::events::EventSink;
use super::fleet::LoadBalancers;
use super::informer::{Change, Notice};
use super::views::{api_lb_status, service_view};
use super::workqueue::{Backoff, WorkQueue};
use super::{Context, Controller, INVALID_ANSWER, SyncError, is_not_found, warn_refused};
use drift::drift_check_loop;
use lb_targets::{NodeSet, Targets};
use node_sync::node_sync_loop;
use predicates::{has_finalizer, needs_cleanup, needs_update, wants_load_balancer};
use wasm_ccm_host::bounds;
use wasm_ccm_host::contract::{self, LbStatus};
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError};
use wasm_ccm_host::text::ellipsized;

pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
/// The condition describing the last load-balancer failure.
pub const ERROR_CONDITION: &str = "wasm-ccm.io/LoadBalancerError";

/// `namespace/name`.
type Key = String;

fn key_of(service: &Service) -> Key {
    format!(
        "{}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

/// What the controller remembers between syncs (lost on restart, as upstream; the
/// finalizer makes that safe).
#[derive(Default)]
struct Memory {
    /// The last Service object synced, to clean up after a Service deleted without finalizer.
    services: HashMap<Key, Arc<Service>>,
    /// The targets each load balancer was last given.
    nodes: HashMap<Key, NodeSet>,
    /// One lock per Service so its cloud calls never overlap.
    locks: HashMap<Key, Arc<tokio::sync::Mutex<()>>>,
    /// The Services whose syncs end in `retry-after` (a load balancer still provisioning, or
    /// the cloud throttling), until one ends otherwise.
    retrying: HashMap<Key, Wait>,
}

/// A Service waiting out `retry-after` answers (or a slow ensure announced).
struct Wait {
    /// Since when (the start of the first attempt that ended so).
    since: Instant,
    /// Whether a `retry-after` began it (not only a slow ensure's announcement): only such
    /// a wait outlives another failure.
    retried: bool,
    /// Whether `EnsuringLoadBalancer` was emitted for it.
    announced: bool,
    /// How long its ensure calls ran and the waits they asked for, so far.
    cloud_time: Duration,
}

/// How long a Service may wait out `retry-after` answers before the wait is reported as a
/// failure (event and condition) and its retries back off. Shorter waits are what
/// provisioning a load balancer takes and write nothing: the Service shows
/// `EnsuringLoadBalancer` (if it lasts [`ENSURING_NOTICE`]), then its ingress. The provider
/// facade counts each `retry-after` past the same grace as a failure of its version.
const RETRY_AFTER_GRACE: Duration = bounds::RETRY_AFTER_GRACE;

/// The most bytes of a failure written to the Service's condition (the API server takes
/// 32 KiB; an event note takes 1 KiB).
const MAX_CONDITION_MESSAGE: usize = 4096;

/// How long the cloud may take to make a load balancer (the provider's calls and the
/// `retry-after` waits it asks for) before the Service gets `EnsuringLoadBalancer`. One
/// made within it shows only `EnsuredLoadBalancer`: one write fewer than upstream's, and
/// nothing a user watching events would miss.
const ENSURING_NOTICE: Duration = Duration::from_secs(5);

/// Whether a sync failing with `retry_after` (or another error, `None`) after retrying
/// since `since` is reported as a failure.
fn reported(retry_after: Option<Duration>, since: Instant, now: Instant) -> bool {
    retry_after.is_none() || now.saturating_duration_since(since) >= RETRY_AFTER_GRACE
}

/// The controller's shared state: its queue, its memory and how it reaches the world.
struct ServiceController {
    context: Arc<Context>,
    events: EventSink,
    queue: WorkQueue<Key>,
    memory: Mutex<Memory>,
    targets: Mutex<Targets>,
}

impl ServiceController {
    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn targets(&self) -> std::sync::MutexGuard<'_, Targets> {
        self.targets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_for(&self, key: &Key) -> Arc<tokio::sync::Mutex<()>> {
        self.memory().locks.entry(key.clone()).or_default().clone()
    }

    fn cluster(&self) -> &str {
        &self.context.settings.cluster_name
    }
}

pub async fn run(context: Arc<Context>, stop: CancellationToken) {
    let backoff = Backoff {
        base: Duration::from_secs(5),
        max: Duration::from_secs(300),
    };
    if context.settings.service_cidrs.is_none() {
        tracing::info!(
            "--service-cluster-ip-range is not set: load-balancer ingress IPs are checked against the cluster IPs of existing Services only, not the whole range"
        );
    }
    let controller = Arc::new(ServiceController {
        events: context.events(Controller::ServiceLoadBalancer),
        queue: WorkQueue::new(&context.named("service"), backoff, &context.queues),
        memory: Mutex::default(),
        targets: Mutex::new(Targets::of(context.scope.clone())),
        context: context.clone(),
    });
    let mut service_changes = context.services.subscribe();
    let node_changes = context.nodes.subscribe();
    tokio::select! {
        () = stop.cancelled() => return,
        () = async { context.services.wait_synced().await; context.nodes.wait_synced().await } => {}
    }
    // The node feed repeats what the cache holds already; applying it again changes nothing.
    controller.targets().reset(context.nodes.store().state());
    // Every service arrives as added (or as one resync) with the first list.
    let workers = futures::future::join_all(
        (0..context.settings.concurrent_service_syncs.max(1)).map(|_| worker(controller.clone())),
    );
    let feed = async {
        while let Some(notice) = service_changes.next().await {
            let lbs = context.scope.load_balancers();
            match notice {
                Notice::Change(Change::Added(service)) => {
                    if wants_load_balancer(&lbs, &service) || needs_cleanup(&lbs, &service) {
                        controller.queue.add(key_of(&service));
                    }
                }
                Notice::Change(Change::Updated { old, new }) => {
                    if needs_update(&lbs, &old, &new) || needs_cleanup(&lbs, &new) {
                        controller.queue.add(key_of(&new));
                    }
                }
                // Deletions arrive as updates with a deletionTimestamp (finalizer), or are
                // found missing from the cache by the sync.
                Notice::Change(Change::Deleted(service)) => {
                    if controller.memory().services.contains_key(&key_of(&service)) {
                        controller.queue.add(key_of(&service));
                    }
                }
                Notice::Resync => {
                    resync_all(&controller);
                }
            }
        }
    };
    let mut activations = context.provider.activations();
    let resync_after_swap = async {
        while activations.changed().await.is_ok() {
            let label = context.provider.current().label();
            let queued = resync_all(&controller);
            tracing::info!(provider = %label, services = queued, "provider version activated: resyncing every load balancer through it");
        }
        // The slot outlives the controller; should it not, there is nothing more to resync.
        std::future::pending::<()>().await;
    };
    let mut routing = context.scope.changes();
    let resync_after_routing = async {
        while routing.changed().await.is_ok() {
            // Which nodes are targets, and which Services are this provider's, may have
            // changed.
            controller.targets().reset(context.nodes.store().state());
            let queued = resync_all(&controller);
            tracing::info!(provider = %context.scope.member(), services = queued, "provider routing changed: resyncing its load balancers");
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = stop.cancelled() => {}
        _ = workers => {}
        () = feed => {}
        () = resync_after_swap => {}
        () = resync_after_routing => {}
        () = node_sync_loop(&controller, node_changes) => {}
        () = drift_check_loop(&controller) => {}
    }
    controller.queue.shut_down();
}

/// Queue every Service this provider makes, or must clean up, a load balancer for; how many.
fn resync_all(controller: &ServiceController) -> usize {
    let lbs = controller.context.scope.load_balancers();
    let mut queued = 0;
    for service in controller.context.services.store().state() {
        if wants_load_balancer(&lbs, &service) || needs_cleanup(&lbs, &service) {
            controller.queue.add(key_of(&service));
            queued += 1;
        }
    }
    queued
}

async fn worker(controller: Arc<ServiceController>) {
    // What this worker has left to write after its syncs (a status, a failure's condition);
    // each keeps its Service processing, and locked, until it is done. Those in flight at a
    // stop are dropped: the next leader's first sync of every Service writes them again.
    let mut writing = FuturesUnordered::new();
    while let Some(processing) = alongside(controller.queue.next(), &mut writing).await {
        let key = processing.key().clone();
        let lock = controller.lock_for(&key);
        let guard = alongside(lock.lock_owned(), &mut writing).await;
        let synced = alongside(sync_service(&controller, &key), &mut writing).await;
        // The provider has answered: what is left is written while this worker syncs the
        // next Services, so a worker waits on the cloud and not also on the API server.
        while writing.len() >= WRITES_PER_WORKER {
            writing.next().await;
        }
        let controller = controller.clone();
        writing.push(async move {
            let result = match synced {
                Ok(Some(write)) => write.run(&controller).await,
                Ok(None) => Ok(()),
                Err(failure) => Err(failure),
            };
            finish(&controller, &key, result).await;
            drop(guard);
            drop(processing);
        });
    }
}

/// How many Services' writes a service worker leaves in flight while it syncs the next
/// Services: enough that one write the API server is slow to answer holds no other Service
/// up, few enough that a slow API server slows the workers down.
const WRITES_PER_WORKER: usize = 8;

/// Await `work` while the writes in flight make progress.
async fn alongside<T>(
    work: impl Future<Output = T>,
    writing: &mut FuturesUnordered<impl Future<Output = ()>>,
) -> T {
    tokio::pin!(work);
    loop {
        tokio::select! {
            output = &mut work => return output,
            Some(()) = writing.next() => {}
        }
    }
}

/// Account for a sync of `key` that ended with `result`: forget its failures, or retry it
/// as its failure asks and report the failure on the Service.
async fn finish(controller: &ServiceController, key: &Key, result: Result<(), Failure>) {
    match result {
        Ok(()) => {
            controller.memory().retrying.remove(key);
            controller.queue.forget(key);
        }
        Err(failure) => {
            let delay = failure.error.retry_after();
            let now = Instant::now();
            let since = {
                let mut memory = controller.memory();
                match delay {
                    Some(_) => {
                        let wait = memory.retrying.entry(key.clone()).or_insert(Wait {
                            since: now,
                            retried: true,
                            announced: false,
                            cloud_time: Duration::ZERO,
                        });
                        if !wait.retried {
                            // Announced by a slow ensure: the grace starts now.
                            wait.since = now;
                            wait.retried = true;
                        }
                        wait.since
                    }
                    // Another failure keeps a wait a `retry-after` began going: answering
                    // `other` now and then never restarts the grace.
                    None => {
                        if memory.retrying.get(key).is_some_and(|wait| !wait.retried) {
                            memory.retrying.remove(key);
                        }
                        now
                    }
                }
            };
            let reported = reported(delay, since, now);
            match delay {
                // Provisioning: called again when the provider asked (at least 1 s).
                Some(delay) if !reported => {
                    tracing::debug!(service = %key, error = %failure.error, "provider asked to retry in {delay:?}");
                    controller.queue.add_after(key.clone(), delay);
                }
                // A wait past the grace backs off as a failure does, and never sooner than
                // the provider asked.
                Some(delay) => {
                    tracing::warn!(service = %key, error = %failure.error, "provider still asks to retry past the grace; retrying with backoff");
                    controller.queue.add_rate_limited_after(key.clone(), delay);
                }
                None => {
                    tracing::error!(service = %key, error = %failure.error, "syncing load balancer failed; retrying with backoff");
                    controller.queue.add_rate_limited(key.clone());
                }
            }
            if let Some(service) = failure.service
                && reported
            {
                let reference = service.object_ref(&());
                let outcome = "the load balancer status was not written";
                if !warn_refused(
                    &controller.events,
                    reference.clone(),
                    &failure.error,
                    outcome,
                ) {
                    controller.events.warning(
                        reference,
                        "SyncLoadBalancerFailed",
                        format!("Error syncing load balancer: {}", failure.error),
                    );
                }
                set_error_condition(controller, &service, Some(&failure.error)).await;
            }
        }
    }
}

/// A failed sync, and the Service it was about (for its event and condition).
struct Failure {
    service: Option<Arc<Service>>,
    error: SyncError,
}

/// The failure of a sync about `service`.
fn failed(service: &Arc<Service>) -> impl FnOnce(SyncError) -> Failure {
    let service = service.clone();
    move |error| Failure {
        service: Some(service),
        error,
    }
}

/// Sync the Service `key` up to the provider's answer; what is left to write, if anything.
async fn sync_service(
    controller: &ServiceController,
    key: &Key,
) -> Result<Option<StatusWrite>, Failure> {
    let (namespace, name) = key.split_once('/').unwrap_or_default();
    let current = controller.context.services.get_namespaced(namespace, name);
    let cached = controller.memory().services.get(key).cloned();
    let Some(service) = current else {
        // Gone without our finalizer (or the finalizer was just removed).
        if let Some(cached) = cached {
            delete_load_balancer(controller, &cached)
                .await
                .map_err(failed(&cached))?;
        }
        let mut memory = controller.memory();
        memory.services.remove(key);
        memory.nodes.remove(key);
        memory.locks.remove(key);
        memory.retrying.remove(key);
        return Ok(None);
    };
    if let Some(cached) = cached.filter(|c| c.metadata.uid != service.metadata.uid) {
        // Deleted and recreated under the same name: the old one's load balancer goes first.
        delete_load_balancer(controller, &cached)
            .await
            .map_err(failed(&cached))?;
    }
    controller
        .memory()
        .services
        .insert(key.clone(), service.clone());
    match sync_load_balancer(controller, &service)
        .await
        .map_err(failed(&service))?
    {
        Synced::Ours(status) => Ok(Some(StatusWrite { service, status })),
        Synced::NotOurs => {
            // Another provider's, whose condition and load balancer are not this one's to
            // touch.
            let mut memory = controller.memory();
            memory.services.remove(key);
            memory.nodes.remove(key);
            memory.retrying.remove(key);
            Ok(None)
        }
    }
}

/// How [`sync_load_balancer`] left a Service.
enum Synced {
    /// Not this provider's to sync: nothing was done.
    NotOurs,
    /// In line with its load balancer; the status to write, unless the load balancer is
    /// implemented elsewhere.
    Ours(Option<LbStatus>),
}

/// What a sync leaves to write once the provider answered: the Service's load-balancer
/// status, and its error condition removed.
struct StatusWrite {
    service: Arc<Service>,
    status: Option<LbStatus>,
}

impl StatusWrite {
    async fn run(self, controller: &ServiceController) -> Result<(), Failure> {
        let StatusWrite { service, status } = self;
        if let Some(status) = status {
            patch_status(&controller.context, &service, &status)
                .await
                .map_err(failed(&service))?;
        }
        set_error_condition(controller, &service, None).await;
        Ok(())
    }
}

/// Delete the load balancer of a Service that is gone from the API (no finalizer).
async fn delete_load_balancer(
    controller: &ServiceController,
    service: &Service,
) -> Result<(), SyncError> {
    if !wants_load_balancer(&controller.context.scope.load_balancers(), service) {
        return Ok(());
    }
    let reference = service.object_ref(&());
    let provider = controller.context.provider.current();
    if let Err(error) = delete_from_cloud(controller, &provider, service).await {
        controller.events.warning(
            reference,
            "DeleteLoadBalancerFailed",
            format!("Error deleting load balancer: {error}"),
        );
        return Err(error);
    }
    controller.events.normal(
        reference,
        "DeletedLoadBalancer",
        "Deleted load balancer".into(),
    );
    Ok(())
}

/// `DeletingLoadBalancer`, then `ensure-load-balancer-deleted`; another controller owning
/// the load balancer (`implemented-elsewhere`) counts as done.
async fn delete_from_cloud(
    controller: &ServiceController,
    provider: &Provider,
    service: &Service,
) -> Result<(), SyncError> {
    controller.events.normal(
        service.object_ref(&()),
        "DeletingLoadBalancer",
        "Deleting load balancer".into(),
    );
    match provider
        .ensure_load_balancer_deleted(controller.cluster(), &service_view(service))
        .await
    {
        Ok(()) => Ok(()),
        Err(error) if error.is_implemented_elsewhere() => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Bring the Service's load balancer in line with it (its status is left to write).
async fn sync_load_balancer(
    controller: &ServiceController,
    service: &Arc<Service>,
) -> Result<Synced, SyncError> {
    let context = &controller.context;
    let key = key_of(service);
    let reference = service.object_ref(&());
    let view = service_view(service);
    // One version answers the whole sync, whatever is activated meanwhile.
    let provider = context.provider.current();
    let lbs = context.scope.load_balancers();
    let wanted = wants_load_balancer(&lbs, service);
    let cleanup = needs_cleanup(&lbs, service);
    // A Service this provider made no load balancer for (another provider's, or none's),
    // or one it made that the specs now give to another but that is still a load balancer:
    // left as it is. Its load balancer is deleted only once the Service goes or stops being
    // a load balancer. The one provider of a manager, as upstream, still clears the status
    // of a Service that wants no load balancer and carries no finalizer.
    let clears_as_upstream = lbs.alone() && !has_finalizer(&lbs, service);
    if !(wanted || cleanup || clears_as_upstream) {
        return Ok(Synced::NotOurs);
    }

    let new_status = if !wanted || cleanup {
        // A failed lookup keeps its kind (a `retry-after` is honoured), as upstream wraps it.
        if exists(&provider, controller.cluster(), &view).await? {
            delete_from_cloud(controller, &provider, service).await?;
        }
        remove_finalizers(context, &lbs, service).await?;
        controller.events.normal(
            reference,
            "DeletedLoadBalancer",
            "Deleted load balancer".into(),
        );
        {
            // Deleted for good: a later disappearance from the API needs no cloud call.
            let mut memory = controller.memory();
            memory.nodes.remove(&key);
            memory.services.remove(&key);
        }
        LbStatus::default()
    } else {
        add_finalizer(context, &lbs, service).await?;
        let (targets, views) = controller.targets().current();
        if views.is_empty() {
            controller.events.warning(
                reference.clone(),
                "UnAvailableLoadBalancer",
                "There are no available nodes for LoadBalancer".into(),
            );
        }
        controller.memory().nodes.insert(key.clone(), targets);
        // `EnsuringLoadBalancer` once per attempt, and only for a load balancer the cloud
        // takes a while to make: announced once the provider's calls for it and the waits it
        // asked for add up to `ENSURING_NOTICE`. Time queued behind other Services does not
        // count, so a large rollout of quick load balancers shows only `EnsuredLoadBalancer`.
        let started = Instant::now();
        let (since, mut announced, before) = controller
            .memory()
            .retrying
            .get(&key)
            .map_or((started, false, Duration::ZERO), |wait| {
                (wait.since, wait.announced, wait.cloud_time)
            });
        let waiting = |announced: bool, cloud_time: Duration| Wait {
            since,
            retried: false,
            announced,
            cloud_time,
        };
        let announce = |announced: &mut bool| {
            if !std::mem::replace(announced, true) {
                controller.events.normal(
                    reference.clone(),
                    "EnsuringLoadBalancer",
                    "Ensuring load balancer".into(),
                );
                let mut memory = controller.memory();
                let wait = memory
                    .retrying
                    .entry(key.clone())
                    .or_insert(waiting(false, before));
                wait.announced = true;
            }
        };
        let ensure = provider.ensure_load_balancer(controller.cluster(), &view, &views);
        tokio::pin!(ensure);
        let outcome = tokio::select! {
            outcome = &mut ensure => outcome,
            () = tokio::time::sleep(ENSURING_NOTICE.saturating_sub(before)), if !announced => {
                announce(&mut announced);
                ensure.await
            }
        };
        match outcome {
            Ok(status) => {
                controller.events.normal(
                    reference,
                    "EnsuredLoadBalancer",
                    "Ensured load balancer".into(),
                );
                status
            }
            Err(error) if error.is_implemented_elsewhere() => return Ok(Synced::Ours(None)),
            Err(error) => {
                if let Some(delay) = error.retry_after() {
                    let cloud_time = before
                        .saturating_add(started.elapsed())
                        .saturating_add(delay);
                    if cloud_time >= ENSURING_NOTICE {
                        announce(&mut announced);
                    }
                    let mut memory = controller.memory();
                    let wait = memory.retrying.entry(key.clone()).or_insert(Wait {
                        retried: true,
                        ..waiting(announced, cloud_time)
                    });
                    wait.cloud_time = cloud_time;
                }
                return Err(error.into());
            }
        }
    };
    Ok(Synced::Ours(Some(new_status)))
}

/// Whether the load balancer of `view` exists, as `get-load-balancer` says. Only its
/// existence is read: a status the host refuses to write still says it exists, so a refused
/// answer (say, a port the Service no longer has) never keeps a load balancer from being
/// deleted.
async fn exists(
    provider: &Provider,
    cluster: &str,
    view: &contract::Service,
) -> Result<bool, ProviderError> {
    match provider.get_load_balancer(cluster, view).await {
        Ok(status) => Ok(status.is_some()),
        Err(error) if error.refusals().is_some() => Ok(true),
        Err(error) => Err(error),
    }
}

/// Write `status.loadBalancer` if it differs (ingress, ipMode and ports all count).
async fn patch_status(
    context: &Context,
    service: &Service,
    status: &LbStatus,
) -> Result<(), SyncError> {
    let wanted = api_lb_status(status);
    let current = service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.clone())
        .unwrap_or_default();
    if current.ingress.as_deref().unwrap_or_default()
        == wanted.ingress.as_deref().unwrap_or_default()
    {
        return Ok(());
    }
    let patch = serde_json::json!({ "status": { "loadBalancer": { "ingress": wanted.ingress } } });
    // A service gone right after its finalizer was removed has no status left to write.
    patch_service(
        context,
        service,
        Target::Status,
        patch,
        "updating load balancer status of",
    )
    .await
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The main resource; the service must still exist.
    Object,
    /// The status subresource; a service already gone is not an error.
    Status,
    /// The main resource; a service already gone is not an error.
    ObjectIfPresent,
}

/// Strategic-merge `patch` into `service`; `action` describes it for errors.
async fn patch_service(
    context: &Context,
    service: &Service,
    target: Target,
    patch: serde_json::Value,
    action: &str,
) -> Result<(), SyncError> {
    let api = services_api(context, service);
    let params = PatchParams::default();
    let patch = Patch::Strategic(patch);
    let result = match target {
        Target::Status => api.patch_status(name(service), &params, &patch).await,
        Target::Object | Target::ObjectIfPresent => api.patch(name(service), &params, &patch).await,
    };
    match result {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) && target != Target::Object => Ok(()),
        Err(error) => Err(SyncError::kube(format!(
            "{action} service {}",
            key_of(service)
        ))(error)),
    }
}

fn services_api(context: &Context, service: &Service) -> Api<Service> {
    Api::namespaced(
        context.client(Controller::ServiceLoadBalancer).clone(),
        service.metadata.namespace.as_deref().unwrap_or_default(),
    )
}

fn name(service: &Service) -> &str {
    service.metadata.name.as_deref().unwrap_or_default()
}

async fn add_finalizer(
    context: &Context,
    lbs: &LoadBalancers,
    service: &Service,
) -> Result<(), SyncError> {
    // Its own mark, even on a Service carrying upstream's: the one it cleans up by.
    if lbs.marked(service) {
        return Ok(());
    }
    let patch = serde_json::json!({ "metadata": { "finalizers": [lbs.finalizer()] } });
    // Missing means deleted before any cloud call: the sync must stop here.
    patch_service(
        context,
        service,
        Target::Object,
        patch,
        "failed to add load balancer cleanup finalizer to",
    )
    .await
}

async fn remove_finalizers(
    context: &Context,
    lbs: &LoadBalancers,
    service: &Service,
) -> Result<(), SyncError> {
    let own = lbs.own_finalizers(service);
    if own.is_empty() {
        return Ok(());
    }
    let patch = serde_json::json!({ "metadata": { "$deleteFromPrimitiveList/finalizers": own } });
    patch_service(
        context,
        service,
        Target::ObjectIfPresent,
        patch,
        "failed to remove load balancer cleanup finalizer from",
    )
    .await
}

/// Set (or, with `None`, remove) the condition describing the last load-balancer failure.
async fn set_error_condition(
    controller: &ServiceController,
    service: &Service,
    error: Option<&SyncError>,
) {
    let context = &controller.context;
    let existing = service
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == ERROR_CONDITION));
    let entry = match error {
        None if existing.is_none() => return,
        None => serde_json::json!({ "type": ERROR_CONDITION, "$patch": "delete" }),
        Some(error) => {
            let reason = condition_reason(error);
            let message = ellipsized(error.to_string(), MAX_CONDITION_MESSAGE);
            if existing.is_some_and(|c| c.reason == reason && c.message == message) {
                return;
            }
            let since = match existing {
                Some(existing) => existing.last_transition_time.clone(),
                None => Time(Timestamp::now()),
            };
            serde_json::json!({
                "type": ERROR_CONDITION,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": since,
            })
        }
    };
    let patch = serde_json::json!({ "status": { "conditions": [entry] } });
    if !has_object(context, service) {
        return;
    }
    if let Err(error) = patch_service(
        context,
        service,
        Target::Status,
        patch,
        "updating the error condition of",
    )
    .await
    {
        tracing::warn!(service = %key_of(service), %error, "could not update the load balancer error condition");
    }
}

fn has_object(context: &Context, service: &Service) -> bool {
    context
        .services
        .get_namespaced(
            service.metadata.namespace.as_deref().unwrap_or_default(),
            name(service),
        )
        .is_some_and(|current| current.metadata.uid == service.metadata.uid)
}

fn condition_reason(error: &SyncError) -> &'static str {
    match error {
        SyncError::Provider(error) => match &error.kind {
            ErrorKind::Cloud(contract::CloudError::RetryAfter { .. })
            | ErrorKind::RetryOverdue { .. } => "RetryAfter",
            ErrorKind::Cloud(_) => "ProviderError",
            ErrorKind::Sandbox(_) => "ProviderFailed",
            ErrorKind::EgressDenied { .. } => "EgressDenied",
            ErrorKind::Refused(_) => INVALID_ANSWER,
        },
        SyncError::Kube { .. } => "KubernetesAPIError",
        SyncError::Invalid(_) => "ProviderError",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_is_reported_only_once_it_has_lasted() {
        let since = Instant::now();
        let retry = Some(Duration::from_secs(2));
        assert!(!reported(retry, since, since + Duration::from_secs(10)));
        assert!(reported(retry, since, since + RETRY_AFTER_GRACE));
        assert!(reported(None, since, since), "other failures at once");
    }
}

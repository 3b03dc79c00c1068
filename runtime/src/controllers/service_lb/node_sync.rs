//! Node-triggered updates: a node-set change updates each load balancer whose targets
//! changed, at most once per burst of node changes, passing the Service as it is now.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Resource;

use super::lb_targets::NodeSet;
use super::predicates::{has_finalizer, needs_cleanup, wants_load_balancer};
use super::{ServiceController, key_of};
use crate::controllers::informer::{Notice, Subscription};
use crate::controllers::views::service_view;
use wasm_ccm_host::contract;

/// Node changes closer together than this are handled as one node-set change.
const NODE_QUIET_PERIOD: Duration = Duration::from_secs(1);
/// ...but no node change waits longer than this.
const NODE_MAX_WAIT: Duration = Duration::from_secs(10);

/// Take a node notice into account; whether load balancers may need new targets.
fn note_node(controller: &ServiceController, notice: &Notice<Node>) -> bool {
    match notice {
        Notice::Change(change) => controller.targets().apply(change),
        Notice::Resync => {
            controller
                .targets()
                .reset(controller.context.nodes.store().state());
            true
        }
    }
}

/// Wait for node changes that matter, let a burst of them settle, then update every load
/// balancer whose targets changed.
pub(super) async fn node_sync_loop(
    controller: &ServiceController,
    mut changes: Subscription<Node>,
) {
    loop {
        // The first change that matters...
        loop {
            match changes.next().await {
                Some(notice) if note_node(controller, &notice) => break,
                Some(_) => {}
                None => return,
            }
        }
        // ...then until the burst of such changes is over.
        let first = Instant::now();
        let mut last = first;
        loop {
            let deadline = (last + NODE_QUIET_PERIOD).min(first + NODE_MAX_WAIT);
            let deadline = tokio::time::Instant::from_std(deadline);
            match tokio::time::timeout_at(deadline, changes.next()).await {
                Ok(Some(notice)) => {
                    if note_node(controller, &notice) {
                        last = Instant::now();
                    }
                }
                Ok(None) => return,
                Err(_) => break,
            }
        }
        sync_nodes(controller).await;
    }
}

async fn sync_nodes(controller: &ServiceController) {
    let context = &controller.context;
    let started = Instant::now();
    let (wanted, views) = controller.targets().current();
    let lbs = context.scope.load_balancers();
    let services: Vec<Arc<Service>> = context
        .services
        .store()
        .state()
        .into_iter()
        .filter(|service| wants_load_balancer(&lbs, service) && has_finalizer(&lbs, service))
        .collect();
    futures::stream::iter(services)
        .for_each_concurrent(
            context.settings.concurrent_service_syncs.max(1),
            |service| {
                let views = views.clone();
                let lbs = &lbs;
                async move {
                    let key = key_of(&service);
                    let lock = controller.lock_for(&key);
                    let _guard = lock.lock().await;
                    // The Service as it is now, not as it was at its last sync.
                    let (namespace, name) = key.split_once('/').unwrap_or_default();
                    let Some(service) = controller.context.services.get_namespaced(namespace, name)
                    else {
                        return;
                    };
                    if !wants_load_balancer(lbs, &service) || needs_cleanup(lbs, &service) {
                        return;
                    }
                    // A service not synced yet gets the current nodes from its own sync.
                    match controller.memory().nodes.get(&key) {
                        None => return,
                        Some(synced) if *synced == wanted => return,
                        Some(_) => {}
                    }
                    update_hosts(controller, &service, wanted, &views).await;
                }
            },
        )
        .await;
    context
        .metrics
        .nodesync_latency
        .observe(started.elapsed().as_secs_f64());
}

async fn update_hosts(
    controller: &ServiceController,
    service: &Arc<Service>,
    wanted: NodeSet,
    views: &Arc<[contract::Node]>,
) {
    let context = &controller.context;
    let key = key_of(service);
    controller.memory().nodes.insert(key.clone(), wanted);
    context.metrics.loadbalancer_syncs.inc();
    let started = Instant::now();
    let view = service_view(service);
    let provider = context.provider.current();
    let result = provider
        .update_load_balancer(controller.cluster(), &view, views)
        .await;
    context
        .metrics
        .update_loadbalancer_host_latency
        .observe(started.elapsed().as_secs_f64());
    let reference = service.object_ref(&());
    let error = match result {
        Ok(()) => {
            if views.is_empty() {
                controller.events.warning(
                    reference,
                    "UnAvailableLoadBalancer",
                    "There are no available nodes for LoadBalancer".into(),
                );
            } else {
                controller.events.normal(
                    reference,
                    "UpdatedLoadBalancer",
                    "Updated load balancer with new hosts".into(),
                );
            }
            return;
        }
        Err(error) if error.is_implemented_elsewhere() => return,
        Err(error) => error,
    };
    // A load balancer deleted meanwhile needs no hosts.
    if let Ok(false) = super::exists(&provider, controller.cluster(), &view).await {
        return;
    }
    let names: Vec<&str> = views
        .iter()
        .take(20)
        .map(|node| node.name.as_str())
        .collect();
    controller.events.warning(
        reference,
        "UpdateLoadBalancerFailed",
        format!(
            "Error updating load balancer with new hosts [{}] [node names limited, total number of nodes: {}], error: {error}",
            names.join(" "),
            views.len()
        ),
    );
    context.metrics.nodesync_errors.inc();
    tracing::warn!(service = %key, %error, "updating load balancer hosts failed; the service will be synced again");
    // Forget the targets so the full sync passes them again.
    controller.memory().nodes.remove(&key);
    // A `retry-after` is honoured as asked until it outlasts its grace (the facade then
    // calls it a failure of the version); from then on it backs off as a failure does.
    match error.retry_after() {
        Some(delay) if !error.is_version_failure() => controller.queue.add_after(key, delay),
        Some(delay) => controller.queue.add_rate_limited_after(key, delay),
        None => controller.queue.add_rate_limited(key),
    }
}

//! node-route: cloud routes that send each node's pod CIDRs to that node, reconciled every
//! `--route-reconciliation-period` as upstream's route controller: missing routes created
//! (name hint = node UID), blackholed, stale and changed routes inside `--cluster-cidr`
//! deleted, at most 200 cloud operations at once, and each node's `NetworkUnavailable`
//! condition set from the outcome (`RouteCreated` / `NoRouteCreated`). With several
//! providers, each reconciles its own nodes' routes in its own cloud: a route it lists to a
//! node that exists but is not its own is left, and none is touched until every provider's
//! spec is read.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::events::EventSink;
use super::views::node_addresses;
use super::{Context, Controller, SyncError, every_period, name_of};
use wasm_ccm_host::cidr::{Cidr, DualStackCidrs};
use wasm_ccm_host::contract::Route;
use wasm_ccm_host::provider::Provider;

/// Cloud route operations in flight at once, as upstream.
const MAX_CONCURRENT_OPERATIONS: usize = 200;

/// Upstream's `isResponsibleForRoute`: the route's first or last address is inside a
/// cluster CIDR.
fn is_responsible_for(cluster_cidrs: &DualStackCidrs, destination: &str) -> bool {
    let Ok(route) = destination.parse::<Cidr>() else {
        return false;
    };
    let (first, last) = route.first_and_last();
    cluster_cidrs.contains(first) || cluster_cidrs.contains(last)
}

pub async fn run(context: Arc<Context>, stop: CancellationToken) {
    let events = context.events(Controller::NodeRoute);
    let period = context.settings.route_reconciliation_period;
    every_period(&context, period, &stop, || async {
        if let Err(error) = reconcile(&context, &events).await {
            tracing::warn!(%error, "route reconciliation failed; retrying next period");
        }
    })
    .await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Keep,
    Add,
    Update,
}

async fn reconcile(context: &Context, events: &EventSink) -> Result<(), SyncError> {
    let Some(cluster_cidrs) = context.settings.cluster_cidrs.as_ref() else {
        return Ok(());
    };
    // Until every provider's spec is read no node is anyone's, and a route is kept.
    if context.scope.pending() {
        return Ok(());
    }
    let cluster = &context.settings.cluster_name;
    // One version answers the whole sync, whatever is activated meanwhile.
    let provider = context.provider.current();
    let routes = provider.list_routes(cluster).await?;
    context.metrics.route_syncs.inc();
    let all_nodes = context.nodes.store().state();
    let nodes: Vec<_> = all_nodes
        .iter()
        .filter(|node| context.scope.owns(node))
        .cloned()
        .collect();
    // A route to a node that is there but not this provider's (another's, contested, or
    // no one's) is not this provider's to delete, unless its cloud says it is a blackhole;
    // one to a node that is gone is.
    let others: HashSet<&str> = all_nodes
        .iter()
        .filter(|node| !context.scope.owns(node))
        .map(|node| name_of(node))
        .collect();

    let mut routes_by_node: HashMap<&str, Vec<&Route>> = HashMap::new();
    for route in &routes {
        if !route.target_node.is_empty() {
            routes_by_node
                .entry(route.target_node.as_str())
                .or_default()
                .push(route);
        }
    }
    // node name -> (cidr -> action)
    let mut actions: HashMap<String, HashMap<String, Action>> = HashMap::new();
    for node in &nodes {
        let cidrs = node
            .spec
            .as_ref()
            .and_then(|spec| spec.pod_cidrs.clone())
            .unwrap_or_default();
        if cidrs.is_empty() {
            continue;
        }
        let addresses: HashSet<(String, String)> = node_addresses(node)
            .into_iter()
            .map(|a| (format!("{:?}", a.kind), a.address))
            .collect();
        let existing = routes_by_node
            .get(name_of(node))
            .cloned()
            .unwrap_or_default();
        let node_actions = actions.entry(name_of(node).to_string()).or_default();
        for cidr in cidrs {
            let action = match existing.iter().find(|r| r.destination_cidr == cidr) {
                None => Action::Add,
                Some(route) if !route.enable_node_addresses => Action::Keep,
                Some(route) => {
                    let theirs: HashSet<(String, String)> = route
                        .target_node_addresses
                        .iter()
                        .map(|a| (format!("{:?}", a.kind), a.address.clone()))
                        .collect();
                    if theirs == addresses {
                        Action::Keep
                    } else {
                        Action::Update
                    }
                }
            };
            node_actions.insert(cidr, action);
        }
    }

    // Delete blackholed, unwanted and changed routes we are responsible for.
    let doomed: Vec<Route> = routes
        .iter()
        .filter(|route| is_responsible_for(cluster_cidrs, &route.destination_cidr))
        .filter(|route| route.blackhole || !others.contains(route.target_node.as_str()))
        .filter(|route| {
            route.blackhole
                || !matches!(
                    actions
                        .get(&route.target_node)
                        .and_then(|cidrs| cidrs.get(&route.destination_cidr)),
                    Some(Action::Keep | Action::Add)
                )
        })
        .cloned()
        .collect();
    let deletions = delete_routes(context, &provider, doomed);
    let wait_for_deletions = routes.first().is_some_and(|r| r.enable_node_addresses);
    let creations = create_routes(context, &provider, events, &nodes, &mut actions);
    if wait_for_deletions {
        deletions.await;
        creations.await;
    } else {
        futures::join!(deletions, creations);
    }

    update_conditions(context, &nodes, &actions, &routes_by_node).await;
    Ok(())
}

async fn delete_routes(context: &Context, provider: &Provider, doomed: Vec<Route>) {
    let cluster = &context.settings.cluster_name;
    futures::stream::iter(doomed)
        .map(|route| async move {
            match provider.delete_route(cluster, &route).await {
                Ok(()) => tracing::info!(
                    route = %route.name, cidr = %route.destination_cidr, node = %route.target_node,
                    blackhole = route.blackhole, "deleted route"
                ),
                Err(error) => tracing::warn!(route = %route.name, %error, "deleting route failed"),
            }
        })
        .buffer_unordered(MAX_CONCURRENT_OPERATIONS)
        .for_each(|()| async {})
        .await;
}

async fn create_routes(
    context: &Context,
    provider: &Provider,
    events: &EventSink,
    nodes: &[Arc<Node>],
    actions: &mut HashMap<String, HashMap<String, Action>>,
) {
    let cluster = &context.settings.cluster_name;
    let mut wanted = Vec::new();
    for node in nodes {
        if let Some(cidrs) = actions.get(name_of(node)) {
            for (cidr, action) in cidrs {
                if *action != Action::Keep {
                    wanted.push((node.clone(), cidr.clone()));
                }
            }
        }
    }
    let created: Vec<(String, String)> = futures::stream::iter(wanted)
        .map(|(node, cidr)| async move {
            let name = name_of(&node).to_string();
            let hint = node.metadata.uid.clone().unwrap_or_default();
            let route = Route {
                name: String::new(),
                target_node: name.clone(),
                enable_node_addresses: false,
                target_node_addresses: node_addresses(&node),
                destination_cidr: cidr.clone(),
                blackhole: false,
            };
            let started = Instant::now();
            match provider.create_route(cluster, &hint, &route).await {
                Ok(()) => {
                    tracing::info!(node = %name, %cidr, "created route");
                    Some((name, cidr))
                }
                Err(error) => {
                    tracing::warn!(node = %name, %cidr, %error, "creating route failed");
                    events.warning(
                        node.object_ref(&()),
                        "FailedToCreateRoute",
                        format!(
                            "Could not create route {hint} {cidr} for node {name} after {:?}: {error}",
                            started.elapsed()
                        ),
                    );
                    None
                }
            }
        })
        .buffer_unordered(MAX_CONCURRENT_OPERATIONS)
        .filter_map(|created| async move { created })
        .collect()
        .await;
    for (node, cidr) in created {
        if let Some(action) = actions
            .get_mut(&node)
            .and_then(|cidrs| cidrs.get_mut(&cidr))
        {
            *action = Action::Keep;
        }
    }
}

/// Set `NetworkUnavailable` from the outcome, writing only when status or reason changes.
async fn update_conditions(
    context: &Context,
    nodes: &[Arc<Node>],
    actions: &HashMap<String, HashMap<String, Action>>,
    routes_by_node: &HashMap<&str, Vec<&Route>>,
) {
    let api: Api<Node> = Api::all(context.client(Controller::NodeRoute).clone());
    for node in nodes {
        let name = name_of(node);
        let created = match actions.get(name) {
            Some(cidrs) => !cidrs.is_empty() && cidrs.values().all(|a| *a == Action::Keep),
            None if routes_by_node.contains_key(name) => false,
            None => continue,
        };
        let (status, reason, message) = if created {
            ("False", "RouteCreated", "RouteController created a route")
        } else {
            (
                "True",
                "NoRouteCreated",
                "RouteController failed to create a route",
            )
        };
        let current = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "NetworkUnavailable"));
        if current.is_some_and(|c| c.status == status && c.reason.as_deref() == Some(reason)) {
            continue;
        }
        let now = Timestamp::now().to_string();
        let patch = serde_json::json!({ "status": { "conditions": [{
            "type": "NetworkUnavailable",
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }]}});
        let mut attempt = 0;
        loop {
            attempt += 1;
            match api
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Strategic(patch.clone()),
                )
                .await
            {
                Ok(_) => break,
                Err(error) if super::is_conflict(&error) && attempt < 5 => {
                    super::conflict_pause(Duration::from_millis(100)).await;
                }
                Err(error) => {
                    tracing::warn!(node = %name, %error, "could not set NetworkUnavailable");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responsibility_is_the_first_or_last_address_inside_a_cluster_cidr() {
        let cidrs: DualStackCidrs = "10.244.0.0/16,fd00:10:244::/56".parse().unwrap();
        assert!(is_responsible_for(&cidrs, "10.244.3.0/24"));
        assert!(is_responsible_for(&cidrs, "10.244.255.0/24"));
        assert!(
            !is_responsible_for(&cidrs, "10.0.0.0/8"),
            "a route around the cluster CIDR has neither end inside it"
        );
        assert!(!is_responsible_for(&cidrs, "192.168.0.0/24"));
        assert!(is_responsible_for(&cidrs, "fd00:10:244:1::/64"));
        assert!(!is_responsible_for(&cidrs, "fd00:99::/64"));
        assert!(!is_responsible_for(&cidrs, "garbage"));
    }
}

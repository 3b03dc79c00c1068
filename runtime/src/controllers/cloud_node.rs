//! cloud-node: initialises nodes the kubelet registered with
//! `node.cloudprovider.kubernetes.io/uninitialized` (providerID, instance-type, zone and
//! region labels, addresses, then the taint removed) and keeps every node's addresses in
//! step with the cloud. Upstream's `node_controller.go`, with two gaps fixed: an instance
//! the provider cannot find keeps being retried with backoff instead of being dropped, and
//! address changes are detected by the whole ordered list, not a map keyed by type.
//!
//! Beyond upstream, every `instance-metadata` answer has passed the host's checks in the
//! provider facade ([`answers::AnswerChecks::instance_metadata`]) before this controller
//! sees it: an answer with an invalid or reserved label, an address that is special-use,
//! inside the Service or pod ranges or held by another node or a Service, a DNS name the
//! operator did not allow, or a providerID not of this provider or not the node's is a
//! failed call; it gets a Warning `InvalidProviderAnswer` event on the node naming each
//! field and value, and the node is left as it was (tainted, if it was) and retried with
//! backoff; the periodic address sync skips the node until the next period. That sync also
//! removes from each node a DNS address naming another node (one answered before that node
//! joined, when nothing held the name), with a Warning `AddressNamesAnotherNode`.
//!
//! With several providers, each one's cloud-node sees only its own nodes
//! ([`crate::controllers::fleet::Scope::owns`]), checked again on the node it writes.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use tokio_util::sync::CancellationToken;

use super::informer::{Change, Notice};
use super::views::{api_address, node_view};
use super::workqueue::{Backoff, WorkQueue};
use super::{
    Context, Controller, SyncError, has_taint, labels, name_of, update_node, warn_refused,
};
use wasm_ccm_host::answers::{self, Address};
use wasm_ccm_host::contract::{self, AddressKind, InstanceMetadata, NodeAddress};
use wasm_ccm_host::provider::Provider;

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const PROVIDED_NODE_IP: &str = "alpha.kubernetes.io/provided-node-ip";

const INSTANCE_TYPE: &str = answers::INSTANCE_TYPE_LABEL;
const INSTANCE_TYPE_BETA: &str = answers::INSTANCE_TYPE_BETA_LABEL;
const ZONE: &str = answers::ZONE_LABEL;
const ZONE_BETA: &str = answers::ZONE_BETA_LABEL;
const REGION: &str = answers::REGION_LABEL;
const REGION_BETA: &str = answers::REGION_BETA_LABEL;

/// (beta, GA) label pairs: the GA label follows the beta one on initialised nodes.
const BETA_TO_GA: [(&str, &str); 3] = [
    (ZONE_BETA, ZONE),
    (REGION_BETA, REGION),
    (INSTANCE_TYPE_BETA, INSTANCE_TYPE),
];

pub async fn run(context: Arc<Context>, stop: CancellationToken) {
    let backoff = Backoff {
        base: Duration::from_millis(5),
        max: Duration::from_secs(1000),
    };
    let queue = WorkQueue::new(&context.named("Nodes"), backoff, &context.queues);
    // Every node arrives as added (or as one resync) with the first list.
    let mut changes = context.nodes.subscribe();
    let mut routing = context.scope.changes();
    // Answers are checked against the addresses both caches hold: none before both are full.
    tokio::select! {
        () = stop.cancelled() => return,
        () = async { context.nodes.wait_synced().await; context.services.wait_synced().await } => {}
    }

    let workers = futures::future::join_all(
        (0..context.settings.concurrent_node_syncs.max(1))
            .map(|_| worker(context.clone(), queue.clone())),
    );
    let requeue_all = || {
        for node in context.nodes.store().state() {
            queue.add(name_of(&node).to_string());
        }
    };
    let feed = async {
        loop {
            let notice = tokio::select! {
                notice = changes.next() => match notice {
                    Some(notice) => notice,
                    None => break,
                },
                // Which nodes are this provider's may have changed.
                Ok(()) = routing.changed() => {
                    requeue_all();
                    continue;
                }
            };
            match notice {
                Notice::Change(Change::Added(node) | Change::Updated { new: node, .. }) => {
                    queue.add(name_of(&node).to_string());
                }
                Notice::Change(Change::Deleted(_)) => {}
                Notice::Resync => requeue_all(),
            }
        }
    };
    let address_sync = async {
        let events = context.events(Controller::CloudNode);
        let period = context.settings.node_status_update_frequency;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        loop {
            ticks.tick().await;
            sync_all_addresses(&context, &events).await;
        }
    };
    tokio::select! {
        () = stop.cancelled() => {}
        _ = workers => {}
        () = feed => {}
        () = address_sync => {}
    }
    queue.shut_down();
}

async fn worker(context: Arc<Context>, queue: WorkQueue<String>) {
    let events = context.events(Controller::CloudNode);
    // Dropping `processing` at the end of each turn marks the node done.
    while let Some(processing) = queue.next().await {
        let name = processing.key();
        // `as_str()`, not an implicit `&String` to `&str` coercion: with the coercion rustc
        // cannot prove this future `Send` (its higher-ranked lifetime limitation).
        match sync_node(&context, &events, name.as_str()).await {
            Ok(()) => queue.forget(name),
            Err(error) => {
                tracing::warn!(node = %name, %error, "initialising node failed; retrying with backoff");
                queue.add_rate_limited(name.clone());
            }
        }
    }
}

async fn sync_node(
    context: &Context,
    events: &super::events::EventSink,
    name: &str,
) -> Result<(), SyncError> {
    let Some(node) = context.nodes.get(name) else {
        return Ok(());
    };
    // Another provider's, several's or none's: looked at again when the routing changes.
    if !context.scope.owns(&node) {
        return Ok(());
    }
    if !has_taint(&node, UNINITIALIZED_TAINT) {
        return reconcile_labels(context, &node).await;
    }

    let provider = context.provider.current();
    let metadata = checked_metadata(&provider, events, &node).await?;
    let existing_id = node
        .spec
        .as_ref()
        .and_then(|spec| spec.provider_id.clone())
        .filter(|id| !id.is_empty());
    if metadata.provider_id.is_empty() && existing_id.is_none() {
        return Err(SyncError::Invalid(format!(
            "provider {} returned no providerID for node {name}; a node is not initialised without one",
            provider.label()
        )));
    }
    if let Some(provided) = provided_node_ips(&node)? {
        // Validate before untainting, as upstream: a kubelet IP the cloud does not know keeps the node tainted.
        for ip in provided {
            if !metadata
                .node_addresses
                .iter()
                .any(|address| same_ip(&address.address, ip))
            {
                return Err(SyncError::Invalid(format!(
                    "node {name}: {PROVIDED_NODE_IP} {ip} is not among the addresses provider {} reports ({})",
                    provider.label(),
                    describe(&metadata.node_addresses)
                )));
            }
        }
    }

    let initialised = update_node(
        context.client(Controller::CloudNode),
        &node,
        20,
        Duration::from_millis(50),
        |node| {
            // Written only as the node is when written (re-read after a conflict): one
            // relabelled to another provider meanwhile is that provider's to initialise.
            if !context.scope.owns(node) {
                return Err(SyncError::Invalid(format!(
                    "node {name} changed while provider {} answered for it and is no longer its own",
                    provider.label()
                )));
            }
            initialise(node, &metadata);
            Ok(())
        },
    )
    .await?;
    let node = initialised.map(Arc::new).unwrap_or(node);
    if let Some(age) = age(&node) {
        context.metrics.taint_removal_delay.observe(age);
    }
    if let Err(error) = update_addresses(context, &node, &metadata.node_addresses).await {
        tracing::warn!(node = %name, %error, "updating addresses after initialisation failed");
    }
    tracing::info!(node = %name, provider_id = %metadata.provider_id, "initialised node");
    events.normal(
        node.object_ref(&()),
        "Synced",
        "Node synced successfully".into(),
    );
    if let Some(age) = age(&node) {
        context.metrics.initial_node_sync_delay.observe(age);
    }
    Ok(())
}

/// The provider's `instance-metadata` answer for `node`; when the facade refused it, a
/// Warning event on the node naming each refused field, and the refusal.
async fn checked_metadata(
    provider: &Provider,
    events: &super::events::EventSink,
    node: &Node,
) -> Result<InstanceMetadata, SyncError> {
    let view: contract::Node = node_view(node);
    provider.instance_metadata(&view).await.map_err(|error| {
        let error = SyncError::from(error);
        let outcome = format!("nothing of it was written to node {}", name_of(node));
        warn_refused(events, node.object_ref(&()), &error, &outcome);
        error
    })
}

/// Seconds since the node was created.
fn age(node: &Node) -> Option<f64> {
    let created = node.metadata.creation_timestamp.as_ref()?.0;
    let elapsed = Timestamp::now().duration_since(created);
    Some(elapsed.as_secs_f64().max(0.0))
}

/// Apply the cloud's answer, checked: providerID (only if unset: it is immutable), labels,
/// the provider's extra labels (not overwriting the node's), and the taint gone.
fn initialise(node: &mut Node, metadata: &InstanceMetadata) {
    let spec = node.spec.get_or_insert_with(Default::default);
    if spec.provider_id.as_deref().unwrap_or_default().is_empty()
        && !metadata.provider_id.is_empty()
    {
        spec.provider_id = Some(metadata.provider_id.clone());
    }
    if let Some(taints) = spec.taints.as_mut() {
        taints.retain(|taint| taint.key != UNINITIALIZED_TAINT);
    }
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    for (value, keys) in [
        (&metadata.instance_type, [INSTANCE_TYPE, INSTANCE_TYPE_BETA]),
        (&metadata.zone, [ZONE, ZONE_BETA]),
        (&metadata.region, [REGION, REGION_BETA]),
    ] {
        if !value.is_empty() {
            for key in keys {
                labels.insert(key.to_string(), value.clone());
            }
        }
    }
    // Checked before (`answers`): valid, and outside the reserved namespaces.
    for (key, value) in &metadata.additional_labels {
        labels.entry(key.clone()).or_insert_with(|| value.clone());
    }
}

/// On initialised nodes, make each GA label follow its beta label.
async fn reconcile_labels(context: &Context, node: &Arc<Node>) -> Result<(), SyncError> {
    let needed = BETA_TO_GA.iter().any(|(beta, ga)| {
        let labels = labels(node);
        labels
            .get(*beta)
            .is_some_and(|value| labels.get(*ga) != Some(value))
    });
    if !needed {
        return Ok(());
    }
    update_node(
        context.client(Controller::CloudNode),
        node,
        5,
        Duration::from_millis(100),
        |node| {
            let labels = node.metadata.labels.get_or_insert_with(Default::default);
            for (beta, ga) in BETA_TO_GA {
                if let Some(value) = labels.get(beta).cloned() {
                    labels.insert(ga.to_string(), value);
                }
            }
            Ok(())
        },
    )
    .await?;
    Ok(())
}

/// The IPs of `alpha.kubernetes.io/provided-node-ip` (one, or a dual-stack pair).
fn provided_node_ips(node: &Node) -> Result<Option<Vec<IpAddr>>, SyncError> {
    let Some(value) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PROVIDED_NODE_IP))
    else {
        return Ok(None);
    };
    value
        .split(',')
        .map(|ip| {
            ip.trim().parse::<IpAddr>().map_err(|_| {
                SyncError::Invalid(format!(
                    "node {}: annotation {PROVIDED_NODE_IP} {value:?} is not an IP address or a comma-separated pair of them",
                    name_of(node)
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn same_ip(address: &str, ip: IpAddr) -> bool {
    address.parse::<IpAddr>().is_ok_and(|parsed| parsed == ip)
}

/// The addresses for a log line or an error: at most 1 KiB of them (a node may have
/// hundreds).
fn describe(addresses: &[NodeAddress]) -> String {
    let all: Vec<String> = addresses
        .iter()
        .map(|a| format!("{:?} {}", a.kind, a.address))
        .collect();
    if all.is_empty() {
        "none".into()
    } else {
        wasm_ccm_host::text::ellipsized(all.join(", "), 1024)
    }
}

/// The addresses a node should have, given the cloud's: upstream's `updateNodeAddress`
/// rules. `None` means leave the node alone (the cloud reported none).
fn wanted_addresses(
    node: &Node,
    cloud: &[NodeAddress],
) -> Result<Option<Vec<NodeAddress>>, SyncError> {
    if cloud.is_empty() {
        return Ok(None);
    }
    let mut addresses = cloud.to_vec();
    if !addresses.iter().any(|a| a.kind == AddressKind::Hostname) {
        // Keep the hostname the kubelet reported.
        addresses.extend(
            super::views::node_addresses(node)
                .into_iter()
                .filter(|a| a.kind == AddressKind::Hostname),
        );
    }
    let Some(provided) = provided_node_ips(node)? else {
        return Ok(Some(addresses));
    };
    // Each provided IP first; other addresses of a matched type dropped; the rest after, in
    // cloud order.
    let mut enforced = Vec::new();
    let mut enforced_kinds = Vec::new();
    for ip in provided {
        let matched: Vec<&NodeAddress> = addresses
            .iter()
            .filter(|address| same_ip(&address.address, ip))
            .collect();
        if matched.is_empty() {
            return Err(SyncError::Invalid(format!(
                "node {}: {PROVIDED_NODE_IP} {ip} is not among the cloud's addresses ({})",
                name_of(node),
                describe(&addresses)
            )));
        }
        for address in matched {
            enforced.push(address.clone());
            enforced_kinds.push(address.kind);
        }
    }
    enforced.extend(
        addresses
            .iter()
            .filter(|address| !enforced_kinds.contains(&address.kind))
            .cloned(),
    );
    Ok(Some(enforced))
}

/// Patch `status.addresses` if the cloud's (per the rules above) differ from the node's.
async fn update_addresses(
    context: &Context,
    node: &Node,
    cloud: &[NodeAddress],
) -> Result<(), SyncError> {
    let Some(wanted) = wanted_addresses(node, cloud)? else {
        return Ok(());
    };
    if super::views::node_addresses(node) == wanted {
        return Ok(());
    }
    patch_addresses(context, node, &wanted, None).await?;
    tracing::info!(node = %name_of(node), addresses = %describe(&wanted), "updated node addresses");
    Ok(())
}

/// Replace the node's `status.addresses` with `wanted`, only if the node is still at
/// `resource_version` when one is given; the node as written.
async fn patch_addresses(
    context: &Context,
    node: &Node,
    wanted: &[NodeAddress],
    resource_version: Option<&str>,
) -> Result<Node, SyncError> {
    let mut list: Vec<serde_json::Value> = vec![serde_json::json!({ "$patch": "replace" })];
    list.extend(
        wanted
            .iter()
            .map(|address| serde_json::to_value(api_address(address)).unwrap_or_default()),
    );
    let mut patch = serde_json::json!({ "status": { "addresses": list } });
    if let Some(version) = resource_version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    let name = name_of(node);
    Api::<Node>::all(context.client(Controller::CloudNode).clone())
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .map_err(SyncError::kube(format!(
            "patching addresses of node {name}"
        )))
}

/// The DNS-type addresses of `node` that name another node: its name, or its name as the
/// first label of a longer one (the same host under a search domain). The answer checks
/// refuse such a name, but one answered before that node joined stays written, and would
/// send the API server's connections for `node` (`exec`, `logs`, `port-forward`) to it.
fn foreign_names(context: &Context, node: &Node) -> Vec<NodeAddress> {
    let own = Address::name(name_of(node));
    let names_another = |name: &str| {
        let reached = Address::names_reached(name);
        // The node's own name is its own, as the answer checks hold it.
        reached[0] != own
            && reached
                .iter()
                .filter(|reached| **reached != own)
                .filter_map(Address::as_name)
                .any(|name| context.nodes.get(name).is_some())
    };
    super::views::node_addresses(node)
        .into_iter()
        .filter(|address| {
            matches!(
                address.kind,
                AddressKind::Hostname | AddressKind::InternalDNS | AddressKind::ExternalDNS
            ) && names_another(&address.address)
        })
        .collect()
}

/// Remove from `node`'s addresses the names of other nodes ([`foreign_names`]), with a
/// Warning event saying which, unless the node changed since the cache's copy (a conflict:
/// the next sync looks again); the node as it is now.
async fn remove_foreign_names(
    context: &Context,
    events: &super::events::EventSink,
    node: Arc<Node>,
) -> Result<Arc<Node>, SyncError> {
    // The cache's copy now, not the one this sync pass began with.
    let node = context.nodes.get(name_of(&node)).unwrap_or(node);
    let foreign = foreign_names(context, &node);
    if foreign.is_empty() {
        return Ok(node);
    }
    let kept: Vec<NodeAddress> = super::views::node_addresses(&node)
        .into_iter()
        .filter(|address| !foreign.contains(address))
        .collect();
    let version = node.metadata.resource_version.as_deref();
    let written = patch_addresses(context, &node, &kept, version).await?;
    let removed = describe(&foreign);
    tracing::warn!(node = %name_of(&node), %removed, "removed addresses naming other nodes");
    events.warning(
        node.object_ref(&()),
        "AddressNamesAnotherNode",
        format!("removed {removed}: each names another node, which would receive the API server's connections to this node"),
    );
    Ok(Arc::new(written))
}

/// The periodic address sync over every initialised node.
async fn sync_all_addresses(context: &Context, events: &super::events::EventSink) {
    let nodes: Vec<Arc<Node>> = context
        .nodes
        .store()
        .state()
        .into_iter()
        .filter(|node| !has_taint(node, UNINITIALIZED_TAINT) && context.scope.owns(node))
        .collect();
    let parallel = match context.settings.concurrent_node_status_updates {
        0 => context.settings.concurrent_node_syncs.max(1),
        n => n,
    };
    futures::stream::iter(nodes)
        .for_each_concurrent(parallel, |node| async move {
            let result = async {
                let node = remove_foreign_names(context, events, node.clone()).await?;
                let provider = context.provider.current();
                let metadata = checked_metadata(&provider, events, &node).await?;
                update_addresses(context, &node, &metadata.node_addresses).await
            }
            .await;
            if let Err(error) = result {
                tracing::warn!(node = %name_of(&node), %error, "address sync failed");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn address(kind: AddressKind, address: &str) -> NodeAddress {
        NodeAddress {
            kind,
            address: address.into(),
        }
    }

    fn node(provided: Option<&str>, existing: &[NodeAddress]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        if let Some(ip) = provided {
            node.metadata.annotations = Some(BTreeMap::from([(
                PROVIDED_NODE_IP.to_string(),
                ip.to_string(),
            )]));
        }
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            addresses: Some(existing.iter().map(api_address).collect()),
            ..Default::default()
        });
        node
    }

    use AddressKind::*;

    #[test]
    fn kubelet_hostname_is_kept_when_the_cloud_has_none() {
        let cloud = [address(InternalIP, "10.0.0.5")];
        let node = node(None, &[address(Hostname, "n1.local")]);
        let wanted = wanted_addresses(&node, &cloud).unwrap().unwrap();
        assert_eq!(
            wanted,
            vec![
                address(InternalIP, "10.0.0.5"),
                address(Hostname, "n1.local")
            ]
        );
    }

    #[test]
    fn provided_ip_goes_first_and_drops_other_addresses_of_its_type() {
        let cloud = [
            address(InternalIP, "10.0.0.5"),
            address(ExternalIP, "203.0.113.7"),
            address(InternalIP, "10.0.0.6"),
            address(Hostname, "n1"),
        ];
        let wanted = wanted_addresses(&node(Some("10.0.0.6"), &[]), &cloud)
            .unwrap()
            .unwrap();
        assert_eq!(
            wanted,
            vec![
                address(InternalIP, "10.0.0.6"),
                address(ExternalIP, "203.0.113.7"),
                address(Hostname, "n1"),
            ]
        );
    }

    #[test]
    fn dual_stack_provided_ips_both_lead() {
        let cloud = [
            address(InternalIP, "10.0.0.5"),
            address(InternalIP, "fd00::5"),
            address(InternalIP, "10.0.0.9"),
        ];
        let wanted = wanted_addresses(&node(Some("fd00::5,10.0.0.5"), &[]), &cloud)
            .unwrap()
            .unwrap();
        assert_eq!(
            wanted,
            vec![
                address(InternalIP, "fd00::5"),
                address(InternalIP, "10.0.0.5")
            ]
        );
    }

    #[test]
    fn a_provided_ip_the_cloud_does_not_know_is_an_error_naming_it() {
        let cloud = [address(InternalIP, "10.0.0.5")];
        let error = wanted_addresses(&node(Some("10.9.9.9"), &[]), &cloud).unwrap_err();
        assert!(error.to_string().contains("10.9.9.9"), "{error}");
        let error = wanted_addresses(&node(Some("not-an-ip"), &[]), &cloud).unwrap_err();
        assert!(error.to_string().contains(PROVIDED_NODE_IP), "{error}");
    }

    #[test]
    fn no_cloud_addresses_leaves_the_node_alone() {
        assert_eq!(wanted_addresses(&node(None, &[]), &[]).unwrap(), None);
    }

    #[test]
    fn initialise_sets_labels_keeps_existing_provider_id_and_node_labels() {
        let mut node = node(None, &[]);
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some("simcloud://i-old".into()),
            taints: Some(vec![
                k8s_openapi::api::core::v1::Taint {
                    key: UNINITIALIZED_TAINT.into(),
                    value: Some("true".into()),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
                k8s_openapi::api::core::v1::Taint {
                    key: "dedicated".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        node.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        let metadata = InstanceMetadata {
            provider_id: String::new(),
            instance_type: "m1".into(),
            zone: "z1".into(),
            region: "r1".into(),
            additional_labels: vec![
                ("team".into(), "b".into()),
                ("simcloud.example/rack".into(), "r7".into()),
            ],
            ..Default::default()
        };
        initialise(&mut node, &metadata);
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("simcloud://i-old"));
        let taints: Vec<&str> = spec
            .taints
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.key.as_str())
            .collect();
        assert_eq!(taints, ["dedicated"]);
        let labels = node.metadata.labels.unwrap();
        let expected: BTreeMap<String, String> = [
            (INSTANCE_TYPE, "m1"),
            (INSTANCE_TYPE_BETA, "m1"),
            (ZONE, "z1"),
            (ZONE_BETA, "z1"),
            (REGION, "r1"),
            (REGION_BETA, "r1"),
            ("team", "a"),
            ("simcloud.example/rack", "r7"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, expected);
    }
}

//! Which provider serves which nodes and Services when one manager serves several
//! `CloudProvider`s: the [`Fleet`] holds each provider's routing fields as its spec last
//! said, and each provider's controllers see the cluster through a [`Scope`] of it.
//!
//! - A node is the provider's whose name is its `spec.providerID`'s scheme; before it has
//!   one, the provider's whose `nodeSelector` matches its labels (no selector: every node).
//!   A node two providers claim, or none, is no provider's: nothing touches it, and the
//!   [`report`] task says so (Warning event on the node, `wasm_ccm_fleet_nodes`). With one
//!   provider, every node it selects is its own whatever its providerID, as upstream.
//! - A LoadBalancer Service is the provider's whose `loadBalancerClass` is its
//!   `spec.loadBalancerClass`; without one, the default provider's (`default: true`, or the
//!   one provider when it is alone); with a class no provider has, no provider's, as
//!   upstream leaves it to another controller.
//!   Two providers with one class, or two defaults, serve none of those Services.
//! - With several providers, each marks the Services it made a load balancer for with its
//!   own cleanup finalizer (`<CloudProvider>.wasm-ccm.io/load-balancer-cleanup`), so the one
//!   that made a load balancer deletes it however the Service or the specs change later; a
//!   load balancer is deleted only when its Service goes or stops being a load balancer,
//!   never because a spec changed whose it is. The one provider of a manager uses upstream's
//!   (`service.kubernetes.io/load-balancer-cleanup`), as before; beside others, a Service
//!   carrying it (marked while one provider was alone) is cleaned up by the provider that has
//!   its class now (the default, without one).
//!
//! Until every provider's spec has been read, no node or Service is anyone's: a provider
//! read first must not initialise a node a later one also selects. A provider whose object
//! is deleted, or whose routing fields are refused, keeps the routing last read, as its
//! active version keeps serving.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Resource;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::cloud_node::UNINITIALIZED_TAINT;
use super::events::EventSink;
use super::informer::Informer;
use super::service_lb::FINALIZER;
use super::{has_taint, labels, name_of};
use crate::resource::{CloudProviderSpec, LoadBalancerTargets, NodeSelectorSpec, SelectorOperator};

/// How each provider of the manager routes, by `CloudProvider` name (or the one provider
/// of the flags).
#[derive(Debug)]
pub struct Fleet {
    members: watch::Sender<Members>,
    /// By member, the nodes it claims that another member claims too, as [`report`] last
    /// found them; `None` before it first counted them.
    contested: watch::Sender<Option<Contested>>,
}

/// By member, each node it claims with others, and those others.
pub type Contested = BTreeMap<String, Vec<(String, Vec<String>)>>;

/// Each member's routing, as last read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Members(BTreeMap<String, Membership>);

#[derive(Debug, Clone, PartialEq)]
enum Membership {
    /// Its spec has not been read yet.
    Unread,
    /// Its `CloudProvider` was absent, or refused, when first read: it serves nothing.
    Absent,
    /// What its spec says.
    Serving(Route),
}

/// A provider's routing fields, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// `spec.name`: the name the provider reports, the scheme of its provider IDs.
    pub provider: String,
    /// `spec.nodeSelector`; `None`, every node.
    pub node_selector: Option<NodeSelector>,
    /// `spec.loadBalancerClass`.
    pub class: Option<String>,
    /// `spec.default`.
    pub default: Option<bool>,
    /// `spec.loadBalancerTargets`.
    pub targets: LoadBalancerTargets,
}

impl Route {
    /// The routing fields of `spec`; `None` if its node selector is unusable (the spec
    /// parse refuses it, saying why).
    pub fn of(spec: &CloudProviderSpec) -> Option<Route> {
        let node_selector = match &spec.node_selector {
            None => None,
            Some(selector) => Some(NodeSelector::parse(selector).ok()?),
        };
        Some(Route {
            provider: spec.name.clone(),
            node_selector,
            class: spec.load_balancer_class.clone(),
            default: spec.default,
            targets: spec.load_balancer_targets.unwrap_or_default(),
        })
    }

    /// One provider named `provider` serving every node and, as the default, every Service
    /// without a class: the flags' provider.
    pub fn everything(provider: &str) -> Route {
        Route {
            provider: provider.to_string(),
            node_selector: None,
            class: None,
            default: None,
            targets: LoadBalancerTargets::Own,
        }
    }
}

/// A label selector, as Kubernetes matches one: every requirement holds.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSelector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

impl NodeSelector {
    /// `selector`'s `matchLabels` and `matchExpressions`, as the API server validates them
    /// (an empty selector matches every node).
    pub fn parse(selector: &NodeSelectorSpec) -> Result<NodeSelector, String> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .map(|(key, value)| Requirement::In(key.clone(), BTreeSet::from([value.clone()])))
            .collect();
        for (i, expression) in selector.match_expressions.iter().enumerate() {
            let key = expression.key.clone();
            let values: BTreeSet<String> = expression.values.iter().cloned().collect();
            let operator = expression.operator;
            let field = format!("matchExpressions[{i}]");
            let takes_values = matches!(operator, SelectorOperator::In | SelectorOperator::NotIn);
            if takes_values && values.is_empty() {
                return Err(format!(
                    "{field}: operator {operator:?} needs at least one value"
                ));
            }
            if !takes_values && !values.is_empty() {
                return Err(format!("{field}: operator {operator:?} takes no values"));
            }
            requirements.push(match operator {
                SelectorOperator::In => Requirement::In(key, values),
                SelectorOperator::NotIn => Requirement::NotIn(key, values),
                SelectorOperator::Exists => Requirement::Exists(key),
                SelectorOperator::DoesNotExist => Requirement::DoesNotExist(key),
            });
        }
        Ok(NodeSelector(requirements))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|requirement| match requirement {
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        })
    }
}

/// Whose a node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This member's.
    Member(String),
    /// Several members claim it (by providerID scheme, or by node selector), named here.
    Contested(Vec<String>),
    /// No member claims it.
    Unowned,
    /// Not every member's spec has been read yet.
    Pending,
}

impl Fleet {
    /// A fleet of the named `CloudProvider`s, none read yet.
    pub fn of_resources(names: &[String]) -> Arc<Fleet> {
        let members = names
            .iter()
            .map(|name| (name.clone(), Membership::Unread))
            .collect();
        Arc::new(Fleet {
            members: watch::Sender::new(Members(members)),
            contested: watch::Sender::default(),
        })
    }

    /// The one provider named by flags, serving everything.
    pub fn of_flags(provider: &str) -> Arc<Fleet> {
        Arc::new(Fleet {
            members: watch::Sender::new(Members(BTreeMap::from([(
                provider.to_string(),
                Membership::Serving(Route::everything(provider)),
            )]))),
            contested: watch::Sender::default(),
        })
    }

    /// Set `member`'s routing from its spec as read (`None`: the object is absent), as
    /// its rollout reads it. A member whose object is gone, or whose spec is refused (its
    /// routing fields unusable: the spec parse says why), keeps the routing last read, as its
    /// active version keeps serving; one never read serves nothing.
    pub fn read(&self, member: &str, spec: Option<&CloudProviderSpec>) {
        let read = spec.and_then(Route::of).map(Membership::Serving);
        self.members.send_if_modified(|members| {
            let Some(current) = members.0.get_mut(member) else {
                return false;
            };
            let next = match read {
                Some(membership) => membership,
                None if matches!(current, Membership::Serving(_)) => return false,
                None => Membership::Absent,
            };
            if *current == next {
                return false;
            }
            *current = next;
            true
        });
    }

    /// A feed that changes whenever a member's routing does.
    pub fn changes(&self) -> watch::Receiver<Members> {
        self.members.subscribe()
    }

    /// Whether the manager serves several providers.
    pub fn several(&self) -> bool {
        self.members.borrow().0.len() > 1
    }

    /// The members' names.
    pub fn names(&self) -> Vec<String> {
        self.members.borrow().0.keys().cloned().collect()
    }

    /// A feed of the nodes each member claims with others, as the leader last found them
    /// (`None` until it has).
    pub fn contested(&self) -> watch::Receiver<Option<Contested>> {
        self.contested.subscribe()
    }

    /// Whose `node` is.
    pub fn owner_of(&self, node: &Node) -> Owner {
        self.members.borrow().owner_of(node)
    }

    /// `member`'s view of the cluster.
    pub fn scope(self: &Arc<Fleet>, member: &str) -> Scope {
        Scope {
            fleet: self.clone(),
            member: member.to_string(),
        }
    }
}

impl Members {
    fn serving(&self) -> impl Iterator<Item = (&String, &Route)> {
        self.0
            .iter()
            .filter_map(|(name, membership)| match membership {
                Membership::Serving(route) => Some((name, route)),
                _ => None,
            })
    }

    /// Whether a member's spec has not been read yet: then nothing is anyone's.
    fn pending(&self) -> bool {
        self.0.values().any(|m| *m == Membership::Unread)
    }

    fn owner_of(&self, node: &Node) -> Owner {
        if self.pending() {
            return Owner::Pending;
        }
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref())
            .filter(|id| !id.is_empty());
        let claimants: Vec<&String> = match provider_id {
            Some(id) => {
                let scheme = id.split_once("://").map_or(id, |(scheme, _)| scheme);
                let by_scheme: Vec<&String> = self
                    .serving()
                    .filter(|(_, route)| route.provider == scheme)
                    .map(|(name, _)| name)
                    .collect();
                match self.0.len() {
                    // Alone, a provider serves what it selects whatever the providerID says,
                    // as upstream serves every node.
                    1 if by_scheme.is_empty() => self
                        .serving()
                        .filter(|(_, route)| selects(route, node))
                        .map(|(name, _)| name)
                        .collect(),
                    _ => by_scheme,
                }
            }
            None => self
                .serving()
                .filter(|(_, route)| selects(route, node))
                .map(|(name, _)| name)
                .collect(),
        };
        match claimants.as_slice() {
            [] => Owner::Unowned,
            [one] => Owner::Member((*one).clone()),
            several => Owner::Contested(several.iter().map(|name| (*name).clone()).collect()),
        }
    }

    /// Whether `member` makes the load balancers of Services without a class: it says
    /// `default: true` and no other does, or it is alone and does not say `false`.
    fn is_default(&self, member: &str) -> bool {
        let Some(Membership::Serving(route)) = self.0.get(member) else {
            return false;
        };
        match route.default {
            Some(true) => !self
                .serving()
                .any(|(name, other)| name != member && other.default == Some(true)),
            Some(false) => false,
            None => self.0.len() == 1,
        }
    }

    /// Whether another serving member reports the same provider name (their provider IDs
    /// would be one).
    fn name_shared(&self, member: &str, route: &Route) -> bool {
        self.serving()
            .any(|(name, other)| name != member && other.provider == route.provider)
    }

    /// Whether another serving member has load-balancer class `class` too: then neither
    /// serves it, as neither may take the other's Services.
    fn class_shared(&self, member: &str, class: &str) -> bool {
        self.serving()
            .any(|(name, other)| name != member && other.class.as_deref() == Some(class))
    }
}

fn selects(route: &Route, node: &Node) -> bool {
    route
        .node_selector
        .as_ref()
        .is_none_or(|selector| selector.matches(labels(node)))
}

/// One provider's view of the cluster: the nodes and Services that are its own.
#[derive(Clone)]
pub struct Scope {
    fleet: Arc<Fleet>,
    member: String,
}

impl Scope {
    /// The member: its `CloudProvider`'s name, or the flags' provider name.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Whether the manager serves several providers (and names them in health checks, queue
    /// metrics and logs).
    pub fn several(&self) -> bool {
        self.fleet.several()
    }

    /// Whether `node` is a target of this provider's load balancers, if eligible: every
    /// node with `loadBalancerTargets: All`, else its own.
    pub fn targets(&self, node: &Node) -> bool {
        let every_node = matches!(
            self.fleet.members.borrow().0.get(&self.member),
            Some(Membership::Serving(route)) if route.targets == LoadBalancerTargets::All
        );
        every_node || self.owns(node)
    }

    /// Whether a provider's spec has not been read yet: no node or Service is anyone's.
    pub fn pending(&self) -> bool {
        self.fleet.members.borrow().pending()
    }

    /// Whether `node` is this provider's.
    pub fn owns(&self, node: &Node) -> bool {
        matches!(self.fleet.owner_of(node), Owner::Member(member) if member == self.member)
    }

    /// A feed that changes whenever any provider's routing does (what is this one's may
    /// change).
    pub fn changes(&self) -> watch::Receiver<Members> {
        self.fleet.changes()
    }

    /// Which Services are this provider's, and how it marks them, as the specs say now:
    /// none until every spec is read, none of a class another provider has too, none without
    /// a class unless it is the one default.
    pub fn load_balancers(&self) -> LoadBalancers {
        let members = self.fleet.members.borrow();
        let several = members.0.len() > 1;
        let pending = members.pending();
        let route = match members.0.get(&self.member) {
            Some(Membership::Serving(route))
                if !pending && !members.name_shared(&self.member, route) =>
            {
                Some(route)
            }
            _ => None,
        };
        let default = route.is_some() && members.is_default(&self.member);
        let own = format!("{}{FINALIZER_SUFFIX}", self.member);
        LoadBalancers {
            serves: route.is_some(),
            class: route
                .and_then(|route| route.class.clone())
                .filter(|class| !members.class_shared(&self.member, class)),
            default,
            // The member's own, whatever its spec says now: only it ever wrote it.
            finalizer: match several {
                true => own.clone(),
                false => FINALIZER.to_string(),
            },
            // Alone, it still cleans up what it made beside others.
            own,
            alone: !several,
        }
    }
}

/// The suffix of a provider's own cleanup finalizer, after its `CloudProvider`'s name (which
/// never changes, whatever its spec says).
pub const FINALIZER_SUFFIX: &str = ".wasm-ccm.io/load-balancer-cleanup";
/// The longest `CloudProvider` name that serves beside others: its finalizer's prefix,
/// `NAME.wasm-ccm.io`, must be a DNS subdomain (253 characters).
pub const MAX_MEMBER_NAME: usize = 253 - ".wasm-ccm.io".len();

/// Which Services a provider makes load balancers for, and how it marks them.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadBalancers {
    /// Whether its spec is read and usable.
    serves: bool,
    /// Its class.
    class: Option<String>,
    /// Whether it serves Services without a class.
    default: bool,
    /// The finalizer it adds.
    finalizer: String,
    /// Its own finalizer (`NAME.wasm-ccm.io/load-balancer-cleanup`), which it cleans up even
    /// alone, after serving beside others.
    own: String,
    /// Whether it is the manager's one provider (and, as upstream, clears the status of a
    /// Service it is asked about that wants no load balancer).
    alone: bool,
}

impl LoadBalancers {
    /// The flags' one provider: every Service without a class, upstream's finalizer.
    #[cfg(test)]
    pub fn single() -> LoadBalancers {
        LoadBalancers {
            serves: true,
            class: None,
            default: true,
            finalizer: FINALIZER.to_string(),
            own: format!("simcloud{FINALIZER_SUFFIX}"),
            alone: true,
        }
    }

    /// Whether a Service with this `loadBalancerClass` is this provider's.
    pub fn serves_class(&self, class: Option<&str>) -> bool {
        self.serves
            && match class {
                None => self.default,
                Some(class) => self.class.as_deref() == Some(class),
            }
    }

    /// The finalizer this provider adds before its first cloud call for a Service.
    pub fn finalizer(&self) -> &str {
        &self.finalizer
    }

    /// Whether `service` carries the finalizer this provider adds (not only one it adopts).
    pub fn marked(&self, service: &Service) -> bool {
        service
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| *f == self.finalizer)
    }

    /// The finalizers on `service` that are this provider's to remove once its load
    /// balancer is gone: the one it adds, its own, and upstream's when it is alone or serves
    /// the Service's class (a Service marked while one provider served alone is the one of
    /// whichever provider has its class now).
    pub fn own_finalizers<'a>(&self, service: &'a Service) -> Vec<&'a str> {
        let class = service
            .spec
            .as_ref()
            .and_then(|spec| spec.load_balancer_class.as_deref());
        let adopts_upstream = self.alone || self.serves_class(class);
        service
            .metadata
            .finalizers
            .iter()
            .flatten()
            .map(String::as_str)
            .filter(|f| {
                *f == self.finalizer || *f == self.own || (adopts_upstream && *f == FINALIZER)
            })
            .collect()
    }

    /// Whether it is the manager's one provider.
    pub fn alone(&self) -> bool {
        self.alone
    }
}

/// Nodes by whose they are: `wasm_ccm_fleet_nodes{member, state}`.
#[derive(Clone, Default)]
pub struct FleetMetrics {
    nodes: Family<FleetLabels, Gauge>,
}

/// A member and the state of the nodes counted.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetLabels {
    /// The `CloudProvider` (or flags' provider) that serves them; empty for `contested` and
    /// `unowned`.
    pub member: String,
    /// `owned`, `contested` (several claim them) or `unowned` (none does).
    pub state: String,
}

impl FleetMetrics {
    /// Add the gauge to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasm_ccm_fleet_nodes",
            "Nodes by the provider that serves them; contested (several providers claim them) and unowned (none does) are touched by none",
            self.nodes.clone(),
        );
    }
}

/// The least time between two passes of [`report`] over every node.
const REPORT_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Count nodes by owner and report each node that several providers claim (a Warning event
/// on it, and to the claimants' rollouts for their `NodesUncontested` condition), or that
/// none does while it waits to be initialised (a Warning event), once per change of verdict,
/// until `stop` is cancelled. Runs on the leader, when the manager serves several providers.
pub async fn report(
    fleet: Arc<Fleet>,
    nodes: Informer<Node>,
    events: EventSink,
    metrics: FleetMetrics,
    stop: CancellationToken,
) {
    let mut changes = nodes.subscribe();
    let mut routing = fleet.changes();
    tokio::select! {
        () = stop.cancelled() => return,
        () = nodes.wait_synced() => {}
    }
    let mut reported: BTreeMap<String, Owner> = BTreeMap::new();
    loop {
        let owners: Vec<(Arc<Node>, Owner)> = nodes
            .store()
            .state()
            .into_iter()
            .map(|node| {
                let owner = fleet.owner_of(&node);
                (node, owner)
            })
            .collect();
        count(&fleet, &metrics, &owners);
        let mut contested = Contested::new();
        for (node, owner) in &owners {
            if let Owner::Contested(members) = owner {
                for member in members {
                    let others = members.iter().filter(|m| *m != member).cloned().collect();
                    contested
                        .entry(member.clone())
                        .or_default()
                        .push((name_of(node).to_string(), others));
                }
            }
        }
        fleet.contested.send_if_modified(|current| {
            let counted = Some(std::mem::take(&mut contested));
            let changed = *current != counted;
            *current = counted;
            changed
        });
        let mut seen = BTreeMap::new();
        for (node, owner) in owners {
            let name = name_of(&node).to_string();
            let worth_reporting = match &owner {
                Owner::Contested(_) => true,
                Owner::Unowned => has_taint(&node, UNINITIALIZED_TAINT),
                Owner::Member(_) | Owner::Pending => false,
            };
            if worth_reporting && reported.get(&name) != Some(&owner) {
                warn(&events, &node, &owner);
            }
            if worth_reporting || matches!(owner, Owner::Pending) {
                seen.insert(name, owner);
            }
        }
        reported = seen;
        tokio::select! {
            () = stop.cancelled() => return,
            notice = changes.next() => if notice.is_none() { return },
            Ok(()) = routing.changed() => {}
        }
        // Changes that come together (the first list, many nodes joining) make one pass.
        tokio::time::sleep(REPORT_PAUSE).await;
        while let Some(Some(_)) = changes.next().now_or_never() {}
    }
}

fn count(fleet: &Fleet, metrics: &FleetMetrics, owners: &[(Arc<Node>, Owner)]) {
    let mut counts: BTreeMap<(String, &str), i64> = fleet
        .names()
        .into_iter()
        .map(|name| ((name, "owned"), 0))
        .chain([
            ((String::new(), "contested"), 0),
            ((String::new(), "unowned"), 0),
        ])
        .collect();
    for (_, owner) in owners {
        let key = match owner {
            Owner::Member(member) => (member.clone(), "owned"),
            Owner::Contested(_) => (String::new(), "contested"),
            Owner::Unowned => (String::new(), "unowned"),
            Owner::Pending => continue,
        };
        *counts.entry(key).or_default() += 1;
    }
    for ((member, state), value) in counts {
        metrics
            .nodes
            .get_or_create(&FleetLabels {
                member,
                state: state.to_string(),
            })
            .set(value);
    }
}

fn warn(events: &EventSink, node: &Node, owner: &Owner) {
    let name = name_of(node);
    let (reason, note) = match owner {
        Owner::Contested(members) => (
            "ProviderContested",
            format!(
                "CloudProviders {} all claim node {name} (by its providerID's scheme, or their nodeSelector); none touches it until one does: narrow their spec.nodeSelector",
                members.join(", ")
            ),
        ),
        _ => (
            "NoProvider",
            format!(
                "no CloudProvider of this manager claims node {name} (neither its providerID's scheme nor a spec.nodeSelector); it stays uninitialised until one does"
            ),
        ),
    };
    tracing::warn!(node = %name, "{note}");
    events.warning(node.object_ref(&()), reason, note);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(provider_id: Option<&str>, labels: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: provider_id.map(String::from),
            ..Default::default()
        });
        node
    }

    fn spec(value: serde_json::Value) -> CloudProviderSpec {
        let mut spec = serde_json::json!({"provider": "file:///p.wasm", "name": "simcloud"});
        spec.as_object_mut()
            .unwrap()
            .extend(value.as_object().unwrap().clone());
        serde_json::from_value(spec).unwrap()
    }

    fn fleet(specs: &[(&str, serde_json::Value)]) -> Arc<Fleet> {
        let names: Vec<String> = specs.iter().map(|(name, _)| name.to_string()).collect();
        let fleet = Fleet::of_resources(&names);
        for (name, value) in specs {
            fleet.read(name, Some(&spec(value.clone())));
        }
        fleet
    }

    #[test]
    fn a_node_is_its_schemes_provider_and_before_that_its_selectors() {
        let fleet = fleet(&[
            (
                "cloud",
                serde_json::json!({"name": "simcloud", "nodeSelector": {"matchLabels": {"site": "cloud"}}}),
            ),
            (
                "metal",
                serde_json::json!({"name": "metal", "nodeSelector": {"matchExpressions": [{"key": "site", "operator": "In", "values": ["edge", "dc"]}]}}),
            ),
        ]);
        assert_eq!(
            fleet.owner_of(&node(None, &[("site", "cloud")])),
            Owner::Member("cloud".into())
        );
        assert_eq!(
            fleet.owner_of(&node(None, &[("site", "dc")])),
            Owner::Member("metal".into())
        );
        assert_eq!(
            fleet.owner_of(&node(None, &[("site", "moon")])),
            Owner::Unowned
        );
        // The providerID wins over the labels.
        assert_eq!(
            fleet.owner_of(&node(Some("metal://m-1"), &[("site", "cloud")])),
            Owner::Member("metal".into())
        );
        // A scheme no provider has is none's, when there are several.
        assert_eq!(
            fleet.owner_of(&node(Some("aws:///i-1"), &[("site", "cloud")])),
            Owner::Unowned
        );
    }

    #[test]
    fn a_node_two_providers_select_is_contested_and_nothing_is_owned_before_every_spec_is_read() {
        let fleet = Fleet::of_resources(&["a".into(), "b".into()]);
        fleet.read("a", Some(&spec(serde_json::json!({"name": "a"}))));
        assert_eq!(fleet.owner_of(&node(None, &[])), Owner::Pending);
        fleet.read("b", Some(&spec(serde_json::json!({"name": "b"}))));
        assert_eq!(
            fleet.owner_of(&node(None, &[])),
            Owner::Contested(vec!["a".into(), "b".into()])
        );
        // Two resources reporting one name both claim its provider IDs.
        fleet.read("b", Some(&spec(serde_json::json!({"name": "a"}))));
        assert!(matches!(
            fleet.owner_of(&node(Some("a://1"), &[])),
            Owner::Contested(_)
        ));
    }

    #[test]
    fn alone_a_provider_serves_every_node_it_selects_whatever_its_provider_id() {
        let fleet = Fleet::of_flags("simcloud");
        assert_eq!(
            fleet.owner_of(&node(Some("other://x"), &[])),
            Owner::Member("simcloud".into())
        );
        let fleet = fleet_one(serde_json::json!({"nodeSelector": {"matchLabels": {"a": "b"}}}));
        assert_eq!(fleet.owner_of(&node(None, &[])), Owner::Unowned);
    }

    fn fleet_one(value: serde_json::Value) -> Arc<Fleet> {
        fleet(&[("only", value)])
    }

    #[test]
    fn services_go_by_class_and_the_default_takes_those_without() {
        let fleet = fleet(&[
            (
                "cloud",
                serde_json::json!({"name": "simcloud", "default": true, "loadBalancerClass": "wasm-ccm.io/simcloud"}),
            ),
            (
                "metal",
                serde_json::json!({"name": "metal", "loadBalancerClass": "wasm-ccm.io/metal", "loadBalancerTargets": "All"}),
            ),
        ]);
        let cloud = fleet.scope("cloud").load_balancers();
        let metal = fleet.scope("metal").load_balancers();
        assert!(cloud.serves_class(None) && !metal.serves_class(None));
        assert!(cloud.serves_class(Some("wasm-ccm.io/simcloud")));
        assert!(
            metal.serves_class(Some("wasm-ccm.io/metal"))
                && !cloud.serves_class(Some("wasm-ccm.io/metal"))
        );
        assert!(
            !cloud.serves_class(Some("example.com/other"))
                && !metal.serves_class(Some("example.com/other"))
        );
        assert_eq!(metal.finalizer(), "metal.wasm-ccm.io/load-balancer-cleanup");
        // Upstream's finalizer (a Service marked while one provider served alone) is the
        // provider's that has the Service's class now: the default's without one.
        let mut service = Service::default();
        service.metadata.finalizers = Some(vec![FINALIZER.into(), metal.finalizer().into()]);
        assert_eq!(cloud.own_finalizers(&service), vec![FINALIZER]);
        assert_eq!(metal.own_finalizers(&service), vec![metal.finalizer()]);
        service.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            load_balancer_class: Some("wasm-ccm.io/metal".into()),
            ..Default::default()
        });
        assert!(cloud.own_finalizers(&service).is_empty());
        assert_eq!(
            metal.own_finalizers(&service),
            vec![FINALIZER, metal.finalizer()]
        );
    }

    #[test]
    fn a_class_two_providers_have_is_served_by_neither_and_nothing_before_every_spec_is_read() {
        let fleet = Fleet::of_resources(&["a".into(), "b".into()]);
        fleet.read(
            "a",
            Some(&spec(
                serde_json::json!({"name": "a", "default": true, "loadBalancerClass": "x.io/lb"}),
            )),
        );
        let a = fleet.scope("a");
        assert!(a.pending());
        assert!(!a.load_balancers().serves_class(None), "b is not read yet");
        fleet.read(
            "b",
            Some(&spec(
                serde_json::json!({"name": "b", "loadBalancerClass": "x.io/lb"}),
            )),
        );
        assert!(!a.pending());
        let (a, b) = (a.load_balancers(), fleet.scope("b").load_balancers());
        assert!(a.serves_class(None));
        assert!(!a.serves_class(Some("x.io/lb")) && !b.serves_class(Some("x.io/lb")));
        // Each still cleans up what it made, by its own finalizer.
        assert_eq!(b.finalizer(), "b.wasm-ccm.io/load-balancer-cleanup");
    }

    #[test]
    fn a_deleted_resource_or_refused_routing_keeps_the_routing_last_read() {
        let fleet = fleet(&[
            (
                "a",
                serde_json::json!({"name": "a", "nodeSelector": {"matchLabels": {"site": "a"}}}),
            ),
            (
                "b",
                serde_json::json!({"name": "b", "nodeSelector": {"matchLabels": {"site": "b"}}}),
            ),
        ]);
        let at_b = node(None, &[("site", "b")]);
        fleet.read("b", None);
        assert_eq!(fleet.owner_of(&at_b), Owner::Member("b".into()));
        let refused = spec(
            serde_json::json!({"name": "b", "nodeSelector": {"matchExpressions": [{"key": "site", "operator": "In"}]}}),
        );
        fleet.read("b", Some(&refused));
        assert_eq!(fleet.owner_of(&at_b), Owner::Member("b".into()));
        // Never read and absent: nothing.
        let fleet = Fleet::of_resources(&["a".into(), "b".into()]);
        fleet.read("a", Some(&spec(serde_json::json!({"name": "a"}))));
        fleet.read("b", None);
        assert_eq!(fleet.owner_of(&at_b), Owner::Member("a".into()));
    }

    #[test]
    fn two_defaults_serve_no_service_without_a_class_and_one_alone_is_the_default() {
        let fleet = fleet(&[
            ("a", serde_json::json!({"name": "a", "default": true})),
            ("b", serde_json::json!({"name": "b", "default": true})),
        ]);
        assert!(!fleet.scope("a").load_balancers().serves_class(None));
        assert!(!fleet.scope("b").load_balancers().serves_class(None));
        let alone = fleet_one(serde_json::json!({}));
        let lbs = alone.scope("only").load_balancers();
        assert!(lbs.serves_class(None));
        assert_eq!(lbs.finalizer(), FINALIZER);
        let declined = fleet_one(serde_json::json!({"default": false}));
        assert!(!declined.scope("only").load_balancers().serves_class(None));
    }

    #[test]
    fn selectors_match_as_kubernetes_matches_them_and_bad_ones_are_refused() {
        let selector = |expressions: serde_json::Value| {
            NodeSelector::parse(
                &serde_json::from_value(serde_json::json!({"matchExpressions": expressions}))
                    .unwrap(),
            )
        };
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let not_in =
            selector(serde_json::json!([{"key": "k", "operator": "NotIn", "values": ["x"]}]))
                .unwrap();
        assert!(not_in.matches(&labels(&[])) && not_in.matches(&labels(&[("k", "y")])));
        assert!(!not_in.matches(&labels(&[("k", "x")])));
        let absent =
            selector(serde_json::json!([{"key": "k", "operator": "DoesNotExist"}])).unwrap();
        assert!(absent.matches(&labels(&[])) && !absent.matches(&labels(&[("k", "")])));
        for (bad, says) in [
            (
                serde_json::json!([{"key": "k", "operator": "In"}]),
                "needs at least one value",
            ),
            (
                serde_json::json!([{"key": "k", "operator": "Exists", "values": ["v"]}]),
                "takes no values",
            ),
        ] {
            let error = selector(bad).unwrap_err();
            assert!(
                error.contains(says) && error.contains("matchExpressions[0]"),
                "{error}"
            );
        }
    }
}

//! The load-balancer targets: the nodes every load balancer sends traffic to, as the
//! provider sees them. Upstream's node predicates decide membership (not being deleted, not
//! excluded by label, not being removed by the cluster autoscaler), plus being initialised
//! and, when the manager serves several providers, being this provider's own unless its
//! spec asks for every node ([`Scope::targets`]).
//!
//! The set is kept up to date from node changes, so a Service sync takes it in constant
//! time instead of filtering, sorting and converting every node of the cluster: with 5,000
//! nodes and 1,000 Services that work would be repeated a thousand times for one answer.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::controllers::cloud_node::UNINITIALIZED_TAINT;
use crate::controllers::fleet::Scope;
use crate::controllers::informer::Change;
use crate::controllers::views::node_view;
use crate::controllers::{has_taint, labels, name_of};
use wasm_ccm_host::contract;

const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
const AUTOSCALER_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// A fingerprint of the (name, providerID) of each target: remembering it for every
/// Service costs 8 bytes, where the set itself would cost 1,000 Services times 5,000 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSet(u64);

/// The current targets and what a sync is handed of them.
#[derive(Default)]
pub struct Targets {
    /// The provider whose targets these are; `None`, any node's.
    scope: Option<Scope>,
    /// The provider's view of each target node, by node name.
    views: BTreeMap<String, contract::Node>,
    /// The last answer of [`Targets::current`], until a target's view changes.
    current: Option<(NodeSet, Arc<[contract::Node]>)>,
}

impl Targets {
    /// No targets yet, of the provider `scope` names.
    pub fn of(scope: Scope) -> Targets {
        Targets {
            scope: Some(scope),
            ..Targets::default()
        }
    }

    fn admits(&self, node: &Node) -> bool {
        is_target(node) && self.scope.as_ref().is_none_or(|scope| scope.targets(node))
    }

    /// Start over from every node in the cache (first list, or after missed changes).
    pub fn reset(&mut self, nodes: impl IntoIterator<Item = Arc<Node>>) {
        self.views = nodes
            .into_iter()
            .filter(|node| self.admits(node))
            .map(|node| (name_of(&node).to_string(), node_view(&node)))
            .collect();
        self.current = None;
    }

    /// Take one node change into account. True when the set of (name, providerID) changed,
    /// the upstream rule for updating every load balancer; a target whose labels or
    /// addresses changed is passed as it is now to later calls, without forcing updates.
    pub fn apply(&mut self, change: &Change<Node>) -> bool {
        let (name, now) = match change {
            Change::Added(node) | Change::Updated { new: node, .. } => {
                (name_of(node), self.admits(node).then(|| node_view(node)))
            }
            Change::Deleted(node) => (name_of(node), None),
        };
        let before = self.views.get(name);
        if before == now.as_ref() {
            return false;
        }
        let membership_changed =
            before.map(|view| &view.provider_id) != now.as_ref().map(|view| &view.provider_id);
        match now {
            Some(view) => self.views.insert(name.to_string(), view),
            None => self.views.remove(name),
        };
        self.current = None;
        membership_changed
    }

    /// The targets in name order, and their [`NodeSet`]. Built once after a change and
    /// shared by every sync until the next: a thousand Services syncing at once hold one
    /// copy of 5,000 nodes, not one each.
    pub fn current(&mut self) -> (NodeSet, Arc<[contract::Node]>) {
        let views = &self.views;
        self.current
            .get_or_insert_with(|| {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                for (name, view) in views {
                    (name, &view.provider_id).hash(&mut hasher);
                }
                (NodeSet(hasher.finish()), views.values().cloned().collect())
            })
            .clone()
    }
}

/// Whether a node is a load-balancer target.
fn is_target(node: &Node) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if let Some(value) = labels(node).get(EXCLUDE_LABEL) {
        // An unparsable value excludes the node, as upstream.
        if parse_bool(value) != Some(false) {
            return false;
        }
    }
    !has_taint(node, AUTOSCALER_TAINT) && !has_taint(node, UNINITIALIZED_TAINT)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    fn node(name: &str, labels: &[(&str, &str)], taints: &[&str]) -> Arc<Node> {
        Arc::new(Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|key| Taint {
                            key: key.to_string(),
                            effect: "NoSchedule".into(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn with_provider_id(node: &Node, id: &str) -> Arc<Node> {
        let mut node = node.clone();
        node.spec.as_mut().unwrap().provider_id = Some(id.into());
        Arc::new(node)
    }

    fn names(targets: &mut Targets) -> Vec<String> {
        targets.current().1.iter().map(|n| n.name.clone()).collect()
    }

    #[test]
    fn node_predicates_follow_upstream_and_skip_uninitialised_nodes() {
        assert!(is_target(&node("n", &[], &[])));
        assert!(is_target(&node("n", &[(EXCLUDE_LABEL, "false")], &[])));
        assert!(!is_target(&node("n", &[(EXCLUDE_LABEL, "true")], &[])));
        assert!(
            !is_target(&node("n", &[(EXCLUDE_LABEL, "maybe")], &[])),
            "unparsable excludes"
        );
        assert!(!is_target(&node("n", &[], &[AUTOSCALER_TAINT])));
        assert!(!is_target(&node("n", &[], &[UNINITIALIZED_TAINT])));
        assert!(
            is_target(&node("n", &[], &["node.kubernetes.io/not-ready"])),
            "readiness is not considered"
        );
    }

    #[test]
    fn membership_and_provider_id_changes_matter_readiness_does_not() {
        let mut targets = Targets::default();
        let b = node("b", &[], &[]);
        targets.reset([b.clone(), node("excluded", &[(EXCLUDE_LABEL, "true")], &[])]);
        let (first, _) = targets.current();
        assert_eq!(names(&mut targets), ["b"]);

        let a = node("a", &[], &[UNINITIALIZED_TAINT]);
        assert!(!targets.apply(&Change::Added(a.clone())), "not initialised");
        let a_ready = with_provider_id(&node("a", &[], &[]), "sim://a");
        assert!(targets.apply(&Change::Updated {
            old: a.clone(),
            new: a_ready.clone()
        }));
        assert_eq!(names(&mut targets), ["a", "b"], "in name order");
        assert_ne!(targets.current().0, first);

        let b_moved = with_provider_id(&b, "sim://other");
        assert!(targets.apply(&Change::Updated {
            old: b.clone(),
            new: b_moved.clone()
        }));
        let not_ready = with_provider_id(
            &node("b", &[], &["node.kubernetes.io/not-ready"]),
            "sim://other",
        );
        assert!(!targets.apply(&Change::Updated {
            old: b_moved,
            new: not_ready
        }));
        assert!(
            !targets.apply(&Change::Added(a_ready.clone())),
            "seen already"
        );
        assert!(targets.apply(&Change::Deleted(a_ready)));
        assert_eq!(names(&mut targets), ["b"]);
    }

    #[test]
    fn beside_other_providers_the_targets_are_its_own_nodes_unless_its_spec_asks_for_all() {
        use crate::controllers::fleet::Fleet;
        let fleet = Fleet::of_resources(&["cloud".into(), "metal".into()]);
        for (member, site, targets) in [("cloud", "c", "Own"), ("metal", "m", "All")] {
            let spec = serde_json::from_value(serde_json::json!({
                "provider": "file:///p.wasm",
                "name": member,
                "nodeSelector": {"matchLabels": {"site": site}},
                "loadBalancerTargets": targets,
            }))
            .unwrap();
            fleet.read(member, Some(&spec));
        }
        let nodes = [
            node("c1", &[("site", "c")], &[]),
            node("m1", &[("site", "m")], &[]),
            node("x1", &[("site", "x")], &[]),
        ];
        let mut own = Targets::of(fleet.scope("cloud"));
        own.reset(nodes.clone());
        assert_eq!(names(&mut own), ["c1"]);
        let mut all = Targets::of(fleet.scope("metal"));
        all.reset(nodes);
        assert_eq!(names(&mut all), ["c1", "m1", "x1"]);
    }

    #[test]
    fn a_label_change_refreshes_the_view_without_changing_the_set() {
        let mut targets = Targets::default();
        let plain = node("n", &[], &[]);
        targets.reset([plain.clone()]);
        let (set, before) = targets.current();
        let labelled = node("n", &[("zone", "z1")], &[]);
        assert!(!targets.apply(&Change::Updated {
            old: plain,
            new: labelled
        }));
        let (set_after, after) = targets.current();
        assert_eq!(set, set_after);
        assert!(before[0].labels.is_empty());
        assert_eq!(after[0].labels, [("zone".to_string(), "z1".to_string())]);
    }
}

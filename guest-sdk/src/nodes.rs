//! The nodes a load balancer sends traffic to, as a provider reads them.
//!
//! The host lends a load-balancer call its nodes as a `node-set` and copies into the
//! provider only what it reads: [`Nodes::provider_ids`] of 5,000 nodes costs a fraction of
//! taking every node whole. A host without node sets passes the nodes as a list; the same
//! methods read it.

use crate::Node;
use crate::bindings::wasm_ccm::provider::node_sets::NodeSet;
use crate::labels::LabelSelector;

/// How many whole nodes one read of a lent set copies, so [`Nodes::all`] never asks the
/// host for one huge answer.
const NODES_PER_READ: u32 = 1024;

/// The nodes a load balancer should send traffic to, in node-name order.
pub struct Nodes<'a>(Source<'a>);

enum Source<'a> {
    /// Lent by the host for this call.
    Lent(&'a NodeSet),
    /// Passed as a list (a host without node sets, or a test).
    Listed(Vec<Node>),
}

impl<'a> Nodes<'a> {
    /// The nodes the host lent this call.
    pub(crate) fn lent(set: &'a NodeSet) -> Nodes<'a> {
        Nodes(Source::Lent(set))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Source::Lent(set) => set.len() as usize,
            Source::Listed(nodes) => nodes.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The nodes' names, in order.
    pub fn names(&self) -> Vec<String> {
        match &self.0 {
            Source::Lent(set) => set.names(),
            Source::Listed(nodes) => nodes.iter().map(|node| node.name.clone()).collect(),
        }
    }

    /// The nodes' `spec.providerID`s, in order; `None` for a node without one.
    pub fn provider_ids(&self) -> Vec<Option<String>> {
        match &self.0 {
            Source::Lent(set) => set.provider_ids(),
            Source::Listed(nodes) => nodes.iter().map(|node| node.provider_id.clone()).collect(),
        }
    }

    /// Every node whole (labels and annotations as [`crate::Capabilities::node_metadata`]
    /// declares them): the costliest read; prefer the one field you need.
    pub fn all(&self) -> Vec<Node> {
        match &self.0 {
            Source::Lent(set) => {
                let len = set.len();
                let mut nodes = Vec::with_capacity(len as usize);
                let mut start = 0;
                while start < len {
                    let read = set.nodes(start, NODES_PER_READ);
                    if read.is_empty() {
                        break;
                    }
                    start += read.len() as u32;
                    nodes.extend(read);
                }
                nodes
            }
            Source::Listed(nodes) => nodes.clone(),
        }
    }

    /// The provider IDs of the nodes `selector` matches, in order (without a selector,
    /// every node's, reading provider IDs only; with one, whole nodes, as their labels are
    /// needed).
    pub fn selected(&self, selector: Option<&LabelSelector>) -> Selected {
        let Some(selector) = selector else {
            return Selected {
                provider_ids: self.provider_ids(),
                names: None,
                of: None,
            };
        };
        let all = self.all();
        let of = all.len();
        let (provider_ids, names) = all
            .into_iter()
            .filter(|node| selector.matches(&node.labels))
            .map(|node| (node.provider_id, node.name))
            .unzip();
        Selected {
            provider_ids,
            names: Some(names),
            of: Some(of),
        }
    }
}

/// The nodes a [`LabelSelector`] chose: [`Nodes::selected`].
pub struct Selected {
    /// Their provider IDs, in node-name order; `None` for a node without one.
    pub provider_ids: Vec<Option<String>>,
    /// Their names, if whole nodes were read.
    names: Option<Vec<String>>,
    /// How many nodes they were chosen from, when a selector chose them.
    pub of: Option<usize>,
}

impl Selected {
    /// Their names, in the order of [`Selected::provider_ids`] (read from `nodes`, the set
    /// they were chosen from, only if whole nodes were not).
    pub fn names(&self, nodes: &Nodes<'_>) -> Vec<String> {
        self.names.clone().unwrap_or_else(|| nodes.names())
    }
}

impl From<Vec<Node>> for Nodes<'static> {
    fn from(nodes: Vec<Node>) -> Nodes<'static> {
        Nodes(Source::Listed(nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, tier: &str, provider_id: Option<&str>) -> Node {
        Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: vec![("tier".into(), tier.into())],
            annotations: vec![],
            provider_id: provider_id.map(str::to_string),
            addresses: vec![],
            pod_cidrs: vec![],
        }
    }

    #[test]
    fn a_selector_chooses_the_nodes_with_its_labels_and_names_them() {
        let nodes = Nodes::from(vec![
            node("a", "gold", Some("sim://a")),
            node("b", "lead", Some("sim://b")),
            node("c", "gold", None),
        ]);
        let every = nodes.selected(None);
        assert_eq!(
            every.provider_ids,
            [Some("sim://a".into()), Some("sim://b".into()), None]
        );
        assert_eq!(
            (every.of, every.names(&nodes)),
            (None, vec!["a".into(), "b".into(), "c".into()])
        );

        let gold = LabelSelector::parse("tier=gold", &["tier".into()])
            .unwrap()
            .unwrap();
        let chosen = nodes.selected(Some(&gold));
        assert_eq!(chosen.provider_ids, [Some("sim://a".into()), None]);
        assert_eq!(
            (chosen.of, chosen.names(&nodes)),
            (Some(3), vec!["a".into(), "c".into()])
        );
    }
}

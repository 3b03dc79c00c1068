//! The nodes a load balancer sends traffic to, as a provider reads them.
//!
//! The host lends a load-balancer call its nodes as a `node-set` and copies into the
//! provider only what it reads: [`Nodes::provider_ids`] of 5,000 nodes costs a fraction of
//! taking every node whole. A host without node sets passes the nodes as a list; the same
//! methods read it.

use crate::Node;
use crate::bindings::wasm_ccm::provider::node_sets::NodeSet;

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
}

impl From<Vec<Node>> for Nodes<'static> {
    fn from(nodes: Vec<Node>) -> Nodes<'static> {
        Nodes(Source::Listed(nodes))
    }
}

//! The `node-sets` interface: the nodes of one load-balancer call, lent to a provider as a
//! `node-set` it reads field by field.
//!
//! The set is the service controller's own list, shared (an `Arc`): lending it copies
//! nothing, and it lives in the call's resource table, so it goes with the call. Each read
//! copies only what it returns (names, provider IDs, or whole nodes with the declared
//! labels and annotations) into the guest, where it counts against the call's memory cap;
//! the host holds that copy only while it lowers it. A provider that reads again and again
//! spends its own deadline.

use std::sync::Arc;

use wasmtime::component::Resource;

use super::CallState;
use super::bindings::GuestNode;
use super::bindings::wasm_ccm::provider::node_sets::{Host, HostNodeSet};
use super::bindings::wasm_ccm::provider::types::Node as WitNode;
use crate::contract as c;

/// The nodes a load-balancer call lends its guest, in the order the caller gave them.
pub struct NodeSet {
    nodes: Arc<[c::Node]>,
}

impl NodeSet {
    pub(crate) fn new(nodes: Arc<[c::Node]>) -> NodeSet {
        NodeSet { nodes }
    }
}

impl CallState {
    fn node_set(&self, set: &Resource<NodeSet>) -> wasmtime::Result<&[c::Node]> {
        Ok(&self.table.get(set)?.nodes)
    }
}

impl Host for CallState {}

impl HostNodeSet for CallState {
    fn len(&mut self, set: Resource<NodeSet>) -> wasmtime::Result<u32> {
        Ok(u32::try_from(self.node_set(&set)?.len()).unwrap_or(u32::MAX))
    }

    fn names(&mut self, set: Resource<NodeSet>) -> wasmtime::Result<Vec<String>> {
        Ok(self
            .node_set(&set)?
            .iter()
            .map(|node| node.name.clone())
            .collect())
    }

    fn provider_ids(&mut self, set: Resource<NodeSet>) -> wasmtime::Result<Vec<Option<String>>> {
        Ok(self
            .node_set(&set)?
            .iter()
            .map(|node| node.provider_id.clone())
            .collect())
    }

    fn nodes(
        &mut self,
        set: Resource<NodeSet>,
        start: u32,
        count: u32,
    ) -> wasmtime::Result<Vec<WitNode>> {
        let keys = self.env.node_metadata.as_ref();
        let nodes = self.node_set(&set)?;
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        Ok(nodes
            .iter()
            .skip(start)
            .take(count)
            .map(|node| GuestNode::new(node, keys).into())
            .collect())
    }

    fn drop(&mut self, set: Resource<NodeSet>) -> wasmtime::Result<()> {
        self.table.delete(set)?;
        Ok(())
    }
}

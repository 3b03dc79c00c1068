//! `legacy`: a provider built against the world `cloud-provider` alone, as providers built
//! before `node-sets` are, with bare wit-bindgen (the SDK builds the world with node sets).
//! The host must keep passing it load-balancer nodes as a `list<node>`.
//!
//! `update-load-balancer` and `ensure-load-balancer` answer
//! `other({"read": <nodes>, "labels": <labels of all nodes>, "provider_ids": <nodes with one>})`,
//! so a test sees what arrived and a benchmark measures what passing it cost. With a cloud
//! config `{"labels": [KEY…]}`, `init` declares those node labels; without one it declares
//! none (and so sees every label). Everything else answers `not-implemented`.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "cloud-provider",
});

use exports::wasm_ccm::provider::{instances, load_balancer, provider, routes};
use wasm_ccm::provider::types::{
    Capabilities, InstanceMetadata, LbStatus, Node, NodeMetadataKeys, ProviderError, Route, Service,
};

struct Legacy;

impl provider::Guest for Legacy {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, ProviderError> {
        let node_metadata = match config {
            None => None,
            Some(bytes) => {
                let config: serde_json::Value = serde_json::from_slice(&bytes)
                    .map_err(|e| ProviderError::Other(format!("cloud config is not JSON: {e}")))?;
                let labels = config["labels"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|key| key.as_str().map(String::from))
                    .collect();
                Some(NodeMetadataKeys {
                    labels,
                    annotations: vec![],
                })
            }
        };
        Ok(Capabilities {
            name: "legacy".into(),
            instances: false,
            load_balancer: true,
            routes: false,
            has_cluster_id: true,
            node_metadata,
        })
    }
}

/// What arrived: the report every node-carrying call answers with.
fn report(nodes: &[Node]) -> ProviderError {
    let labels: usize = nodes.iter().map(|node| node.labels.len()).sum();
    let provider_ids = nodes
        .iter()
        .filter(|node| node.provider_id.is_some())
        .count();
    ProviderError::Other(
        serde_json::json!({"read": nodes.len(), "labels": labels, "provider_ids": provider_ids})
            .to_string(),
    )
}

impl load_balancer::Guest for Legacy {
    fn get_load_balancer(_: String, _: Service) -> Result<Option<LbStatus>, ProviderError> {
        Err(ProviderError::NotImplemented)
    }

    fn get_load_balancer_name(_: String, _: Service) -> String {
        "legacy".into()
    }

    fn ensure_load_balancer(
        _: String,
        _: Service,
        nodes: Vec<Node>,
    ) -> Result<LbStatus, ProviderError> {
        Err(report(&nodes))
    }

    fn update_load_balancer(_: String, _: Service, nodes: Vec<Node>) -> Result<(), ProviderError> {
        Err(report(&nodes))
    }

    fn ensure_load_balancer_deleted(_: String, _: Service) -> Result<(), ProviderError> {
        Err(ProviderError::NotImplemented)
    }
}

impl instances::Guest for Legacy {
    fn instance_exists(_: Node) -> Result<bool, ProviderError> {
        Err(ProviderError::NotImplemented)
    }

    fn instance_shutdown(_: Node) -> Result<bool, ProviderError> {
        Err(ProviderError::NotImplemented)
    }

    fn instance_metadata(_: Node) -> Result<InstanceMetadata, ProviderError> {
        Err(ProviderError::NotImplemented)
    }
}

impl routes::Guest for Legacy {
    fn list_routes(_: String) -> Result<Vec<Route>, ProviderError> {
        Err(ProviderError::NotImplemented)
    }

    fn create_route(_: String, _: String, _: Route) -> Result<(), ProviderError> {
        Err(ProviderError::NotImplemented)
    }

    fn delete_route(_: String, _: Route) -> Result<(), ProviderError> {
        Err(ProviderError::NotImplemented)
    }
}

export!(Legacy);

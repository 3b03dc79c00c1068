//! Which instances a Service's load balancer targets: those of every node, or, with the
//! annotation `simcloud.wasm-ccm.io/load-balancer-target-node-labels` (`key=value,key2`,
//! after AWS's `service.beta.kubernetes.io/aws-load-balancer-target-node-labels`), those of
//! the nodes with every label it names.
//!
//! Without the annotation only the nodes' provider IDs are read (and the names of nodes
//! skipped); whole nodes, with the labels `init` declared, only for a Service with it.

use std::collections::HashSet;

use wasm_ccm_sdk::labels::LabelSelector;
use wasm_ccm_sdk::{Error, Nodes, Service};

use crate::config::{Config, TARGET_NODE_LABEL_KEYS};
use crate::instances::instance_id_of;

/// The Service annotation choosing target nodes by their labels.
pub const TARGET_NODE_LABELS: &str = "simcloud.wasm-ccm.io/load-balancer-target-node-labels";

/// The target nodes `svc` asks for: `None` without the annotation or with no entry in it
/// (every node, as upstream). Each key must be one of the configured
/// `target_node_label_keys`, the only labels the host passes this provider.
pub fn selector_of(svc: &Service, config: &Config) -> Result<Option<LabelSelector>, Error> {
    let Some((_, value)) = svc
        .annotations
        .iter()
        .find(|(k, _)| k == TARGET_NODE_LABELS)
    else {
        return Ok(None);
    };
    LabelSelector::parse(value, &config.target_node_label_keys).map_err(|error| {
        let problem = error.explained(TARGET_NODE_LABEL_KEYS, &config.target_node_label_keys);
        Error::other(format!(
            "service {}/{}: {TARGET_NODE_LABELS} {problem}",
            svc.namespace, svc.name
        ))
    })
}

/// The instance ids of `nodes` (only those `selector` matches, when there is one), in order
/// and without duplicates; nodes without a provider ID of this provider (`name`) are
/// skipped.
pub fn target_ids(nodes: &Nodes<'_>, selector: Option<&LabelSelector>, name: &str) -> Vec<String> {
    let selected = nodes.selected(selector);
    if let Some(of) = selected.of {
        let chosen = selected.provider_ids.len();
        wasm_ccm_sdk::info!("{chosen} of {of} nodes have the labels of {TARGET_NODE_LABELS}");
    }
    let provider_ids = &selected.provider_ids;
    let mut ids: Vec<String> = Vec::with_capacity(provider_ids.len());
    let mut seen = HashSet::with_capacity(provider_ids.len());
    let mut skipped = Vec::new();
    for (index, provider_id) in provider_ids.iter().enumerate() {
        match provider_id
            .as_deref()
            .and_then(|id| instance_id_of(id, name))
        {
            Some(id) if !seen.insert(id) => {}
            Some(id) => ids.push(id.to_string()),
            None => skipped.push(index),
        }
    }
    if !skipped.is_empty() {
        let names = selected.names(nodes);
        for index in skipped {
            wasm_ccm_sdk::info!(
                "node {} is not a load-balancer target: provider ID {:?} is not {name}://",
                names[index],
                provider_ids[index]
            );
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keys: &[&str]) -> Config {
        Config {
            api_url: "http://sim.test".into(),
            name: crate::config::DEFAULT_NAME.into(),
            proxy_protocol: false,
            target_node_label_keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    fn service(annotation: Option<&str>) -> Service {
        Service {
            name: "web".into(),
            namespace: "shop".into(),
            uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
            labels: vec![],
            annotations: annotation
                .map(|value| (TARGET_NODE_LABELS.to_string(), value.to_string()))
                .into_iter()
                .collect(),
            service_type: "LoadBalancer".into(),
            ports: vec![],
            external_traffic_policy: None,
            health_check_node_port: None,
            load_balancer_source_ranges: vec![],
            load_balancer_ip: None,
            ip_families: vec![],
            session_affinity: None,
            load_balancer_class: None,
            status: wasm_ccm_sdk::LbStatus { ingress: vec![] },
        }
    }

    fn selector(value: &str) -> Result<Option<LabelSelector>, String> {
        selector_of(
            &service(Some(value)),
            &config(&["node-role.simcloud.test/lb", "tier"]),
        )
        .map_err(|error| match error {
            Error::Other(message) => message,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn target_node_labels_select_nodes_only_when_given() {
        let without = selector_of(&service(None), &config(&[])).unwrap();
        assert_eq!(without, None, "every node, read cheaply");
        assert_eq!(selector(" , ").unwrap(), None, "no entry: every node");
        let edge = selector("node-role.simcloud.test/lb=edge")
            .unwrap()
            .unwrap();
        let labels =
            |value: &str| vec![("node-role.simcloud.test/lb".to_string(), value.to_string())];
        assert!(edge.matches(&labels("edge")));
        assert!(!edge.matches(&labels("inner")));
    }

    #[test]
    fn bad_target_node_labels_are_refused_naming_the_annotation_and_the_entry() {
        for (value, problem) in [
            ("=edge", "entry \"=edge\" has no label key"),
            (
                "kubernetes.io/hostname=n1",
                "names node label \"kubernetes.io/hostname\", which the provider does not \
                 read: add it to \"target_node_label_keys\" in the cloud config \
                 (now [\"node-role.simcloud.test/lb\", \"tier\"])",
            ),
        ] {
            assert_eq!(
                selector(value).unwrap_err(),
                format!("service shop/web: {TARGET_NODE_LABELS} {problem}"),
                "{value}"
            );
        }
    }
}

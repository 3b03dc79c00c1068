//! Which instances a Service's load balancer targets: those of every node, or, with the
//! annotation `simcloud.wasm-ccm.io/load-balancer-target-node-labels` (`key=value,key2`,
//! after AWS's `service.beta.kubernetes.io/aws-load-balancer-target-node-labels`), those of
//! the nodes with every label it names.
//!
//! Without the annotation only the nodes' provider IDs are read (and the names of nodes
//! skipped); whole nodes, with the labels `init` declared, only for a Service with it.

use std::collections::HashSet;

use wasm_ccm_sdk::{Error, Nodes, Service};

use crate::config::{Config, TARGET_NODE_LABEL_KEYS};
use crate::instances::instance_id_of;

/// The Service annotation choosing target nodes by their labels.
pub const TARGET_NODE_LABELS: &str = "simcloud.wasm-ccm.io/load-balancer-target-node-labels";

/// The labels a node needs to be a target, as upstream's `filterTargetNodes`: every label,
/// with the value where one is given (`key` and `key=` ask for the label with any value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSelector(Vec<(String, Option<String>)>);

impl NodeSelector {
    /// The selector of `svc`: `None` without the annotation or with no entry in it (every
    /// node, as upstream). Each key must be one of the configured `target_node_label_keys`,
    /// the only labels the host passes this provider; an entry without a key, with two `=`,
    /// or a key given twice is refused.
    pub fn of(svc: &Service, config: &Config) -> Result<Option<NodeSelector>, Error> {
        let Some((_, value)) = svc
            .annotations
            .iter()
            .find(|(k, _)| k == TARGET_NODE_LABELS)
        else {
            return Ok(None);
        };
        let mut wanted: Vec<(String, Option<String>)> = Vec::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (key, value) = match entry.split_once('=') {
                Some((key, value)) => (key.trim(), Some(value.trim())),
                None => (entry, None),
            };
            let bad = |why: &str| refused(svc, &format!("entry {entry:?} {why}"));
            if key.is_empty() {
                return Err(bad("has no label key"));
            }
            if value.is_some_and(|value| value.contains('=')) {
                return Err(bad("has more than one '=': write key=value or key"));
            }
            if wanted.iter().any(|(k, _)| k == key) {
                return Err(bad("names a label key given before"));
            }
            if !config.target_node_label_keys.iter().any(|k| k == key) {
                return Err(refused(
                    svc,
                    &format!(
                        "names node label {key:?}, which the provider does not read: add it to \
                         \"{TARGET_NODE_LABEL_KEYS}\" in the cloud config (now {:?})",
                        config.target_node_label_keys
                    ),
                ));
            }
            let value = value.filter(|value| !value.is_empty()).map(str::to_string);
            wanted.push((key.to_string(), value));
        }
        Ok((!wanted.is_empty()).then_some(NodeSelector(wanted)))
    }

    /// Whether a node with `labels` is a target.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.0.iter().all(|(key, wanted)| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .is_some_and(|(_, value)| wanted.as_ref().is_none_or(|wanted| wanted == value))
        })
    }
}

/// A refusal of the Service's annotation, naming the Service and the annotation.
fn refused(svc: &Service, problem: &str) -> Error {
    Error::other(format!(
        "service {}/{}: {TARGET_NODE_LABELS} {problem}",
        svc.namespace, svc.name
    ))
}

/// The instance ids of `nodes` (only those `selector` matches, when there is one), in order
/// and without duplicates; nodes without a simcloud provider ID are skipped.
pub fn target_ids(nodes: &Nodes<'_>, selector: Option<&NodeSelector>) -> Vec<String> {
    let (provider_ids, names) = match selector {
        // Only the provider IDs (and the names, to report a skipped node).
        None => (nodes.provider_ids(), None),
        Some(selector) => {
            let all = nodes.all();
            let total = all.len();
            let (ids, names): (Vec<_>, Vec<_>) = all
                .into_iter()
                .filter(|node| selector.matches(&node.labels))
                .map(|node| (node.provider_id, node.name))
                .unzip();
            wasm_ccm_sdk::info!(
                "{} of {total} nodes have the labels of {TARGET_NODE_LABELS}",
                ids.len()
            );
            (ids, Some(names))
        }
    };
    let mut ids: Vec<String> = Vec::with_capacity(provider_ids.len());
    let mut seen = HashSet::with_capacity(provider_ids.len());
    let mut skipped = Vec::new();
    for (index, provider_id) in provider_ids.iter().enumerate() {
        match provider_id.as_deref().and_then(instance_id_of) {
            Some(id) if !seen.insert(id) => {}
            Some(id) => ids.push(id.to_string()),
            None => skipped.push(index),
        }
    }
    if !skipped.is_empty() {
        let names = names.unwrap_or_else(|| nodes.names());
        for index in skipped {
            wasm_ccm_sdk::info!(
                "node {} is not a load-balancer target: provider ID {:?} is not simcloud://",
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

    fn selector(value: &str) -> Result<Option<NodeSelector>, String> {
        NodeSelector::of(
            &service(Some(value)),
            &config(&["node-role.simcloud.test/lb", "tier"]),
        )
        .map_err(|error| match error {
            Error::Other(message) => message,
            other => panic!("{other:?}"),
        })
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn target_node_labels_parse_as_a_key_value_list() {
        let without = NodeSelector::of(&service(None), &config(&[])).unwrap();
        assert_eq!(without, None, "every node, read cheaply");
        assert_eq!(selector(" , ").unwrap(), None, "no entry: every node");
        assert_eq!(
            selector(" node-role.simcloud.test/lb = edge , tier,, ").unwrap(),
            Some(NodeSelector(vec![
                ("node-role.simcloud.test/lb".into(), Some("edge".into())),
                ("tier".into(), None),
            ]))
        );
        assert_eq!(
            selector("tier=").unwrap(),
            Some(NodeSelector(vec![("tier".into(), None)])),
            "`key=` asks for the label with any value, as `key` does"
        );
    }

    #[test]
    fn target_node_labels_need_every_label_with_its_value_where_given() {
        let selector = selector("node-role.simcloud.test/lb=edge,tier")
            .unwrap()
            .unwrap();
        for target in [
            labels(&[("tier", "gold"), ("node-role.simcloud.test/lb", "edge")]),
            labels(&[("node-role.simcloud.test/lb", "edge"), ("tier", "")]),
        ] {
            assert!(selector.matches(&target), "{target:?}");
        }
        for other in [
            labels(&[("node-role.simcloud.test/lb", "edge")]),
            labels(&[("node-role.simcloud.test/lb", "inner"), ("tier", "gold")]),
            labels(&[("node-role.simcloud.test/lb", "Edge"), ("tier", "gold")]),
            labels(&[("tier", "gold")]),
            labels(&[]),
        ] {
            assert!(!selector.matches(&other), "{other:?}");
        }
    }

    #[test]
    fn bad_target_node_labels_are_refused_naming_the_annotation_and_the_entry() {
        for (value, problem) in [
            ("=edge", "entry \"=edge\" has no label key"),
            (
                "tier=a=b",
                "entry \"tier=a=b\" has more than one '=': write key=value or key",
            ),
            (
                "tier=a,tier=b",
                "entry \"tier=b\" names a label key given before",
            ),
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

//! `simcloud`: the reference wasm-ccm provider, for the bundled cloud simulator
//! (`tests/cloud-sim`). This file owns the provider's identity (`init` and its capabilities)
//! and the component export; each contract interface lives in its own module.
//!
//! # Cloud config
//!
//! `--cloud-config` is JSON: `{"api_url": "http://127.0.0.1:8080", "proxy_protocol": false,
//! "target_node_label_keys": ["node-role.example.com/lb"]}`.
//! `api_url` (required) is the simulator's base URL, `http://` or `https://`, optionally with
//! a path prefix; `/v1/...` is appended to it. `name` (default `simcloud`, a DNS label) is
//! the name `init` reports and the scheme of provider IDs, so a second simulator can be a
//! second provider of one manager (`"name": "edgecloud"`: `edgecloud://i-…`). `proxy_protocol` (default `false`) makes load
//! balancers speak the PROXY protocol, reported as ip-mode `proxy` instead of `vip`.
//! `target_node_label_keys` (default none) lists the node label keys a Service's
//! target-node-labels annotation may name: `init` declares them in
//! `capabilities.node-metadata`, so the host passes these labels and no other.
//! Unknown fields are refused.
//!
//! The provider never sets credentials: the host adds `Authorization: Bearer …` to requests
//! bound for the granted simulator.
//!
//! # Annotations
//!
//! - `simcloud.wasm-ccm.io/load-balancer-target-node-labels` on a Service (`key=value,key2`,
//!   after AWS's `aws-load-balancer-target-node-labels`): its load balancer targets only the
//!   nodes with every label, with the value where one is given (`key` or `key=`: any value).
//!   Each key must be in `target_node_label_keys`; a malformed entry or another key is a
//!   provider error naming the annotation. Without it (or with no entry) every node is a
//!   target and only the nodes' provider IDs are read.
//!
//! # Names
//!
//! - Provider IDs: `simcloud://<instance-id>`, e.g. `simcloud://i-0123abcd`.
//! - Load balancers: upstream's `DefaultLoadBalancerName`, `"a"` + the Service UID without
//!   dashes, truncated to 32 characters; found by that name within the cluster.
//! - Routes: `<cluster>-<node-uid>-<cidr with every non-alphanumeric character as '-'>`,
//!   e.g. `kubernetes-4f1c…-10-244-1-0-24`; `list-routes` reports the simulator's route id as
//!   the route name.
//!
//! # Build stamp
//!
//! A build compiled with `SIMCLOUD_BUILD=<stamp>` in its environment (read with
//! `option_env!`, so the stamp is part of the component and of its digest) behaves
//! observably differently, so tests can see a swap between two builds on every Node and
//! Service. The stamp must be a DNS label (`v2`); an empty one counts as none.
//!
//! - `instance-metadata` adds the label `simcloud.wasm-ccm.io/build: <stamp>` to the ones it
//!   returns.
//! - Load-balancer ingress points carry the hostname `<stamp>.<simulator hostname>`, or
//!   `<stamp>.<load balancer name>.lb.simcloud.test` while the simulator hands out IPs only,
//!   next to the IP.
//!
//! Nothing cloud-side changes: load balancer, route and instance names are the same, so a
//! stamped build adopts what an unstamped one created. Without the stamp, none of this
//! happens.

mod api;
mod config;
mod instances;
mod load_balancers;
mod model;
mod routes;
mod targets;

use wasm_ccm_sdk::{Capabilities, Error, NodeMetadataKeys, export_provider};

use crate::config::Config;

/// The build stamp (see the module doc): `SIMCLOUD_BUILD` at compile time, if set.
pub(crate) const BUILD: Option<&str> = build_stamp(option_env!("SIMCLOUD_BUILD"));

/// `stamp` unless it is empty; a stamp that is no DNS label fails the build, since it would
/// make every label and ingress hostname it lands in invalid.
const fn build_stamp(stamp: Option<&'static str>) -> Option<&'static str> {
    match stamp {
        Some(stamp) if !stamp.is_empty() => {
            assert!(
                is_dns_label(stamp.as_bytes()),
                "SIMCLOUD_BUILD must be a DNS label: lowercase letters, digits and '-', at \
                 most 63 characters, starting and ending with a letter or digit"
            );
            Some(stamp)
        }
        _ => None,
    }
}

const fn is_dns_label(label: &[u8]) -> bool {
    if label.is_empty() || label.len() > 63 || label[0] == b'-' || label[label.len() - 1] == b'-' {
        return false;
    }
    let mut i = 0;
    while i < label.len() {
        if !matches!(label[i], b'a'..=b'z' | b'0'..=b'9' | b'-') {
            return false;
        }
        i += 1;
    }
    true
}

/// The provider: every contract interface is implemented on this type.
struct SimCloud;

impl wasm_ccm_sdk::Provider for SimCloud {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        let config = Config::parse(config)?;
        match BUILD {
            Some(build) => {
                wasm_ccm_sdk::info!("simcloud provider (build {build}) for {}", config.api_url)
            }
            None => wasm_ccm_sdk::info!("simcloud provider for {}", config.api_url),
        }
        Ok(Capabilities {
            name: config.name,
            instances: true,
            load_balancer: true,
            routes: true,
            has_cluster_id: true,
            // Nodes are found by provider ID and name; only the labels Services may choose
            // their targets by are read, and no annotation.
            node_metadata: Some(NodeMetadataKeys {
                labels: config.target_node_label_keys,
                annotations: vec![],
            }),
        })
    }
}

export_provider!(SimCloud);

//! `simcloud`: the reference wasm-ccm provider, for the bundled cloud simulator
//! (`tests/cloud-sim`). This file owns the provider's identity (`init` and its capabilities)
//! and the component export; each contract interface lives in its own module.
//!
//! # Cloud config
//!
//! `--cloud-config` is JSON: `{"api_url": "http://127.0.0.1:8080", "proxy_protocol": false}`.
//! `api_url` (required) is the simulator's base URL, `http://` or `https://`, optionally with
//! a path prefix; `/v1/...` is appended to it. `proxy_protocol` (default `false`) makes load
//! balancers speak the PROXY protocol, reported as ip-mode `proxy` instead of `vip`.
//! Unknown fields are refused.
//!
//! The provider never sets credentials: the host adds `Authorization: Bearer …` to requests
//! bound for the granted simulator.
//!
//! # Names
//!
//! - Provider IDs: `simcloud://<instance-id>`, e.g. `simcloud://i-0123abcd`.
//! - Load balancers: upstream's `DefaultLoadBalancerName`, `"a"` + the Service UID without
//!   dashes, truncated to 32 characters; found by that name within the cluster.
//! - Routes: `<cluster>-<node-uid>-<cidr with every non-alphanumeric character as '-'>`,
//!   e.g. `kubernetes-4f1c…-10-244-1-0-24`; `list-routes` reports the simulator's route id as
//!   the route name.

mod api;
mod config;
mod instances;
mod load_balancers;
mod model;
mod routes;

use wasm_ccm_sdk::{Capabilities, Error, NodeMetadataKeys, export_provider};

use crate::config::Config;

/// The provider: every contract interface is implemented on this type.
struct SimCloud;

impl wasm_ccm_sdk::Provider for SimCloud {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        let config = Config::parse(config)?;
        wasm_ccm_sdk::info!("simcloud provider for {}", config.api_url);
        Ok(Capabilities {
            name: "simcloud".into(),
            instances: true,
            load_balancer: true,
            routes: true,
            has_cluster_id: true,
            // Nodes are found by provider ID and name: no label or annotation is read.
            node_metadata: Some(NodeMetadataKeys {
                labels: vec![],
                annotations: vec![],
            }),
        })
    }
}

export_provider!(SimCloud);

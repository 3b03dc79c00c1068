//! `rollout`: a provider that answers every function with a fixed, valid result unless its
//! cloud config tells it to fail, so hot-swap tests can drive refused rollouts (`init`
//! fails, wrong name, dropped capability) and rollbacks (a version that traps on some calls)
//! without a cloud behind it.
//!
//! The cloud config is JSON; every key is optional and an unknown key fails `init`:
//!
//! ```json
//! {"name": "simcloud", "instances": true, "loadBalancer": true, "routes": true,
//!  "failInit": "message", "trapEvery": 3, "failNodes": "bad-"}
//! ```
//!
//! | key | default | effect |
//! |---|---|---|
//! | `name` | `"rollout"` | the name `init` reports |
//! | `instances`, `loadBalancer`, `routes` | `true` | the capabilities `init` reports |
//! | `failInit` | — | `init` fails with `other(<failInit>)` |
//! | `trapEvery` | — | every Nth call after `init` traps (N ≥ 1; 1 traps every call) |
//! | `failNodes` | — | the instance calls for a node whose name starts with it fail with `other` |
//! | `initRequest` | — | `init` sends a `GET` to this URL first (its answer, or failure, ignored) |
//! | `refuseLoadBalancers` | `false` | `ensure-load-balancer` answers the ingress IP `127.0.0.1`, which the host refuses |
//!
//! `init` otherwise reports `has-cluster-id` and reads no node labels or annotations (an empty
//! `node-metadata`, so calls carry none). The calls answer:
//!
//! | function | answer |
//! |---|---|
//! | `instance-exists` | `true` |
//! | `instance-shutdown` | `false` |
//! | `instance-metadata` | provider ID `<name>://<node name>`, instance type `rollout`, nothing else |
//! | `get-load-balancer` | `None` |
//! | `get-load-balancer-name` | `rollout-<service name>` |
//! | `ensure-load-balancer` | one ingress: IP `192.0.2.1`, ip-mode `vip`, the Service's ports |
//! | `update-load-balancer`, `ensure-load-balancer-deleted` | `Ok` |
//! | `list-routes` | no routes |
//! | `create-route`, `delete-route` | `Ok` |
//!
//! Calls are counted in the host cache (every call runs in a fresh instance, so memory does
//! not outlive it), and only when `trapEvery` is set. The count is shared by all calls of the
//! version, and read and written without a lock: calls that overlap may read the same count,
//! so under concurrency the traps come about, not exactly, every Nth call.

use std::num::NonZeroU64;
use std::time::Duration;

use serde::Deserialize;
use wasm_ccm_sdk::{
    Capabilities, Error, InstanceMetadata, IpMode, LbIngress, LbStatus, Node, NodeMetadataKeys,
    Nodes, PortStatus, Route, Service, cache, export_provider,
};

/// Host-cache key of the call count, and how long it lives (the host's maximum).
const CALLS: &str = "calls";
const CALLS_TTL: Duration = Duration::from_secs(3600);

/// The cloud config (see the module doc).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Config {
    name: String,
    instances: bool,
    load_balancer: bool,
    routes: bool,
    fail_init: Option<String>,
    trap_every: Option<NonZeroU64>,
    fail_nodes: Option<String>,
    init_request: Option<String>,
    refuse_load_balancers: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "rollout".into(),
            instances: true,
            load_balancer: true,
            routes: true,
            fail_init: None,
            trap_every: None,
            fail_nodes: None,
            init_request: None,
            refuse_load_balancers: false,
        }
    }
}

/// Count this call and trap if it is a multiple of `trapEvery`. A config that does not parse
/// never traps: `init` refused it, so no call runs with it.
fn call() {
    let Some(every) = wasm_ccm_sdk::config::parse::<Config>(wasm_ccm_sdk::config::raw())
        .ok()
        .and_then(|config| config.trap_every)
    else {
        return;
    };
    let count = cache::get_json::<u64>(CALLS).unwrap_or(0) + 1;
    // Stored before the trap: the host cache outlives the trapped instance.
    cache::set_json(CALLS, &count, CALLS_TTL);
    if count.is_multiple_of(every.get()) {
        panic!("rollout guest traps on call {count} (trapEvery {every})");
    }
}

/// Fail if `node` is one `failNodes` names.
fn instance_call(node: &Node) -> Result<(), Error> {
    call();
    let prefix = wasm_ccm_sdk::config::parse::<Config>(wasm_ccm_sdk::config::raw())
        .ok()
        .and_then(|config| config.fail_nodes);
    match prefix {
        Some(prefix) if node.name.starts_with(&prefix) => Err(Error::other(format!(
            "rollout guest fails node {} (failNodes {prefix:?})",
            node.name
        ))),
        _ => Ok(()),
    }
}

/// The provider.
struct Rollout;

impl wasm_ccm_sdk::Provider for Rollout {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        let config: Config = wasm_ccm_sdk::config::parse(config)?;
        if let Some(url) = &config.init_request {
            let _ = wasm_ccm_sdk::http::get(url);
        }
        if let Some(message) = config.fail_init {
            return Err(Error::other(message));
        }
        Ok(Capabilities {
            name: config.name,
            instances: config.instances,
            load_balancer: config.load_balancer,
            routes: config.routes,
            has_cluster_id: true,
            node_metadata: Some(NodeMetadataKeys {
                labels: vec![],
                annotations: vec![],
            }),
        })
    }
}

impl wasm_ccm_sdk::Instances for Rollout {
    fn instance_exists(node: Node) -> Result<bool, Error> {
        instance_call(&node)?;
        Ok(true)
    }

    fn instance_shutdown(node: Node) -> Result<bool, Error> {
        instance_call(&node)?;
        Ok(false)
    }

    fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
        instance_call(&node)?;
        let name = wasm_ccm_sdk::config::parse::<Config>(wasm_ccm_sdk::config::raw())
            .map_or_else(|_| Config::default().name, |config| config.name);
        Ok(InstanceMetadata {
            provider_id: format!("{name}://{}", node.name),
            instance_type: "rollout".into(),
            node_addresses: vec![],
            zone: String::new(),
            region: String::new(),
            additional_labels: vec![],
        })
    }
}

impl wasm_ccm_sdk::LoadBalancers for Rollout {
    fn get_load_balancer(_cluster_name: String, _svc: Service) -> Result<Option<LbStatus>, Error> {
        call();
        Ok(None)
    }

    fn get_load_balancer_name(_cluster_name: String, svc: Service) -> String {
        call();
        format!("rollout-{}", svc.name)
    }

    fn ensure_load_balancer(
        _cluster_name: String,
        svc: Service,
        _nodes: Nodes<'_>,
    ) -> Result<LbStatus, Error> {
        call();
        let ports = svc
            .ports
            .iter()
            .map(|port| PortStatus {
                port: port.port,
                protocol: port.protocol,
                error: None,
            })
            .collect();
        let refused = wasm_ccm_sdk::config::parse::<Config>(wasm_ccm_sdk::config::raw())
            .is_ok_and(|config| config.refuse_load_balancers);
        let ip = if refused { "127.0.0.1" } else { "192.0.2.1" };
        Ok(LbStatus {
            ingress: vec![LbIngress {
                ip: Some(ip.into()),
                hostname: None,
                ip_mode: Some(IpMode::Vip),
                ports,
            }],
        })
    }

    fn update_load_balancer(
        _cluster_name: String,
        _svc: Service,
        _nodes: Nodes<'_>,
    ) -> Result<(), Error> {
        call();
        Ok(())
    }

    fn ensure_load_balancer_deleted(_cluster_name: String, _svc: Service) -> Result<(), Error> {
        call();
        Ok(())
    }
}

impl wasm_ccm_sdk::Routes for Rollout {
    fn list_routes(_cluster_name: String) -> Result<Vec<Route>, Error> {
        call();
        Ok(vec![])
    }

    fn create_route(_cluster_name: String, _name_hint: String, _route: Route) -> Result<(), Error> {
        call();
        Ok(())
    }

    fn delete_route(_cluster_name: String, _route: Route) -> Result<(), Error> {
        call();
        Ok(())
    }
}

export_provider!(Rollout);

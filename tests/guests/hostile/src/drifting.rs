//! A cloud whose answers drift from call to call, for the cluster named [`CLUSTER`] and the
//! nodes annotated [`NODE_ANNOTATION`]: what a provider that keeps no state, or reads a cloud
//! that is eventually consistent, answers the controllers. Each call takes the next number of
//! one counter kept in the host cache (every call runs in a fresh instance):
//!
//! | function | answers |
//! |---|---|
//! | `instance-exists` | `false`, though the node's instance is there |
//! | `instance-metadata` | provider ID `hostile://i-N`, InternalIP `10.0.0.N` (mod 250) |
//! | `get-load-balancer-name` | `drifting-N` |
//! | `ensure-load-balancer`, `get-load-balancer` | one ingress, IP `192.0.2.N` (mod 250) |
//! | `ensure-load-balancer` of a Service annotated [`CREATE_AT`] | also a new load balancer in the cloud simulator at that URL, every time |
//! | `ensure-load-balancer-deleted` | `Ok` the first time, then `other` |
//! | `create-route`, `delete-route` | `Ok`, keeping nothing |
//! | `list-routes` | none the first time, then the route of the last `create-route` twice |

use std::time::Duration;

use wasm_ccm_sdk::{
    AddressKind, Error, InstanceMetadata, IpMode, LbIngress, LbStatus, NodeAddress, Route, Service,
    cache, http,
};

/// The cluster name that selects this behaviour for load balancers and routes.
pub const CLUSTER: &str = "drifting";
/// The node annotation that selects it for a node's instance (any value).
pub const NODE_ANNOTATION: &str = "hostile.wasm-ccm.io/drifting";
/// The Service annotation naming a cloud simulator's `/v1/load-balancers` URL, where every
/// ensure creates a load balancer: a provider that keeps no state and finds nothing again.
pub const CREATE_AT: &str = "hostile.wasm-ccm.io/drifting-create-at";

const COUNTER: &str = "drifting/calls";
const DELETED: &str = "drifting/deleted";
const ROUTE: &str = "drifting/route";
const LISTED: &str = "drifting/listed";
const TTL: Duration = Duration::from_secs(3600);

/// The next number of the counter, from 1.
fn next() -> u64 {
    let count = cache::get_json::<u64>(COUNTER).unwrap_or(0) + 1;
    cache::set_json(COUNTER, &count, TTL);
    count
}

pub fn instance_metadata() -> InstanceMetadata {
    let n = next();
    InstanceMetadata {
        provider_id: format!("hostile://i-{n}"),
        instance_type: "drifting".into(),
        node_addresses: vec![NodeAddress {
            kind: AddressKind::InternalIp,
            address: format!("10.0.0.{}", n % 250 + 1),
        }],
        zone: String::new(),
        region: String::new(),
        additional_labels: vec![],
    }
}

pub fn load_balancer_name() -> String {
    format!("drifting-{}", next())
}

pub fn load_balancer() -> LbStatus {
    LbStatus {
        ingress: vec![LbIngress {
            ip: Some(format!("192.0.2.{}", next() % 250 + 1)),
            hostname: None,
            ip_mode: Some(IpMode::Vip),
            ports: vec![],
        }],
    }
}

/// `ensure-load-balancer` of `svc`: a drifting status, after making a new load balancer in
/// the cloud if `svc` says where ([`CREATE_AT`]).
pub fn ensure_load_balancer(svc: &Service) -> Result<LbStatus, Error> {
    let create_at = svc.annotations.iter().find(|(key, _)| key == CREATE_AT);
    if let Some((_, url)) = create_at {
        let n = next();
        let listeners: Vec<serde_json::Value> = svc
            .ports
            .iter()
            .map(|port| {
                let node_port = port.node_port.unwrap_or(30000);
                serde_json::json!({"port": port.port, "protocol": "tcp", "node_port": node_port})
            })
            .collect();
        let body = serde_json::json!({
            "name": format!("drifting-{n}"),
            "cluster": CLUSTER,
            "service_uid": svc.uid,
            "listeners": listeners,
            "targets": [],
        });
        http::post_json(url, &body)
            .and_then(|response| response.success())
            .map_err(|e| Error::other(format!("creating a load balancer at {url}: {e}")))?;
    }
    Ok(load_balancer())
}

pub fn delete_load_balancer() -> Result<(), Error> {
    if cache::get_json::<bool>(DELETED).unwrap_or(false) {
        return Err(Error::other(
            "the load balancer is gone: deleting it again fails",
        ));
    }
    cache::set_json(DELETED, &true, TTL);
    Ok(())
}

pub fn create_route(route: &Route) {
    cache::set_json(ROUTE, &(&route.target_node, &route.destination_cidr), TTL);
}

pub fn list_routes() -> Vec<Route> {
    let listed = cache::get_json::<bool>(LISTED).unwrap_or(false);
    cache::set_json(LISTED, &true, TTL);
    let Some((target_node, destination_cidr)) = cache::get_json::<(String, String)>(ROUTE) else {
        return vec![];
    };
    if !listed {
        return vec![];
    }
    let route = Route {
        name: format!("drifting-{destination_cidr}"),
        target_node,
        enable_node_addresses: false,
        target_node_addresses: vec![],
        destination_cidr,
        blackhole: false,
    };
    vec![route.clone(), route]
}

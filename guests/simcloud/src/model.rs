//! The simulator's wire format: the resources its REST API returns and the request bodies
//! this provider sends. Responses tolerate unknown fields; request bodies carry exactly the
//! fields the simulator accepts.

use serde::{Deserialize, Serialize};

/// Lifecycle state of an instance.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstanceStatus {
    Running,
    Stopped,
    /// Terminated: the instance is gone although still readable by id.
    Deleted,
    /// A state this provider does not know (say `pending`): the instance exists.
    #[serde(other)]
    Other,
}

/// A virtual machine.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Instance {
    pub id: String,
    pub name: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub status: InstanceStatus,
    pub private_ip: String,
    #[serde(default)]
    pub public_ip: Option<String>,
    #[serde(default)]
    pub public_ipv6: Option<String>,
    #[serde(default)]
    pub hostname: String,
}

/// Provisioning state of a load balancer.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LbState {
    Provisioning,
    Active,
}

/// Transport protocol of a listener.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl From<wasm_ccm_sdk::Protocol> for Protocol {
    fn from(protocol: wasm_ccm_sdk::Protocol) -> Self {
        match protocol {
            wasm_ccm_sdk::Protocol::Tcp => Protocol::Tcp,
            wasm_ccm_sdk::Protocol::Udp => Protocol::Udp,
            wasm_ccm_sdk::Protocol::Sctp => Protocol::Sctp,
        }
    }
}

impl From<Protocol> for wasm_ccm_sdk::Protocol {
    fn from(protocol: Protocol) -> Self {
        match protocol {
            Protocol::Tcp => wasm_ccm_sdk::Protocol::Tcp,
            Protocol::Udp => wasm_ccm_sdk::Protocol::Udp,
            Protocol::Sctp => wasm_ccm_sdk::Protocol::Sctp,
        }
    }
}

/// A front-end port forwarded to `node_port` on every target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listener {
    pub port: i32,
    pub protocol: Protocol,
    pub node_port: i32,
}

/// A network load balancer.
#[derive(Deserialize, Clone, Debug)]
pub struct LoadBalancer {
    pub id: String,
    pub name: String,
    pub status: LbState,
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub hostname: Option<String>,
    #[serde(default)]
    pub proxy_protocol: bool,
    #[serde(default)]
    pub listeners: Vec<Listener>,
    #[serde(default)]
    pub targets: Vec<String>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
}

/// What a load balancer should look like; also the body of `PUT /v1/load-balancers/{id}`.
#[derive(Serialize, Clone, Debug)]
pub struct LbSpec {
    pub listeners: Vec<Listener>,
    pub targets: Vec<String>,
    pub source_ranges: Vec<String>,
    pub proxy_protocol: bool,
}

impl LbSpec {
    /// Whether `lb` already has this configuration (order and duplicates aside).
    pub fn matches(&self, lb: &LoadBalancer) -> bool {
        set(&self.listeners) == set(&lb.listeners)
            && set(&self.targets) == set(&lb.targets)
            && set(&self.source_ranges) == set(&lb.source_ranges)
            && self.proxy_protocol == lb.proxy_protocol
    }
}

/// `items` sorted and deduplicated, for order-insensitive comparison.
pub fn set<T: Ord + Clone>(items: &[T]) -> Vec<T> {
    let mut items = items.to_vec();
    items.sort();
    items.dedup();
    items
}

/// Body of `POST /v1/load-balancers`.
#[derive(Serialize, Debug)]
pub struct NewLoadBalancer<'a> {
    pub name: &'a str,
    pub cluster: &'a str,
    pub service_uid: &'a str,
    #[serde(flatten)]
    pub spec: LbSpec,
}

/// Body of `PUT /v1/load-balancers/{id}/targets`.
#[derive(Serialize, Debug)]
pub struct TargetsUpdate<'a> {
    pub targets: &'a [String],
}

/// A VPC route sending `destination_cidr` to an instance.
#[derive(Deserialize, Clone, Debug)]
pub struct Route {
    pub id: String,
    pub name: String,
    pub destination_cidr: String,
    pub target_instance: String,
    #[serde(default)]
    pub blackhole: bool,
}

/// Body of `POST /v1/routes`.
#[derive(Serialize, Debug)]
pub struct NewRoute<'a> {
    pub name: &'a str,
    pub cluster: &'a str,
    pub destination_cidr: &'a str,
    pub target_instance: &'a str,
}

/// Response of `GET /v1/instances`.
#[derive(Deserialize, Debug)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
}

/// Response of `GET /v1/load-balancers`.
#[derive(Deserialize, Debug)]
pub struct LoadBalancerList {
    pub load_balancers: Vec<LoadBalancer>,
}

/// Response of `GET /v1/routes`.
#[derive(Deserialize, Debug)]
pub struct RouteList {
    pub routes: Vec<Route>,
}

/// The body of every error response: `{"error":{"code":…,"message":…}}`.
#[derive(Deserialize, Debug)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// The `error` object of an [`ErrorBody`].
#[derive(Deserialize, Debug)]
pub struct ErrorDetail {
    pub code: String,
}

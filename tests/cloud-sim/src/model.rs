//! The simulator's public data types: resources as the REST API returns them,
//! the request bodies that create or change them, and the list wrappers.
//!
//! Request bodies reject unknown fields so that a client typo (say `nodePort`
//! for `node_port`) fails loudly instead of being silently ignored.

use serde::{Deserialize, Serialize};

/// Lifecycle state of an [`Instance`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InstanceStatus {
    Running,
    Stopped,
    /// Terminated; still readable by id, like AWS's "terminated".
    Deleted,
}

/// A virtual machine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// `i-` followed by 8 hex digits.
    pub id: String,
    pub name: String,
    pub instance_type: String,
    pub zone: String,
    pub region: String,
    pub status: InstanceStatus,
    pub private_ip: String,
    pub public_ip: Option<String>,
    pub public_ipv6: Option<String>,
    pub hostname: String,
}

/// Body of `POST /v1/instances`, and the argument of
/// [`SimState::add_instance`](crate::SimState::add_instance).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NewInstance {
    pub name: String,
    pub instance_type: String,
    pub zone: String,
    /// Auto-assigned from 10.0.0.0/16 (or the simulator's `private_ip_base`) when absent.
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub public_ipv6: Option<String>,
    /// Defaults to `name`.
    pub hostname: Option<String>,
}

/// Provisioning state of a [`LoadBalancer`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LoadBalancerStatus {
    /// Created, no address yet.
    Provisioning,
    /// Has its address.
    Active,
}

/// Transport protocol of a [`Listener`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

/// One front-end port forwarded to a node port on every target.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Listener {
    pub port: i32,
    pub protocol: Protocol,
    pub node_port: i32,
}

/// A network load balancer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancer {
    /// `lb-` followed by 8 hex digits.
    pub id: String,
    pub name: String,
    pub cluster: String,
    pub service_uid: String,
    pub status: LoadBalancerStatus,
    /// Assigned from 198.51.100.0/24 (then 198.51.101.0/24, …; or from the simulator's
    /// `lb_ip_base`) once active.
    pub ip: Option<String>,
    /// Always `None`: the simulator hands out IP addresses only.
    pub hostname: Option<String>,
    pub proxy_protocol: bool,
    pub listeners: Vec<Listener>,
    /// Instance ids.
    pub targets: Vec<String>,
    /// Allowed client CIDRs; empty means everyone.
    pub source_ranges: Vec<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// Body of `POST /v1/load-balancers`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NewLoadBalancer {
    pub name: String,
    pub cluster: String,
    pub service_uid: String,
    pub listeners: Vec<Listener>,
    pub targets: Vec<String>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub proxy_protocol: bool,
}

/// Body of `PUT /v1/load-balancers/{id}`: replaces the whole configuration,
/// so omitted optional fields reset to their defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancerUpdate {
    pub listeners: Vec<Listener>,
    pub targets: Vec<String>,
    #[serde(default)]
    pub source_ranges: Vec<String>,
    #[serde(default)]
    pub proxy_protocol: bool,
}

/// Body of `PUT /v1/load-balancers/{id}/targets`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TargetsUpdate {
    pub targets: Vec<String>,
}

/// A VPC route sending `destination_cidr` to an instance.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `r-` followed by 8 hex digits.
    pub id: String,
    pub name: String,
    pub cluster: String,
    pub destination_cidr: String,
    pub target_instance: String,
    /// Computed on read: the target instance is unknown or deleted.
    pub blackhole: bool,
}

/// Body of `POST /v1/routes`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NewRoute {
    pub name: String,
    pub cluster: String,
    pub destination_cidr: String,
    pub target_instance: String,
}

/// Response of `GET /v1/instances`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
}

/// Response of `GET /v1/load-balancers`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancerList {
    pub load_balancers: Vec<LoadBalancer>,
}

/// Response of `GET /v1/routes`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RouteList {
    pub routes: Vec<Route>,
}

/// Response of `GET /_admin/target-counts`: how many targets each load balancer has, without
/// the targets (at 15,000 nodes and 3,000 load balancers these are 45 million ids).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TargetCounts {
    pub load_balancers: Vec<TargetCount>,
}

/// One load balancer in [`TargetCounts`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TargetCount {
    pub id: String,
    pub name: String,
    pub targets: usize,
}

/// Response of `GET /_admin/state`: everything, deleted instances included.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct StateSnapshot {
    pub instances: Vec<Instance>,
    pub load_balancers: Vec<LoadBalancer>,
    pub routes: Vec<Route>,
}

//! The provider contract (`wit/provider.wit`) as plain Rust types for the rest of the manager.
//!
//! These mirror the WIT records one to one but carry no wasmtime types, so controllers and the
//! CLI can build, compare and (de)serialise them without knowing wasm exists. The sandbox
//! converts them to and from the component's canonical ABI.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// The version of `wasm-ccm:provider` this host implements.
pub const CONTRACT_PACKAGE: &str = "wasm-ccm:provider";
/// The contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// The type of a node address, as in `v1.NodeAddressType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AddressKind {
    Hostname,
    InternalIP,
    ExternalIP,
    InternalDNS,
    ExternalDNS,
}

/// One address of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub kind: AddressKind,
    pub address: String,
}

/// What a provider sees of a Kubernetes Node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Node {
    pub name: String,
    pub uid: String,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    pub addresses: Vec<NodeAddress>,
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
}

/// Transport protocol of a service port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

/// One port of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    pub name: Option<String>,
    pub protocol: Protocol,
    pub port: i32,
    pub target_port: Option<String>,
    pub node_port: Option<i32>,
    pub app_protocol: Option<String>,
}

/// An entry of `spec.ipFamilies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpFamily {
    IPv4,
    IPv6,
}

/// How a load balancer delivers traffic (`v1.LoadBalancerIPMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpMode {
    VIP,
    Proxy,
}

/// Status of one port of an ingress point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    pub port: i32,
    pub protocol: Protocol,
    #[serde(default)]
    pub error: Option<String>,
}

/// One ingress point of a load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LbIngress {
    pub ip: Option<String>,
    pub hostname: Option<String>,
    pub ip_mode: Option<IpMode>,
    pub ports: Vec<PortStatus>,
}

/// `status.loadBalancer` of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LbStatus {
    pub ingress: Vec<LbIngress>,
}

/// What a provider sees of a Kubernetes Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    #[serde(rename = "type")]
    pub service_type: String,
    pub ports: Vec<ServicePort>,
    pub external_traffic_policy: Option<String>,
    pub health_check_node_port: Option<i32>,
    pub load_balancer_source_ranges: Vec<String>,
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<String>,
    pub ip_families: Vec<IpFamily>,
    pub session_affinity: Option<String>,
    pub load_balancer_class: Option<String>,
    pub status: LbStatus,
}

impl Default for Service {
    fn default() -> Self {
        Service {
            name: String::new(),
            namespace: "default".into(),
            uid: String::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            service_type: "LoadBalancer".into(),
            ports: Vec::new(),
            external_traffic_policy: None,
            health_check_node_port: None,
            load_balancer_source_ranges: Vec::new(),
            load_balancer_ip: None,
            ip_families: Vec::new(),
            session_affinity: None,
            load_balancer_class: None,
            status: LbStatus::default(),
        }
    }
}

/// What the cloud knows about the instance behind a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InstanceMetadata {
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub instance_type: String,
    pub node_addresses: Vec<NodeAddress>,
    pub zone: String,
    pub region: String,
    pub additional_labels: Vec<(String, String)>,
}

/// A route of the cloud's network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Route {
    pub name: String,
    pub target_node: String,
    pub enable_node_addresses: bool,
    pub target_node_addresses: Vec<NodeAddress>,
    pub destination_cidr: String,
    pub blackhole: bool,
}

/// What a provider supports, as answered by `init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub name: String,
    pub instances: bool,
    pub load_balancer: bool,
    pub routes: bool,
    pub has_cluster_id: bool,
    /// The node labels and annotations the provider reads; `None`: all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_metadata: Option<NodeMetadataKeys>,
}

/// The keys of the node labels and annotations a provider reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadataKeys {
    pub labels: BTreeSet<String>,
    pub annotations: BTreeSet<String>,
}

/// An error a provider returned on purpose: the contract's `provider-error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CloudError {
    /// The thing asked about definitely does not exist.
    #[error("not found: {message}")]
    NotFound { message: String },
    /// The provider does not implement this function.
    #[error("not implemented by the provider")]
    NotImplemented,
    /// Another controller owns this load balancer.
    #[error("implemented elsewhere")]
    ImplementedElsewhere,
    /// Not done yet; try again after `delay_ms`.
    #[error("retry after {delay_ms} ms: {message}")]
    RetryAfter { delay_ms: u64, message: String },
    /// Anything else.
    #[error("{message}")]
    Other { message: String },
}

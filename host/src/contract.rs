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

/// The contract's functions, one line each, in WIT order, handed to the macro `$then`: every
/// place that follows the contract is generated from this one table. [`Function`] is made
/// here; the facade's methods in [`crate::provider`]; `provider call`'s dispatch in the
/// manager's CLI.
///
/// A line is the [`Function`] variant, the WIT interface and function name, then the facade's
/// method: how it is called, its name, its parameters (the WIT name, then the Rust name and
/// type) and its answer. How it is called:
/// - `mirrored`: a read-only call, which a shadow's candidate answers too, to be compared;
/// - `with_nodes`: it carries the nodes of a load balancer, lent as a `node-set` to a
///   component that reads them so and listed to any other;
/// - `call`: called on the active version only.
///
/// `init` has no method: a version is `init`ed as it loads
/// ([`crate::provider::Compiled::init`]).
#[macro_export]
macro_rules! contract_table {
    ($then:ident) => {
        $then! {
            Init: "provider" / "init"("config");
            /// Whether the instance behind `node` exists (`false` only on definite absence).
            InstanceExists: "instances" / "instance-exists"
                mirrored fn instance_exists("node" node: &$crate::contract::Node) -> bool;
            /// Whether the instance behind `node` is shut down.
            InstanceShutdown: "instances" / "instance-shutdown"
                mirrored fn instance_shutdown("node" node: &$crate::contract::Node) -> bool;
            /// Identity, type, addresses and placement of the instance behind `node`.
            InstanceMetadata: "instances" / "instance-metadata"
                mirrored fn instance_metadata("node" node: &$crate::contract::Node)
                    -> $crate::contract::InstanceMetadata;
            /// The load balancer of `svc`, or `None` if it does not exist.
            GetLoadBalancer: "load-balancer" / "get-load-balancer"
                mirrored fn get_load_balancer(
                    "cluster-name" cluster: &str,
                    "svc" svc: &$crate::contract::Service
                ) -> Option<$crate::contract::LbStatus>;
            /// The cloud-side name of the load balancer of `svc`.
            GetLoadBalancerName: "load-balancer" / "get-load-balancer-name"
                mirrored fn get_load_balancer_name(
                    "cluster-name" cluster: &str,
                    "svc" svc: &$crate::contract::Service
                ) -> String;
            /// Create or update the load balancer of `svc` for `nodes`.
            EnsureLoadBalancer: "load-balancer" / "ensure-load-balancer"
                with_nodes fn ensure_load_balancer(
                    "cluster-name" cluster: &str,
                    "svc" svc: &$crate::contract::Service,
                    "nodes" nodes: &std::sync::Arc<[$crate::contract::Node]>
                ) -> $crate::contract::LbStatus;
            /// Point the load balancer of `svc` at `nodes`.
            UpdateLoadBalancer: "load-balancer" / "update-load-balancer"
                with_nodes fn update_load_balancer(
                    "cluster-name" cluster: &str,
                    "svc" svc: &$crate::contract::Service,
                    "nodes" nodes: &std::sync::Arc<[$crate::contract::Node]>
                ) -> ();
            /// Delete the load balancer of `svc`; `Ok` if already gone.
            EnsureLoadBalancerDeleted: "load-balancer" / "ensure-load-balancer-deleted"
                call fn ensure_load_balancer_deleted(
                    "cluster-name" cluster: &str,
                    "svc" svc: &$crate::contract::Service
                ) -> ();
            /// The routes of `cluster`.
            ListRoutes: "routes" / "list-routes"
                mirrored fn list_routes("cluster-name" cluster: &str)
                    -> Vec<$crate::contract::Route>;
            /// Create `route` (`name_hint` is the node's UID).
            CreateRoute: "routes" / "create-route"
                call fn create_route(
                    "cluster-name" cluster: &str,
                    "name-hint" name_hint: &str,
                    "route" route: &$crate::contract::Route
                ) -> ();
            /// Delete `route`.
            DeleteRoute: "routes" / "delete-route"
                call fn delete_route(
                    "cluster-name" cluster: &str,
                    "route" route: &$crate::contract::Route
                ) -> ();
        }
    };
}

/// Declares [`Function`] from [`contract_table!`].
macro_rules! declare_functions {
    (
        $init:ident: $init_interface:literal / $init_name:literal ($init_param:literal);
        $(
            $(#[$doc:meta])*
            $variant:ident: $interface:literal / $name:literal
                $how:ident fn $method:ident($($param:literal $arg:ident: &$ty:ty),*) -> $answer:ty;
        )*
    ) => {
        /// A function of the contract, as the WIT names it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Function {
            #[doc = concat!("`", $init_interface, ".", $init_name, "`")]
            $init,
            $(
                #[doc = concat!("`", $interface, ".", $name, "`")]
                $variant,
            )*
        }

        impl Function {
            /// Every function, in WIT order.
            pub const ALL: &[Function] = &[Function::$init, $(Function::$variant),*];

            /// The function's name in the WIT, e.g. `instance-metadata`.
            pub fn name(self) -> &'static str {
                match self {
                    Function::$init => $init_name,
                    $(Function::$variant => $name,)*
                }
            }

            /// The WIT interface that exports it, e.g. `instances`.
            pub fn interface(self) -> &'static str {
                match self {
                    Function::$init => $init_interface,
                    $(Function::$variant => $interface,)*
                }
            }

            /// Its parameters, as the WIT names them.
            pub fn params(self) -> &'static [&'static str] {
                match self {
                    Function::$init => &[$init_param],
                    $(Function::$variant => &[$($param),*],)*
                }
            }
        }
    };
}

contract_table!(declare_functions);

impl Function {
    /// The function named `name` in the WIT.
    pub fn named(name: &str) -> Option<Function> {
        Function::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Its position in [`Function::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of a node address, as in `v1.NodeAddressType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AddressKind {
    /// `Hostname`: the node's host name.
    Hostname,
    /// `InternalIP`: reachable only from within the cluster's network.
    InternalIP,
    /// `ExternalIP`: reachable from outside the cluster.
    ExternalIP,
    /// `InternalDNS`: a DNS name that resolves to an internal IP.
    InternalDNS,
    /// `ExternalDNS`: a DNS name that resolves to an external IP.
    ExternalDNS,
}

/// One address of a node, as in `v1.NodeAddress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    /// What kind of address it is (`type` in `v1.NodeAddress`).
    #[serde(rename = "type")]
    pub kind: AddressKind,
    /// An IP or a DNS name, as `kind` says.
    pub address: String,
}

/// What a provider sees of a Kubernetes Node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Node {
    /// Node name, as in `metadata.name`.
    pub name: String,
    /// `metadata.uid`; the name hint of the node's route.
    pub uid: String,
    /// `metadata.labels`. A provider sees only the keys named in
    /// [`Capabilities::node_metadata`], when it named any.
    pub labels: Vec<(String, String)>,
    /// `metadata.annotations`. A provider sees only the keys named in
    /// [`Capabilities::node_metadata`], when it named any.
    pub annotations: Vec<(String, String)>,
    /// `spec.providerID`, e.g. `simcloud://i-0123`; `None` until the node is initialised.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// `status.addresses`, as the kubelet or an earlier sync left them.
    pub addresses: Vec<NodeAddress>,
    /// `spec.podCIDRs`.
    #[serde(rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
}

/// Transport protocol of a service port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// `TCP`, the default when a port names none.
    #[default]
    Tcp,
    /// `UDP`.
    Udp,
    /// `SCTP`.
    Sctp,
}

/// One port of a Service, as in `v1.ServicePort`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePort {
    /// `name`; required by Kubernetes only when the Service has several ports.
    pub name: Option<String>,
    /// `protocol`.
    pub protocol: Protocol,
    /// `port`: the port the Service, and so its load balancer, listens on.
    pub port: i32,
    /// `targetPort`, as written (a number or a named port).
    pub target_port: Option<String>,
    /// `nodePort`: where each node receives the port's traffic; `None` when the Service
    /// allocates no node ports.
    pub node_port: Option<i32>,
    /// `appProtocol`, e.g. `kubernetes.io/h2c`: a hint for layer-7 load balancers.
    pub app_protocol: Option<String>,
}

/// An entry of `spec.ipFamilies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpFamily {
    /// `IPv4`.
    IPv4,
    /// `IPv6`.
    IPv6,
}

/// How a load balancer delivers traffic (`v1.LoadBalancerIPMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpMode {
    /// Traffic reaches the node with the load balancer's IP as destination.
    VIP,
    /// The load balancer proxies: traffic reaches the node addressed to the node.
    Proxy,
}

/// Status of one port of a load-balancer ingress point, as in `v1.PortStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStatus {
    /// The Service port this status is for.
    pub port: i32,
    /// Transport protocol of `port`.
    pub protocol: Protocol,
    /// A CamelCase reason when the port is in error, e.g. `PortAllocationFailed`.
    #[serde(default)]
    pub error: Option<String>,
}

/// One ingress point of a load balancer, as in `v1.LoadBalancerIngress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LbIngress {
    /// IP address of the ingress point, for load balancers reached by IP.
    pub ip: Option<String>,
    /// DNS name of the ingress point, for load balancers reached by name.
    pub hostname: Option<String>,
    /// `ipMode`: how traffic to `ip` reaches the nodes; Kubernetes takes `None` as `VIP`.
    pub ip_mode: Option<IpMode>,
    /// Status of the Service's ports on this ingress point; may be empty.
    pub ports: Vec<PortStatus>,
}

/// `status.loadBalancer` of a Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LbStatus {
    /// `ingress`: where the load balancer takes traffic; empty until it has an address.
    pub ingress: Vec<LbIngress>,
}

/// What a provider sees of a Kubernetes Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Service {
    /// Service name, as in `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `default` unless set.
    pub namespace: String,
    /// `metadata.uid`; upstream derives the default load balancer name from it.
    pub uid: String,
    /// `metadata.labels`.
    pub labels: Vec<(String, String)>,
    /// `metadata.annotations`, where providers read their per-service options.
    pub annotations: Vec<(String, String)>,
    /// `spec.type`: `LoadBalancer` for every service a provider is asked to balance.
    #[serde(rename = "type")]
    pub service_type: String,
    /// `spec.ports`.
    pub ports: Vec<ServicePort>,
    /// `spec.externalTrafficPolicy`: `Cluster` or `Local`.
    pub external_traffic_policy: Option<String>,
    /// `spec.healthCheckNodePort`: the node port a load balancer's health check probes;
    /// set only with the `Local` traffic policy.
    pub health_check_node_port: Option<i32>,
    /// `spec.loadBalancerSourceRanges`, or when that is empty the comma-separated legacy
    /// annotation `service.beta.kubernetes.io/load-balancer-source-ranges`, as upstream's
    /// `GetLoadBalancerSourceRanges` reads them. Empty: no restriction (`0.0.0.0/0`).
    pub load_balancer_source_ranges: Vec<String>,
    /// `spec.loadBalancerIP` (deprecated upstream): the IP the user asked for.
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<String>,
    /// `spec.ipFamilies`.
    pub ip_families: Vec<IpFamily>,
    /// `spec.sessionAffinity`: `None` or `ClientIP`.
    pub session_affinity: Option<String>,
    /// `spec.loadBalancerClass`; the service controller skips services that set one.
    pub load_balancer_class: Option<String>,
    /// The current `status.loadBalancer`.
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

/// What the cloud knows about the instance behind a node, as in
/// `cloudprovider.InstanceMetadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InstanceMetadata {
    /// `<provider-name>://<instance-id>`; becomes `spec.providerID` if that is empty.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Becomes the `node.kubernetes.io/instance-type` label; empty: no label.
    pub instance_type: String,
    /// Become the node's `status.addresses`.
    pub node_addresses: Vec<NodeAddress>,
    /// Becomes the `topology.kubernetes.io/zone` label; empty: no label.
    pub zone: String,
    /// Becomes the `topology.kubernetes.io/region` label; empty: no label.
    pub region: String,
    /// Extra node labels. The host refuses the whole answer if a key is in the
    /// `kubernetes.io` or `k8s.io` namespaces (but for the topology and instance-type
    /// labels, equal to their fields): see [`crate::answers`].
    pub additional_labels: Vec<(String, String)>,
}

/// A route in the cloud's network: pod CIDR `destination_cidr` is reached via
/// `target_node`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Route {
    /// The provider's own name for the route; ignored on create.
    pub name: String,
    /// Name of the node that is the route's next hop.
    pub target_node: String,
    /// True when the provider fills `target_node_addresses`; the host compares them only
    /// then.
    pub enable_node_addresses: bool,
    /// Addresses of `target_node`, when `enable_node_addresses` is set.
    pub target_node_addresses: Vec<NodeAddress>,
    /// The node's pod CIDR, e.g. `10.244.1.0/24`.
    pub destination_cidr: String,
    /// The next hop is gone; the host deletes blackhole routes inside the cluster CIDR.
    pub blackhole: bool,
}

/// What a provider supports, as answered by `init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// The provider's name, the scheme of its provider IDs and the value of
    /// `--cloud-provider`.
    pub name: String,
    /// Whether it implements `instances` (node initialisation and lifecycle).
    pub instances: bool,
    /// Whether it implements `load-balancer` (Services of type `LoadBalancer`).
    pub load_balancer: bool,
    /// Whether it implements `routes` (pod CIDR routes).
    pub routes: bool,
    /// Whether it tags its cloud resources with a cluster ID; without one the manager
    /// refuses to start unless `--allow-untagged-cloud` is given.
    pub has_cluster_id: bool,
    /// The node labels and annotations the provider reads; `None`: all of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_metadata: Option<NodeMetadataKeys>,
}

/// The keys of the node labels and annotations a provider reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMetadataKeys {
    /// Label keys, matched exactly.
    pub labels: BTreeSet<String>,
    /// Annotation keys, matched exactly.
    pub annotations: BTreeSet<String>,
}

/// An error a provider returned on purpose: the contract's `provider-error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CloudError {
    /// The thing asked about definitely does not exist.
    #[error("not found: {message}")]
    NotFound {
        /// What was not found, in the provider's words.
        message: String,
    },
    /// The provider does not implement this function.
    #[error("not implemented by the provider")]
    NotImplemented,
    /// Another controller owns this load balancer.
    #[error("implemented elsewhere")]
    ImplementedElsewhere,
    /// Not done yet; try again after `delay_ms`.
    #[error("retry after {delay_ms} ms: {message}")]
    RetryAfter {
        /// How long to wait before calling again, in milliseconds.
        delay_ms: u64,
        /// Why the call is not done yet, in the provider's words.
        message: String,
    },
    /// Anything else.
    #[error("{message}")]
    Other {
        /// What went wrong, in the provider's words.
        message: String,
    },
}

//! Write a wasm-ccm cloud provider in Rust.
//!
//! A provider is a WebAssembly component that answers the questions Kubernetes'
//! cloud-controller-manager asks a cloud: does this node's instance exist, what are its
//! addresses and zone, create a load balancer for this Service, which routes exist. The
//! contract is `wit/provider.wit` (package `wasm-ccm:provider@0.1.0`); this crate turns it
//! into four Rust traits and an [`export_provider!`] macro, so an author writes only trait
//! impls.
//!
//! What a provider can use while it runs:
//! - [`http`]: a blocking HTTP client over `wasi:http`. Requests reach only the hosts the
//!   operator granted; the host adds credentials (`Authorization` and the like) itself, so a
//!   provider never holds a secret and may not set those headers.
//! - [`cache`]: a key-value store with TTL that outlives a call (every call runs in a fresh
//!   instance, so nothing in memory does).
//! - [`config`]: the bytes of `--cloud-config`.
//! - [`log`]: log lines the host tags with the provider's name and version.
//!
//! Every call runs under a memory cap and a deadline; a panic ends only that call.
//!
//! Name the node labels and annotations you read in [`Capabilities::node_metadata`]: every
//! call then carries only those. Load-balancer calls hand you their nodes as [`Nodes`],
//! which the host lends: read only the field you need ([`Nodes::provider_ids`], say), and a
//! call with thousands of nodes copies only that.
//!
//! # Example
//!
//! ```no_run
//! use wasm_ccm_sdk::{
//!     export_provider, http, Capabilities, Error, InstanceMetadata, Node, NodeMetadataKeys,
//! };
//!
//! struct Acme;
//!
//! impl wasm_ccm_sdk::Provider for Acme {
//!     fn init(_config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
//!         Ok(Capabilities {
//!             name: "acme".into(),
//!             instances: true,
//!             load_balancer: false,
//!             routes: false,
//!             has_cluster_id: true,
//!             // Acme reads no node labels or annotations: calls carry none.
//!             node_metadata: Some(NodeMetadataKeys { labels: vec![], annotations: vec![] }),
//!         })
//!     }
//! }
//!
//! #[derive(serde::Deserialize)]
//! struct Server { id: String, kind: String, zone: String, ip: String }
//!
//! fn find(node: &Node) -> Result<Option<Server>, Error> {
//!     let url = format!("https://api.acme.example/v1/servers/{}", node.name);
//!     match http::get(&url)?.json_unless_not_found::<Server>()? {
//!         Some(server) => Ok(Some(server)),
//!         None => Ok(None),
//!     }
//! }
//!
//! impl wasm_ccm_sdk::Instances for Acme {
//!     fn instance_exists(node: Node) -> Result<bool, Error> {
//!         Ok(find(&node)?.is_some())
//!     }
//!     fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
//!         let server = find(&node)?.ok_or_else(|| Error::not_found(format!("no server {}", node.name)))?;
//!         Ok(InstanceMetadata {
//!             provider_id: format!("acme://{}", server.id),
//!             instance_type: server.kind,
//!             node_addresses: vec![wasm_ccm_sdk::NodeAddress {
//!                 kind: wasm_ccm_sdk::AddressKind::InternalIp,
//!                 address: server.ip,
//!             }],
//!             region: "eu".into(),
//!             zone: server.zone,
//!             additional_labels: vec![],
//!         })
//!     }
//! }
//!
//! // Unsupported capabilities keep the defaults, which answer `not-implemented`.
//! impl wasm_ccm_sdk::LoadBalancers for Acme {}
//! impl wasm_ccm_sdk::Routes for Acme {}
//!
//! export_provider!(Acme);
//! ```
//!
//! Build it with `cargo build --target wasm32-wasip2 --release`; the `.wasm` under
//! `target/wasm32-wasip2/release/` is the provider component.

// The bindings and the export macro name this crate by its public path.
extern crate self as wasm_ccm_sdk;

pub mod cache;
pub mod config;
mod error;
pub mod http;
pub mod labels;
pub mod log;
mod nodes;
mod traits;

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "cloud-provider-node-sets",
        pub_export_macro: true,
        export_macro_name: "__export_cloud_provider",
        default_bindings_module: "::wasm_ccm_sdk::bindings",
        runtime_path: "::wasm_ccm_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq, Eq],
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// The nodes the host lent a call, for [`export_provider!`].
#[doc(hidden)]
pub fn __lent(set: &bindings::wasm_ccm::provider::node_sets::NodeSet) -> Nodes<'_> {
    Nodes::lent(set)
}

pub use bindings::wasm_ccm::provider::types::{
    AddressKind, Capabilities, InstanceMetadata, IpFamily, IpMode, LbIngress, LbStatus, Node,
    NodeAddress, NodeMetadataKeys, PortStatus, Protocol, ProviderError as Error, Retry, Route,
    Service, ServicePort,
};
pub use nodes::{Nodes, Selected};
pub use traits::{Instances, LoadBalancers, Provider, Routes, default_load_balancer_name};

/// Export `$provider` as the component's implementation of the contract.
///
/// `$provider` must implement [`Provider`], [`Instances`], [`LoadBalancers`] and [`Routes`]
/// (the last three may be empty impls that keep the `not-implemented` defaults).
#[macro_export]
macro_rules! export_provider {
    ($provider:ty) => {
        const _: () = {
            use $crate::bindings::exports::wasm_ccm::provider as contract;
            use $crate::bindings::wasm_ccm::provider::types as t;

            struct Exports;

            impl contract::provider::Guest for Exports {
                fn init(config: Option<Vec<u8>>) -> Result<t::Capabilities, t::ProviderError> {
                    <$provider as $crate::Provider>::init(config)
                }
            }

            impl contract::instances::Guest for Exports {
                fn instance_exists(node: t::Node) -> Result<bool, t::ProviderError> {
                    <$provider as $crate::Instances>::instance_exists(node)
                }
                fn instance_shutdown(node: t::Node) -> Result<bool, t::ProviderError> {
                    <$provider as $crate::Instances>::instance_shutdown(node)
                }
                fn instance_metadata(
                    node: t::Node,
                ) -> Result<t::InstanceMetadata, t::ProviderError> {
                    <$provider as $crate::Instances>::instance_metadata(node)
                }
            }

            impl contract::load_balancer::Guest for Exports {
                fn get_load_balancer(
                    cluster_name: String,
                    svc: t::Service,
                ) -> Result<Option<t::LbStatus>, t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::get_load_balancer(cluster_name, svc)
                }
                fn get_load_balancer_name(cluster_name: String, svc: t::Service) -> String {
                    <$provider as $crate::LoadBalancers>::get_load_balancer_name(cluster_name, svc)
                }
                fn ensure_load_balancer(
                    cluster_name: String,
                    svc: t::Service,
                    nodes: Vec<t::Node>,
                ) -> Result<t::LbStatus, t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::ensure_load_balancer(
                        cluster_name,
                        svc,
                        nodes.into(),
                    )
                }
                fn update_load_balancer(
                    cluster_name: String,
                    svc: t::Service,
                    nodes: Vec<t::Node>,
                ) -> Result<(), t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::update_load_balancer(
                        cluster_name,
                        svc,
                        nodes.into(),
                    )
                }
                fn ensure_load_balancer_deleted(
                    cluster_name: String,
                    svc: t::Service,
                ) -> Result<(), t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::ensure_load_balancer_deleted(
                        cluster_name,
                        svc,
                    )
                }
            }

            impl contract::load_balancer_node_sets::Guest for Exports {
                fn ensure_load_balancer(
                    cluster_name: String,
                    svc: t::Service,
                    nodes: &$crate::bindings::wasm_ccm::provider::node_sets::NodeSet,
                ) -> Result<t::LbStatus, t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::ensure_load_balancer(
                        cluster_name,
                        svc,
                        $crate::__lent(nodes),
                    )
                }
                fn update_load_balancer(
                    cluster_name: String,
                    svc: t::Service,
                    nodes: &$crate::bindings::wasm_ccm::provider::node_sets::NodeSet,
                ) -> Result<(), t::ProviderError> {
                    <$provider as $crate::LoadBalancers>::update_load_balancer(
                        cluster_name,
                        svc,
                        $crate::__lent(nodes),
                    )
                }
            }

            impl contract::routes::Guest for Exports {
                fn list_routes(cluster_name: String) -> Result<Vec<t::Route>, t::ProviderError> {
                    <$provider as $crate::Routes>::list_routes(cluster_name)
                }
                fn create_route(
                    cluster_name: String,
                    name_hint: String,
                    route: t::Route,
                ) -> Result<(), t::ProviderError> {
                    <$provider as $crate::Routes>::create_route(cluster_name, name_hint, route)
                }
                fn delete_route(
                    cluster_name: String,
                    route: t::Route,
                ) -> Result<(), t::ProviderError> {
                    <$provider as $crate::Routes>::delete_route(cluster_name, route)
                }
            }

            $crate::bindings::__export_cloud_provider!(Exports);
        };
    };
}

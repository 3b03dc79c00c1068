//! What the tests of simcloud in every language (`tests/e2e/tests/controllers/languages.rs`)
//! set up and read: instances with every kind of address, nodes as the kubelet registers
//! them and as they are once initialised, a port of simcloud loaded against the simulator,
//! and the requests the simulator received.

use cloud_sim::{Instance, NewInstance};
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{Provider, ProviderLoadError};

use crate::{Cloud, load, sandbox, sandbox_config};

/// A running instance named `name` with every kind of address.
pub fn add_instance(cloud: &Cloud, name: &str, octet: u8) -> Instance {
    cloud.sim.state().add_instance(NewInstance {
        name: name.into(),
        instance_type: "sim.medium".into(),
        zone: "sim-central-1b".into(),
        private_ip: Some(format!("10.0.1.{octet}")),
        public_ip: Some(format!("203.0.113.{octet}")),
        public_ipv6: Some(format!("2001:db8::{octet}")),
        hostname: Some(format!("{name}.sim.internal")),
    })
}

/// A node the kubelet registered, not yet initialised.
pub fn node_named(name: &str) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        ..Node::default()
    }
}

/// An initialised node whose provider ID is `simcloud://instance_id`.
pub fn node_with_id(name: &str, instance_id: &str) -> Node {
    node_with_provider_id(name, &format!("simcloud://{instance_id}"))
}

/// A node whose provider ID is `provider_id`, as written (another scheme, extra slashes).
pub fn node_with_provider_id(name: &str, provider_id: &str) -> Node {
    Node {
        provider_id: Some(provider_id.into()),
        ..node_named(name)
    }
}

/// The simcloud port at `guest` (a `guest_builds` path) with `egress` and the cloud config
/// `config`.
pub async fn simcloud_port(
    guest: &str,
    egress: EgressConfig,
    config: Option<serde_json::Value>,
) -> Result<Provider, ProviderLoadError> {
    let config = config.map(|config| config.to_string().into_bytes());
    load(&sandbox(sandbox_config()), guest, egress, config).await
}

/// The requests the simulator received from position `from` on, as `METHOD /path[?query]`.
pub fn requests_since(cloud: &Cloud, from: usize) -> Vec<String> {
    cloud.sim.state().requests()[from..]
        .iter()
        .map(|r| match &r.query {
            Some(query) => format!("{} {}?{query}", r.method, r.path),
            None => format!("{} {}", r.method, r.path),
        })
        .collect()
}

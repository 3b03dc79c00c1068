//! `InstancesV2`: find the instance behind a node (by provider ID, else by name) and describe
//! it. Also owns provider IDs (`simcloud://<instance-id>`, or `<name>://` when the cloud
//! config names the provider otherwise) and the instance cache.
//!
//! Lookups by id are cached for 5 s under `instance/<id>`; absence is never cached.
//! `instance-exists` and `instance-shutdown` ask about the current state and always read
//! fresh (refreshing the cache); metadata and route listings may use the cache.

use std::time::Duration;

use wasm_ccm_sdk::{AddressKind, Error, InstanceMetadata, Node, NodeAddress, cache};

use crate::SimCloud;
use crate::api::Api;
use crate::config::Config;
use crate::model::{Instance, InstanceStatus};

/// How long an instance read by id is served from the host cache.
const CACHE_TTL: Duration = Duration::from_secs(5);
/// Extra node label carrying the instance id.
const INSTANCE_ID_LABEL: &str = "simcloud.example/instance-id";
/// Extra node label carrying the build stamp, in a stamped build only.
const BUILD_LABEL: &str = "simcloud.wasm-ccm.io/build";

/// Whether a lookup may be answered from the host cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Freshness {
    Cached,
    Fresh,
}

impl wasm_ccm_sdk::Instances for SimCloud {
    fn instance_exists(node: Node) -> Result<bool, Error> {
        Ok(find(&node, Freshness::Fresh)?.is_some())
    }

    fn instance_shutdown(node: Node) -> Result<bool, Error> {
        Ok(require(&node, Freshness::Fresh)?.status == InstanceStatus::Stopped)
    }

    fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
        let name = Config::load()?.name;
        Ok(metadata(require(&node, Freshness::Cached)?, &name))
    }
}

/// `<name>://<id>`: `simcloud://<id>` unless the config names the provider otherwise.
fn provider_id(name: &str, instance_id: &str) -> String {
    format!("{name}://{instance_id}")
}

/// The instance id inside a provider ID of `name`, or `None` for another scheme or no id.
pub fn instance_id_of<'a>(provider_id: &'a str, name: &str) -> Option<&'a str> {
    let id = provider_id
        .strip_prefix(name)?
        .strip_prefix("://")?
        .trim_start_matches('/');
    (!id.is_empty()).then_some(id)
}

/// The instance behind `node`; `None` only on definite absence.
fn find(node: &Node, freshness: Freshness) -> Result<Option<Instance>, Error> {
    let config = Config::load()?;
    let api = Api::new(&config);
    match node.provider_id.as_deref().filter(|id| !id.is_empty()) {
        Some(provider_id) => {
            let name = &config.name;
            let id = instance_id_of(provider_id, name).ok_or_else(|| {
                Error::other(format!(
                    "node {} has provider ID {provider_id:?}, not a {name}:// one",
                    node.name
                ))
            })?;
            by_id(&api, id, freshness)
        }
        None => by_name(&api, &node.name),
    }
}

/// The instance behind `node`; absence is a `not-found` error.
fn require(node: &Node, freshness: Freshness) -> Result<Instance, Error> {
    find(node, freshness)?.ok_or_else(|| {
        let id = node.provider_id.as_deref().unwrap_or("no provider ID");
        Error::not_found(format!(
            "no simcloud instance for node {} ({id})",
            node.name
        ))
    })
}

/// The live instance `id`; `None` if unknown or deleted.
fn by_id(api: &Api, id: &str, freshness: Freshness) -> Result<Option<Instance>, Error> {
    if freshness == Freshness::Cached
        && let Some(instance) = cache::get_json::<Instance>(&cache_key(id))
    {
        return Ok(Some(instance));
    }
    let instance = api
        .instance(id)?
        .filter(|instance| instance.status != InstanceStatus::Deleted);
    match &instance {
        Some(instance) => remember(instance),
        None => cache::delete(&cache_key(id)),
    }
    Ok(instance)
}

/// The live instance named `name`; `None` if there is none.
pub fn by_name(api: &Api, name: &str) -> Result<Option<Instance>, Error> {
    let mut instances = api.instances(Some(name))?;
    instances
        .retain(|instance| instance.name == name && instance.status != InstanceStatus::Deleted);
    if instances.len() > 1 {
        return Err(Error::other(format!(
            "{} live instances are named {name}",
            instances.len()
        )));
    }
    let instance = instances.pop();
    if let Some(instance) = &instance {
        remember(instance);
    }
    Ok(instance)
}

fn remember(instance: &Instance) {
    cache::set_json(&cache_key(&instance.id), instance, CACHE_TTL);
}

fn cache_key(id: &str) -> String {
    format!("instance/{id}")
}

fn metadata(instance: Instance, name: &str) -> InstanceMetadata {
    let build = crate::BUILD.map(|build| (BUILD_LABEL.to_string(), build.to_string()));
    InstanceMetadata {
        provider_id: provider_id(name, &instance.id),
        node_addresses: addresses(&instance),
        additional_labels: std::iter::once((INSTANCE_ID_LABEL.to_string(), instance.id))
            .chain(build)
            .collect(),
        instance_type: instance.instance_type,
        zone: instance.zone,
        region: instance.region,
    }
}

/// `InternalIP`, `ExternalIP` (v4 then v6) and `Hostname`, skipping empty values.
fn addresses(instance: &Instance) -> Vec<NodeAddress> {
    let internal = std::iter::once((AddressKind::InternalIp, Some(&instance.private_ip)));
    let external = [&instance.public_ip, &instance.public_ipv6]
        .into_iter()
        .map(|ip| (AddressKind::ExternalIp, ip.as_ref()));
    let hostname = std::iter::once((AddressKind::Hostname, Some(&instance.hostname)));
    internal
        .chain(external)
        .chain(hostname)
        .filter_map(|(kind, address)| {
            let address = address.filter(|address| !address.is_empty())?;
            Some(NodeAddress {
                kind,
                address: address.clone(),
            })
        })
        .collect()
}

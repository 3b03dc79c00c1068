//! `InstancesV2`: the EC2 instance behind a node, found by provider ID (`aws:///ZONE/i-…`;
//! `aws:////i-…` and a bare `i-…` are read too) or, for a node without one, by name (a name
//! starting `i-` is the ID; otherwise the instance whose private DNS name it is, among the
//! cluster's non-terminated instances). Owns provider IDs, the instance cache and the
//! instance's view as node metadata.
//!
//! **Cache.** A miss for an instance ID lists every instance carrying the cluster tag (one
//! `DescribeInstances`, 1,000 a page) and keeps each one in the host cache for 10 s; an ID
//! still missing (an instance without the cluster tag) is described alone. So the metadata
//! and existence checks of 5,000 nodes cost five requests every 10 s, not 5,000. Absence is
//! never cached: an instance AWS does not know is asked about again every time. While one
//! call lists the cluster, the calls missing the cache meanwhile describe their one instance
//! each, rather than listing the whole cluster again.
//!
//! **States.** `terminated` (or no instance) is gone: `instance-exists` is false. Every other
//! state exists. `stopped` is shut down, and so is `stopping`: that is our choice (upstream
//! counts only `stopped`), so a node whose instance is on its way down is tainted at once.

use std::collections::HashMap;
use std::time::Duration;

use wasm_ccm_sdk::{AddressKind, Error, InstanceMetadata, Node, NodeAddress, cache};

use crate::AwsProvider;
use crate::config::Config;
use crate::ec2::{self, Instance, LIVE_STATES};
use crate::query::{Aws, Meaning, Query, meaning};

/// How long an instance read from AWS is served from the host cache.
const INSTANCE_TTL: Duration = Duration::from_secs(10);
/// The host-cache key marking a recent listing of the cluster's instances.
const LISTED: &str = "instances-listed";
/// The host-cache key marking a listing of the cluster's instances under way.
const LISTING: &str = "instances-listing";
/// How long that mark holds at most: a listing cut short (a call past its deadline) does
/// not keep the others from listing for longer.
const LISTING_TTL: Duration = Duration::from_secs(60);
/// How long the region's zone IDs are kept: zones do not change.
const ZONES_TTL: Duration = Duration::from_secs(3600);
const ZONES: &str = "zone-ids";
/// The node label carrying the zone's ID.
const ZONE_ID_LABEL: &str = "topology.k8s.aws/zone-id";
/// How many instances one `DescribeInstances` page holds.
const PAGE: &str = "1000";

impl wasm_ccm_sdk::Instances for AwsProvider {
    fn instance_exists(node: Node) -> Result<bool, Error> {
        let (config, aws) = crate::load()?;
        Ok(find(&config, &aws, &node)?.is_some_and(|instance| exists(&instance.state)))
    }

    fn instance_shutdown(node: Node) -> Result<bool, Error> {
        let (config, aws) = crate::load()?;
        let instance = require(&config, &aws, &node)?;
        Ok(shut_down(&instance.state))
    }

    fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
        let (config, aws) = crate::load()?;
        let instance = require(&config, &aws, &node)?;
        if instance.state == "terminated" {
            return Err(gone(&node));
        }
        let zone_id = zone_id(&aws, &instance.zone)?;
        Ok(InstanceMetadata {
            provider_id: provider_id(&instance),
            instance_type: instance.instance_type.clone(),
            node_addresses: addresses(&instance),
            zone: instance.zone.clone(),
            region: config.region.clone(),
            additional_labels: zone_id
                .map(|id| (ZONE_ID_LABEL.to_string(), id))
                .into_iter()
                .collect(),
        })
    }
}

/// `aws:///ZONE/ID`.
fn provider_id(instance: &Instance) -> String {
    format!("aws:///{}/{}", instance.zone, instance.id)
}

/// The instance ID in `provider_id`: `aws:///ZONE/i-…`, `aws:////i-…` or a bare `i-…`.
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    let id = match provider_id.strip_prefix("aws://") {
        Some(path) => path.rsplit('/').next()?,
        None => provider_id,
    };
    let valid =
        id.len() > 2 && id.starts_with("i-") && id[2..].bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then_some(id)
}

/// Whether an instance in `state` exists: as upstream, one without a state or terminated
/// does not; a stopped one does.
fn exists(state: &str) -> bool {
    !matches!(state, "" | "terminated")
}

/// Whether an instance in `state` is shut down: stopped, or stopping (our choice: see the
/// module docs).
fn shut_down(state: &str) -> bool {
    matches!(state, "stopped" | "stopping")
}

/// The instance behind `node`, in whatever state; `None` if AWS knows none.
fn find(config: &Config, aws: &Aws, node: &Node) -> Result<Option<Instance>, Error> {
    match node.provider_id.as_deref().filter(|id| !id.is_empty()) {
        Some(provider_id) => {
            let id = instance_id_of(provider_id).ok_or_else(|| {
                Error::other(format!(
                    "node {} has provider ID {provider_id:?}, not aws:///ZONE/i-…",
                    node.name
                ))
            })?;
            by_id(config, aws, id)
        }
        None => by_node_name(config, aws, &node.name),
    }
}

/// The instance of the node named `name`: upstream's mapping, a name starting `i-` (maybe
/// with a domain) is the instance's ID, any other the private DNS name of a non-terminated
/// instance of the cluster.
pub fn by_node_name(config: &Config, aws: &Aws, name: &str) -> Result<Option<Instance>, Error> {
    if name.starts_with("i-") {
        let id = name.split('.').next().unwrap_or_default();
        return by_id(config, aws, id);
    }
    by_private_dns_name(config, aws, name)
}

/// The instance behind `node`; absence is `not-found`.
fn require(config: &Config, aws: &Aws, node: &Node) -> Result<Instance, Error> {
    find(config, aws, node)?.ok_or_else(|| gone(node))
}

fn gone(node: &Node) -> Error {
    let id = node.provider_id.as_deref().unwrap_or("no provider ID");
    Error::not_found(format!("no EC2 instance for node {} ({id})", node.name))
}

/// Instance `id` from the host cache, a fresh listing of the cluster's instances, or alone.
pub fn by_id(config: &Config, aws: &Aws, id: &str) -> Result<Option<Instance>, Error> {
    if let Some(instance) = cached(id) {
        return Ok(Some(instance));
    }
    if cache::get(LISTED).is_none() && cache::get(LISTING).is_none() {
        list_cluster(config, aws)?;
        if let Some(instance) = cached(id) {
            return Ok(Some(instance));
        }
    }
    let query = Query::new("DescribeInstances").list("InstanceId", [id]);
    match ec2::describe_instances(aws, query, &config.cluster_tag()) {
        Ok(instances) => {
            let instance = instances.into_iter().find(|instance| instance.id == id);
            if let Some(instance) = &instance {
                remember(instance);
            }
            Ok(instance)
        }
        Err(err)
            if err
                .code()
                .is_some_and(|code| meaning(0, code) == Meaning::NotFound) =>
        {
            Ok(None)
        }
        Err(err) => Err(err.into()),
    }
}

/// Every instance with the cluster's tag, each kept in the host cache.
pub fn list_cluster(config: &Config, aws: &Aws) -> Result<Vec<Instance>, Error> {
    let query = Query::new("DescribeInstances")
        .filter("tag-key", [config.cluster_tag()])
        .param("MaxResults", PAGE);
    cache::set(LISTING, b"1", LISTING_TTL);
    let listed = ec2::describe_instances(aws, query, &config.cluster_tag());
    cache::delete(LISTING);
    let instances = listed?;
    for instance in &instances {
        remember(instance);
    }
    cache::set(LISTED, b"1", INSTANCE_TTL);
    Ok(instances)
}

/// The cluster's non-terminated instance whose private DNS name is `name`.
fn by_private_dns_name(config: &Config, aws: &Aws, name: &str) -> Result<Option<Instance>, Error> {
    let query = Query::new("DescribeInstances")
        .filter("private-dns-name", [name])
        .filter("instance-state-name", LIVE_STATES);
    let mut instances = ec2::describe_instances(aws, query, &config.cluster_tag())?;
    instances.retain(|instance| instance.in_cluster);
    if instances.len() > 1 {
        let ids: Vec<&str> = instances.iter().map(|i| i.id.as_str()).collect();
        return Err(Error::other(format!(
            "{} instances of cluster {} have the private DNS name {name}: {ids:?}",
            instances.len(),
            config.cluster_id
        )));
    }
    let instance = instances.pop();
    if let Some(instance) = &instance {
        remember(instance);
    }
    Ok(instance)
}

fn cached(id: &str) -> Option<Instance> {
    cache::get_json(&cache_key(id))
}

fn remember(instance: &Instance) {
    cache::set_json(&cache_key(&instance.id), instance, INSTANCE_TTL);
}

fn cache_key(id: &str) -> String {
    format!("instance/{id}")
}

/// The ID of zone `zone` (`use1-az1`), from `DescribeAvailabilityZones` kept an hour.
fn zone_id(aws: &Aws, zone: &str) -> Result<Option<String>, Error> {
    let zones: HashMap<String, String> = match cache::get_json(ZONES) {
        Some(zones) => zones,
        None => {
            let zones: HashMap<String, String> = ec2::zone_ids(aws)?.into_iter().collect();
            cache::set_json(ZONES, &zones, ZONES_TTL);
            zones
        }
    };
    Ok(zones.get(zone).filter(|id| !id.is_empty()).cloned())
}

/// Upstream's order: each in-use interface's private IPs (by device index) as `InternalIP`
/// (the primary private IP when there is no interface), the public IP as `ExternalIP`, the
/// private DNS name as `InternalDNS` and `Hostname`, the public DNS name as `ExternalDNS`.
fn addresses(instance: &Instance) -> Vec<NodeAddress> {
    let internal: Vec<&String> = if instance.interface_ips.is_empty() {
        vec![&instance.private_ip]
    } else {
        instance.interface_ips.iter().collect()
    };
    let mut addresses: Vec<NodeAddress> = Vec::new();
    let mut add = |kind: AddressKind, address: &String| {
        let new = NodeAddress {
            kind,
            address: address.clone(),
        };
        if !address.is_empty() && !addresses.contains(&new) {
            addresses.push(new);
        }
    };
    for ip in internal {
        add(AddressKind::InternalIp, ip);
    }
    add(AddressKind::ExternalIp, &instance.public_ip);
    add(AddressKind::InternalDns, &instance.private_dns);
    add(AddressKind::Hostname, &instance.private_dns);
    add(AddressKind::ExternalDns, &instance.public_dns);
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_as_upstream_counts_them_with_stopping_shut_down() {
        let states = [
            "",
            "pending",
            "running",
            "stopping",
            "stopped",
            "shutting-down",
            "terminated",
        ];
        let seen: Vec<(bool, bool)> = states.iter().map(|s| (exists(s), shut_down(s))).collect();
        assert_eq!(
            seen,
            [
                (false, false),
                (true, false),
                (true, false),
                (true, true),
                (true, true),
                (true, false),
                (false, false),
            ]
        );
    }

    #[test]
    fn provider_ids_in_every_upstream_form() {
        assert_eq!(
            instance_id_of("aws:///us-east-1a/i-0abc123"),
            Some("i-0abc123")
        );
        assert_eq!(instance_id_of("aws:////i-0abc123"), Some("i-0abc123"));
        assert_eq!(instance_id_of("i-0abc123"), Some("i-0abc123"));
        for bad in [
            "gce://p/z/i-1",
            "aws:///us-east-1a/",
            "aws:///us-east-1a/vol-1",
            "i-",
            "x",
        ] {
            assert_eq!(instance_id_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn addresses_follow_upstreams_order() {
        let instance = Instance {
            id: "i-1".into(),
            state: "running".into(),
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            vpc_id: "vpc-1".into(),
            private_ip: "10.0.0.5".into(),
            public_ip: "203.0.113.5".into(),
            private_dns: "ip-10-0-0-5.ec2.internal".into(),
            public_dns: "ec2-203-0-113-5.compute-1.amazonaws.com".into(),
            interface_ips: vec!["10.0.0.5".into(), "10.0.0.6".into()],
            security_groups: vec![],
            in_cluster: true,
        };
        let found = addresses(&instance);
        let kinds: Vec<(AddressKind, &str)> =
            found.iter().map(|a| (a.kind, a.address.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (AddressKind::InternalIp, "10.0.0.5"),
                (AddressKind::InternalIp, "10.0.0.6"),
                (AddressKind::ExternalIp, "203.0.113.5"),
                (AddressKind::InternalDns, "ip-10-0-0-5.ec2.internal"),
                (AddressKind::Hostname, "ip-10-0-0-5.ec2.internal"),
                (
                    AddressKind::ExternalDns,
                    "ec2-203-0-113-5.compute-1.amazonaws.com"
                ),
            ]
        );
        let private = Instance {
            interface_ips: vec![],
            public_ip: String::new(),
            public_dns: String::new(),
            ..instance
        };
        assert_eq!(addresses(&private).len(), 3);
        assert_eq!(addresses(&private)[0].address, "10.0.0.5");
    }
}

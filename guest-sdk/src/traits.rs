//! The contract as Rust traits: one per exported WIT interface, with defaults that answer
//! `not-implemented`, so a provider implements only what its cloud supports.

use crate::{Capabilities, Error, InstanceMetadata, LbStatus, Node, Nodes, Route, Service};

/// Set-up: validate the cloud configuration and say what the provider supports.
pub trait Provider {
    /// Called once when the host loads this provider version, with the bytes of
    /// `--cloud-config`. Later calls read the same bytes with [`crate::config`].
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error>;
}

/// `cloudprovider.InstancesV2`: what the cloud knows about the instance behind a node.
///
/// Look instances up by `node.provider_id` first and fall back to the node's name.
pub trait Instances {
    /// Whether the instance exists. Stopped instances exist. Answer `Ok(false)` only on
    /// definite absence: the host deletes the Node object when you do.
    fn instance_exists(node: Node) -> Result<bool, Error> {
        let _ = node;
        Err(Error::NotImplemented)
    }

    /// Whether the instance is shut down (stopped, not deleted).
    fn instance_shutdown(node: Node) -> Result<bool, Error> {
        let _ = node;
        Err(Error::NotImplemented)
    }

    /// Identity, type, addresses, zone and region of the instance.
    fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
        let _ = node;
        Err(Error::NotImplemented)
    }
}

/// `cloudprovider.LoadBalancer`: the cloud load balancer of a `type: LoadBalancer` Service.
pub trait LoadBalancers {
    /// The status of the load balancer of `svc`, or `None` when it does not exist.
    fn get_load_balancer(cluster_name: String, svc: Service) -> Result<Option<LbStatus>, Error> {
        let _ = (cluster_name, svc);
        Err(Error::NotImplemented)
    }

    /// The cloud-side name of the load balancer of `svc`.
    fn get_load_balancer_name(cluster_name: String, svc: Service) -> String {
        let _ = cluster_name;
        default_load_balancer_name(&svc)
    }

    /// Create or update the load balancer of `svc` for `nodes` (read only what you need of
    /// them). While the cloud is still provisioning it, answer [`Error::retry_after`]
    /// rather than an error.
    fn ensure_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<LbStatus, Error> {
        let _ = (cluster_name, svc, nodes);
        Err(Error::NotImplemented)
    }

    /// Point the existing load balancer of `svc` at `nodes`.
    fn update_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<(), Error> {
        let _ = (cluster_name, svc, nodes);
        Err(Error::NotImplemented)
    }

    /// Delete the load balancer of `svc`; `Ok` when it is already gone.
    fn ensure_load_balancer_deleted(cluster_name: String, svc: Service) -> Result<(), Error> {
        let _ = (cluster_name, svc);
        Err(Error::NotImplemented)
    }
}

/// `cloudprovider.Routes`: pod-network routes in the cloud's network.
pub trait Routes {
    /// The routes that belong to cluster `cluster_name`.
    fn list_routes(cluster_name: String) -> Result<Vec<Route>, Error> {
        let _ = cluster_name;
        Err(Error::NotImplemented)
    }

    /// Create `route`; `name_hint` is the node's UID.
    fn create_route(cluster_name: String, name_hint: String, route: Route) -> Result<(), Error> {
        let _ = (cluster_name, name_hint, route);
        Err(Error::NotImplemented)
    }

    /// Delete `route` as returned by [`Routes::list_routes`].
    fn delete_route(cluster_name: String, route: Route) -> Result<(), Error> {
        let _ = (cluster_name, route);
        Err(Error::NotImplemented)
    }
}

/// Upstream's `cloudprovider.DefaultLoadBalancerName`: `"a"` followed by the Service's UID
/// without dashes, at most 32 characters.
pub fn default_load_balancer_name(svc: &Service) -> String {
    let mut name: String = std::iter::once('a')
        .chain(svc.uid.chars().filter(|c| *c != '-'))
        .collect();
    name.truncate(32);
    name
}

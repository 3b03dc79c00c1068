//! `Routes`: pod-CIDR routes in the simulator's network, owned per cluster. Owns route naming
//! (`<cluster>-<node-uid>-<sanitised cidr>`, distinct for the two CIDRs of a dual-stack node)
//! and the mapping between simulator routes (which target instance ids) and contract routes
//! (which target node names).

use std::collections::HashMap;

use wasm_ccm_sdk::http::HttpError;
use wasm_ccm_sdk::{Error, Route};

use crate::SimCloud;
use crate::api::Api;
use crate::instances::by_name;
use crate::model::{self, NewRoute};

impl wasm_ccm_sdk::Routes for SimCloud {
    fn list_routes(cluster_name: String) -> Result<Vec<Route>, Error> {
        let api = Api::load()?;
        let routes = api.routes(&cluster_name)?;
        let names = instance_names(&api)?;
        Ok(routes
            .into_iter()
            .map(|route| contract_route(route, &names))
            .collect())
    }

    fn create_route(cluster_name: String, name_hint: String, route: Route) -> Result<(), Error> {
        let api = Api::load()?;
        let instance = by_name(&api, &route.target_node)?.ok_or_else(|| {
            Error::not_found(format!("no simcloud instance named {}", route.target_node))
        })?;
        let name = route_name(&cluster_name, &name_hint, &route.destination_cidr);
        let new = NewRoute {
            name: &name,
            cluster: &cluster_name,
            destination_cidr: &route.destination_cidr,
            target_instance: &instance.id,
        };
        match api.create_route(&new) {
            Ok(created) => {
                wasm_ccm_sdk::info!(
                    "created route {name} ({}): {} via {} ({})",
                    created.id,
                    created.destination_cidr,
                    route.target_node,
                    instance.id
                );
                Ok(())
            }
            Err(err) if err.status() == Some(409) => already_routed(&api, &new, err),
            Err(err) => Err(err.into()),
        }
    }

    fn delete_route(cluster_name: String, route: Route) -> Result<(), Error> {
        let api = Api::load()?;
        let routes = api.routes(&cluster_name)?;
        let Some(existing) = find(&routes, &route) else {
            return Ok(());
        };
        if api.delete_route(&existing.id)? {
            wasm_ccm_sdk::info!(
                "deleted route {} ({}) of cluster {cluster_name}",
                existing.id,
                existing.destination_cidr
            );
        }
        Ok(())
    }
}

/// `<cluster>-<name_hint>-<cidr>` with every non-alphanumeric character of the CIDR as `-`.
fn route_name(cluster: &str, name_hint: &str, cidr: &str) -> String {
    let cidr: String = cidr
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("{cluster}-{name_hint}-{cidr}")
}

/// Names of the live instances by id: one listing instead of one lookup per route.
fn instance_names(api: &Api) -> Result<HashMap<String, String>, Error> {
    Ok(api
        .instances(None)?
        .into_iter()
        .map(|instance| (instance.id, instance.name))
        .collect())
}

/// The contract view of `route`; a route to a gone instance targets the instance id.
fn contract_route(route: model::Route, names: &HashMap<String, String>) -> Route {
    let target_node = names
        .get(&route.target_instance)
        .cloned()
        .unwrap_or_else(|| route.target_instance.clone());
    Route {
        name: route.id,
        target_node,
        enable_node_addresses: false,
        target_node_addresses: Vec::new(),
        destination_cidr: route.destination_cidr,
        blackhole: route.blackhole,
    }
}

/// The simulator route `route` stands for: by id (its name from `list-routes`) or the
/// simulator's name; a route without a name by destination CIDR.
fn find<'a>(routes: &'a [model::Route], route: &Route) -> Option<&'a model::Route> {
    if route.name.is_empty() {
        return routes
            .iter()
            .find(|r| r.destination_cidr == route.destination_cidr);
    }
    routes
        .iter()
        .find(|r| r.id == route.name || r.name == route.name)
}

/// A 409 on create: fine if the existing route for the CIDR targets the same instance.
fn already_routed(api: &Api, new: &NewRoute, conflict: HttpError) -> Result<(), Error> {
    let routes = api.routes(new.cluster)?;
    let existing = routes
        .iter()
        .find(|r| r.destination_cidr == new.destination_cidr)
        .ok_or(conflict)?;
    if existing.target_instance == new.target_instance {
        return Ok(());
    }
    Err(Error::other(format!(
        "cluster {} already routes {} to {}, not {}",
        new.cluster, new.destination_cidr, existing.target_instance, new.target_instance
    )))
}

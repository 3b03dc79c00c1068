//! `Routes`: pod-CIDR routes in the cluster's VPC route table (the configured
//! `route_table_id`, else the one table carrying the cluster tag, in `vpc_id` when that is
//! set), as upstream's
//! `aws_routes.go`. Owns the choice of table and the mapping between table routes (which
//! target instance IDs) and contract routes (which target node names).
//!
//! **Node names.** Upstream maps a route's instance to its node through the node informer;
//! a provider has none. A route's `target-node` here is what the cloud config's
//! `node_names` says nodes are named after: the instance's private DNS name (the default,
//! the name a kubelet on EC2 registers by default), or its instance ID (`i-…`, the route's
//! own target, so no instance is looked up). Routes are created for a node named either way.
//! A cluster whose nodes are named otherwise (resource-based names, custom DHCP options)
//! sees routes to names it has no nodes for.
//!
//! Routes are named `<cluster>-<cidr>`; only IPv4 routes to instances, and blackhole routes
//! (whose instance is gone; reported for the host to delete), are listed.

use std::collections::HashMap;

use wasm_ccm_sdk::{Error, Route};

use crate::AwsProvider;
use crate::config::{Config, NodeNames};
use crate::ec2::{self, RouteTable};
use crate::instances::{by_id, by_node_name};
use crate::query::{Aws, Meaning, Query, Service, meaning};

impl wasm_ccm_sdk::Routes for AwsProvider {
    fn list_routes(cluster_name: String) -> Result<Vec<Route>, Error> {
        let (config, aws) = crate::load()?;
        let table = route_table(&config, &aws)?;
        let names = match config.node_names {
            NodeNames::PrivateDnsName => private_dns_names(&config, &aws, &table)?,
            NodeNames::InstanceId => instance_ids(&table),
        };
        Ok(contract_routes(&cluster_name, &table, &names))
    }

    fn create_route(cluster_name: String, name_hint: String, route: Route) -> Result<(), Error> {
        let _ = name_hint;
        let cidr = ipv4_cidr(&route.destination_cidr)?;
        let (config, aws) = crate::load()?;
        let instance = by_node_name(&config, &aws, &route.target_node)?.ok_or_else(|| {
            Error::not_found(format!(
                "no EC2 instance of cluster {} for node {}",
                config.cluster_id, route.target_node
            ))
        })?;
        let table = route_table(&config, &aws)?;
        // Pod traffic leaves the instance with addresses that are not its own.
        let query = Query::new("ModifyInstanceAttribute")
            .param("InstanceId", &instance.id)
            .param("SourceDestCheck.Value", "false");
        aws.call(Service::Ec2, &query)?;
        match plan(&table, cidr, &instance.id) {
            Plan::Done => return Ok(()),
            Plan::Create => {}
            Plan::ReplaceBlackhole => {
                wasm_ccm_sdk::info!(
                    "route table {}: replacing the blackhole route for {cidr}",
                    table.id
                );
                delete(&aws, &table.id, cidr)?;
            }
            Plan::Taken(target) => {
                return Err(Error::other(format!(
                    "route table {} already routes {cidr} to {target}, not to {} (node {})",
                    table.id, instance.id, route.target_node
                )));
            }
        }
        let query = Query::new("CreateRoute")
            .param("RouteTableId", &table.id)
            .param("DestinationCidrBlock", cidr)
            .param("InstanceId", &instance.id);
        aws.call(Service::Ec2, &query)?;
        wasm_ccm_sdk::info!(
            "route table {}: {cidr} via {} ({}) for cluster {cluster_name}",
            table.id,
            route.target_node,
            instance.id
        );
        Ok(())
    }

    fn delete_route(cluster_name: String, route: Route) -> Result<(), Error> {
        let (config, aws) = crate::load()?;
        let table = route_table(&config, &aws)?;
        delete(&aws, &table.id, &route.destination_cidr)?;
        wasm_ccm_sdk::info!(
            "route table {}: deleted {} of cluster {cluster_name}",
            table.id,
            route.destination_cidr
        );
        Ok(())
    }
}

/// The private DNS name of each instance `table` routes to, by instance ID; an instance
/// without one (gone) is left out.
fn private_dns_names(
    config: &Config,
    aws: &Aws,
    table: &RouteTable,
) -> Result<HashMap<String, String>, Error> {
    let mut names = HashMap::new();
    for id in table.routes.iter().filter_map(|r| r.instance_id.as_deref()) {
        if names.contains_key(id) {
            continue;
        }
        match by_id(config, aws, id)? {
            Some(instance) if !instance.private_dns.is_empty() => {
                names.insert(id.to_string(), instance.private_dns);
            }
            _ => wasm_ccm_sdk::warn!(
                "route table {}: instance {id} has no private DNS name (gone?)",
                table.id
            ),
        }
    }
    Ok(names)
}

/// Each instance `table` routes to, named by its own ID.
fn instance_ids(table: &RouteTable) -> HashMap<String, String> {
    table
        .routes
        .iter()
        .filter_map(|r| r.instance_id.clone())
        .map(|id| (id.clone(), id))
        .collect()
}

/// What creating a route for `cidr` to `instance` takes, given `table`.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Create,
    /// The CIDR's route lost its instance: delete it, then create (upstream does the same).
    ReplaceBlackhole,
    /// The route is there already.
    Done,
    /// The CIDR is routed elsewhere (to this instance or gateway).
    Taken(String),
}

fn plan(table: &RouteTable, cidr: &str, instance: &str) -> Plan {
    match table.routes.iter().find(|r| r.destination_cidr == cidr) {
        None => Plan::Create,
        Some(existing) if existing.state == "blackhole" => Plan::ReplaceBlackhole,
        Some(existing) if existing.instance_id.as_deref() == Some(instance) => Plan::Done,
        Some(existing) => Plan::Taken(
            existing
                .instance_id
                .clone()
                .unwrap_or_else(|| "a gateway".into()),
        ),
    }
}

/// `DeleteRoute`; a route already gone (`InvalidRoute.NotFound`) is deleted.
fn delete(aws: &Aws, table: &str, cidr: &str) -> Result<(), Error> {
    let query = Query::new("DeleteRoute")
        .param("RouteTableId", table)
        .param("DestinationCidrBlock", cidr);
    match aws.call(Service::Ec2, &query) {
        Ok(_) => Ok(()),
        Err(err) if err.code() == Some("InvalidRoute.NotFound") => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// `cidr` if it is an IPv4 CIDR: upstream routes IPv4 only.
fn ipv4_cidr(cidr: &str) -> Result<&str, Error> {
    if cidr.contains(':') {
        return Err(Error::other(format!(
            "route to {cidr}: IPv6 pod routes are not supported on AWS"
        )));
    }
    Ok(cidr)
}

/// The cluster's route table: the configured one, or the one carrying the cluster tag.
fn route_table(config: &Config, aws: &Aws) -> Result<RouteTable, Error> {
    let query = match &config.route_table_id {
        Some(id) => Query::new("DescribeRouteTables").list("RouteTableId", [id]),
        None => {
            let query = Query::new("DescribeRouteTables").filter("tag-key", [config.cluster_tag()]);
            match &config.vpc_id {
                Some(vpc) => query.filter("vpc-id", [vpc]),
                None => query,
            }
        }
    };
    let tables = match ec2::describe_route_tables(aws, query) {
        Err(err)
            if err
                .code()
                .is_some_and(|c| meaning(0, c) == Meaning::NotFound) =>
        {
            return Err(Error::other(format!(
                "the route table of cloud config \"route_table_id\" does not exist: {err}"
            )));
        }
        other => other?,
    };
    match <[RouteTable; 1]>::try_from(tables) {
        Ok([table]) => Ok(table),
        Err(tables) if tables.is_empty() => Err(Error::other(format!(
            "no route table carries the tag {}{}: tag the cluster's table or set \
             \"route_table_id\" in the cloud config",
            config.cluster_tag(),
            config
                .vpc_id
                .as_ref()
                .map(|vpc| format!(" in {vpc}"))
                .unwrap_or_default()
        ))),
        Err(tables) => {
            let ids: Vec<&str> = tables.iter().map(|t| t.id.as_str()).collect();
            Err(Error::other(format!(
                "{} route tables carry the tag {}: {ids:?}; set \"route_table_id\" in the cloud \
                 config to the one for pod routes",
                tables.len(),
                config.cluster_tag()
            )))
        }
    }
}

/// The contract's view of `table`: blackhole routes, and routes to instances whose node
/// name is in `names`.
fn contract_routes(
    cluster: &str,
    table: &RouteTable,
    names: &HashMap<String, String>,
) -> Vec<Route> {
    table
        .routes
        .iter()
        .filter_map(|route| {
            let blackhole = route.state == "blackhole";
            let target_node = match &route.instance_id {
                _ if blackhole => String::new(),
                Some(id) => names.get(id)?.clone(),
                None => return None,
            };
            Some(Route {
                name: format!("{cluster}-{}", route.destination_cidr),
                target_node,
                enable_node_addresses: false,
                target_node_addresses: Vec::new(),
                destination_cidr: route.destination_cidr.clone(),
                blackhole,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blackhole_route_from_aws_is_listed_as_blackhole() {
        let document = roxmltree::Document::parse(ec2::tests::DESCRIBE_ROUTE_TABLES).unwrap();
        let table = ec2::route_tables_of(document.root_element()).remove(0);
        let names = HashMap::from([(
            "i-0aaaaaaaaaaaaaaa1".to_string(),
            "ip-10-0-1-5.ec2.internal".to_string(),
        )]);
        let routes = contract_routes("kubernetes", &table, &names);
        let seen: Vec<(&str, &str, &str, bool)> = routes
            .iter()
            .map(|r| {
                (
                    r.name.as_str(),
                    r.destination_cidr.as_str(),
                    r.target_node.as_str(),
                    r.blackhole,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "kubernetes-10.244.1.0/24",
                    "10.244.1.0/24",
                    "ip-10-0-1-5.ec2.internal",
                    false
                ),
                ("kubernetes-10.244.2.0/24", "10.244.2.0/24", "", true),
            ]
        );
    }

    #[test]
    fn routes_name_their_node_by_instance_id_when_nodes_are_named_so() {
        let document = roxmltree::Document::parse(ec2::tests::DESCRIBE_ROUTE_TABLES).unwrap();
        let table = ec2::route_tables_of(document.root_element()).remove(0);
        let routes = contract_routes("kubernetes", &table, &instance_ids(&table));
        let seen: Vec<(&str, bool)> = routes
            .iter()
            .map(|r| (r.target_node.as_str(), r.blackhole))
            .collect();
        assert_eq!(seen, [("i-0aaaaaaaaaaaaaaa1", false), ("", true)]);
    }

    #[test]
    fn a_blackhole_route_for_the_cidr_is_replaced_and_a_live_one_kept() {
        let document = roxmltree::Document::parse(ec2::tests::DESCRIBE_ROUTE_TABLES).unwrap();
        let table = ec2::route_tables_of(document.root_element()).remove(0);
        let new = "i-0ccccccccccccccc3";
        assert_eq!(plan(&table, "10.244.2.0/24", new), Plan::ReplaceBlackhole);
        assert_eq!(plan(&table, "10.244.3.0/24", new), Plan::Create);
        assert_eq!(
            plan(&table, "10.244.1.0/24", "i-0aaaaaaaaaaaaaaa1"),
            Plan::Done
        );
        assert_eq!(
            plan(&table, "10.244.1.0/24", new),
            Plan::Taken("i-0aaaaaaaaaaaaaaa1".into())
        );
        assert_eq!(
            plan(&table, "10.0.0.0/16", new),
            Plan::Taken("a gateway".into())
        );
    }

    #[test]
    fn ipv6_routes_are_refused_plainly() {
        assert!(ipv4_cidr("10.244.0.0/24").is_ok());
        assert!(matches!(ipv4_cidr("fd00::/64"), Err(Error::Other(m)) if m.contains("IPv6")));
    }
}

//! The subnets of a network load balancer: those the Service's annotation names (IDs or
//! `Name` tags, all of which must resolve), or upstream's `findELBSubnets` in the cluster's
//! VPC. Unlike upstream's "could not find any suitable subnets", a failed discovery says
//! which subnets were rejected and why.

use std::collections::BTreeMap;

use wasm_ccm_sdk::{Error, Service};

use crate::config::{CLUSTER_TAG_PREFIX, Config};
use crate::ec2::{self, RouteTable, Subnet};
use crate::query::{Aws, Query};
use crate::spec::{SUBNETS, refused};

const ROLE_ELB: &str = "kubernetes.io/role/elb";
const ROLE_INTERNAL_ELB: &str = "kubernetes.io/role/internal-elb";

/// The subnets named by the annotation's `items` (IDs or `Name` tags); any that does not
/// resolve is an error naming the annotation.
pub fn named(aws: &Aws, svc: &Service, items: &[String]) -> Result<Vec<Subnet>, Error> {
    let (ids, names): (Vec<&String>, Vec<&String>) =
        items.iter().partition(|item| item.starts_with("subnet-"));
    let mut subnets = Vec::new();
    if !ids.is_empty() {
        let query = Query::new("DescribeSubnets").filter("subnet-id", ids.iter().copied());
        subnets.extend(ec2::describe_subnets(aws, query)?);
    }
    if !names.is_empty() {
        let query = Query::new("DescribeSubnets").filter("tag:Name", names.iter().copied());
        subnets.extend(ec2::describe_subnets(aws, query)?);
    }
    let missing: Vec<&String> = items
        .iter()
        .filter(|item| {
            !subnets.iter().any(|subnet| {
                &subnet.id == *item || subnet.tags.iter().any(|(k, v)| k == "Name" && v == *item)
            })
        })
        .collect();
    if !missing.is_empty() {
        return Err(refused(
            svc,
            SUBNETS,
            &format!("names subnets that do not exist: {missing:?}"),
        ));
    }
    subnets.sort_by(|a, b| a.id.cmp(&b.id));
    subnets.dedup_by(|a, b| a.id == b.id);
    Ok(subnets)
}

/// Upstream's discovery in `vpc`: one subnet per zone, internet-facing load balancers in
/// public subnets only.
pub fn discover(
    config: &Config,
    aws: &Aws,
    vpc: &str,
    internal: bool,
) -> Result<Vec<Subnet>, Error> {
    let subnets =
        ec2::describe_subnets(aws, Query::new("DescribeSubnets").filter("vpc-id", [vpc]))?;
    let tables = ec2::describe_route_tables(
        aws,
        Query::new("DescribeRouteTables").filter("vpc-id", [vpc]),
    )?;
    let (chosen, rejected) = choose(config, subnets, &tables, internal);
    if chosen.is_empty() {
        let reasons: Vec<String> = rejected
            .iter()
            .map(|(id, why)| format!("{id}: {why}"))
            .collect();
        return Err(Error::other(format!(
            "could not find any suitable subnets for the {} load balancer in {vpc}: {}; tag the \
             subnets to use with {} or name them in the annotation {SUBNETS}",
            if internal {
                "internal"
            } else {
                "internet-facing"
            },
            if reasons.is_empty() {
                "the VPC has no subnets".to_string()
            } else {
                reasons.join("; ")
            },
            if internal {
                ROLE_INTERNAL_ELB
            } else {
                ROLE_ELB
            },
        )));
    }
    Ok(chosen)
}

/// The subnets kept (one per zone) and those rejected, each with its reason.
fn choose(
    config: &Config,
    subnets: Vec<Subnet>,
    tables: &[RouteTable],
    internal: bool,
) -> (Vec<Subnet>, Vec<(String, String)>) {
    let cluster_tag = config.cluster_tag();
    let role = if internal {
        ROLE_INTERNAL_ELB
    } else {
        ROLE_ELB
    };
    let mut rejected = Vec::new();
    let mut by_zone: BTreeMap<String, Vec<Subnet>> = BTreeMap::new();
    for subnet in subnets {
        let other_cluster = subnet
            .tags
            .iter()
            .map(|(key, _)| key)
            .find(|key| key.starts_with(CLUSTER_TAG_PREFIX) && **key != cluster_tag);
        let ours = subnet.tags.iter().any(|(key, _)| *key == cluster_tag);
        if let (Some(other), false) = (other_cluster, ours) {
            rejected.push((subnet.id, format!("tagged for another cluster ({other})")));
            continue;
        }
        if !internal {
            let table = tables
                .iter()
                .find(|table| table.subnets.contains(&subnet.id))
                .or_else(|| tables.iter().find(|table| table.main));
            match table {
                Some(table) if table.is_public() => {}
                Some(table) => {
                    rejected.push((
                        subnet.id,
                        format!(
                            "not public (route table {} has no route to an internet gateway)",
                            table.id
                        ),
                    ));
                    continue;
                }
                None => {
                    rejected.push((subnet.id, "not public (no route table)".into()));
                    continue;
                }
            }
        }
        by_zone.entry(subnet.zone.clone()).or_default().push(subnet);
    }
    let rank = |subnet: &Subnet| {
        let has = |key: &str| subnet.tags.iter().any(|(k, _)| k == key);
        (!has(role), !has(&cluster_tag), subnet.id.clone())
    };
    let mut chosen = Vec::new();
    for (zone, mut candidates) in by_zone {
        candidates.sort_by_key(rank);
        let mut candidates = candidates.into_iter();
        let Some(best) = candidates.next() else {
            continue;
        };
        for other in candidates {
            rejected.push((other.id, format!("{} was preferred in {zone}", best.id)));
        }
        chosen.push(best);
    }
    (chosen, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::TableRoute;

    fn subnet(id: &str, zone: &str, tags: &[&str]) -> Subnet {
        Subnet {
            id: id.into(),
            zone: zone.into(),
            cidr: "10.0.0.0/24".into(),
            tags: tags
                .iter()
                .map(|k| (k.to_string(), "1".to_string()))
                .collect(),
        }
    }

    fn table(id: &str, subnets: &[&str], main: bool, gateway: &str) -> RouteTable {
        RouteTable {
            id: id.into(),
            routes: vec![TableRoute {
                destination_cidr: "0.0.0.0/0".into(),
                instance_id: None,
                gateway_id: Some(gateway.into()),
                state: "active".into(),
            }],
            subnets: subnets.iter().map(|s| s.to_string()).collect(),
            main,
        }
    }

    #[test]
    fn one_public_subnet_per_zone_preferring_the_role_tag_and_rejections_say_why() {
        let config = Config::parse(Some(
            br#"{"region":"us-east-1","cluster_id":"c1"}"#.to_vec(),
        ))
        .unwrap();
        let subnets = vec![
            subnet("subnet-a1", "us-east-1a", &[]),
            subnet("subnet-a2", "us-east-1a", &[ROLE_ELB]),
            subnet("subnet-b1", "us-east-1b", &["kubernetes.io/cluster/other"]),
            subnet("subnet-c1", "us-east-1c", &[]),
            subnet("subnet-d1", "us-east-1d", &["kubernetes.io/cluster/c1"]),
        ];
        let tables = [
            table("rtb-main", &[], true, "igw-1"),
            table("rtb-private", &["subnet-c1"], false, "nat-1"),
        ];
        let (chosen, rejected) = choose(&config, subnets.clone(), &tables, false);
        let ids: Vec<&str> = chosen.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["subnet-a2", "subnet-d1"]);
        assert_eq!(
            rejected,
            [
                (
                    "subnet-b1".to_string(),
                    "tagged for another cluster (kubernetes.io/cluster/other)".to_string()
                ),
                (
                    "subnet-c1".to_string(),
                    "not public (route table rtb-private has no route to an internet gateway)"
                        .to_string()
                ),
                (
                    "subnet-a1".to_string(),
                    "subnet-a2 was preferred in us-east-1a".to_string()
                ),
            ]
        );
        // Internal load balancers may use private subnets.
        let (chosen, _) = choose(&config, subnets, &tables, true);
        let ids: Vec<&str> = chosen.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["subnet-a1", "subnet-c1", "subnet-d1"]);
    }
}

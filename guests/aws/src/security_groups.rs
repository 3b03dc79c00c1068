//! The node security-group rules of a network load balancer, as upstream's
//! `updateInstanceSecurityGroupsForNLB`: on each target instance's cluster-tagged group
//! (or its only group), the node ports open to the client CIDRs (`kubernetes.io/rule/nlb/client=<lb>`)
//! and the health-check ports to the load balancer's subnets (`kubernetes.io/rule/nlb/health=<lb>`,
//! left out when the client rule already covers them). Rules are found by that description,
//! so a load balancer's rules are changed and revoked without touching any other.
//!
//! Upstream's shared ICMP "fragmentation needed" rule (`kubernetes.io/rule/nlb/mtu`) is not
//! made.

use std::collections::{BTreeSet, HashSet};

use wasm_ccm_sdk::Error;

use crate::config::Config;
use crate::ec2::{self, Instance, Rule, SecurityGroup};
use crate::query::{Aws, Query};
use crate::spec::Spec;

/// What a load balancer needs open on its nodes.
pub struct Access<'a> {
    pub spec: &'a Spec,
    /// The CIDRs of the load balancer's subnets, where its health checks come from.
    pub subnet_cidrs: Vec<String>,
}

fn client_rule(lb: &str) -> String {
    format!("kubernetes.io/rule/nlb/client={lb}")
}

fn health_rule(lb: &str) -> String {
    format!("kubernetes.io/rule/nlb/health={lb}")
}

/// Make the rules of load balancer `lb` on the groups of `instances` those `access` needs
/// (`None`: no rules, for a deleted load balancer), and revoke its rules from every other
/// cluster group.
pub fn reconcile(
    config: &Config,
    aws: &Aws,
    lb: &str,
    instances: &[Instance],
    access: Option<&Access<'_>>,
) -> Result<(), Error> {
    let cluster_tag = config.cluster_tag();
    let mut query = Query::new("DescribeSecurityGroups").filter("tag-key", [&cluster_tag]);
    if let Some(vpc) = &config.vpc_id {
        query = query.filter("vpc-id", [vpc]);
    }
    let mut groups = ec2::describe_security_groups(aws, query, &cluster_tag)?;
    // The instances' own groups, in case one carries no cluster tag.
    let known: HashSet<String> = groups.iter().map(|g| g.id.clone()).collect();
    let mut untagged: BTreeSet<&String> = BTreeSet::new();
    for instance in instances {
        untagged.extend(
            instance
                .security_groups
                .iter()
                .filter(|id| !known.contains(*id)),
        );
    }
    if !untagged.is_empty() {
        let query = Query::new("DescribeSecurityGroups").list("GroupId", untagged);
        groups.extend(ec2::describe_security_groups(aws, query, &cluster_tag)?);
    }

    let mut targeted = BTreeSet::new();
    for instance in instances {
        match group_of(instance, &groups)? {
            Some(id) => {
                targeted.insert(id);
            }
            None => wasm_ccm_sdk::warn!(
                "instance {} has no security group to open for load balancer {lb}",
                instance.id
            ),
        }
    }

    let desired = access.map(|access| rules(lb, access)).unwrap_or_default();
    let ours = [client_rule(lb), health_rule(lb)];
    for group in &groups {
        let current: BTreeSet<&Rule> = group
            .rules
            .iter()
            .filter(|rule| ours.contains(&rule.description))
            .collect();
        let wanted: BTreeSet<&Rule> = if targeted.contains(&group.id) {
            desired.iter().collect()
        } else {
            BTreeSet::new()
        };
        let revoke: Vec<Rule> = current.difference(&wanted).map(|r| (*r).clone()).collect();
        let grant: Vec<Rule> = wanted.difference(&current).map(|r| (*r).clone()).collect();
        ec2::change_ingress(aws, &group.id, &revoke, false)?;
        ec2::change_ingress(aws, &group.id, &grant, true)?;
        if !revoke.is_empty() || !grant.is_empty() {
            wasm_ccm_sdk::info!(
                "security group {}: {} rules granted, {} revoked for load balancer {lb}",
                group.id,
                grant.len(),
                revoke.len()
            );
        }
    }
    Ok(())
}

/// Upstream's `findSecurityGroupForInstance`: the instance's one cluster-tagged group, else
/// its only group.
fn group_of(instance: &Instance, groups: &[SecurityGroup]) -> Result<Option<String>, Error> {
    let tagged: Vec<&String> = instance
        .security_groups
        .iter()
        .filter(|id| groups.iter().any(|g| &g.id == *id && g.in_cluster))
        .collect();
    match (tagged.as_slice(), instance.security_groups.as_slice()) {
        ([one], _) => Ok(Some((*one).clone())),
        ([], [only]) => Ok(Some(only.clone())),
        ([], _) => Ok(None),
        (many, _) => Err(Error::other(format!(
            "instance {} has several security groups with the cluster tag: {many:?}; tag one",
            instance.id
        ))),
    }
}

/// The rules `access` needs on a node group.
fn rules(lb: &str, access: &Access<'_>) -> Vec<Rule> {
    let protocol = access.spec.mappings[0].protocol.to_ascii_lowercase();
    let client_ports: BTreeSet<i32> = access.spec.mappings.iter().map(|m| m.node_port).collect();
    let health_ports: BTreeSet<i32> = access
        .spec
        .mappings
        .iter()
        .map(|m| m.health.port.parse().unwrap_or(m.node_port))
        .collect();
    let rule = |protocol: &str, port: i32, cidr: &str, description: String| Rule {
        protocol: protocol.to_string(),
        from_port: port,
        to_port: port,
        cidr: cidr.to_string(),
        description,
    };
    let mut rules = Vec::new();
    for port in &client_ports {
        for cidr in &access.spec.source_ranges {
            rules.push(rule(&protocol, *port, cidr, client_rule(lb)));
        }
    }
    // The client rule covers the health checks when it is open to all, over TCP, on the
    // same ports.
    let covered = access.spec.source_ranges == ["0.0.0.0/0"]
        && protocol == "tcp"
        && health_ports == client_ports;
    if !covered {
        for port in &health_ports {
            for cidr in &access.subnet_cidrs {
                rules.push(rule("tcp", *port, cidr, health_rule(lb)));
            }
        }
    }
    rules
}

//! `LoadBalancer`: a network load balancer with instance targets per Service, as upstream's
//! `ensureLoadBalancerv2`, and reconciled further than upstream where AWS allows it.
//! Owns the life of the cloud objects made for a Service (load balancer, one target group
//! and listener per port, targets, attributes, node security-group rules) and the
//! Service's status (`hostname` = the load balancer's DNS name).
//!
//! - **Selection.** `service.beta.kubernetes.io/aws-load-balancer-type: nlb` only; `nlb-ip`
//!   and `external` belong to the AWS Load Balancer Controller (`implemented-elsewhere`, and
//!   a load balancer made here before the type changed is deleted, not left behind); a
//!   Service without the annotation is refused with an error naming it (upstream would make
//!   a Classic ELB, which this provider does not).
//! - **Changes.** Each ensure (and each update, which runs the whole ensure, as upstream)
//!   makes listeners, target groups, health checks, targets, the cross-zone attribute and
//!   the source ranges' rules what the Service asks now: upstream ignores most annotation
//!   edits, its users' most common complaint. A target group whose settings cannot change
//!   in place (ports, protocol, health-check protocol or interval: its name hashes them) is
//!   replaced. The scheme and the subnets cannot change on an NLB: an edit of
//!   `…-internal` or `…-subnets` is reported as an error naming the annotation (after
//!   everything else is reconciled) until the Service is recreated.
//! - **Targets.** Every node with an instance, or with
//!   `service.beta.kubernetes.io/aws-load-balancer-target-node-labels` only the nodes with
//!   those labels (whole nodes are read then; otherwise only provider IDs), re-chosen on
//!   each ensure and update, so an edit of the annotation or of a node's labels moves them.
//! - **Deletion** removes the load balancer, its target groups (attached, or made for the
//!   Service's ports and left unattached by a failed ensure) and its security-group rules,
//!   and nothing else.

use std::collections::BTreeSet;
use std::time::Duration;

use wasm_ccm_sdk::labels::LabelSelector;
use wasm_ccm_sdk::{Error, LbIngress, LbStatus, Nodes, Service};

use crate::AwsProvider;
use crate::config::Config;
use crate::ec2::{self, Instance};
use crate::elbv2::{self, LoadBalancer, TargetGroup};
use crate::instances::{by_id, instance_id_of, list_cluster};
use crate::query::{Aws, Query};
use crate::security_groups::{self, Access};
use crate::spec::{
    self, CROSS_ZONE_ATTRIBUTE, INTERNAL, PortMapping, SUBNETS, Selection, Spec, TARGET_NODE_LABELS,
};
use crate::subnets;

/// How long the host waits before asking again about a load balancer in a state that is
/// neither active nor provisioning.
const STATE_RETRY: Duration = Duration::from_secs(10);

impl wasm_ccm_sdk::LoadBalancers for AwsProvider {
    fn get_load_balancer(cluster_name: String, svc: Service) -> Result<Option<LbStatus>, Error> {
        let _ = cluster_name;
        if let Ok(Selection::Elsewhere) = spec::selection(&svc) {
            return Ok(None);
        }
        let (_, aws) = crate::load()?;
        let name = wasm_ccm_sdk::default_load_balancer_name(&svc);
        Ok(elbv2::load_balancer(&aws, &name)?.map(|lb| LbStatus {
            ingress: ingress(&lb).into_iter().collect(),
        }))
    }

    fn ensure_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<LbStatus, Error> {
        let _ = cluster_name;
        ensure(&svc, &nodes)
    }

    fn update_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<(), Error> {
        let _ = cluster_name;
        ensure(&svc, &nodes).map(drop)
    }

    fn ensure_load_balancer_deleted(cluster_name: String, svc: Service) -> Result<(), Error> {
        let _ = cluster_name;
        delete(&svc)
    }
}

/// Delete what this provider made for `svc`. A Service handed to another controller since
/// (`nlb-ip`, `external`) is no exception: what was made for it under this provider's name
/// is still this provider's to delete.
fn delete(svc: &Service) -> Result<(), Error> {
    let (config, aws) = crate::load()?;
    let name = wasm_ccm_sdk::default_load_balancer_name(svc);
    let mut groups = Vec::new();
    if let Some(lb) = elbv2::load_balancer(&aws, &name)? {
        let listeners = elbv2::listeners(&aws, &lb.arn)?;
        groups = elbv2::target_groups(&aws, &lb.arn, &listeners)?;
        elbv2::delete_load_balancer(&aws, &lb.arn)?;
        wasm_ccm_sdk::info!(
            "deleted load balancer {name} of service {}/{}",
            svc.namespace,
            svc.name
        );
    }
    // Groups made for the Service's ports but never attached (an ensure that failed).
    if let Ok(spec) = spec::spec(&config, svc) {
        for mapping in &spec.mappings {
            if !groups.iter().any(|g| g.name == mapping.target_group)
                && let Some(group) = elbv2::target_group(&aws, &mapping.target_group)?
            {
                groups.push(group);
            }
        }
    }
    for group in &groups {
        elbv2::delete_target_group(&aws, &group.arn)?;
    }
    let instances = list_cluster(&config, &aws)?;
    security_groups::reconcile(&config, &aws, &name, &instances, None)
}

/// A Service handed to another controller (`nlb-ip`, `external`): the load balancer this
/// provider made for it before, if any, is deleted, so the Service is not served twice and
/// the old one is not left behind.
fn hand_over(svc: &Service) -> Result<(), Error> {
    let (_, aws) = crate::load()?;
    let name = wasm_ccm_sdk::default_load_balancer_name(svc);
    if elbv2::load_balancer(&aws, &name)?.is_none() {
        return Ok(());
    }
    wasm_ccm_sdk::info!(
        "service {}/{} is now for the AWS Load Balancer Controller: deleting the load balancer {name} made for it",
        svc.namespace,
        svc.name
    );
    delete(svc)
}

/// Create or reconcile the load balancer of `svc` for `nodes`.
fn ensure(svc: &Service, nodes: &Nodes<'_>) -> Result<LbStatus, Error> {
    match spec::selection(svc)? {
        Selection::Elsewhere => {
            hand_over(svc)?;
            return Err(Error::ImplementedElsewhere);
        }
        Selection::Nlb => {}
    }
    let (config, aws) = crate::load()?;
    let spec = spec::spec(&config, svc)?;
    let instances = targets(&config, &aws, nodes, spec.target_nodes.as_ref())?;
    let mut unchangeable = Vec::new();
    let (lb, subnet_cidrs) = match elbv2::load_balancer(&aws, &spec.name)? {
        None => {
            let subnets = match &spec.subnets {
                Some(items) => subnets::named(&aws, svc, items)?,
                None => {
                    let vpc = vpc(&config, &instances)?;
                    subnets::discover(&config, &aws, &vpc, spec.internal)?
                }
            };
            let ids: Vec<String> = subnets.iter().map(|s| s.id.clone()).collect();
            let lb =
                elbv2::create_load_balancer(&aws, &spec.name, spec.internal, &ids, &spec.tags)?;
            wasm_ccm_sdk::info!(
                "created load balancer {} for service {}/{} in {ids:?}",
                spec.name,
                svc.namespace,
                svc.name
            );
            (lb, subnets.into_iter().map(|s| s.cidr).collect())
        }
        Some(lb) => {
            if (lb.scheme == "internal") != spec.internal {
                unchangeable.push(format!(
                    "{INTERNAL} asks for an {} load balancer, but {} is {}",
                    if spec.internal {
                        "internal"
                    } else {
                        "internet-facing"
                    },
                    lb.name,
                    lb.scheme
                ));
            }
            if let Some(items) = &spec.subnets {
                let wanted: BTreeSet<String> = subnets::named(&aws, svc, items)?
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                let current: BTreeSet<String> = lb.subnets.iter().cloned().collect();
                if wanted != current {
                    unchangeable.push(format!(
                        "{SUBNETS} names {wanted:?}, but {} is in {current:?}",
                        lb.name
                    ));
                }
            }
            let query = Query::new("DescribeSubnets").filter("subnet-id", lb.subnets.iter());
            let cidrs = ec2::describe_subnets(&aws, query)?
                .into_iter()
                .map(|s| s.cidr)
                .collect();
            (lb, cidrs)
        }
    };
    listeners(&aws, &lb, &spec, &instances)?;
    let cross_zone = spec.cross_zone.to_string();
    if elbv2::attribute(&aws, &lb.arn, CROSS_ZONE_ATTRIBUTE)?.as_deref() != Some(&cross_zone) {
        elbv2::set_attribute(&aws, &lb.arn, CROSS_ZONE_ATTRIBUTE, &cross_zone)?;
    }
    let access = Access {
        spec: &spec,
        subnet_cidrs,
    };
    security_groups::reconcile(&config, &aws, &spec.name, &instances, Some(&access))?;
    if !unchangeable.is_empty() {
        return Err(Error::other(format!(
            "service {}/{}: {}; a network load balancer's scheme and subnets cannot change: \
             delete and recreate the Service to apply them",
            svc.namespace,
            svc.name,
            unchangeable.join("; ")
        )));
    }
    match ingress(&lb) {
        Some(ingress) => Ok(LbStatus {
            ingress: vec![ingress],
        }),
        None => Err(Error::retry_after(
            STATE_RETRY,
            format!("load balancer {} is {}", lb.name, lb.state),
        )),
    }
}

/// The ingress point of `lb` while it is active or provisioning (upstream's).
fn ingress(lb: &LoadBalancer) -> Option<LbIngress> {
    let usable = matches!(lb.state.as_str(), "active" | "provisioning");
    (usable && !lb.dns_name.is_empty()).then(|| LbIngress {
        ip: None,
        hostname: Some(lb.dns_name.clone()),
        ip_mode: None,
        ports: Vec::new(),
    })
}

/// The cluster's VPC: the configured one, else the one its target instances are in.
fn vpc(config: &Config, instances: &[Instance]) -> Result<String, Error> {
    if let Some(vpc) = &config.vpc_id {
        return Ok(vpc.clone());
    }
    let vpcs: BTreeSet<&str> = instances.iter().map(|i| i.vpc_id.as_str()).collect();
    match vpcs.into_iter().collect::<Vec<_>>().as_slice() {
        [vpc] if !vpc.is_empty() => Ok(vpc.to_string()),
        found => Err(Error::other(format!(
            "cannot tell the cluster's VPC from its nodes (in {found:?}): set \"vpc_id\" in the \
             cloud config"
        ))),
    }
}

/// The instances behind `nodes` (those `selector` matches, when the Service has one) that
/// still exist. A Node can outlive its instance until the lifecycle controller deletes it;
/// it must not fail the load balancer. Without a selector only provider IDs are read, with
/// one whole nodes (their declared labels); instances come from the host cache (one
/// listing of the cluster for all).
fn targets(
    config: &Config,
    aws: &Aws,
    nodes: &Nodes<'_>,
    selector: Option<&LabelSelector>,
) -> Result<Vec<Instance>, Error> {
    let selected = nodes.selected(selector);
    if let Some(of) = selected.of {
        let chosen = selected.provider_ids.len();
        wasm_ccm_sdk::info!("{chosen} of {of} nodes have the labels of {TARGET_NODE_LABELS}");
    }
    let provider_ids = &selected.provider_ids;
    let mut seen = BTreeSet::new();
    let mut instances = Vec::new();
    let mut skipped = Vec::new();
    for (index, provider_id) in provider_ids.iter().enumerate() {
        let Some(id) = provider_id.as_deref().and_then(instance_id_of) else {
            skipped.push(index);
            continue;
        };
        if !seen.insert(id) {
            continue;
        }
        match by_id(config, aws, id)? {
            Some(instance) if instance.state != "terminated" => instances.push(instance),
            _ => wasm_ccm_sdk::info!("not targeting instance {id}: it no longer exists"),
        }
    }
    if !skipped.is_empty() {
        let names = selected.names(nodes);
        for index in skipped {
            wasm_ccm_sdk::info!(
                "node {} is not a load-balancer target: provider ID {:?} is not aws:///ZONE/i-…",
                names[index],
                provider_ids[index]
            );
        }
    }
    Ok(instances)
}

/// One listener and target group per port; listeners and groups of ports the Service no
/// longer has are deleted.
fn listeners(
    aws: &Aws,
    lb: &LoadBalancer,
    spec: &Spec,
    instances: &[Instance],
) -> Result<(), Error> {
    let listeners = elbv2::listeners(aws, &lb.arn)?;
    let groups = elbv2::target_groups(aws, &lb.arn, &listeners)?;
    let mut kept = BTreeSet::new();
    for mapping in &spec.mappings {
        let group = match groups.iter().find(|g| g.name == mapping.target_group) {
            Some(group) => {
                health_check(aws, group, mapping)?;
                group.clone()
            }
            None => match elbv2::target_group(aws, &mapping.target_group)? {
                Some(group) => group,
                None => {
                    elbv2::create_target_group(aws, new_group(mapping, &lb.vpc_id, &spec.tags))?
                }
            },
        };
        sync_targets(aws, &group, mapping, instances)?;
        kept.insert(group.arn.clone());
        let listener = listeners
            .iter()
            .find(|l| l.port == mapping.port && l.protocol == mapping.protocol);
        match listener {
            Some(listener) if listener.target_group_arn == group.arn => {}
            Some(listener) => elbv2::forward_listener(aws, &listener.arn, &group.arn)?,
            None => elbv2::create_listener(
                aws,
                &lb.arn,
                mapping.port,
                mapping.protocol,
                &group.arn,
                &spec.tags,
            )?,
        }
    }
    for listener in &listeners {
        let wanted = spec
            .mappings
            .iter()
            .any(|m| m.port == listener.port && m.protocol == listener.protocol);
        if !wanted {
            elbv2::delete_listener(aws, &listener.arn)?;
        }
    }
    for group in groups.iter().filter(|g| !kept.contains(&g.arn)) {
        elbv2::delete_target_group(aws, &group.arn)?;
    }
    Ok(())
}

/// `CreateTargetGroup` for `mapping` in `vpc`: instance targets on the node port.
fn new_group(mapping: &PortMapping, vpc: &str, tags: &[(String, String)]) -> Query {
    let health = &mapping.health;
    let query = Query::new("CreateTargetGroup")
        .param("Name", &mapping.target_group)
        .param("Protocol", mapping.protocol)
        .param("Port", mapping.node_port.to_string())
        .param("VpcId", vpc)
        .param("TargetType", "instance")
        .param("HealthCheckProtocol", &health.protocol)
        .param("HealthCheckPort", &health.port)
        .param("HealthCheckIntervalSeconds", health.interval.to_string())
        .param(
            "HealthyThresholdCount",
            health.healthy_threshold.to_string(),
        )
        .param(
            "UnhealthyThresholdCount",
            health.unhealthy_threshold.to_string(),
        )
        .tags(tags);
    if health.protocol == "TCP" {
        query
    } else {
        query.param("HealthCheckPath", &health.path)
    }
}

/// Make the health check of `group` what `mapping` asks where it can change in place.
fn health_check(aws: &Aws, group: &TargetGroup, mapping: &PortMapping) -> Result<(), Error> {
    let health = &mapping.health;
    let path_differs = health.protocol != "TCP" && group.health_check_path != health.path;
    if group.health_check_port == health.port
        && group.healthy_threshold == health.healthy_threshold
        && group.unhealthy_threshold == health.unhealthy_threshold
        && !path_differs
    {
        return Ok(());
    }
    let mut query = Query::new("ModifyTargetGroup")
        .param("TargetGroupArn", &group.arn)
        .param("HealthCheckPort", &health.port)
        .param(
            "HealthyThresholdCount",
            health.healthy_threshold.to_string(),
        )
        .param(
            "UnhealthyThresholdCount",
            health.unhealthy_threshold.to_string(),
        );
    if health.protocol != "TCP" {
        query = query.param("HealthCheckPath", &health.path);
    }
    elbv2::modify_target_group(aws, query)?;
    Ok(())
}

/// Register the instances missing from `group` and deregister the others, deregistration
/// first (targets that are kept are not touched: registration is slow on NLBs).
fn sync_targets(
    aws: &Aws,
    group: &TargetGroup,
    mapping: &PortMapping,
    instances: &[Instance],
) -> Result<(), Error> {
    let wanted: BTreeSet<(String, i32)> = instances
        .iter()
        .map(|i| (i.id.clone(), mapping.node_port))
        .collect();
    let current: BTreeSet<(String, i32)> = elbv2::targets(aws, &group.arn)?.into_iter().collect();
    let stale: Vec<(String, i32)> = current.difference(&wanted).cloned().collect();
    let missing: Vec<(String, i32)> = wanted.difference(&current).cloned().collect();
    elbv2::change_targets(aws, &group.arn, &stale, false)?;
    elbv2::change_targets(aws, &group.arn, &missing, true)?;
    Ok(())
}

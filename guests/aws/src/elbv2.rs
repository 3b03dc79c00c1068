//! ELBv2 (network load balancers) as typed calls: load balancers, target groups, targets,
//! listeners and attributes, read from the XML answers into the little this provider keeps
//! of them. Not-found answers for a lookup by name are `None`, not errors.

use crate::query::{Aws, AwsError, Query, Service};
use crate::xml::Element;

/// A load balancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancer {
    pub arn: String,
    pub name: String,
    pub dns_name: String,
    /// `internet-facing` or `internal`.
    pub scheme: String,
    pub vpc_id: String,
    /// `provisioning`, `active`, `active_impaired` or `failed`.
    pub state: String,
    /// The subnets it is in.
    pub subnets: Vec<String>,
}

/// A target group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetGroup {
    pub arn: String,
    pub name: String,
    pub protocol: String,
    pub port: i32,
    pub health_check_protocol: String,
    pub health_check_port: String,
    pub health_check_path: String,
    pub health_check_interval: i32,
    pub healthy_threshold: i32,
    pub unhealthy_threshold: i32,
}

/// A listener and the target group it forwards to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    pub arn: String,
    pub port: i32,
    pub protocol: String,
    pub target_group_arn: String,
}

/// A registered target: instance and port.
pub type Target = (String, i32);

fn int(node: &roxmltree::Node<'_, '_>, name: &str) -> i32 {
    node.text_of(name)
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_default()
}

/// The members of the result list `list` of an answer (`…Result/<list>/member`).
fn members<'a>(root: roxmltree::Node<'a, 'a>, list: &str) -> Vec<roxmltree::Node<'a, 'a>> {
    root.find(list)
        .map(|node| {
            node.children()
                .filter(|child| child.is_element() && child.tag_name().name() == "member")
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn load_balancers_of(root: roxmltree::Node<'_, '_>) -> Vec<LoadBalancer> {
    members(root, "LoadBalancers")
        .iter()
        .map(|lb| LoadBalancer {
            arn: lb.string("LoadBalancerArn"),
            name: lb.string("LoadBalancerName"),
            dns_name: lb.string("DNSName"),
            scheme: lb.string("Scheme"),
            vpc_id: lb.string("VpcId"),
            state: lb
                .child("State")
                .map(|state| state.string("Code"))
                .unwrap_or_default(),
            subnets: lb
                .list("AvailabilityZones")
                .iter()
                .map(|zone| zone.string("SubnetId"))
                .collect(),
        })
        .collect()
}

fn groups_in(root: roxmltree::Node<'_, '_>) -> Vec<TargetGroup> {
    members(root, "TargetGroups")
        .iter()
        .map(|group| TargetGroup {
            arn: group.string("TargetGroupArn"),
            name: group.string("TargetGroupName"),
            protocol: group.string("Protocol"),
            port: int(group, "Port"),
            health_check_protocol: group.string("HealthCheckProtocol"),
            health_check_port: group.string("HealthCheckPort"),
            health_check_path: group.string("HealthCheckPath"),
            health_check_interval: int(group, "HealthCheckIntervalSeconds"),
            healthy_threshold: int(group, "HealthyThresholdCount"),
            unhealthy_threshold: int(group, "UnhealthyThresholdCount"),
        })
        .collect()
}

fn is_not_found(err: &AwsError) -> bool {
    matches!(
        err.code(),
        Some("LoadBalancerNotFound" | "TargetGroupNotFound" | "ListenerNotFound")
    )
}

/// The load balancer named `name`, if there is one.
pub fn load_balancer(aws: &Aws, name: &str) -> Result<Option<LoadBalancer>, AwsError> {
    let query = Query::new("DescribeLoadBalancers").param("Names.member.1", name);
    match aws.call(Service::Elbv2, &query) {
        Ok(body) => {
            let document = crate::query::parse(query.action(), &body)?;
            Ok(load_balancers_of(document.root_element())
                .into_iter()
                .next())
        }
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `CreateLoadBalancer` of type `network` with one subnet mapping per subnet.
pub fn create_load_balancer(
    aws: &Aws,
    name: &str,
    internal: bool,
    subnets: &[String],
    tags: &[(String, String)],
) -> Result<LoadBalancer, AwsError> {
    let mut query = Query::new("CreateLoadBalancer")
        .param("Name", name)
        .param("Type", "network")
        .param(
            "Scheme",
            if internal {
                "internal"
            } else {
                "internet-facing"
            },
        )
        .tags(tags);
    for (index, subnet) in subnets.iter().enumerate() {
        query = query.param(
            format!("SubnetMappings.member.{}.SubnetId", index + 1),
            subnet,
        );
    }
    let body = aws.call(Service::Elbv2, &query)?;
    let document = crate::query::parse(query.action(), &body)?;
    load_balancers_of(document.root_element())
        .into_iter()
        .next()
        .ok_or_else(|| AwsError::Malformed {
            action: query.action(),
            error: "no load balancer in the answer".into(),
        })
}

pub fn delete_load_balancer(aws: &Aws, arn: &str) -> Result<(), AwsError> {
    let query = Query::new("DeleteLoadBalancer").param("LoadBalancerArn", arn);
    gone_is_done(aws.call(Service::Elbv2, &query))
}

/// The target groups attached to load balancer `arn` (moto answers `TargetGroupNotFound`
/// when there are none).
fn target_groups_of_load_balancer(aws: &Aws, arn: &str) -> Result<Vec<TargetGroup>, AwsError> {
    let mut groups = Vec::new();
    let query = Query::new("DescribeTargetGroups").param("LoadBalancerArn", arn);
    let listed = aws.pages(Service::Elbv2, query, |root| {
        groups.extend(groups_in(root));
        Ok(())
    });
    match listed {
        Err(err) if !is_not_found(&err) => Err(err),
        _ => Ok(groups),
    }
}

/// The target groups of load balancer `lb`: those AWS lists as attached, and those its
/// `listeners` forward to (moto does not list a group a listener was modified to forward to).
pub fn target_groups(
    aws: &Aws,
    lb: &str,
    listeners: &[Listener],
) -> Result<Vec<TargetGroup>, AwsError> {
    let mut groups = target_groups_of_load_balancer(aws, lb)?;
    let missing: Vec<&str> = listeners
        .iter()
        .map(|l| l.target_group_arn.as_str())
        .filter(|arn| !arn.is_empty() && !groups.iter().any(|g| g.arn == *arn))
        .collect();
    if !missing.is_empty() {
        let query = Query::new("DescribeTargetGroups").list("TargetGroupArns.member", missing);
        let body = aws.call(Service::Elbv2, &query)?;
        let document = crate::query::parse(query.action(), &body)?;
        groups.extend(groups_in(document.root_element()));
    }
    Ok(groups)
}

/// The target group named `name`, if there is one.
pub fn target_group(aws: &Aws, name: &str) -> Result<Option<TargetGroup>, AwsError> {
    let query = Query::new("DescribeTargetGroups").param("Names.member.1", name);
    match aws.call(Service::Elbv2, &query) {
        Ok(body) => {
            let document = crate::query::parse(query.action(), &body)?;
            Ok(groups_in(document.root_element()).into_iter().next())
        }
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// `CreateTargetGroup` as `query` describes it (AWS answers an identical one that exists
/// with that one).
pub fn create_target_group(aws: &Aws, query: Query) -> Result<TargetGroup, AwsError> {
    let body = aws.call(Service::Elbv2, &query)?;
    let document = crate::query::parse(query.action(), &body)?;
    groups_in(document.root_element())
        .into_iter()
        .next()
        .ok_or_else(|| AwsError::Malformed {
            action: query.action(),
            error: "no target group in the answer".into(),
        })
}

pub fn delete_target_group(aws: &Aws, arn: &str) -> Result<(), AwsError> {
    let query = Query::new("DeleteTargetGroup").param("TargetGroupArn", arn);
    gone_is_done(aws.call(Service::Elbv2, &query))
}

/// The targets of group `arn`, but those on their way out.
pub fn targets(aws: &Aws, arn: &str) -> Result<Vec<Target>, AwsError> {
    let query = Query::new("DescribeTargetHealth").param("TargetGroupArn", arn);
    let body = aws.call(Service::Elbv2, &query)?;
    let document = crate::query::parse(query.action(), &body)?;
    Ok(members(document.root_element(), "TargetHealthDescriptions")
        .iter()
        .filter(|description| {
            description
                .child("TargetHealth")
                .and_then(|health| health.text_of("Reason"))
                != Some("Target.DeregistrationInProgress")
        })
        .filter_map(|description| {
            let target = description.child("Target")?;
            Some((target.string("Id"), int(&target, "Port")))
        })
        .collect())
}

/// How many targets one `RegisterTargets` or `DeregisterTargets` carries (upstream's).
const TARGETS_PER_CALL: usize = 100;

/// `RegisterTargets` (`register`) or `DeregisterTargets` of `targets` in group `arn`.
pub fn change_targets(
    aws: &Aws,
    arn: &str,
    targets: &[Target],
    register: bool,
) -> Result<(), AwsError> {
    let action = if register {
        "RegisterTargets"
    } else {
        "DeregisterTargets"
    };
    for chunk in targets.chunks(TARGETS_PER_CALL) {
        let mut query = Query::new(action).param("TargetGroupArn", arn);
        for (index, (id, port)) in chunk.iter().enumerate() {
            let prefix = format!("Targets.member.{}", index + 1);
            query = query
                .param(format!("{prefix}.Id"), id)
                .param(format!("{prefix}.Port"), port.to_string());
        }
        aws.call(Service::Elbv2, &query)?;
    }
    Ok(())
}

/// The listeners of load balancer `arn`.
pub fn listeners(aws: &Aws, arn: &str) -> Result<Vec<Listener>, AwsError> {
    let mut listeners = Vec::new();
    let query = Query::new("DescribeListeners").param("LoadBalancerArn", arn);
    aws.pages(Service::Elbv2, query, |root| {
        listeners.extend(members(root, "Listeners").iter().map(|listener| {
            Listener {
                arn: listener.string("ListenerArn"),
                port: int(listener, "Port"),
                protocol: listener.string("Protocol"),
                target_group_arn: listener
                    .list("DefaultActions")
                    .first()
                    .map(|action| action.string("TargetGroupArn"))
                    .unwrap_or_default(),
            }
        }));
        Ok(())
    })?;
    Ok(listeners)
}

/// A listener on `port`/`protocol` of load balancer `lb` forwarding to `group`.
pub fn create_listener(
    aws: &Aws,
    lb: &str,
    port: i32,
    protocol: &str,
    group: &str,
    tags: &[(String, String)],
) -> Result<(), AwsError> {
    let query = Query::new("CreateListener")
        .param("LoadBalancerArn", lb)
        .param("Port", port.to_string())
        .param("Protocol", protocol)
        .param("DefaultActions.member.1.Type", "forward")
        .param("DefaultActions.member.1.TargetGroupArn", group)
        .tags(tags);
    aws.call(Service::Elbv2, &query).map(drop)
}

/// Point listener `arn` at `group`.
pub fn forward_listener(aws: &Aws, arn: &str, group: &str) -> Result<(), AwsError> {
    let query = Query::new("ModifyListener")
        .param("ListenerArn", arn)
        .param("DefaultActions.member.1.Type", "forward")
        .param("DefaultActions.member.1.TargetGroupArn", group);
    aws.call(Service::Elbv2, &query).map(drop)
}

pub fn delete_listener(aws: &Aws, arn: &str) -> Result<(), AwsError> {
    let query = Query::new("DeleteListener").param("ListenerArn", arn);
    gone_is_done(aws.call(Service::Elbv2, &query))
}

/// The value of attribute `key` of load balancer `arn`.
pub fn attribute(aws: &Aws, arn: &str, key: &str) -> Result<Option<String>, AwsError> {
    let query = Query::new("DescribeLoadBalancerAttributes").param("LoadBalancerArn", arn);
    let body = aws.call(Service::Elbv2, &query)?;
    let document = crate::query::parse(query.action(), &body)?;
    Ok(members(document.root_element(), "Attributes")
        .iter()
        .find(|attribute| attribute.text_of("Key") == Some(key))
        .map(|attribute| attribute.string("Value")))
}

pub fn set_attribute(aws: &Aws, arn: &str, key: &str, value: &str) -> Result<(), AwsError> {
    let query = Query::new("ModifyLoadBalancerAttributes")
        .param("LoadBalancerArn", arn)
        .param("Attributes.member.1.Key", key)
        .param("Attributes.member.1.Value", value);
    aws.call(Service::Elbv2, &query).map(drop)
}

/// `ModifyTargetGroup` as `query` describes it.
pub fn modify_target_group(aws: &Aws, query: Query) -> Result<(), AwsError> {
    aws.call(Service::Elbv2, &query).map(drop)
}

/// A delete whose object is already gone has done its job.
fn gone_is_done(result: Result<String, AwsError>) -> Result<(), AwsError> {
    match result {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `DescribeLoadBalancers` answer for an NLB (moto's ARN says `app/` and its DNS
    /// name is Classic-shaped; AWS's are these).
    const DESCRIBE_NLB: &str = r#"<DescribeLoadBalancersResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/">
  <DescribeLoadBalancersResult>
    <LoadBalancers>
      <member>
        <LoadBalancerArn>arn:aws:elasticloadbalancing:us-west-2:123456789012:loadbalancer/net/a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6/1a2b3c4d5e6f7a8b</LoadBalancerArn>
        <Scheme>internet-facing</Scheme>
        <LoadBalancerName>a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6</LoadBalancerName>
        <VpcId>vpc-3ac0fb5f</VpcId>
        <CanonicalHostedZoneId>Z18D5FSROUN65G</CanonicalHostedZoneId>
        <CreatedTime>2016-03-25T21:29:48.850Z</CreatedTime>
        <AvailabilityZones>
          <member><SubnetId>subnet-8360a9e7</SubnetId><ZoneName>us-west-2a</ZoneName><LoadBalancerAddresses/></member>
          <member><SubnetId>subnet-b7d581c0</SubnetId><ZoneName>us-west-2b</ZoneName><LoadBalancerAddresses/></member>
        </AvailabilityZones>
        <DNSName>a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6-1a2b3c4d5e6f7a8b.elb.us-west-2.amazonaws.com</DNSName>
        <State><Code>provisioning</Code></State>
        <Type>network</Type>
        <IpAddressType>ipv4</IpAddressType>
      </member>
    </LoadBalancers>
  </DescribeLoadBalancersResult>
  <ResponseMetadata><RequestId>6581c0ac-f39f-11e5-bb98-57195a6eb84a</RequestId></ResponseMetadata>
</DescribeLoadBalancersResponse>"#;

    #[test]
    fn an_nlb_is_read_as_aws_describes_it() {
        let document = roxmltree::Document::parse(DESCRIBE_NLB).unwrap();
        let lbs = load_balancers_of(document.root_element());
        assert_eq!(
            lbs,
            [LoadBalancer {
                arn: "arn:aws:elasticloadbalancing:us-west-2:123456789012:loadbalancer/net/a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6/1a2b3c4d5e6f7a8b".into(),
                name: "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6".into(),
                dns_name: "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6-1a2b3c4d5e6f7a8b.elb.us-west-2.amazonaws.com".into(),
                scheme: "internet-facing".into(),
                vpc_id: "vpc-3ac0fb5f".into(),
                state: "provisioning".into(),
                subnets: vec!["subnet-8360a9e7".into(), "subnet-b7d581c0".into()],
            }]
        );
    }
}

//! EC2 as typed calls: instances, availability zones, route tables, subnets and security
//! groups, read from the XML answers into the little this provider keeps of them.

use serde::{Deserialize, Serialize};

use crate::query::{Aws, AwsError, Query, Service};
use crate::xml::{Element, tags};

/// The instance states a node can still be behind (all but `terminated`).
pub const LIVE_STATES: [&str; 5] = ["pending", "running", "shutting-down", "stopping", "stopped"];

/// An instance, as much as this provider reads of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    /// `pending`, `running`, `shutting-down`, `terminated`, `stopping` or `stopped`; empty
    /// when AWS gave none.
    pub state: String,
    pub instance_type: String,
    pub zone: String,
    pub vpc_id: String,
    /// The primary private IPv4 address.
    pub private_ip: String,
    pub public_ip: String,
    pub private_dns: String,
    pub public_dns: String,
    /// The private IPv4 addresses of its in-use network interfaces, by device index.
    pub interface_ips: Vec<String>,
    /// The IDs of its security groups.
    pub security_groups: Vec<String>,
    /// Whether it carries the cluster's tag.
    pub in_cluster: bool,
}

impl Instance {
    /// Read an `instancesSet` item; `cluster_tag` decides [`Instance::in_cluster`].
    fn read(item: roxmltree::Node<'_, '_>, cluster_tag: &str) -> Instance {
        let mut interfaces: Vec<(u32, Vec<String>)> = item
            .list("networkInterfaceSet")
            .into_iter()
            .filter(|eni| eni.text_of("status") == Some("in-use"))
            .map(|eni| {
                let index = eni
                    .child("attachment")
                    .and_then(|attachment| attachment.text_of("deviceIndex"))
                    .and_then(|index| index.parse().ok())
                    .unwrap_or(u32::MAX);
                let ips = eni
                    .list("privateIpAddressesSet")
                    .iter()
                    .filter_map(|ip| ip.text_of("privateIpAddress"))
                    .map(str::to_string)
                    .collect();
                (index, ips)
            })
            .collect();
        interfaces.sort_by_key(|(index, _)| *index);
        Instance {
            id: item.string("instanceId"),
            state: item
                .child("instanceState")
                .map(|state| state.string("name"))
                .unwrap_or_default(),
            instance_type: item.string("instanceType"),
            zone: item
                .child("placement")
                .map(|placement| placement.string("availabilityZone"))
                .unwrap_or_default(),
            vpc_id: item.string("vpcId"),
            private_ip: item.string("privateIpAddress"),
            public_ip: item.string("ipAddress"),
            private_dns: item.string("privateDnsName"),
            public_dns: item.string("dnsName"),
            interface_ips: interfaces.into_iter().flat_map(|(_, ips)| ips).collect(),
            security_groups: item
                .list("groupSet")
                .iter()
                .map(|group| group.string("groupId"))
                .collect(),
            in_cluster: tags(&item, "tagSet")
                .iter()
                .any(|(key, _)| key == cluster_tag),
        }
    }
}

/// The instances of a `DescribeInstances` answer page.
fn instances_of(root: roxmltree::Node<'_, '_>, cluster_tag: &str) -> Vec<Instance> {
    root.list("reservationSet")
        .into_iter()
        .flat_map(|reservation| reservation.list("instancesSet"))
        .map(|item| Instance::read(item, cluster_tag))
        .collect()
}

/// `DescribeInstances` with `query`'s filters or IDs, every page.
pub fn describe_instances(
    aws: &Aws,
    query: Query,
    cluster_tag: &str,
) -> Result<Vec<Instance>, AwsError> {
    let mut instances = Vec::new();
    aws.pages(Service::Ec2, query, |root| {
        instances.extend(instances_of(root, cluster_tag));
        Ok(())
    })?;
    Ok(instances)
}

/// `DescribeAvailabilityZones`: (zone name, zone ID) of the region's zones.
pub fn zone_ids(aws: &Aws) -> Result<Vec<(String, String)>, AwsError> {
    let query = Query::new("DescribeAvailabilityZones");
    let body = aws.call(Service::Ec2, &query)?;
    let document = crate::query::parse(query.action(), &body)?;
    Ok(document
        .root_element()
        .list("availabilityZoneInfo")
        .iter()
        .map(|zone| (zone.string("zoneName"), zone.string("zoneId")))
        .collect())
}

/// A route table, its IPv4 routes and the subnets it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    pub routes: Vec<TableRoute>,
    /// The subnets explicitly associated with it.
    pub subnets: Vec<String>,
    /// Whether it is its VPC's main table (serving every subnet without an association).
    pub main: bool,
}

impl RouteTable {
    /// Whether it routes to an internet gateway: its subnets are public.
    pub fn is_public(&self) -> bool {
        self.routes.iter().any(|route| {
            route
                .gateway_id
                .as_deref()
                .is_some_and(|gateway| gateway.starts_with("igw-"))
        })
    }
}

/// One IPv4 route of a [`RouteTable`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableRoute {
    pub destination_cidr: String,
    /// The instance it sends traffic to, if it targets one.
    pub instance_id: Option<String>,
    /// The gateway it sends traffic to (`local`, `igw-…`), if it targets one.
    pub gateway_id: Option<String>,
    /// `active` or `blackhole` (its target is gone).
    pub state: String,
}

/// The route tables of a `DescribeRouteTables` answer page.
pub(crate) fn route_tables_of(root: roxmltree::Node<'_, '_>) -> Vec<RouteTable> {
    root.list("routeTableSet")
        .iter()
        .map(|table| RouteTable {
            id: table.string("routeTableId"),
            routes: table
                .list("routeSet")
                .iter()
                .filter_map(|route| {
                    Some(TableRoute {
                        destination_cidr: route.text_of("destinationCidrBlock")?.to_string(),
                        instance_id: route.text_of("instanceId").map(str::to_string),
                        gateway_id: route.text_of("gatewayId").map(str::to_string),
                        state: route.string("state"),
                    })
                })
                .collect(),
            subnets: table
                .list("associationSet")
                .iter()
                .filter_map(|association| association.text_of("subnetId"))
                .map(str::to_string)
                .collect(),
            main: table
                .list("associationSet")
                .iter()
                .any(|association| association.text_of("main") == Some("true")),
        })
        .collect()
}

/// A subnet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub zone: String,
    pub cidr: String,
    pub tags: Vec<(String, String)>,
}

/// `DescribeSubnets` with `query`'s filters or IDs, every page.
pub fn describe_subnets(aws: &Aws, query: Query) -> Result<Vec<Subnet>, AwsError> {
    let mut subnets = Vec::new();
    aws.pages(Service::Ec2, query, |root| {
        subnets.extend(root.list("subnetSet").iter().map(|subnet| Subnet {
            id: subnet.string("subnetId"),
            zone: subnet.string("availabilityZone"),
            cidr: subnet.string("cidrBlock"),
            tags: tags(subnet, "tagSet"),
        }));
        Ok(())
    })?;
    Ok(subnets)
}

/// One ingress rule of a security group: a protocol, a port range and one source CIDR.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub cidr: String,
    pub description: String,
}

/// A security group and its IPv4 ingress rules, one per source CIDR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub in_cluster: bool,
    pub rules: Vec<Rule>,
}

/// `DescribeSecurityGroups` with `query`'s filters or IDs, every page.
pub fn describe_security_groups(
    aws: &Aws,
    query: Query,
    cluster_tag: &str,
) -> Result<Vec<SecurityGroup>, AwsError> {
    let mut groups = Vec::new();
    aws.pages(Service::Ec2, query, |root| {
        groups.extend(root.list("securityGroupInfo").iter().map(|group| {
            let rules = group
                .list("ipPermissions")
                .iter()
                .flat_map(|permission| {
                    let number = |name| {
                        permission
                            .text_of(name)
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(-1)
                    };
                    let (protocol, from, to) = (
                        permission.string("ipProtocol"),
                        number("fromPort"),
                        number("toPort"),
                    );
                    permission
                        .list("ipRanges")
                        .iter()
                        .map(|range| Rule {
                            protocol: protocol.clone(),
                            from_port: from,
                            to_port: to,
                            cidr: range.string("cidrIp"),
                            description: range.string("description"),
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            SecurityGroup {
                id: group.string("groupId"),
                in_cluster: tags(group, "tagSet")
                    .iter()
                    .any(|(key, _)| key == cluster_tag),
                rules,
            }
        }));
        Ok(())
    })?;
    Ok(groups)
}

/// `AuthorizeSecurityGroupIngress` (`grant`) or `RevokeSecurityGroupIngress` of `rules` on
/// group `id`.
pub fn change_ingress(aws: &Aws, id: &str, rules: &[Rule], grant: bool) -> Result<(), AwsError> {
    if rules.is_empty() {
        return Ok(());
    }
    let action = if grant {
        "AuthorizeSecurityGroupIngress"
    } else {
        "RevokeSecurityGroupIngress"
    };
    let mut query = Query::new(action).param("GroupId", id);
    for (index, rule) in rules.iter().enumerate() {
        let prefix = format!("IpPermissions.{}", index + 1);
        query = query
            .param(format!("{prefix}.IpProtocol"), &rule.protocol)
            .param(format!("{prefix}.FromPort"), rule.from_port.to_string())
            .param(format!("{prefix}.ToPort"), rule.to_port.to_string())
            .param(format!("{prefix}.IpRanges.1.CidrIp"), &rule.cidr);
        if grant {
            query = query.param(
                format!("{prefix}.IpRanges.1.Description"),
                &rule.description,
            );
        }
    }
    match aws.call(Service::Ec2, &query) {
        Ok(_) => Ok(()),
        // One rule already granted (or already revoked: a concurrent change, a retry) fails
        // the whole request: apply the rules one by one, each such rule being done.
        Err(err)
            if matches!(
                err.code(),
                Some("InvalidPermission.Duplicate" | "InvalidPermission.NotFound")
            ) =>
        {
            if rules.len() > 1 {
                for rule in rules {
                    change_ingress(aws, id, std::slice::from_ref(rule), grant)?;
                }
            }
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// `DescribeRouteTables` with `query`'s filters or IDs, every page.
pub fn describe_route_tables(aws: &Aws, query: Query) -> Result<Vec<RouteTable>, AwsError> {
    let mut tables = Vec::new();
    aws.pages(Service::Ec2, query, |root| {
        tables.extend(route_tables_of(root));
        Ok(())
    })?;
    Ok(tables)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An instance as real EC2 describes it (trimmed): two network interfaces listed out of
    /// device order, one of them detaching.
    const DESCRIBE_INSTANCES: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
    <reservationSet>
        <item>
            <reservationId>r-1234567890abcdef0</reservationId>
            <instancesSet>
                <item>
                    <instanceId>i-1234567890abcdef0</instanceId>
                    <imageId>ami-bff32ccc</imageId>
                    <instanceState><code>16</code><name>running</name></instanceState>
                    <privateDnsName>ip-192-168-1-88.eu-west-1.compute.internal</privateDnsName>
                    <dnsName>ec2-54-194-252-215.eu-west-1.compute.amazonaws.com</dnsName>
                    <instanceType>t2.micro</instanceType>
                    <placement><availabilityZone>eu-west-1c</availabilityZone><tenancy>default</tenancy></placement>
                    <subnetId>subnet-56f5f633</subnetId>
                    <vpcId>vpc-11112222</vpcId>
                    <privateIpAddress>192.168.1.88</privateIpAddress>
                    <ipAddress>54.194.252.215</ipAddress>
                    <sourceDestCheck>true</sourceDestCheck>
                    <groupSet><item><groupId>sg-e4076980</groupId><groupName>SecurityGroup1</groupName></item></groupSet>
                    <networkInterfaceSet>
                        <item>
                            <networkInterfaceId>eni-2</networkInterfaceId>
                            <status>in-use</status>
                            <attachment><attachmentId>eni-attach-2</attachmentId><deviceIndex>1</deviceIndex><status>attached</status></attachment>
                            <privateIpAddressesSet><item><privateIpAddress>192.168.2.10</privateIpAddress><primary>true</primary></item></privateIpAddressesSet>
                        </item>
                        <item>
                            <networkInterfaceId>eni-3</networkInterfaceId>
                            <status>detaching</status>
                            <attachment><attachmentId>eni-attach-3</attachmentId><deviceIndex>2</deviceIndex><status>detaching</status></attachment>
                            <privateIpAddressesSet><item><privateIpAddress>192.168.3.10</privateIpAddress><primary>true</primary></item></privateIpAddressesSet>
                        </item>
                        <item>
                            <networkInterfaceId>eni-1</networkInterfaceId>
                            <status>in-use</status>
                            <attachment><attachmentId>eni-attach-1</attachmentId><deviceIndex>0</deviceIndex><status>attached</status></attachment>
                            <privateIpAddressesSet>
                                <item><privateIpAddress>192.168.1.88</privateIpAddress><primary>true</primary></item>
                                <item><privateIpAddress>192.168.1.89</privateIpAddress><primary>false</primary></item>
                            </privateIpAddressesSet>
                        </item>
                    </networkInterfaceSet>
                    <tagSet><item><key>kubernetes.io/cluster/c1</key><value>owned</value></item></tagSet>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
</DescribeInstancesResponse>"#;

    #[test]
    fn an_instance_is_read_with_its_interfaces_in_device_order() {
        let document = roxmltree::Document::parse(DESCRIBE_INSTANCES).unwrap();
        let instances = instances_of(document.root_element(), "kubernetes.io/cluster/c1");
        assert_eq!(
            instances,
            [Instance {
                id: "i-1234567890abcdef0".into(),
                state: "running".into(),
                instance_type: "t2.micro".into(),
                zone: "eu-west-1c".into(),
                vpc_id: "vpc-11112222".into(),
                private_ip: "192.168.1.88".into(),
                public_ip: "54.194.252.215".into(),
                private_dns: "ip-192-168-1-88.eu-west-1.compute.internal".into(),
                public_dns: "ec2-54-194-252-215.eu-west-1.compute.amazonaws.com".into(),
                interface_ips: vec![
                    "192.168.1.88".into(),
                    "192.168.1.89".into(),
                    "192.168.2.10".into()
                ],
                security_groups: vec!["sg-e4076980".into()],
                in_cluster: true,
            }]
        );
        let other = instances_of(document.root_element(), "kubernetes.io/cluster/c2");
        assert!(!other[0].in_cluster);
    }

    /// A real `DescribeRouteTables` answer (trimmed): the local route, a pod route to an
    /// instance, one whose instance is gone (moto never reports `blackhole`), and an IPv6
    /// route, which has no IPv4 destination.
    pub const DESCRIBE_ROUTE_TABLES: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeRouteTablesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
   <requestId>6f570b0b-9c18-4b07-befb-0123456789ab</requestId>
   <routeTableSet>
      <item>
         <routeTableId>rtb-0a1b2c3d4e5f60718</routeTableId>
         <vpcId>vpc-0a1b2c3d</vpcId>
         <ownerId>123456789012</ownerId>
         <routeSet>
            <item>
               <destinationCidrBlock>10.0.0.0/16</destinationCidrBlock>
               <gatewayId>local</gatewayId>
               <state>active</state>
               <origin>CreateRouteTable</origin>
            </item>
            <item>
               <destinationCidrBlock>10.244.1.0/24</destinationCidrBlock>
               <instanceId>i-0aaaaaaaaaaaaaaa1</instanceId>
               <instanceOwnerId>123456789012</instanceOwnerId>
               <networkInterfaceId>eni-0aaaaaaaaaaaaaaa1</networkInterfaceId>
               <state>active</state>
               <origin>CreateRoute</origin>
            </item>
            <item>
               <destinationCidrBlock>10.244.2.0/24</destinationCidrBlock>
               <instanceId>i-0bbbbbbbbbbbbbbb2</instanceId>
               <instanceOwnerId>123456789012</instanceOwnerId>
               <networkInterfaceId>eni-0bbbbbbbbbbbbbbb2</networkInterfaceId>
               <state>blackhole</state>
               <origin>CreateRoute</origin>
            </item>
            <item>
               <destinationIpv6CidrBlock>2600:1f18::/56</destinationIpv6CidrBlock>
               <gatewayId>local</gatewayId>
               <state>active</state>
               <origin>CreateRouteTable</origin>
            </item>
         </routeSet>
         <associationSet/>
         <propagatingVgwSet/>
         <tagSet>
            <item><key>kubernetes.io/cluster/c1</key><value>owned</value></item>
         </tagSet>
      </item>
   </routeTableSet>
</DescribeRouteTablesResponse>"#;

    #[test]
    fn route_tables_are_read_with_their_ipv4_routes_and_states() {
        let document = roxmltree::Document::parse(DESCRIBE_ROUTE_TABLES).unwrap();
        let tables = route_tables_of(document.root_element());
        assert_eq!(tables.len(), 1);
        assert_eq!(tables[0].id, "rtb-0a1b2c3d4e5f60718");
        let routes: Vec<(&str, Option<&str>, &str)> = tables[0]
            .routes
            .iter()
            .map(|r| {
                (
                    r.destination_cidr.as_str(),
                    r.instance_id.as_deref(),
                    r.state.as_str(),
                )
            })
            .collect();
        assert_eq!(
            routes,
            [
                ("10.0.0.0/16", None, "active"),
                ("10.244.1.0/24", Some("i-0aaaaaaaaaaaaaaa1"), "active"),
                ("10.244.2.0/24", Some("i-0bbbbbbbbbbbbbbb2"), "blackhole"),
            ]
        );
    }
}

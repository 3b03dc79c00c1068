//! A cluster's AWS side in moto, for the tests of the AWS provider (`guests/aws`): a VPC,
//! subnets, a node security group and instances seeded through moto's own EC2 API, the NLB
//! state read back from its ELBv2 API, and the provider's cloud config and signed egress
//! for it. Seeding and looking go signed with the seeded user's key, sent through a gate of
//! their own: opening moto's signature check ([`Moto::unchecked`]) while a manager runs would
//! let the manager's next request through unchecked in their place.
//!
//! ```no_run
//! # async fn example() {
//! use e2e::aws::{config, egress, keys, public_network, run_node};
//! let moto = e2e::moto::Moto::start().await;
//! let net = public_network(&moto).await;
//! let node = run_node(&moto, &net).await; // node.private_dns is the Node's name
//! let keys = keys(&moto);
//! let (egress, cloud_config) = (egress(moto.url(), &keys), config(moto.url(), &net.network));
//! # }
//! ```

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;
use wasm_ccm_host::egress::{
    AwsKeys, Caller, CredentialRule, EgressConfig, EgressGate, HostPattern, RateBudget,
    SecretSource, SharedSecret, SigV4,
};
use wasm_ccm_host::metrics::Metrics;

use crate::moto::{Moto, REGION, form_body};

/// The cluster ID of the cloud config: its resources carry [`CLUSTER_TAG`].
pub const CLUSTER_ID: &str = "c1";
/// The tag of the cluster's instances, security group and load balancers.
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/c1";
/// The zone of the first subnet, where the instances run.
pub const ZONE: &str = "us-east-1a";

/// The first `<tag>…</tag>` of `xml`.
pub fn field(xml: &str, tag: &str) -> String {
    fields(xml, tag)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
}

/// Every `<tag>…</tag>` of `xml`, in order.
pub fn fields(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open)
        .skip(1)
        .filter_map(|rest| rest.split_once(&close).map(|(text, _)| text.to_string()))
        .collect()
}

/// A VPC with one subnet in [`ZONE`].
pub struct Network {
    pub vpc: String,
    pub subnet: String,
}

/// Send an EC2 `action` with `params` to moto (a setup step or a look at what moto holds);
/// the answer's body.
pub async fn ec2(moto: &Moto, action: &str, params: &[(&str, &str)]) -> String {
    let form = [&[("Action", action), ("Version", "2016-11-15")][..], params].concat();
    signed(moto, "ec2", &form).await
}

/// Send `form` to `service`, signed with the seeded user's key by a host-side egress gate;
/// the answer's body, which must be a 200.
async fn signed(moto: &Moto, service: &str, form: &[(&str, &str)]) -> String {
    let secret = |name: &str, value: &str| {
        let secret = SharedSecret::new(format!("moto's seeded {name}"), String::new());
        secret.set(Ok(value.to_string()));
        SecretSource::Shared(secret)
    };
    let keys = AwsKeys::from_sources(
        secret("access key id", &moto.access_key_id),
        secret("secret key", &moto.secret_access_key),
        None,
    );
    let sigv4 = SigV4::new(Some(REGION.into()), vec![service.into()], keys).expect("rule");
    let target: HostPattern = moto.url().parse().expect("moto's URL is a host pattern");
    let config = EgressConfig {
        allow: vec![target.clone()],
        credentials: vec![CredentialRule::aws_sigv4(target, sigv4).expect("a credential rule")],
        budget: RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        ..EgressConfig::default()
    };
    let gate = EgressGate::new(config, Arc::new(Metrics::default()));
    let caller = Arc::new(Caller {
        provider: "test".into(),
        version: "setup".into(),
    });
    let request = http::Request::post(format!("{}/", moto.url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Bytes::from(form_body(form)))
        .expect("request");
    let (status, body) = gate
        .send(caller, request)
        .await
        .unwrap_or_else(|error| panic!("moto {service} {form:?}: {error}"));
    let body = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200, "moto {service} {form:?}: {body}");
    body
}

/// A VPC (10.0.0.0/16) with one subnet (10.0.1.0/24) in [`ZONE`].
pub async fn network(moto: &Moto) -> Network {
    let vpc = field(
        &ec2(moto, "CreateVpc", &[("CidrBlock", "10.0.0.0/16")]).await,
        "vpcId",
    );
    let subnet = field(
        &ec2(
            moto,
            "CreateSubnet",
            &[
                ("VpcId", &vpc),
                ("CidrBlock", "10.0.1.0/24"),
                ("AvailabilityZone", ZONE),
            ],
        )
        .await,
        "subnetId",
    );
    Network { vpc, subnet }
}

/// A route table in `network`'s VPC, with the cluster tag when `in_cluster`.
pub async fn route_table(moto: &Moto, network: &Network, in_cluster: bool) -> String {
    let xml = ec2(moto, "CreateRouteTable", &[("VpcId", &network.vpc)]).await;
    let id = field(&xml, "routeTableId");
    if in_cluster {
        let tag = [
            ("ResourceId.1", id.as_str()),
            ("Tag.1.Key", CLUSTER_TAG),
            ("Tag.1.Value", "owned"),
        ];
        ec2(moto, "CreateTags", &tag).await;
    }
    id
}

/// An instance in `network`'s subnet, with the cluster tag when `in_cluster`.
pub async fn run_instance(moto: &Moto, network: &Network, in_cluster: bool) -> Instance {
    let mut params = vec![
        ("ImageId", "ami-12c6146b"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
        ("InstanceType", "m5.large"),
        ("SubnetId", network.subnet.as_str()),
    ];
    if in_cluster {
        params.extend([
            ("TagSpecification.1.ResourceType", "instance"),
            ("TagSpecification.1.Tag.1.Key", CLUSTER_TAG),
            ("TagSpecification.1.Tag.1.Value", "owned"),
        ]);
    }
    let id = field(&ec2(moto, "RunInstances", &params).await, "instanceId");
    describe(moto, &id).await
}

/// An instance as moto describes it.
pub struct Instance {
    pub id: String,
    pub private_dns: String,
    pub private_ip: String,
    pub public_ip: Option<String>,
    pub public_dns: Option<String>,
}

/// Instance `id` as moto describes it.
pub async fn describe(moto: &Moto, id: &str) -> Instance {
    let xml = ec2(moto, "DescribeInstances", &[("InstanceId.1", id)]).await;
    let optional = |tag| {
        fields(&xml, tag)
            .into_iter()
            .next()
            .filter(|v| !v.is_empty())
    };
    Instance {
        id: id.to_string(),
        private_dns: field(&xml, "privateDnsName"),
        private_ip: field(&xml, "privateIpAddress"),
        public_ip: optional("ipAddress"),
        public_dns: optional("dnsName"),
    }
}

/// The zone ID moto gives [`ZONE`] (the `topology.k8s.aws/zone-id` label).
pub async fn zone_id(moto: &Moto) -> String {
    let xml = ec2(moto, "DescribeAvailabilityZones", &[("ZoneName.1", ZONE)]).await;
    field(&xml, "zoneId")
}

/// Egress reaching `url` only, signed for EC2 and ELBv2 with the seeded user's keys.
pub fn egress(url: &str, keys: &tempfile::TempDir) -> EgressConfig {
    let services = vec!["ec2".into(), "elasticloadbalancing".into()];
    let sigv4 = SigV4::new(
        Some(REGION.into()),
        services,
        AwsKeys::from_dir(keys.path()),
    )
    .expect("a SigV4 rule for moto");
    let target: HostPattern = url.parse().expect("moto's URL is a host pattern");
    EgressConfig {
        allow: vec![target.clone()],
        credentials: vec![CredentialRule::aws_sigv4(target, sigv4).expect("a credential rule")],
        ..EgressConfig::default()
    }
}

/// A directory holding the seeded user's keys, as a mounted Secret.
pub fn keys(moto: &Moto) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("keys dir");
    std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), &moto.access_key_id).expect("key id");
    std::fs::write(
        dir.path().join("AWS_SECRET_ACCESS_KEY"),
        &moto.secret_access_key,
    )
    .expect("secret key");
    dir
}

/// The cloud config pointing both services at `url`.
pub fn config(url: &str, network: &Network) -> serde_json::Value {
    json!({
        "region": REGION,
        "cluster_id": CLUSTER_ID,
        "vpc_id": network.vpc,
        "endpoints": {"ec2": url, "elasticloadbalancing": url},
    })
}

/// A network with a second subnet (in us-east-1b), both public (a route to an internet
/// gateway), and a node security group with the cluster tag holding one unrelated rule.
pub struct PublicNetwork {
    pub network: Network,
    pub second_subnet: String,
    pub security_group: String,
}

/// A [`PublicNetwork`].
pub async fn public_network(moto: &Moto) -> PublicNetwork {
    let network = network(moto).await;
    let second_subnet = field(
        &ec2(
            moto,
            "CreateSubnet",
            &[
                ("VpcId", &network.vpc),
                ("CidrBlock", "10.0.2.0/24"),
                ("AvailabilityZone", "us-east-1b"),
            ],
        )
        .await,
        "subnetId",
    );
    let igw = field(
        &ec2(moto, "CreateInternetGateway", &[]).await,
        "internetGatewayId",
    );
    ec2(
        moto,
        "AttachInternetGateway",
        &[("InternetGatewayId", &igw), ("VpcId", &network.vpc)],
    )
    .await;
    let table = field(
        &ec2(moto, "CreateRouteTable", &[("VpcId", &network.vpc)]).await,
        "routeTableId",
    );
    ec2(
        moto,
        "CreateRoute",
        &[
            ("RouteTableId", &table),
            ("DestinationCidrBlock", "0.0.0.0/0"),
            ("GatewayId", &igw),
        ],
    )
    .await;
    for subnet in [&network.subnet, &second_subnet] {
        ec2(
            moto,
            "AssociateRouteTable",
            &[("RouteTableId", &table), ("SubnetId", subnet)],
        )
        .await;
    }
    let security_group = field(
        &ec2(
            moto,
            "CreateSecurityGroup",
            &[
                ("GroupName", "nodes"),
                ("GroupDescription", "cluster nodes"),
                ("VpcId", &network.vpc),
            ],
        )
        .await,
        "groupId",
    );
    ec2(
        moto,
        "CreateTags",
        &[
            ("ResourceId.1", &security_group),
            ("Tag.1.Key", CLUSTER_TAG),
            ("Tag.1.Value", "owned"),
        ],
    )
    .await;
    ec2(
        moto,
        "AuthorizeSecurityGroupIngress",
        &[
            ("GroupId", &security_group),
            ("IpPermissions.1.IpProtocol", "tcp"),
            ("IpPermissions.1.FromPort", "22"),
            ("IpPermissions.1.ToPort", "22"),
            ("IpPermissions.1.IpRanges.1.CidrIp", "10.0.0.0/8"),
            ("IpPermissions.1.IpRanges.1.Description", "ssh"),
        ],
    )
    .await;
    PublicNetwork {
        network,
        second_subnet,
        security_group,
    }
}

/// A cluster instance in the node security group.
pub async fn run_node(moto: &Moto, network: &PublicNetwork) -> Instance {
    let params = [
        ("ImageId", "ami-12c6146b"),
        ("MinCount", "1"),
        ("MaxCount", "1"),
        ("InstanceType", "m5.large"),
        ("SubnetId", network.network.subnet.as_str()),
        ("SecurityGroupId.1", network.security_group.as_str()),
        ("TagSpecification.1.ResourceType", "instance"),
        ("TagSpecification.1.Tag.1.Key", CLUSTER_TAG),
        ("TagSpecification.1.Tag.1.Value", "owned"),
    ];
    let id = field(&ec2(moto, "RunInstances", &params).await, "instanceId");
    describe(moto, &id).await
}

/// Send an ELBv2 `action` with `params` to moto; the answer's body.
pub async fn elb(moto: &Moto, action: &str, params: &[(&str, &str)]) -> String {
    let form = [&[("Action", action), ("Version", "2015-12-01")][..], params].concat();
    signed(moto, "elasticloadbalancing", &form).await
}

/// The targets of a group: (instance, port).
pub type Targets = Vec<(String, String)>;

/// A network load balancer, its listeners, target groups and targets as moto holds them.
#[derive(Debug, PartialEq)]
pub struct Nlb {
    pub dns_name: String,
    pub scheme: String,
    pub subnets: Vec<String>,
    /// (port, protocol, target group name)
    pub listeners: Vec<(String, String, String)>,
    /// (target group name, node port, sorted (instance, port) targets)
    pub groups: Vec<(String, String, Targets)>,
}

/// The (only) load balancer moto holds, if any.
pub async fn nlb(moto: &Moto) -> Option<Nlb> {
    let lbs = elb(moto, "DescribeLoadBalancers", &[]).await;
    let arn = fields(&lbs, "LoadBalancerArn").into_iter().next()?;
    let listeners_xml = elb(moto, "DescribeListeners", &[("LoadBalancerArn", &arn)]).await;
    // The groups the listeners forward to (moto does not list a group a listener was
    // modified to forward to under its load balancer).
    let mut listened = fields(&listeners_xml, "TargetGroupArn");
    listened.sort();
    listened.dedup();
    let by_arn: Vec<(String, &str)> = listened
        .iter()
        .enumerate()
        .map(|(i, arn)| (format!("TargetGroupArns.member.{}", i + 1), arn.as_str()))
        .collect();
    let by_arn: Vec<(&str, &str)> = by_arn.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let groups_xml = if by_arn.is_empty() {
        String::new()
    } else {
        elb(moto, "DescribeTargetGroups", &by_arn).await
    };
    let group_arns = fields(&groups_xml, "TargetGroupArn");
    let group_names = fields(&groups_xml, "TargetGroupName");
    let mut groups = Vec::new();
    for ((arn, name), port) in group_arns
        .iter()
        .zip(&group_names)
        .zip(fields(&groups_xml, "Port"))
    {
        let health = elb(moto, "DescribeTargetHealth", &[("TargetGroupArn", arn)]).await;
        let mut targets: Vec<(String, String)> = fields(&health, "Id")
            .into_iter()
            .zip(fields(&health, "Port"))
            .collect();
        targets.sort();
        groups.push((name.clone(), port, targets));
    }
    groups.sort();
    let name_of = |arn: &String| {
        group_arns
            .iter()
            .position(|a| a == arn)
            .map_or_else(|| format!("unattached {arn}"), |i| group_names[i].clone())
    };
    let mut listeners: Vec<(String, String, String)> = fields(&listeners_xml, "Port")
        .into_iter()
        .zip(fields(&listeners_xml, "Protocol"))
        .zip(fields(&listeners_xml, "TargetGroupArn").iter().map(name_of))
        .map(|((port, protocol), group)| (port, protocol, group))
        .collect();
    listeners.sort();
    let mut subnets = fields(&lbs, "SubnetId");
    subnets.sort();
    Some(Nlb {
        dns_name: field(&lbs, "DNSName"),
        scheme: field(&lbs, "Scheme"),
        subnets,
        listeners,
        groups,
    })
}

/// Every target group moto holds, attached or not.
pub async fn all_target_groups(moto: &Moto) -> Vec<String> {
    fields(
        &elb(moto, "DescribeTargetGroups", &[]).await,
        "TargetGroupName",
    )
}

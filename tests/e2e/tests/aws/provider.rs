//! The AWS provider (`guests/aws`, the real component) against moto with signature checking
//! on: every request it makes is signed by the host's egress gate with the seeded user's
//! keys, and moto recomputes every signature. The VPC, subnets and instances are seeded
//! through moto's own EC2 API; each test checks what the provider answers and what moto
//! holds afterwards. Where moto differs from AWS, the guest's unit tests read recorded AWS
//! answers instead.
//!
//! Covered: nodes (found by private DNS name or by an `i-` name, the cluster tag required,
//! stopped instances shut down and terminated ones gone, many nodes' metadata for one
//! listing of the cluster); pod routes (the route table chosen, conflicting CIDRs and IPv6
//! refused, nodes named by instance ID); a Service's NLB through port and node changes to its
//! deletion, with its listeners, target groups, targets, tags and security-group rules
//! checked after each step, and every supported annotation (source ranges, health checks,
//! scheme changes reported, `target-node-labels`, cross-zone, extra tags, subnets by `Name`
//! tag), Services left to the AWS Load Balancer Controller, failed subnet discovery; and AWS
//! errors (throttling as `retry-after`, a denied action naming the IAM permission, a wrong
//! secret, a bad cloud config naming the field).

use std::sync::{Arc, Mutex};

use e2e::aws::{
    CLUSTER_TAG, Instance, ZONE, all_target_groups, config, ec2, egress, elb, field, fields, keys,
    network, nlb, public_network, route_table, run_instance, run_node, zone_id,
};
use e2e::moto::{Front, Moto, REGION, Seen};
use e2e::{load, sandbox};
use serde_json::json;
use wasm_ccm_host::contract::{
    AddressKind, Node, NodeAddress, NodeMetadataKeys, Protocol, Route, Service, ServicePort,
};
use wasm_ccm_host::provider::{Provider, ProviderError};

// ---- moto's side ----------------------------------------------------------------------------

/// The routes of table `id` as moto holds them: (destination, instance, state).
async fn table_routes(moto: &Moto, id: &str) -> Vec<(String, String, String)> {
    let xml = ec2(moto, "DescribeRouteTables", &[("RouteTableId.1", id)]).await;
    let routes = xml
        .split("<routeSet>")
        .nth(1)
        .and_then(|rest| rest.split("</routeSet>").next())
        .expect("a routeSet");
    routes
        .split("<item>")
        .skip(1)
        .map(|route| {
            let text = |tag| fields(route, tag).into_iter().next().unwrap_or_default();
            (
                text("destinationCidrBlock"),
                text("instanceId"),
                text("state"),
            )
        })
        .collect()
}

// ---- the provider's side --------------------------------------------------------------------

/// The aws provider reaching moto at `url` (moto itself or a front), signed by the host.
struct Aws {
    provider: Provider,
    _keys: tempfile::TempDir,
}

async fn aws_at(moto: &Moto, url: &str, config: serde_json::Value) -> Aws {
    let keys = keys(moto);
    let provider = load(
        &sandbox(e2e::sandbox_config()),
        guest_builds::AWS,
        egress(url, &keys),
        Some(config.to_string().into_bytes()),
    )
    .await
    .expect("the aws provider loads");
    Aws {
        provider,
        _keys: keys,
    }
}

/// A node the kubelet registered, not yet initialised.
fn node_named(name: &str) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        ..Node::default()
    }
}

/// An initialised node of `instance`.
fn node_of(instance: &Instance) -> Node {
    Node {
        provider_id: Some(format!("aws:///{ZONE}/{}", instance.id)),
        ..node_named(&instance.private_dns)
    }
}

/// `error` is a plain error whose message contains `text`.
fn assert_plain(error: &ProviderError, text: &str) {
    assert_eq!(error.outcome(), "other", "{error}");
    assert!(error.to_string().contains(text), "{error}");
}

/// A front that records every request and forwards it, and the actions it saw.
async fn recording(moto: &Moto) -> Front {
    moto.front(Arc::new(|_| None)).await
}

/// The `Action` of each request `front` saw.
fn actions(front: &Front) -> Vec<String> {
    front.seen().iter().map(action).collect()
}

fn action(seen: &Seen) -> String {
    let body = String::from_utf8_lossy(&seen.body);
    body.split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .unwrap_or_default()
        .to_string()
}

// ---- InstancesV2 ----------------------------------------------------------------------------

#[tokio::test]
async fn a_node_is_initialised_from_its_ec2_instance_found_by_private_dns_name() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let instance = run_instance(&moto, &network, true).await;
    let zone_id = zone_id(&moto).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;

    let node = node_named(&instance.private_dns);
    let metadata = aws.provider.instance_metadata(&node).await.unwrap();
    assert_eq!(
        metadata.provider_id,
        format!("aws:///{ZONE}/{}", instance.id)
    );
    assert_eq!(metadata.instance_type, "m5.large");
    assert_eq!(metadata.zone, ZONE);
    assert_eq!(metadata.region, REGION);
    assert_eq!(
        metadata.additional_labels,
        [("topology.k8s.aws/zone-id".to_string(), zone_id)]
    );
    let mut expected = vec![NodeAddress {
        kind: AddressKind::InternalIP,
        address: instance.private_ip.clone(),
    }];
    expected.extend(instance.public_ip.iter().map(|ip| NodeAddress {
        kind: AddressKind::ExternalIP,
        address: ip.clone(),
    }));
    for kind in [AddressKind::InternalDNS, AddressKind::Hostname] {
        expected.push(NodeAddress {
            kind,
            address: instance.private_dns.clone(),
        });
    }
    expected.extend(instance.public_dns.iter().map(|dns| NodeAddress {
        kind: AddressKind::ExternalDNS,
        address: dns.clone(),
    }));
    assert_eq!(metadata.node_addresses, expected);

    // Initialised, the node is found by its provider ID; a node named after its instance
    // ID is found by it.
    assert!(
        aws.provider
            .instance_exists(&node_of(&instance))
            .await
            .unwrap()
    );
    assert!(
        !aws.provider
            .instance_shutdown(&node_of(&instance))
            .await
            .unwrap()
    );
    let by_id = aws
        .provider
        .instance_metadata(&node_named(&format!("{}.ec2.internal", instance.id)))
        .await
        .unwrap();
    assert_eq!(by_id.provider_id, metadata.provider_id);
}

#[tokio::test]
async fn an_instance_without_the_cluster_tag_is_not_found_by_name() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let outsider = run_instance(&moto, &network, false).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;

    let error = aws
        .provider
        .instance_metadata(&node_named(&outsider.private_dns))
        .await
        .unwrap_err();
    assert!(error.is_not_found(), "{error}");
    assert!(
        !aws.provider
            .instance_exists(&node_named(&outsider.private_dns))
            .await
            .unwrap()
    );
    // By provider ID, the tag does not matter (upstream's by-ID lookup does not check it).
    assert!(
        aws.provider
            .instance_exists(&node_of(&outsider))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn stopped_instances_exist_shut_down_and_terminated_ones_are_gone() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let stopped = run_instance(&moto, &network, true).await;
    let terminated = run_instance(&moto, &network, true).await;
    ec2(&moto, "StopInstances", &[("InstanceId.1", &stopped.id)]).await;
    ec2(
        &moto,
        "TerminateInstances",
        &[("InstanceId.1", &terminated.id)],
    )
    .await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;

    let node = node_of(&stopped);
    assert!(aws.provider.instance_exists(&node).await.unwrap());
    assert!(aws.provider.instance_shutdown(&node).await.unwrap());
    assert_eq!(
        aws.provider
            .instance_metadata(&node)
            .await
            .unwrap()
            .provider_id,
        format!("aws:///{ZONE}/{}", stopped.id)
    );

    let node = node_of(&terminated);
    assert!(!aws.provider.instance_exists(&node).await.unwrap());
    assert!(!aws.provider.instance_shutdown(&node).await.unwrap());
    let error = aws.provider.instance_metadata(&node).await.unwrap_err();
    assert!(error.is_not_found(), "{error}");
    // A terminated instance is not found by name either.
    let error = aws
        .provider
        .instance_metadata(&node_named(&terminated.private_dns))
        .await
        .unwrap_err();
    assert!(error.is_not_found(), "{error}");

    // An ID AWS never knew: moto answers InvalidInstanceID.NotFound.
    let unknown = Node {
        provider_id: Some(format!("aws:///{ZONE}/i-0123456789abcdef0")),
        ..node_named("ghost")
    };
    assert!(!aws.provider.instance_exists(&unknown).await.unwrap());
    let error = aws.provider.instance_shutdown(&unknown).await.unwrap_err();
    assert!(error.is_not_found(), "{error}");
    let foreign = Node {
        provider_id: Some("gce://project/zone/vm".into()),
        ..node_named("foreign")
    };
    let error = aws.provider.instance_exists(&foreign).await.unwrap_err();
    assert_plain(&error, "not aws:///ZONE/i-");
}

#[tokio::test]
async fn the_metadata_of_many_nodes_costs_one_listing_of_the_cluster_and_one_of_the_zones() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(run_instance(&moto, &network, true).await);
    }
    let outsider = run_instance(&moto, &network, false).await;
    let front = recording(&moto).await;
    let aws = aws_at(&moto, front.url(), config(front.url(), &network)).await;

    for instance in &instances {
        let metadata = aws
            .provider
            .instance_metadata(&node_of(instance))
            .await
            .unwrap();
        assert!(metadata.provider_id.ends_with(&instance.id));
        assert!(
            aws.provider
                .instance_exists(&node_of(instance))
                .await
                .unwrap()
        );
    }
    assert_eq!(
        actions(&front),
        ["DescribeInstances", "DescribeAvailabilityZones"]
    );
    let listing = String::from_utf8_lossy(&front.seen()[0].body).into_owned();
    assert!(listing.contains("Filter.1.Name=tag-key"), "{listing}");

    // An instance outside the listing is described alone, and then kept too.
    assert!(
        aws.provider
            .instance_exists(&node_of(&outsider))
            .await
            .unwrap()
    );
    assert!(
        aws.provider
            .instance_exists(&node_of(&outsider))
            .await
            .unwrap()
    );
    let seen = front.seen();
    assert_eq!(seen.len(), 3, "{:?}", actions(&front));
    let alone = String::from_utf8_lossy(&seen[2].body).into_owned();
    assert!(
        alone.contains(&format!("InstanceId.1={}", outsider.id)),
        "{alone}"
    );
}

// ---- Routes --------------------------------------------------------------------------------

/// A route for the contract: `cidr` via node `target`.
fn route(target: &str, cidr: &str) -> Route {
    Route {
        target_node: target.into(),
        destination_cidr: cidr.into(),
        ..Route::default()
    }
}

#[tokio::test]
async fn pod_routes_are_created_listed_and_deleted_in_the_cluster_tagged_table() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let node = run_instance(&moto, &network, true).await;
    route_table(&moto, &network, false).await;
    let table = route_table(&moto, &network, true).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;
    let pod_cidr = "10.244.1.0/24";

    let wanted = route(&node.private_dns, pod_cidr);
    aws.provider
        .create_route("kubernetes", "uid-1", &wanted)
        .await
        .unwrap();
    let local = (
        "10.0.0.0/16".to_string(),
        String::new(),
        "active".to_string(),
    );
    let routed = (pod_cidr.to_string(), node.id.clone(), "active".to_string());
    assert_eq!(
        table_routes(&moto, &table).await,
        [local.clone(), routed.clone()]
    );
    let attribute = ec2(
        &moto,
        "DescribeInstanceAttribute",
        &[("InstanceId", &node.id), ("Attribute", "sourceDestCheck")],
    )
    .await;
    assert_eq!(
        fields(
            attribute.split("<sourceDestCheck>").nth(1).unwrap(),
            "value"
        ),
        ["false"]
    );

    let listed = aws.provider.list_routes("kubernetes").await.unwrap();
    assert_eq!(
        listed,
        [Route {
            name: format!("kubernetes-{pod_cidr}"),
            ..wanted.clone()
        }]
    );
    // Creating it again changes nothing.
    aws.provider
        .create_route("kubernetes", "uid-1", &wanted)
        .await
        .unwrap();
    assert_eq!(table_routes(&moto, &table).await, [local.clone(), routed]);

    aws.provider
        .delete_route("kubernetes", &listed[0])
        .await
        .unwrap();
    assert_eq!(table_routes(&moto, &table).await, [local]);
    // Deleting a route that is gone (InvalidRoute.NotFound) is done.
    aws.provider
        .delete_route("kubernetes", &listed[0])
        .await
        .unwrap();
    assert!(
        aws.provider
            .list_routes("kubernetes")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn routes_to_nodes_named_by_instance_id_are_listed_by_instance_id() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let node = run_instance(&moto, &network, true).await;
    let table = route_table(&moto, &network, true).await;
    let mut configured = config(moto.url(), &network);
    configured["node_names"] = json!("instance-id");
    let aws = aws_at(&moto, moto.url(), configured).await;
    let pod_cidr = "10.244.4.0/24";

    let wanted = route(&node.id, pod_cidr);
    aws.provider
        .create_route("kubernetes", "uid-1", &wanted)
        .await
        .unwrap();
    let routed = (pod_cidr.to_string(), node.id.clone(), "active".to_string());
    assert_eq!(table_routes(&moto, &table).await[1..], [routed]);
    // The route's node is the one it was created for, so the next sync keeps it.
    let listed = aws.provider.list_routes("kubernetes").await.unwrap();
    assert_eq!(
        listed,
        [Route {
            name: format!("kubernetes-{pod_cidr}"),
            ..wanted
        }]
    );
}

#[tokio::test]
async fn a_cidr_routed_to_another_node_or_to_no_node_is_refused() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let first = run_instance(&moto, &network, true).await;
    let second = run_instance(&moto, &network, true).await;
    let table = route_table(&moto, &network, true).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;

    let cidr = "10.244.7.0/24";
    aws.provider
        .create_route("kubernetes", "uid-1", &route(&first.private_dns, cidr))
        .await
        .unwrap();
    let error = aws
        .provider
        .create_route("kubernetes", "uid-2", &route(&second.private_dns, cidr))
        .await
        .unwrap_err();
    assert_plain(&error, &format!("already routes {cidr} to {}", first.id));
    let error = aws
        .provider
        .create_route(
            "kubernetes",
            "uid-3",
            &route("ip-10-9-9-9.ec2.internal", "10.244.8.0/24"),
        )
        .await
        .unwrap_err();
    assert!(error.is_not_found(), "{error}");
    let error = aws
        .provider
        .create_route(
            "kubernetes",
            "uid-1",
            &route(&first.private_dns, "fd00:10::/64"),
        )
        .await
        .unwrap_err();
    assert_plain(&error, "IPv6");
    assert_eq!(table_routes(&moto, &table).await.len(), 2);
}

#[tokio::test]
async fn the_route_table_is_the_configured_one_or_the_only_tagged_one() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let node = run_instance(&moto, &network, true).await;
    let untagged = route_table(&moto, &network, false).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;
    let error = aws.provider.list_routes("kubernetes").await.unwrap_err();
    assert_plain(
        &error,
        &format!("no route table carries the tag {CLUSTER_TAG}"),
    );

    let first = route_table(&moto, &network, true).await;
    let second = route_table(&moto, &network, true).await;
    let error = aws.provider.list_routes("kubernetes").await.unwrap_err();
    assert_plain(&error, "2 route tables carry the tag");
    assert_plain(&error, &first);
    assert_plain(&error, &second);

    let mut configured = config(moto.url(), &network);
    configured["route_table_id"] = json!(untagged);
    let aws = aws_at(&moto, moto.url(), configured).await;
    aws.provider
        .create_route(
            "kubernetes",
            "uid-1",
            &route(&node.private_dns, "10.244.3.0/24"),
        )
        .await
        .unwrap();
    assert_eq!(table_routes(&moto, &untagged).await.len(), 2);
    assert_eq!(table_routes(&moto, &first).await.len(), 1);

    let mut missing = config(moto.url(), &network);
    missing["route_table_id"] = json!("rtb-0123456789abcdef0");
    let aws = aws_at(&moto, moto.url(), missing).await;
    let error = aws.provider.list_routes("kubernetes").await.unwrap_err();
    assert_plain(&error, "\"route_table_id\" does not exist");
}

// ---- LoadBalancer --------------------------------------------------------------------------

const NLB: (&str, &str) = ("service.beta.kubernetes.io/aws-load-balancer-type", "nlb");
/// A Service UID as Kubernetes writes them.
const SVC_UID: &str = "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b";
/// The load balancer's name: upstream's `"a"` + the UID without dashes, cut to 32.
const LB_NAME: &str = "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6";

fn service_port(name: &str, port: i32, node_port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Protocol::Tcp,
        port,
        node_port: Some(node_port),
        ..ServicePort::default()
    }
}

/// A LoadBalancer Service asking for an NLB, with one port: 80 on node port 30080.
/// The provider on a public network in moto with one node: the provider, and that node as
/// load-balancer calls take nodes.
async fn one_node(moto: &Moto) -> (Aws, Arc<[Node]>) {
    let net = public_network(moto).await;
    let node = run_node(moto, &net).await;
    let aws = aws_at(moto, moto.url(), config(moto.url(), &net.network)).await;
    (aws, Arc::from([node_of(&node)]))
}

/// [`web_service`] handed to the AWS Load Balancer Controller.
fn external_service() -> Service {
    Service {
        annotations: vec![(NLB.0.into(), "external".into())],
        ..web_service()
    }
}

fn web_service() -> Service {
    Service {
        name: "web".into(),
        namespace: "shop".into(),
        uid: SVC_UID.into(),
        service_type: "LoadBalancer".into(),
        annotations: vec![(NLB.0.into(), NLB.1.into())],
        ports: vec![service_port("http", 80, 30080)],
        ..Service::default()
    }
}

/// The ingress rules of security group `id`: (protocol, port, cidr, description), sorted.
async fn ingress_rules(moto: &Moto, id: &str) -> Vec<(String, String, String, String)> {
    let xml = ec2(moto, "DescribeSecurityGroups", &[("GroupId.1", id)]).await;
    let ingress = xml
        .split("<ipPermissions>")
        .nth(1)
        .and_then(|rest| rest.split("</ipPermissions>").next())
        .unwrap_or_default();
    let mut rules = Vec::new();
    for permission in ingress.split("<ipProtocol>").skip(1) {
        let protocol = permission.split('<').next().unwrap_or_default().to_string();
        let port = fields(permission, "fromPort")
            .into_iter()
            .next()
            .unwrap_or_default();
        let ranges = permission
            .split("<ipRanges>")
            .nth(1)
            .and_then(|rest| rest.split("</ipRanges>").next())
            .unwrap_or_default();
        for range in ranges.split("<item>").skip(1) {
            let text = |tag| fields(range, tag).into_iter().next().unwrap_or_default();
            rules.push((
                protocol.clone(),
                port.clone(),
                text("cidrIp"),
                text("description"),
            ));
        }
    }
    rules.sort();
    rules
}

fn rule(port: &str, cidr: &str, description: &str) -> (String, String, String, String) {
    ("tcp".into(), port.into(), cidr.into(), description.into())
}

/// Ensure, answering the ingress hostname.
async fn ensure(aws: &Aws, svc: &Service, nodes: &[Node]) -> String {
    let status = aws
        .provider
        .ensure_load_balancer("kubernetes", svc, &Arc::from(nodes))
        .await
        .unwrap_or_else(|e| panic!("ensure-load-balancer: {e}"));
    assert_eq!(status.ingress.len(), 1, "{status:?}");
    status.ingress[0].hostname.clone().expect("a hostname")
}

#[tokio::test]
async fn a_services_nlb_lives_through_port_and_node_changes_and_is_deleted_whole() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let (a, b) = (run_node(&moto, &net).await, run_node(&moto, &net).await);
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &net.network)).await;
    let mut svc = web_service();
    assert_eq!(
        aws.provider
            .get_load_balancer("kubernetes", &svc)
            .await
            .unwrap(),
        None
    );

    // Create: one listener and target group, both nodes as targets, the client rule.
    let hostname = ensure(&aws, &svc, &[node_of(&a), node_of(&b)]).await;
    let created = nlb(&moto).await.expect("a load balancer");
    assert_eq!(hostname, created.dns_name);
    assert_eq!(created.scheme, "internet-facing");
    let mut subnets = vec![net.network.subnet.clone(), net.second_subnet.clone()];
    subnets.sort();
    assert_eq!(created.subnets, subnets);
    assert_eq!(created.listeners.len(), 1);
    let group_80 = created.groups[0].0.clone();
    assert!(group_80.starts_with("k8s-shop-web-"), "{group_80}");
    let targets = |ids: &[&Instance], port: &str| -> Vec<(String, String)> {
        let mut targets: Vec<(String, String)> = ids
            .iter()
            .map(|i| (i.id.clone(), port.to_string()))
            .collect();
        targets.sort();
        targets
    };
    assert_eq!(
        created.listeners,
        [("80".into(), "TCP".into(), group_80.clone())]
    );
    assert_eq!(
        created.groups,
        [(
            group_80.clone(),
            "30080".into(),
            targets(&[&a, &b], "30080")
        )]
    );
    let client = format!("kubernetes.io/rule/nlb/client={LB_NAME}");
    let ssh = rule("22", "10.0.0.0/8", "ssh");
    assert_eq!(
        ingress_rules(&moto, &net.security_group).await,
        [ssh.clone(), rule("30080", "0.0.0.0/0", &client)]
    );
    let tags = elb(
        &moto,
        "DescribeTags",
        &[(
            "ResourceArns.member.1",
            &field(
                &elb(&moto, "DescribeLoadBalancers", &[]).await,
                "LoadBalancerArn",
            ),
        )],
    )
    .await;
    for tag in [CLUSTER_TAG, "kubernetes.io/service-name"] {
        assert!(fields(&tags, "Key").contains(&tag.to_string()), "{tags}");
    }
    assert!(
        fields(&tags, "Value").contains(&"shop/web".to_string()),
        "{tags}"
    );
    let status = aws
        .provider
        .get_load_balancer("kubernetes", &svc)
        .await
        .unwrap();
    assert_eq!(
        status.unwrap().ingress[0].hostname.as_deref(),
        Some(hostname.as_str())
    );

    // Change ports: a second port, and port 80 on another node port (a new group).
    svc.ports = vec![
        service_port("http", 80, 30081),
        service_port("https", 443, 30443),
    ];
    ensure(&aws, &svc, &[node_of(&a), node_of(&b)]).await;
    let changed = nlb(&moto).await.unwrap();
    assert_eq!(changed.groups.len(), 2, "{changed:?}");
    let group_for = |node_port: &str| {
        changed
            .groups
            .iter()
            .find(|g| g.1 == node_port)
            .unwrap_or_else(|| panic!("no group on {node_port}: {changed:?}"))
            .clone()
    };
    let (new_80, group_443) = (group_for("30081"), group_for("30443"));
    assert_ne!(new_80.0, group_80);
    assert_eq!(new_80.2, targets(&[&a, &b], "30081"));
    assert_eq!(group_443.2, targets(&[&a, &b], "30443"));
    assert_eq!(
        changed.listeners,
        [
            ("443".into(), "TCP".into(), group_443.0.clone()),
            ("80".into(), "TCP".into(), new_80.0.clone()),
        ]
    );
    assert!(!all_target_groups(&moto).await.contains(&group_80));
    assert_eq!(
        ingress_rules(&moto, &net.security_group).await,
        [
            ssh.clone(),
            rule("30081", "0.0.0.0/0", &client),
            rule("30443", "0.0.0.0/0", &client)
        ]
    );

    // Change nodes: one node left, one added.
    let c = run_node(&moto, &net).await;
    aws.provider
        .update_load_balancer("kubernetes", &svc, &Arc::from([node_of(&b), node_of(&c)]))
        .await
        .unwrap();
    let moved = nlb(&moto).await.unwrap();
    for group in &moved.groups {
        assert_eq!(group.2, targets(&[&b, &c], &group.1), "{moved:?}");
    }

    // Delete: the load balancer, both groups and the rules go; the ssh rule stays.
    aws.provider
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
    assert_eq!(nlb(&moto).await, None);
    assert!(all_target_groups(&moto).await.is_empty());
    assert_eq!(ingress_rules(&moto, &net.security_group).await, [ssh]);
    assert_eq!(
        aws.provider
            .get_load_balancer("kubernetes", &svc)
            .await
            .unwrap(),
        None
    );
    // Deleting again is done.
    aws.provider
        .ensure_load_balancer_deleted("kubernetes", &svc)
        .await
        .unwrap();
}

#[tokio::test]
async fn source_ranges_and_annotations_are_reconciled_and_the_scheme_change_is_reported() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let a = run_node(&moto, &net).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &net.network)).await;
    let mut svc = web_service();
    ensure(&aws, &svc, &[node_of(&a)]).await;

    // Restricted clients: the client rule follows them, and health checks from the load
    // balancer's subnets get their own rule.
    svc.load_balancer_source_ranges = vec!["192.0.2.0/24".into()];
    svc.annotations.push((
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold".into(),
        "5".into(),
    ));
    ensure(&aws, &svc, &[node_of(&a)]).await;
    let client = format!("kubernetes.io/rule/nlb/client={LB_NAME}");
    let health = format!("kubernetes.io/rule/nlb/health={LB_NAME}");
    assert_eq!(
        ingress_rules(&moto, &net.security_group).await,
        [
            rule("22", "10.0.0.0/8", "ssh"),
            rule("30080", "10.0.1.0/24", &health),
            rule("30080", "10.0.2.0/24", &health),
            rule("30080", "192.0.2.0/24", &client),
        ]
    );
    let groups = elb(&moto, "DescribeTargetGroups", &[]).await;
    assert_eq!(fields(&groups, "HealthyThresholdCount"), ["5"]);

    // The scheme cannot change on an NLB: reported, naming the annotation.
    svc.annotations.push((
        "service.beta.kubernetes.io/aws-load-balancer-internal".into(),
        "true".into(),
    ));
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &svc, &Arc::from([node_of(&a)]))
        .await
        .unwrap_err();
    assert_plain(
        &error,
        "service.beta.kubernetes.io/aws-load-balancer-internal",
    );
    assert_plain(&error, "delete and recreate the Service");
    assert_eq!(nlb(&moto).await.unwrap().scheme, "internet-facing");
}

const CROSS_ZONE: &str =
    "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
const EXTRA_TAGS: &str = "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";
const SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";

/// The ARN of the load balancer named `name`.
async fn lb_arn(moto: &Moto, name: &str) -> String {
    let xml = elb(moto, "DescribeLoadBalancers", &[("Names.member.1", name)]).await;
    field(&xml, "LoadBalancerArn")
}

/// The value of attribute `key` of load balancer `arn`, as DescribeLoadBalancerAttributes
/// answers it.
async fn lb_attribute(moto: &Moto, arn: &str, key: &str) -> String {
    let xml = elb(
        moto,
        "DescribeLoadBalancerAttributes",
        &[("LoadBalancerArn", arn)],
    )
    .await;
    xml.split("<member>")
        .find(|member| fields(member, "Key").first().map(String::as_str) == Some(key))
        .map(|member| field(member, "Value"))
        .unwrap_or_else(|| panic!("no attribute {key} in {xml}"))
}

/// The tags of ELBv2 resource `arn`: (key, value), sorted.
async fn elb_tags(moto: &Moto, arn: &str) -> Vec<(String, String)> {
    let xml = elb(moto, "DescribeTags", &[("ResourceArns.member.1", arn)]).await;
    let mut tags: Vec<(String, String)> = xml
        .split("<member>")
        .skip(1)
        .filter_map(|member| {
            let key = fields(member, "Key").into_iter().next()?;
            let value = fields(member, "Value")
                .into_iter()
                .next()
                .unwrap_or_default();
            Some((key, value))
        })
        .collect();
    tags.sort();
    tags
}

#[tokio::test]
async fn a_removed_port_loses_its_listener_and_group_and_cross_zone_and_extra_tags_follow_the_annotations()
 {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let a = run_node(&moto, &net).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &net.network)).await;
    let mut svc = web_service();
    svc.ports.push(service_port("https", 443, 30443));
    svc.annotations.extend([
        (CROSS_ZONE.into(), "true".into()),
        (EXTRA_TAGS.into(), "team=web,cost".into()),
    ]);
    ensure(&aws, &svc, &[node_of(&a)]).await;
    let created = nlb(&moto).await.expect("a load balancer");
    assert_eq!(created.listeners.len(), 2, "{created:?}");
    let arn = lb_arn(&moto, LB_NAME).await;
    assert_eq!(
        lb_attribute(&moto, &arn, "load_balancing.cross_zone.enabled").await,
        "true"
    );

    // The annotation's tags, "cost" with an empty value, on the NLB and on each group,
    // next to the cluster's and the Service's.
    let mut wanted: Vec<(String, String)> = [
        (CLUSTER_TAG, "owned"),
        ("cost", ""),
        ("kubernetes.io/service-name", "shop/web"),
        ("team", "web"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    wanted.sort();
    assert_eq!(elb_tags(&moto, &arn).await, wanted);
    let groups_xml = elb(&moto, "DescribeTargetGroups", &[]).await;
    let group_arns = fields(&groups_xml, "TargetGroupArn");
    assert_eq!(group_arns.len(), 2, "{groups_xml}");
    for group in &group_arns {
        assert_eq!(elb_tags(&moto, group).await, wanted, "group {group}");
    }

    // Port 443 removed and cross-zone turned off: 443's listener, group and rule go, 80's
    // stay as they were; the attribute follows the annotation.
    svc.ports.truncate(1);
    svc.annotations[1].1 = "false".into();
    ensure(&aws, &svc, &[node_of(&a)]).await;
    let after = nlb(&moto).await.unwrap();
    let kept = |port: &str| {
        created
            .listeners
            .iter()
            .find(|l| l.0 == port)
            .unwrap()
            .clone()
    };
    let (l80, l443) = (kept("80"), kept("443"));
    assert_eq!(after.listeners, std::slice::from_ref(&l80));
    assert_eq!(
        after.groups,
        [(
            l80.2.clone(),
            "30080".into(),
            vec![(a.id.clone(), "30080".into())]
        )]
    );
    assert_eq!(all_target_groups(&moto).await, std::slice::from_ref(&l80.2));
    assert!(!all_target_groups(&moto).await.contains(&l443.2));
    let client = format!("kubernetes.io/rule/nlb/client={LB_NAME}");
    assert_eq!(
        ingress_rules(&moto, &net.security_group).await,
        [
            rule("22", "10.0.0.0/8", "ssh"),
            rule("30080", "0.0.0.0/0", &client)
        ]
    );
    assert_eq!(
        lb_attribute(&moto, &arn, "load_balancing.cross_zone.enabled").await,
        "false"
    );
}

/// A second Service's UID, and its load balancer's name.
const API_UID: &str = "0f9e8d7c-6b5a-4948-3726-15a4b3c2d1e0";
const API_LB_NAME: &str = "a0f9e8d7c6b5a4948372615a4b3c2d1e";

#[tokio::test]
async fn deleting_one_services_nlb_leaves_anothers_whole_and_the_name_and_capabilities_are_upstreams()
 {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let a = run_node(&moto, &net).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &net.network)).await;

    // The name: "a" + the UID without dashes, cut to 32; the NLB is made under it.
    let web = web_service();
    assert_eq!(
        aws.provider
            .get_load_balancer_name("kubernetes", &web)
            .await
            .unwrap(),
        LB_NAME
    );
    let api_name = API_LB_NAME.to_string();
    let api = Service {
        name: "api".into(),
        uid: API_UID.into(),
        ports: vec![service_port("grpc", 81, 30081)],
        ..web_service()
    };
    assert_eq!(
        aws.provider
            .get_load_balancer_name("kubernetes", &api)
            .await
            .unwrap(),
        api_name
    );

    // Capabilities: no node label (but not every one: None would mean all) without
    // target_node_label_keys, exactly those keys with it.
    let none = NodeMetadataKeys::default();
    assert_eq!(aws.provider.capabilities().node_metadata, Some(none));
    let mut labelled_config = config(moto.url(), &net.network);
    labelled_config["target_node_label_keys"] = json!([LB_ROLE, TIER]);
    let labelled_aws = aws_at(&moto, moto.url(), labelled_config).await;
    assert_eq!(
        labelled_aws.provider.capabilities().node_metadata,
        Some(NodeMetadataKeys {
            labels: [LB_ROLE.to_string(), TIER.to_string()].into(),
            annotations: Default::default(),
        })
    );

    // Two Services, two NLBs; deleting api's leaves web's as it was.
    ensure(&aws, &web, &[node_of(&a)]).await;
    let web_nlb = nlb(&moto).await.expect("web's load balancer");
    let web_groups = all_target_groups(&moto).await;
    let web_rules = ingress_rules(&moto, &net.security_group).await;
    ensure(&aws, &api, &[node_of(&a)]).await;
    let names = fields(
        &elb(&moto, "DescribeLoadBalancers", &[]).await,
        "LoadBalancerName",
    );
    let mut both = vec![LB_NAME.to_string(), api_name.clone()];
    both.sort();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, both);
    assert_eq!(all_target_groups(&moto).await.len(), 2);
    let api_rule = rule(
        "30081",
        "0.0.0.0/0",
        &format!("kubernetes.io/rule/nlb/client={api_name}"),
    );
    assert!(
        ingress_rules(&moto, &net.security_group)
            .await
            .contains(&api_rule)
    );

    aws.provider
        .ensure_load_balancer_deleted("kubernetes", &api)
        .await
        .unwrap();
    assert_eq!(
        fields(
            &elb(&moto, "DescribeLoadBalancers", &[]).await,
            "LoadBalancerName"
        ),
        [LB_NAME]
    );
    assert_eq!(nlb(&moto).await, Some(web_nlb));
    assert_eq!(all_target_groups(&moto).await, web_groups);
    assert_eq!(ingress_rules(&moto, &net.security_group).await, web_rules);
}

const TARGET_NODE_LABELS: &str = "service.beta.kubernetes.io/aws-load-balancer-target-node-labels";
const LB_ROLE: &str = "node-role.example.com/lb";
const TIER: &str = "example.com/tier";

/// `node` with `labels`.
fn labelled(node: Node, labels: &[(&str, &str)]) -> Node {
    Node {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..node
    }
}

/// The targets of the (only) target group: sorted (instance, node port).
async fn group_targets(moto: &Moto) -> Vec<(String, String)> {
    let groups = nlb(moto).await.expect("a load balancer").groups;
    assert_eq!(groups.len(), 1, "{groups:?}");
    groups[0].2.clone()
}

#[tokio::test]
async fn target_node_labels_choose_the_targets_on_each_ensure_among_the_configured_keys() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let (a, b) = (run_node(&moto, &net).await, run_node(&moto, &net).await);
    let mut cloud_config = config(moto.url(), &net.network);
    cloud_config["target_node_label_keys"] = json!([LB_ROLE, TIER]);
    let aws = aws_at(&moto, moto.url(), cloud_config).await;
    let target = |instance: &Instance| (instance.id.clone(), "30080".to_string());
    let node_a = labelled(node_of(&a), &[(LB_ROLE, "edge")]);
    let node_b = labelled(node_of(&b), &[(LB_ROLE, "inner"), (TIER, "gold")]);
    let mut svc = web_service();
    svc.annotations
        .push((TARGET_NODE_LABELS.into(), format!("{LB_ROLE}=edge")));

    // k=v: only the node whose label has that value.
    ensure(&aws, &svc, &[node_a.clone(), node_b.clone()]).await;
    assert_eq!(group_targets(&moto).await, [target(&a)]);

    // The annotation edited to a key alone: the node that has the label, whatever its value.
    svc.annotations[1].1 = TIER.into();
    aws.provider
        .update_load_balancer(
            "kubernetes",
            &svc,
            &Arc::from([node_a.clone(), node_b.clone()]),
        )
        .await
        .unwrap();
    assert_eq!(group_targets(&moto).await, [target(&b)]);

    // A node labelled since: it becomes a target too.
    let node_a = labelled(node_of(&a), &[(LB_ROLE, "edge"), (TIER, "silver")]);
    ensure(&aws, &svc, &[node_a.clone(), node_b.clone()]).await;
    let mut both = vec![target(&a), target(&b)];
    both.sort();
    assert_eq!(group_targets(&moto).await, both);

    // A key the cloud config does not list is refused, naming the annotation, the key and
    // the field to add it to; the targets stay.
    svc.annotations[1].1 = "kubernetes.io/hostname=x".into();
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &svc, &Arc::from([node_a, node_b]))
        .await
        .unwrap_err();
    assert_plain(
        &error,
        &format!("{TARGET_NODE_LABELS} names node label \"kubernetes.io/hostname\""),
    );
    assert_plain(
        &error,
        "add it to \"target_node_label_keys\" in the cloud config",
    );
    assert_eq!(group_targets(&moto).await, both);
}

#[tokio::test]
async fn services_this_provider_does_not_balance_are_refused_or_left_to_their_controller() {
    let moto = Moto::start().await;
    let (aws, nodes) = one_node(&moto).await;

    let classic = Service {
        annotations: vec![],
        ..web_service()
    };
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &classic, &nodes)
        .await
        .unwrap_err();
    assert_plain(
        &error,
        "service.beta.kubernetes.io/aws-load-balancer-type is not set",
    );
    let external = external_service();
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &external, &nodes)
        .await
        .unwrap_err();
    assert!(error.is_implemented_elsewhere(), "{error}");
    let mut bad = web_service();
    bad.annotations.push((
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval".into(),
        "often".into(),
    ));
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &bad, &nodes)
        .await
        .unwrap_err();
    assert_plain(&error, "aws-load-balancer-healthcheck-interval \"often\"");
    assert_eq!(nlb(&moto).await, None);
}

/// A Service whose type changes to one the AWS Load Balancer Controller handles loses the
/// NLB made for it: at the next ensure (not served twice), or when it is deleted before one
/// (not left behind, as upstream leaves it).
#[tokio::test]
async fn a_service_handed_to_the_aws_load_balancer_controller_loses_the_nlb_made_for_it() {
    let moto = Moto::start().await;
    let (aws, nodes) = one_node(&moto).await;
    let external = external_service();
    let made = || async {
        aws.provider
            .ensure_load_balancer("kubernetes", &web_service(), &nodes)
            .await
            .expect("the NLB is made");
        assert!(nlb(&moto).await.is_some());
        assert_eq!(all_target_groups(&moto).await.len(), 1);
    };

    made().await;
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &external, &nodes)
        .await
        .unwrap_err();
    assert!(error.is_implemented_elsewhere(), "{error}");
    assert_eq!(nlb(&moto).await, None);
    assert_eq!(all_target_groups(&moto).await, Vec::<String>::new());

    made().await;
    aws.provider
        .ensure_load_balancer_deleted("kubernetes", &external)
        .await
        .expect("deleted");
    assert_eq!(nlb(&moto).await, None);
    assert_eq!(all_target_groups(&moto).await, Vec::<String>::new());
}

#[tokio::test]
async fn no_suitable_subnet_is_an_error_saying_which_were_rejected_and_why() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let node = run_instance(&moto, &network, true).await;
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &network)).await;
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &web_service(), &Arc::from([node_of(&node)]))
        .await
        .unwrap_err();
    assert_plain(&error, "could not find any suitable subnets");
    assert_plain(
        &error,
        &format!("{}: not public (route table", network.subnet),
    );
    let mut named = web_service();
    named.annotations.push((
        "service.beta.kubernetes.io/aws-load-balancer-subnets".into(),
        format!("{},subnet-0000000000000000f", network.subnet),
    ));
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &named, &Arc::from([node_of(&node)]))
        .await
        .unwrap_err();
    assert_plain(
        &error,
        "aws-load-balancer-subnets names subnets that do not exist",
    );
    assert_plain(&error, "subnet-0000000000000000f");
    assert_eq!(nlb(&moto).await, None);
}

#[tokio::test]
async fn subnets_named_by_their_name_tag_are_resolved_and_an_edit_of_them_is_reported() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let a = run_node(&moto, &net).await;
    for (subnet, name) in [
        (&net.network.subnet, "public-a"),
        (&net.second_subnet, "public-b"),
    ] {
        ec2(
            &moto,
            "CreateTags",
            &[
                ("ResourceId.1", subnet),
                ("Tag.1.Key", "Name"),
                ("Tag.1.Value", name),
            ],
        )
        .await;
    }
    let aws = aws_at(&moto, moto.url(), config(moto.url(), &net.network)).await;
    let nodes: Arc<[Node]> = Arc::from([node_of(&a)]);

    // One subnet by its Name: the NLB is in that one only (discovery would take both).
    let mut svc = web_service();
    svc.annotations.push((SUBNETS.into(), "public-b".into()));
    ensure(&aws, &svc, &nodes).await;
    assert_eq!(
        nlb(&moto).await.unwrap().subnets,
        std::slice::from_ref(&net.second_subnet)
    );

    // The same subnet by its ID: no change, no error.
    svc.annotations[1].1 = net.second_subnet.clone();
    ensure(&aws, &svc, &nodes).await;

    // Another subnet: reported, naming the annotation and both sets; the NLB stays.
    svc.annotations[1].1 = "public-a".into();
    let error = aws
        .provider
        .ensure_load_balancer("kubernetes", &svc, &nodes)
        .await
        .unwrap_err();
    assert_plain(
        &error,
        &format!("{SUBNETS} names {{\"{}\"}}", net.network.subnet),
    );
    assert_plain(
        &error,
        &format!("{LB_NAME} is in {{\"{}\"}}", net.second_subnet),
    );
    assert_plain(&error, "delete and recreate the Service");
    assert_eq!(
        nlb(&moto).await.unwrap().subnets,
        std::slice::from_ref(&net.second_subnet)
    );
}

// ---- errors ---------------------------------------------------------------------------------

/// A front answering every request with `status` and an AWS error body of `code`, counting
/// the requests that reached it.
async fn failing(moto: &Moto, status: u16, body: &'static str) -> (Front, Arc<Mutex<u32>>) {
    let count = Arc::new(Mutex::new(0));
    let counted = count.clone();
    let front = moto
        .front(Arc::new(move |_| {
            *counted.lock().unwrap() += 1;
            Some((status, body.to_string()))
        }))
        .await;
    (front, count)
}

const THROTTLED: &str = "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r-1</RequestID></Response>";
const UNAUTHORIZED: &str = "<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized to perform this operation.</Message></Error></Errors><RequestID>r-2</RequestID></Response>";

#[tokio::test]
async fn throttling_becomes_retry_after_and_holds_back_the_next_requests() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let (front, count) = failing(&moto, 503, THROTTLED).await;
    let aws = aws_at(&moto, front.url(), config(front.url(), &network)).await;
    let node = node_named("ip-10-0-1-9.ec2.internal");

    let first = aws.provider.instance_metadata(&node).await.unwrap_err();
    assert_eq!(
        first.retry_after(),
        Some(std::time::Duration::from_secs(1)),
        "{first}"
    );
    assert!(
        first.to_string().contains("RequestLimitExceeded"),
        "{first}"
    );
    // While the back-off lasts, no request is sent: the next call waits it out.
    let second = aws.provider.instance_metadata(&node).await.unwrap_err();
    assert!(second.retry_after().is_some(), "{second}");
    assert!(second.to_string().contains("throttling"), "{second}");
    assert_eq!(*count.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_denied_action_is_a_plain_error_naming_the_code_and_the_permission() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let (front, _) = failing(&moto, 403, UNAUTHORIZED).await;
    let aws = aws_at(&moto, front.url(), config(front.url(), &network)).await;
    let error = aws
        .provider
        .instance_exists(&node_named("ip-10-0-1-9.ec2.internal"))
        .await
        .unwrap_err();
    assert_plain(&error, "UnauthorizedOperation");
    assert_plain(&error, "ec2:DescribeInstances");
}

#[tokio::test]
async fn a_wrong_secret_is_refused_by_moto_and_reported_as_a_credential_error() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("AWS_ACCESS_KEY_ID"), &moto.access_key_id).unwrap();
    std::fs::write(keys.path().join("AWS_SECRET_ACCESS_KEY"), "not-the-secret").unwrap();
    let provider = load(
        &sandbox(e2e::sandbox_config()),
        guest_builds::AWS,
        egress(moto.url(), &keys),
        Some(config(moto.url(), &network).to_string().into_bytes()),
    )
    .await
    .unwrap();
    let error = provider
        .instance_exists(&node_named("ip-10-0-1-9.ec2.internal"))
        .await
        .unwrap_err();
    assert_plain(&error, "(AuthFailure)");
}

#[tokio::test]
async fn a_bad_cloud_config_is_refused_at_load_naming_the_field() {
    let moto = Moto::start().await;
    let keys = keys(&moto);
    for (config, field) in [
        (json!({"cluster_id": "c1"}), "\"region\" is required"),
        (json!({"region": REGION}), "\"cluster_id\" is required"),
        (
            json!({"region": REGION, "cluster_id": "c1", "endpoints": {"ec2": "ec2.local"}}),
            "\"endpoints.ec2\"",
        ),
        (
            json!({"region": REGION, "cluster_id": "c1", "target_node_label_keys": "tier"}),
            "\"target_node_label_keys\" must be a list of node label keys",
        ),
        (
            json!({"region": REGION, "cluster_id": "c1", "target_node_label_keys": ["tier", 7]}),
            "\"target_node_label_keys\" must be a list of node label keys such as \
             [\"node-role.example.com/lb\"]: 7 is not a string",
        ),
    ] {
        let error = load(
            &sandbox(e2e::sandbox_config()),
            guest_builds::AWS,
            egress(moto.url(), &keys),
            Some(config.to_string().into_bytes()),
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("{config} loaded"));
        assert!(error.to_string().contains(field), "{config}: {error}");
    }
}

/// While one call lists the cluster's instances, calls missing the cache meanwhile describe
/// their one instance each instead of listing the whole cluster again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_during_a_listing_of_the_cluster_describe_their_instance_alone() {
    let moto = Moto::start().await;
    let network = network(&moto).await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(run_instance(&moto, &network, true).await);
    }
    let is_listing = |seen: &Seen| String::from_utf8_lossy(&seen.body).contains("tag-key");
    // The listing is held at the front long enough for the other calls to go by.
    let held = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holding = held.clone();
    let front = moto
        .front(Arc::new(move |seen| {
            if is_listing(seen) {
                holding.store(true, std::sync::atomic::Ordering::SeqCst);
                // Its worker's other tasks move on meanwhile.
                tokio::task::block_in_place(|| {
                    std::thread::sleep(std::time::Duration::from_secs(2));
                });
            }
            None
        }))
        .await;
    let aws = Arc::new(aws_at(&moto, front.url(), config(front.url(), &network)).await);

    let first = {
        let (aws, node) = (aws.clone(), node_of(&instances[0]));
        tokio::spawn(async move { aws.provider.instance_exists(&node).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !held.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(std::time::Instant::now() < deadline, "no listing sent");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for instance in &instances[1..] {
        assert!(
            aws.provider
                .instance_exists(&node_of(instance))
                .await
                .unwrap()
        );
    }
    assert!(first.await.unwrap().unwrap());

    let seen = front.seen();
    let listings = seen.iter().filter(|seen| is_listing(seen)).count();
    assert_eq!(listings, 1, "{:?}", actions(&front));
    for instance in &instances[1..] {
        let alone = format!("InstanceId.1={}", instance.id);
        assert!(
            seen.iter()
                .any(|seen| String::from_utf8_lossy(&seen.body).contains(&alone)),
            "{} not described alone: {:?}",
            instance.id,
            seen.iter()
                .map(|seen| String::from_utf8_lossy(&seen.body).into_owned())
                .collect::<Vec<_>>()
        );
    }
}

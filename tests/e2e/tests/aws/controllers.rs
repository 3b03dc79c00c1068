//! The manager with the AWS provider (`guests/aws`, the real component) against the API
//! emulator and moto with signature checking on, as a cluster on AWS runs it: kubelets
//! registered with `--cloud-provider=external` get their nodes initialised from EC2, and a
//! LoadBalancer Service gets a network load balancer and its hostname. The manager's egress
//! gate signs every request with the seeded user's keys, read from a directory as from a
//! mounted Secret. What the provider sends and what it may not (unsigned requests, the
//! signing headers, other services) is tested in `aws.rs` and `aws_sigv4.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::aws::{
    CLUSTER_TAG, Instance, ZONE, all_target_groups, config, egress, elb, field, keys, nlb,
    public_network, run_node, zone_id,
};
use e2e::moto::{Moto, REGION};
use e2e::testbed::{RunningManager, Testbed, eventually, ingress_hostname, is_uninitialized};
use k8s_openapi::api::core::v1::{Node, NodeAddress, Service};
use kube::api::{DeleteParams, PostParams};
use wasm_ccm::controllers::ControllerSelection;

/// Generous: moto answers each call in milliseconds, but two cores are shared.
const WAIT: Duration = Duration::from_secs(90);
const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";
const NLB: (&str, &str) = ("service.beta.kubernetes.io/aws-load-balancer-type", "nlb");

/// moto seeded with a public network and two cluster instances, and the manager running
/// the aws provider's cloud-node and service controllers against it and the emulator.
struct AwsCluster {
    bed: Testbed,
    moto: Moto,
    instances: Vec<Instance>,
    manager: RunningManager,
    /// The cloud config and the keys directory the manager reads.
    _files: (tempfile::TempDir, tempfile::TempDir),
}

impl AwsCluster {
    async fn start() -> AwsCluster {
        let moto = Moto::start().await;
        let net = public_network(&moto).await;
        let instances = vec![run_node(&moto, &net).await, run_node(&moto, &net).await];
        let bed = Testbed::start().await;
        for instance in &instances {
            // The kubelet names its node after the instance's private DNS name.
            bed.create_node(&Testbed::kubelet_node(&instance.private_dns))
                .await;
        }

        let dir = tempfile::tempdir().expect("config dir");
        let cloud_config = dir.path().join("cloud.json");
        let written = config(moto.url(), &net.network).to_string();
        std::fs::write(&cloud_config, written).expect("write cloud config");
        let keys = keys(&moto);
        let mut manager = bed.config();
        manager.provider = Testbed::provider_configured(guest_builds::AWS, "aws", cloud_config);
        manager.egress = egress(moto.url(), &keys);
        manager.controllers = "cloud-node,service".parse::<ControllerSelection>().unwrap();
        // As docs/src/operators/aws.md says: the public DNS names moto gives instances.
        manager.settings.node_address_dns_suffixes = vec!["amazonaws.com".into()];
        let manager = bed.run(manager);
        AwsCluster {
            bed,
            moto,
            instances,
            manager,
            _files: (dir, keys),
        }
    }

    async fn initialised(&self, instance: &Instance) -> Node {
        let name = &instance.private_dns;
        eventually(&format!("node {name} initialised"), WAIT, || async {
            self.bed.node(name).await.filter(|n| !is_uninitialized(n))
        })
        .await
    }

    /// The instances' IDs, sorted, each with `port`: a target group's expected targets.
    fn targets(&self, port: &str) -> Vec<(String, String)> {
        let mut targets: Vec<(String, String)> = self
            .instances
            .iter()
            .map(|i| (i.id.clone(), port.to_string()))
            .collect();
        targets.sort();
        targets
    }
}

/// The addresses of `instance` in upstream's order, as the node should list them.
fn addresses_of(instance: &Instance) -> Vec<NodeAddress> {
    let address = |kind: &str, value: &String| NodeAddress {
        type_: kind.into(),
        address: value.clone(),
    };
    let mut addresses = vec![address("InternalIP", &instance.private_ip)];
    addresses.extend(
        instance
            .public_ip
            .iter()
            .map(|ip| address("ExternalIP", ip)),
    );
    addresses.push(address("InternalDNS", &instance.private_dns));
    addresses.push(address("Hostname", &instance.private_dns));
    addresses.extend(
        instance
            .public_dns
            .iter()
            .map(|dns| address("ExternalDNS", dns)),
    );
    addresses
}

#[tokio::test]
async fn nodes_registered_by_their_kubelets_are_initialised_from_their_ec2_instances() {
    let cluster = AwsCluster::start().await;
    let zone_id = zone_id(&cluster.moto).await;

    for instance in &cluster.instances {
        let node = cluster.initialised(instance).await;
        let spec = node.spec.as_ref().expect("spec");
        assert_eq!(
            spec.provider_id.as_deref(),
            Some(format!("aws:///{ZONE}/{}", instance.id).as_str())
        );
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let label = |key: &str| labels.get(key).map(String::as_str);
        assert_eq!(label("node.kubernetes.io/instance-type"), Some("m5.large"));
        assert_eq!(label("topology.kubernetes.io/zone"), Some(ZONE));
        assert_eq!(label("topology.kubernetes.io/region"), Some(REGION));
        assert_eq!(
            label("topology.k8s.aws/zone-id"),
            Some(zone_id.as_str()),
            "{labels:?}"
        );
        let node = eventually("the node's addresses", WAIT, || async {
            let node = cluster.bed.node(&instance.private_dns).await?;
            let listed = node.status.as_ref()?.addresses.as_ref()?;
            (!listed.is_empty()).then_some(node)
        })
        .await;
        assert_eq!(
            node.status.and_then(|s| s.addresses),
            Some(addresses_of(instance))
        );
    }
    cluster.manager.stop().await.unwrap();
}

#[tokio::test]
async fn a_load_balancer_service_gets_its_nlbs_hostname_and_deleting_it_deletes_the_nlb() {
    let cluster = AwsCluster::start().await;
    for instance in &cluster.instances {
        cluster.initialised(instance).await;
    }
    let mut service = Testbed::lb_service("web");
    service.metadata.annotations = Some(BTreeMap::from([(NLB.0.into(), NLB.1.into())]));
    cluster
        .bed
        .services()
        .create(&PostParams::default(), &service)
        .await
        .expect("create service");

    let service: Service = eventually("web has an ingress hostname", WAIT, || async {
        let service = cluster.bed.service("web").await?;
        ingress_hostname(&service).is_some().then_some(service)
    })
    .await;
    let made = nlb(&cluster.moto).await.expect("an NLB in moto");
    assert_eq!(ingress_hostname(&service), Some(made.dns_name.clone()));
    assert!(
        service
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER),
        "{:?}",
        service.metadata.finalizers
    );
    assert_eq!(made.scheme, "internet-facing");
    let node_port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports[0].node_port)
        .expect("the emulator allocates a node port")
        .to_string();
    let [(port, protocol, group)] = &made.listeners[..] else {
        panic!("one listener: {made:?}");
    };
    assert_eq!((port.as_str(), protocol.as_str()), ("80", "TCP"));
    assert!(group.starts_with("k8s-default-web-"), "{group}");
    // The first ensure lists the nodes its informer holds by then; a node it missed is
    // added by the next update.
    let made = eventually("both nodes registered as targets", WAIT, || async {
        let made = nlb(&cluster.moto).await?;
        (made.groups.len() == 1 && made.groups[0].2 == cluster.targets(&node_port)).then_some(made)
    })
    .await;
    assert_eq!(made.groups[0].0, *group);
    assert_eq!(made.groups[0].1, node_port);
    let tags = elb(
        &cluster.moto,
        "DescribeTags",
        &[(
            "ResourceArns.member.1",
            &load_balancer_arn(&cluster.moto).await,
        )],
    )
    .await;
    assert!(tags.contains(CLUSTER_TAG), "{tags}");
    assert!(tags.contains("default/web"), "{tags}");

    cluster
        .bed
        .services()
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete service");
    eventually("web gone, its finalizer removed", WAIT, || async {
        cluster.bed.service("web").await.is_none().then_some(())
    })
    .await;
    // The finalizer goes only once the cloud is clean: nothing left to wait for.
    assert_eq!(nlb(&cluster.moto).await, None);
    assert_eq!(all_target_groups(&cluster.moto).await, Vec::<String>::new());
    cluster.manager.stop().await.unwrap();
}

/// The ARN of the load balancer moto holds.
async fn load_balancer_arn(moto: &Moto) -> String {
    let lbs = elb(moto, "DescribeLoadBalancers", &[]).await;
    field(&lbs, "LoadBalancerArn")
}

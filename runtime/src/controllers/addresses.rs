//! What the cluster holds, for the checks of provider answers: the addresses of nodes (IPs
//! and DNS names) and Services (IPs), by which the shared informers' caches are indexed,
//! and the view of those caches the provider facade consults ([`ClusterAddresses`]) before
//! it returns an answer.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use wasm_ccm_host::answers::{Address, ClusterAddresses, Holder, ServiceField};

use super::Informer;

/// The `status.addresses` types whose values are DNS names.
const DNS_ADDRESS_TYPES: [&str; 3] = ["Hostname", "InternalDNS", "ExternalDNS"];

/// What a node holds, each with the type of the address that holds it (`name` for the
/// node's own name): the IPs in its `status.addresses`, its DNS-type addresses and its name.
fn node_fields(node: &Node) -> Vec<(Address, &str)> {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_deref());
    let mut held: Vec<(Address, &str)> = addresses
        .unwrap_or_default()
        .iter()
        .filter_map(|address| {
            let held = match address.address.parse() {
                Ok(ip) => Address::Ip(ip),
                Err(_) if DNS_ADDRESS_TYPES.contains(&address.type_.as_str()) => {
                    Address::name(&address.address)
                }
                Err(_) => return None,
            };
            Some((held, address.type_.as_str()))
        })
        .collect();
    if let Some(name) = &node.metadata.name {
        held.push((Address::name(name), "name"));
    }
    held
}

/// What a node holds (see [`node_fields`]), by which the node cache is indexed.
pub fn node_addresses(node: &Node) -> Vec<Address> {
    let mut held: Vec<Address> = node_fields(node).into_iter().map(|(a, _)| a).collect();
    held.sort_unstable();
    held.dedup();
    held
}

/// The IP addresses a Service holds, each with the field that holds it: its cluster IPs,
/// `externalIPs`, `loadBalancerIP` and load-balancer ingress IPs.
fn service_fields(service: &Service) -> Vec<(IpAddr, ServiceField)> {
    let mut held = Vec::new();
    let mut add = |texts: &mut dyn Iterator<Item = &String>, field: ServiceField| {
        held.extend(
            texts
                .filter_map(|text| text.parse().ok())
                .map(|ip| (ip, field)),
        );
    };
    if let Some(spec) = &service.spec {
        add(
            &mut spec.cluster_ips.iter().flatten().chain(&spec.cluster_ip),
            ServiceField::ClusterIp,
        );
        add(
            &mut spec.external_ips.iter().flatten(),
            ServiceField::ExternalIp,
        );
        add(
            &mut spec.load_balancer_ip.iter(),
            ServiceField::LoadBalancerIp,
        );
    }
    let ingress = service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    add(
        &mut ingress.iter().filter_map(|point| point.ip.as_ref()),
        ServiceField::Ingress,
    );
    held
}

/// The IP addresses a Service holds (see [`service_fields`]), by which the service cache is
/// indexed.
pub fn service_addresses(service: &Service) -> Vec<Address> {
    let mut ips: Vec<IpAddr> = service_fields(service)
        .into_iter()
        .map(|(ip, _)| ip)
        .collect();
    ips.sort_unstable();
    ips.dedup();
    ips.into_iter().map(Address::Ip).collect()
}

/// The node and service caches, as the answer checks see them.
pub struct ClusterView {
    nodes: Informer<Node>,
    services: Informer<Service>,
}

impl ClusterView {
    /// The view of the shared caches.
    pub fn new(nodes: Informer<Node>, services: Informer<Service>) -> ClusterView {
        ClusterView { nodes, services }
    }
}

impl ClusterAddresses for ClusterView {
    fn holders(&self, address: &Address) -> Vec<Holder> {
        let mut holders = Vec::new();
        for node in self.nodes.holding(address) {
            let fields = node_fields(&node);
            let address_type = fields
                .iter()
                .find(|(held, _)| held == address)
                .map_or("address", |(_, kind)| *kind);
            holders.push(Holder::Node {
                name: super::name_of(&node).to_string(),
                address_type: address_type.to_string(),
            });
        }
        let Address::Ip(ip) = *address else {
            return holders;
        };
        for service in self.services.holding(address) {
            let key = format!(
                "{}/{}",
                service.metadata.namespace.as_deref().unwrap_or_default(),
                service.metadata.name.as_deref().unwrap_or_default()
            );
            let mut fields: Vec<ServiceField> = service_fields(&service)
                .into_iter()
                .filter(|(held, _)| *held == ip)
                .map(|(_, field)| field)
                .collect();
            // `externalIPs` may list an address any number of times: each field once.
            fields.dedup();
            for field in fields {
                holders.push(Holder::Service {
                    key: key.clone(),
                    field,
                });
            }
        }
        holders
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeStatus, ServiceSpec,
        ServiceStatus,
    };
    use kube::api::ObjectMeta;

    #[test]
    fn a_node_is_indexed_by_its_ips_dns_names_and_name() {
        let address = |type_: &str, address: &str| NodeAddress {
            type_: type_.into(),
            address: address.into(),
        };
        let node = Node {
            metadata: ObjectMeta {
                name: Some("N1".into()),
                ..ObjectMeta::default()
            },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    address("InternalIP", "10.0.0.5"),
                    address("Hostname", "n1.sim.internal."),
                    address("ExternalDNS", "N1.example.com"),
                    address("InternalIP", "not an ip"),
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        };
        let held: Vec<String> = node_addresses(&node)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            held,
            ["10.0.0.5", "n1", "n1.example.com", "n1.sim.internal"],
            "names lowercased, without a trailing dot; an IP type's text that is no IP left out"
        );
        let fields = node_fields(&node);
        assert!(fields.contains(&(Address::name("n1.example.com"), "ExternalDNS")));
        assert!(fields.contains(&(Address::name("n1"), "name")));
    }

    #[test]
    fn a_service_is_indexed_by_every_address_it_holds() {
        let service = Service {
            spec: Some(ServiceSpec {
                cluster_ip: Some("10.96.0.10".into()),
                cluster_ips: Some(vec!["10.96.0.10".into(), "fd00::a".into()]),
                external_ips: Some(vec!["203.0.113.3".into(), "not an ip".into()]),
                load_balancer_ip: Some("203.0.113.4".into()),
                ..ServiceSpec::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some("203.0.113.2".into()),
                        ..LoadBalancerIngress::default()
                    }]),
                }),
                ..ServiceStatus::default()
            }),
            ..Service::default()
        };
        let ips: Vec<String> = service_addresses(&service)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            ips,
            [
                "10.96.0.10",
                "203.0.113.2",
                "203.0.113.3",
                "203.0.113.4",
                "fd00::a"
            ]
        );
        let fields = service_fields(&service);
        assert!(fields.contains(&("203.0.113.2".parse().unwrap(), ServiceField::Ingress)));
        assert!(fields.contains(&("203.0.113.4".parse().unwrap(), ServiceField::LoadBalancerIp)));
    }
}

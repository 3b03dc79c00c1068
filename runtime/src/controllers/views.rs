//! What a provider sees of Kubernetes objects: the contract's node and service views built
//! from API objects, and the provider's answers turned back into API fields.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use wasm_ccm_host::contract::{
    AddressKind, IpFamily, IpMode, LbIngress, LbStatus, Node, NodeAddress, PortStatus, Protocol,
    Service, ServicePort,
};

fn pairs(map: Option<&BTreeMap<String, String>>) -> Vec<(String, String)> {
    map.map(|map| map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// The contract's view of a Node.
pub fn node_view(node: &core::Node) -> Node {
    let spec = node.spec.as_ref();
    Node {
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        labels: pairs(node.metadata.labels.as_ref()),
        annotations: pairs(node.metadata.annotations.as_ref()),
        provider_id: spec
            .and_then(|spec| spec.provider_id.clone())
            .filter(|id| !id.is_empty()),
        addresses: node_addresses(node),
        pod_cidrs: spec
            .and_then(|spec| spec.pod_cidrs.clone())
            .unwrap_or_default(),
    }
}

/// `status.addresses` of a node, skipping types the contract does not know.
pub fn node_addresses(node: &core::Node) -> Vec<NodeAddress> {
    let addresses = node
        .status
        .as_ref()
        .and_then(|status| status.addresses.as_ref());
    addresses
        .into_iter()
        .flatten()
        .filter_map(|address| {
            Some(NodeAddress {
                kind: address_kind(&address.type_)?,
                address: address.address.clone(),
            })
        })
        .collect()
}

fn address_kind(name: &str) -> Option<AddressKind> {
    Some(match name {
        "Hostname" => AddressKind::Hostname,
        "InternalIP" => AddressKind::InternalIP,
        "ExternalIP" => AddressKind::ExternalIP,
        "InternalDNS" => AddressKind::InternalDNS,
        "ExternalDNS" => AddressKind::ExternalDNS,
        _ => return None,
    })
}

/// The API form of an address.
pub fn api_address(address: &NodeAddress) -> core::NodeAddress {
    let type_ = match address.kind {
        AddressKind::Hostname => "Hostname",
        AddressKind::InternalIP => "InternalIP",
        AddressKind::ExternalIP => "ExternalIP",
        AddressKind::InternalDNS => "InternalDNS",
        AddressKind::ExternalDNS => "ExternalDNS",
    };
    core::NodeAddress {
        type_: type_.to_string(),
        address: address.address.clone(),
    }
}

fn protocol(name: Option<&str>) -> Protocol {
    match name {
        Some("UDP") => Protocol::Udp,
        Some("SCTP") => Protocol::Sctp,
        _ => Protocol::Tcp,
    }
}

fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// The contract's view of a Service.
pub fn service_view(service: &core::Service) -> Service {
    let spec = service.spec.clone().unwrap_or_default();
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|port| ServicePort {
            name: port.name,
            protocol: protocol(port.protocol.as_deref()),
            port: port.port,
            target_port: port.target_port.map(|target| match target {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => n.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
            }),
            node_port: port.node_port,
            app_protocol: port.app_protocol,
        })
        .collect();
    let ip_families = spec
        .ip_families
        .unwrap_or_default()
        .iter()
        .filter_map(|family| match family.as_str() {
            "IPv4" => Some(IpFamily::IPv4),
            "IPv6" => Some(IpFamily::IPv6),
            _ => None,
        })
        .collect();
    Service {
        name: service.metadata.name.clone().unwrap_or_default(),
        namespace: service.metadata.namespace.clone().unwrap_or_default(),
        uid: service.metadata.uid.clone().unwrap_or_default(),
        labels: pairs(service.metadata.labels.as_ref()),
        annotations: pairs(service.metadata.annotations.as_ref()),
        service_type: spec.type_.unwrap_or_else(|| "ClusterIP".into()),
        ports,
        external_traffic_policy: spec.external_traffic_policy,
        health_check_node_port: spec.health_check_node_port,
        load_balancer_source_ranges: source_ranges(service, spec.load_balancer_source_ranges),
        load_balancer_ip: spec.load_balancer_ip,
        ip_families,
        session_affinity: spec.session_affinity,
        load_balancer_class: spec.load_balancer_class,
        status: lb_status_view(service),
    }
}

/// The legacy annotation upstream's `GetLoadBalancerSourceRanges` falls back to.
const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// `spec.loadBalancerSourceRanges`, or when that is empty the comma-separated legacy
/// annotation, as upstream's helper reads them (empty: no restriction).
fn source_ranges(service: &core::Service, spec_ranges: Option<Vec<String>>) -> Vec<String> {
    let from_spec = spec_ranges.unwrap_or_default();
    if !from_spec.is_empty() {
        return from_spec.iter().map(|r| r.trim().to_string()).collect();
    }
    let annotation = service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SOURCE_RANGES_ANNOTATION));
    annotation
        .map(|ranges| {
            ranges
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn lb_status_view(service: &core::Service) -> LbStatus {
    let ingress = service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default();
    LbStatus {
        ingress: ingress
            .into_iter()
            .map(|ingress| LbIngress {
                ip: ingress.ip,
                hostname: ingress.hostname,
                ip_mode: match ingress.ip_mode.as_deref() {
                    Some("VIP") => Some(IpMode::VIP),
                    Some("Proxy") => Some(IpMode::Proxy),
                    _ => None,
                },
                ports: ingress
                    .ports
                    .unwrap_or_default()
                    .into_iter()
                    .map(|port| PortStatus {
                        port: port.port,
                        protocol: protocol(Some(port.protocol.as_str())),
                        error: port.error,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The API form of a load balancer's status.
pub fn api_lb_status(status: &LbStatus) -> core::LoadBalancerStatus {
    let ingress = status
        .ingress
        .iter()
        .map(|ingress| core::LoadBalancerIngress {
            ip: ingress.ip.clone(),
            hostname: ingress.hostname.clone(),
            ip_mode: ingress.ip_mode.map(|mode| {
                match mode {
                    IpMode::VIP => "VIP",
                    IpMode::Proxy => "Proxy",
                }
                .to_string()
            }),
            ports: (!ingress.ports.is_empty()).then(|| {
                ingress
                    .ports
                    .iter()
                    .map(|port| core::PortStatus {
                        port: port.port,
                        protocol: protocol_name(port.protocol).to_string(),
                        error: port.error.clone(),
                    })
                    .collect()
            }),
        })
        .collect::<Vec<_>>();
    core::LoadBalancerStatus {
        ingress: (!ingress.is_empty()).then_some(ingress),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn service(spec_ranges: Option<Vec<&str>>, annotation: Option<&str>) -> core::Service {
        core::Service {
            metadata: kube::api::ObjectMeta {
                annotations: annotation.map(|value| {
                    BTreeMap::from([(SOURCE_RANGES_ANNOTATION.to_string(), value.to_string())])
                }),
                ..Default::default()
            },
            spec: Some(core::ServiceSpec {
                load_balancer_source_ranges: spec_ranges
                    .map(|ranges| ranges.into_iter().map(String::from).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn source_ranges_come_from_the_spec_else_from_the_legacy_annotation() {
        let ranges = |svc: core::Service| service_view(&svc).load_balancer_source_ranges;
        assert_eq!(
            ranges(service(Some(vec!["10.0.0.0/8"]), Some("192.168.0.0/16"))),
            ["10.0.0.0/8"]
        );
        assert_eq!(
            ranges(service(None, Some(" 192.168.0.0/16, 172.16.0.0/12 ,"))),
            ["192.168.0.0/16", "172.16.0.0/12"]
        );
        assert_eq!(
            ranges(service(Some(vec![]), Some("192.168.0.0/16"))),
            ["192.168.0.0/16"]
        );
        assert!(ranges(service(None, None)).is_empty(), "no restriction");
    }
}

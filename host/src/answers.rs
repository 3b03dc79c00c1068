//! The host's checks of what a provider answers, before any of it reaches the Kubernetes
//! API. A provider is untrusted code and its cloud's answer untrusted input: an ingress IP
//! equal to the API server's cluster IP, a node, loopback or the metadata service makes
//! kube-proxy send that traffic to a Service's endpoints (the CVE-2020-8554 class); a node
//! address of `127.0.0.1` points the API server's kubelet connections at itself; a label in
//! the `kubernetes.io` namespace changes what the scheduler or kubelet believe of a node.
//! So an answer is written only if every field passes, and a refusal lists each field
//! that did not, with its value and why ([`Refusals`]).
//!
//! The checks are pure: the answer, the operator's ranges ([`AnswerPolicy`]) and what the
//! cluster already holds in, refusals out. The controllers run them before every write;
//! the conformance kit runs the same ones against a provider.
//!
//! ```
//! use wasm_ccm_host::answers::AnswerPolicy;
//! use wasm_ccm_host::contract::{LbIngress, LbStatus, Service};
//! let policy = AnswerPolicy {
//!     service_cidrs: Some("10.96.0.0/12".parse().unwrap()),
//!     ..AnswerPolicy::default()
//! };
//! let status = LbStatus {
//!     ingress: vec![LbIngress { ip: Some("10.96.0.1".into()), ..LbIngress::default() }],
//! };
//! let refused = policy
//!     .check_load_balancer_status(&status, &Service::default(), |_| None)
//!     .unwrap_err();
//! assert!(refused.to_string().contains("ingress[0].ip \"10.96.0.1\""), "{refused}");
//! ```

use std::net::IpAddr;

use crate::cidr::{CidrList, DualStackCidrs};
use crate::contract::{AddressKind, InstanceMetadata, LbStatus, Node, Service};
use crate::text::ellipsized;

/// `node.kubernetes.io/instance-type`, set from [`InstanceMetadata::instance_type`].
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// `beta.kubernetes.io/instance-type`, its deprecated twin.
pub const INSTANCE_TYPE_BETA_LABEL: &str = "beta.kubernetes.io/instance-type";
/// `topology.kubernetes.io/zone`, set from [`InstanceMetadata::zone`].
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// `failure-domain.beta.kubernetes.io/zone`, its deprecated twin.
pub const ZONE_BETA_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
/// `topology.kubernetes.io/region`, set from [`InstanceMetadata::region`].
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// `failure-domain.beta.kubernetes.io/region`, its deprecated twin.
pub const REGION_BETA_LABEL: &str = "failure-domain.beta.kubernetes.io/region";

/// The longest provider ID accepted (Azure's, the longest in use, are about 250 bytes).
pub const MAX_PROVIDER_ID: usize = 1024;
/// The refusals a [`Refusals`] lists one by one; the rest are counted.
pub const MAX_LISTED: usize = 16;
/// The bytes of a refused value quoted in a refusal.
const MAX_QUOTED: usize = 128;

/// The operator's ranges an answer is checked against, from flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerPolicy {
    /// `--service-cluster-ip-range`: no ingress IP inside it.
    pub service_cidrs: Option<DualStackCidrs>,
    /// `--cluster-cidr`: no ingress IP inside the pod network.
    pub cluster_cidrs: Option<DualStackCidrs>,
    /// `--load-balancer-ip-ranges`: ingress IPs only inside these; `None`: any address the
    /// other rules let through.
    pub load_balancer_ranges: Option<CidrList>,
}

/// Every field of one answer that the host refuses to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Refusals {
    listed: Vec<Refusal>,
    total: usize,
}

impl Refusals {
    /// The refused fields, the first [`MAX_LISTED`] of them.
    pub fn listed(&self) -> &[Refusal] {
        &self.listed
    }

    /// How many fields were refused in all.
    pub fn total(&self) -> usize {
        self.total
    }

    fn describe(&self) -> String {
        let mut all: Vec<String> = self.listed.iter().map(Refusal::to_string).collect();
        if self.total > self.listed.len() {
            all.push(format!(
                "and {} more refused fields",
                self.total - self.listed.len()
            ));
        }
        all.join("; ")
    }
}

/// One refused field: where it is in the answer, its value (cut to 128 bytes) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?}: {reason}")]
pub struct Refusal {
    /// The field, as the contract's JSON names it, e.g. `ingress[0].ip`.
    pub field: String,
    /// The value answered.
    pub value: String,
    /// Why it is refused.
    pub reason: Reason,
}

/// Why a field of an answer is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// Not an IP address.
    #[error("not an IP address")]
    NotAnIp,
    /// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`), which checks against IPv4 ranges
    /// would miss.
    #[error("an IPv4-mapped IPv6 address; answer the IPv4 address")]
    Ipv4Mapped,
    /// An address no load balancer or node may have.
    #[error("{0} address")]
    SpecialUse(SpecialUse),
    /// Inside `--service-cluster-ip-range`: kube-proxy would send the cluster IP's traffic to
    /// this Service.
    #[error("inside the Service cluster IP range {0} (--service-cluster-ip-range)")]
    ServiceRange(String),
    /// Inside `--cluster-cidr`.
    #[error("inside the pod network {0} (--cluster-cidr)")]
    PodNetwork(String),
    /// Already held by something in the cluster.
    #[error("already {0}")]
    Taken(String),
    /// Outside every `--load-balancer-ip-ranges`.
    #[error("outside --load-balancer-ip-ranges {0}")]
    OutsideRanges(String),
    /// Not an RFC 1123 DNS subdomain.
    #[error(
        "not a DNS name: {0} (lowercase letters, digits, '-' and '.', labels of 1 to 63 starting and ending with a letter or digit, 253 bytes at most)"
    )]
    NotDnsName(&'static str),
    /// A DNS name that is an IP address, or reads as one.
    #[error("an IP address where a DNS name is required")]
    IpAsName,
    /// `localhost` or a name under it (RFC 6761): the machine itself.
    #[error("a name of the local machine (localhost)")]
    Localhost,
    /// An ingress point with neither an IP nor a hostname.
    #[error("neither ip nor hostname is set")]
    NoAddress,
    /// `ipMode` without an `ip`, which the API server rejects.
    #[error("ipMode is set without an ip")]
    IpModeWithoutIp,
    /// A port status for a port the Service does not have.
    #[error("not a port of the Service (its ports: {0})")]
    NotServicePort(String),
    /// A port status error that is not a CamelCase reason, optionally under a DNS prefix.
    #[error(
        "not an error reason: CamelCase, optionally under a DNS prefix (example.com/CamelCase), 316 bytes at most"
    )]
    NotErrorReason,
    /// A provider ID not of the form `<provider name>://<id>`.
    #[error("not a provider ID of this provider: {0}")]
    ProviderId(String),
    /// A provider ID other than the one the node has.
    #[error("the node's providerID is {0:?}, and a providerID never changes")]
    ProviderIdChanged(String),
    /// Not a valid label key.
    #[error(
        "not a label key: {0} (an optional DNS-subdomain prefix of 253 bytes at most and '/', then a name of 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    LabelKey(&'static str),
    /// Not a valid label value.
    #[error(
        "not a label value: {0} (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
    )]
    LabelValue(&'static str),
    /// A label key in the `kubernetes.io` or `k8s.io` namespace, other than the ones the
    /// host sets from the answer's own fields.
    #[error(
        "in the reserved {0} namespace; a provider's labels may not be (only the topology and instance-type labels, which the host sets from zone, region and instanceType)"
    )]
    ReservedLabel(&'static str),
    /// A topology or instance-type label that disagrees with the field it is set from.
    #[error("the host sets it from {field} ({value:?}), and the answer says otherwise")]
    ConflictsWithField {
        /// The field, e.g. `zone`.
        field: &'static str,
        /// Its value in the answer.
        value: String,
    },
}

/// Addresses no load balancer or node may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialUse {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8`: "this network" (RFC 1122), not a destination.
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `169.254.0.0/16`, `fe80::/10`: where cloud metadata services answer.
    LinkLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
}

impl std::fmt::Display for SpecialUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SpecialUse::Unspecified => "an unspecified",
            SpecialUse::ThisNetwork => "a this-network (0.0.0.0/8)",
            SpecialUse::Loopback => "a loopback",
            SpecialUse::LinkLocal => "a link-local (where cloud metadata services answer)",
            SpecialUse::Multicast => "a multicast",
            SpecialUse::Broadcast => "the broadcast",
        })
    }
}

/// What an address is reserved for, if it is one no load balancer or node may have.
pub fn special_use(ip: IpAddr) -> Option<SpecialUse> {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => Some(SpecialUse::Unspecified),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(SpecialUse::ThisNetwork),
        IpAddr::V4(v4) if v4.is_loopback() => Some(SpecialUse::Loopback),
        IpAddr::V4(v4) if v4.is_link_local() => Some(SpecialUse::LinkLocal),
        IpAddr::V4(v4) if v4.is_multicast() => Some(SpecialUse::Multicast),
        IpAddr::V4(v4) if v4.is_broadcast() => Some(SpecialUse::Broadcast),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(SpecialUse::Unspecified),
        IpAddr::V6(v6) if v6.is_loopback() => Some(SpecialUse::Loopback),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(SpecialUse::LinkLocal),
        IpAddr::V6(v6) if v6.is_multicast() => Some(SpecialUse::Multicast),
        _ => None,
    }
}

/// Collects refusals, keeping the first [`MAX_LISTED`].
#[derive(Default)]
struct Findings {
    listed: Vec<Refusal>,
    total: usize,
}

impl Findings {
    fn refuse(&mut self, field: impl Into<String>, value: &str, reason: Reason) {
        self.total += 1;
        if self.listed.len() < MAX_LISTED {
            self.listed.push(Refusal {
                field: field.into(),
                value: ellipsized(value.to_string(), MAX_QUOTED),
                reason,
            });
        }
    }

    fn check(&mut self, field: impl FnOnce() -> String, value: &str, result: Result<(), Reason>) {
        if let Err(reason) = result {
            self.refuse(field(), value, reason);
        }
    }

    fn done(self) -> Result<(), Refusals> {
        if self.total == 0 {
            Ok(())
        } else {
            Err(Refusals {
                listed: self.listed,
                total: self.total,
            })
        }
    }
}

impl AnswerPolicy {
    /// Check a load-balancer status answered for `service` (`ensure-load-balancer`,
    /// `get-load-balancer`). `holder` names what in the cluster already holds an address
    /// (a node, a Service's cluster IP), if anything does.
    pub fn check_load_balancer_status(
        &self,
        status: &LbStatus,
        service: &Service,
        holder: impl Fn(IpAddr) -> Option<String>,
    ) -> Result<(), Refusals> {
        let mut findings = Findings::default();
        for (i, ingress) in status.ingress.iter().enumerate() {
            if ingress.ip.is_none() && ingress.hostname.is_none() {
                findings.refuse(format!("ingress[{i}]"), "", Reason::NoAddress);
            }
            if let Some(ip) = &ingress.ip {
                let result = self.ingress_ip(ip, &holder);
                findings.check(|| format!("ingress[{i}].ip"), ip, result);
            } else if let Some(mode) = ingress.ip_mode {
                findings.refuse(
                    format!("ingress[{i}].ipMode"),
                    &format!("{mode:?}"),
                    Reason::IpModeWithoutIp,
                );
            }
            if let Some(hostname) = &ingress.hostname {
                findings.check(
                    || format!("ingress[{i}].hostname"),
                    hostname,
                    host_name(hostname),
                );
            }
            for (j, port) in ingress.ports.iter().enumerate() {
                let known = service
                    .ports
                    .iter()
                    .any(|p| p.port == port.port && p.protocol == port.protocol);
                if !known {
                    findings.refuse(
                        format!("ingress[{i}].ports[{j}]"),
                        &format!("{}/{:?}", port.port, port.protocol),
                        Reason::NotServicePort(service_ports(service)),
                    );
                }
                if let Some(error) = &port.error {
                    findings.check(
                        || format!("ingress[{i}].ports[{j}].error"),
                        error,
                        error_reason(error),
                    );
                }
            }
        }
        findings.done()
    }

    fn ingress_ip(
        &self,
        text: &str,
        holder: &impl Fn(IpAddr) -> Option<String>,
    ) -> Result<(), Reason> {
        let ip = unicast_ip(text)?;
        if let Some(range) = self.service_cidrs.as_ref().and_then(|c| c.holding(ip)) {
            return Err(Reason::ServiceRange(range.to_string()));
        }
        if let Some(range) = self.cluster_cidrs.as_ref().and_then(|c| c.holding(ip)) {
            return Err(Reason::PodNetwork(range.to_string()));
        }
        if let Some(holder) = holder(ip) {
            return Err(Reason::Taken(holder));
        }
        match &self.load_balancer_ranges {
            Some(ranges) if !ranges.contains(ip) => Err(Reason::OutsideRanges(ranges.to_string())),
            _ => Ok(()),
        }
    }
}

fn service_ports(service: &Service) -> String {
    let all: Vec<String> = service
        .ports
        .iter()
        .map(|p| format!("{}/{:?}", p.port, p.protocol))
        .collect();
    if all.is_empty() {
        "none".into()
    } else {
        all.join(", ")
    }
}

/// Check what `instance-metadata` answered for `node`, whose provider is named
/// `provider_name` (its `init` answer, and `--cloud-provider`).
pub fn check_instance_metadata(
    answer: &InstanceMetadata,
    provider_name: &str,
    node: &Node,
) -> Result<(), Refusals> {
    let mut findings = Findings::default();
    if !answer.provider_id.is_empty() {
        let existing = node.provider_id.as_deref().filter(|id| !id.is_empty());
        let result = match existing {
            Some(existing) if existing != answer.provider_id => {
                Err(Reason::ProviderIdChanged(existing.to_string()))
            }
            _ => provider_id(&answer.provider_id, provider_name),
        };
        findings.check(|| "providerID".into(), &answer.provider_id, result);
    }
    for (field, value) in [
        ("instanceType", &answer.instance_type),
        ("zone", &answer.zone),
        ("region", &answer.region),
    ] {
        if !value.is_empty() {
            findings.check(|| field.into(), value, label_value(value));
        }
    }
    for (i, address) in answer.node_addresses.iter().enumerate() {
        let result = match address.kind {
            AddressKind::InternalIP | AddressKind::ExternalIP => {
                unicast_ip(&address.address).map(|_| ())
            }
            AddressKind::Hostname | AddressKind::InternalDNS | AddressKind::ExternalDNS => {
                host_name(&address.address)
            }
        };
        findings.check(
            || format!("nodeAddresses[{i}].address ({:?})", address.kind),
            &address.address,
            result,
        );
    }
    for (i, (key, value)) in answer.additional_labels.iter().enumerate() {
        findings.check(
            || format!("additionalLabels[{i}].key"),
            key,
            additional_label_key(key, value, answer),
        );
        findings.check(
            || format!("additionalLabels[{i}].value"),
            value,
            label_value(value),
        );
    }
    findings.done()
}

/// `text` as an IP address a load balancer or node may have.
fn unicast_ip(text: &str) -> Result<IpAddr, Reason> {
    let ip: IpAddr = text.parse().map_err(|_| Reason::NotAnIp)?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(Reason::Ipv4Mapped);
    }
    match special_use(ip) {
        Some(use_) => Err(Reason::SpecialUse(use_)),
        None => Ok(ip),
    }
}

/// An RFC 1123 DNS subdomain, as the API server validates names, that is not an IP address
/// and not the local machine.
fn host_name(text: &str) -> Result<(), Reason> {
    dns_subdomain(text).map_err(Reason::NotDnsName)?;
    // A name whose last label is all digits is an IPv4 address in some form (`10.96.0.1`,
    // `010.0.0.1`, `2130706433`): resolvers and clients take it as one, and no top-level
    // domain is numeric.
    let last = text.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::IpAsName);
    }
    if text == "localhost" || text.ends_with(".localhost") {
        return Err(Reason::Localhost);
    }
    Ok(())
}

fn dns_subdomain(text: &str) -> Result<(), &'static str> {
    if text.is_empty() {
        return Err("empty");
    }
    if text.len() > 253 {
        return Err("longer than 253 bytes");
    }
    for label in text.split('.') {
        if label.is_empty() {
            return Err("an empty label");
        }
        if label.len() > 63 {
            return Err("a label longer than 63 bytes");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err("a character other than a-z, 0-9, '-' and '.'");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label starting or ending with '-'");
        }
    }
    Ok(())
}

/// `<provider name>://<id>`, the id without whitespace or control characters.
fn provider_id(text: &str, provider_name: &str) -> Result<(), Reason> {
    let Some(id) = text
        .strip_prefix(provider_name)
        .and_then(|rest| rest.strip_prefix("://"))
    else {
        return Err(Reason::ProviderId(format!(
            "it must start with {provider_name}://"
        )));
    };
    if id.is_empty() {
        return Err(Reason::ProviderId(format!(
            "nothing follows {provider_name}://"
        )));
    }
    if text.len() > MAX_PROVIDER_ID {
        return Err(Reason::ProviderId(format!(
            "longer than {MAX_PROVIDER_ID} bytes"
        )));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Reason::ProviderId(
            "it holds whitespace or control characters".into(),
        ));
    }
    Ok(())
}

/// A label name or value body: letters, digits, `-`, `_`, `.`, alphanumeric at both ends.
fn label_name(text: &str) -> Result<(), &'static str> {
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("a character other than letters, digits, '-', '_' and '.'");
    }
    let alphanumeric = |b: Option<u8>| b.is_none_or(|b| b.is_ascii_alphanumeric());
    if !alphanumeric(text.bytes().next()) || !alphanumeric(text.bytes().last()) {
        return Err("it starts or ends with other than a letter or digit");
    }
    Ok(())
}

fn label_value(text: &str) -> Result<(), Reason> {
    if text.len() > 63 {
        return Err(Reason::LabelValue("longer than 63 bytes"));
    }
    label_name(text).map_err(Reason::LabelValue)
}

fn label_key(key: &str) -> Result<(), Reason> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        dns_subdomain(prefix).map_err(|_| Reason::LabelKey("the prefix is not a DNS subdomain"))?;
    }
    if name.is_empty() {
        return Err(Reason::LabelKey("the name is empty"));
    }
    if name.len() > 63 {
        return Err(Reason::LabelKey("the name is longer than 63 bytes"));
    }
    label_name(name).map_err(Reason::LabelKey)
}

/// A key of `additionalLabels`: valid, and outside the reserved namespaces unless it is a
/// label the host sets from the answer's own fields, with the same value.
fn additional_label_key(key: &str, value: &str, answer: &InstanceMetadata) -> Result<(), Reason> {
    label_key(key)?;
    let Some((prefix, _)) = key.split_once('/') else {
        return Ok(());
    };
    let Some(namespace) = ["kubernetes.io", "k8s.io"]
        .into_iter()
        .find(|domain| prefix == *domain || prefix.ends_with(&format!(".{domain}")))
    else {
        return Ok(());
    };
    let (field, set) = match key {
        INSTANCE_TYPE_LABEL | INSTANCE_TYPE_BETA_LABEL => ("instanceType", &answer.instance_type),
        ZONE_LABEL | ZONE_BETA_LABEL => ("zone", &answer.zone),
        REGION_LABEL | REGION_BETA_LABEL => ("region", &answer.region),
        _ => return Err(Reason::ReservedLabel(namespace)),
    };
    if set.is_empty() || set != value {
        return Err(Reason::ConflictsWithField {
            field,
            value: set.clone(),
        });
    }
    Ok(())
}

/// A port status error: `CamelCase` or `example.com/CamelCase`, 316 bytes at most, as the
/// API server validates `status.loadBalancer.ingress[].ports[].error`.
fn error_reason(text: &str) -> Result<(), Reason> {
    if text.len() > 316 {
        return Err(Reason::NotErrorReason);
    }
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    if prefix.is_some_and(|p| dns_subdomain(p).is_err())
        || name.is_empty()
        || label_name(name).is_err()
    {
        return Err(Reason::NotErrorReason);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{IpMode, LbIngress, NodeAddress, PortStatus, Protocol, ServicePort};

    fn web() -> Service {
        Service {
            name: "web".into(),
            ports: vec![ServicePort {
                port: 80,
                ..ServicePort::default()
            }],
            ..Service::default()
        }
    }

    fn ip(ip: &str) -> LbIngress {
        LbIngress {
            ip: Some(ip.into()),
            ..LbIngress::default()
        }
    }

    fn hostname(name: &str) -> LbIngress {
        LbIngress {
            hostname: Some(name.into()),
            ..LbIngress::default()
        }
    }

    fn policy() -> AnswerPolicy {
        AnswerPolicy {
            service_cidrs: Some("10.96.0.0/12,fd00:10:96::/112".parse().unwrap()),
            cluster_cidrs: Some("10.244.0.0/16".parse().unwrap()),
            load_balancer_ranges: None,
        }
    }

    /// The refusals of `ingress` under `policy`, node `n1` holding 10.0.0.5.
    fn lb_refusals(policy: &AnswerPolicy, ingress: Vec<LbIngress>) -> Vec<Refusal> {
        let holder = |ip: IpAddr| {
            (ip == "10.0.0.5".parse::<IpAddr>().unwrap()).then(|| "an address of node n1".into())
        };
        match policy.check_load_balancer_status(&LbStatus { ingress }, &web(), holder) {
            Ok(()) => Vec::new(),
            Err(refusals) => refusals.listed().to_vec(),
        }
    }

    fn lb_reason(policy: &AnswerPolicy, ingress: LbIngress) -> Option<Reason> {
        let refusals = lb_refusals(policy, vec![ingress]);
        assert!(refusals.len() <= 1, "{refusals:?}");
        refusals.into_iter().next().map(|r| r.reason)
    }

    #[test]
    fn public_and_private_ingress_ips_and_dns_names_pass() {
        for answer in [
            ip("198.51.100.7"),
            ip("10.0.0.99"),
            ip("192.168.1.10"),
            ip("2001:db8::7"),
            ip("fd00:1::7"),
            hostname("a1b2.elb.us-east-1.amazonaws.com"),
        ] {
            assert_eq!(lb_reason(&policy(), answer.clone()), None, "{answer:?}");
        }
    }

    #[test]
    fn special_use_ingress_ips_are_refused() {
        use SpecialUse::*;
        for (answer, use_) in [
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", ThisNetwork),
            ("127.0.0.1", Loopback),
            ("127.8.9.10", Loopback),
            ("169.254.169.254", LinkLocal),
            ("224.0.0.1", Multicast),
            ("255.255.255.255", Broadcast),
            ("::", Unspecified),
            ("::1", Loopback),
            ("fe80::1", LinkLocal),
            ("ff02::1", Multicast),
        ] {
            assert_eq!(
                lb_reason(&policy(), ip(answer)),
                Some(Reason::SpecialUse(use_)),
                "{answer}"
            );
        }
    }

    #[test]
    fn an_ingress_ip_that_is_not_an_address_or_is_mapped_ipv4_is_refused() {
        assert_eq!(lb_reason(&policy(), ip("10.0.0")), Some(Reason::NotAnIp));
        assert_eq!(
            lb_reason(&policy(), ip("lb.example.com")),
            Some(Reason::NotAnIp)
        );
        assert_eq!(
            lb_reason(&policy(), ip("::ffff:127.0.0.1")),
            Some(Reason::Ipv4Mapped)
        );
        assert_eq!(
            lb_reason(&policy(), ip("::ffff:198.51.100.7")),
            Some(Reason::Ipv4Mapped)
        );
    }

    #[test]
    fn ingress_ips_inside_the_service_or_pod_ranges_are_refused_naming_the_flag() {
        let refusals = lb_refusals(&policy(), vec![ip("10.96.0.1")]);
        assert_eq!(
            refusals[0].to_string(),
            "ingress[0].ip \"10.96.0.1\": inside the Service cluster IP range 10.96.0.0/12 (--service-cluster-ip-range)"
        );
        assert_eq!(
            lb_reason(&policy(), ip("fd00:10:96::a")),
            Some(Reason::ServiceRange("fd00:10:96::/112".into()))
        );
        assert_eq!(
            lb_reason(&policy(), ip("10.244.3.7")),
            Some(Reason::PodNetwork("10.244.0.0/16".into()))
        );
        let open = AnswerPolicy::default();
        assert_eq!(lb_reason(&open, ip("10.96.0.1")), None, "no flag, no range");
    }

    #[test]
    fn an_ingress_ip_held_in_the_cluster_is_refused_naming_the_holder() {
        let refusals = lb_refusals(&policy(), vec![ip("10.0.0.5")]);
        assert_eq!(
            refusals[0].to_string(),
            "ingress[0].ip \"10.0.0.5\": already an address of node n1"
        );
    }

    #[test]
    fn operator_ranges_admit_only_their_addresses() {
        let pools = AnswerPolicy {
            load_balancer_ranges: Some("203.0.113.0/24,2001:db8:1::/48".parse().unwrap()),
            ..policy()
        };
        assert_eq!(lb_reason(&pools, ip("203.0.113.9")), None);
        assert_eq!(lb_reason(&pools, ip("2001:db8:1::9")), None);
        assert_eq!(
            lb_reason(&pools, ip("198.51.100.7")),
            Some(Reason::OutsideRanges(
                "203.0.113.0/24,2001:db8:1::/48".into()
            ))
        );
        assert_eq!(
            lb_reason(&pools, ip("127.0.0.1")),
            Some(Reason::SpecialUse(SpecialUse::Loopback)),
            "special-use addresses are refused inside any range"
        );
        assert_eq!(lb_reason(&pools, hostname("lb.example.com")), None);
    }

    #[test]
    fn ingress_hostnames_must_be_dns_names() {
        for (name, reason) in [
            ("10.96.0.1", Reason::IpAsName),
            ("010.0.0.1", Reason::IpAsName),
            ("2130706433", Reason::IpAsName),
            ("localhost", Reason::Localhost),
            ("api.localhost", Reason::Localhost),
            (
                "LB.example.com",
                Reason::NotDnsName("a character other than a-z, 0-9, '-' and '.'"),
            ),
            (
                "::1",
                Reason::NotDnsName("a character other than a-z, 0-9, '-' and '.'"),
            ),
            ("lb..example.com", Reason::NotDnsName("an empty label")),
            (
                "-lb.example.com",
                Reason::NotDnsName("a label starting or ending with '-'"),
            ),
            ("", Reason::NotDnsName("empty")),
        ] {
            assert_eq!(
                lb_reason(&policy(), hostname(name)),
                Some(reason),
                "{name:?}"
            );
        }
        let long = format!("{}.example.com", "a".repeat(64));
        assert_eq!(
            lb_reason(&policy(), hostname(&long)),
            Some(Reason::NotDnsName("a label longer than 63 bytes"))
        );
        let too_long = vec!["a".repeat(60); 5].join(".");
        assert_eq!(
            lb_reason(&policy(), hostname(&too_long)),
            Some(Reason::NotDnsName("longer than 253 bytes"))
        );
    }

    #[test]
    fn ingress_points_need_an_address_and_ip_mode_needs_an_ip() {
        assert_eq!(
            lb_reason(&policy(), LbIngress::default()),
            Some(Reason::NoAddress)
        );
        let proxied_name = LbIngress {
            ip_mode: Some(IpMode::Proxy),
            ..hostname("lb.example.com")
        };
        assert_eq!(
            lb_reason(&policy(), proxied_name),
            Some(Reason::IpModeWithoutIp)
        );
        let proxied_ip = LbIngress {
            ip_mode: Some(IpMode::Proxy),
            ..ip("198.51.100.7")
        };
        assert_eq!(lb_reason(&policy(), proxied_ip), None);
    }

    #[test]
    fn port_statuses_name_the_services_ports_and_reasons() {
        let with_ports = |ports: Vec<PortStatus>| LbIngress {
            ports,
            ..ip("198.51.100.7")
        };
        let port = |port: i32, protocol: Protocol, error: Option<&str>| PortStatus {
            port,
            protocol,
            error: error.map(String::from),
        };
        assert_eq!(
            lb_reason(
                &policy(),
                with_ports(vec![port(80, Protocol::Tcp, Some("example.com/PortBusy"))])
            ),
            None
        );
        assert_eq!(
            lb_reason(&policy(), with_ports(vec![port(80, Protocol::Udp, None)])),
            Some(Reason::NotServicePort("80/Tcp".into()))
        );
        assert_eq!(
            lb_reason(&policy(), with_ports(vec![port(6443, Protocol::Tcp, None)])),
            Some(Reason::NotServicePort("80/Tcp".into()))
        );
        for bad in ["port busy", "Busy/", "Ünicode", "A".repeat(317).as_str()] {
            assert_eq!(
                lb_reason(
                    &policy(),
                    with_ports(vec![port(80, Protocol::Tcp, Some(bad))])
                ),
                Some(Reason::NotErrorReason),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_refused_field_is_listed_with_its_index() {
        let refusals = lb_refusals(
            &policy(),
            vec![ip("198.51.100.7"), ip("127.0.0.1"), hostname("10.0.0.1")],
        );
        let fields: Vec<&str> = refusals.iter().map(|r| r.field.as_str()).collect();
        assert_eq!(fields, ["ingress[1].ip", "ingress[2].hostname"]);
    }

    #[test]
    fn a_flood_of_refusals_is_listed_up_to_a_bound_and_counted() {
        let flood = vec![ip("127.0.0.1"); 1000];
        let refused = policy()
            .check_load_balancer_status(&LbStatus { ingress: flood }, &web(), |_| None)
            .unwrap_err();
        assert_eq!(refused.listed().len(), MAX_LISTED);
        assert_eq!(refused.total(), 1000);
        assert!(
            refused
                .to_string()
                .ends_with("; and 984 more refused fields"),
            "{refused}"
        );
        let long = lb_refusals(&policy(), vec![hostname(&"x".repeat(500))]).remove(0);
        assert_eq!(long.value.len(), MAX_QUOTED);
        assert!(long.value.ends_with("..."));
        let forged = lb_refusals(&policy(), vec![hostname("lb\nWARN forged")]).remove(0);
        assert_eq!(
            forged.to_string().lines().count(),
            1,
            "values are quoted escaped: {forged}"
        );
    }

    fn metadata() -> InstanceMetadata {
        InstanceMetadata {
            provider_id: "simcloud://i-1".into(),
            instance_type: "sim.small".into(),
            node_addresses: vec![
                NodeAddress {
                    kind: AddressKind::InternalIP,
                    address: "10.0.0.5".into(),
                },
                NodeAddress {
                    kind: AddressKind::ExternalIP,
                    address: "2001:db8::5".into(),
                },
                NodeAddress {
                    kind: AddressKind::Hostname,
                    address: "n1.sim.internal".into(),
                },
            ],
            zone: "sim-central-1a".into(),
            region: "sim-central-1".into(),
            additional_labels: vec![("simcloud.example/rack".into(), "r7".into())],
        }
    }

    fn node(provider_id: Option<&str>) -> Node {
        Node {
            name: "n1".into(),
            provider_id: provider_id.map(String::from),
            ..Node::default()
        }
    }

    fn metadata_refusals(answer: &InstanceMetadata, node: &Node) -> Vec<(String, Reason)> {
        match check_instance_metadata(answer, "simcloud", node) {
            Ok(()) => Vec::new(),
            Err(refusals) => refusals
                .listed()
                .iter()
                .map(|r| (r.field.clone(), r.reason.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_valid_instance_metadata_answer_passes() {
        assert_eq!(
            check_instance_metadata(&metadata(), "simcloud", &node(None)),
            Ok(())
        );
        let initialised = node(Some("simcloud://i-1"));
        assert_eq!(
            check_instance_metadata(&metadata(), "simcloud", &initialised),
            Ok(())
        );
        let empty = InstanceMetadata::default();
        assert_eq!(
            check_instance_metadata(&empty, "simcloud", &node(None)),
            Ok(())
        );
    }

    #[test]
    fn provider_ids_carry_the_providers_name_and_never_change() {
        let with_id = |id: &str| InstanceMetadata {
            provider_id: id.into(),
            ..metadata()
        };
        for id in [
            "aws:///us-east-1a/i-1",
            "simcloud:/i-1",
            "simcloudx://i-1",
            "simcloud://",
        ] {
            let refusals = metadata_refusals(&with_id(id), &node(None));
            assert_eq!(refusals.len(), 1, "{id}: {refusals:?}");
            assert_eq!(refusals[0].0, "providerID");
            assert!(matches!(refusals[0].1, Reason::ProviderId(_)), "{id}");
        }
        let spaced = metadata_refusals(&with_id("simcloud://i-1\nforged"), &node(None));
        assert!(matches!(spaced[0].1, Reason::ProviderId(_)));
        let long = format!("simcloud://{}", "i".repeat(MAX_PROVIDER_ID));
        assert!(matches!(
            metadata_refusals(&with_id(&long), &node(None))[0].1,
            Reason::ProviderId(_)
        ));
        assert_eq!(
            metadata_refusals(&with_id("simcloud://i-2"), &node(Some("simcloud://i-1"))),
            [(
                "providerID".to_string(),
                Reason::ProviderIdChanged("simcloud://i-1".into())
            )]
        );
        let aws = InstanceMetadata {
            provider_id: "aws:///us-east-1a/i-0abc".into(),
            ..metadata()
        };
        assert_eq!(
            check_instance_metadata(&aws, "aws", &node(None)),
            Ok(()),
            "AWS's empty host part"
        );
    }

    #[test]
    fn node_addresses_must_be_usable_ips_and_dns_names() {
        let with_address = |kind: AddressKind, address: &str| InstanceMetadata {
            node_addresses: vec![NodeAddress {
                kind,
                address: address.into(),
            }],
            ..metadata()
        };
        use AddressKind::*;
        for (kind, address, reason) in [
            (
                InternalIP,
                "127.0.0.1",
                Reason::SpecialUse(SpecialUse::Loopback),
            ),
            (
                InternalIP,
                "0.0.0.0",
                Reason::SpecialUse(SpecialUse::Unspecified),
            ),
            (
                ExternalIP,
                "169.254.169.254",
                Reason::SpecialUse(SpecialUse::LinkLocal),
            ),
            (
                ExternalIP,
                "fe80::1",
                Reason::SpecialUse(SpecialUse::LinkLocal),
            ),
            (InternalIP, "::1", Reason::SpecialUse(SpecialUse::Loopback)),
            (InternalIP, "n1.internal", Reason::NotAnIp),
            (InternalIP, "::ffff:10.0.0.5", Reason::Ipv4Mapped),
            (Hostname, "127.0.0.1", Reason::IpAsName),
            (Hostname, "localhost", Reason::Localhost),
            (
                InternalDNS,
                "N1.internal",
                Reason::NotDnsName("a character other than a-z, 0-9, '-' and '.'"),
            ),
            (ExternalDNS, "", Reason::NotDnsName("empty")),
        ] {
            assert_eq!(
                metadata_refusals(&with_address(kind, address), &node(None)),
                [(format!("nodeAddresses[0].address ({kind:?})"), reason)],
                "{kind:?} {address}"
            );
        }
    }

    #[test]
    fn topology_and_instance_type_values_must_be_label_values() {
        let answer = InstanceMetadata {
            zone: "zone a".into(),
            region: "r".repeat(64),
            instance_type: "-large".into(),
            ..metadata()
        };
        let fields: Vec<String> = metadata_refusals(&answer, &node(None))
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        assert_eq!(fields, ["instanceType", "zone", "region"]);
    }

    #[test]
    fn additional_labels_must_be_valid_and_outside_the_reserved_namespaces() {
        let with_label = |key: &str, value: &str| InstanceMetadata {
            additional_labels: vec![(key.into(), value.into())],
            ..metadata()
        };
        for (key, value) in [
            ("rack", "r7"),
            ("simcloud.example/rack", ""),
            ("topology.k8s.aws/zone-id", "use1-az1"),
            (ZONE_LABEL, "sim-central-1a"),
            (INSTANCE_TYPE_BETA_LABEL, "sim.small"),
        ] {
            let refusals = metadata_refusals(&with_label(key, value), &node(None));
            assert!(refusals.is_empty(), "{key}={value}: {refusals:?}");
        }
        for (key, reason) in [
            (
                "node.kubernetes.io/exclude-from-external-load-balancers",
                Reason::ReservedLabel("kubernetes.io"),
            ),
            (
                "kubernetes.io/hostname",
                Reason::ReservedLabel("kubernetes.io"),
            ),
            (
                "node-role.kubernetes.io/control-plane",
                Reason::ReservedLabel("kubernetes.io"),
            ),
            ("k8s.io/x", Reason::ReservedLabel("k8s.io")),
            ("sub.k8s.io/x", Reason::ReservedLabel("k8s.io")),
            (
                "bad key",
                Reason::LabelKey("a character other than letters, digits, '-', '_' and '.'"),
            ),
            (
                "Example.com/x",
                Reason::LabelKey("the prefix is not a DNS subdomain"),
            ),
            ("example.com/", Reason::LabelKey("the name is empty")),
            (
                "a/b/c",
                Reason::LabelKey("a character other than letters, digits, '-', '_' and '.'"),
            ),
        ] {
            assert_eq!(
                metadata_refusals(&with_label(key, "v"), &node(None)),
                [("additionalLabels[0].key".to_string(), reason)],
                "{key}"
            );
        }
        assert_eq!(
            metadata_refusals(&with_label(ZONE_LABEL, "elsewhere"), &node(None)),
            [(
                "additionalLabels[0].key".to_string(),
                Reason::ConflictsWithField {
                    field: "zone",
                    value: "sim-central-1a".into()
                }
            )]
        );
        assert_eq!(
            metadata_refusals(&with_label("rack", "{\"json\": 1}"), &node(None)),
            [(
                "additionalLabels[0].value".to_string(),
                Reason::LabelValue("a character other than letters, digits, '-', '_' and '.'")
            )]
        );
    }
}

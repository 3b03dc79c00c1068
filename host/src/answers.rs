//! The host's checks of what a provider answers, before any of it reaches the Kubernetes
//! API. A provider is untrusted code and its cloud's answer untrusted input: an ingress IP
//! equal to the API server's cluster IP, a node, loopback or the metadata service makes
//! kube-proxy send that traffic to a Service's endpoints (the CVE-2020-8554 class); a node
//! address of `127.0.0.1` points the API server's kubelet connections at itself; a label in
//! the `kubernetes.io` namespace changes what the scheduler or kubelet believe of a node.
//! So an answer is written only if every field passes, and a refusal lists each field
//! that did not, with its value and why ([`Refusals`]).
//!
//! The checks are pure: the answer, the operator's ranges and names ([`AnswerPolicy`]) and
//! what the cluster already holds ([`ClusterAddresses`]) in, refusals out. The provider
//! facade runs them on every answer before a controller sees it ([`AnswerChecks`]), so a
//! refused answer is a failed call of the version that gave it; the conformance kit and
//! `provider call` meet the same refusals.
//!
//! ```
//! use wasm_ccm_host::answers::{AnswerChecks, AnswerPolicy};
//! use wasm_ccm_host::contract::{LbIngress, LbStatus, Service};
//! let checks = AnswerChecks::standalone(AnswerPolicy {
//!     service_cidrs: Some("10.96.0.0/12".parse().unwrap()),
//!     ..AnswerPolicy::default()
//! });
//! let status = LbStatus {
//!     ingress: vec![LbIngress { ip: Some("10.96.0.1".into()), ..LbIngress::default() }],
//! };
//! let refused = checks
//!     .load_balancer_status(&status, &Service::default())
//!     .unwrap_err();
//! assert!(refused.to_string().contains("ingress[0].ip \"10.96.0.1\""), "{refused}");
//! ```

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bounds::{MAX_CLOUD_NAME, MAX_INGRESS, MAX_LABELS, MAX_NODE_ADDRESSES};
use crate::cidr::{Cidr, CidrList, DualStackCidrs};
use crate::contract::{AddressKind, InstanceMetadata, LbStatus, Node, NodeAddress, Route, Service};
use crate::egress::{carried_v4, metadata_name, platform_service};
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

/// The operator's ranges and names an answer is checked against, from flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerPolicy {
    /// `--service-cluster-ip-range`: no ingress IP or node address inside it.
    pub service_cidrs: Option<DualStackCidrs>,
    /// `--cluster-cidr`: no ingress IP or node address inside the pod network.
    pub cluster_cidrs: Option<DualStackCidrs>,
    /// `--load-balancer-ip-ranges`: ingress IPs only inside these; `None`: any address the
    /// other rules let through.
    pub load_balancer_ranges: Option<CidrList>,
    /// `--node-address-dns-suffixes`: the DNS names a node's `Hostname`, `InternalDNS` and
    /// `ExternalDNS` may have besides the node's own name, as suffixes (`ec2.internal`
    /// admits `ip-10-0-0-5.ec2.internal`). kube-apiserver dials a node by these names for
    /// `exec`, `logs`, `port-forward` and proxies. `None`: any DNS name, for the
    /// conformance kit and `provider call`, which know no operator's list.
    pub node_dns_suffixes: Option<Vec<String>>,
    /// `--load-balancer-ip-sharing`: an ingress IP another Service already holds (as its
    /// ingress, an `externalIPs` entry or its `loadBalancerIP`) is written anyway.
    pub shared_ingress_ips: bool,
}

/// Something in the cluster that holds an IP address, as the manager's caches know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// An address of a node (`status.addresses`).
    Node {
        /// The node's name.
        name: String,
        /// The address's type, e.g. `InternalIP`.
        address_type: String,
    },
    /// An address of a Service.
    Service {
        /// `namespace/name`.
        key: String,
        /// Which of its fields holds it.
        field: ServiceField,
    },
}

/// The field of a Service that holds an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceField {
    /// `spec.clusterIP` or `spec.clusterIPs`.
    ClusterIp,
    /// `status.loadBalancer.ingress[].ip`.
    Ingress,
    /// `spec.externalIPs`.
    ExternalIp,
    /// `spec.loadBalancerIP`.
    LoadBalancerIp,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Node { name, address_type } => {
                write!(f, "the {address_type} of node {name}")
            }
            Holder::Service { key, field } => {
                let field = match field {
                    ServiceField::ClusterIp => "the cluster IP",
                    ServiceField::Ingress => "the load-balancer ingress",
                    ServiceField::ExternalIp => "an external IP",
                    ServiceField::LoadBalancerIp => "the loadBalancerIP",
                };
                write!(f, "{field} of Service {key}")
            }
        }
    }
}

/// An address something in the cluster holds: an IP, or a DNS name (a node's name and its
/// `Hostname`, `InternalDNS` and `ExternalDNS` addresses), as the caches index them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Address {
    /// An IP address.
    Ip(IpAddr),
    /// A DNS name, lowercased and without a trailing dot ([`Address::name`]).
    Name(String),
}

impl Address {
    /// The DNS name `text` as held: names differing only in case or a trailing dot are one.
    pub fn name(text: &str) -> Address {
        Address::Name(text.trim_end_matches('.').to_ascii_lowercase())
    }

    /// The names the DNS name `text` reaches a host by: itself and, under a search domain,
    /// its first label (when it has more than one): `worker-1.example.internal` is
    /// `worker-1`'s.
    pub fn names_reached(text: &str) -> Vec<Address> {
        let name = text.trim_end_matches('.').to_ascii_lowercase();
        let label = name
            .split_once('.')
            .map(|(label, _)| Address::Name(label.to_string()));
        let mut reached = vec![Address::Name(name)];
        reached.extend(label);
        reached
    }

    /// The name, if this is one.
    pub fn as_name(&self) -> Option<&str> {
        match self {
            Address::Name(name) => Some(name),
            Address::Ip(_) => None,
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Ip(ip) => ip.fmt(f),
            Address::Name(name) => f.write_str(name),
        }
    }
}

/// What the cluster holds: the addresses of its nodes and Services, from the manager's
/// caches.
pub trait ClusterAddresses: Send + Sync {
    /// Everything that holds `address`, each holder once.
    fn holders(&self, address: &Address) -> Vec<Holder>;
}

/// The addresses of answers that passed their checks but are not in the caches yet, each
/// held for its object for [`CLAIM_TTL`] (by then the caches show the write): what keeps two
/// answers checked at once (two nodes, two Services) from both taking one address. An
/// object's new answer replaces its claims, so an address it let go is free at once.
#[derive(Debug, Default)]
struct Claims {
    held: std::sync::Mutex<ClaimsHeld>,
}

#[derive(Debug, Default)]
struct ClaimsHeld {
    /// Address → its claims.
    by_address: std::collections::HashMap<Address, Vec<(Holder, Instant)>>,
    /// Claimant (`node NAME`, `service KEY`) → the addresses it claims.
    by_claimant: std::collections::HashMap<String, Vec<Address>>,
    /// When expired claims were last swept: at most once a [`CLAIM_TTL`], so a cluster of
    /// many nodes claiming at once does not sweep the whole map on every claim.
    swept: Option<Instant>,
}

/// How long an answer's claim on an address lasts: the caches show a write within seconds.
pub const CLAIM_TTL: Duration = Duration::from_secs(60);

/// Claimed addresses past which expired claims are swept from the whole map (once a
/// [`CLAIM_TTL`] at most: the map holds at most the claims of two TTLs).
const CLAIMS_SWEPT_PAST: usize = 4096;

impl Claims {
    /// Claim `addresses`, each for its holder (all of one claimant), in place of the
    /// claimant's earlier claims, unless another live claim `conflicts`: refused, claiming
    /// nothing, with the address and the claim in the way.
    fn claim(
        &self,
        claimant: String,
        addresses: &[(Address, Holder)],
        conflicts: &dyn Fn(&Address, &Holder) -> bool,
    ) -> Result<(), (Address, Holder)> {
        let now = Instant::now();
        let live = |at: &Instant| now.saturating_duration_since(*at) < CLAIM_TTL;
        let mut guard = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let held = &mut *guard;
        let due = held
            .swept
            .is_none_or(|swept| now.saturating_duration_since(swept) >= CLAIM_TTL);
        if held.by_address.len() > CLAIMS_SWEPT_PAST && due {
            held.swept = Some(now);
            held.by_address.retain(|_, claims| {
                claims.retain(|(_, at)| live(at));
                !claims.is_empty()
            });
            let by_address = &held.by_address;
            held.by_claimant.retain(|_, claimed| {
                claimed.retain(|address| by_address.contains_key(address));
                !claimed.is_empty()
            });
        }
        for address in held.by_claimant.remove(&claimant).unwrap_or_default() {
            if let Some(claims) = held.by_address.get_mut(&address) {
                claims.retain(|(holder, _)| holder.claimant() != claimant);
            }
        }
        for (address, _) in addresses {
            let claims = held
                .by_address
                .get(address)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if let Some((holder, _)) = claims
                .iter()
                .find(|(holder, at)| live(at) && conflicts(address, holder))
            {
                return Err((address.clone(), holder.clone()));
            }
        }
        for (address, holder) in addresses {
            held.by_address
                .entry(address.clone())
                .or_default()
                .push((holder.clone(), now));
        }
        if !addresses.is_empty() {
            let claimed = addresses.iter().map(|(address, _)| address.clone());
            held.by_claimant.insert(claimant, claimed.collect());
        }
        Ok(())
    }
}

impl Holder {
    /// Who holds, whatever the field or address type: `node NAME`, `service KEY`.
    fn claimant(&self) -> String {
        match self {
            Holder::Node { name, .. } => format!("node {name}"),
            Holder::Service { key, .. } => format!("service {key}"),
        }
    }
}

/// No cluster: for `provider call` and the conformance kit, which check answers against
/// the operator's ranges only.
struct NoCluster;

impl ClusterAddresses for NoCluster {
    fn holders(&self, _address: &Address) -> Vec<Holder> {
        Vec::new()
    }
}

/// Who an answer's addresses are for.
enum Asker<'a> {
    /// The node named so.
    Node(&'a str),
    /// The Service: its `namespace/name` and the ingress IPs it holds already.
    Service { key: String, holds: &'a Service },
}

impl Asker<'_> {
    /// Who claims a passing answer's addresses: `node NAME`, `service KEY`.
    fn claimant(&self) -> String {
        self.holder(None).claimant()
    }

    /// How a passing answer's address is held by the asker.
    fn holder(&self, kind: Option<AddressKind>) -> Holder {
        match self {
            Asker::Node(name) => Holder::Node {
                name: name.to_string(),
                address_type: kind.map_or("address".into(), |kind| format!("{kind:?}")),
            },
            Asker::Service { key, .. } => Holder::Service {
                key: key.clone(),
                field: ServiceField::Ingress,
            },
        }
    }
}

/// The checks the provider facade runs on every answer: the operator's policy and the
/// cluster's addresses.
#[derive(Clone)]
pub struct AnswerChecks {
    /// The operator's ranges and names.
    pub policy: AnswerPolicy,
    cluster: Arc<dyn ClusterAddresses>,
    enforced: bool,
    /// The addresses answers that passed claim; `None` for answers nothing writes (a
    /// shadow's), which claim nothing. Shared by every clone.
    claims: Option<Arc<Claims>>,
}

impl Default for AnswerChecks {
    fn default() -> Self {
        AnswerChecks::standalone(AnswerPolicy::default())
    }
}

impl std::fmt::Debug for AnswerChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerChecks")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// Every field of one answer that the host refuses to write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct Refusals {
    listed: Vec<Refusal>,
    total: usize,
    answer_faults: usize,
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

    /// Whether the answer itself is at fault: some field is refused for what it is, not
    /// only because of what the cluster holds now (an address taken, a port the Service
    /// no longer has), which a Service's owner can bring about to fail a provider version.
    pub fn blame_the_answer(&self) -> bool {
        self.answer_faults > 0
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
        /// Its value in the answer, cut to 128 bytes.
        value: String,
    },
    /// A cloud metadata or platform address, or an IPv6 address carrying one or a
    /// special-use IPv4 address (NAT64, 6to4, Teredo, ISATAP), as the egress gate lists them.
    #[error("{0}")]
    Platform(String),
    /// An IPv6 address carrying an IPv4 address that is refused.
    #[error("{carried}, which is refused: {reason}")]
    Carries {
        /// How, and which IPv4 address, e.g. `a NAT64 (64:ff9b::/96) address carrying 10.96.0.1`.
        carried: String,
        /// Why the IPv4 address is refused.
        reason: Box<Reason>,
    },
    /// A name that only ever names a cloud metadata service.
    #[error("the name of a cloud metadata service ({0})")]
    MetadataName(&'static str),
    /// A node's DNS name the operator has not allowed.
    #[error(
        "neither the node's name nor under a suffix of --node-address-dns-suffixes ({0}); kube-apiserver would dial it for exec, logs and port-forward"
    )]
    NodeDnsName(String),
    /// A DNS name whose first label spells an IPv4 address (`ip-10-96-0-1`) that is none of
    /// the answer's own IPs: a cloud's resolver answers it with that address.
    #[error(
        "it spells the address {0}, which is none of this answer's IPs (a cloud's resolver answers such a name with it)"
    )]
    SpellsAnotherIp(String),
    /// More entries than the host accepts in one answer.
    #[error("{count} entries, more than the {max} the host accepts")]
    TooMany {
        /// How many the answer has.
        count: usize,
        /// The bound ([`crate::bounds`]).
        max: usize,
    },
    /// More port statuses than the Service has ports (which its owner may have just
    /// removed).
    #[error("{count} port statuses, more than the Service's {ports} ports")]
    TooManyPorts {
        /// How many the answer has.
        count: usize,
        /// How many the Service has.
        ports: usize,
    },
    /// An entry that an earlier one of the same list already names.
    #[error("listed twice")]
    Duplicate,
    /// A cloud-side name (a load balancer's, a route's) that is empty, too long, or holds
    /// whitespace or control characters.
    #[error(
        "not a cloud name: 1 to 255 bytes, no whitespace, control or invisible formatting characters"
    )]
    NotCloudName,
    /// Not a CIDR.
    #[error("not a CIDR")]
    NotCidr,
    /// Not a provider name (the scheme of its provider IDs and a metric label).
    #[error(
        "not a provider name: 1 to 63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
    )]
    NotProviderName,
}

impl Reason {
    /// Whether the refusal follows from the cluster's state rather than the answer alone.
    fn depends_on_the_cluster(&self) -> bool {
        match self {
            Reason::Taken(_) | Reason::NotServicePort(_) | Reason::ProviderIdChanged(_) => true,
            Reason::TooManyPorts { .. } => true,
            Reason::Carries { reason, .. } => reason.depends_on_the_cluster(),
            _ => false,
        }
    }
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
    answer_faults: usize,
}

impl Findings {
    fn refuse(&mut self, field: impl Into<String>, value: &str, reason: Reason) {
        self.total += 1;
        if !reason.depends_on_the_cluster() {
            self.answer_faults += 1;
        }
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
                answer_faults: self.answer_faults,
            })
        }
    }
}

impl AnswerChecks {
    /// Checks against `policy` and what `cluster` holds.
    pub fn new(policy: AnswerPolicy, cluster: Arc<dyn ClusterAddresses>) -> AnswerChecks {
        AnswerChecks {
            policy,
            cluster,
            enforced: true,
            claims: Some(Arc::default()),
        }
    }

    /// The same checks, claiming nothing: for answers nothing writes (a shadow's, a
    /// `get-load-balancer` read for existence), which must not hold addresses others need.
    pub fn without_claims(&self) -> AnswerChecks {
        AnswerChecks {
            claims: None,
            ..self.clone()
        }
    }

    /// The default checks, not enforced by the facade: a provider's answers are returned as
    /// it gave them, for `provider call` and the conformance kit, which report what these
    /// checks refuse themselves (and tests that read a test provider's reports).
    pub fn unenforced() -> AnswerChecks {
        AnswerChecks {
            enforced: false,
            ..AnswerChecks::default()
        }
    }

    /// Whether the facade refuses the answers these checks refuse.
    pub fn enforced(&self) -> bool {
        self.enforced
    }

    /// Checks against `policy` alone, with no cluster to consult.
    pub fn standalone(policy: AnswerPolicy) -> AnswerChecks {
        AnswerChecks::new(policy, Arc::new(NoCluster))
    }

    /// Check a load-balancer status answered for `service` (`ensure-load-balancer`,
    /// `get-load-balancer`).
    pub fn load_balancer_status(
        &self,
        status: &LbStatus,
        service: &Service,
    ) -> Result<(), Refusals> {
        let mut findings = Findings::default();
        if status.ingress.len() > MAX_INGRESS {
            findings.refuse(
                "ingress",
                &format!("{} entries", status.ingress.len()),
                Reason::TooMany {
                    count: status.ingress.len(),
                    max: MAX_INGRESS,
                },
            );
            return findings.done();
        }
        let asker = Asker::Service {
            key: format!("{}/{}", service.namespace, service.name),
            holds: service,
        };
        let mut passed = Vec::new();
        for (i, ingress) in status.ingress.iter().enumerate() {
            if ingress.ip.is_none() && ingress.hostname.is_none() {
                findings.refuse(format!("ingress[{i}]"), "", Reason::NoAddress);
            }
            if let Some(ip) = &ingress.ip {
                let result = self.ingress_ip(ip, &asker);
                if let Ok(ip) = result {
                    passed.push((format!("ingress[{i}].ip"), Address::Ip(ip), None));
                }
                findings.check(|| format!("ingress[{i}].ip"), ip, result.map(|_| ()));
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
                    public_name(hostname),
                );
            }
            if ingress.ports.len() > service.ports.len() {
                let count = ingress.ports.len();
                findings.refuse(
                    format!("ingress[{i}].ports"),
                    &format!("{count} entries"),
                    Reason::TooManyPorts {
                        count,
                        ports: service.ports.len(),
                    },
                );
                continue;
            }
            let mut seen = HashSet::new();
            for (j, port) in ingress.ports.iter().enumerate() {
                let field = || format!("ingress[{i}].ports[{j}]");
                let value = || format!("{}/{:?}", port.port, port.protocol);
                let known = service
                    .ports
                    .iter()
                    .any(|p| p.port == port.port && p.protocol == port.protocol);
                if !known {
                    findings.refuse(
                        field(),
                        &value(),
                        Reason::NotServicePort(service_ports(service)),
                    );
                } else if !seen.insert((port.port, port.protocol)) {
                    findings.refuse(field(), &value(), Reason::Duplicate);
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
        self.claimed(findings, &asker, passed)
    }

    /// `findings` done, and if nothing was refused, the `passed` addresses claimed for
    /// `asker`; an address another answer claimed first is refused after all.
    fn claimed(
        &self,
        mut findings: Findings,
        asker: &Asker,
        passed: Vec<(String, Address, Option<AddressKind>)>,
    ) -> Result<(), Refusals> {
        let Some(claims) = self.claims.as_ref().filter(|_| findings.total == 0) else {
            return findings.done();
        };
        let addresses: Vec<(Address, Holder)> = passed
            .iter()
            .map(|(_, address, kind)| (address.clone(), asker.holder(*kind)))
            .collect();
        let conflicts = |address: &Address, holder: &Holder| self.blocks(holder, asker, address);
        if let Err((address, holder)) = claims.claim(asker.claimant(), &addresses, &conflicts) {
            let field = passed
                .iter()
                .find(|(_, passed, _)| *passed == address)
                .map_or_else(String::new, |(field, _, _)| field.clone());
            let reason = Reason::Taken(format!("{holder} (answered, not yet written)"));
            findings.refuse(field, &address.to_string(), reason);
        }
        findings.done()
    }

    /// Whether `holder` of `ip` keeps `asker` from holding it too: another node's address,
    /// a cluster IP, and for a Service another's ingress, external IP or `loadBalancerIP`
    /// unless sharing is allowed or the Service holds the address already (it was its
    /// first). A node's address is not vetoed by what a Service's owner writes in its spec
    /// (`externalIPs`, `loadBalancerIP`): anyone who may create a Service could block nodes.
    fn blocks(&self, holder: &Holder, asker: &Asker, address: &Address) -> bool {
        match (asker, holder) {
            (Asker::Node(node), Holder::Node { name, .. }) => name != node,
            (Asker::Node(_), Holder::Service { field, .. }) => {
                matches!(field, ServiceField::ClusterIp | ServiceField::Ingress)
            }
            (Asker::Service { .. }, Holder::Node { .. }) => true,
            (
                _,
                Holder::Service {
                    field: ServiceField::ClusterIp,
                    ..
                },
            ) => true,
            (Asker::Service { key, .. }, Holder::Service { key: other, .. }) if key == other => {
                false
            }
            (Asker::Service { holds, .. }, Holder::Service { .. }) => {
                let held = holds
                    .status
                    .ingress
                    .iter()
                    .filter_map(|point| point.ip.as_deref()?.parse().ok())
                    .any(|ip| Address::Ip(ip) == *address);
                !self.policy.shared_ingress_ips && !held
            }
        }
    }

    /// What in the cluster keeps `asker` from holding `address`, if anything.
    fn unheld(&self, address: &Address, asker: &Asker) -> Result<(), Reason> {
        match self
            .cluster
            .holders(address)
            .into_iter()
            .find(|holder| self.blocks(holder, asker, address))
        {
            Some(holder) => Err(Reason::Taken(holder.to_string())),
            None => Ok(()),
        }
    }

    /// `text` as an address `asker` may hold: outside the special-use, platform, Service and
    /// pod ranges and held by nothing that [blocks](Self::blocks) it, and so are the IPv4
    /// addresses an IPv6 address carries (NAT64, 6to4, Teredo, ISATAP).
    fn free_ip(&self, text: &str, asker: &Asker) -> Result<IpAddr, Reason> {
        let ip = self.cluster_free_ip(text)?;
        self.unheld(&Address::Ip(ip), asker)?;
        if let IpAddr::V6(v6) = ip {
            for (carrier, v4) in carried_v4(v6) {
                if let Err(reason) = self.unheld(&Address::Ip(IpAddr::V4(v4)), asker) {
                    return Err(Reason::Carries {
                        carried: format!("{carrier} address carrying {v4}"),
                        reason: Box::new(reason),
                    });
                }
            }
        }
        Ok(ip)
    }

    /// An ingress IP of the Service `asker`.
    fn ingress_ip(&self, text: &str, asker: &Asker) -> Result<IpAddr, Reason> {
        let ip = self.free_ip(text, asker)?;
        match &self.policy.load_balancer_ranges {
            Some(ranges) if !ranges.contains(ip) => Err(Reason::OutsideRanges(ranges.to_string())),
            _ => Ok(ip),
        }
    }

    /// An IP outside the special-use, platform, Service and pod ranges; an IPv6 address
    /// that carries IPv4 addresses (NAT64, 6to4, Teredo, ISATAP) only if they are too.
    fn cluster_free_ip(&self, text: &str) -> Result<IpAddr, Reason> {
        let ip = unicast_ip(text)?;
        if let Some(range) = self
            .policy
            .service_cidrs
            .as_ref()
            .and_then(|c| c.holding(ip))
        {
            return Err(Reason::ServiceRange(range.to_string()));
        }
        if let Some(range) = self
            .policy
            .cluster_cidrs
            .as_ref()
            .and_then(|c| c.holding(ip))
        {
            return Err(Reason::PodNetwork(range.to_string()));
        }
        if let IpAddr::V6(v6) = ip {
            for (carrier, v4) in carried_v4(v6) {
                if let Err(reason) = self.cluster_free_ip(&v4.to_string()) {
                    return Err(Reason::Carries {
                        carried: format!("{carrier} address carrying {v4}"),
                        reason: Box::new(reason),
                    });
                }
            }
        }
        Ok(ip)
    }

    /// Check what `instance-metadata` answered for `node`, whose provider is named
    /// `provider_name` (its `init` answer).
    pub fn instance_metadata(
        &self,
        answer: &InstanceMetadata,
        provider_name: &str,
        node: &Node,
    ) -> Result<(), Refusals> {
        let mut findings = Findings::default();
        let asker = Asker::Node(&node.name);
        let mut passed = Vec::new();
        if !answer.provider_id.is_empty() {
            let existing = node.provider_id.as_deref().filter(|id| !id.is_empty());
            let result = match existing {
                Some(existing) if existing != answer.provider_id => Err(Reason::ProviderIdChanged(
                    ellipsized(existing.to_string(), MAX_QUOTED),
                )),
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
        if answer.node_addresses.len() > MAX_NODE_ADDRESSES {
            let count = answer.node_addresses.len();
            findings.refuse(
                "nodeAddresses",
                &format!("{count} entries"),
                Reason::TooMany {
                    count,
                    max: MAX_NODE_ADDRESSES,
                },
            );
        } else {
            let mut seen = HashSet::new();
            for (i, address) in answer.node_addresses.iter().enumerate() {
                let field = || format!("nodeAddresses[{i}].address ({:?})", address.kind);
                let result = if seen.insert((address.kind, address.address.as_str())) {
                    self.node_address(address, answer, &asker)
                } else {
                    Err(Reason::Duplicate)
                };
                if let Ok(Some(held)) = &result {
                    passed.push((field(), held.clone(), Some(address.kind)));
                }
                findings.check(field, &address.address, result.map(|_| ()));
            }
        }
        if answer.additional_labels.len() > MAX_LABELS {
            let count = answer.additional_labels.len();
            findings.refuse(
                "additionalLabels",
                &format!("{count} entries"),
                Reason::TooMany {
                    count,
                    max: MAX_LABELS,
                },
            );
        } else {
            let mut keys = HashSet::new();
            for (i, (key, value)) in answer.additional_labels.iter().enumerate() {
                let result = if keys.insert(key.as_str()) {
                    additional_label_key(key, value, answer)
                } else {
                    Err(Reason::Duplicate)
                };
                findings.check(|| format!("additionalLabels[{i}].key"), key, result);
                findings.check(
                    || format!("additionalLabels[{i}].value"),
                    value,
                    label_value(value),
                );
            }
        }
        self.claimed(findings, &asker, passed)
    }

    /// An address of the node `asker` answered in `answer`, returned as it would be held
    /// (`None`: the node's own name, nothing to hold): an IP checked as an ingress IP is (but
    /// for the node's own addresses); a DNS name the node's own or one under an allowed
    /// suffix, not another node's name or DNS address nor another node's name followed by a
    /// suffix, and if it spells an IPv4 address (`ip-10-0-0-5.…`, as AWS's resolver answers
    /// it) one of the answer's own IPs.
    fn node_address(
        &self,
        address: &NodeAddress,
        answer: &InstanceMetadata,
        asker: &Asker,
    ) -> Result<Option<Address>, Reason> {
        let Asker::Node(node) = asker else {
            return Ok(None);
        };
        match address.kind {
            AddressKind::InternalIP | AddressKind::ExternalIP => self
                .free_ip(&address.address, asker)
                .map(|ip| Some(Address::Ip(ip))),
            AddressKind::Hostname | AddressKind::InternalDNS | AddressKind::ExternalDNS => {
                let name = address.address.as_str();
                public_name(name)?;
                if let Some(spelled) = spelled_ipv4(name) {
                    let own = answer.node_addresses.iter().any(|a| {
                        matches!(a.kind, AddressKind::InternalIP | AddressKind::ExternalIP)
                            && a.address.parse::<IpAddr>() == Ok(IpAddr::V4(spelled))
                    });
                    if !own {
                        return Err(Reason::SpellsAnotherIp(spelled.to_string()));
                    }
                }
                if let Some(suffixes) = &self.policy.node_dns_suffixes {
                    let allowed = name == *node
                        || suffixes.iter().any(|suffix| {
                            name.strip_suffix(suffix.as_str())
                                .is_some_and(|head| head.ends_with('.') && head.len() > 1)
                        });
                    if !allowed && suffixes.is_empty() {
                        return Err(Reason::NodeDnsName("none set".into()));
                    } else if !allowed {
                        return Err(Reason::NodeDnsName(suffixes.join(",")));
                    }
                }
                let own = Address::name(node);
                let reached = Address::names_reached(name);
                if reached[0] == own {
                    // The node's own name is its own, whoever answered it before.
                    return Ok(None);
                }
                for other in reached.iter().filter(|reached| **reached != own) {
                    self.unheld(other, asker)?;
                }
                Ok(Some(reached[0].clone()))
            }
        }
    }

    /// Check what `list-routes` answered: names, nodes and CIDRs of the right form, node
    /// addresses of the right form (they are compared, never written).
    pub fn routes(&self, routes: &[Route]) -> Result<(), Refusals> {
        let mut findings = Findings::default();
        for (i, route) in routes.iter().enumerate() {
            if !route.name.is_empty() {
                findings.check(
                    || format!("[{i}].name"),
                    &route.name,
                    cloud_name(&route.name),
                );
            }
            findings.check(
                || format!("[{i}].targetNode"),
                &route.target_node,
                dns_subdomain(&route.target_node).map_err(Reason::NotDnsName),
            );
            let cidr = route
                .destination_cidr
                .parse::<Cidr>()
                .map(|_| ())
                .map_err(|_| Reason::NotCidr);
            findings.check(
                || format!("[{i}].destinationCIDR"),
                &route.destination_cidr,
                cidr,
            );
            if route.target_node_addresses.len() > MAX_NODE_ADDRESSES {
                let count = route.target_node_addresses.len();
                findings.refuse(
                    format!("[{i}].targetNodeAddresses"),
                    &format!("{count} entries"),
                    Reason::TooMany {
                        count,
                        max: MAX_NODE_ADDRESSES,
                    },
                );
                continue;
            }
            for (j, address) in route.target_node_addresses.iter().enumerate() {
                let result = match address.kind {
                    AddressKind::InternalIP | AddressKind::ExternalIP => address
                        .address
                        .parse::<IpAddr>()
                        .map(|_| ())
                        .map_err(|_| Reason::NotAnIp),
                    _ => dns_subdomain(&address.address).map_err(Reason::NotDnsName),
                };
                findings.check(
                    || format!("[{i}].targetNodeAddresses[{j}]"),
                    &address.address,
                    result,
                );
            }
        }
        findings.done()
    }

    /// Check what `get-load-balancer-name` answered.
    pub fn load_balancer_name(&self, name: &str) -> Result<(), Refusals> {
        let mut findings = Findings::default();
        findings.check(|| "name".into(), name, cloud_name(name));
        findings.done()
    }
}

/// Check the name a provider's `init` answered: the scheme of its provider IDs and the
/// `provider` label of its metrics, so a DNS label (as `provider new` names a provider).
pub fn check_provider_name(name: &str) -> Result<(), Refusals> {
    let mut findings = Findings::default();
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        findings.refuse("name", name, Reason::NotProviderName);
    }
    findings.done()
}

/// `text` as an entry of `--node-address-dns-suffixes`: a DNS subdomain (lowercase), a
/// leading `.` dropped.
pub fn dns_suffix(text: &str) -> Result<String, String> {
    let suffix = text.trim().trim_start_matches('.');
    dns_subdomain(suffix).map_err(|why| format!("{text:?} is not a DNS suffix: {why}"))?;
    Ok(suffix.to_string())
}

/// A cloud-side name: 1 to [`MAX_CLOUD_NAME`] bytes, no whitespace or control characters.
fn cloud_name(text: &str) -> Result<(), Reason> {
    if text.is_empty()
        || text.len() > MAX_CLOUD_NAME
        || text.chars().any(char::is_whitespace)
        || !crate::text::is_plain(text)
    {
        return Err(Reason::NotCloudName);
    }
    Ok(())
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

/// `text` as an IP address a load balancer or node may have.
fn unicast_ip(text: &str) -> Result<IpAddr, Reason> {
    let ip: IpAddr = text.parse().map_err(|_| Reason::NotAnIp)?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(Reason::Ipv4Mapped);
    }
    if let Some(use_) = special_use(ip) {
        return Err(Reason::SpecialUse(use_));
    }
    match platform_service(ip) {
        Some(service) => Err(Reason::Platform(service.to_string())),
        None => Ok(ip),
    }
}

/// The IPv4 address the first label of `name` spells as `ip-A-B-C-D` (AWS's private DNS
/// names, which its resolver answers with that address).
fn spelled_ipv4(name: &str) -> Option<std::net::Ipv4Addr> {
    let label = name.split('.').next()?.strip_prefix("ip-")?;
    label.replace('-', ".").parse().ok()
}

/// A DNS name others may be sent to: a [`host_name`] that is not a cloud metadata
/// service's.
fn public_name(text: &str) -> Result<(), Reason> {
    host_name(text)?;
    match metadata_name(text) {
        Some(service) => Err(Reason::MetadataName(service)),
        None => Ok(()),
    }
}

/// An RFC 1123 DNS subdomain, as the API server validates names, that is not an IP address
/// and not the local machine.
fn host_name(text: &str) -> Result<(), Reason> {
    dns_subdomain(text).map_err(Reason::NotDnsName)?;
    // A name whose last label is all digits is an IPv4 address in some form (`10.96.0.1`,
    // `010.0.0.1`, `2130706433`): resolvers and clients take it as one, and no top-level
    // domain is numeric.
    // `0x7f000001` and `0x7f.1` are IPv4 addresses to WHATWG URL parsers: a last label in
    // hex is one too.
    let last = text.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    if last.bytes().all(|b| b.is_ascii_digit()) || hex {
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
    if id.chars().any(char::is_whitespace) || !crate::text::is_plain(id) {
        return Err(Reason::ProviderId(
            "it holds whitespace, control or invisible formatting characters".into(),
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
            value: ellipsized(set.clone(), MAX_QUOTED),
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
            node_dns_suffixes: Some(vec!["sim.internal".into()]),
            ..AnswerPolicy::default()
        }
    }

    /// A cluster where node `n1` holds 10.0.0.5 and the name `n1.sim.internal`, node `n2`
    /// 10.0.0.6, `n2.sim.internal` and its name, Service `default/web` (the one answered for) the
    /// ingress 203.0.113.1 and Service `default/other` the ingress 203.0.113.2, the external
    /// IP 203.0.113.3 and the cluster IP 10.112.0.10.
    struct Cluster;

    impl ClusterAddresses for Cluster {
        fn holders(&self, address: &Address) -> Vec<Holder> {
            let node = |name: &str| Holder::Node {
                name: name.into(),
                address_type: "InternalIP".into(),
            };
            let named = |name: &str| Holder::Node {
                name: name.into(),
                address_type: "Hostname".into(),
            };
            let service = |name: &str, field| Holder::Service {
                key: format!("default/{name}"),
                field,
            };
            match address.to_string().as_str() {
                "10.0.0.5" => vec![node("n1")],
                "10.0.0.6" => vec![node("n2")],
                "n1.sim.internal" => vec![named("n1")],
                "n2.sim.internal" => vec![named("n2")],
                "n2" => vec![Holder::Node {
                    name: "n2".into(),
                    address_type: "name".into(),
                }],
                "203.0.113.1" => vec![service("web", ServiceField::Ingress)],
                "203.0.113.2" => vec![service("other", ServiceField::Ingress)],
                "203.0.113.3" => vec![service("other", ServiceField::ExternalIp)],
                "10.112.0.10" => vec![service("other", ServiceField::ClusterIp)],
                _ => Vec::new(),
            }
        }
    }

    fn checks(policy: &AnswerPolicy) -> AnswerChecks {
        AnswerChecks::new(policy.clone(), Arc::new(Cluster))
    }

    /// The refusals of `ingress` under `policy`, in [`Cluster`].
    fn lb_refusals(policy: &AnswerPolicy, ingress: Vec<LbIngress>) -> Vec<Refusal> {
        match checks(policy).load_balancer_status(&LbStatus { ingress }, &web()) {
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
            "ingress[0].ip \"10.0.0.5\": already the InternalIP of node n1"
        );
        assert_eq!(
            lb_reason(&policy(), ip("203.0.113.2")),
            Some(Reason::Taken(
                "the load-balancer ingress of Service default/other".into()
            ))
        );
        assert_eq!(
            lb_reason(&policy(), ip("203.0.113.3")),
            Some(Reason::Taken(
                "an external IP of Service default/other".into()
            ))
        );
        assert_eq!(
            lb_reason(&policy(), ip("203.0.113.1")),
            None,
            "a Service's own ingress"
        );
        let sharing = AnswerPolicy {
            shared_ingress_ips: true,
            ..policy()
        };
        assert_eq!(lb_reason(&sharing, ip("203.0.113.2")), None);
        assert_eq!(lb_reason(&sharing, ip("203.0.113.3")), None);
        assert_eq!(
            lb_reason(&sharing, ip("10.112.0.10")),
            Some(Reason::Taken(
                "the cluster IP of Service default/other".into()
            )),
            "sharing never takes in a cluster IP"
        );
        assert!(matches!(
            lb_reason(&sharing, ip("10.0.0.6")),
            Some(Reason::Taken(_))
        ));
    }

    #[test]
    fn platform_addresses_and_ipv6_carrying_refused_ipv4_are_refused() {
        for (answer, part) in [
            ("168.63.129.16", "Azure WireServer"),
            ("100.100.100.200", "Alibaba Cloud"),
            ("fd00:ec2::254", "AWS instance metadata over IPv6"),
            ("64:ff9b::a9fe:a9fe", "carrying 169.254.169.254"),
            ("64:ff9b::a60:1", "carrying 10.96.0.1"),
            ("2002:7f00:1::1", "carrying 127.0.0.1"),
        ] {
            let refused = lb_refusals(&policy(), vec![ip(answer)]);
            assert_eq!(refused.len(), 1, "{answer}");
            assert!(
                refused[0].to_string().contains(part),
                "{answer}: {}",
                refused[0]
            );
        }
        assert_eq!(
            lb_reason(&policy(), ip("64:ff9b::c633:6407")),
            None,
            "198.51.100.7"
        );
        assert_eq!(
            lb_reason(&policy(), hostname("metadata.google.internal")),
            Some(Reason::MetadataName("GCP metadata server"))
        );
    }

    #[test]
    fn the_entries_of_one_status_are_bounded_and_a_port_is_listed_once() {
        let refused = lb_refusals(&policy(), vec![ip("198.51.100.7"); MAX_INGRESS + 1]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].field, "ingress");
        assert_eq!(
            refused[0].reason,
            Reason::TooMany {
                count: MAX_INGRESS + 1,
                max: MAX_INGRESS
            }
        );
        let port = PortStatus {
            port: 80,
            protocol: Protocol::Tcp,
            error: None,
        };
        let twice = LbIngress {
            ports: vec![port.clone(), port],
            ..ip("198.51.100.7")
        };
        let mut two_ports = web();
        two_ports.ports.push(ServicePort {
            port: 443,
            ..ServicePort::default()
        });
        let refused = checks(&policy())
            .load_balancer_status(
                &LbStatus {
                    ingress: vec![twice.clone()],
                },
                &two_ports,
            )
            .unwrap_err();
        assert_eq!(refused.listed()[0].reason, Reason::Duplicate);
        assert!(
            matches!(
                lb_reason(&policy(), twice),
                Some(Reason::TooManyPorts { count: 2, ports: 1 })
            ),
            "more port statuses than the Service has ports"
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
        let flood = vec![ip("127.0.0.1"); MAX_INGRESS];
        let refused = checks(&policy())
            .load_balancer_status(&LbStatus { ingress: flood }, &web())
            .unwrap_err();
        assert_eq!(refused.listed().len(), MAX_LISTED);
        assert_eq!(refused.total(), MAX_INGRESS);
        assert!(
            refused.to_string().ends_with(&format!(
                "; and {} more refused fields",
                MAX_INGRESS - MAX_LISTED
            )),
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

    fn check_instance_metadata(
        answer: &InstanceMetadata,
        provider: &str,
        node: &Node,
    ) -> Result<(), Refusals> {
        checks(&policy()).instance_metadata(answer, provider, node)
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
            (
                InternalIP,
                "10.96.0.1",
                Reason::ServiceRange("10.96.0.0/12".into()),
            ),
            (
                InternalIP,
                "10.244.1.5",
                Reason::PodNetwork("10.244.0.0/16".into()),
            ),
            (
                ExternalIP,
                "10.0.0.6",
                Reason::Taken("the InternalIP of node n2".into()),
            ),
            (
                ExternalIP,
                "203.0.113.2",
                Reason::Taken("the load-balancer ingress of Service default/other".into()),
            ),
            (
                ExternalIP,
                "168.63.129.16",
                Reason::Platform("a cloud platform address (Azure WireServer and DNS)".into()),
            ),
            (
                Hostname,
                "kubelet.attacker.example",
                Reason::NodeDnsName("sim.internal".into()),
            ),
            (
                InternalDNS,
                "sim.internal",
                Reason::NodeDnsName("sim.internal".into()),
            ),
            (
                ExternalDNS,
                "metadata.google.internal",
                Reason::MetadataName("GCP metadata server"),
            ),
        ] {
            assert_eq!(
                metadata_refusals(&with_address(kind, address), &node(None)),
                [(format!("nodeAddresses[0].address ({kind:?})"), reason)],
                "{kind:?} {address}"
            );
        }
    }

    #[test]
    fn a_nodes_own_name_and_addresses_pass_and_other_names_need_a_suffix() {
        let answer = |kind: AddressKind, address: &str| InstanceMetadata {
            node_addresses: vec![NodeAddress {
                kind,
                address: address.into(),
            }],
            ..metadata()
        };
        let strict = AnswerChecks::new(
            AnswerPolicy {
                node_dns_suffixes: Some(Vec::new()),
                ..AnswerPolicy::default()
            },
            Arc::new(Cluster),
        );
        let n1 = node(None);
        assert_eq!(
            strict.instance_metadata(&answer(AddressKind::Hostname, "n1"), "simcloud", &n1),
            Ok(())
        );
        assert_eq!(
            strict.instance_metadata(
                &answer(AddressKind::InternalIP, "10.0.0.5"),
                "simcloud",
                &n1
            ),
            Ok(()),
            "the node's own address"
        );
        let refused = strict
            .instance_metadata(
                &answer(AddressKind::Hostname, "n1.sim.internal"),
                "simcloud",
                &n1,
            )
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("--node-address-dns-suffixes (none set)"),
            "{refused}"
        );
        let any = AnswerChecks::default();
        assert_eq!(
            any.instance_metadata(
                &answer(AddressKind::Hostname, "n1.sim.internal"),
                "simcloud",
                &n1
            ),
            Ok(()),
            "without the operator's list, any DNS name"
        );
    }

    #[test]
    fn a_name_reaches_its_host_as_itself_and_by_its_first_label() {
        let shown = |text: &str| -> Vec<String> {
            Address::names_reached(text)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(
            shown("Worker-1.Example.Internal."),
            ["worker-1.example.internal", "worker-1"]
        );
        assert_eq!(shown("worker-1"), ["worker-1"]);
    }

    #[test]
    fn a_dns_name_another_node_holds_or_claimed_is_refused() {
        let answer = |name: &str| InstanceMetadata {
            node_addresses: vec![NodeAddress {
                kind: AddressKind::InternalDNS,
                address: name.into(),
            }],
            ..metadata()
        };
        let checks = checks(&policy());
        let refused = checks
            .instance_metadata(&answer("n2.sim.internal"), "simcloud", &node(None))
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("already the Hostname of node n2"),
            "{refused}"
        );
        assert_eq!(
            checks.instance_metadata(&answer("n1.sim.internal"), "simcloud", &node(None)),
            Ok(()),
            "the node's own name"
        );
        let named = |name: &str| Node {
            name: name.into(),
            ..Node::default()
        };
        assert_eq!(
            checks.instance_metadata(&answer("n7.sim.internal"), "simcloud", &named("n7")),
            Ok(())
        );
        let refused = checks
            .instance_metadata(&answer("n7.sim.internal"), "simcloud", &named("n8"))
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("already the InternalDNS of node n7 (answered, not yet written)"),
            "{refused}"
        );
        // Another node's name with a suffix after it is that node under a search domain.
        let refused = checks
            .instance_metadata(&answer("n2.zone-a.sim.internal"), "simcloud", &node(None))
            .unwrap_err();
        assert!(
            refused.to_string().contains("already the name of node n2"),
            "{refused}"
        );
        // A node's own name passes, whoever holds or claimed it before it joined.
        for own in ["n2.sim.internal", "n7.sim.internal"] {
            assert_eq!(
                checks.instance_metadata(&answer(own), "simcloud", &named(own)),
                Ok(()),
                "{own}"
            );
        }
    }

    #[test]
    fn two_answers_checked_at_once_cannot_both_take_one_address() {
        let checks = checks(&policy());
        let with_ip = |ip: &str| InstanceMetadata {
            node_addresses: vec![NodeAddress {
                kind: AddressKind::InternalIP,
                address: ip.into(),
            }],
            ..metadata()
        };
        let named = |name: &str| Node {
            name: name.into(),
            ..Node::default()
        };
        assert_eq!(
            checks.instance_metadata(&with_ip("10.0.0.9"), "simcloud", &named("n3")),
            Ok(())
        );
        let refused = checks
            .instance_metadata(&with_ip("10.0.0.9"), "simcloud", &named("n4"))
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("already the InternalIP of node n3 (answered, not yet written)"),
            "{refused}"
        );
        assert!(
            !refused.blame_the_answer(),
            "the cluster's state, not the answer"
        );
        assert_eq!(
            checks.instance_metadata(&with_ip("10.0.0.9"), "simcloud", &named("n3")),
            Ok(()),
            "the node itself again"
        );
        let status = LbStatus {
            ingress: vec![ip("10.0.0.9")],
        };
        assert!(checks.load_balancer_status(&status, &web()).is_err());

        // n3's next answer names another address: 10.0.0.9 is free at once.
        assert_eq!(
            checks.instance_metadata(&with_ip("10.0.0.10"), "simcloud", &named("n3")),
            Ok(())
        );
        assert_eq!(
            checks.instance_metadata(&with_ip("10.0.0.9"), "simcloud", &named("n4")),
            Ok(())
        );
        // What nothing writes (a shadow's answer, an existence check) claims nothing.
        let reading = checks.without_claims();
        assert_eq!(
            reading.instance_metadata(&with_ip("10.0.0.11"), "simcloud", &named("n5")),
            Ok(())
        );
        assert_eq!(
            checks.instance_metadata(&with_ip("10.0.0.11"), "simcloud", &named("n6")),
            Ok(())
        );
    }

    #[test]
    fn what_a_services_owner_writes_in_its_spec_blocks_no_node_and_no_earlier_holder() {
        let checks = checks(&policy());
        let external = InstanceMetadata {
            node_addresses: vec![NodeAddress {
                kind: AddressKind::ExternalIP,
                address: "203.0.113.3".into(),
            }],
            ..metadata()
        };
        assert_eq!(
            checks.instance_metadata(&external, "simcloud", &node(None)),
            Ok(()),
            "another Service's externalIPs entry vetoes no node"
        );
        // Apart from the node's answer just claimed.
        let checks = super::tests::checks(&policy());
        let holding = Service {
            status: LbStatus {
                ingress: vec![ip("203.0.113.3")],
            },
            ..web()
        };
        let status = LbStatus {
            ingress: vec![ip("203.0.113.3")],
        };
        assert_eq!(
            checks.load_balancer_status(&status, &holding),
            Ok(()),
            "a Service keeps the address it held first"
        );
        let other = Service {
            name: "other".into(),
            ..web()
        };
        let own_cluster_ip = LbStatus {
            ingress: vec![ip("10.112.0.10")],
        };
        assert!(
            checks
                .load_balancer_status(&own_cluster_ip, &other)
                .is_err(),
            "never a Service's own cluster IP"
        );
    }

    #[test]
    fn a_node_name_spelling_an_address_must_spell_one_of_its_own() {
        let answer = |name: &str| InstanceMetadata {
            node_addresses: vec![
                NodeAddress {
                    kind: AddressKind::InternalIP,
                    address: "10.0.0.5".into(),
                },
                NodeAddress {
                    kind: AddressKind::Hostname,
                    address: name.into(),
                },
            ],
            ..metadata()
        };
        assert_eq!(
            metadata_refusals(&answer("ip-10-0-0-5.sim.internal"), &node(None)),
            []
        );
        let refused = metadata_refusals(&answer("ip-10-96-0-1.sim.internal"), &node(None));
        assert_eq!(
            refused,
            [(
                "nodeAddresses[1].address (Hostname)".to_string(),
                Reason::SpellsAnotherIp("10.96.0.1".into())
            )]
        );
        assert_eq!(
            lb_reason(&policy(), hostname("lb.0x7f000001")),
            Some(Reason::IpAsName)
        );
    }

    #[test]
    fn the_entries_of_one_metadata_answer_are_bounded_and_listed_once() {
        let address = NodeAddress {
            kind: AddressKind::InternalIP,
            address: "10.0.0.5".into(),
        };
        let many = InstanceMetadata {
            node_addresses: vec![address.clone(); MAX_NODE_ADDRESSES + 1],
            additional_labels: vec![("k".into(), "v".into()); MAX_LABELS + 1],
            ..metadata()
        };
        let fields: Vec<String> = metadata_refusals(&many, &node(None))
            .into_iter()
            .map(|(field, _)| field)
            .collect();
        assert_eq!(fields, ["nodeAddresses", "additionalLabels"]);
        let twice = InstanceMetadata {
            node_addresses: vec![address.clone(), address],
            additional_labels: vec![("k".into(), "v".into()), ("k".into(), "w".into())],
            ..metadata()
        };
        assert_eq!(
            metadata_refusals(&twice, &node(None)),
            [
                (
                    "nodeAddresses[1].address (InternalIP)".to_string(),
                    Reason::Duplicate
                ),
                ("additionalLabels[1].key".to_string(), Reason::Duplicate),
            ]
        );
    }

    #[test]
    fn route_and_load_balancer_names_are_bounded_text() {
        let checks = AnswerChecks::default();
        let route = |name: &str, node: &str, cidr: &str| Route {
            name: name.into(),
            target_node: node.into(),
            destination_cidr: cidr.into(),
            ..Route::default()
        };
        assert_eq!(
            checks.routes(&[route("r-1", "n1", "10.244.1.0/24")]),
            Ok(())
        );
        let refused = checks
            .routes(&[
                route("r\nforged", "N1", "10.244.1.0"),
                route(&"r".repeat(256), "n1", "::/0"),
            ])
            .unwrap_err();
        let fields: Vec<&str> = refused.listed().iter().map(|r| r.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "[0].name",
                "[0].targetNode",
                "[0].destinationCIDR",
                "[1].name"
            ]
        );
        assert_eq!(checks.load_balancer_name("a0123456789abcdef"), Ok(()));
        for name in ["", "a b", "a\u{1b}[2K", &"a".repeat(MAX_CLOUD_NAME + 1)] {
            assert!(checks.load_balancer_name(name).is_err(), "{name:?}");
        }
    }

    #[test]
    fn a_provider_name_is_a_dns_label() {
        for name in ["simcloud", "aws", "hetzner-robot", "p1"] {
            assert_eq!(check_provider_name(name), Ok(()), "{name}");
        }
        for name in [
            "",
            "Sim",
            "1sim",
            "sim-",
            "sim cloud",
            "sim\n",
            &"s".repeat(64),
        ] {
            assert!(check_provider_name(name).is_err(), "{name:?}");
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

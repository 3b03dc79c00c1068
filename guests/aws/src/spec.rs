//! What a Service asks of its network load balancer: the selection
//! (`service.beta.kubernetes.io/aws-load-balancer-type`), the validation upstream does, the
//! v1 annotations read into typed settings, and the names and tags of the objects made for
//! it (upstream's: `"a"` + UID for the load balancer, `k8s-<ns:8>-<name:8>-<sha1:10>` for a
//! target group). Pure: nothing here calls AWS, and every refusal names the field or
//! annotation.

use wasm_ccm_sdk::labels::LabelSelector;
use wasm_ccm_sdk::{Error, Protocol, Service, default_load_balancer_name};

use crate::config::{Config, TARGET_NODE_LABEL_KEYS};

/// The prefix of every annotation this provider reads.
const PREFIX: &str = "service.beta.kubernetes.io/aws-load-balancer-";
pub const TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
pub const INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internal";
pub const SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";
const CROSS_ZONE: &str =
    "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
const EXTRA_TAGS: &str = "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";
pub const TARGET_NODE_LABELS: &str =
    "service.beta.kubernetes.io/aws-load-balancer-target-node-labels";
/// Annotations upstream reads that this provider does not support yet: refused, not ignored.
const NOT_YET: [&str; 6] = [
    "ssl-cert",
    "ssl-ports",
    "eip-allocations",
    "private-ipv4-addresses",
    "target-group-attributes",
    "security-groups",
];

/// Every other annotation with the prefix this provider reads (health checks by their
/// `healthcheck-` names): one it does not know (upstream's Classic ELB settings, the AWS
/// Load Balancer Controller's `scheme`, a typo) is refused, not silently ignored.
const READ: [&str; 13] = [
    "type",
    "internal",
    "subnets",
    "cross-zone-load-balancing-enabled",
    "additional-resource-tags",
    "target-node-labels",
    "healthcheck-protocol",
    "healthcheck-port",
    "healthcheck-path",
    "healthcheck-interval",
    "healthcheck-timeout",
    "healthcheck-healthy-threshold",
    "healthcheck-unhealthy-threshold",
];

/// The tag naming the Service an object was made for.
pub const SERVICE_TAG: &str = "kubernetes.io/service-name";

/// The load-balancer attribute of cross-zone balancing.
pub const CROSS_ZONE_ATTRIBUTE: &str = "load_balancing.cross_zone.enabled";

/// A health check of a target group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthCheck {
    /// `TCP`, `HTTP` or `HTTPS`.
    pub protocol: String,
    /// `traffic-port` or a port number.
    pub port: String,
    /// Sent for HTTP and HTTPS only.
    pub path: String,
    pub interval: i32,
    pub healthy_threshold: i32,
    pub unhealthy_threshold: i32,
}

/// One Service port: a listener forwarding to a target group of the nodes' node port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    pub port: i32,
    /// `TCP` or `UDP`, for the listener and the target group alike.
    pub protocol: &'static str,
    pub node_port: i32,
    pub health: HealthCheck,
    pub target_group: String,
}

/// Everything the Service asks of its load balancer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub internal: bool,
    /// Subnet IDs or `Name` tags from the annotation; `None` to discover them.
    pub subnets: Option<Vec<String>>,
    pub cross_zone: bool,
    /// The tags of every object made for the Service (the cluster's, the Service's, the
    /// annotation's).
    pub tags: Vec<(String, String)>,
    pub mappings: Vec<PortMapping>,
    /// Client CIDRs allowed to the node ports.
    pub source_ranges: Vec<String>,
    /// The labels a node needs to be a target (`target-node-labels`); `None`: every node.
    pub target_nodes: Option<LabelSelector>,
}

/// Whether this provider balances the Service.
pub enum Selection {
    Nlb,
    /// The AWS Load Balancer Controller does (`nlb-ip`, `external`).
    Elsewhere,
}

/// The Service's `aws-load-balancer-type`: `nlb`, or one the AWS Load Balancer Controller
/// owns; anything else (a Classic ELB, upstream's default) is not supported.
pub fn selection(svc: &Service) -> Result<Selection, Error> {
    match annotation(svc, TYPE) {
        Some("nlb") => Ok(Selection::Nlb),
        Some("nlb-ip" | "external") => Ok(Selection::Elsewhere),
        Some(other) => Err(refused(
            svc,
            TYPE,
            &format!("{other:?} is not a type this provider makes: set it to \"nlb\""),
        )),
        None => Err(refused(
            svc,
            TYPE,
            "is not set: this provider makes network load balancers only (Classic ELBs are \
             not supported), so set it to \"nlb\"",
        )),
    }
}

/// The Service's request, validated.
pub fn spec(config: &Config, svc: &Service) -> Result<Spec, Error> {
    for key in NOT_YET {
        let key = format!("{PREFIX}{key}");
        if annotation(svc, &key).is_some() {
            return Err(refused(svc, &key, "is not supported by this provider yet"));
        }
    }
    for (key, _) in &svc.annotations {
        if let Some(name) = key.strip_prefix(PREFIX)
            && !READ.contains(&name)
        {
            return Err(refused(
                svc,
                key,
                &format!(
                    "is not an annotation this provider reads, so it would have no effect (it reads aws-load-balancer-{}); remove it",
                    READ.join(", -")
                ),
            ));
        }
    }
    if svc
        .load_balancer_ip
        .as_deref()
        .is_some_and(|ip| !ip.is_empty())
    {
        return Err(refused(
            svc,
            "spec.loadBalancerIP",
            "cannot be set for a network load balancer",
        ));
    }
    if svc
        .session_affinity
        .as_deref()
        .is_some_and(|affinity| affinity != "None")
    {
        return Err(refused(
            svc,
            "spec.sessionAffinity",
            "must be None for a network load balancer",
        ));
    }
    let health = health_check(svc)?;
    let mut mappings = Vec::new();
    for port in &svc.ports {
        let protocol = match port.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => {
                return Err(refused(
                    svc,
                    "spec.ports",
                    &format!("port {} is SCTP: only TCP and UDP are balanced", port.port),
                ));
            }
        };
        let node_port = port.node_port.ok_or_else(|| {
            refused(
                svc,
                "spec.ports",
                &format!("port {} has no node port", port.port),
            )
        })?;
        mappings.push(PortMapping {
            port: port.port,
            protocol,
            node_port,
            target_group: target_group_name(config, svc, port.port, node_port, protocol, &health),
            health: health.clone(),
        });
    }
    if mappings.is_empty() {
        return Err(refused(svc, "spec.ports", "is empty"));
    }
    if mappings.iter().any(|m| m.protocol != mappings[0].protocol) {
        return Err(refused(
            svc,
            "spec.ports",
            "mixes TCP and UDP: a network load balancer's ports here use one protocol",
        ));
    }
    let mut source_ranges = svc.load_balancer_source_ranges.clone();
    if source_ranges.is_empty() {
        source_ranges.push("0.0.0.0/0".into());
    }
    if let Some(bad) = source_ranges.iter().find(|cidr| !is_ipv4_cidr(cidr)) {
        return Err(refused(
            svc,
            "spec.loadBalancerSourceRanges",
            &format!("{bad:?} is not an IPv4 CIDR"),
        ));
    }
    Ok(Spec {
        name: default_load_balancer_name(svc),
        // Upstream: any value but "false" makes it internal.
        internal: annotation(svc, INTERNAL).is_some_and(|value| value != "false"),
        subnets: annotation(svc, SUBNETS).map(list),
        cross_zone: match annotation(svc, CROSS_ZONE) {
            None | Some("") => false,
            Some(value) => parse_bool(value)
                .ok_or_else(|| refused(svc, CROSS_ZONE, &format!("{value:?} is not a boolean")))?,
        },
        tags: tags(config, svc),
        mappings,
        source_ranges,
        target_nodes: target_nodes(config, svc)?,
    })
}

/// The Service's `target-node-labels` (`k=v,k2`, as upstream's `filterTargetNodes`):
/// `None` without the annotation or with no entry in it (every node, as upstream). Each key
/// must be one of the configured `target_node_label_keys`, the only labels the host passes
/// this provider; an entry without a key, with two `=`, or a key given twice is refused
/// (upstream drops or mangles them silently).
fn target_nodes(config: &Config, svc: &Service) -> Result<Option<LabelSelector>, Error> {
    let Some(value) = annotation(svc, TARGET_NODE_LABELS) else {
        return Ok(None);
    };
    LabelSelector::parse(value, &config.target_node_label_keys).map_err(|error| {
        let problem = error.explained(TARGET_NODE_LABEL_KEYS, &config.target_node_label_keys);
        refused(svc, TARGET_NODE_LABELS, &problem)
    })
}

/// The upstream defaults (TCP on the traffic port, or with `externalTrafficPolicy: Local`
/// HTTP on the health-check node port at `/healthz`), then the annotations. Upstream parses
/// `healthcheck-timeout` but never sends it; so does this provider, after checking it.
fn health_check(svc: &Service) -> Result<HealthCheck, Error> {
    let mut check = match (
        svc.external_traffic_policy.as_deref(),
        svc.health_check_node_port,
    ) {
        (Some("Local"), Some(port)) => HealthCheck {
            protocol: "HTTP".into(),
            port: port.to_string(),
            path: "/healthz".into(),
            interval: 10,
            healthy_threshold: 2,
            unhealthy_threshold: 2,
        },
        _ => HealthCheck {
            protocol: "TCP".into(),
            port: "traffic-port".into(),
            path: "/".into(),
            interval: 30,
            healthy_threshold: 3,
            unhealthy_threshold: 3,
        },
    };
    let key = |name: &str| format!("{PREFIX}healthcheck-{name}");
    if let Some(protocol) = annotation(svc, &key("protocol")) {
        let upper = protocol.to_ascii_uppercase();
        if !matches!(upper.as_str(), "TCP" | "HTTP" | "HTTPS") {
            return Err(refused(
                svc,
                &key("protocol"),
                &format!("{protocol:?} is not TCP, HTTP or HTTPS"),
            ));
        }
        check.protocol = upper;
    }
    if let Some(port) = annotation(svc, &key("port")) {
        if port != "traffic-port" && port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(refused(
                svc,
                &key("port"),
                &format!("{port:?} is neither traffic-port nor a port number"),
            ));
        }
        check.port = port.to_string();
    }
    if let Some(path) = annotation(svc, &key("path")) {
        if !path.starts_with('/') {
            return Err(refused(
                svc,
                &key("path"),
                &format!("{path:?} does not start with /"),
            ));
        }
        check.path = path.to_string();
    }
    let number = |name: &str, range: std::ops::RangeInclusive<i32>| -> Result<Option<i32>, Error> {
        let Some(value) = annotation(svc, &key(name)) else {
            return Ok(None);
        };
        match value.parse::<i32>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(refused(
                svc,
                &key(name),
                &format!(
                    "{value:?} is not a number from {} to {}",
                    range.start(),
                    range.end()
                ),
            )),
        }
    };
    if let Some(interval) = number("interval", 5..=300)? {
        check.interval = interval;
    }
    number("timeout", 2..=120)?;
    if let Some(healthy) = number("healthy-threshold", 2..=10)? {
        check.healthy_threshold = healthy;
    }
    if let Some(unhealthy) = number("unhealthy-threshold", 2..=10)? {
        check.unhealthy_threshold = unhealthy;
    }
    Ok(check)
}

/// Upstream's `buildTargetGroupName`: `k8s-<ns:8>-<name:8>-<sha1:10>`, the hash over what a
/// target group cannot change in place (cluster, Service, ports, protocol, target type,
/// health-check protocol and interval). A changed setting gives a new name, so a new group.
fn target_group_name(
    config: &Config,
    svc: &Service,
    port: i32,
    node_port: i32,
    protocol: &str,
    health: &HealthCheck,
) -> String {
    let mut hasher = sha1_smol::Sha1::new();
    for part in [
        config.cluster_id.as_str(),
        &svc.namespace,
        &svc.name,
        &port.to_string(),
        &node_port.to_string(),
        protocol,
        "instance",
        &health.protocol,
        &health.interval.to_string(),
    ] {
        hasher.update(part.as_bytes());
    }
    let hash = hasher.digest().to_string();
    let clean = |text: &str, max: usize| -> String {
        text.chars()
            .filter(char::is_ascii_alphanumeric)
            .take(max)
            .collect()
    };
    format!(
        "k8s-{}-{}-{}",
        clean(&svc.namespace, 8),
        clean(&svc.name, 8),
        &hash[..10]
    )
}

/// The cluster tag (`owned`), the Service tag, then the annotation's `k=v,k2` tags.
fn tags(config: &Config, svc: &Service) -> Vec<(String, String)> {
    let mut tags = vec![
        (config.cluster_tag(), "owned".to_string()),
        (
            SERVICE_TAG.to_string(),
            format!("{}/{}", svc.namespace, svc.name),
        ),
    ];
    for item in annotation(svc, EXTRA_TAGS).map(list).unwrap_or_default() {
        let (key, value) = item.split_once('=').unwrap_or((&item, ""));
        if !key.is_empty() && !tags.iter().any(|(k, _)| k == key) {
            tags.push((key.to_string(), value.to_string()));
        }
    }
    tags
}

fn annotation<'a>(svc: &'a Service, key: &str) -> Option<&'a str> {
    svc.annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.trim())
}

/// A comma-separated annotation's items, trimmed, empty ones dropped.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_string)
        .collect()
}

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

fn is_ipv4_cidr(cidr: &str) -> bool {
    let Some((ip, bits)) = cidr.split_once('/') else {
        return false;
    };
    ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|bits| bits <= 32)
}

/// An error about `field` of `svc`.
pub fn refused(svc: &Service, field: &str, problem: &str) -> Error {
    Error::other(format!(
        "service {}/{}: {field} {problem}",
        svc.namespace, svc.name
    ))
}

#[cfg(test)]
mod tests {
    use wasm_ccm_sdk::{LbStatus, ServicePort};

    use super::*;

    fn config() -> Config {
        Config::parse(Some(
            br#"{"region":"us-east-1","cluster_id":"c1"}"#.to_vec(),
        ))
        .unwrap()
    }

    fn service(annotations: &[(&str, &str)]) -> Service {
        Service {
            name: "web-frontend".into(),
            namespace: "shop-production".into(),
            uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
            labels: vec![],
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            service_type: "LoadBalancer".into(),
            ports: vec![ServicePort {
                name: Some("http".into()),
                protocol: Protocol::Tcp,
                port: 80,
                target_port: None,
                node_port: Some(30080),
                app_protocol: None,
            }],
            external_traffic_policy: Some("Cluster".into()),
            health_check_node_port: None,
            load_balancer_source_ranges: vec![],
            load_balancer_ip: None,
            ip_families: vec![],
            session_affinity: Some("None".into()),
            load_balancer_class: None,
            status: LbStatus { ingress: vec![] },
        }
    }

    fn message(error: Error) -> String {
        match error {
            Error::Other(message) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_and_tags_are_upstreams() {
        let spec = spec(
            &config(),
            &service(&[(EXTRA_TAGS, "team=web, cost-center")]),
        )
        .unwrap();
        assert_eq!(spec.name, "a6c1f3e2a5b7d4e8f9a0b1c2d3e4f5a6");
        // sha1("c1" "shop-production" "web-frontend" "80" "30080" "TCP" "instance" "TCP" "30")
        let mut hasher = sha1_smol::Sha1::new();
        hasher.update(b"c1shop-productionweb-frontend8030080TCPinstanceTCP30");
        let hash = hasher.digest().to_string();
        assert_eq!(
            spec.mappings[0].target_group,
            format!("k8s-shopprod-webfront-{}", &hash[..10])
        );
        assert_eq!(
            spec.tags,
            [
                ("kubernetes.io/cluster/c1".into(), "owned".into()),
                (
                    "kubernetes.io/service-name".into(),
                    "shop-production/web-frontend".into()
                ),
                ("team".into(), "web".into()),
                ("cost-center".into(), String::new()),
            ]
        );
        assert_eq!(spec.source_ranges, ["0.0.0.0/0"]);
        assert!(!spec.internal && !spec.cross_zone);
    }

    #[test]
    fn health_checks_follow_the_traffic_policy_then_the_annotations() {
        let mut local = service(&[]);
        local.external_traffic_policy = Some("Local".into());
        local.health_check_node_port = Some(31999);
        let check = spec(&config(), &local).unwrap().mappings[0].health.clone();
        assert_eq!(
            check,
            HealthCheck {
                protocol: "HTTP".into(),
                port: "31999".into(),
                path: "/healthz".into(),
                interval: 10,
                healthy_threshold: 2,
                unhealthy_threshold: 2,
            }
        );
        let annotated = service(&[
            (&format!("{PREFIX}healthcheck-protocol"), "https"),
            (&format!("{PREFIX}healthcheck-path"), "/ready"),
            (&format!("{PREFIX}healthcheck-interval"), "20"),
            (&format!("{PREFIX}healthcheck-healthy-threshold"), "4"),
        ]);
        let check = spec(&config(), &annotated).unwrap().mappings[0]
            .health
            .clone();
        assert_eq!(
            (
                check.protocol.as_str(),
                check.path.as_str(),
                check.interval,
                check.healthy_threshold
            ),
            ("HTTPS", "/ready", 20, 4)
        );
    }

    #[test]
    fn bad_input_is_refused_naming_the_field_or_annotation() {
        let cases: Vec<(Service, &str)> = vec![
            (service(&[(CROSS_ZONE, "maybe")]), CROSS_ZONE),
            (
                service(&[(&format!("{PREFIX}healthcheck-interval"), "1")]),
                "healthcheck-interval \"1\" is not a number from 5 to 300",
            ),
            (
                service(&[(&format!("{PREFIX}healthcheck-port"), "http")]),
                "healthcheck-port",
            ),
            (
                service(&[(&format!("{PREFIX}ssl-cert"), "arn:aws:acm:x")]),
                "ssl-cert is not supported by this provider yet",
            ),
            (
                service(&[(&format!("{PREFIX}scheme"), "internal")]),
                "aws-load-balancer-scheme is not an annotation this provider reads",
            ),
            (
                service(&[(&format!("{PREFIX}proxy-protocol"), "*")]),
                "aws-load-balancer-proxy-protocol is not an annotation this provider reads",
            ),
            (
                Service {
                    session_affinity: Some("ClientIP".into()),
                    ..service(&[])
                },
                "spec.sessionAffinity",
            ),
            (
                Service {
                    load_balancer_ip: Some("1.2.3.4".into()),
                    ..service(&[])
                },
                "spec.loadBalancerIP",
            ),
            (
                Service {
                    load_balancer_source_ranges: vec!["10.0.0.0".into()],
                    ..service(&[])
                },
                "spec.loadBalancerSourceRanges \"10.0.0.0\"",
            ),
        ];
        for (svc, field) in cases {
            let error = message(spec(&config(), &svc).unwrap_err());
            assert!(error.contains(field), "{field}: {error}");
            assert!(
                error.starts_with("service shop-production/web-frontend: "),
                "{error}"
            );
        }
        let mut mixed = service(&[]);
        let mut udp = mixed.ports[0].clone();
        udp.protocol = Protocol::Udp;
        udp.port = 53;
        mixed.ports.push(udp);
        assert!(message(spec(&config(), &mixed).unwrap_err()).contains("mixes TCP and UDP"));
    }

    fn labelled_config() -> Config {
        Config::parse(Some(
            br#"{"region":"us-east-1","cluster_id":"c1","target_node_label_keys":["node-role.example.com/lb","tier"]}"#
                .to_vec(),
        ))
        .unwrap()
    }

    fn selector(value: &str) -> Result<Option<LabelSelector>, String> {
        let svc = service(&[(TARGET_NODE_LABELS, value)]);
        spec(&labelled_config(), &svc)
            .map(|spec| spec.target_nodes)
            .map_err(message)
    }

    #[test]
    fn target_node_labels_select_nodes_only_when_given() {
        assert_eq!(
            spec(&labelled_config(), &service(&[]))
                .unwrap()
                .target_nodes,
            None
        );
        // No entry at all: every node, as upstream.
        assert_eq!(selector(" , ").unwrap(), None);
        let edge = selector("node-role.example.com/lb=edge").unwrap().unwrap();
        let labels =
            |value: &str| vec![("node-role.example.com/lb".to_string(), value.to_string())];
        assert!(edge.matches(&labels("edge")));
        assert!(!edge.matches(&labels("inner")));
    }

    #[test]
    fn bad_target_node_labels_are_refused_naming_the_annotation_and_the_entry() {
        for (value, problem) in [
            (
                "tier=a,tier=b",
                "entry \"tier=b\" names a label key given before",
            ),
            (
                "kubernetes.io/hostname=n1",
                "names node label \"kubernetes.io/hostname\", which the provider does not read: \
                 add it to \"target_node_label_keys\" in the cloud config \
                 (now [\"node-role.example.com/lb\", \"tier\"])",
            ),
        ] {
            let error = selector(value).unwrap_err();
            assert_eq!(
                error,
                format!("service shop-production/web-frontend: {TARGET_NODE_LABELS} {problem}"),
                "{value}"
            );
        }
        // Without configured keys, any key is refused the same way.
        let error =
            message(spec(&config(), &service(&[(TARGET_NODE_LABELS, "tier")])).unwrap_err());
        assert!(
            error.contains("add it to \"target_node_label_keys\""),
            "{error}"
        );
    }

    #[test]
    fn only_nlb_is_made_here_and_the_controllers_types_are_elsewhere() {
        assert!(matches!(
            selection(&service(&[(TYPE, "nlb")])),
            Ok(Selection::Nlb)
        ));
        for other in ["nlb-ip", "external"] {
            assert!(matches!(
                selection(&service(&[(TYPE, other)])),
                Ok(Selection::Elsewhere)
            ));
        }
        let unset = message(selection(&service(&[])).err().unwrap());
        assert!(unset.contains(TYPE) && unset.contains("Classic ELBs are not supported"));
        let classic = message(selection(&service(&[(TYPE, "classic")])).err().unwrap());
        assert!(classic.contains("\"classic\""), "{classic}");
    }
}

//! Services (`pkg/registry/core/service`, `ValidateService`): defaulting,
//! cluster IP (10.96.0.0/12) and node port (30000-32767) allocation,
//! carrying allocated values across updates, spec/status isolation,
//! set-once `clusterIP`, `loadBalancerClass` and `healthCheckNodePort`, the
//! load balancer status rules a cloud controller manager writes against,
//! and v1.32's warnings for IPs it accepts but will not always (IPs are
//! parsed as sloppily as upstream: `010.0.0.1` is valid).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};

use super::{Cluster, Subresource, set_field, str_at};
use crate::meta::{self, NameRule};
use crate::status::{BadValue, FieldError, go_strings};
use crate::validation;

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const CLUSTER_IP_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const CLUSTER_IP_PREFIX: u32 = 12;
const CLUSTER_IP_RANGE: &str = "10.96.0.0/12";
/// The kube-apiserver's default `--service-node-port-range`.
pub const DEFAULT_NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;
const TOPOLOGY_HINTS_ANNOTATION: &str = "service.kubernetes.io/topology-aware-hints";

fn service_type(svc: &Value) -> &str {
    match str_at(svc, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    }
}

fn needs_node_ports(svc: &Value) -> bool {
    match service_type(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

fn externally_accessible(svc: &Value) -> bool {
    matches!(service_type(svc), "LoadBalancer" | "NodePort")
        || (service_type(svc) == "ClusterIP"
            && svc
                .pointer("/spec/externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()))
}

fn needs_health_check_port(svc: &Value) -> bool {
    service_type(svc) == "LoadBalancer" && str_at(svc, "/spec/externalTrafficPolicy") == "Local"
}

fn spec_mut(svc: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !svc.get("spec").is_some_and(Value::is_object) {
        set_field(svc, "spec", json!({}));
    }
    match svc.get_mut("spec").and_then(Value::as_object_mut) {
        Some(spec) => spec,
        None => unreachable!("spec was just made an object"),
    }
}

fn ports(svc: &Value) -> Vec<Value> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub fn prepare_create(svc: &mut Value, cluster: &dyn Cluster) -> Vec<FieldError> {
    set_field(svc, "status", json!({"loadBalancer": {}}));
    apply_defaults(svc);
    allocate(svc, None, cluster)
}

pub fn prepare_update(
    sub: Subresource,
    new: &mut Value,
    old: &Value,
    cluster: &dyn Cluster,
) -> Vec<FieldError> {
    let keep = match sub {
        Subresource::Main => "status",
        Subresource::Status => "spec",
    };
    set_field(
        new,
        keep,
        old.get(keep).cloned().unwrap_or_else(|| json!({})),
    );
    if sub == Subresource::Status {
        default_ip_mode(new);
        return Vec::new();
    }
    drop_type_dependent_fields(new, old);
    carry_allocated_values(new, old);
    normalize_cluster_ips(new, old);
    apply_defaults(new);
    allocate(new, Some(old), cluster)
}

/// `SetDefaults_Service` and the registry's defaulting.
fn apply_defaults(svc: &mut Value) {
    let kind = service_type(svc).to_owned();
    let spec = spec_mut(svc);
    spec.entry("type").or_insert_with(|| json!("ClusterIP"));
    spec.entry("sessionAffinity")
        .or_insert_with(|| json!("None"));
    if spec.get("sessionAffinity") == Some(&json!("ClientIP")) {
        let config = spec
            .entry("sessionAffinityConfig")
            .or_insert_with(|| json!({}));
        if config.pointer("/clientIP/timeoutSeconds").is_none() {
            set_field(config, "clientIP", json!({"timeoutSeconds": 10800}));
        }
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            port.entry("protocol").or_insert_with(|| json!("TCP"));
            let unset = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(v) => v == &json!(0) || v == &json!(""),
            };
            if unset && let Some(p) = port.get("port").cloned() {
                port.insert("targetPort".to_owned(), p);
            }
        }
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        spec.entry("externalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        spec.entry("allocateLoadBalancerNodePorts")
            .or_insert_with(|| json!(true));
    }
    if kind != "ExternalName" {
        spec.entry("internalTrafficPolicy")
            .or_insert_with(|| json!("Cluster"));
        spec.entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
        spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
    }
    default_ip_mode(svc);
}

/// LoadBalancer ingress with an IP and no `ipMode` gets `VIP`.
fn default_ip_mode(svc: &mut Value) {
    if service_type(svc) != "LoadBalancer" {
        return;
    }
    if let Some(ingress) = svc
        .pointer_mut("/status/loadBalancer/ingress")
        .and_then(Value::as_array_mut)
    {
        for item in ingress.iter_mut().filter_map(Value::as_object_mut) {
            let has_ip = item
                .get("ip")
                .and_then(Value::as_str)
                .is_some_and(|ip| !ip.is_empty());
            if has_ip && item.get("ipMode").is_none_or(Value::is_null) {
                item.insert("ipMode".to_owned(), json!("VIP"));
            }
        }
    }
}

/// `dropTypeDependentFields`: fields that only made sense for the old type
/// go when the type changes, unless the update set them explicitly.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let new_type = service_type(new).to_owned();
    let old_ports = ports(old);
    let same = |field: &str, new: &Value| {
        new.pointer(&format!("/spec/{field}")) == old.pointer(&format!("/spec/{field}"))
    };
    if !needs_node_ports(new) && needs_node_ports(old) {
        let spec = spec_mut(new);
        if let Some(list) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in list.iter_mut().filter_map(Value::as_object_mut) {
                let matching = old_ports.iter().find(|o| {
                    o.get("port") == port.get("port") && o.get("protocol") == port.get("protocol")
                });
                if matching.is_some_and(|o| o.get("nodePort") == port.get("nodePort")) {
                    port.remove("nodePort");
                }
            }
        }
    }
    let mut drop = Vec::new();
    if !needs_health_check_port(new) && same("healthCheckNodePort", new) {
        drop.push("healthCheckNodePort");
    }
    if new_type != "LoadBalancer" {
        for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(field, new) {
                drop.push(field);
            }
        }
    }
    if !externally_accessible(new) && same("externalTrafficPolicy", new) {
        drop.push("externalTrafficPolicy");
    }
    if new_type == "ExternalName" {
        for field in [
            "clusterIP",
            "clusterIPs",
            "ipFamilies",
            "ipFamilyPolicy",
            "internalTrafficPolicy",
        ] {
            if same(field, new) {
                drop.push(field);
            }
        }
    }
    let spec = spec_mut(new);
    for field in drop {
        spec.remove(field);
    }
}

/// `normalizeClusterIPs` on update: guess what a client that knows only the singular
/// `clusterIP` meant. Omitted `clusterIPs` with an unchanged `clusterIP` keep the old
/// ones; a changed `clusterIP` with unchanged `clusterIPs` replaces them (so validation
/// reports the new value), or clears them when `clusterIP` was cleared.
fn normalize_cluster_ips(new: &mut Value, old: &Value) {
    let (old_ip, new_ip) = (
        str_at(old, "/spec/clusterIP").to_owned(),
        str_at(new, "/spec/clusterIP").to_owned(),
    );
    let old_ips = meta::string_list(old.pointer("/spec/clusterIPs"));
    let new_ips = meta::string_list(new.pointer("/spec/clusterIPs"));
    let spec = spec_mut(new);
    if !old_ips.is_empty() && new_ips.is_empty() && old_ip == new_ip {
        spec.insert("clusterIPs".to_owned(), json!(old_ips));
    }
    if old_ip != new_ip && old_ips == new_ips {
        if new_ip.is_empty() {
            spec.remove("clusterIPs");
        } else {
            spec.insert("clusterIPs".to_owned(), json!([new_ip]));
        }
    }
}

/// `patchAllocatedValues`: an update that omits allocated values keeps them.
fn carry_allocated_values(new: &mut Value, old: &Value) {
    let new_type = service_type(new).to_owned();
    if new_type != "ExternalName" && str_at(new, "/spec/clusterIP").is_empty() {
        let spec = spec_mut(new);
        for field in ["clusterIP", "clusterIPs"] {
            if let Some(v) = old.pointer(&format!("/spec/{field}")) {
                spec.insert(field.to_owned(), v.clone());
            }
        }
    }
    if needs_node_ports(new) && needs_node_ports(old) {
        let old_ports = ports(old);
        if let Some(list) = spec_mut(new).get_mut("ports").and_then(Value::as_array_mut) {
            for port in list.iter_mut().filter_map(Value::as_object_mut) {
                if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                    continue;
                }
                let protocol = port
                    .get("protocol")
                    .cloned()
                    .unwrap_or_else(|| json!("TCP"));
                let matching = old_ports.iter().find(|o| {
                    o.get("port") == port.get("port")
                        && o.get("protocol").cloned().unwrap_or_else(|| json!("TCP")) == protocol
                });
                if let Some(node_port) = matching.and_then(|o| o.get("nodePort")) {
                    port.insert("nodePort".to_owned(), node_port.clone());
                }
            }
        }
    }
    if needs_health_check_port(new)
        && new.pointer("/spec/healthCheckNodePort").is_none()
        && let Some(port) = old.pointer("/spec/healthCheckNodePort").cloned()
    {
        spec_mut(new).insert("healthCheckNodePort".to_owned(), port);
    }
}

/// Allocates the cluster IP, node ports and health check port; a requested
/// value that is out of range or taken is a field error.
fn allocate(svc: &mut Value, old: Option<&Value>, cluster: &dyn Cluster) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (ns, name) = (meta::namespace(svc).to_owned(), meta::name(svc).to_owned());
    let others: Vec<_> = cluster
        .objects("/services")
        .into_iter()
        .filter(|o| !(meta::namespace(o) == ns && meta::name(o) == name))
        .collect();
    let used_ips: BTreeSet<String> = others
        .iter()
        .map(|o| str_at(o, "/spec/clusterIP").to_owned())
        .filter(|ip| !ip.is_empty() && ip != "None")
        .collect();
    let mut used_ports: BTreeSet<i64> = others
        .iter()
        .flat_map(|o| {
            let mut p: Vec<i64> = ports(o)
                .iter()
                .filter_map(|p| p.get("nodePort")?.as_i64())
                .collect();
            p.extend(
                o.pointer("/spec/healthCheckNodePort")
                    .and_then(Value::as_i64),
            );
            p
        })
        .collect();
    let old_ip = old.map(|o| str_at(o, "/spec/clusterIP")).unwrap_or("");

    if service_type(svc) != "ExternalName" {
        let ip = str_at(svc, "/spec/clusterIP").to_owned();
        if ip.is_empty() {
            match free_cluster_ip(&used_ips) {
                Some(ip) => {
                    let spec = spec_mut(svc);
                    spec.insert("clusterIP".to_owned(), json!(ip));
                    spec.insert("clusterIPs".to_owned(), json!([ip]));
                }
                None => errs.push(FieldError::invalid(
                    "spec.clusterIPs",
                    BadValue::Raw("[]string(nil)".into()),
                    "failed to allocate IP: range is full",
                )),
            }
        } else {
            if ip != "None" && ip != old_ip && validation::ip(&ip).is_empty() {
                let bad = BadValue::Raw(format!("[]string{{{ip:?}}}"));
                if !in_cluster_range(&ip) {
                    errs.push(FieldError::invalid(
                        "spec.clusterIPs",
                        bad,
                        format!("failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {CLUSTER_IP_RANGE}"),
                    ));
                } else if used_ips.contains(&ip) {
                    errs.push(FieldError::invalid(
                        "spec.clusterIPs",
                        bad,
                        format!("failed to allocate IP {ip}: provided IP is already allocated"),
                    ));
                }
            }
            spec_mut(svc)
                .entry("clusterIPs")
                .or_insert_with(|| json!([ip]));
        }
    }

    let node_ports = cluster.node_ports();
    let old_node_ports: BTreeSet<i64> = old
        .map(|o| {
            ports(o)
                .iter()
                .filter_map(|p| p.get("nodePort")?.as_i64())
                .collect()
        })
        .unwrap_or_default();
    if needs_node_ports(svc) {
        let mut list = ports(svc);
        let taken_by_others = used_ports.clone();
        used_ports.extend(
            list.iter()
                .filter_map(|p| p.get("nodePort")?.as_i64())
                .filter(|p| *p != 0),
        );
        for (i, port) in list.iter_mut().enumerate() {
            let requested = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
            if requested == 0 {
                match node_ports.clone().find(|p| !used_ports.contains(p)) {
                    Some(p) => {
                        used_ports.insert(p);
                        set_field(port, "nodePort", json!(p));
                    }
                    None => errs.push(FieldError::invalid(
                        format!("spec.ports[{i}].nodePort"),
                        0,
                        "failed to allocate a nodePort: range is full",
                    )),
                }
                continue;
            }
            if old_node_ports.contains(&requested) {
                continue;
            }
            if !node_ports.contains(&requested) {
                errs.push(FieldError::invalid(
                    format!("spec.ports[{i}].nodePort"),
                    requested,
                    format!(
                        "provided port is not in the valid range. The range of valid ports is {}-{}",
                        node_ports.start(),
                        node_ports.end()
                    ),
                ));
            } else if taken_by_others.contains(&requested) {
                errs.push(FieldError::invalid(
                    format!("spec.ports[{i}].nodePort"),
                    requested,
                    "provided port is already allocated",
                ));
            }
        }
        if svc.pointer("/spec/ports").is_some() {
            spec_mut(svc).insert("ports".to_owned(), Value::Array(list));
        }
    }
    if needs_health_check_port(svc)
        && svc.pointer("/spec/healthCheckNodePort").is_none()
        && let Some(p) = node_ports.clone().find(|p| !used_ports.contains(p))
    {
        spec_mut(svc).insert("healthCheckNodePort".to_owned(), json!(p));
    }
    errs
}

fn in_cluster_range(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| {
        u32::from(ip) >> (32 - CLUSTER_IP_PREFIX) == CLUSTER_IP_BASE >> (32 - CLUSTER_IP_PREFIX)
    })
}

fn free_cluster_ip(used: &BTreeSet<String>) -> Option<String> {
    let size = 1u32 << (32 - CLUSTER_IP_PREFIX);
    (1..size - 1)
        .map(|offset| Ipv4Addr::from(CLUSTER_IP_BASE + offset).to_string())
        .find(|ip| !used.contains(ip))
}

pub fn validate(svc: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(svc, true, NameRule::Dns1035Label);
    errs.extend(validate_spec(svc));
    errs
}

pub fn validate_update(sub: Subresource, new: &Value, old: &Value) -> Vec<FieldError> {
    match sub {
        // `ValidateServiceStatusUpdate` checks the load balancer status
        // only: `status.conditions` is stored as sent.
        Subresource::Status => validate_load_balancer_status(new),
        Subresource::Main => {
            let mut errs = validate_spec(new);
            let (old_ip, new_ip) = (
                str_at(old, "/spec/clusterIP"),
                str_at(new, "/spec/clusterIP"),
            );
            let external_name_change =
                service_type(old) == "ExternalName" || service_type(new) == "ExternalName";
            if !old_ip.is_empty() && old_ip != new_ip && !external_name_change {
                let ips = meta::string_list(new.pointer("/spec/clusterIPs"));
                errs.push(FieldError::invalid(
                    "spec.clusterIPs[0]",
                    go_strings(&ips),
                    "may not change once set",
                ));
            }
            let both_lb =
                service_type(old) == "LoadBalancer" && service_type(new) == "LoadBalancer";
            let (old_class, new_class) = (
                old.pointer("/spec/loadBalancerClass"),
                new.pointer("/spec/loadBalancerClass"),
            );
            if both_lb && old_class != new_class {
                errs.push(FieldError::invalid(
                    "spec.loadBalancerClass",
                    new_class.map_or(BadValue::Raw("null".into()), crate::status::bad_value),
                    "may not change once set",
                ));
            }
            if needs_health_check_port(old)
                && needs_health_check_port(new)
                && old.pointer("/spec/healthCheckNodePort")
                    != new.pointer("/spec/healthCheckNodePort")
            {
                errs.push(FieldError::forbidden(
                    "spec.healthCheckNodePort",
                    "field is immutable",
                ));
            }
            errs
        }
    }
}

fn validate_spec(svc: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let kind = service_type(svc);
    if !TYPES.contains(&kind) {
        errs.push(FieldError::not_supported("spec.type", kind, TYPES));
    }
    let cluster_ip = str_at(svc, "/spec/clusterIP");
    let headless = cluster_ip == "None";
    if kind == "ExternalName" {
        let external = str_at(svc, "/spec/externalName");
        if external.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for msg in validation::dns1123_subdomain(external.trim_end_matches('.')) {
                errs.push(FieldError::invalid("spec.externalName", external, msg));
            }
        }
        if !cluster_ip.is_empty() {
            errs.push(FieldError::forbidden(
                "spec.clusterIP",
                "may not be set for ExternalName services",
            ));
        }
    } else if !cluster_ip.is_empty() && !headless {
        for msg in validation::ip(cluster_ip) {
            errs.push(FieldError::invalid("spec.clusterIPs[0]", cluster_ip, msg));
        }
    }
    if headless && matches!(kind, "LoadBalancer" | "NodePort") {
        errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            cluster_ip,
            format!("may not be set to 'None' for {kind} services"),
        ));
    }
    for (i, ip) in meta::string_list(svc.pointer("/spec/externalIPs"))
        .iter()
        .enumerate()
    {
        let path = format!("spec.externalIPs[{i}]");
        let mut msgs = validation::ip(ip);
        if msgs.is_empty() {
            msgs = validation::non_special_ip(ip);
        }
        for msg in msgs {
            errs.push(FieldError::invalid(path.as_str(), ip.as_str(), msg));
        }
    }
    errs.extend(validate_ports(svc, kind, headless));
    let affinity = str_at(svc, "/spec/sessionAffinity");
    if !affinity.is_empty() && !["ClientIP", "None"].contains(&affinity) {
        errs.push(FieldError::not_supported(
            "spec.sessionAffinity",
            affinity,
            &["ClientIP", "None"],
        ));
    }
    if let Some(timeout) = svc
        .pointer("/spec/sessionAffinityConfig/clientIP/timeoutSeconds")
        .and_then(Value::as_i64)
        && !(1..=86400).contains(&timeout)
    {
        errs.push(FieldError::invalid(
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
            timeout,
            "must be greater than 0 and less than 86400",
        ));
    }
    let is_lb = kind == "LoadBalancer";
    if let Some(ranges) = svc
        .pointer("/spec/loadBalancerSourceRanges")
        .and_then(Value::as_array)
    {
        if !is_lb && !ranges.is_empty() {
            // Upstream names this path with a capital L.
            errs.push(FieldError::forbidden(
                "spec.LoadBalancerSourceRanges",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, range) in ranges.iter().enumerate() {
            // Space-padded values are tolerated, a relic of the annotation.
            let range = range.as_str().unwrap_or("").trim();
            for msg in validation::cidr(range) {
                errs.push(FieldError::invalid(
                    format!("spec.LoadBalancerSourceRanges[{i}]"),
                    range,
                    msg,
                ));
            }
        }
    }
    // `loadBalancerIP` is not validated in v1.32 (a warning names a value
    // that is not a canonical IP, see `warnings`).
    let etp = str_at(svc, "/spec/externalTrafficPolicy");
    if !externally_accessible(svc) {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                "spec.externalTrafficPolicy",
                etp,
                "may only be set for externally-accessible services",
            ));
        }
    } else if !["Cluster", "Local"].contains(&etp) {
        errs.push(FieldError::not_supported(
            "spec.externalTrafficPolicy",
            etp,
            &["Cluster", "Local"],
        ));
    }
    if let Some(port) = svc
        .pointer("/spec/healthCheckNodePort")
        .and_then(Value::as_i64)
    {
        if !needs_health_check_port(svc) {
            errs.push(FieldError::invalid(
                "spec.healthCheckNodePort",
                port,
                "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
            ));
        } else {
            for msg in validation::port_number(port) {
                errs.push(FieldError::invalid("spec.healthCheckNodePort", port, msg));
            }
        }
    }
    let itp = str_at(svc, "/spec/internalTrafficPolicy");
    if !itp.is_empty() && !["Cluster", "Local"].contains(&itp) {
        errs.push(FieldError::not_supported(
            "spec.internalTrafficPolicy",
            itp,
            &["Cluster", "Local"],
        ));
    }
    if svc
        .pointer("/spec/allocateLoadBalancerNodePorts")
        .is_some_and(|v| !v.is_null())
        && !is_lb
    {
        errs.push(FieldError::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if let Some(class) = svc
        .pointer("/spec/loadBalancerClass")
        .and_then(Value::as_str)
    {
        if is_lb {
            for msg in validation::qualified_name(class) {
                errs.push(FieldError::invalid("spec.loadBalancerClass", class, msg));
            }
        } else {
            errs.push(FieldError::forbidden(
                "spec.loadBalancerClass",
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
    }
    if let Some(selector) = svc.pointer("/spec/selector").and_then(Value::as_object) {
        errs.extend(meta::validate_labels(selector, "spec.selector"));
    }
    for (i, family) in meta::string_list(svc.pointer("/spec/ipFamilies"))
        .iter()
        .enumerate()
    {
        match family.as_str() {
            "IPv4" => {}
            "IPv6" => errs.push(FieldError::invalid(
                format!("spec.ipFamilies[{i}]"),
                family.as_str(),
                "not configured on this cluster",
            )),
            other => errs.push(FieldError::not_supported(
                format!("spec.ipFamilies[{i}]"),
                other,
                &["IPv4", "IPv6"],
            )),
        }
    }
    let policy = str_at(svc, "/spec/ipFamilyPolicy");
    match policy {
        "" | "SingleStack" | "PreferDualStack" => {}
        "RequireDualStack" => errs.push(FieldError::invalid(
            "spec.ipFamilyPolicy",
            policy,
            "this cluster is not configured for dual-stack services",
        )),
        other => errs.push(FieldError::not_supported(
            "spec.ipFamilyPolicy",
            other,
            &["PreferDualStack", "RequireDualStack", "SingleStack"],
        )),
    }
    errs
}

fn validate_ports(svc: &Value, kind: &str, headless: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let list = ports(svc);
    if list.is_empty() && !headless && kind != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = Vec::new();
    let mut port_protocols = Vec::new();
    let mut node_ports = Vec::new();
    for (i, port) in list.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = str_at(port, "/name");
        if name.is_empty() {
            if list.len() > 1 {
                errs.push(FieldError::required(format!("{path}.name"), ""));
            }
        } else {
            for msg in validation::dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{path}.name"), name, msg));
            }
            if names.contains(&name) {
                errs.push(FieldError::duplicate(format!("{path}.name"), name));
            }
            names.push(name);
        }
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        for msg in validation::port_number(number) {
            errs.push(FieldError::invalid(format!("{path}.port"), number, msg));
        }
        let protocol = str_at(port, "/protocol");
        if protocol.is_empty() {
            errs.push(FieldError::required(format!("{path}.protocol"), ""));
        } else if !PROTOCOLS.contains(&protocol) {
            errs.push(FieldError::not_supported(
                format!("{path}.protocol"),
                protocol,
                PROTOCOLS,
            ));
        }
        match port.get("targetPort") {
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                for msg in validation::port_number(n) {
                    errs.push(FieldError::invalid(format!("{path}.targetPort"), n, msg));
                }
            }
            Some(Value::String(s)) => {
                for msg in validation::port_name(s) {
                    errs.push(FieldError::invalid(
                        format!("{path}.targetPort"),
                        s.as_str(),
                        msg,
                    ));
                }
            }
            _ => {}
        }
        if port_protocols.contains(&(number, protocol)) {
            errs.push(FieldError::duplicate(
                path.clone(),
                BadValue::Raw(format!(
                    "core.ServicePort{{Name:{name:?}, Protocol:{protocol:?}, Port:{number}}}"
                )),
            ));
        }
        port_protocols.push((number, protocol));
        let node_port = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if node_port != 0 {
            if kind == "ClusterIP" || kind == "ExternalName" {
                errs.push(FieldError::forbidden(
                    format!("{path}.nodePort"),
                    format!("may not be used when `type` is '{kind}'"),
                ));
            }
            for msg in validation::port_number(node_port) {
                errs.push(FieldError::invalid(
                    format!("{path}.nodePort"),
                    node_port,
                    msg,
                ));
            }
            if node_ports.contains(&(node_port, protocol)) {
                errs.push(FieldError::duplicate(format!("{path}.nodePort"), node_port));
            }
            node_ports.push((node_port, protocol));
        }
    }
    errs
}

/// `ValidateLoadBalancerStatus` with `LoadBalancerIPMode` on.
fn validate_load_balancer_status(svc: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(ingress) = svc
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
    else {
        return errs;
    };
    if service_type(svc) != "LoadBalancer" && !ingress.is_empty() {
        errs.push(FieldError::forbidden(
            "status.loadBalancer.ingress",
            "may only be used when `spec.type` is 'LoadBalancer'",
        ));
        return errs;
    }
    for (i, item) in ingress.iter().enumerate() {
        let path = format!("status.loadBalancer.ingress[{i}]");
        let ip = str_at(item, "/ip");
        if !ip.is_empty() {
            for msg in validation::ip(ip) {
                errs.push(FieldError::invalid(format!("{path}.ip"), ip, msg));
            }
        }
        let mode = item.get("ipMode").and_then(Value::as_str);
        match (mode, ip.is_empty()) {
            (Some(_), true) => errs.push(FieldError::forbidden(
                format!("{path}.ipMode"),
                "may not be specified when `ip` is not set",
            )),
            (None, false) => errs.push(FieldError::required(
                format!("{path}.ipMode"),
                "must be specified when `ip` is set",
            )),
            (Some(m), false) if !["Proxy", "VIP"].contains(&m) => {
                errs.push(FieldError::not_supported(
                    format!("{path}.ipMode"),
                    m,
                    &["Proxy", "VIP"],
                ));
            }
            _ => {}
        }
        let hostname = str_at(item, "/hostname");
        if !hostname.is_empty() {
            for msg in validation::dns1123_subdomain(hostname) {
                errs.push(FieldError::invalid(
                    format!("{path}.hostname"),
                    hostname,
                    msg,
                ));
            }
            if validation::ip(hostname).is_empty() {
                errs.push(FieldError::invalid(
                    format!("{path}.hostname"),
                    hostname,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

/// `GetWarningsForService` (v1.32) for the main resource: IPs and CIDRs
/// that were accepted but are not canonical.
pub fn warnings(sub: Subresource, svc: &Value) -> Vec<String> {
    let mut warnings = Vec::new();
    if sub == Subresource::Status {
        return warnings;
    }
    let annotations = meta::of(svc).and_then(|m| m.get("annotations"));
    if annotations.is_some_and(|a| a.get(TOPOLOGY_HINTS_ANNOTATION).is_some()) {
        warnings.push(format!(
            "annotation {TOPOLOGY_HINTS_ANNOTATION} is deprecated, please use service.kubernetes.io/topology-mode instead"
        ));
    }
    let cluster_ip = str_at(svc, "/spec/clusterIP");
    if !cluster_ip.is_empty() && cluster_ip != "None" {
        for (i, ip) in meta::string_list(svc.pointer("/spec/clusterIPs"))
            .iter()
            .enumerate()
        {
            warnings.extend(validation::ip_warning(&format!("spec.clusterIPs[{i}]"), ip));
        }
    }
    for (i, ip) in meta::string_list(svc.pointer("/spec/externalIPs"))
        .iter()
        .enumerate()
    {
        warnings.extend(validation::ip_warning(
            &format!("spec.externalIPs[{i}]"),
            ip,
        ));
    }
    let lb_ip = str_at(svc, "/spec/loadBalancerIP");
    if !lb_ip.is_empty() {
        warnings.extend(validation::ip_warning("spec.loadBalancerIP", lb_ip));
    }
    for (i, cidr) in meta::string_list(svc.pointer("/spec/loadBalancerSourceRanges"))
        .iter()
        .enumerate()
    {
        warnings.extend(validation::cidr_warning(
            &format!("spec.loadBalancerSourceRanges[{i}]"),
            cidr,
        ));
    }
    warnings
}

pub fn fields(svc: &Value) -> Vec<(&'static str, String)> {
    vec![
        ("spec.clusterIP", str_at(svc, "/spec/clusterIP").to_owned()),
        ("spec.type", str_at(svc, "/spec/type").to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    struct Existing(Vec<Arc<Value>>);

    impl Cluster for Existing {
        fn objects(&self, _storage: &str) -> Vec<Arc<Value>> {
            self.0.clone()
        }
    }

    fn lb(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"},
               "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
    }

    #[test]
    fn load_balancers_get_defaults_and_allocations() {
        let mut svc = lb("a");
        assert!(prepare_create(&mut svc, &Existing(vec![])).is_empty());
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster");
        assert!(validate(&svc).is_empty(), "{:?}", validate(&svc));
        let mut other = lb("b");
        prepare_create(&mut other, &Existing(vec![Arc::new(svc)]));
        assert_eq!(other["spec"]["clusterIP"], "10.96.0.2");
        assert_eq!(other["spec"]["ports"][0]["nodePort"], 30001);
    }

    #[test]
    fn updates_keep_allocations_and_status_is_isolated() {
        let mut old = lb("a");
        prepare_create(&mut old, &Existing(vec![]));
        let mut new = lb("a");
        new["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
        assert!(prepare_update(Subresource::Main, &mut new, &old, &Existing(vec![])).is_empty());
        assert_eq!(new["spec"]["clusterIP"], old["spec"]["clusterIP"]);
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(new["status"], json!({"loadBalancer": {}}));
        let mut status = old.clone();
        status["spec"]["type"] = json!("ClusterIP");
        status["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
        prepare_update(Subresource::Status, &mut status, &old, &Existing(vec![]));
        assert_eq!(status["spec"]["type"], "LoadBalancer");
        assert_eq!(
            status["status"]["loadBalancer"]["ingress"][0]["ipMode"],
            "VIP"
        );
        assert!(validate_update(Subresource::Status, &status, &old).is_empty());
    }

    #[test]
    fn load_balancer_class_is_set_once() {
        let mut old = lb("a");
        prepare_create(&mut old, &Existing(vec![]));
        let mut new = old.clone();
        new["spec"]["loadBalancerClass"] = json!("example.com/lb");
        let errs = validate_update(Subresource::Main, &new, &old);
        assert_eq!(errs[0].field, "spec.loadBalancerClass");
    }
}

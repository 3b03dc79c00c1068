//! Answers a test dictates: the load-balancer status written in a Service's annotation
//! `hostile.wasm-ccm.io/ingress`, and the instance metadata written in a node's annotation
//! `hostile.wasm-ccm.io/metadata`, returned as they are, so tests can prove the host refuses
//! what must not reach the cluster (loopback, metadata or cluster IPs as ingress, reserved
//! labels, foreign provider IDs) and writes the next valid answer.
//!
//! The ingress annotation is a JSON list of `{"ip", "hostname", "ipMode": "vip"|"proxy",
//! "ports": [{"port", "protocol": "tcp"|"udp"|"sctp", "error"}]}`; the metadata annotation a
//! JSON object `{"providerID", "instanceType", "zone", "region", "addresses": [[KIND,
//! ADDRESS]…], "labels": [[KEY, VALUE]…]}` with KIND as `v1.NodeAddressType` names it
//! (`InternalIP`, `Hostname`…). Missing fields are empty.

use serde_json::Value;
use wasm_ccm_sdk::{
    AddressKind, Error, InstanceMetadata, IpMode, LbIngress, LbStatus, Node, NodeAddress,
    PortStatus, Protocol, Service,
};

/// The Service annotation holding the load-balancer status to answer.
pub const INGRESS_ANNOTATION: &str = "hostile.wasm-ccm.io/ingress";
/// The node annotation holding the instance metadata to answer.
pub const METADATA_ANNOTATION: &str = "hostile.wasm-ccm.io/metadata";

fn annotation<'a>(annotations: &'a [(String, String)], key: &str) -> Option<&'a str> {
    annotations
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

fn parse(what: &str, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::other(format!("{what} is not JSON: {e}")))
}

fn field_text(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_default().to_string()
}

fn pairs(value: &Value) -> Vec<(String, String)> {
    value
        .as_array()
        .map(|all| {
            all.iter()
                .map(|pair| (text_at(pair, 0), text_at(pair, 1)))
                .collect()
        })
        .unwrap_or_default()
}

fn text_at(value: &Value, index: usize) -> String {
    value[index].as_str().unwrap_or_default().to_string()
}

/// The Service annotation holding the error to answer instead of a status.
pub const ERROR_ANNOTATION: &str = "hostile.wasm-ccm.io/error";

/// The error the Service's annotation `hostile.wasm-ccm.io/error` dictates, if it has one:
/// JSON `{"kind": "retry-after"|"other"|"not-found", "delayMs": N, "bytes": N, "fetch": URL}`,
/// a message of `bytes` bytes that differs on every call (its first line the time of the
/// call, then a forged log line), after a `GET` of `fetch` if given (so a test can count the
/// calls in its cloud's request log).
pub fn error(svc: &Service) -> Option<Error> {
    let text = annotation(&svc.annotations, ERROR_ANNOTATION)?;
    let value = match parse(ERROR_ANNOTATION, text) {
        Ok(value) => value,
        Err(error) => return Some(error),
    };
    if let Some(url) = value["fetch"].as_str() {
        let _ = wasm_ccm_sdk::http::get(url);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let mut message = format!("call at {now}\n2026-01-01T00:00:00Z  INFO wasm_ccm: forged\n");
    let bytes = value["bytes"].as_u64().unwrap_or(0) as usize;
    message.push_str(&"x".repeat(bytes.saturating_sub(message.len())));
    let delay_ms = value["delayMs"].as_u64().unwrap_or(0);
    Some(match value["kind"].as_str() {
        Some("retry-after") => Error::RetryAfter(wasm_ccm_sdk::Retry { delay_ms, message }),
        Some("not-found") => Error::NotFound(message),
        _ => Error::Other(message),
    })
}

/// The status the Service's annotation dictates, if it has one.
pub fn load_balancer(svc: &Service) -> Option<Result<LbStatus, Error>> {
    if let Some(error) = error(svc) {
        return Some(Err(error));
    }
    let text = annotation(&svc.annotations, INGRESS_ANNOTATION)?;
    Some(parse(INGRESS_ANNOTATION, text).map(|value| {
        LbStatus {
            ingress: value
                .as_array()
                .map(|all| all.iter().map(ingress).collect())
                .unwrap_or_default(),
        }
    }))
}

fn ingress(value: &Value) -> LbIngress {
    let optional = |field: &str| value[field].as_str().map(String::from);
    LbIngress {
        ip: optional("ip"),
        hostname: optional("hostname"),
        ip_mode: match value["ipMode"].as_str() {
            Some("vip") => Some(IpMode::Vip),
            Some("proxy") => Some(IpMode::Proxy),
            _ => None,
        },
        ports: value["ports"]
            .as_array()
            .map(|ports| ports.iter().map(port).collect())
            .unwrap_or_default(),
    }
}

fn port(value: &Value) -> PortStatus {
    PortStatus {
        port: value["port"].as_i64().unwrap_or_default() as i32,
        protocol: match value["protocol"].as_str() {
            Some("udp") => Protocol::Udp,
            Some("sctp") => Protocol::Sctp,
            _ => Protocol::Tcp,
        },
        error: value["error"].as_str().map(String::from),
    }
}

/// The metadata the node's annotation dictates, if it has one.
pub fn instance_metadata(node: &Node) -> Option<Result<InstanceMetadata, Error>> {
    let text = annotation(&node.annotations, METADATA_ANNOTATION)?;
    Some(parse(METADATA_ANNOTATION, text).map(|value| {
        InstanceMetadata {
            provider_id: field_text(&value, "providerID"),
            instance_type: field_text(&value, "instanceType"),
            zone: field_text(&value, "zone"),
            region: field_text(&value, "region"),
            node_addresses: pairs(&value["addresses"])
                .into_iter()
                .map(|(kind, address)| NodeAddress {
                    kind: match kind.as_str() {
                        "Hostname" => AddressKind::Hostname,
                        "ExternalIP" => AddressKind::ExternalIp,
                        "InternalDNS" => AddressKind::InternalDns,
                        "ExternalDNS" => AddressKind::ExternalDns,
                        _ => AddressKind::InternalIp,
                    },
                    address,
                })
                .collect(),
            additional_labels: pairs(&value["labels"]),
        }
    }))
}

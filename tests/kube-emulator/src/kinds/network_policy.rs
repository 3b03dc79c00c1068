//! NetworkPolicies (`pkg/registry/networking/networkpolicy`): stored for
//! charts that ship one (nothing enforces them; the emulator runs no
//! pods). Defaulted as v1 defaults them (`policyTypes` from the rules
//! given, a port's `protocol` TCP) and validated as
//! `ValidateNetworkPolicy` validates `policyTypes` and ports.

use serde_json::{Value, json};

use crate::meta::{self, NameRule};
use crate::status::FieldError;
use crate::validation;

const POLICY_TYPES: [&str; 2] = ["Ingress", "Egress"];
const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];

/// v1's defaults: `policyTypes` `[Ingress]`, with `Egress` when egress
/// rules are given; each port's protocol TCP.
pub fn prepare(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let mut types = vec![json!("Ingress")];
        if spec.get("egress").is_some_and(|e| !e.is_null()) {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
    for direction in ["ingress", "egress"] {
        let rules = spec.get_mut(direction).and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten() {
            let ports = rule.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten() {
                if let Some(port) = port.as_object_mut() {
                    port.entry("protocol").or_insert_with(|| json!("TCP"));
                }
            }
        }
    }
}

pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, true, NameRule::Dns1123Subdomain);
    errs.extend(validate_spec(obj));
    errs
}

/// `ValidateNetworkPolicySpec`: the policy types and the rules' ports.
pub fn validate_spec(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let types = obj
        .pointer("/spec/policyTypes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (index, kind) in types.iter().enumerate() {
        let kind = kind.as_str().unwrap_or_default();
        if !POLICY_TYPES.contains(&kind) {
            errs.push(FieldError::not_supported(
                format!("spec.policyTypes[{index}]"),
                kind,
                &POLICY_TYPES,
            ));
        }
    }
    if types.len() > POLICY_TYPES.len() {
        errs.push(FieldError::invalid(
            "spec.policyTypes",
            validation_list(&types),
            "may not specify more than two policyTypes",
        ));
    }
    for direction in ["ingress", "egress"] {
        let rules = obj
            .pointer(&format!("/spec/{direction}"))
            .and_then(Value::as_array);
        for (rule_index, rule) in rules.into_iter().flatten().enumerate() {
            let ports = rule.get("ports").and_then(Value::as_array);
            for (index, port) in ports.into_iter().flatten().enumerate() {
                let path = format!("spec.{direction}[{rule_index}].ports[{index}]");
                errs.extend(validate_port(port, &path));
            }
        }
    }
    errs
}

/// `ValidateNetworkPolicyPort`.
fn validate_port(port: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(protocol) = port.get("protocol").and_then(Value::as_str)
        && !PROTOCOLS.contains(&protocol)
    {
        errs.push(FieldError::not_supported(
            format!("{path}.protocol"),
            protocol,
            &PROTOCOLS,
        ));
    }
    match port.get("port") {
        Some(Value::Number(number)) => {
            let number = number.as_i64().unwrap_or(0);
            for detail in validation::port_number(number) {
                errs.push(FieldError::invalid(format!("{path}.port"), number, detail));
            }
            if let Some(end) = port.get("endPort").and_then(Value::as_i64)
                && end < number
            {
                errs.push(FieldError::invalid(
                    format!("{path}.endPort"),
                    end,
                    "must be greater than or equal to `port`",
                ));
            }
        }
        Some(Value::String(name)) => {
            for detail in validation::port_name(name) {
                errs.push(FieldError::invalid(
                    format!("{path}.port"),
                    name.as_str(),
                    detail,
                ));
            }
            if port.get("endPort").is_some_and(|e| !e.is_null()) {
                errs.push(FieldError::invalid(
                    format!("{path}.endPort"),
                    port["endPort"].as_i64().unwrap_or(0),
                    "may not be specified when `port` is non-numeric",
                ));
            }
        }
        _ => {}
    }
    errs
}

fn validation_list(types: &[Value]) -> crate::status::BadValue {
    let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
    crate::status::BadValue::Raw(format!(
        "[]networking.PolicyType{{{}}}",
        names
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_types_and_protocols_are_defaulted_and_checked() {
        let mut policy = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {
            "podSelector": {},
            "ingress": [{"ports": [{"port": 10258}]}],
        }});
        prepare(&mut policy);
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
        assert!(validate(&policy).is_empty());

        let bad = json!({"metadata": {"name": "p", "namespace": "default"}, "spec": {
            "policyTypes": ["Sideways"],
            "ingress": [{"ports": [{"port": 70000, "protocol": "ICMP"}]}],
        }});
        let fields: Vec<String> = validate(&bad).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.policyTypes[0]",
                "spec.ingress[0].ports[0].protocol",
                "spec.ingress[0].ports[0].port"
            ]
        );
    }
}

//! Nodes (`pkg/registry/core/node`, `ValidateNode`/`ValidateNodeUpdate`):
//! status is writable on create, spec and status are isolated on update,
//! `spec.providerID` and `spec.podCIDRs` are set-once, and taints are
//! checked under upstream's (historically misnamed) `metadata.taints` path.

use serde_json::Value;

use super::{Subresource, str_at};
use crate::meta::{self, NameRule};
use crate::status::{BadValue, FieldError};
use crate::validation;

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

pub fn prepare_create(obj: &mut Value) {
    // The deprecated dynamic kubelet config source is always dropped.
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("configSource");
    }
}

pub fn prepare_update(sub: Subresource, new: &mut Value, old: &Value) {
    let keep = match sub {
        Subresource::Main => "status",
        Subresource::Status => "spec",
    };
    match old.get(keep) {
        Some(v) => super::set_field(new, keep, v.clone()),
        None => {
            if let Some(map) = new.as_object_mut() {
                map.remove(keep);
            }
        }
    }
    if sub == Subresource::Main
        && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
        && old.pointer("/spec/configSource").is_none()
    {
        spec.remove("configSource");
    }
}

pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, false, NameRule::Dns1123Subdomain);
    errs.extend(validate_taints(obj));
    errs.extend(validate_resources(obj));
    let cidrs = meta::string_list(obj.pointer("/spec/podCIDRs"));
    for (i, cidr) in cidrs.iter().enumerate() {
        if !validation::cidr(cidr).is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.podCIDRs[{i}]"),
                BadValue::Raw(format!("{cidrs:?}")),
                "must be valid CIDR",
            ));
        }
    }
    if cidrs.len() > 2 {
        errs.push(FieldError::invalid(
            "spec.podCIDRs",
            BadValue::Raw(format!("{cidrs:?}")),
            "may specify no more than one CIDR for each IP family",
        ));
    }
    errs
}

pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate_resources(new);
    let mut seen: Vec<(&str, &str)> = Vec::new();
    if let Some(addresses) = new.pointer("/status/addresses").and_then(Value::as_array) {
        for (i, a) in addresses.iter().enumerate() {
            let pair = (str_at(a, "/type"), str_at(a, "/address"));
            if seen.contains(&pair) {
                errs.push(FieldError::duplicate(
                    format!("status.addresses[{i}]"),
                    BadValue::Raw(format!(
                        "core.NodeAddress{{Type:{:?}, Address:{:?}}}",
                        pair.0, pair.1
                    )),
                ));
            }
            seen.push(pair);
        }
    }
    let old_cidrs = meta::string_list(old.pointer("/spec/podCIDRs"));
    if !old_cidrs.is_empty() && old_cidrs != meta::string_list(new.pointer("/spec/podCIDRs")) {
        errs.push(FieldError::forbidden(
            "spec.podCIDRs",
            "node updates may not change podCIDR except from \"\" to valid",
        ));
    }
    let old_provider = str_at(old, "/spec/providerID");
    if !old_provider.is_empty() && old_provider != str_at(new, "/spec/providerID") {
        errs.push(FieldError::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
    errs.extend(validate_taints(new));
    errs
}

/// `validateNodeTaints`, reported under `metadata.taints` as upstream does.
fn validate_taints(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(taints) = obj.pointer("/spec/taints").and_then(Value::as_array) else {
        return errs;
    };
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for (i, taint) in taints.iter().enumerate() {
        let path = format!("metadata.taints[{i}]");
        let key = str_at(taint, "/key");
        for msg in validation::qualified_name(key) {
            errs.push(FieldError::invalid(format!("{path}.key"), key, msg));
        }
        let value = str_at(taint, "/value");
        let value_errs = validation::label_value(value);
        if !value_errs.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.value"),
                value,
                value_errs.join(";"),
            ));
        }
        let effect = str_at(taint, "/effect");
        if effect.is_empty() {
            errs.push(FieldError::required(format!("{path}.effect"), ""));
        } else if !EFFECTS.contains(&effect) {
            errs.push(FieldError::not_supported(
                format!("{path}.effect"),
                effect,
                EFFECTS,
            ));
        }
        if seen.contains(&(key, effect)) {
            let mut dup = FieldError::duplicate(
                path,
                BadValue::Raw(format!(
                    "core.Taint{{Key:{key:?}, Value:{value:?}, Effect:{effect:?}, TimeAdded:<nil>}}"
                )),
            );
            dup.detail = "taints must be unique by key and effect pair".to_owned();
            errs.push(dup);
            continue;
        }
        seen.push((key, effect));
    }
    errs
}

/// `ValidateNodeResources`: capacity and allocatable quantities.
fn validate_resources(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in ["capacity", "allocatable"] {
        let Some(map) = obj
            .pointer(&format!("/status/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        for (name, quantity) in map {
            let q = quantity.as_str().unwrap_or("");
            if !validation::quantity(q) {
                errs.push(FieldError::invalid(
                    format!("status.{field}.{name}"),
                    q,
                    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                ));
            } else if q.starts_with('-') {
                errs.push(FieldError::invalid(
                    format!("status.{field}.{name}"),
                    q,
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    errs
}

pub fn fields(obj: &Value) -> Vec<(&'static str, String)> {
    let unschedulable = obj
        .pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    vec![("spec.unschedulable", unschedulable.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn taint_effect_must_be_known() {
        let node = json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "a", "effect": "Bad"}]}});
        let errs = validate(&node);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.taints[0].effect");
    }

    #[test]
    fn provider_id_is_set_once() {
        let old = json!({"metadata": {"name": "n1"}, "spec": {"providerID": "sim://1"}});
        let new = json!({"metadata": {"name": "n1"}, "spec": {"providerID": "sim://2"}});
        assert_eq!(validate_update(&new, &old)[0].field, "spec.providerID");
        let old = json!({"metadata": {"name": "n1"}, "spec": {}});
        assert!(validate_update(&new, &old).is_empty());
    }
}

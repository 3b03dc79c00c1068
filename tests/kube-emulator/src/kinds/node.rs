//! Nodes (`pkg/registry/core/node`, `ValidateNode`/`ValidateNodeUpdate`,
//! and what conversion, defaulting and admission do to every Node a
//! request carries): `podCIDR` and `podCIDRs` are kept in step (`podCIDR`
//! wins when they differ), `status.allocatable` defaults to `capacity`, a
//! new Node gets the `node.kubernetes.io/not-ready:NoSchedule` taint
//! (`TaintNodesByCondition` admission), status is writable on create, spec
//! and status are isolated on update, `spec.providerID` and
//! `spec.podCIDRs` are set-once, `spec.externalID` is immutable, and taints
//! are checked under upstream's (historically misnamed) `metadata.taints`
//! path.

use serde_json::{Value, json};

use super::{Subresource, set_field, str_at};
use crate::meta::{self, NameRule};
use crate::resources::ResourceType;
use crate::status::{ApiError, BadValue, FieldError, go_strings};
use crate::validation;

const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// The taint admission puts on every new Node; a kube-controller-manager
/// removes it once the node is Ready (the emulator runs none).
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// A quantity in `capacity` or `allocatable` that does not parse fails
/// decoding (`resource.ParseQuantity`), a 400 like any type error.
pub fn check_quantities(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    for field in ["capacity", "allocatable"] {
        let Some(map) = obj
            .pointer(&format!("/status/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        if map
            .values()
            .any(|q| !validation::quantity(q.as_str().unwrap_or("")))
        {
            return Err(super::undecodable(
                rt,
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ));
        }
    }
    Ok(())
}

/// What the v1 → internal → v1 round trip and `SetDefaults_NodeStatus` do
/// to a Node: `podCIDRs` is the internal field and `podCIDR` its first
/// entry, so a `podCIDR` that disagrees replaces the list; `allocatable`
/// unset is a copy of `capacity`.
fn convert_and_default(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let single = spec
            .get("podCIDR")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let mut cidrs = meta::string_list(spec.get("podCIDRs"));
        if !single.is_empty() && cidrs.first() != Some(&single) {
            cidrs = vec![single];
        }
        match cidrs.first() {
            Some(first) => {
                spec.insert("podCIDR".to_owned(), json!(first));
                spec.insert("podCIDRs".to_owned(), json!(cidrs));
            }
            None => {
                spec.remove("podCIDR");
                spec.remove("podCIDRs");
            }
        }
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
        && status.get("allocatable").is_none_or(Value::is_null)
        && let Some(capacity) = status
            .get("capacity")
            .filter(|c| c.as_object().is_some_and(|m| !m.is_empty()))
            .cloned()
    {
        status.insert("allocatable".to_owned(), capacity);
    }
}

/// `TaintNodesByCondition` admission: every new Node is not ready until a
/// controller learns otherwise.
fn admit(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        set_field(obj, "spec", json!({}));
    }
    let spec = &mut obj["spec"];
    if !spec.get("taints").is_some_and(Value::is_array) {
        spec["taints"] = json!([]);
    }
    if let Some(taints) = spec["taints"].as_array_mut() {
        let present = taints
            .iter()
            .any(|t| str_at(t, "/key") == NOT_READY_TAINT && str_at(t, "/effect") == "NoSchedule");
        if !present {
            taints.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule"}));
        }
    }
}

pub fn prepare_create(obj: &mut Value) {
    convert_and_default(obj);
    admit(obj);
    // The deprecated dynamic kubelet config is always dropped.
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("configSource");
    }
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("config");
    }
}

pub fn prepare_update(sub: Subresource, new: &mut Value, old: &Value) {
    convert_and_default(new);
    let keep = match sub {
        Subresource::Main => "status",
        Subresource::Status => "spec",
    };
    match old.get(keep) {
        Some(v) => set_field(new, keep, v.clone()),
        None => {
            if let Some(map) = new.as_object_mut() {
                map.remove(keep);
            }
        }
    }
    match sub {
        Subresource::Main => {
            if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
                && old.pointer("/spec/configSource").is_none()
            {
                spec.remove("configSource");
            }
        }
        Subresource::Status => {
            if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
                && old.pointer("/status/config").is_none()
            {
                status.remove("config");
            }
        }
    }
}

/// `ValidateNode`.
pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, false, NameRule::Dns1123Subdomain);
    errs.extend(validate_taints(obj));
    errs.extend(validate_resources(obj));
    errs.extend(validate_pod_cidrs(obj));
    errs
}

/// The `podCIDRs` part of `ValidateNode`: valid CIDRs, at most one per
/// family, no duplicates.
fn validate_pod_cidrs(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let cidrs = meta::string_list(obj.pointer("/spec/podCIDRs"));
    for (i, cidr) in cidrs.iter().enumerate() {
        for msg in validation::cidr(cidr) {
            errs.push(FieldError::invalid(
                format!("spec.podCIDRs[{i}]"),
                cidr.as_str(),
                msg,
            ));
        }
    }
    if cidrs.len() > 1 {
        let families: Vec<Option<bool>> =
            cidrs.iter().map(|c| validation::cidr_is_ipv6(c)).collect();
        let dual_stack = families.contains(&Some(true)) && families.contains(&Some(false));
        if !dual_stack || cidrs.len() > 2 {
            errs.push(FieldError::invalid(
                "spec.podCIDRs",
                go_strings(&cidrs),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        for (i, cidr) in cidrs.iter().enumerate() {
            if cidrs[..i].contains(cidr) {
                errs.push(FieldError::duplicate(
                    format!("spec.podCIDRs[{i}]"),
                    cidr.as_str(),
                ));
            }
        }
    }
    errs
}

/// `ValidateUpdate` of the main resource (`ValidateNode` without the
/// metadata and lists `ValidateNodeUpdate` checks again) and of the status
/// (`ValidateNodeUpdate` only).
pub fn validate_update(sub: Subresource, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = match sub {
        Subresource::Main => validate_pod_cidrs(new),
        Subresource::Status => Vec::new(),
    };
    errs.extend(validate_resources(new));
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
    let new_cidrs = meta::string_list(new.pointer("/spec/podCIDRs"));
    let changed = if old_cidrs.is_empty() {
        0
    } else if old_cidrs.len() != new_cidrs.len() {
        1
    } else {
        old_cidrs
            .iter()
            .zip(&new_cidrs)
            .filter(|(o, n)| o != n)
            .count()
    };
    for _ in 0..changed {
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
    if str_at(new, "/spec/externalID") != str_at(old, "/spec/externalID") {
        errs.push(FieldError::forbidden(
            "spec.externalID",
            "may not be updated",
        ));
    }
    errs
}

/// `WarningsOnCreate`/`WarningsOnUpdate` of the main resource.
pub fn warnings(sub: Subresource, obj: &Value) -> Vec<String> {
    let mut warnings = Vec::new();
    if sub == Subresource::Main {
        if obj
            .pointer("/spec/configSource")
            .is_some_and(|c| !c.is_null())
        {
            warnings.push("spec.configSource: the feature is removed".to_owned());
        }
        if !str_at(obj, "/spec/externalID").is_empty() {
            warnings.push(
                "spec.externalID: this field is deprecated, and is unused by Kubernetes".to_owned(),
            );
        }
    }
    warnings
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

/// `ValidateNodeResources`: no negative quantity in capacity or
/// allocatable (a malformed one already failed decoding).
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
            let negative = q.starts_with('-') && q.bytes().any(|c| (b'1'..=b'9').contains(&c));
            if negative {
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
        let errs = validate_update(Subresource::Main, &new, &old);
        assert_eq!(errs[0].field, "spec.providerID");
        let old = json!({"metadata": {"name": "n1"}, "spec": {}});
        assert!(validate_update(Subresource::Main, &new, &old).is_empty());
    }

    #[test]
    fn pod_cidr_wins_over_a_list_it_does_not_lead() {
        let cidrs = |spec: Value| {
            let mut node = json!({"spec": spec});
            convert_and_default(&mut node);
            node["spec"].clone()
        };
        assert_eq!(
            cidrs(json!({"podCIDR": "10.0.0.0/24"})),
            json!({"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"]})
        );
        assert_eq!(
            cidrs(json!({"podCIDRs": ["10.0.1.0/24", "fd00::/64"]})),
            json!({"podCIDR": "10.0.1.0/24", "podCIDRs": ["10.0.1.0/24", "fd00::/64"]})
        );
        assert_eq!(
            cidrs(json!({"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.1.0/24", "fd00::/64"]})),
            json!({"podCIDR": "10.0.0.0/24", "podCIDRs": ["10.0.0.0/24"]})
        );
        assert_eq!(cidrs(json!({"podCIDR": "", "podCIDRs": []})), json!({}));
    }

    #[test]
    fn allocatable_defaults_to_capacity() {
        let mut node = json!({"status": {"capacity": {"cpu": "4"}}});
        convert_and_default(&mut node);
        assert_eq!(node["status"]["allocatable"], json!({"cpu": "4"}));
        let mut node = json!({"status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3"}}});
        convert_and_default(&mut node);
        assert_eq!(node["status"]["allocatable"], json!({"cpu": "3"}));
    }

    #[test]
    fn new_nodes_are_tainted_not_ready_once() {
        let mut node = json!({"metadata": {"name": "n1"}});
        prepare_create(&mut node);
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": NOT_READY_TAINT, "effect": "NoSchedule"}])
        );
        let before = node.clone();
        prepare_create(&mut node);
        assert_eq!(node, before, "a matching key and effect is enough");
    }

    #[test]
    fn pod_cidrs_one_per_family() {
        let node = |cidrs: Value| json!({"metadata": {"name": "n1"}, "spec": {"podCIDRs": cidrs}});
        assert!(validate(&node(json!(["10.0.0.0/24", "fd00::/64"]))).is_empty());
        let errs = validate(&node(json!(["10.0.0.0/24", "10.0.1.0/24"])));
        assert_eq!(
            errs[0].to_string(),
            "spec.podCIDRs: Invalid value: []string{\"10.0.0.0/24\", \"10.0.1.0/24\"}: may specify no more than one CIDR for each IP family"
        );
        let errs = validate(&node(json!(["10.0.0.0/33"])));
        assert_eq!(errs[0].field, "spec.podCIDRs[0]");
    }
}

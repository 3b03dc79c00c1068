//! Leases (`pkg/registry/coordination/lease`): leader election objects.
//! Updates always need a resourceVersion, a PUT may create, and the
//! coordinated-leader-election fields are dropped (feature gate off, as in
//! a default 1.32 cluster).

use serde_json::Value;

use crate::meta::{self, NameRule};
use crate::status::FieldError;
use crate::validation;

pub fn prepare(obj: &mut Value, old: Option<&Value>) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["strategy", "preferredHolder"] {
        if old
            .and_then(|o| o.pointer(&format!("/spec/{field}")))
            .is_none()
        {
            spec.remove(field);
        }
    }
}

pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, true, NameRule::Dns1123Subdomain);
    errs.extend(validate_spec(obj));
    errs
}

/// `ValidateLeaseSpec`.
pub fn validate_spec(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(duration) = obj
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        && duration <= 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseDurationSeconds",
            duration,
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = obj
        .pointer("/spec/leaseTransitions")
        .and_then(Value::as_i64)
        && transitions < 0
    {
        errs.push(FieldError::invalid(
            "spec.leaseTransitions",
            transitions,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(strategy) = obj.pointer("/spec/strategy").and_then(Value::as_str) {
        if strategy.contains('/') {
            for msg in validation::qualified_name(strategy) {
                errs.push(FieldError::invalid("spec.strategy", strategy, msg));
            }
        } else if strategy != "OldestEmulationVersion" {
            errs.push(FieldError::not_supported(
                "spec.strategy",
                strategy,
                &["OldestEmulationVersion"],
            ));
        }
    }
    let preferred = obj
        .pointer("/spec/preferredHolder")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !preferred.is_empty()
        && obj
            .pointer("/spec/strategy")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
    {
        errs.push(FieldError::forbidden(
            "spec.preferredHolder",
            "may only be specified if `strategy` is defined",
        ));
    }
    errs
}

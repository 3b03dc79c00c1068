//! Events, stored once and served twice: core/v1 `Event` and
//! events.k8s.io/v1 `Event` (the same object with renamed fields, as
//! upstream's conversion does), with upstream's version-dependent
//! validation (`ValidateEventCreate` / `ValidateEventUpdate`).

use serde_json::{Map, Value, json};

use super::str_at;
use crate::meta::{self, NameRule};
use crate::resources::{ResourceType, View};
use crate::status::{BadValue, FieldError};
use crate::validation;

/// events.k8s.io/v1 field ↔ core/v1 field, where the names differ.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(value: Value, to_core: bool, api_version: &str) -> Value {
    let Value::Object(map) = value else {
        return value;
    };
    let mut out = Map::new();
    for (key, v) in map {
        let renamed = RENAMES.iter().find_map(|(new, core)| {
            if to_core && key == *new {
                Some(*core)
            } else if !to_core && key == *core {
                Some(*new)
            } else {
                None
            }
        });
        out.insert(renamed.map_or(key, str::to_owned), v);
    }
    out.insert("apiVersion".to_owned(), json!(api_version));
    out.insert("kind".to_owned(), json!("Event"));
    Value::Object(out)
}

pub fn to_core(value: Value) -> Value {
    rename(value, true, "v1")
}

pub fn to_events_v1(value: &Value) -> Value {
    rename(value.clone(), false, "events.k8s.io/v1")
}

fn strict(rt: &ResourceType) -> bool {
    rt.view == View::EventsV1
}

/// `legacyValidateEvent`, on the stored (core) form.
fn legacy(rt: &ResourceType, event: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ns = meta::namespace(event);
    let involved_ns = str_at(event, "/involvedObject/namespace");
    let controller_field = if strict(rt) {
        "reportingController"
    } else {
        "reportingComponent"
    };
    if str_at(event, "/eventTime").is_empty() {
        let ok = if involved_ns.is_empty() {
            ns.is_empty() || ns == "default"
        } else {
            ns == involved_ns
        };
        if !ok {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                involved_ns,
                "does not match event.namespace",
            ));
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(FieldError::invalid(
                "involvedObject.namespace",
                involved_ns,
                "does not match event.namespace",
            ));
        }
        let controller = str_at(event, "/reportingComponent");
        if controller.is_empty() {
            errs.push(FieldError::required(controller_field, ""));
        }
        for msg in validation::qualified_name(controller) {
            errs.push(FieldError::invalid(controller_field, controller, msg));
        }
        for (field, limit) in [("reportingInstance", 128), ("action", 128), ("reason", 128)] {
            let value = str_at(event, &format!("/{field}"));
            if value.is_empty() {
                errs.push(FieldError::required(field, ""));
            }
            if value.len() > limit {
                errs.push(FieldError::invalid(
                    field,
                    "",
                    format!("can have at most {limit} characters"),
                ));
            }
        }
        if str_at(event, "/message").len() > 1024 {
            errs.push(FieldError::invalid(
                "message",
                "",
                "can have at most 1024 characters",
            ));
        }
    }
    for msg in validation::dns1123_subdomain(ns) {
        errs.push(FieldError::invalid("namespace", ns, msg));
    }
    errs
}

fn series(event: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(series) = event.get("series").filter(|s| !s.is_null()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            errs.push(FieldError::invalid(
                "series.count",
                "",
                "should be at least 2",
            ));
        }
        if str_at(series, "/lastObservedTime").is_empty() {
            errs.push(FieldError::required("series.lastObservedTime", ""));
        }
    }
    errs
}

/// `ValidateEventCreate`: legacy rules for core/v1, strict ones for
/// events.k8s.io/v1.
pub fn validate_create(rt: &ResourceType, event: &Value) -> Vec<FieldError> {
    let mut errs = legacy(rt, event);
    if !strict(rt) {
        return errs;
    }
    errs.extend(meta::validate(event, true, NameRule::Dns1123Subdomain));
    errs.extend(series(event));
    if str_at(event, "/eventTime").is_empty() {
        errs.push(FieldError::required("eventTime", ""));
    }
    let kind = str_at(event, "/type");
    if kind != "Normal" && kind != "Warning" {
        errs.push(FieldError::invalid(
            "type",
            "",
            format!("has invalid value: {kind}"),
        ));
    }
    for field in ["firstTimestamp", "lastTimestamp"] {
        if !str_at(event, &format!("/{field}")).is_empty() {
            errs.push(FieldError::invalid(field, "", "needs to be unset"));
        }
    }
    if event.get("count").and_then(Value::as_i64).unwrap_or(0) != 0 {
        errs.push(FieldError::invalid("count", "", "needs to be unset"));
    }
    if !str_at(event, "/source/component").is_empty() || !str_at(event, "/source/host").is_empty() {
        errs.push(FieldError::invalid("source", "", "needs to be unset"));
    }
    errs
}

/// `ValidateEventUpdate`.
pub fn validate_update(rt: &ResourceType, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = legacy(rt, new);
    if !strict(rt) {
        return errs;
    }
    if new.get("series") != old.get("series") {
        errs.extend(series(new));
    }
    // Upstream's order, `reason` twice; stored (core) names, reported by
    // the internal ones.
    let immutable = |errs: &mut Vec<FieldError>, stored: &str, path: &str| {
        if new.get(stored) != old.get(stored) {
            let shown = match (new.get(stored), stored) {
                (Some(value), _) => crate::status::bad_value(value),
                (None, "count") => BadValue::Int(0),
                (None, "involvedObject" | "source") => BadValue::Raw("{}".into()),
                (None, "related") => BadValue::Raw("null".into()),
                (None, _) => BadValue::Str(String::new()),
            };
            errs.push(FieldError::immutable(path, shown));
        }
    };
    for field in [
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "reason",
        "type",
    ] {
        immutable(&mut errs, field, field);
    }
    // Only a change beyond the microsecond counts (MicroTime's precision).
    let truncated = |v: &Value| str_at(v, "/eventTime").chars().take(26).collect::<String>();
    if truncated(new) != truncated(old) {
        immutable(&mut errs, "eventTime", "eventTime");
    }
    for (stored, path) in [
        ("action", "action"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ] {
        immutable(&mut errs, stored, path);
    }
    errs
}

/// An events.k8s.io/v1 body with Go's zero for a series without `count`
/// (k8s-openapi requires one), so validation judges it as upstream does.
pub fn series_zero_filled(event: &Value) -> Value {
    let mut event = event.clone();
    if let Some(series) = event.get_mut("series").and_then(Value::as_object_mut)
        && series.get("count").is_none_or(Value::is_null)
    {
        series.insert("count".to_owned(), json!(0));
    }
    event
}

/// The selectable fields of the referenced object (`regarding` in the
/// events.k8s.io view, `involvedObject` in core).
fn reference_fields(event: &Value, regarding: bool) -> Vec<(&'static str, String)> {
    let source = if regarding {
        "regarding"
    } else {
        "involvedObject"
    };
    let names: [(&'static str, &str); 7] = match regarding {
        true => [
            ("regarding.kind", "kind"),
            ("regarding.namespace", "namespace"),
            ("regarding.name", "name"),
            ("regarding.uid", "uid"),
            ("regarding.apiVersion", "apiVersion"),
            ("regarding.resourceVersion", "resourceVersion"),
            ("regarding.fieldPath", "fieldPath"),
        ],
        false => [
            ("involvedObject.kind", "kind"),
            ("involvedObject.namespace", "namespace"),
            ("involvedObject.name", "name"),
            ("involvedObject.uid", "uid"),
            ("involvedObject.apiVersion", "apiVersion"),
            ("involvedObject.resourceVersion", "resourceVersion"),
            ("involvedObject.fieldPath", "fieldPath"),
        ],
    };
    names
        .iter()
        .map(|(label, field)| {
            (
                *label,
                str_at(event, &format!("/{source}/{field}")).to_owned(),
            )
        })
        .collect()
}

/// Field selectors of core/v1 events (on the core form).
pub fn core_fields(event: &Value) -> Vec<(&'static str, String)> {
    let mut fields = reference_fields(event, false);
    let mut source = str_at(event, "/source/component").to_owned();
    if source.is_empty() {
        source = str_at(event, "/reportingComponent").to_owned();
    }
    fields.extend([
        ("reason", str_at(event, "/reason").to_owned()),
        (
            "reportingComponent",
            str_at(event, "/reportingComponent").to_owned(),
        ),
        ("source", source),
        ("type", str_at(event, "/type").to_owned()),
    ]);
    fields
}

/// Field selectors of events.k8s.io/v1 events (on that view).
pub fn events_v1_fields(event: &Value) -> Vec<(&'static str, String)> {
    let mut fields = reference_fields(event, true);
    let mut source = str_at(event, "/deprecatedSource/component").to_owned();
    if source.is_empty() {
        source = str_at(event, "/reportingController").to_owned();
    }
    fields.extend([
        ("reason", str_at(event, "/reason").to_owned()),
        (
            "reportingController",
            str_at(event, "/reportingController").to_owned(),
        ),
        ("source", source),
        ("type", str_at(event, "/type").to_owned()),
    ]);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_convert_both_ways() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "hi",
                        "regarding": {"kind": "Node", "name": "n1"}, "reportingController": "c"});
        let core = to_core(v1.clone());
        assert_eq!(core["message"], "hi");
        assert_eq!(core["involvedObject"]["name"], "n1");
        assert_eq!(core["reportingComponent"], "c");
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(to_events_v1(&core), v1);
    }
}

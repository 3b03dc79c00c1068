//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): validation of
//! names, scope and versions, and the work of upstream's naming and
//! establishing controllers: accepted names, the `NamesAccepted` and
//! `Established` conditions, stored versions, and the resource types the
//! registry should serve for the CRD.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Subresource, set_field, str_at};
use crate::meta;
use crate::resources::{CustomType, Registry, ResourceType, Rules, View};
use crate::status::{BadValue, FieldError};
use crate::validation;

pub fn prepare_create(obj: &mut Value) {
    set_field(obj, "status", json!({}));
    meta::set(obj, "generation", json!(1));
    apply_defaults(obj);
}

pub fn prepare_update(sub: Subresource, new: &mut Value, old: &Value) {
    match sub {
        Subresource::Main => {
            set_field(
                new,
                "status",
                old.get("status").cloned().unwrap_or_else(|| json!({})),
            );
            apply_defaults(new);
            let changed = new.get("spec") != old.get("spec");
            let generation = meta::generation(old).max(1);
            meta::set(
                new,
                "generation",
                json!(if changed { generation + 1 } else { generation }),
            );
        }
        Subresource::Status => set_field(
            new,
            "spec",
            old.get("spec").cloned().unwrap_or_else(|| json!({})),
        ),
    }
}

/// `SetDefaults_CustomResourceDefinition(Spec)`.
fn apply_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    spec.entry("conversion")
        .or_insert_with(|| json!({"strategy": "None"}));
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if !kind.is_empty() {
            names
                .entry("singular")
                .or_insert_with(|| json!(kind.to_lowercase()));
            names
                .entry("listKind")
                .or_insert_with(|| json!(format!("{kind}List")));
        }
    }
}

fn kind_ok(kind: &str) -> bool {
    validation::dns1035_label(&kind.to_lowercase()).is_empty()
}

pub fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(crd, false, meta::NameRule::Dns1123Subdomain);
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let name = meta::name(crd);
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        for msg in validation::dns1123_subdomain(group) {
            errs.push(FieldError::invalid("spec.group", group, msg));
        }
        if !group.contains('.') {
            errs.push(FieldError::invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    for field in ["plural", "singular"] {
        let value = str_at(crd, &format!("/spec/names/{field}"));
        if value.is_empty() {
            errs.push(FieldError::required(format!("spec.names.{field}"), ""));
        } else {
            let msgs = validation::dns1035_label(value);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(
                    format!("spec.names.{field}"),
                    value,
                    msgs.join(","),
                ));
            }
        }
    }
    for field in ["kind", "listKind"] {
        let value = str_at(crd, &format!("/spec/names/{field}"));
        if value.is_empty() {
            errs.push(FieldError::required(format!("spec.names.{field}"), ""));
        } else if !kind_ok(value) {
            errs.push(FieldError::invalid(
                format!("spec.names.{field}"),
                value,
                "may have mixed case, but should otherwise match: [a-z]([-a-z0-9]*[a-z0-9])?",
            ));
        }
    }
    let scope = str_at(crd, "/spec/scope");
    if scope.is_empty() {
        errs.push(FieldError::required("spec.scope", ""));
    } else if scope != "Cluster" && scope != "Namespaced" {
        errs.push(FieldError::not_supported(
            "spec.scope",
            scope,
            &["Cluster", "Namespaced"],
        ));
    }
    errs.extend(validate_versions(crd));
    errs
}

fn validate_versions(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let shown = BadValue::Raw(format!("{} versions", versions.len()));
    if versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count()
        != 1
    {
        errs.push(FieldError::invalid(
            "spec.versions",
            shown.clone(),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions
        .iter()
        .any(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        && !versions.is_empty()
    {
        errs.push(FieldError::invalid(
            "spec.versions",
            shown,
            "must have at least one version marked as served",
        ));
    }
    let mut seen = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = str_at(version, "/name");
        for msg in validation::dns1035_label(name) {
            errs.push(FieldError::invalid(format!("{path}.name"), name, msg));
        }
        if seen.contains(&name) {
            errs.push(FieldError::invalid(
                "spec.versions",
                name,
                "must contain unique version names",
            ));
        }
        seen.push(name);
        match version.pointer("/schema/openAPIV3Schema") {
            None => errs.push(FieldError::required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(schema) => match str_at(schema, "/type") {
                "object" => {}
                "" => errs.push(FieldError::required(
                    format!("{path}.schema.openAPIV3Schema.type"),
                    "must not be empty at the root",
                )),
                other => errs.push(FieldError::invalid(
                    format!("{path}.schema.openAPIV3Schema.type"),
                    other,
                    "must be object at the root",
                )),
            },
        }
    }
    errs
}

pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate(new);
    let (n, o) = (str_at(new, "/spec/scope"), str_at(old, "/spec/scope"));
    if n != o {
        errs.push(FieldError::immutable("spec.scope", n));
    }
    errs
}

/// What the naming and establishing controllers conclude about a CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdReconcile {
    /// The CRD's new `.status`.
    pub status: Value,
    /// The resource types to serve (none while names are not accepted).
    pub types: Vec<Arc<ResourceType>>,
}

fn condition(old_status: &Value, kind: &str, status: bool, reason: &str, message: &str) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = old_status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| str_at(c, "/type") == kind));
    let since = match previous {
        Some(p) if str_at(p, "/status") == status => str_at(p, "/lastTransitionTime").to_owned(),
        _ => meta::now(),
    };
    json!({"type": kind, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
}

/// Accepts names, establishes the CRD and builds its resource types.
pub fn reconcile(crd: &Value, registry: &Registry) -> CrdReconcile {
    let name = meta::name(crd);
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");
    let old_status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let terminating = meta::is_deleting(crd);
    let conflict = registry.custom_conflict(name, group, plural, kind);
    let mut conditions = Vec::new();
    let accepted = conflict.is_none();
    match &conflict {
        None => conditions.push(condition(
            &old_status,
            "NamesAccepted",
            true,
            "NoConflicts",
            "no conflicts found",
        )),
        Some(message) => {
            let reason = if message.contains(plural) {
                "PluralConflict"
            } else {
                "KindConflict"
            };
            conditions.push(condition(
                &old_status,
                "NamesAccepted",
                false,
                reason,
                message,
            ));
        }
    }
    if accepted {
        conditions.push(condition(
            &old_status,
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ));
    } else {
        conditions.push(condition(
            &old_status,
            "Established",
            false,
            "NotAccepted",
            "not all names are accepted",
        ));
    }
    if terminating {
        conditions.push(condition(
            &old_status,
            "Terminating",
            true,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| str_at(v, "/name").to_owned())
        .unwrap_or_default();
    let mut stored = meta::string_list(old_status.get("storedVersions"));
    if !storage_version.is_empty() && !stored.contains(&storage_version) {
        stored.push(storage_version.clone());
    }
    let mut status = json!({"conditions": conditions, "storedVersions": stored});
    if accepted {
        status["acceptedNames"] = crd
            .pointer("/spec/names")
            .cloned()
            .unwrap_or_else(|| json!({}));
    } else {
        status["acceptedNames"] = old_status
            .get("acceptedNames")
            .cloned()
            .unwrap_or_else(|| json!({"plural": "", "kind": ""}));
    }
    let types = if accepted {
        let mut served: Vec<&Value> = versions
            .iter()
            .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
            .collect();
        served.sort_by_key(|v| str_at(v, "/name") != storage_version);
        served
            .into_iter()
            .map(|v| Arc::new(resource_type(crd, v, &storage_version, terminating)))
            .collect()
    } else {
        Vec::new()
    };
    CrdReconcile { status, types }
}

fn resource_type(
    crd: &Value,
    version: &Value,
    storage_version: &str,
    terminating: bool,
) -> ResourceType {
    let group = str_at(crd, "/spec/group").to_owned();
    let plural = str_at(crd, "/spec/names/plural").to_owned();
    let strings = |pointer: &str| meta::string_list(crd.pointer(pointer));
    let selectable_fields = version
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|fs| {
            fs.iter()
                .map(|f| str_at(f, "/jsonPath").trim_start_matches('.').to_owned())
                .collect()
        })
        .unwrap_or_default();
    ResourceType {
        storage: Arc::from(format!("{group}/{plural}")),
        group,
        version: str_at(version, "/name").to_owned(),
        kind: str_at(crd, "/spec/names/kind").to_owned(),
        singular: str_at(crd, "/spec/names/singular").to_owned(),
        plural,
        namespaced: str_at(crd, "/spec/scope") == "Namespaced",
        short_names: strings("/spec/names/shortNames"),
        categories: strings("/spec/names/categories"),
        status_subresource: version.pointer("/subresources/status").is_some(),
        rules: Rules::Custom,
        view: View::Native,
        custom: Some(CustomType {
            crd_name: meta::name(crd).to_owned(),
            storage_version: storage_version.to_owned(),
            schema: version.pointer("/schema/openAPIV3Schema").cloned(),
            selectable_fields,
            terminating,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object"}},
                          "subresources": {"status": {}}}]}})
    }

    #[test]
    fn a_valid_crd_is_established() {
        let mut obj = crd();
        prepare_create(&mut obj);
        assert!(validate(&obj).is_empty(), "{:?}", validate(&obj));
        let out = reconcile(&obj, &Registry::new());
        assert_eq!(out.types.len(), 1);
        assert!(out.types[0].status_subresource);
        assert_eq!(out.status["conditions"][1]["type"], "Established");
        assert_eq!(out.status["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn the_name_must_match() {
        let mut obj = crd();
        obj["metadata"]["name"] = json!("gadgets.example.com");
        assert_eq!(validate(&obj)[0].field, "metadata.name");
    }
}

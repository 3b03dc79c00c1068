//! CustomResourceDefinitions (`apiextensions.k8s.io/v1`): validation of
//! names, scope, versions and schemas (the structural rules live in
//! `schema`), and the work of upstream's naming and establishing
//! controllers: accepted names, the `NamesAccepted` and `Established`
//! conditions, stored versions, and the resource types the registry should
//! serve for the CRD. Deleting one is `crd_finalizer`'s.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Subresource, set_field, str_at};
use crate::meta;
use crate::printer_columns;
use crate::resources::{CustomType, Registry, ResourceType, Rules, View};
use crate::schema;
use crate::status::{BadValue, FieldError};
use crate::validation;

/// The finalizer that holds a deleted CRD until its custom resources are
/// gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

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

/// `ValidateCustomResourceDefinition`, in upstream's order: metadata, group,
/// scope, versions (and their schemas), names, the shared schema.
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
    let group_msgs = validation::dns1123_subdomain(group);
    if group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else if !group_msgs.is_empty() {
        errs.push(FieldError::invalid(
            "spec.group",
            group,
            group_msgs.join(","),
        ));
    } else if !group.contains('.') {
        errs.push(FieldError::invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
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
    let versions = versions(crd);
    let shared = shared_schema(&versions);
    errs.extend(validate_versions(&versions, shared.is_none()));
    errs.extend(validate_names(crd));
    if let Some(schema) = shared.and_then(|s| s.get("openAPIV3Schema")) {
        let status = versions
            .iter()
            .any(|v| v.pointer("/subresources/status").is_some());
        errs.extend(schema::validate_crd_schema(
            schema,
            "spec.validation.openAPIV3Schema",
            status,
        ));
    }
    errs
}

fn versions(crd: &Value) -> Vec<Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The `schema` every version shares, if all are identical: upstream's
/// conversion to the internal type then moves it to `spec.validation`, and
/// its errors are reported there (`spec.validation.openAPIV3Schema…`), not
/// under `spec.versions[i]`.
fn shared_schema(versions: &[Value]) -> Option<&Value> {
    let first = versions.first()?.get("schema")?;
    versions
        .iter()
        .all(|v| v.get("schema") == Some(first))
        .then_some(first)
}

fn validate_versions(versions: &[Value], per_version_schemas: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        if version.pointer("/schema/openAPIV3Schema").is_none() {
            errs.push(FieldError::required(
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "schemas are required",
            ));
        }
    }
    let shown = BadValue::Raw(format!("{} versions", versions.len()));
    let mut seen = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = str_at(version, "/name");
        unique &= !seen.contains(&name);
        seen.push(name);
        let msgs = validation::dns1035_label(name);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                format!("{path}.name"),
                name,
                msgs.join(","),
            ));
        }
        errs.extend(printer_columns::validate(version, &path));
        if per_version_schemas && let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            errs.extend(schema::validate_crd_schema(
                schema,
                &format!("{path}.schema.openAPIV3Schema"),
                version.pointer("/subresources/status").is_some(),
            ));
        }
    }
    if !unique {
        errs.push(FieldError::invalid(
            "spec.versions",
            shown.clone(),
            "must contain unique version names",
        ));
    }
    if versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count()
        != 1
    {
        errs.push(FieldError::invalid(
            "spec.versions",
            shown,
            "must have exactly one version marked as storage version",
        ));
    }
    errs
}

/// The required names, then `ValidateCustomResourceDefinitionNames`.
fn validate_names(crd: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let names = crd.pointer("/spec/names").cloned().unwrap_or_default();
    let name = |field: &str| str_at(&names, &format!("/{field}")).to_owned();
    for field in ["plural", "singular", "kind", "listKind"] {
        if name(field).is_empty() {
            errs.push(FieldError::required(format!("spec.names.{field}"), ""));
        }
    }
    for field in ["plural", "singular"] {
        let value = name(field);
        let msgs = validation::dns1035_label(&value);
        if !value.is_empty() && !msgs.is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.names.{field}"),
                value,
                msgs.join(","),
            ));
        }
    }
    for field in ["kind", "listKind"] {
        let value = name(field);
        let msgs = validation::dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !msgs.is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.names.{field}"),
                value,
                format!(
                    "may have mixed case, but should otherwise match: {}",
                    msgs.join(",")
                ),
            ));
        }
    }
    let list = |field: &str| meta::string_list(names.get(field));
    for (i, short) in list("shortNames").iter().enumerate() {
        let msgs = validation::dns1035_label(short);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.names.shortNames[{i}]"),
                short.as_str(),
                msgs.join(","),
            ));
        }
    }
    if !name("kind").is_empty() && name("kind") == name("listKind") {
        errs.push(FieldError::invalid(
            "spec.names.listKind",
            name("listKind"),
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in list("categories").iter().enumerate() {
        let msgs = validation::dns1035_label(category);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                format!("spec.names.categories[{i}]"),
                category.as_str(),
                msgs.join(","),
            ));
        }
    }
    errs
}

/// `ValidateCustomResourceDefinitionUpdate`: the spec rules, then what may
/// not change: scope and kind once established, group and plural ever.
pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = validate(new);
    let mut immutable = |field: &str, pointer: &str| {
        let (n, o) = (str_at(new, pointer), str_at(old, pointer));
        if n != o {
            errs.push(FieldError::immutable(field, n));
        }
    };
    if established(old) {
        immutable("spec.scope", "/spec/scope");
        immutable("spec.names.kind", "/spec/names/kind");
    }
    immutable("spec.group", "/spec/group");
    immutable("spec.names.plural", "/spec/names/plural");
    errs
}

fn established(crd: &Value) -> bool {
    condition_is_true(crd, "Established")
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

/// `SetCRDCondition`: sets a condition of `crd`'s status, keeping its
/// `lastTransitionTime` unless its status changes.
pub fn set_condition(crd: &mut Value, kind: &str, status: bool, reason: &str, message: &str) {
    let old_status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let new = condition(&old_status, kind, status, reason, message);
    let mut conditions: Vec<Value> = old_status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match conditions.iter_mut().find(|c| str_at(c, "/type") == kind) {
        Some(existing) => *existing = new,
        None => conditions.push(new),
    }
    if !crd.get("status").is_some_and(Value::is_object) {
        set_field(crd, "status", json!({}));
    }
    crd["status"]["conditions"] = Value::Array(conditions);
}

/// Whether the CRD's status has condition `kind` with status `True`.
pub fn condition_is_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| str_at(c, "/type") == kind && str_at(c, "/status") == "True")
}

/// Accepts names, establishes the CRD and builds its resource types
/// (refusing creates while the CRD is `Terminating`).
pub fn reconcile(crd: &Value, registry: &Registry) -> CrdReconcile {
    let name = meta::name(crd);
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");
    let old_status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    let terminating = condition_is_true(crd, "Terminating");
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
    // Deletion and the finalizer controller own `Terminating`.
    conditions.extend(
        old_status
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| str_at(c, "/type") == "Terminating")
            .cloned(),
    );
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
            printer_columns: printer_columns::of_version(version),
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

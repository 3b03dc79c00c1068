//! Custom resources served from a CRD (`apiextensions-apiserver`'s
//! `customresource` registry): unstructured objects pruned, defaulted and
//! validated by their version's schema (a `kind` other than the CRD's is a
//! 422 there, not a 400 at decoding as for built-in kinds), stored in the
//! storage version (conversion strategy `None`), generation tracking, and
//! a status subresource that changes nothing but `.status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::{
    FieldValidation, Subresource, set_field, str_at, unknown_field_verdict, unknown_fields,
};
use crate::meta::{self, NameRule};
use crate::patch::ListStrategy;
use crate::resources::ResourceType;
use crate::schema;
use crate::status::{ApiError, FieldError};

fn schema_of(rt: &ResourceType) -> Option<&Value> {
    rt.custom.as_ref().and_then(|c| c.schema.as_ref())
}

fn has_status(rt: &ResourceType) -> bool {
    rt.status_subresource
}

/// Checks `metadata` against ObjectMeta's types and prunes by the schema.
pub fn decode(
    rt: &ResourceType,
    value: Value,
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    if !value.is_object() {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    }
    let mut decoded = value.clone();
    if let Some(metadata) = value.get("metadata") {
        let typed: ObjectMeta =
            serde_path_to_error::deserialize(metadata.clone()).map_err(|e| {
                ApiError::bad_request(format!(
                    "{} in version \"{}\" cannot be handled as a {}: metadata.{}: {}",
                    rt.kind,
                    rt.version,
                    rt.kind,
                    e.path(),
                    e.inner()
                ))
            })?;
        decoded["metadata"] = serde_json::to_value(typed)
            .map_err(|e| ApiError::Internal(format!("re-encoding metadata: {e}")))?;
    }
    if let Some(schema) = schema_of(rt) {
        schema::prune(&mut decoded, schema);
    }
    let mut unknown = Vec::new();
    unknown_fields(&value, &decoded, "", &mut unknown);
    let warnings = unknown_field_verdict(unknown, validation)?;
    Ok((decoded, warnings))
}

/// The stored form: `apiVersion` of the storage version.
pub fn to_storage(rt: &ResourceType, mut value: Value) -> Value {
    if let Some(custom) = &rt.custom {
        set_field(
            &mut value,
            "apiVersion",
            json!(format!("{}/{}", rt.group, custom.storage_version)),
        );
    }
    value
}

/// A stored object as served at `rt`'s version.
pub fn with_api_version(rt: &ResourceType, value: &Value) -> Value {
    let mut out = value.clone();
    if rt.custom.is_some() {
        set_field(&mut out, "apiVersion", json!(rt.api_version()));
    }
    out
}

fn defaults(rt: &ResourceType, obj: &mut Value) {
    if let Some(schema) = schema_of(rt) {
        schema::apply_defaults(obj, schema);
    }
}

pub fn prepare_create(rt: &ResourceType, obj: &mut Value) {
    if has_status(rt)
        && let Some(map) = obj.as_object_mut()
    {
        map.remove("status");
    }
    meta::set(obj, "generation", json!(1));
    defaults(rt, obj);
}

pub fn prepare_update(rt: &ResourceType, sub: Subresource, new: &mut Value, old: &Value) {
    match sub {
        Subresource::Main => {
            if has_status(rt) {
                match old.get("status") {
                    Some(status) => set_field(new, "status", status.clone()),
                    None => {
                        if let Some(map) = new.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            defaults(rt, new);
            super::bump_generation(new, old, has_status(rt));
        }
        Subresource::Status => {
            let status = new.get("status").cloned();
            *new = old.clone();
            match status {
                Some(status) => set_field(new, "status", status),
                None => {
                    if let Some(map) = new.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            defaults(rt, new);
        }
    }
}

/// `customResourceStrategy.Validate`: the kind first (alone, as upstream's
/// `ValidateTypeMeta` returns early), then ObjectMeta, the schema, and the
/// uniqueness of `set` and `map` lists.
pub fn validate(rt: &ResourceType, obj: &Value) -> Vec<FieldError> {
    let kind = str_at(obj, "/kind");
    if kind != rt.kind {
        return vec![FieldError::invalid(
            "kind",
            kind,
            format!("must be {}", rt.kind),
        )];
    }
    let mut errs = meta::validate(obj, rt.namespaced, NameRule::Dns1123Subdomain);
    if let Some(schema) = schema_of(rt) {
        errs.extend(schema::validate(obj, schema));
        errs.extend(schema::validate_list_types(obj, schema));
    }
    errs
}

/// `metadata.name`, `metadata.namespace` and the CRD's `selectableFields`.
pub fn fields(
    rt: &ResourceType,
    obj: &Value,
    mut base: Vec<(String, String)>,
) -> Vec<(String, String)> {
    for path in rt.custom.iter().flat_map(|c| &c.selectable_fields) {
        let pointer = format!("/{}", path.replace('.', "/"));
        let value = match obj.pointer(&pointer) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        base.push((path.clone(), value));
    }
    base
}

/// List strategies from `x-kubernetes-list-type` (for apply patches).
pub fn list_strategy(rt: &ResourceType, path: &[&str]) -> ListStrategy {
    let mut node = schema_of(rt);
    for key in path {
        node = node.and_then(|n| {
            let n = n.get("items").unwrap_or(n);
            n.get("properties").and_then(|p| p.get(*key))
        });
    }
    let Some(node) = node else {
        return ListStrategy::Atomic;
    };
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListStrategy::Set,
        Some("map") => match node
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            Some([key]) => key
                .as_str()
                .map_or(ListStrategy::Atomic, |k| ListStrategy::Map(k.to_owned())),
            _ => ListStrategy::Atomic,
        },
        _ => ListStrategy::Atomic,
    }
}

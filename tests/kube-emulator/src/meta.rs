//! `metadata` of every object, whatever its kind: reading it from a JSON
//! object, the system fields the server owns (uid, timestamps, generation),
//! and apimachinery's `ValidateObjectMeta` / `ValidateObjectMetaUpdate`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::status::{BadValue, FieldError};
use crate::validation;

/// Total size of all annotations (keys and values), as upstream limits it.
const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;
const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// The `metadata` object, if there is one.
pub fn of(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// The `metadata` object, created if missing or not an object.
pub fn of_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    match obj.get_mut("metadata").and_then(Value::as_object_mut) {
        Some(meta) => meta,
        None => unreachable!("metadata was just made an object"),
    }
}

fn str_field<'a>(obj: &'a Value, field: &str) -> &'a str {
    of(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    str_field(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    str_field(obj, "namespace")
}

pub fn uid(obj: &Value) -> &str {
    str_field(obj, "uid")
}

pub fn resource_version(obj: &Value) -> &str {
    str_field(obj, "resourceVersion")
}

pub fn generate_name(obj: &Value) -> &str {
    str_field(obj, "generateName")
}

pub fn is_deleting(obj: &Value) -> bool {
    of(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|t| !t.is_null()))
}

pub fn generation(obj: &Value) -> i64 {
    of(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    string_list(of(obj).and_then(|m| m.get("finalizers")))
}

pub fn labels(obj: &Value) -> Map<String, Value> {
    of(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

pub fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

pub fn set(obj: &mut Value, field: &str, value: Value) {
    if value.is_null() {
        of_mut(obj).remove(field);
    } else {
        of_mut(obj).insert(field.to_owned(), value);
    }
}

/// Now, as metadata timestamps are written (whole seconds, UTC).
pub fn now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    match k8s_openapi::jiff::Timestamp::from_second(now.as_second()) {
        Ok(seconds) => seconds.to_string(),
        Err(_) => now.to_string(),
    }
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `generateName` plus five random characters, as `SimpleNameGenerator` does.
pub fn generated_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base = if base.len() > 58 { &base[..58] } else { base };
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// The system fields of a new object (`FillObjectMetaSystemFields` and
/// `BeforeCreate`): a fresh uid and creation time, no deletion fields.
pub fn fill_system_fields(obj: &mut Value) {
    let meta = of_mut(obj);
    meta.insert("uid".to_owned(), json!(new_uid()));
    meta.insert("creationTimestamp".to_owned(), json!(now()));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("selfLink");
}

/// Drops the metadata's empty lists and maps (labels, annotations, owner
/// references, finalizers): `ObjectMeta` marks them `omitempty`, so once a
/// real server has decoded an object, `finalizers: []` is gone from what it
/// stores and answers.
pub fn omit_empty(obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in ["labels", "annotations", "ownerReferences", "finalizers"] {
        let empty = match meta.get(field) {
            Some(Value::Object(map)) => map.is_empty(),
            Some(Value::Array(items)) => items.is_empty(),
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

/// What an update may not change (`BeforeUpdate`): the generation, creation
/// time and deletion fields come from the stored object; a missing uid too.
pub fn carry_system_fields(new: &mut Value, old: &Value) {
    let Some(old_meta) = of(old).cloned() else {
        return;
    };
    let meta = of_mut(new);
    for field in ["generation", "creationTimestamp"] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.to_owned(), v.clone()),
            None => meta.remove(field),
        };
    }
    if meta
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
        && let Some(uid) = old_meta.get("uid")
    {
        meta.insert("uid".to_owned(), uid.clone());
    }
    if let Some(ts) = old_meta.get("deletionTimestamp") {
        meta.insert("deletionTimestamp".to_owned(), ts.clone());
    } else {
        meta.remove("deletionTimestamp");
    }
    if meta
        .get("deletionGracePeriodSeconds")
        .is_none_or(Value::is_null)
    {
        match old_meta.get("deletionGracePeriodSeconds") {
            Some(g) => meta.insert("deletionGracePeriodSeconds".to_owned(), g.clone()),
            None => meta.remove("deletionGracePeriodSeconds"),
        };
    }
    meta.remove("selfLink");
}

/// How an object's name must look.
#[derive(Debug, Clone, Copy)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    /// Only usable as a URL path segment (no further rule).
    PathSegment,
}

impl NameRule {
    fn check(self, name: &str, prefix: bool) -> Vec<String> {
        // A generateName prefix may end in a dash (`maskTrailingDash`).
        let candidate = if prefix && name.len() > 1 && name.ends_with('-') {
            format!("{}a", &name[..name.len() - 1])
        } else {
            name.to_owned()
        };
        match self {
            NameRule::Dns1123Subdomain => validation::dns1123_subdomain(&candidate),
            NameRule::Dns1123Label => validation::dns1123_label(&candidate),
            NameRule::Dns1035Label => validation::dns1035_label(&candidate),
            NameRule::PathSegment => validation::path_segment_name(name),
        }
    }
}

/// `ValidateObjectMeta` for a new object.
pub fn validate(obj: &Value, namespaced: bool, rule: NameRule) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate = generate_name(obj);
    if !generate.is_empty() {
        for msg in rule.check(generate, true) {
            errs.push(FieldError::invalid("metadata.generateName", generate, msg));
        }
    }
    let name = name(obj);
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in rule.check(name, false) {
            errs.push(FieldError::invalid("metadata.name", name, msg));
        }
    }
    let ns = namespace(obj);
    if namespaced {
        if ns.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for msg in validation::dns1123_label(ns) {
                errs.push(FieldError::invalid("metadata.namespace", ns, msg));
            }
        }
    } else if !ns.is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    if generation(obj) < 0 {
        errs.push(FieldError::invalid(
            "metadata.generation",
            generation(obj),
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_common(obj));
    errs
}

/// `ValidateObjectMetaUpdate`: identity is immutable, and no finalizer may
/// be added once deletion has started.
pub fn validate_update(new: &Value, old: &Value) -> Vec<FieldError> {
    // `validateCommonFields`: the object's metadata as on create, then
    // what may not change, in `ValidateObjectMetaAccessorUpdate`'s order.
    let mut errs = validate_common(new);
    if is_deleting(old) {
        let old_finalizers = finalizers(old);
        // Go's `sets.String.List()`: sorted, each once.
        let added: BTreeSet<String> = finalizers(new)
            .into_iter()
            .filter(|f| !old_finalizers.contains(f))
            .collect();
        if !added.is_empty() {
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    crate::status::go_strings(&added.into_iter().collect::<Vec<_>>())
                ),
            ));
        }
    }
    for (field, path) in [
        ("name", "metadata.name"),
        ("namespace", "metadata.namespace"),
        ("uid", "metadata.uid"),
    ] {
        let (n, o) = (str_field(new, field), str_field(old, field));
        if n != o {
            errs.push(FieldError::immutable(path, n));
        }
    }
    errs
}

/// Labels, annotations, owner references and finalizers.
fn validate_common(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let meta = of(obj);
    let get = |field: &str| meta.and_then(|m| m.get(field));
    if let Some(labels) = get("labels").and_then(Value::as_object) {
        errs.extend(validate_labels(labels, "metadata.labels"));
    }
    if let Some(annotations) = get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (key, value) in annotations {
            for msg in validation::qualified_name(&key.to_lowercase()) {
                errs.push(FieldError::invalid(
                    "metadata.annotations",
                    key.as_str(),
                    msg,
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_MAX_BYTES {
            errs.push(FieldError::too_long(
                "metadata.annotations",
                ANNOTATIONS_MAX_BYTES,
            ));
        }
    }
    if let Some(owners) = get("ownerReferences").and_then(Value::as_array) {
        let mut controllers = Vec::new();
        for (i, owner) in owners.iter().enumerate() {
            let path = format!("metadata.ownerReferences[{i}]");
            for field in ["apiVersion", "kind", "name", "uid"] {
                if owner
                    .get(field)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    let detail = if field == "uid" {
                        "uid must not be empty"
                    } else {
                        ""
                    };
                    errs.push(FieldError::required(format!("{path}.{field}"), detail));
                }
            }
            if owner.get("controller").and_then(Value::as_bool) == Some(true) {
                controllers.push(
                    owner
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                );
            }
        }
        if controllers.len() > 1 {
            errs.push(FieldError::invalid(
                "metadata.ownerReferences",
                BadValue::Raw(Value::Array(owners.clone()).to_string()),
                format!(
                    "Only one reference can have Controller set to true. Found \"true\" in references for {}",
                    controllers.join(" and ")
                ),
            ));
        }
    }
    let finalizers = finalizers(obj);
    for finalizer in &finalizers {
        for msg in validation::qualified_name(finalizer) {
            errs.push(FieldError::invalid(
                "metadata.finalizers",
                finalizer.as_str(),
                msg,
            ));
        }
    }
    if finalizers.iter().any(|f| f == FINALIZER_ORPHAN)
        && finalizers.iter().any(|f| f == FINALIZER_FOREGROUND)
    {
        errs.push(FieldError::invalid(
            "metadata.finalizers",
            BadValue::Raw(format!("{finalizers:?}")),
            format!("finalizer {FINALIZER_ORPHAN} and {FINALIZER_FOREGROUND} cannot be both set"),
        ));
    }
    errs
}

/// `ValidateLabels`: qualified-name keys, label-value values.
pub fn validate_labels(labels: &Map<String, Value>, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (key, value) in labels {
        for msg in validation::qualified_name(key) {
            errs.push(FieldError::invalid(path, key.as_str(), msg));
        }
        let value = value.as_str().unwrap_or("");
        for msg in validation::label_value(value) {
            errs.push(FieldError::invalid(path, value, msg));
        }
    }
    errs
}

/// Warnings a real server attaches to writes of this object's metadata.
pub fn warnings(obj: &Value) -> Vec<String> {
    finalizers(obj)
        .iter()
        .filter(|f| !f.contains('/'))
        .map(|f| {
            format!(
                "metadata.finalizers: {}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers",
                crate::status::quote(f)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_look_like_uuids() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
    }

    #[test]
    fn names_are_checked_by_rule() {
        let obj = json!({"metadata": {"name": "Bad_Name"}});
        let errs = validate(&obj, false, NameRule::Dns1123Subdomain);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "metadata.name");
        let obj = json!({"metadata": {"generateName": "web-"}});
        assert!(validate(&obj, false, NameRule::Dns1035Label).len() == 1); // name still required
    }

    #[test]
    fn finalizers_cannot_be_added_while_deleting() {
        let old = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["x.io/a"]}});
        let new = json!({"metadata": {"name": "a", "finalizers": ["x.io/a", "x.io/b"]}});
        let errs = validate_update(&new, &old);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].to_string().contains("[]string{\"x.io/b\"}"),
            "{}",
            errs[0]
        );
    }
}

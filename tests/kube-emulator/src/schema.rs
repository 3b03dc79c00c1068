//! Structural `openAPIV3Schema`s of custom resources, applied as the
//! apiextensions server does on every write: prune unknown fields, apply
//! `default`s, then validate types (`FieldValueTypeInvalid`), `required`,
//! `enum`, bounds and patterns, and the uniqueness of `set` and `map` lists
//! ([`listtype`]). What a CRD's schema itself must be to be accepted is
//! [`structural`]. CEL rules (`x-kubernetes-validations`) and `allOf`/
//! `anyOf`/`oneOf`/`not` are not evaluated.

mod listtype;
mod structural;

use serde_json::{Map, Value};

use crate::status::{BadValue, FieldError};

pub use listtype::validate as validate_list_types;
pub use structural::validate as validate_crd_schema;

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// The schema of `key` inside an object with `schema`, if it is known.
fn child<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    properties(schema)
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Drops fields the schema does not declare, except under
/// `x-kubernetes-preserve-unknown-fields`. The root's `apiVersion`, `kind`
/// and `metadata` are always kept.
pub fn prune(value: &mut Value, schema: &Value) {
    let Value::Object(map) = value else {
        return;
    };
    let kept: Vec<(String, Value)> = ["apiVersion", "kind", "metadata"]
        .into_iter()
        .filter_map(|k| map.remove(k).map(|v| (k.to_owned(), v)))
        .collect();
    prune_node(value, schema);
    if let Value::Object(map) = value {
        map.extend(kept);
    }
}

fn prune_node(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true)
            {
                return;
            }
            let keep_unknown = preserves_unknown(schema);
            map.retain(|key, _| keep_unknown || child(schema, key).is_some());
            for (key, v) in map.iter_mut() {
                if let Some(s) = child(schema, key) {
                    prune_node(v, s);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    prune_node(item, s);
                }
            }
        }
        _ => {}
    }
}

/// Fills missing properties that declare a `default`.
pub fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = properties(schema) {
                for (key, s) in props {
                    if !map.contains_key(key)
                        && let Some(default) = s.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                }
            }
            for (key, v) in map.iter_mut() {
                if key == "metadata" {
                    continue;
                }
                if let Some(s) = child(schema, key) {
                    apply_defaults(v, s);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    apply_defaults(item, s);
                }
            }
        }
        _ => {}
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("number", Value::Number(_)) => true,
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64(),
        _ => expected == json_type(value),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Validates the object against its schema; `metadata` is left to the
/// ObjectMeta rules.
pub fn validate(value: &Value, schema: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_node(value, schema, "", &mut errs);
    errs
}

fn validate_node(value: &Value, schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let shown = if path.is_empty() {
        "body".to_owned()
    } else {
        path.to_owned()
    };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && let Some(t) = schema.get("type").and_then(Value::as_str)
        {
            errs.push(FieldError::type_invalid(
                path,
                "null",
                format!("{shown} in body must be of type {t}: \"null\""),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        if !matches!(json_type(value), "integer" | "string") {
            errs.push(FieldError::type_invalid(
                path,
                json_type(value),
                format!(
                    "{shown} in body must be of type integer,string: \"{}\"",
                    json_type(value)
                ),
            ));
            return;
        }
    } else if let Some(t) = schema.get("type").and_then(Value::as_str)
        && !type_matches(t, value)
    {
        errs.push(FieldError::type_invalid(
            path,
            json_type(value),
            format!(
                "{shown} in body must be of type {t}: \"{}\"",
                json_type(value)
            ),
        ));
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let supported: Vec<String> = options
            .iter()
            .map(|o| o.as_str().map_or_else(|| o.to_string(), str::to_owned))
            .collect();
        let supported: Vec<&str> = supported.iter().map(String::as_str).collect();
        errs.push(FieldError::not_supported(
            path,
            crate::status::bad_value(value),
            &supported,
        ));
    }
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    match value {
        Value::String(s) => {
            let len = s.chars().count();
            if let Some(max) = number("maxLength")
                && len as f64 > max
            {
                errs.push(FieldError::too_long(path, max as usize));
            }
            if let Some(min) = number("minLength")
                && (len as f64) < min
            {
                errs.push(FieldError::invalid(
                    path,
                    s.as_str(),
                    format!("{shown} in body should be at least {min} chars long"),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && regex::Regex::new(pattern).is_ok_and(|re| !re.is_match(s))
            {
                errs.push(FieldError::invalid(
                    path,
                    s.as_str(),
                    format!("{shown} in body should match '{pattern}'"),
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            let shown_value = crate::status::bad_value(value);
            let exclusive = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
            if let Some(max) = number("maximum") {
                let (bad, word) = if exclusive("exclusiveMaximum") {
                    (x >= max, "less than")
                } else {
                    (x > max, "less than or equal to")
                };
                if bad {
                    errs.push(FieldError::invalid(
                        path,
                        shown_value.clone(),
                        format!("{shown} in body should be {word} {max}"),
                    ));
                }
            }
            if let Some(min) = number("minimum") {
                let (bad, word) = if exclusive("exclusiveMinimum") {
                    (x <= min, "greater than")
                } else {
                    (x < min, "greater than or equal to")
                };
                if bad {
                    errs.push(FieldError::invalid(
                        path,
                        shown_value,
                        format!("{shown} in body should be {word} {min}"),
                    ));
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = number("maxItems")
                && items.len() as f64 > max
            {
                errs.push(FieldError::too_many(path, items.len() as i64, max as usize));
            }
            if let Some(min) = number("minItems")
                && (items.len() as f64) < min
            {
                errs.push(FieldError::invalid(
                    path,
                    BadValue::Int(items.len() as i64),
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_node(item, s, &format!("{path}[{i}]"), errs);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(key) = required.as_str()
                    && !map.contains_key(key)
                {
                    errs.push(FieldError::required(join(path, key), ""));
                }
            }
            for (key, v) in map {
                if path.is_empty() && matches!(key.as_str(), "metadata" | "apiVersion" | "kind") {
                    continue;
                }
                if let Some(s) = child(schema, key) {
                    validate_node(v, s, &join(path, key), errs);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// The field names a schema node lists in `x-kubernetes-list-map-keys`.
fn list_map_keys(schema: &Map<String, Value>) -> Vec<&str> {
    schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["ref"], "properties": {
                "ref": {"type": "string", "pattern": "^oci://"},
                "replicas": {"type": "integer", "minimum": 1, "default": 1},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            }},
            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
        }})
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"ref": "oci://r", "junk": 1, "extra": {"kept": true}}, "top": 1});
        prune(&mut obj, &schema());
        apply_defaults(&mut obj, &schema());
        assert_eq!(
            obj["spec"],
            json!({"ref": "oci://r", "replicas": 1, "extra": {"kept": true}})
        );
        assert!(obj.get("top").is_none());
        assert!(validate(&obj, &schema()).is_empty());
    }

    #[test]
    fn reports_like_the_apiextensions_server() {
        let obj = json!({"spec": {"replicas": "two", "mode": "c", "ref": "http://x"}});
        let errs: Vec<String> = validate(&obj, &schema())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(errs.contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_owned()), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.mode: Unsupported value: \"c\"")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e.contains("should match '^oci://'")),
            "{errs:?}"
        );
        let errs = validate(&json!({"spec": {}}), &schema());
        assert_eq!(errs[0].to_string(), "spec.ref: Required value");
    }
}

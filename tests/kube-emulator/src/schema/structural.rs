//! What a CRD's `openAPIV3Schema` must be to be accepted (a 422
//! otherwise), as upstream's CRD validation checks it: the structural
//! schema rules (`apiserver/schema.ValidateStructural`: a `type` on every
//! specified node, `items` for arrays, `object` at the root, only `name`
//! and `generateName` under the root `metadata`…), reported sorted by
//! message as upstream sorts them, then the OpenAPI rules of
//! `ValidateCustomResourceDefinitionOpenAPISchema` (known types,
//! `x-kubernetes-list-type` / `-list-map-keys` / `-map-type` consistency,
//! unsupported keywords). Logical junctors (`allOf`, `anyOf`, `oneOf`,
//! `not`) and the defaults' own validity are not checked.

use serde_json::{Map, Value};

use crate::status::{BadValue, FieldError, bad_value};

/// Where a schema node sits, which decides the message of a missing `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// The errors of one `openAPIV3Schema` found at `path` (for instance
/// `spec.validation.openAPIV3Schema`), in upstream's order.
pub fn validate(schema: &Value, path: &str, status_enabled: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let root_type = str_of(schema, "type");
    if status_enabled && !root_type.is_empty() && root_type != "object" {
        errs.push(FieldError::invalid(
            format!("{path}.type"),
            root_type,
            "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
        ));
    }
    if flag(schema, "nullable") {
        errs.push(FieldError::forbidden(
            format!("{path}.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut structural = Vec::new();
    invariants(schema, Level::Root, path, &mut structural);
    structural.sort_by_key(ToString::to_string);
    errs.extend(structural);
    openapi(schema, path, true, None, &mut errs);
    errs
}

fn str_of<'a>(schema: &'a Value, key: &str) -> &'a str {
    schema.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

fn properties(schema: &Value) -> impl Iterator<Item = (&String, &Value)> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
}

/// `properties[name]`, as `field.Path.Key` prints it.
fn property_path(path: &str, name: &str) -> String {
    format!("{path}.properties[{name}]")
}

/// `validateStructuralInvariants`, for the parts that are not logical
/// junctors.
fn invariants(schema: &Value, level: Level, path: &str, errs: &mut Vec<FieldError>) {
    let kind = str_of(schema, "type");
    let items = schema.get("items").filter(|i| i.is_object());
    if kind == "array" && items.is_none() {
        errs.push(FieldError::required(
            format!("{path}.items"),
            "must be specified",
        ));
    }
    if let Some(items) = items {
        invariants(items, Level::Item, &format!("{path}.items"), errs);
    }
    for (name, property) in properties(schema) {
        invariants(property, Level::Field, &property_path(path, name), errs);
    }
    let additional = schema.get("additionalProperties").filter(|a| !a.is_null());
    if additional.is_some() {
        if level == Level::Root {
            errs.push(FieldError::forbidden(
                format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(a) = additional.filter(|a| a.is_object()) {
            invariants(
                a,
                Level::Field,
                &format!("{path}.additionalProperties"),
                errs,
            );
        }
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(schema, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(FieldError::invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid(
            format!("{path}.x-kubernetes-embedded-resource"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if embedded && kind != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        errs.push(if kind.is_empty() {
            FieldError::required(format!("{path}.type"), detail)
        } else {
            FieldError::invalid(format!("{path}.type"), kind, detail)
        });
    } else if kind.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(format!("{path}.type"), detail));
    }
    if embedded && additional.is_some() {
        errs.push(FieldError::forbidden(
            format!("{path}.additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !kind.is_empty() && kind != "object" {
        errs.push(FieldError::invalid(
            format!("{path}.type"),
            kind,
            "must be object at the root",
        ));
    }
    let resource = level == Level::Root || embedded;
    for name in ["kind", "apiVersion"] {
        if let Some(p) = schema.pointer(&format!("/properties/{name}"))
            && resource
            && str_of(p, "type") != "string"
        {
            errs.push(FieldError::invalid(
                format!("{}.type", property_path(path, name)),
                str_of(p, "type"),
                "must be string",
            ));
        }
    }
    if let Some(metadata) = schema.pointer("/properties/metadata") {
        let metadata_path = property_path(path, "metadata");
        if resource && str_of(metadata, "type") != "object" {
            errs.push(FieldError::invalid(
                format!("{metadata_path}.type"),
                str_of(metadata, "type"),
                "must be object",
            ));
        }
        if level == Level::Root && !only_names(metadata) {
            errs.push(FieldError::forbidden(
                metadata_path,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && properties(schema).next().is_none() {
        errs.push(FieldError::required(
            format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// Whether the root `metadata` schema restricts at most `name` and
/// `generateName` (its `type` and `default` are checked elsewhere).
fn only_names(metadata: &Value) -> bool {
    let Some(map) = metadata.as_object() else {
        return true;
    };
    map.iter().all(|(key, value)| match key.as_str() {
        "type" | "default" => true,
        "properties" => value
            .as_object()
            .is_some_and(|p| p.keys().all(|k| k == "name" || k == "generateName")),
        _ => false,
    })
}

/// `ValidateCustomResourceDefinitionOpenAPISchema` without CEL:
/// `forbidden_default` says why a `default` may not be set here.
fn openapi(
    schema: &Value,
    path: &str,
    root: bool,
    forbidden_default: Option<&str>,
    errs: &mut Vec<FieldError>,
) {
    let Some(map) = schema.as_object() else {
        return;
    };
    let kind = str_of(schema, "type");
    if !kind.is_empty() && !TYPES.contains(&kind) {
        errs.push(FieldError::not_supported(
            format!("{path}.type"),
            kind,
            &TYPES,
        ));
    }
    if let Some(reason) = forbidden_default
        && map.contains_key("default")
    {
        errs.push(FieldError::forbidden(
            format!("{path}.default"),
            format!("must not be set {reason}"),
        ));
    }
    for (key, detail) in [
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ] {
        if map.get(key).is_some_and(|v| !v.is_null() && v != "") {
            errs.push(FieldError::forbidden(format!("{path}.{key}"), detail));
        }
    }
    if kind == "null" {
        errs.push(FieldError::forbidden(
            format!("{path}.type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if map.get("items").is_some_and(Value::is_array) {
        errs.push(FieldError::forbidden(
            format!("{path}.items"),
            "items must be a schema object and not an array",
        ));
    }
    if flag(schema, "uniqueItems") {
        errs.push(FieldError::forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(additional) = map.get("additionalProperties") {
        if properties(schema).next().is_some() && (additional.is_object() || additional == false) {
            errs.push(FieldError::forbidden(
                format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        openapi(
            additional,
            &format!("{path}.additionalProperties"),
            false,
            forbidden_default,
            errs,
        );
    }
    for (name, property) in properties(schema) {
        let reason = if root && ["metadata", "kind", "apiVersion"].contains(&name.as_str()) {
            Some(format!("in top-level {name}"))
        } else {
            forbidden_default.map(str::to_owned)
        };
        openapi(
            property,
            &property_path(path, name),
            false,
            reason.as_deref(),
            errs,
        );
    }
    if let Some(items) = map.get("items").filter(|i| i.is_object()) {
        openapi(
            items,
            &format!("{path}.items"),
            false,
            forbidden_default,
            errs,
        );
    }
    if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(FieldError::invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    map_type(map, kind, path, errs);
    list_type(map, kind, path, errs);
}

fn map_type(map: &Map<String, Value>, kind: &str, path: &str, errs: &mut Vec<FieldError>) {
    let Some(map_type) = map.get("x-kubernetes-map-type").and_then(Value::as_str) else {
        return;
    };
    if kind != "object" {
        let detail = "must be object if x-kubernetes-map-type is specified";
        errs.push(if kind.is_empty() {
            FieldError::required(format!("{path}.type"), detail)
        } else {
            FieldError::invalid(format!("{path}.type"), kind, detail)
        });
    }
    if map_type != "atomic" && map_type != "granular" {
        errs.push(FieldError::not_supported(
            format!("{path}.x-kubernetes-map-type"),
            map_type,
            &["atomic", "granular"],
        ));
    }
}

fn list_type(map: &Map<String, Value>, kind: &str, path: &str, errs: &mut Vec<FieldError>) {
    let list_type = map.get("x-kubernetes-list-type").and_then(Value::as_str);
    let map_keys = super::list_map_keys(map);
    let shown_keys = || {
        map.get("x-kubernetes-list-map-keys")
            .map_or(BadValue::Raw("[]string(nil)".into()), go_strings)
    };
    let items = map.get("items").filter(|i| i.is_object());
    if let Some(list_type) = list_type {
        if kind != "array" {
            let detail = "must be array if x-kubernetes-list-type is specified";
            errs.push(if kind.is_empty() {
                FieldError::required(format!("{path}.type"), detail)
            } else {
                FieldError::invalid(format!("{path}.type"), kind, detail)
            });
        } else if list_type == "set"
            && let Some(items) = items
        {
            let item_kind = str_of(items, "type");
            let list = items.get("x-kubernetes-list-type").and_then(Value::as_str);
            let map_type = items.get("x-kubernetes-map-type").and_then(Value::as_str);
            if item_kind == "array" && list.is_some_and(|l| l != "atomic") {
                errs.push(FieldError::invalid(
                    format!("{path}.items.x-kubernetes-list-type"),
                    list.unwrap_or_default(),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
            if item_kind == "object" && map_type != Some("atomic") {
                errs.push(FieldError::invalid(
                    format!("{path}.items.x-kubernetes-map-type"),
                    // Upstream shows the item's list type here, not its map type.
                    list.unwrap_or("null"),
                    "must be atomic as item of a list with x-kubernetes-list-type=set",
                ));
            }
        }
        if !["atomic", "set", "map"].contains(&list_type) {
            errs.push(FieldError::not_supported(
                format!("{path}.x-kubernetes-list-type"),
                list_type,
                &["atomic", "set", "map"],
            ));
        }
    }
    if !map_keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errs.push(FieldError::required(
                format!("{path}.x-kubernetes-list-type"),
                detail,
            )),
            Some(l) if l != "map" => errs.push(FieldError::invalid(
                format!("{path}.x-kubernetes-list-type"),
                l,
                detail,
            )),
            Some(_) => {}
        }
    }
    if list_type == Some("map") {
        if map_keys.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match items {
            None => errs.push(FieldError::required(
                format!("{path}.items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(items) if str_of(items, "type") != "object" => errs.push(FieldError::invalid(
                format!("{path}.items.type"),
                str_of(items, "type"),
                "must be object if parent array's x-kubernetes-list-type is map",
            )),
            Some(items) => {
                let mut seen = Vec::new();
                for key in &map_keys {
                    match items.pointer(&format!("/properties/{key}")) {
                        Some(p) if ["array", "object"].contains(&str_of(p, "type")) => {
                            errs.push(FieldError::invalid(
                                format!("{}.type", property_path(&format!("{path}.items"), key)),
                                "object",
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                        Some(_) => {}
                        None => errs.push(FieldError::invalid(
                            format!("{path}.x-kubernetes-list-map-keys"),
                            shown_keys(),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(key) {
                        errs.push(FieldError::invalid(
                            format!("{path}.x-kubernetes-list-map-keys"),
                            shown_keys(),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(key);
                }
            }
        }
    }
    // `validateMapListKeysMapSet`: set and map items, and map keys, are
    // never null, and every key is required or defaulted.
    if let (Some(list_type @ ("set" | "map")), Some(items)) = (list_type, items) {
        if flag(items, "nullable") {
            errs.push(FieldError::forbidden(
                format!("{path}.items.nullable"),
                format!("cannot be nullable when x-kubernetes-list-type is {list_type}"),
            ));
        }
        if list_type == "map" {
            let required = meta_strings(items.get("required"));
            for key in &map_keys {
                let Some(p) = items.pointer(&format!("/properties/{key}")) else {
                    continue;
                };
                let key_path = property_path(&format!("{path}.items"), key);
                if !required.iter().any(|r| r == key) && p.get("default").is_none() {
                    errs.push(FieldError::required(
                        format!("{key_path}.default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if flag(p, "nullable") {
                    errs.push(FieldError::forbidden(
                        format!("{key_path}.nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}

fn meta_strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// A `[]string` as Go's `%#v` prints it: `[]string{"name", "port"}`.
fn go_strings(value: &Value) -> BadValue {
    match value.as_array() {
        Some(items) => {
            let items: Vec<String> = items.iter().map(|i| bad_value(i).to_string()).collect();
            BadValue::Raw(format!("[]string{{{}}}", items.join(", ")))
        }
        None => bad_value(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(schema: Value) -> Vec<String> {
        validate(&schema, "spec.validation.openAPIV3Schema", false)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_specified_node_needs_a_type() {
        assert_eq!(
            messages(json!({"properties": {"spec": {"properties": {
                "tags": {"type": "array", "items": {}},
                "list": {"type": "array"}
            }}}})),
            [
                "spec.validation.openAPIV3Schema.properties[spec].properties[list].items: Required value: must be specified",
                "spec.validation.openAPIV3Schema.properties[spec].properties[tags].items.type: Required value: must not be empty for specified array items",
                "spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
                "spec.validation.openAPIV3Schema.type: Required value: must not be empty at the root",
            ]
        );
        assert!(
            messages(json!({"type": "object", "properties": {
                "metadata": {"type": "object"},
                "spec": {"x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true}
            }}))
            .is_empty()
        );
    }

    #[test]
    fn list_types_must_be_consistent() {
        let errs = messages(json!({"type": "object", "properties": {
            "a": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "string"}},
            "b": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "c": {"type": "string", "x-kubernetes-list-type": "bag"}
        }}));
        assert_eq!(
            errs,
            [
                "spec.validation.openAPIV3Schema.properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
                "spec.validation.openAPIV3Schema.properties[a].items.type: Invalid value: \"string\": must be object if parent array's x-kubernetes-list-type is map",
                "spec.validation.openAPIV3Schema.properties[b].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                "spec.validation.openAPIV3Schema.properties[c].type: Invalid value: \"string\": must be array if x-kubernetes-list-type is specified",
                "spec.validation.openAPIV3Schema.properties[c].x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\"",
            ]
        );
    }
}

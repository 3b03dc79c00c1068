//! The uniqueness rules of `x-kubernetes-list-type` lists in a custom
//! resource, as upstream's `apiserver/schema/listtype` checks them on every
//! write: in a `set` the second copy of an item, and in a `map` the second
//! item with the same `x-kubernetes-list-map-keys`, is a `Duplicate value`
//! (422), e.g. `spec.ports[1]: Duplicate value: map[string]interface
//! {}{"name":"http"}`. Only the second copy of each value is reported, as
//! upstream does.

use serde_json::{Map, Value};

use super::{child, join};
use crate::status::{BadValue, FieldError, bad_value, go_syntax};

/// The duplicate items of every set and map list in `obj`.
pub fn validate(obj: &Value, schema: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Value::Object(map) = obj {
        object(map, schema, "", &mut errs);
    }
    errs
}

fn object(map: &Map<String, Value>, schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (key, v) in map {
        let sub_path = if additional.is_some() {
            format!("{path}[{key}]")
        } else {
            join(path, key)
        };
        if let Some(s) = child(schema, key) {
            value(v, s, &sub_path, errs);
        }
    }
}

fn value(v: &Value, schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => array(items, schema, path, errs),
        Value::Object(map) => object(map, schema, path, errs),
        _ => {}
    }
}

fn array(items: &[Value], schema: &Value, path: &str, errs: &mut Vec<FieldError>) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for i in second_copies(items) {
                errs.push(FieldError::duplicate(
                    format!("{path}[{i}]"),
                    bad_value(&items[i]),
                ));
            }
        }
        Some("map") => errs.extend(map_list(items, schema, path)),
        _ => {}
    }
    if let Some(s) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            value(item, s, &format!("{path}[{i}]"), errs);
        }
    }
}

/// Indices of the second occurrence of each repeated value.
fn second_copies(values: &[Value]) -> Vec<usize> {
    (0..values.len())
        .filter(|&i| values[..i].iter().filter(|v| **v == values[i]).count() == 1)
        .collect()
}

fn map_list(items: &[Value], schema: &Value, path: &str) -> Vec<FieldError> {
    if let Some(i) = items.iter().position(|x| !x.is_object() && !x.is_null()) {
        return vec![FieldError::invalid(
            format!("{path}[{i}]"),
            bad_value(&items[i]),
            "must be an object for an array of list-type map",
        )];
    }
    let key_fields = schema
        .as_object()
        .map(super::list_map_keys)
        .unwrap_or_default();
    // An item's key: the map-key fields it has (a missing key is unset,
    // not null, and equal only to another unset key).
    let keys: Vec<Value> = items
        .iter()
        .map(|item| {
            let fields = key_fields
                .iter()
                .filter_map(|k| item.get(*k).map(|v| ((*k).to_owned(), v.clone())))
                .collect();
            Value::Object(fields)
        })
        .collect();
    second_copies(&keys)
        .into_iter()
        .map(|i| FieldError::duplicate(format!("{path}[{i}]"), BadValue::Raw(go_syntax(&keys[i]))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name", "protocol"],
                      "items": {"type": "object", "properties": {
                          "name": {"type": "string"}, "protocol": {"type": "string"},
                          "port": {"type": "integer"}}}},
            "zones": {"type": "object", "additionalProperties": {
                "type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}
        }}}})
    }

    fn messages(obj: Value) -> Vec<String> {
        validate(&obj, &schema())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn the_second_copy_of_a_set_item_is_a_duplicate() {
        assert_eq!(
            messages(json!({"spec": {"tags": ["a", "b", "a", "a"]}})),
            ["spec.tags[2]: Duplicate value: \"a\""]
        );
        assert_eq!(
            messages(json!({"spec": {"zones": {"eu": [1, 2, 1]}}})),
            ["spec.zones[eu][2]: Duplicate value: 1"]
        );
    }

    #[test]
    fn map_items_are_keyed_by_all_their_keys() {
        let obj = json!({"spec": {"ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "http", "protocol": "UDP", "port": 80},
            {"name": "http", "protocol": "TCP", "port": 8080},
            {"port": 1}, {"port": 2}
        ]}});
        assert_eq!(
            messages(obj),
            [
                "spec.ports[2]: Duplicate value: map[string]interface {}{\"name\":\"http\", \"protocol\":\"TCP\"}",
                "spec.ports[4]: Duplicate value: map[string]interface {}{}",
            ]
        );
    }
}

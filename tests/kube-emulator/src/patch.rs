//! PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386),
//! strategic merge patch (apimachinery's `strategicpatch`, with its merge
//! keys, `$patch`, `$deleteFromPrimitiveList`, `$setElementOrder` and
//! `$retainKeys` directives and its list ordering) and the merge of a
//! server-side apply (whose field ownership is `managed_fields`').

use serde_json::{Map, Value};

use crate::body::{self, Parsed};
use crate::status::ApiError;

/// How a list field merges under a strategic merge patch or apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replaced whole (`+listType=atomic`, no `patchStrategy`).
    Atomic,
    /// A set of scalars (`patchStrategy:"merge"` on a scalar list).
    Set,
    /// Maps merged by this key (`patchStrategy:"merge" patchMergeKey:"…"`).
    Map(String),
}

/// Answers the list strategy for a field path such as `["status", "addresses"]`.
pub type Schema<'a> = &'a dyn Fn(&[String]) -> ListStrategy;

/// The patch types a real server accepts, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

/// The media types the error for an unsupported patch type lists.
pub const PATCH_MEDIA_TYPES: &str = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json";

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        match media {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies `body` of type `kind` to `current`. The result carries the
/// keys a merge or strategic merge patch repeated, for strict decoding.
pub fn apply(
    kind: PatchType,
    current: &Value,
    body: &[u8],
    schema: Schema<'_>,
) -> Result<Parsed, ApiError> {
    match kind {
        PatchType::Json => {
            // As evanphx/json-patch: the body must be a list of objects
            // (else 400), but a bad operation in it (an unknown `op`, a
            // missing `path`) fails only when applied, like a failing
            // `test`: a 422 without the cause.
            let ops: Vec<Map<String, Value>> = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            let ops: json_patch::Patch =
                serde_json::from_value(Value::from(ops)).map_err(|_| ApiError::Unprocessable)?;
            let mut doc = current.clone();
            json_patch::patch(&mut doc, &ops).map_err(|_| ApiError::Unprocessable)?;
            Ok(Parsed::clean(doc))
        }
        PatchType::Merge => {
            let patch = parse_object(body)?;
            let mut doc = current.clone();
            json_patch::merge(&mut doc, &patch.value);
            Ok(Parsed {
                value: doc,
                duplicates: patch.duplicates,
            })
        }
        PatchType::Strategic | PatchType::Apply => {
            let Parsed {
                value: Value::Object(patch),
                duplicates,
            } = parse_object(body)?
            else {
                return Err(ApiError::bad_request("the patch must be a JSON object"));
            };
            let Value::Object(original) = current.clone() else {
                return Err(ApiError::Internal(
                    "stored object is not a JSON object".into(),
                ));
            };
            let merged = merge_map(original, patch, &mut Vec::new(), schema)
                .map_err(ApiError::bad_request)?;
            Ok(Parsed {
                value: Value::Object(merged),
                duplicates,
            })
        }
    }
}

fn parse_object(body: &[u8]) -> Result<Parsed, ApiError> {
    let parsed = body::parse(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !parsed.value.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: the patch must be a JSON object",
        ));
    }
    Ok(parsed)
}

/// A patch as Go's `%+v` prints the `map[string]interface{}` it decodes
/// to, e.g. `map[metadata:map[labels:map[a:b]]]` (keys sorted, strings
/// bare, `<nil>` for null).
pub fn go_map_text(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_map_text).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_map_text(v)))
                .collect();
            format!("map[{}]", entries.join(" "))
        }
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Removes directive keys from a value taken whole from the patch.
fn strip_directives(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .filter(|v| !v.get(DIRECTIVE).is_some_and(|d| d == "delete"))
                .map(strip_directives)
                .collect(),
        ),
        other => other,
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    path: &mut Vec<String>,
    schema: Schema<'_>,
) -> Result<Map<String, Value>, String> {
    if let Some(directive) = patch.remove(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => match strip_directives(Value::Object(patch)) {
                Value::Object(m) => Ok(m),
                _ => unreachable!("an object stays an object"),
            },
            Some("delete") => Ok(Map::new()),
            _ => Err(format!(
                "Unable to find patch type: {directive} in the patch"
            )),
        };
    }
    if let Some(retain) = patch.remove(RETAIN_KEYS) {
        let Some(keys) = retain.as_array() else {
            return Err("invalid patch: $retainKeys must be a list of strings".to_owned());
        };
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        for (k, v) in &patch {
            if !v.is_null() && !k.starts_with('$') && !keys.contains(&k.as_str()) {
                return Err("doesn't match the retainKeys directive: all keys in the patch must be present in $retainKeys".to_owned());
            }
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
    }
    let order_keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in order_keys {
        let order = patch.remove(&key).unwrap_or(Value::Null);
        let field = key[SET_ELEMENT_ORDER.len()..].to_owned();
        let Value::Array(order) = order else {
            return Err("invalid patch: $setElementOrder must be a list".to_owned());
        };
        path.push(field.clone());
        let strategy = schema(path);
        let original_list = match original.get(&field) {
            Some(Value::Array(l)) => Some(l.clone()),
            _ => None,
        };
        let merged = match (original_list.clone(), patch.remove(&field)) {
            (Some(o), Some(Value::Array(p))) => merge_list(o, p, &strategy, path, schema)?,
            (Some(o), _) => o,
            (None, Some(Value::Array(p))) => p,
            (None, _) => {
                path.pop();
                continue;
            }
        };
        let key_of = key_fn(&strategy);
        let (in_order, server_only): (Vec<Value>, Vec<Value>) = merged
            .into_iter()
            .partition(|item| index_of(&order, item, &key_of).is_some());
        let reordered = normalize_order(
            in_order,
            server_only,
            &order,
            &original_list.unwrap_or_default(),
            &key_of,
        );
        original.insert(field, Value::Array(reordered));
        path.pop();
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = value else {
                return Err("invalid patch: $deleteFromPrimitiveList must be a list".to_owned());
            };
            if let Some(Value::Array(list)) = original.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            original.remove(&key);
            continue;
        }
        let merged = match (original.remove(&key), value) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                path.push(key.clone());
                let m = merge_map(o, p, path, schema)?;
                path.pop();
                Value::Object(m)
            }
            (Some(Value::Array(o)), Value::Array(p)) => {
                path.push(key.clone());
                let strategy = schema(path);
                let m = merge_list(o, p, &strategy, path, schema)?;
                path.pop();
                Value::Array(m)
            }
            // A map or list new to the object still obeys its directives (`$patch: replace`…).
            (_, Value::Object(p)) => {
                path.push(key.clone());
                let m = merge_map(Map::new(), p, path, schema)?;
                path.pop();
                Value::Object(m)
            }
            (_, Value::Array(p)) => {
                path.push(key.clone());
                let strategy = schema(path);
                let m = merge_list(Vec::new(), p, &strategy, path, schema)?;
                path.pop();
                Value::Array(m)
            }
            (_, p) => strip_directives(p),
        };
        original.insert(key, merged);
    }
    Ok(original)
}

type KeyFn = Box<dyn Fn(&Value) -> Option<Value>>;

/// What identifies a list element: its merge key's value, or itself.
fn key_fn(strategy: &ListStrategy) -> KeyFn {
    match strategy {
        ListStrategy::Map(key) => {
            let key = key.clone();
            Box::new(move |v: &Value| v.get(&key).cloned())
        }
        _ => Box::new(|v: &Value| Some(v.clone())),
    }
}

fn index_of(list: &[Value], item: &Value, key_of: &KeyFn) -> Option<usize> {
    let wanted = key_of(item)?;
    list.iter()
        .position(|v| key_of(v).as_ref() == Some(&wanted))
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    strategy: &ListStrategy,
    path: &mut Vec<String>,
    schema: Schema<'_>,
) -> Result<Vec<Value>, String> {
    match strategy {
        // Taken as sent, directives and all (`mergeSliceHandler` without a
        // merge strategy): a `$patch: delete` entry stays, and decoding
        // drops its `$patch` as an unknown field, with a warning.
        ListStrategy::Atomic => Ok(patch),
        ListStrategy::Set => {
            let mut merged = original.clone();
            for item in &patch {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            let key_of = key_fn(strategy);
            let (from_patch, server_only): (Vec<Value>, Vec<Value>) =
                merged.into_iter().partition(|v| patch.contains(v));
            Ok(normalize_order(
                from_patch,
                server_only,
                &patch,
                &original,
                &key_of,
            ))
        }
        ListStrategy::Map(key) => {
            let mut original = original;
            let mut plain = Vec::new();
            let mut replace = false;
            for item in patch {
                let Value::Object(map) = &item else {
                    return Err(format!("invalid patch: list element {item} is not a map"));
                };
                match map.get(DIRECTIVE).and_then(Value::as_str) {
                    None => plain.push(item),
                    Some("delete") => {
                        let Some(value) = map.get(key) else {
                            return Err(format!(
                                "map: {item} does not contain declared merge key: {key}"
                            ));
                        };
                        original.retain(|o| o.get(key) != Some(value));
                    }
                    Some("replace") => replace = true,
                    Some(other) => {
                        return Err(format!("Unable to find patch type: {other} in the patch"));
                    }
                }
            }
            if replace {
                return Ok(plain.into_iter().map(strip_directives).collect());
            }
            let server_order = original.clone();
            for item in &plain {
                let Some(value) = item.get(key) else {
                    return Err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                match original.iter().position(|o| o.get(key) == Some(value)) {
                    Some(at) => {
                        let (Value::Object(o), Value::Object(p)) =
                            (original[at].clone(), item.clone())
                        else {
                            return Err(format!(
                                "invalid patch: list element {} is not a map",
                                original[at]
                            ));
                        };
                        original[at] = Value::Object(merge_map(o, p, path, schema)?);
                    }
                    None => original.push(strip_directives(item.clone())),
                }
            }
            let key_of = key_fn(strategy);
            let (from_patch, server_only): (Vec<Value>, Vec<Value>) = original
                .into_iter()
                .partition(|v| index_of(&plain, v, &key_of).is_some());
            Ok(normalize_order(
                from_patch,
                server_only,
                &plain,
                &server_order,
                &key_of,
            ))
        }
    }
}

/// `normalizeElementOrder`: patch items in patch order, server-only items in
/// server order, interleaved by their positions in the server's list; items
/// new to the server come before the server-only items that follow them.
fn normalize_order(
    mut from_patch: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    key_of: &KeyFn,
) -> Vec<Value> {
    let position = |list: &[Value], v: &Value| index_of(list, v, key_of).unwrap_or(usize::MAX);
    from_patch.sort_by_key(|v| position(patch_order, v));
    server_only.sort_by_key(|v| position(server_order, v));
    let mut out = Vec::with_capacity(from_patch.len() + server_only.len());
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        from_patch.into_iter().peekable(),
    );
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_of(server_order, l, key_of),
                    index_of(server_order, r, key_of),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_schema(path: &[String]) -> ListStrategy {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        match p.as_slice() {
            ["metadata", "finalizers"] => ListStrategy::Set,
            ["status", "addresses"] | ["status", "conditions"] => ListStrategy::Map("type".into()),
            _ => ListStrategy::Atomic,
        }
    }

    fn smp(current: Value, patch: Value) -> Value {
        apply(
            PatchType::Strategic,
            &current,
            patch.to_string().as_bytes(),
            &node_schema,
        )
        .unwrap()
        .value
    }

    #[test]
    fn merge_key_lists_merge_by_key() {
        let node = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n1"}
        ]}});
        let out = smp(
            node,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        );
        assert_eq!(
            out["status"]["addresses"],
            json!([
                {"type": "InternalIP", "address": "10.0.0.2"},
                {"type": "Hostname", "address": "n1"}
            ])
        );
    }

    #[test]
    fn new_items_go_first_and_delete_directive_removes() {
        let node = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let out = smp(
            node.clone(),
            json!({"status": {"conditions": [{"type": "NetworkUnavailable", "status": "False"}]}}),
        );
        assert_eq!(out["status"]["conditions"][0]["type"], "NetworkUnavailable");
        assert_eq!(out["status"]["conditions"][1]["type"], "Ready");
        let out = smp(
            node,
            json!({"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}}),
        );
        assert_eq!(out["status"]["conditions"], json!([]));
    }

    #[test]
    fn finalizers_are_a_set() {
        let obj = json!({"metadata": {"finalizers": ["a.io/x", "b.io/y"]}});
        let out = smp(
            obj.clone(),
            json!({"metadata": {"finalizers": ["b.io/y", "c.io/z"]}}),
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["a.io/x", "b.io/y", "c.io/z"])
        );
        let out = smp(
            obj,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b.io/y"]));
    }

    #[test]
    fn atomic_lists_are_replaced_and_nulls_delete() {
        let obj = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "x": 1}});
        let out = smp(
            obj,
            json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}], "x": null}}),
        );
        assert_eq!(
            out["spec"],
            json!({"taints": [{"key": "b", "effect": "NoSchedule"}]})
        );
    }

    #[test]
    fn set_element_order_reorders() {
        let node = json!({"status": {"addresses": [
            {"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": "n1"}
        ]}});
        let out = smp(
            node,
            json!({"status": {
                "$setElementOrder/addresses": [{"type": "Hostname"}, {"type": "InternalIP"}],
                "addresses": [{"type": "Hostname", "address": "n2"}]
            }}),
        );
        assert_eq!(
            out["status"]["addresses"],
            json!([
                {"type": "Hostname", "address": "n2"},
                {"type": "InternalIP", "address": "10.0.0.1"}
            ])
        );
    }

    #[test]
    fn replace_directive_in_a_list_replaces_it_even_when_absent() {
        let patch = json!({"status": {"addresses": [
            {"$patch": "replace"},
            {"type": "InternalIP", "address": "10.0.0.9"}
        ]}});
        let replaced = smp(
            json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": "n1"}
            ]}}),
            patch.clone(),
        );
        assert_eq!(
            replaced["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.9"}])
        );
        for current in [json!({"status": {}}), json!({})] {
            let created = smp(current, patch.clone());
            assert_eq!(
                created["status"]["addresses"],
                json!([{"type": "InternalIP", "address": "10.0.0.9"}])
            );
        }
    }

    #[test]
    fn replace_directive_on_a_map() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let out = smp(
            obj,
            json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
    }

    #[test]
    fn json_and_merge_patches() {
        let obj = json!({"metadata": {"finalizers": ["a.io/x"]}, "spec": {"x": 1}});
        let out = apply(
            PatchType::Json,
            &obj,
            br#"[{"op":"add","path":"/metadata/finalizers/-","value":"b.io/y"}]"#,
            &node_schema,
        )
        .unwrap()
        .value;
        assert_eq!(out["metadata"]["finalizers"], json!(["a.io/x", "b.io/y"]));
        let out = apply(
            PatchType::Merge,
            &obj,
            br#"{"spec":{"x":null,"y":2}}"#,
            &node_schema,
        )
        .unwrap()
        .value;
        assert_eq!(out["spec"], json!({"y": 2}));
        let err = apply(
            PatchType::Json,
            &obj,
            br#"[{"op":"test","path":"/spec/x","value":2}]"#,
            &node_schema,
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        for (body, code) in [
            (&br#"[{"op":"bogus","path":"/spec/x"}]"#[..], 422),
            (br#"[{"op":"add","value":1}]"#, 422),
            (br#"{"op":"add"}"#, 400),
        ] {
            let err = apply(PatchType::Json, &obj, body, &node_schema).unwrap_err();
            assert_eq!(err.code(), code, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn merge_patches_report_repeated_keys_and_print_as_go_maps() {
        let obj = json!({"metadata": {"name": "a"}});
        let out = apply(
            PatchType::Merge,
            &obj,
            br#"{"metadata":{"labels":{"x":"1","x":"2"}}}"#,
            &node_schema,
        )
        .unwrap();
        assert_eq!(out.duplicates, ["metadata.labels.x"]);
        assert_eq!(out.value["metadata"]["labels"], json!({"x": "2"}));
        assert_eq!(
            go_map_text(&json!({"spec": {"b": [1, null], "a": "x y"}})),
            "map[spec:map[a:x y b:[1 <nil>]]]"
        );
    }
}

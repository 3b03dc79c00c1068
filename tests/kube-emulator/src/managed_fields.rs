//! Server-side apply's field ownership (`metadata.managedFields`), kept
//! for what an applier observes: each manager's `Apply` entry records the
//! fields (`FieldsV1`: `f:` fields, `k:` keyed list items, `v:` set
//! members) of the configuration it last applied; a field it applied
//! before but no longer does is removed unless another manager owns it;
//! and a write that changes a field takes it from the appliers that owned
//! it. So `helm upgrade` and `helm rollback` drop what a chart stopped
//! rendering, as on a real server. Writes other than apply get no entry
//! of their own, and an apply never conflicts (as with `force=true`).

use serde_json::{Map, Value, json};

use crate::kinds::{self, Subresource, str_at};
use crate::meta;
use crate::patch::ListStrategy;
use crate::resources::ResourceType;

/// One manager's field set, a `FieldsV1` tree.
type Fields = Map<String, Value>;

/// Fields no manager owns (`metadata.name`, the server's bookkeeping).
const IGNORED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
];

/// The fields of an applied configuration. The status of a resource with
/// a status subresource belongs to that subresource, and the rest of it
/// to the main resource.
fn applied_fields(rt: &ResourceType, sub: Subresource, applied: &Value) -> Fields {
    let mut set = Fields::new();
    let Some(applied) = applied.as_object() else {
        return set;
    };
    for (key, value) in applied {
        let owned = match (key.as_str(), sub) {
            ("apiVersion" | "kind", _) => false,
            ("status", Subresource::Main) => !rt.status_subresource,
            (_, Subresource::Status) => key == "status" || key == "metadata",
            _ => true,
        };
        if !owned || value.is_null() {
            continue;
        }
        let node = if key == "metadata" {
            let metadata: Map<String, Value> = value
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| !IGNORED_METADATA.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            fields_of(rt, &metadata, &mut vec![key.clone()])
        } else {
            node_of(rt, value, &mut vec![key.clone()])
        };
        if key != "metadata" || !node.is_empty() {
            set.insert(format!("f:{key}"), Value::Object(node));
        }
    }
    set
}

/// The fields of a map at `path`.
fn fields_of(rt: &ResourceType, map: &Map<String, Value>, path: &mut Vec<String>) -> Fields {
    let mut set = Fields::new();
    for (key, value) in map.iter().filter(|(_, v)| !v.is_null()) {
        path.push(key.clone());
        set.insert(format!("f:{key}"), Value::Object(node_of(rt, value, path)));
        path.pop();
    }
    set
}

/// What a value at `path` owns below it: a map's fields, a keyed list's
/// items, a set's members; nothing more for a scalar or atomic list.
fn node_of(rt: &ResourceType, value: &Value, path: &mut Vec<String>) -> Fields {
    match value {
        Value::Object(map) => fields_of(rt, map, path),
        Value::Array(items) => match kinds::list_strategy(rt, path) {
            ListStrategy::Atomic => Fields::new(),
            ListStrategy::Set => items
                .iter()
                .map(|item| (format!("v:{item}"), json!({})))
                .collect(),
            ListStrategy::Map(key) => items
                .iter()
                .filter_map(|item| {
                    let id = item.get(&key)?;
                    let mut node = json!({".": {}});
                    if let (Some(node), Some(map)) = (node.as_object_mut(), item.as_object()) {
                        node.extend(fields_of(rt, map, path));
                    }
                    Some((format!("k:{}", json!({ key.as_str(): id })), node))
                })
                .collect(),
        },
        _ => Fields::new(),
    }
}

/// Whether `manager`'s apply entry for `sub` is this one.
fn is_apply_entry(entry: &Value, manager: &str, sub: Subresource) -> bool {
    let subresource = match sub {
        Subresource::Main => "",
        Subresource::Status => "status",
    };
    str_at(entry, "/manager") == manager
        && str_at(entry, "/operation") == "Apply"
        && str_at(entry, "/subresource") == subresource
}

fn entries(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn fields(entry: &Value) -> Fields {
    entry
        .get("fieldsV1")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Adds `more` to `set`.
fn union(set: &mut Fields, more: &Fields) {
    for (key, node) in more {
        let target = set.entry(key.clone()).or_insert_with(|| json!({}));
        if let (Some(target), Some(node)) = (target.as_object_mut(), node.as_object()) {
            union(target, node);
        }
    }
}

/// The apply of `applied` by `manager`, already merged into `merged`:
/// removes the fields the manager applied last time but not now that no
/// other manager owns, and records what it applies now. The entry keeps
/// its time when its fields did not change, so an apply that changes
/// nothing writes nothing.
pub fn apply(
    rt: &ResourceType,
    sub: Subresource,
    merged: &mut Value,
    manager: &str,
    applied: &Value,
) {
    let now = applied_fields(rt, sub, applied);
    let mut all = entries(merged);
    let mine = all.iter().position(|e| is_apply_entry(e, manager, sub));
    let before = mine.map(|i| fields(&all[i])).unwrap_or_default();
    let mut others = Fields::new();
    for (_, entry) in all.iter().enumerate().filter(|(i, _)| Some(*i) != mine) {
        union(&mut others, &fields(entry));
    }
    remove_unowned(merged, &before, &now, &others);
    let api_version = rt.api_version();
    let time = match mine.map(|i| &all[i]) {
        Some(entry) if before == now && str_at(entry, "/apiVersion") == api_version => entry
            .get("time")
            .cloned()
            .unwrap_or_else(|| json!(meta::now())),
        _ => json!(meta::now()),
    };
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": time,
        "fieldsType": "FieldsV1",
        "fieldsV1": now,
    });
    if sub == Subresource::Status {
        entry["subresource"] = json!("status");
    }
    match mine {
        Some(i) => all[i] = entry,
        None => all.push(entry),
    }
    meta::set(merged, "managedFields", Value::Array(all));
}

/// A field set's node that owns the whole field (a leaf) rather than
/// some of its fields.
fn is_leaf(node: &Fields) -> bool {
    node.is_empty()
}

/// Removes from `target` what `before` owned and neither `now` nor
/// `others` does.
fn remove_unowned(target: &mut Value, before: &Fields, now: &Fields, others: &Fields) {
    let empty = Fields::new();
    for (key, old) in before.iter().filter(|(k, _)| k.as_str() != ".") {
        let old = old.as_object().unwrap_or(&empty);
        let now = now.get(key).and_then(Value::as_object);
        let other = others.get(key).and_then(Value::as_object);
        if now.is_some_and(is_leaf) || other.is_some_and(is_leaf) {
            continue;
        }
        if now.is_none() && other.is_none() && (is_leaf(old) || old.contains_key(".")) {
            remove(target, key);
        } else if let Some(child) = locate_mut(target, key) {
            remove_unowned(child, old, now.unwrap_or(&empty), other.unwrap_or(&empty));
        }
    }
}

/// How a `FieldsV1` key finds its value in a map or list.
enum Step {
    Field(String),
    Item(Map<String, Value>),
    Member(Value),
}

fn step(key: &str) -> Option<Step> {
    if let Some(field) = key.strip_prefix("f:") {
        return Some(Step::Field(field.to_owned()));
    }
    if let Some(id) = key.strip_prefix("k:") {
        return serde_json::from_str(id).ok().map(Step::Item);
    }
    key.strip_prefix("v:")
        .and_then(|v| serde_json::from_str(v).ok())
        .map(Step::Member)
}

impl Step {
    fn matches(&self, item: &Value) -> bool {
        match self {
            Step::Field(_) => false,
            Step::Item(id) => id.iter().all(|(k, v)| item.get(k) == Some(v)),
            Step::Member(value) => item == value,
        }
    }
}

fn locate<'a>(target: &'a Value, key: &str) -> Option<&'a Value> {
    match (step(key)?, target) {
        (Step::Field(field), Value::Object(map)) => map.get(&field),
        (step, Value::Array(items)) => items.iter().find(|item| step.matches(item)),
        _ => None,
    }
}

fn locate_mut<'a>(target: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    match (step(key)?, target) {
        (Step::Field(field), Value::Object(map)) => map.get_mut(&field),
        (step, Value::Array(items)) => items.iter_mut().find(|item| step.matches(item)),
        _ => None,
    }
}

fn remove(target: &mut Value, key: &str) {
    match (step(key), target) {
        (Some(Step::Field(field)), Value::Object(map)) => {
            map.remove(&field);
        }
        (Some(step), Value::Array(items)) => items.retain(|item| !step.matches(item)),
        _ => {}
    }
}

/// A write changed `old` into `new`: the fields it changed are no longer
/// the appliers' (but for the current applier's own entry, `applier`).
/// Managers left owning nothing are dropped. A write that sends no
/// `managedFields` keeps the stored ones, as upstream's field manager does.
pub fn transfer(new: &mut Value, old: &Value, applier: Option<(&str, Subresource)>) {
    if new.pointer("/metadata/managedFields").is_none()
        && let Some(stored) = old.pointer("/metadata/managedFields")
    {
        meta::set(new, "managedFields", stored.clone());
    }
    let kept: Vec<Value> = entries(new)
        .into_iter()
        .filter_map(|mut entry| {
            if applier.is_some_and(|(manager, sub)| is_apply_entry(&entry, manager, sub)) {
                return Some(entry);
            }
            let mut set = fields(&entry);
            keep_unchanged(&mut set, Some(old), Some(&*new));
            if set.is_empty() {
                return None;
            }
            entry["fieldsV1"] = Value::Object(set);
            Some(entry)
        })
        .collect();
    // `omitempty`: no managers, no field.
    let kept = if kept.is_empty() {
        Value::Null
    } else {
        Value::Array(kept)
    };
    meta::set(new, "managedFields", kept);
}

/// Drops from `set` the fields whose value differs between `old` and `new`.
fn keep_unchanged(set: &mut Fields, old: Option<&Value>, new: Option<&Value>) {
    set.retain(|key, node| {
        if key == "." {
            return true;
        }
        let before = old.and_then(|o| locate(o, key));
        let after = new.and_then(|n| locate(n, key));
        match node.as_object_mut() {
            Some(node) if is_leaf(node) => before == after,
            Some(node) => {
                if node.contains_key(".") && after.is_none() {
                    return false;
                }
                keep_unchanged(node, before, after);
                !node.is_empty()
            }
            None => false,
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, Rules};

    fn deployments() -> std::sync::Arc<ResourceType> {
        Registry::new().builtin(Rules::Deployment).unwrap()
    }

    fn applied(env: &[(&str, &str)], annotations: Value) -> Value {
        let env: Vec<Value> = env
            .iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect();
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [{"name": "web", "env": env}]}}},
        })
    }

    #[test]
    fn an_apply_owns_keyed_items_and_fields() {
        let set = applied_fields(
            &deployments(),
            Subresource::Main,
            &applied(&[("A", "1")], json!({"x": "1"})),
        );
        assert_eq!(
            Value::Object(set),
            json!({
                "f:metadata": {"f:annotations": {"f:x": {}}},
                "f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                    ".": {}, "f:name": {},
                    "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                }}}}},
            })
        );
    }

    #[test]
    fn what_a_manager_stops_applying_goes_unless_another_owns_it() {
        let rt = deployments();
        let mut live = applied(&[("A", "1"), ("B", "2")], json!({"x": "1", "y": "2"}));
        live["spec"]["replicas"] = json!(3);
        let first = live.clone();
        apply(&rt, Subresource::Main, &mut live, "helm", &first);
        let mut other = live.clone();
        apply(
            &rt,
            Subresource::Main,
            &mut other,
            "ops",
            &json!({"metadata": {"annotations": {"y": "2"}}}),
        );
        let next = applied(&[("A", "1")], json!({"x": "1"}));
        let mut merged = other.clone();
        apply(&rt, Subresource::Main, &mut merged, "helm", &next);
        assert_eq!(
            merged["metadata"]["annotations"],
            json!({"x": "1", "y": "2"})
        );
        assert_eq!(
            merged["spec"]["template"]["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}])
        );
        let managers: Vec<&str> = merged["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["helm", "ops"]);
    }

    #[test]
    fn a_write_takes_the_fields_it_changes() {
        let rt = deployments();
        let mut old = applied(&[("A", "1")], json!({"x": "1"}));
        let first = old.clone();
        apply(&rt, Subresource::Main, &mut old, "helm", &first);
        let mut new = old.clone();
        new["metadata"]["annotations"]["x"] = json!("edited");
        transfer(&mut new, &old, None);
        assert_eq!(
            new["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"],
            Value::Null,
            "{new:#}"
        );
        let mut unchanged = old.clone();
        if let Some(meta) = unchanged["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        transfer(&mut unchanged, &old, None);
        assert_eq!(
            unchanged["metadata"]["managedFields"],
            old["metadata"]["managedFields"]
        );
    }
}

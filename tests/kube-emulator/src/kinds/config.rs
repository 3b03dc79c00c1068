//! ConfigMaps and Secrets (`ValidateConfigMap`, `ValidateSecret`): key
//! syntax, the 1 MiB size limit, `immutable`, Secret `type` rules, and the
//! write-only `stringData` folded into `data`.

use k8s_openapi::ByteString;
use serde_json::{Map, Value, json};

use super::{set_field, str_at};
use crate::meta::{self, NameRule};
use crate::status::FieldError;
use crate::validation;

const MAX_SIZE: usize = 1024 * 1024;
const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// Folds `stringData` into `data` and defaults `type` to `Opaque`.
pub fn prepare_secret(obj: &mut Value) {
    if obj
        .get("type")
        .is_none_or(|t| t.as_str().unwrap_or("").is_empty())
    {
        set_field(obj, "type", json!("Opaque"));
    }
    let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let mut data = obj
        .get("data")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (key, value) in strings {
        let bytes = ByteString(value.as_str().unwrap_or("").as_bytes().to_vec());
        data.insert(key, serde_json::to_value(bytes).unwrap_or(Value::Null));
    }
    set_field(obj, "data", Value::Object(data));
}

fn keys_and_size(obj: &Value, fields: &[&str], errs: &mut Vec<FieldError>) -> usize {
    let mut size = 0;
    let mut seen: Vec<&str> = Vec::new();
    for field in fields {
        let Some(map) = obj.get(*field).and_then(Value::as_object) else {
            continue;
        };
        for (key, value) in map {
            for msg in validation::config_map_key(key) {
                errs.push(FieldError::invalid(
                    format!("{field}[{key}]"),
                    key.as_str(),
                    msg,
                ));
            }
            if seen.contains(&key.as_str()) {
                errs.push(FieldError::invalid(
                    format!("{field}[{key}]"),
                    key.as_str(),
                    format!("duplicate of key present in {}", fields[0]),
                ));
            }
            seen.push(key);
            size += value.as_str().map_or(0, str::len);
        }
    }
    size
}

pub fn validate_config_map(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, true, NameRule::Dns1123Subdomain);
    let size = keys_and_size(obj, &["data", "binaryData"], &mut errs);
    if size > MAX_SIZE {
        errs.push(FieldError::too_long("", MAX_SIZE));
    }
    errs
}

fn immutable_fields(new: &Value, old: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return errs;
    }
    if new.get("immutable") != old.get("immutable") {
        errs.push(FieldError::forbidden("immutable", IMMUTABLE));
    }
    let empty = Value::Object(Map::new());
    for field in fields {
        let (n, o) = (
            new.get(*field).unwrap_or(&empty),
            old.get(*field).unwrap_or(&empty),
        );
        if n != o {
            errs.push(FieldError::forbidden(*field, IMMUTABLE));
        }
    }
    errs
}

pub fn validate_config_map_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = immutable_fields(new, old, &["data", "binaryData"]);
    let size = keys_and_size(new, &["data", "binaryData"], &mut errs);
    if size > MAX_SIZE {
        errs.push(FieldError::too_long("", MAX_SIZE));
    }
    errs
}

/// Keys a Secret of a well-known type must carry.
fn required_keys(kind: &str) -> &'static [&'static str] {
    match kind {
        "kubernetes.io/tls" => &["tls.crt", "tls.key"],
        "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
        "kubernetes.io/dockercfg" => &[".dockercfg"],
        "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
        _ => &[],
    }
}

fn validate_secret_body(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let size = keys_and_size(obj, &["data"], &mut errs);
    if size > MAX_SIZE {
        errs.push(FieldError::too_long("data", MAX_SIZE));
    }
    let kind = str_at(obj, "/type");
    let data = obj.get("data").and_then(Value::as_object);
    for key in required_keys(kind) {
        if !data.is_some_and(|d| d.contains_key(*key)) {
            errs.push(FieldError::required(format!("data[{key}]"), ""));
        }
    }
    if kind == "kubernetes.io/basic-auth"
        && !data.is_some_and(|d| d.contains_key("username") || d.contains_key("password"))
    {
        errs.push(FieldError::required("data[username]", ""));
        errs.push(FieldError::required("data[password]", ""));
    }
    if kind == "kubernetes.io/service-account-token"
        && meta::of(obj)
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get("kubernetes.io/service-account.name"))
            .is_none()
    {
        errs.push(FieldError::required(
            "metadata.annotations[kubernetes.io/service-account.name]",
            "",
        ));
    }
    errs
}

pub fn validate_secret(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, true, NameRule::Dns1123Subdomain);
    errs.extend(validate_secret_body(obj));
    errs
}

pub fn validate_secret_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (n, o) = (str_at(new, "/type"), str_at(old, "/type"));
    if n != o {
        errs.push(FieldError::immutable("type", n));
    }
    errs.extend(immutable_fields(new, old, &["data"]));
    errs.extend(validate_secret_body(new));
    errs
}

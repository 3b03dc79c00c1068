//! Per-kind rules, the emulator's version of upstream's registry
//! strategies: decoding (typed round trip through k8s-openapi, so type
//! errors and unknown fields behave as upstream), defaulting, status
//! subresource isolation, generation tracking, validation, selectable
//! fields and strategic-merge list strategies. One submodule per kind, and
//! `pod_template` for the pod template of workloads.

mod apps;
mod config;
mod crd;
mod custom;
mod event;
mod lease;
mod namespace;
mod network_policy;
mod node;
mod pod_template;
mod rbac;
mod service;
pub use service::DEFAULT_NODE_PORTS;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::meta::{self, NameRule};
use crate::patch::ListStrategy;
use crate::resources::{ResourceType, Rules, View};
use crate::status::{ApiError, FieldError, GroupKind};

pub use rbac::GROUP as RBAC_GROUP;

use apps::Workload;

pub use crd::{
    CLEANUP_FINALIZER as CRD_CLEANUP_FINALIZER, condition_is_true as crd_condition_is_true,
    reconcile as reconcile_crd, set_condition as set_crd_condition,
};

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// How unknown fields in a request body are treated (`fieldValidation=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// Read access to other stored objects, for rules that need them (service
/// IP and port allocation).
pub trait Cluster {
    /// All stored objects of a storage key.
    fn objects(&self, storage: &str) -> Vec<Arc<Value>>;

    /// The node ports Services are given (`--service-node-port-range`).
    fn node_ports(&self) -> std::ops::RangeInclusive<i64> {
        service::DEFAULT_NODE_PORTS
    }
}

/// Update policy flags of the upstream strategy.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// A PUT to a missing object creates it.
    pub allow_create_on_update: bool,
    /// A PUT without `metadata.resourceVersion` overwrites unconditionally.
    pub allow_unconditional_update: bool,
}

pub fn policy(rt: &ResourceType) -> Policy {
    let (create, unconditional) = match rt.rules {
        Rules::Event
        | Rules::Role
        | Rules::ClusterRole
        | Rules::RoleBinding
        | Rules::ClusterRoleBinding => (true, true),
        Rules::Lease => (true, false),
        Rules::CustomResourceDefinition | Rules::Custom => (false, false),
        Rules::Node
        | Rules::Service
        | Rules::Namespace
        | Rules::ConfigMap
        | Rules::Secret
        | Rules::ServiceAccount
        | Rules::NetworkPolicy
        | Rules::Deployment
        | Rules::DaemonSet => (false, true),
    };
    Policy {
        allow_create_on_update: create,
        allow_unconditional_update: unconditional,
    }
}

/// A JSON pointer lookup returning `""` for anything absent or not a string.
pub fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A JSON pointer lookup returning an empty slice for anything absent or
/// not an array.
pub fn array_at<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Sets `obj[key]`, making `obj` an object if it is not one.
pub fn set_field(obj: &mut Value, key: &str, value: Value) {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    obj[key] = value;
}

/// Decodes a request body the way the typed upstream decoder would: type
/// mismatches and malformed `MicroTime`s are a 400, missing required
/// fields a 422, and fields the type does not have are dropped; those and
/// the keys the body repeated (`duplicates`) are warnings, or a 400 under
/// `fieldValidation=Strict`. Empty lists and maps of the metadata are
/// dropped, as Go's `omitempty` does when the object is encoded again.
/// Returns the normalised object and warnings.
pub fn decode(
    rt: &ResourceType,
    value: Value,
    duplicates: &[String],
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    check_micro_times(rt, &value)?;
    let (mut decoded, warnings) = decode_fields(rt, value, duplicates, validation)?;
    meta::omit_empty(&mut decoded);
    Ok((decoded, warnings))
}

fn decode_fields(
    rt: &ResourceType,
    value: Value,
    duplicates: &[String],
    validation: FieldValidation,
) -> Result<(Value, Vec<String>), ApiError> {
    use k8s_openapi::api;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    let decoded = match (rt.rules, rt.view) {
        (Rules::Node, _) => {
            let node = round_trip::<api::core::v1::Node>(rt, &value)?;
            node::check_quantities(rt, &node)?;
            node
        }
        (Rules::Service, _) => round_trip::<api::core::v1::Service>(rt, &value)?,
        (Rules::Namespace, _) => round_trip::<api::core::v1::Namespace>(rt, &value)?,
        (Rules::ConfigMap, _) => round_trip::<api::core::v1::ConfigMap>(rt, &value)?,
        (Rules::Secret, _) => round_trip::<api::core::v1::Secret>(rt, &value)?,
        (Rules::ServiceAccount, _) => round_trip::<api::core::v1::ServiceAccount>(rt, &value)?,
        (Rules::Event, View::Native) => round_trip::<api::core::v1::Event>(rt, &value)?,
        (Rules::Event, View::EventsV1) => {
            round_trip::<api::events::v1::Event>(rt, &event::series_zero_filled(&value))?
        }
        (Rules::Lease, _) => round_trip::<api::coordination::v1::Lease>(rt, &value)?,
        (Rules::NetworkPolicy, _) => round_trip::<api::networking::v1::NetworkPolicy>(rt, &value)?,
        (Rules::Deployment, _) => round_trip::<api::apps::v1::Deployment>(rt, &value)?,
        (Rules::DaemonSet, _) => round_trip::<api::apps::v1::DaemonSet>(rt, &value)?,
        (Rules::Role, _) => round_trip::<api::rbac::v1::Role>(rt, &rbac::role_zero_filled(&value))?,
        (Rules::ClusterRole, _) => {
            round_trip::<api::rbac::v1::ClusterRole>(rt, &rbac::role_zero_filled(&value))?
        }
        (Rules::RoleBinding, _) => {
            round_trip::<api::rbac::v1::RoleBinding>(rt, &rbac::binding_zero_filled(&value))?
        }
        (Rules::ClusterRoleBinding, _) => {
            round_trip::<api::rbac::v1::ClusterRoleBinding>(rt, &rbac::binding_zero_filled(&value))?
        }
        (Rules::CustomResourceDefinition, _) => {
            round_trip::<apiext::CustomResourceDefinition>(rt, &value)?
        }
        (Rules::Custom, _) => {
            // Asked for warnings, custom resources report the fields their
            // schema prunes; the verdict on them, with the repeated keys,
            // is made here.
            let (decoded, unknown) = custom::decode(rt, value, FieldValidation::Warn)?;
            let warnings = strict_verdict(rt, duplicates, unknown, validation)?;
            return Ok((decoded, warnings));
        }
    };
    let mut unknown = Vec::new();
    unknown_fields(&value, &decoded, "", &mut unknown);
    let unknown = unknown.iter().map(|f| unknown_field(f)).collect();
    let warnings = strict_verdict(rt, duplicates, unknown, validation)?;
    Ok((decoded, warnings))
}

/// The 400 for a body the decoder cannot read as this kind, with the
/// decoder's own message.
pub fn undecodable(rt: &ResourceType, detail: impl Into<String>) -> ApiError {
    ApiError::Undecodable {
        kind: rt.kind.clone(),
        version: rt.version.clone(),
        detail: detail.into(),
    }
}

fn unknown_field(path: &str) -> String {
    format!("unknown field {}", crate::status::quote(path))
}

/// Strict decoding errors (repeated keys first, then unknown fields, each
/// as sigs.k8s.io/json words it): warnings, nothing under `Ignore`, or a
/// 400 under `Strict`.
fn strict_verdict(
    rt: &ResourceType,
    duplicates: &[String],
    unknown: Vec<String>,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let mut errors: Vec<String> = duplicates
        .iter()
        .map(|path| format!("duplicate field {}", crate::status::quote(path)))
        .collect();
    errors.extend(unknown);
    match validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(errors),
        FieldValidation::Strict if errors.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => Err(undecodable(
            rt,
            format!("strict decoding error: {}", errors.join(", ")),
        )),
    }
}

/// The `metav1.MicroTime` fields of a kind, which upstream decodes only
/// with exactly six fractional digits.
fn micro_time_fields(rt: &ResourceType) -> &'static [&'static str] {
    match rt.rules {
        Rules::Lease => &["/spec/acquireTime", "/spec/renewTime"],
        Rules::Event => &["/eventTime", "/series/lastObservedTime"],
        _ => &[],
    }
}

/// A malformed `MicroTime` fails the decoding at once, before any type
/// error elsewhere (Go's decoder returns an `UnmarshalJSON` error
/// immediately but saves type errors for the end).
fn check_micro_times(rt: &ResourceType, value: &Value) -> Result<(), ApiError> {
    for pointer in micro_time_fields(rt) {
        if let Some(Value::String(time)) = value.pointer(pointer) {
            crate::micro_time::check(time).map_err(|e| undecodable(rt, e))?;
        }
    }
    Ok(())
}

/// Turns unknown field paths into warnings, or an error under `Strict`
/// (for `custom::decode`; [`decode`] asks it for warnings and judges them
/// with the repeated keys).
fn unknown_field_verdict(
    unknown: Vec<String>,
    validation: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let messages: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(messages),
        FieldValidation::Strict if messages.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        ))),
    }
}

fn round_trip<K: Serialize + DeserializeOwned>(
    rt: &ResourceType,
    value: &Value,
) -> Result<Value, ApiError> {
    let typed: K = serde_path_to_error::deserialize(value.clone()).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.inner().to_string();
        if let Some(field) = inner
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
        {
            let full = if path == "." {
                field.to_owned()
            } else {
                format!("{path}.{field}")
            };
            return ApiError::invalid(
                &rt.group_kind(),
                meta::name(value),
                vec![FieldError::required(full, "")],
            );
        }
        undecodable(rt, format!("{path}: {inner}"))
    })?;
    serde_json::to_value(&typed)
        .map_err(|e| ApiError::Internal(format!("re-encoding {}: {e}", rt.kind)))
}

/// Paths present (and not null) in `input` but absent from `decoded`.
fn unknown_fields(input: &Value, decoded: &Value, path: &str, out: &mut Vec<String>) {
    match (input, decoded) {
        (Value::Object(i), Value::Object(d)) => {
            for (key, value) in i {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match d.get(key) {
                    None if !value.is_null() => out.push(child),
                    Some(dv) => unknown_fields(value, dv, &child, out),
                    None => {}
                }
            }
        }
        (Value::Array(i), Value::Array(d)) => {
            for (n, (iv, dv)) in i.iter().zip(d).enumerate() {
                unknown_fields(iv, dv, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

/// Converts an object from its endpoint's view to the stored form.
pub fn to_storage(rt: &ResourceType, value: Value) -> Value {
    match rt.view {
        View::Native => custom::to_storage(rt, value),
        View::EventsV1 => event::to_core(value),
    }
}

/// Converts a stored object to its endpoint's view.
pub fn to_view(rt: &ResourceType, value: &Value) -> Value {
    match rt.view {
        View::Native => custom::with_api_version(rt, value),
        View::EventsV1 => event::to_events_v1(value),
    }
}

/// Fills `apiVersion` and `kind` of a built-in object when absent and
/// rejects a body of another type (400). A custom resource must name both;
/// another API version is a 400, another kind is left to validation.
pub fn check_type_meta(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    let api_version = rt.api_version();
    let given_version = str_at(obj, "/apiVersion").to_owned();
    let given_kind = str_at(obj, "/kind").to_owned();
    if rt.is_custom() {
        if given_kind.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                truncate(&obj.to_string(), 200)
            )));
        }
        if given_version.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Object 'apiVersion' is missing in '{}'",
                truncate(&obj.to_string(), 200)
            )));
        }
    }
    if !given_version.is_empty() && given_version != api_version {
        let err = ApiError::bad_request(format!(
            "the API version in the data ({given_version}) does not match the expected API version ({api_version})"
        ));
        return Err(if rt.is_custom() {
            err
        } else {
            err.with_kind_mismatch(&given_kind, &rt.kind)
        });
    }
    set_field(obj, "apiVersion", Value::String(api_version));
    if rt.is_custom() {
        // Decoding keeps an unstructured object's kind; the strategy's
        // validation rejects a wrong one (see `invalid_kind`).
        return Ok(());
    }
    if !given_kind.is_empty() && given_kind != rt.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({given_kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    set_field(obj, "kind", Value::String(rt.kind.clone()));
    Ok(())
}

/// The group and kind an `Invalid` error names: the object's own kind, as
/// upstream types an unstructured custom resource by what it says it is
/// (`Gadget.example.com "x" is invalid: kind: Invalid value: "Gadget": must
/// be Widget`); the resource's kind for built-in types.
pub fn invalid_kind(rt: &ResourceType, obj: &Value) -> GroupKind {
    match str_at(obj, "/kind") {
        kind if rt.is_custom() && !kind.is_empty() => GroupKind::new(&rt.group, kind),
        _ => rt.group_kind(),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

impl ApiError {
    /// Prefers the kind mismatch message when the kinds differ.
    fn with_kind_mismatch(self, given: &str, expected: &str) -> ApiError {
        if !given.is_empty() && given != expected {
            ApiError::bad_request(format!(
                "the kind in the data ({given}) does not match the expected kind ({expected})"
            ))
        } else {
            self
        }
    }
}

/// Defaults and server-owned fields of a new object (`PrepareForCreate`),
/// and allocations (service IPs and ports). Allocation failures are field
/// errors.
pub fn prepare_create(
    rt: &ResourceType,
    obj: &mut Value,
    cluster: &dyn Cluster,
) -> Vec<FieldError> {
    match rt.rules {
        Rules::Node => node::prepare_create(obj),
        Rules::Service => return service::prepare_create(obj, cluster),
        Rules::Namespace => namespace::prepare_create(obj),
        Rules::Secret => config::prepare_secret(obj),
        Rules::Lease => lease::prepare(obj, None),
        Rules::CustomResourceDefinition => crd::prepare_create(obj),
        Rules::Custom => custom::prepare_create(rt, obj),
        Rules::RoleBinding | Rules::ClusterRoleBinding => rbac::default_binding(obj),
        Rules::Deployment => apps::prepare_create(Workload::Deployment, obj),
        Rules::DaemonSet => apps::prepare_create(Workload::DaemonSet, obj),
        Rules::NetworkPolicy => network_policy::prepare(obj),
        Rules::ConfigMap
        | Rules::ServiceAccount
        | Rules::Event
        | Rules::Role
        | Rules::ClusterRole => {}
    }
    Vec::new()
}

/// What an update may change (`PrepareForUpdate`): the main resource keeps
/// the stored status, the status subresource keeps the stored spec.
pub fn prepare_update(
    rt: &ResourceType,
    sub: Subresource,
    new: &mut Value,
    old: &Value,
    cluster: &dyn Cluster,
) -> Vec<FieldError> {
    match rt.rules {
        Rules::Node => node::prepare_update(sub, new, old),
        Rules::Service => return service::prepare_update(sub, new, old, cluster),
        Rules::Namespace => namespace::prepare_update(sub, new, old),
        Rules::Secret => config::prepare_secret(new),
        Rules::Lease => lease::prepare(new, Some(old)),
        Rules::CustomResourceDefinition => crd::prepare_update(sub, new, old),
        Rules::Custom => custom::prepare_update(rt, sub, new, old),
        Rules::RoleBinding | Rules::ClusterRoleBinding => rbac::default_binding(new),
        Rules::Deployment => apps::prepare_update(Workload::Deployment, sub, new, old),
        Rules::DaemonSet => apps::prepare_update(Workload::DaemonSet, sub, new, old),
        Rules::NetworkPolicy => network_policy::prepare(new),
        Rules::ConfigMap
        | Rules::ServiceAccount
        | Rules::Event
        | Rules::Role
        | Rules::ClusterRole => {}
    }
    Vec::new()
}

/// `Validate` of the kind's strategy, then the common metadata checks.
pub fn validate_create(rt: &ResourceType, obj: &Value) -> Vec<FieldError> {
    let errs = match rt.rules {
        Rules::Node => node::validate(obj),
        Rules::Service => service::validate(obj),
        Rules::Namespace => namespace::validate(obj),
        Rules::ConfigMap => config::validate_config_map(obj),
        Rules::Secret => config::validate_secret(obj),
        // `ValidateServiceAccount`: the name is a DNS subdomain.
        Rules::ServiceAccount => meta::validate(obj, true, NameRule::Dns1123Subdomain),
        Rules::Event => event::validate_create(rt, obj),
        Rules::Lease => lease::validate(obj),
        Rules::CustomResourceDefinition => crd::validate(obj),
        Rules::Custom => custom::validate(rt, obj),
        Rules::Role | Rules::ClusterRole => rbac::validate_role(obj, rt.namespaced),
        Rules::RoleBinding | Rules::ClusterRoleBinding => {
            rbac::validate_binding(obj, rt.namespaced)
        }
        Rules::Deployment => apps::validate(Workload::Deployment, obj),
        Rules::DaemonSet => apps::validate(Workload::DaemonSet, obj),
        Rules::NetworkPolicy => network_policy::validate(obj),
    };
    if !errs.is_empty() {
        return errs;
    }
    meta::validate(obj, rt.namespaced, NameRule::PathSegment)
}

/// `ValidateUpdate` of the kind's (or its status) strategy.
pub fn validate_update(
    rt: &ResourceType,
    sub: Subresource,
    new: &Value,
    old: &Value,
) -> Vec<FieldError> {
    let mut errs = meta::validate_update(new, old);
    errs.extend(match rt.rules {
        Rules::Node => node::validate_update(sub, new, old),
        Rules::Service => service::validate_update(sub, new, old),
        Rules::Namespace => namespace::validate_finalizers(new),
        Rules::ConfigMap => config::validate_config_map_update(new, old),
        Rules::Secret => config::validate_secret_update(new, old),
        Rules::ServiceAccount => Vec::new(),
        Rules::Event => event::validate_update(rt, new, old),
        Rules::Lease => lease::validate_spec(new),
        Rules::CustomResourceDefinition => crd::validate_update(new, old),
        Rules::Custom => custom::validate(rt, new),
        Rules::Role | Rules::ClusterRole => rbac::validate_rules(new, rt.namespaced),
        Rules::RoleBinding | Rules::ClusterRoleBinding => {
            rbac::validate_binding_update(new, old, rt.namespaced)
        }
        Rules::Deployment => apps::validate_update(Workload::Deployment, sub, new, old),
        Rules::DaemonSet => apps::validate_update(Workload::DaemonSet, sub, new, old),
        Rules::NetworkPolicy => network_policy::validate_spec(new),
    });
    errs
}

/// Warnings the kind's strategy adds to a write that passed validation
/// (`WarningsOnCreate`/`WarningsOnUpdate`).
pub fn warnings(rt: &ResourceType, sub: Subresource, obj: &Value) -> Vec<String> {
    match rt.rules {
        Rules::Node => node::warnings(sub, obj),
        Rules::Service => service::warnings(sub, obj),
        _ => Vec::new(),
    }
}

/// The fields a field selector may use, with this object's values.
pub fn selectable_fields(rt: &ResourceType, obj: &Value) -> Vec<(String, String)> {
    let mut fields = vec![("metadata.name".to_owned(), meta::name(obj).to_owned())];
    if rt.namespaced {
        fields.push((
            "metadata.namespace".to_owned(),
            meta::namespace(obj).to_owned(),
        ));
    }
    let extra: Vec<(&str, String)> = match (rt.rules, rt.view) {
        (Rules::Node, _) => node::fields(obj),
        (Rules::Service, _) => service::fields(obj),
        (Rules::Namespace, _) => vec![("status.phase", str_at(obj, "/status/phase").to_owned())],
        (Rules::Secret, _) => vec![("type", str_at(obj, "/type").to_owned())],
        (Rules::Event, View::Native) => event::core_fields(obj),
        (Rules::Event, View::EventsV1) => event::events_v1_fields(obj),
        (Rules::Custom, _) => return custom::fields(rt, obj, fields),
        _ => Vec::new(),
    };
    fields.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
    fields
}

/// The list strategy of a field path, for strategic merge and apply patches.
pub fn list_strategy(rt: &ResourceType, path: &[String]) -> ListStrategy {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    match p.as_slice() {
        ["metadata", "finalizers"] => return ListStrategy::Set,
        ["metadata", "ownerReferences"] => return ListStrategy::Map("uid".to_owned()),
        _ => {}
    }
    match rt.rules {
        Rules::Node => match p.as_slice() {
            ["spec", "podCIDRs"] => ListStrategy::Set,
            ["status", "addresses" | "conditions"] => ListStrategy::Map("type".to_owned()),
            _ => ListStrategy::Atomic,
        },
        Rules::Service => match p.as_slice() {
            ["spec", "ports"] => ListStrategy::Map("port".to_owned()),
            ["status", "conditions"] => ListStrategy::Map("type".to_owned()),
            _ => ListStrategy::Atomic,
        },
        Rules::Namespace => match p.as_slice() {
            ["status", "conditions"] => ListStrategy::Map("type".to_owned()),
            _ => ListStrategy::Atomic,
        },
        Rules::Custom => custom::list_strategy(rt, &p),
        Rules::Deployment | Rules::DaemonSet => apps::list_strategy(&p),
        _ => ListStrategy::Atomic,
    }
}

/// Bumps `metadata.generation` when anything outside `metadata` (and
/// `status`, if `ignore_status`) changed, as CRDs and custom resources do.
pub fn bump_generation(new: &mut Value, old: &Value, ignore_status: bool) {
    let strip = |v: &Value| -> Value {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            if ignore_status {
                map.remove("status");
            }
        }
        v
    };
    let generation = meta::generation(old).max(1);
    let next = if strip(new) != strip(old) {
        generation + 1
    } else {
        generation
    };
    meta::set(new, "generation", Value::from(next));
}

//! RBAC objects (`pkg/registry/rbac`, `pkg/apis/rbac/validation`): Roles
//! and ClusterRoles, whose rules need verbs and either API groups and
//! resources or non-resource URLs; RoleBindings and ClusterRoleBindings,
//! whose `roleRef` names a role of a kind the binding may use and never
//! changes, and whose subjects are users, groups or service accounts. With
//! the v1 defaults (`roleRef.apiGroup`, a user's or group's `apiGroup`).
//! What they grant is `authorization`'s business.

use serde_json::{Map, Value, json};

use super::{array_at, set_field, str_at};
use crate::meta::{self, NameRule};
use crate::status::{BadValue, FieldError, go_strings, quote};
use crate::validation;

/// The API group of RBAC, and of its role references and subjects.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// A Role or ClusterRole with Go's zero value where a rule has no `verbs`:
/// Go decodes it, k8s-openapi would refuse it, and validation, as
/// upstream, reports it.
pub fn role_zero_filled(role: &Value) -> Value {
    let mut role = role.clone();
    fill_each(&mut role, "rules", "verbs", &json!([]));
    role
}

/// A RoleBinding or ClusterRoleBinding with Go's zero values for a missing
/// `roleRef` and its fields, and a subject's `kind` and `name` (see
/// [`role_zero_filled`]).
pub fn binding_zero_filled(binding: &Value) -> Value {
    let mut binding = binding.clone();
    if let Some(map) = binding.as_object_mut() {
        fill(map, "roleRef", &json!({}));
        if let Some(role_ref) = map.get_mut("roleRef").and_then(Value::as_object_mut) {
            for key in ["apiGroup", "kind", "name"] {
                fill(role_ref, key, &json!(""));
            }
        }
    }
    for key in ["kind", "name"] {
        fill_each(&mut binding, "subjects", key, &json!(""));
    }
    binding
}

/// Sets `map[key]` to `zero` where it is absent or null.
fn fill(map: &mut Map<String, Value>, key: &str, zero: &Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), zero.clone());
    }
}

/// [`fill`] in every object of the list `obj[list]`.
fn fill_each(obj: &mut Value, list: &str, key: &str, zero: &Value) {
    if let Some(Value::Array(items)) = obj.get_mut(list) {
        for item in items.iter_mut().filter_map(Value::as_object_mut) {
            fill(item, key, zero);
        }
    }
}

/// `SetDefaults_RoleBinding`, `SetDefaults_ClusterRoleBinding` and
/// `SetDefaults_Subject`: the RBAC group where a reference leaves it out.
pub fn default_binding(obj: &mut Value) {
    if str_at(obj, "/roleRef/apiGroup").is_empty()
        && let Some(role_ref) = obj.get_mut("roleRef")
    {
        set_field(role_ref, "apiGroup", json!(GROUP));
    }
    if let Some(Value::Array(subjects)) = obj.get_mut("subjects") {
        for subject in subjects {
            if str_at(subject, "/apiGroup").is_empty()
                && matches!(str_at(subject, "/kind"), "User" | "Group")
            {
                set_field(subject, "apiGroup", json!(GROUP));
            }
        }
    }
}

/// `ValidateRole` and `ValidateClusterRole`.
pub fn validate_role(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, namespaced, NameRule::PathSegment);
    errs.extend(validate_rules(obj, namespaced));
    errs
}

/// `validatePolicyRule` of every rule.
pub fn validate_rules(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in array_at(obj, "/rules").iter().enumerate() {
        let path = format!("rules[{i}]");
        let list = |key: &str| meta::string_list(rule.get(key));
        if list("verbs").is_empty() {
            errs.push(FieldError::required(
                format!("{path}.verbs"),
                "verbs must contain at least one value",
            ));
        }
        let urls = list("nonResourceURLs");
        if !urls.is_empty() {
            if namespaced {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    go_strings(&urls),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if ["apiGroups", "resources", "resourceNames"]
                .iter()
                .any(|key| !list(key).is_empty())
            {
                errs.push(FieldError::invalid(
                    format!("{path}.nonResourceURLs"),
                    go_strings(&urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if list("apiGroups").is_empty() {
            errs.push(FieldError::required(
                format!("{path}.apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        let resources = list("resources");
        if resources.is_empty() {
            errs.push(FieldError::required(
                format!("{path}.resources"),
                "resource rules must supply at least one resource",
            ));
        }
        if !list("resourceNames").is_empty() && resources.len() > 1 {
            errs.push(FieldError::required(
                format!("{path}.resourceNames"),
                "resource names cannot apply to multiple resources",
            ));
        }
    }
    errs
}

/// `ValidateRoleBinding` and `ValidateClusterRoleBinding`.
pub fn validate_binding(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, namespaced, NameRule::PathSegment);
    errs.extend(validate_binding_spec(obj, namespaced));
    errs
}

/// The binding's own fields: its role reference and subjects.
fn validate_binding_spec(obj: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let api_group = str_at(obj, "/roleRef/apiGroup");
    if api_group != GROUP {
        errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            api_group,
            &[GROUP],
        ));
    }
    // A RoleBinding may refer to a ClusterRole, a ClusterRoleBinding only
    // to a ClusterRole.
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    let kind = str_at(obj, "/roleRef/kind");
    if !kinds.contains(&kind) {
        errs.push(FieldError::not_supported("roleRef.kind", kind, kinds));
    }
    let name = str_at(obj, "/roleRef/name");
    if name.is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    }
    for msg in validation::path_segment_name(name) {
        errs.push(FieldError::invalid("roleRef.name", name, msg));
    }
    for (i, subject) in array_at(obj, "/subjects").iter().enumerate() {
        errs.extend(validate_subject(
            subject,
            namespaced,
            &format!("subjects[{i}]"),
        ));
    }
    errs
}

/// `validateRoleBindingSubject`: a ServiceAccount subject of a
/// ClusterRoleBinding needs a namespace (in a RoleBinding it defaults to
/// the binding's).
fn validate_subject(subject: &Value, namespaced: bool, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = str_at(subject, "/name");
    if name.is_empty() {
        errs.push(FieldError::required(format!("{path}.name"), ""));
    }
    let api_group = str_at(subject, "/apiGroup");
    match str_at(subject, "/kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in validation::dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(format!("{path}.name"), name, msg));
                }
            }
            if !api_group.is_empty() {
                errs.push(FieldError::not_supported(
                    format!("{path}.apiGroup"),
                    api_group,
                    &[""],
                ));
            }
            if !namespaced && str_at(subject, "/namespace").is_empty() {
                errs.push(FieldError::required(format!("{path}.namespace"), ""));
            }
        }
        kind @ ("User" | "Group") => {
            if name.is_empty() {
                errs.push(FieldError::invalid(
                    format!("{path}.name"),
                    name,
                    format!("{} name cannot be empty", kind.to_lowercase()),
                ));
            }
            if api_group != GROUP {
                errs.push(FieldError::not_supported(
                    format!("{path}.apiGroup"),
                    api_group,
                    &[GROUP],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{path}.kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
    errs
}

/// `ValidateRoleBindingUpdate` and `ValidateClusterRoleBindingUpdate`: the
/// binding as on create, and the same `roleRef`.
pub fn validate_binding_update(new: &Value, old: &Value, namespaced: bool) -> Vec<FieldError> {
    let mut errs = validate_binding_spec(new, namespaced);
    let role_ref = |obj: &Value| {
        ["apiGroup", "kind", "name"].map(|key| str_at(obj, &format!("/roleRef/{key}")).to_owned())
    };
    let changed = role_ref(new);
    if changed != role_ref(old) {
        let [api_group, kind, name] = changed.map(|field| quote(&field));
        // Go's `%#v` of the internal `rbac.RoleRef`.
        let value = format!("rbac.RoleRef{{APIGroup:{api_group}, Kind:{kind}, Name:{name}}}");
        errs.push(FieldError::invalid(
            "roleRef",
            BadValue::Raw(value),
            "cannot change roleRef",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn rules_need_verbs_and_what_they_apply_to() {
        let role = json!({"rules": [
            {"verbs": [], "apiGroups": [""], "resources": ["nodes"]},
            {"verbs": ["get"]},
            {"verbs": ["get"], "apiGroups": [""], "resources": ["a", "b"], "resourceNames": ["x"]},
            {"verbs": ["get"], "nonResourceURLs": ["/healthz"], "resources": ["a"]},
        ]});
        assert_eq!(
            messages(&validate_rules(&role, true)),
            [
                "rules[0].verbs: Required value: verbs must contain at least one value",
                "rules[1].apiGroups: Required value: resource rules must supply at least one api group",
                "rules[1].resources: Required value: resource rules must supply at least one resource",
                "rules[2].resourceNames: Required value: resource names cannot apply to multiple resources",
                "rules[3].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs",
                "rules[3].nonResourceURLs: Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs",
            ]
        );
    }

    #[test]
    fn bindings_refer_to_roles_of_their_kind_and_known_subjects() {
        let binding = json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [
                {"kind": "ServiceAccount", "name": "ccm"},
                {"kind": "User", "name": "", "apiGroup": "rbac.authorization.k8s.io"},
                {"kind": "Robot", "name": "r2"},
            ],
        });
        assert_eq!(
            messages(&validate_binding_spec(&binding, true)),
            [
                "subjects[1].name: Required value",
                "subjects[1].name: Invalid value: \"\": user name cannot be empty",
                "subjects[2].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ]
        );
        assert_eq!(
            messages(&validate_binding_spec(&binding, false)),
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].namespace: Required value",
                "subjects[1].name: Required value",
                "subjects[1].name: Invalid value: \"\": user name cannot be empty",
                "subjects[2].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
            ]
        );
    }

    #[test]
    fn missing_references_are_zero_values_then_defaults() {
        let mut binding =
            binding_zero_filled(&json!({"subjects": [{"kind": "Group"}, {"name": "x"}]}));
        default_binding(&mut binding);
        assert_eq!(
            binding,
            json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "", "name": ""},
                "subjects": [
                    {"kind": "Group", "name": "", "apiGroup": "rbac.authorization.k8s.io"},
                    {"kind": "", "name": "x"},
                ],
            })
        );
        let role = role_zero_filled(&json!({"rules": [{"verbs": null}]}));
        assert_eq!(role, json!({"rules": [{"verbs": []}]}));
    }

    #[test]
    fn a_role_ref_never_changes() {
        let old = json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "a"}});
        let new = json!({"roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": "b"}});
        assert!(validate_binding_update(&old, &old, false).is_empty());
        assert_eq!(
            messages(&validate_binding_update(&new, &old, false)),
            [
                "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"b\"}: cannot change roleRef"
            ]
        );
    }
}

//! Role-based access control, decided as upstream's RBAC authorizer
//! (`plugin/pkg/auth/authorizer/rbac`) decides: the ClusterRoles that
//! ClusterRoleBindings grant apply everywhere, the Roles and ClusterRoles a
//! RoleBinding grants only to requests in its namespace, and a rule allows
//! a request when its verbs, API groups, resources and resource names (for
//! a path: its non-resource URLs) match, as `RuleAllows` and
//! `pkg/apis/rbac/v1/evaluation_helpers.go` match them. Rules are read from
//! the stored objects as they are, each request, as upstream reads its
//! informers' caches: nothing is parsed again.
//!
//! Beside the stored objects, the bootstrap bindings that matter to the
//! users the emulator knows: `system:discovery` and `system:basic-user`,
//! bound to `system:authenticated`. They are not objects in the store.

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::Attributes;
use crate::kinds::{array_at, str_at};
use crate::resources::Rules;
use crate::status::{ApiError, GroupResource};
use crate::store::State;
use crate::tokens::{AUTHENTICATED, service_account_user};

/// The rules of the bootstrap ClusterRoles bound to `system:authenticated`
/// (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`):
/// `system:discovery`'s, which hold `system:public-info-viewer`'s too, and
/// `system:basic-user`'s.
static BOOTSTRAP: LazyLock<[Value; 3]> = LazyLock::new(|| {
    [
        json!({"verbs": ["get"], "nonResourceURLs": [
            "/livez", "/readyz", "/healthz", "/version", "/version/",
            "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*",
        ]}),
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
               "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
               "resources": ["selfsubjectreviews"]}),
    ]
});

/// Whether the user may do what `attributes` ask; if not, the reason
/// upstream appends to the 403: the bindings whose role could not be found
/// (`RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`), or
/// nothing.
pub fn authorize(state: &State, attributes: &Attributes) -> Result<(), String> {
    if attributes.groups.iter().any(|g| g == AUTHENTICATED)
        && BOOTSTRAP.iter().any(|rule| allows(rule, attributes))
    {
        return Ok(());
    }
    let mut errors = Vec::new();
    for binding in objects(state, Rules::ClusterRoleBinding, None) {
        if grants(state, &binding, "", attributes, &mut errors) {
            return Ok(());
        }
    }
    if !attributes.namespace.is_empty() {
        let namespace = attributes.namespace.as_str();
        for binding in objects(state, Rules::RoleBinding, Some(namespace)) {
            if grants(state, &binding, namespace, attributes, &mut errors) {
                return Ok(());
            }
        }
    }
    Err(reason(errors))
}

fn objects(state: &State, rules: Rules, namespace: Option<&str>) -> Vec<std::sync::Arc<Value>> {
    state
        .registry
        .builtin(rules)
        .map(|rt| state.list(&rt.storage, namespace))
        .unwrap_or_default()
}

/// Whether `binding` (in `namespace`, `""` for a ClusterRoleBinding) binds
/// the user to a role that allows the request. A role that cannot be found
/// grants nothing and is noted in `errors`.
fn grants(
    state: &State,
    binding: &Value,
    namespace: &str,
    attributes: &Attributes,
    errors: &mut Vec<String>,
) -> bool {
    if !array_at(binding, "/subjects")
        .iter()
        .any(|subject| applies(subject, namespace, attributes))
    {
        return false;
    }
    match role_rules(state, binding, namespace) {
        Ok(rules) => rules.iter().any(|rule| allows(rule, attributes)),
        Err(error) => {
            errors.push(error);
            false
        }
    }
}

/// `appliesToUser`: a ServiceAccount subject without a namespace is one of
/// the binding's namespace.
fn applies(subject: &Value, namespace: &str, attributes: &Attributes) -> bool {
    let name = str_at(subject, "/name");
    match str_at(subject, "/kind") {
        "User" => attributes.user == name,
        "Group" => attributes.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let account_namespace = match str_at(subject, "/namespace") {
                "" => namespace,
                given => given,
            };
            !account_namespace.is_empty()
                && attributes.user == service_account_user(account_namespace, name)
        }
        _ => false,
    }
}

/// `GetRoleReferenceRules`: the rules of the role a binding refers to.
fn role_rules<'s>(
    state: &'s State,
    binding: &Value,
    namespace: &str,
) -> Result<&'s [Value], String> {
    let name = str_at(binding, "/roleRef/name");
    let (rules, role_namespace, singular) = match str_at(binding, "/roleRef/kind") {
        "Role" => (Rules::Role, namespace, "role"),
        "ClusterRole" => (Rules::ClusterRole, "", "clusterrole"),
        other => return Err(format!("unsupported role reference kind: {other:?}")),
    };
    // The listers' NotFound names the resource in the singular.
    let not_found = || {
        ApiError::not_found(
            &GroupResource::new(crate::kinds::RBAC_GROUP, singular),
            name,
        )
        .to_string()
    };
    let rt = state.registry.builtin(rules).ok_or_else(not_found)?;
    let role = state
        .get(&rt.storage, role_namespace, name)
        .ok_or_else(not_found)?;
    Ok(array_at(role, "/rules"))
}

/// `RuleAllows`.
fn allows(rule: &Value, attributes: &Attributes) -> bool {
    let list = |key: &str| rule.get(key).and_then(Value::as_array);
    let any = |key: &str, matches: &dyn Fn(&str) -> bool| {
        list(key)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(matches)
    };
    let verb = any("verbs", &|v| v == "*" || v == attributes.verb);
    if !attributes.resource_request {
        let path = attributes.path.as_str();
        return verb
            && any("nonResourceURLs", &|url| {
                url == "*"
                    || url == path
                    || (url.ends_with('*') && path.starts_with(url.trim_end_matches('*')))
            });
    }
    let (resource, subresource) = (
        attributes.resource.as_str(),
        attributes.subresource.as_str(),
    );
    // `*`, `resource`, `resource/subresource` or `*/subresource`.
    let names_resource = |r: &str| match r.split_once('/') {
        None => r == "*" || (subresource.is_empty() && r == resource),
        Some((of, sub)) => {
            !subresource.is_empty() && sub == subresource && (of == resource || of == "*")
        }
    };
    verb && any("apiGroups", &|g| g == "*" || g == attributes.api_group)
        && any("resources", &names_resource)
        && (list("resourceNames").is_none_or(Vec::is_empty)
            || any("resourceNames", &|n| n == attributes.name))
}

/// `utilerrors.NewAggregate` of the resolution errors, after `RBAC: `.
fn reason(mut errors: Vec<String>) -> String {
    let mut seen = Vec::new();
    errors.retain(|e| {
        let new = !seen.contains(e);
        seen.push(e.clone());
        new
    });
    match errors.as_slice() {
        [] => String::new(),
        [one] => format!("RBAC: {one}"),
        many => format!("RBAC: [{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            user: "system:serviceaccount:kube-system:ccm".to_owned(),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                AUTHENTICATED.to_owned(),
            ],
            verb: verb.to_owned(),
            resource_request: true,
            api_group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: String::new(),
            name: name.to_owned(),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_and_names() {
        let rule = json!({"verbs": ["get", "patch"], "apiGroups": [""], "resources": ["nodes", "services/status"]});
        assert!(allows(&rule, &request("get", "", "nodes", "", "n1")));
        assert!(allows(
            &rule,
            &request("patch", "", "services", "status", "s")
        ));
        assert!(
            !allows(&rule, &request("patch", "", "services", "", "s")),
            "not the main resource"
        );
        assert!(
            !allows(&rule, &request("patch", "", "nodes", "status", "n1")),
            "not nodes/status"
        );
        assert!(!allows(&rule, &request("list", "", "nodes", "", "")));
        assert!(!allows(&rule, &request("get", "apps", "nodes", "", "n1")));

        let any = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]});
        assert!(allows(
            &any,
            &request("deletecollection", "x.io", "widgets", "status", "")
        ));

        let statuses = json!({"verbs": ["update"], "apiGroups": [""], "resources": ["*/status"]});
        assert!(allows(
            &statuses,
            &request("update", "", "nodes", "status", "n1")
        ));
        assert!(!allows(
            &statuses,
            &request("update", "", "nodes", "", "n1")
        ));
        assert!(!allows(
            &statuses,
            &request("update", "", "nodes", "finalize", "n1")
        ));

        let named = json!({"verbs": ["get", "list", "watch", "create"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"]});
        assert!(allows(&named, &request("get", "", "secrets", "", "s1")));
        assert!(allows(&named, &request("watch", "", "secrets", "", "s1")));
        assert!(!allows(&named, &request("get", "", "secrets", "", "s2")));
        assert!(!allows(&named, &request("list", "", "secrets", "", "")));
        assert!(!allows(&named, &request("create", "", "secrets", "", "")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let rule = json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*", "/version"]});
        let path = |verb: &str, path: &str| Attributes {
            resource_request: false,
            path: path.to_owned(),
            ..request(verb, "", "", "", "")
        };
        assert!(allows(&rule, &path("get", "/apis/coordination.k8s.io/v1")));
        assert!(allows(&rule, &path("get", "/version")));
        assert!(!allows(&rule, &path("get", "/version/")));
        assert!(!allows(&rule, &path("get", "/apis")));
        assert!(!allows(&rule, &path("post", "/apis/x")));
        assert!(
            !allows(&rule, &request("get", "", "apis", "", "")),
            "a resource is no path"
        );
    }

    #[test]
    fn resolution_errors_are_aggregated_once_each() {
        assert_eq!(reason(Vec::new()), "");
        let missing = r#"clusterrole.rbac.authorization.k8s.io "x" not found"#.to_owned();
        assert_eq!(
            reason(vec![missing.clone(), missing.clone()]),
            format!("RBAC: {missing}")
        );
        assert_eq!(
            reason(vec![missing.clone(), "other".to_owned()]),
            format!("RBAC: [{missing}, other]")
        );
    }
}

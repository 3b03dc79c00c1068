//! What a request asks to do, read from its method and URL alone, before
//! any routing, as upstream's `RequestInfoFactory`
//! (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`) reads it: a
//! resource request's verb, API group, resource, subresource, namespace and
//! name, or a non-resource request's path and lowercased method.

use axum::http::{Method, Uri};
use serde::Serialize;

use crate::selectors::{FieldSelector, LabelSelector};
use crate::tokens::User;
use crate::validation;

/// What a request asks to do, and as whom: what authorization decides on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attributes {
    /// [`crate::ADMIN_USER`], or `system:serviceaccount:NAMESPACE:NAME`.
    pub user: String,
    /// The user's groups (`system:masters` for the admin;
    /// `system:serviceaccounts`, `system:serviceaccounts:NAMESPACE` for a
    /// service account; and `system:authenticated`).
    pub groups: Vec<String>,
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or
    /// `deletecollection` for a resource; the lowercased HTTP method
    /// (`get`, `post`) for a path.
    pub verb: String,
    /// Whether the request is for a resource (`/api/v1/…`,
    /// `/apis/GROUP/VERSION/…`) rather than a path (`/apis`, `/api/v1`).
    pub resource_request: bool,
    /// `""` for the core group.
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    /// `""` at the cluster scope (cluster-scoped resources, and lists and
    /// watches across all namespaces).
    pub namespace: String,
    /// From the URL, or for a list or watch from a `fieldSelector` that
    /// requires `metadata.name` to be one name.
    pub name: String,
    /// The URL path, without the query.
    pub path: String,
}

impl Attributes {
    /// `NewRequestInfo` for a request of `user`.
    pub(crate) fn of(user: &User, method: &Method, uri: &Uri) -> Attributes {
        let path = uri.path();
        let mut attributes = Attributes {
            user: user.name.clone(),
            groups: user.groups.clone(),
            verb: method.as_str().to_lowercase(),
            resource_request: false,
            api_group: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.to_owned(),
        };
        let trimmed = path.trim_matches('/');
        let segments: Vec<&str> = if trimmed.is_empty() {
            Vec::new()
        } else {
            trimmed.split('/').collect()
        };
        let mut parts = match segments.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => rest,
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => {
                attributes.api_group = (*group).to_owned();
                rest
            }
            _ => return attributes,
        };
        attributes.resource_request = true;
        // The deprecated `/watch/…` and `/proxy/…` forms name their verb.
        if let [verb @ ("watch" | "proxy"), rest @ ..] = parts {
            attributes.verb = (*verb).to_owned();
            parts = rest;
        } else {
            attributes.verb = match *method {
                Method::POST => "create",
                Method::GET | Method::HEAD => "get",
                Method::PUT => "update",
                Method::PATCH => "patch",
                Method::DELETE => "delete",
                _ => "",
            }
            .to_owned();
        }
        if let ["namespaces", namespace, rest @ ..] = parts {
            attributes.namespace = (*namespace).to_owned();
            // `namespaces/NAME/status` and `/finalize` are the namespace's
            // own subresources; anything else is a resource in it.
            if rest
                .first()
                .is_some_and(|r| !matches!(*r, "status" | "finalize"))
            {
                parts = rest;
            }
        }
        if let Some(resource) = parts.first() {
            attributes.resource = (*resource).to_owned();
        }
        if let Some(name) = parts.get(1) {
            attributes.name = (*name).to_owned();
        }
        if let Some(subresource) = parts.get(2).filter(|_| attributes.verb != "proxy") {
            attributes.subresource = (*subresource).to_owned();
        }
        if attributes.name.is_empty() && attributes.verb == "get" {
            let query = query(uri);
            let watching = param(&query, "watch")
                .is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false"));
            attributes.verb = if watching { "watch" } else { "list" }.to_owned();
            if let Some(name) = selected_name(&query) {
                attributes.name = name;
            }
        }
        if attributes.name.is_empty() && attributes.verb == "delete" {
            attributes.verb = "deletecollection".to_owned();
        }
        attributes
    }

    /// How request counts name what was asked: `nodes/status`,
    /// `leases.coordination.k8s.io`, or the path of a non-resource request.
    pub(crate) fn label(&self) -> String {
        if !self.resource_request {
            return self.path.clone();
        }
        let mut label = self.resource.clone();
        if !self.api_group.is_empty() {
            label = format!("{label}.{}", self.api_group);
        }
        if !self.subresource.is_empty() {
            label = format!("{label}/{}", self.subresource);
        }
        label
    }
}

/// The query parameters, in order; none when the query does not parse
/// (Go's `URL.Query` drops what it cannot read).
fn query(uri: &Uri) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// The first value of a parameter, as Go's conversion of query parameters
/// takes it.
fn param<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The name a list's `fieldSelector` requires, if the `ListOptions` decode
/// (upstream drops the name when any of them does not: a bad selector, a
/// `limit` or `timeoutSeconds` that is no integer) and it is a valid path
/// segment.
fn selected_name(query: &[(String, String)]) -> Option<String> {
    let decodes = LabelSelector::parse(param(query, "labelSelector").unwrap_or("")).is_ok()
        && ["limit", "timeoutSeconds"]
            .iter()
            .all(|key| param(query, key).is_none_or(|n| n.parse::<i64>().is_ok()));
    let fields = FieldSelector::parse(param(query, "fieldSelector").unwrap_or("")).ok()?;
    let name = fields.requires_exact("metadata.name")?;
    (decodes && validation::path_segment_name(name).is_empty()).then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> Attributes {
        let user = User {
            name: "u".to_owned(),
            groups: vec!["g".to_owned()],
        };
        Attributes::of(&user, &method, &uri.parse().unwrap())
    }

    /// (verb, group, resource, subresource, namespace, name).
    type Parts<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, &'a str);

    /// The parts of a resource request.
    fn parts(a: &Attributes) -> Parts<'_> {
        assert!(a.resource_request, "{a:?}");
        (
            &a.verb,
            &a.api_group,
            &a.resource,
            &a.subresource,
            &a.namespace,
            &a.name,
        )
    }

    /// Each request's parts.
    fn check(cases: &[(Method, &str, Parts)]) {
        for (method, uri, want) in cases {
            assert_eq!(parts(&of(method.clone(), uri)), *want, "{uri}");
        }
    }

    #[test]
    fn verbs_come_from_the_method_and_whether_a_name_is_given() {
        let cases = [
            (
                Method::GET,
                "/api/v1/nodes/n1",
                ("get", "", "nodes", "", "", "n1"),
            ),
            (
                Method::HEAD,
                "/api/v1/nodes/n1",
                ("get", "", "nodes", "", "", "n1"),
            ),
            (
                Method::GET,
                "/api/v1/nodes",
                ("list", "", "nodes", "", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/nodes?watch=true",
                ("watch", "", "nodes", "", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/nodes?watch=1",
                ("watch", "", "nodes", "", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/nodes?watch=",
                ("watch", "", "nodes", "", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/nodes?watch=False",
                ("list", "", "nodes", "", "", ""),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/d/services",
                ("create", "", "services", "", "d", ""),
            ),
            (
                Method::PUT,
                "/api/v1/nodes/n1/status",
                ("update", "", "nodes", "status", "", "n1"),
            ),
            (
                Method::PATCH,
                "/api/v1/namespaces/d/services/s/status",
                ("patch", "", "services", "status", "d", "s"),
            ),
            (
                Method::DELETE,
                "/api/v1/nodes/n1",
                ("delete", "", "nodes", "", "", "n1"),
            ),
            (
                Method::DELETE,
                "/api/v1/nodes",
                ("deletecollection", "", "nodes", "", "", ""),
            ),
            (
                Method::POST,
                "/api/v1/namespaces/kube-system/serviceaccounts/ccm/token",
                (
                    "create",
                    "",
                    "serviceaccounts",
                    "token",
                    "kube-system",
                    "ccm",
                ),
            ),
            (
                Method::GET,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
                (
                    "get",
                    "coordination.k8s.io",
                    "leases",
                    "",
                    "kube-system",
                    "l",
                ),
            ),
            (
                Method::GET,
                "/apis/coordination.k8s.io/v1/leases",
                ("list", "coordination.k8s.io", "leases", "", "", ""),
            ),
            (
                Method::OPTIONS,
                "/api/v1/nodes/n1",
                ("", "", "nodes", "", "", "n1"),
            ),
        ];
        check(&cases);
    }

    #[test]
    fn namespaces_are_their_own_namespace() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces",
                ("list", "", "namespaces", "", "", ""),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/d",
                ("get", "", "namespaces", "", "d", "d"),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/d/status",
                ("update", "", "namespaces", "status", "d", "d"),
            ),
            (
                Method::PUT,
                "/api/v1/namespaces/d/finalize",
                ("update", "", "namespaces", "finalize", "d", "d"),
            ),
            (
                Method::GET,
                "/api/v1/namespaces/d/secrets",
                ("list", "", "secrets", "", "d", ""),
            ),
        ];
        check(&cases);
    }

    #[test]
    fn a_field_selector_on_the_name_names_a_list_or_watch() {
        let a = of(
            Method::GET,
            "/api/v1/namespaces/d/secrets?fieldSelector=metadata.name%3Ds1&watch=true",
        );
        assert_eq!(parts(&a), ("watch", "", "secrets", "", "d", "s1"));
        let a = of(
            Method::GET,
            "/api/v1/secrets?fieldSelector=type%3Dx,metadata.name%3D%3Ds1",
        );
        assert_eq!(parts(&a), ("list", "", "secrets", "", "", "s1"));
        for unnamed in [
            "/api/v1/secrets?fieldSelector=metadata.name!%3Ds1",
            "/api/v1/secrets?fieldSelector=metadata.name%3Da%2Fb",
            "/api/v1/secrets?fieldSelector=metadata.name%3Ds1&limit=x",
            "/api/v1/secrets?fieldSelector=metadata.name%3Ds1&labelSelector=a%20b",
            "/api/v1/secrets?fieldSelector=nonsense",
        ] {
            assert_eq!(of(Method::GET, unnamed).name, "", "{unnamed}");
        }
        let deleting = of(
            Method::DELETE,
            "/api/v1/namespaces/d/secrets?fieldSelector=metadata.name%3Ds1",
        );
        assert_eq!(
            parts(&deleting),
            ("deletecollection", "", "secrets", "", "d", "")
        );
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource_requests() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/coordination.k8s.io/v1",
            "/version",
            "/openapi/v2",
        ] {
            let a = of(Method::GET, path);
            assert!(!a.resource_request, "{path}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", path));
            assert_eq!(a.label(), path);
        }
        assert_eq!(of(Method::POST, "/api").verb, "post");
    }

    #[test]
    fn legacy_watch_and_proxy_paths_name_their_verb() {
        let a = of(Method::GET, "/api/v1/watch/namespaces/d/secrets/s1");
        assert_eq!(parts(&a), ("watch", "", "secrets", "", "d", "s1"));
        let a = of(Method::GET, "/api/v1/proxy/nodes/n1/stats");
        assert_eq!(parts(&a), ("proxy", "", "nodes", "", "", "n1"));
    }

    #[test]
    fn labels_name_group_and_subresource() {
        assert_eq!(
            of(Method::PATCH, "/api/v1/nodes/n1/status").label(),
            "nodes/status"
        );
        assert_eq!(
            of(Method::GET, "/apis/coordination.k8s.io/v1/leases").label(),
            "leases.coordination.k8s.io"
        );
    }
}

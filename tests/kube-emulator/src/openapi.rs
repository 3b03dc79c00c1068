//! OpenAPI v3 (`/openapi/v3`): the root document listing every served
//! group-version (`api/v1`, `apis/{group}/{version}`, the versions of
//! established CRDs included) with the URL of its document, and those
//! documents, served as kube-openapi's `handler3` serves them (an `Etag`,
//! the `hash` query parameter answered with immutable caching or a 301 to
//! the current hash). A document has upstream's paths, operation ids, tags,
//! parameters and `x-kubernetes-action`/`x-kubernetes-group-version-kind`
//! for each resource the emulator serves, which is what kubectl and Helm
//! read to learn that a kind's PATCH takes `fieldValidation` and so leave
//! field validation to the server. It has no schemas.

use std::hash::{DefaultHasher, Hash, Hasher};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::jiff::{Timestamp, ToSpan, tz::TimeZone};
use serde_json::{Map, Value, json};

use crate::discovery;
use crate::resources::{Registry, ResourceType, Rules};
use crate::status::ApiError;

/// Serves `/openapi/{rest…}`. `/openapi/v2` is not served.
pub fn serve(
    registry: &Registry,
    rest: &[&str],
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    match rest {
        ["v3"] => {
            let body = root(registry).to_string();
            Ok(content(body, headers))
        }
        ["v3", path @ ..] if !path.is_empty() => group_version(registry, path, uri, headers),
        _ => Err(ApiError::UnknownResource),
    }
}

/// `HandleDiscovery`: the root, which kubectl's `openapi3.Root` reads.
fn root(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, version) in group_versions(registry) {
        if let Some(doc) = document(registry, &group, &version) {
            let key = api_path(&group, &version);
            let url = format!("/openapi/v3/{key}?hash={}", etag(&doc.to_string()));
            paths.insert(key, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// `HandleGroupVersion`. A group-version that is not served gets what
/// upstream's handler writes for it: nothing, so an empty 200.
fn group_version(
    registry: &Registry,
    path: &[&str],
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if !accepts_json(headers) {
        return Ok(StatusCode::NOT_ACCEPTABLE.into_response());
    }
    let found = match path {
        ["api", version] => document(registry, "", version),
        ["apis", group, version] => document(registry, group, version),
        _ => None,
    };
    let Some(doc) = found else {
        return Ok((StatusCode::OK, [(header::VARY, "Accept")]).into_response());
    };
    let body = doc.to_string();
    let current = etag(&body);
    let hash = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .ok()
        .and_then(|q| q.0.into_iter().find(|(k, _)| k == "hash").map(|(_, v)| v))
        .filter(|h| !h.is_empty());
    let mut response = content(body, headers);
    let response_headers = response.headers_mut();
    response_headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    match hash {
        Some(hash) if hash != current => {
            let location = format!("/openapi/v3/{}?hash={current}", path.join("/"));
            return Ok((
                StatusCode::MOVED_PERMANENTLY,
                [(header::LOCATION, location)],
            )
                .into_response());
        }
        Some(_) => {
            response_headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            if let Ok(expires) = HeaderValue::from_str(&a_year_from_now()) {
                response_headers.insert(header::EXPIRES, expires);
            }
        }
        None => {}
    }
    Ok(response)
}

/// A JSON document with its `Etag`, or 304 when the client has it.
fn content(body: String, headers: &HeaderMap) -> Response {
    let tag = format!("\"{}\"", etag(&body));
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut response = if cached {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(body),
        )
            .into_response()
    };
    if let Ok(tag) = HeaderValue::from_str(&tag) {
        response.headers_mut().insert(header::ETAG, tag);
    }
    response
}

/// Whether `Accept` (none means `*/*`) takes JSON. Upstream also offers
/// the protobuf form; the emulator only JSON.
fn accepts_json(headers: &HeaderMap) -> bool {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|a| !a.trim().is_empty())
        .unwrap_or("*/*");
    accept.split(',').any(|clause| {
        let media = clause.split(';').next().unwrap_or("").trim();
        matches!(media, "*/*" | "application/*" | "application/json")
    })
}

/// The document's hash: the emulator's own (64 bits of SipHash), where
/// upstream's is a SHA-512. Clients treat it as opaque.
fn etag(body: &str) -> String {
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// `Expires` a year ahead, as Go's `time.RFC1123` prints it in UTC.
fn a_year_from_now() -> String {
    let now = Timestamp::now().to_zoned(TimeZone::UTC);
    let later = now.checked_add(1.year()).unwrap_or(now);
    later.strftime("%a, %d %b %Y %H:%M:%S UTC").to_string()
}

/// Every served group-version, the core one first.
fn group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut all = vec![(String::new(), "v1".to_owned())];
    for group in registry.groups() {
        all.extend(group.versions.into_iter().map(|v| (group.name.clone(), v)));
    }
    all
}

/// `api/v1` or `apis/{group}/{version}`.
fn api_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `ToValidOperationID`: letters, `_` and (not first) digits kept, a
/// letter after anything else capitalised.
fn operation_id_part(s: &str, capitalize_first: bool) -> String {
    let mut out = String::new();
    let mut capitalize = capitalize_first;
    for (i, c) in s.chars().enumerate() {
        if c.is_alphabetic() || c == '_' || (i != 0 && c.is_ascii_digit()) {
            if capitalize {
                out.extend(c.to_uppercase());
                capitalize = false;
            } else {
                out.push(c);
            }
        } else {
            capitalize = true;
        }
    }
    out
}

/// How one group-version's operations are named (`GetOperationIDAndTags`):
/// `AppsV1` after the verb, `apps_v1` as the tag; the core group is
/// `core`, and `.k8s.io` is dropped from a group's name.
struct Naming {
    infix: String,
    tag: String,
}

impl Naming {
    fn new(group: &str, version: &str) -> Naming {
        let group = if group.is_empty() {
            "core"
        } else {
            group.trim_end_matches(".k8s.io")
        };
        Naming {
            infix: format!(
                "{}{}",
                operation_id_part(group, true),
                operation_id_part(version, true)
            ),
            tag: format!(
                "{}_{}",
                operation_id_part(group, false),
                operation_id_part(version, false)
            ),
        }
    }

    /// `verb` + `AppsV1` + `rest`, e.g. `patchAppsV1NamespacedDeployment`.
    fn id(&self, verb: &str, rest: &str) -> String {
        format!("{verb}{}{rest}", self.infix)
    }
}

/// A query parameter of an operation.
fn query(name: &str) -> Value {
    let kind = match name {
        "allowWatchBookmarks"
        | "sendInitialEvents"
        | "watch"
        | "force"
        | "orphanDependents"
        | "ignoreStoreReadErrorWithClusterBreakingPotential" => "boolean",
        "limit" | "timeoutSeconds" | "gracePeriodSeconds" => "integer",
        _ => "string",
    };
    json!({"in": "query", "name": name, "schema": {"type": kind, "uniqueItems": true}})
}

/// A path parameter, or `pretty`, shared by a path's operations.
fn path_parameter(name: &str, kind: &str) -> Value {
    let description = match name {
        "namespace" => "object name and auth scope, such as for teams and projects".to_owned(),
        _ => format!("name of the {kind}"),
    };
    json!({
        "description": description, "in": "path", "name": name, "required": true,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn pretty() -> Value {
    json!({
        "description": "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
        "in": "query", "name": "pretty",
        "schema": {"type": "string", "uniqueItems": true},
    })
}

const LIST: &[&str] = &[
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
const WRITE: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE: &[&str] = &[
    "dryRun",
    "gracePeriodSeconds",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "orphanDependents",
    "propagationPolicy",
];
const DELETE_COLLECTION: &[&str] = &[
    "continue",
    "dryRun",
    "fieldSelector",
    "gracePeriodSeconds",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    "labelSelector",
    "limit",
    "orphanDependents",
    "propagationPolicy",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
];

/// Where on a resource an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// `…/{plural}`.
    Collection,
    /// `…/{plural}/{name}`.
    Object,
    /// `…/{plural}/{name}/status`.
    Status,
    /// A ServiceAccount's `…/{name}/token`.
    Token,
    /// A namespaced resource's `/{prefix}/{plural}`, across namespaces.
    AllNamespaces,
}

/// One operation upstream serves: where, by which method, its
/// `x-kubernetes-action`, the verb its id starts with, its description
/// (`{kind}` standing for the kind), query parameters and response codes.
struct Operation {
    place: Place,
    method: &'static str,
    action: &'static str,
    verb: &'static str,
    description: &'static str,
    parameters: &'static [&'static str],
    codes: &'static [u16],
}

const fn operation(
    place: Place,
    (method, action, verb): (&'static str, &'static str, &'static str),
    description: &'static str,
    parameters: &'static [&'static str],
    codes: &'static [u16],
) -> Operation {
    Operation {
        place,
        method,
        action,
        verb,
        description,
        parameters,
        codes,
    }
}

const READ: &[u16] = &[200, 401];
const CREATE: &[u16] = &[200, 201, 202, 401];
const REPLACE: &[u16] = &[200, 201, 401];
const REMOVE: &[u16] = &[200, 202, 401];

/// Every operation of a resource, in upstream's words.
const OPERATIONS: &[Operation] = &[
    operation(
        Place::Collection,
        ("get", "list", "list"),
        "list or watch objects of kind {kind}",
        LIST,
        READ,
    ),
    operation(
        Place::Collection,
        ("post", "post", "create"),
        "create a {kind}",
        WRITE,
        CREATE,
    ),
    operation(
        Place::Collection,
        ("delete", "deletecollection", "delete"),
        "delete collection of {kind}",
        DELETE_COLLECTION,
        READ,
    ),
    operation(
        Place::Object,
        ("get", "get", "read"),
        "read the specified {kind}",
        &[],
        READ,
    ),
    operation(
        Place::Object,
        ("put", "put", "replace"),
        "replace the specified {kind}",
        WRITE,
        REPLACE,
    ),
    operation(
        Place::Object,
        ("patch", "patch", "patch"),
        "partially update the specified {kind}",
        PATCH,
        REPLACE,
    ),
    operation(
        Place::Object,
        ("delete", "delete", "delete"),
        "delete a {kind}",
        DELETE,
        REMOVE,
    ),
    operation(
        Place::Status,
        ("get", "get", "read"),
        "read status of the specified {kind}",
        &[],
        READ,
    ),
    operation(
        Place::Status,
        ("put", "put", "replace"),
        "replace status of the specified {kind}",
        WRITE,
        REPLACE,
    ),
    operation(
        Place::Status,
        ("patch", "patch", "patch"),
        "partially update status of the specified {kind}",
        PATCH,
        REPLACE,
    ),
    operation(
        Place::Token,
        ("post", "post", "create"),
        "create token of a {kind}",
        WRITE,
        CREATE,
    ),
    operation(
        Place::AllNamespaces,
        ("get", "list", "list"),
        "list or watch objects of kind {kind}",
        LIST,
        READ,
    ),
];

impl Operation {
    /// Whether `rt` has this operation.
    fn applies(&self, rt: &ResourceType) -> bool {
        match self.place {
            Place::Collection if self.action == "deletecollection" => {
                rt.verbs().contains(&"deletecollection")
            }
            Place::Collection | Place::Object => true,
            Place::Status => rt.status_subresource,
            Place::Token => rt.rules == Rules::ServiceAccount,
            Place::AllNamespaces => rt.namespaced,
        }
    }

    /// `listAppsV1NamespacedDeployment`, `deleteCoreV1CollectionNode`,
    /// `readCoreV1NodeStatus`, `listAppsV1DeploymentForAllNamespaces`.
    fn id(&self, naming: &Naming, rt: &ResourceType) -> String {
        let scope = if rt.namespaced { "Namespaced" } else { "" };
        let kind = &rt.kind;
        let rest = match self.place {
            Place::Collection if self.action == "deletecollection" => {
                format!("Collection{scope}{kind}")
            }
            Place::Collection | Place::Object => format!("{scope}{kind}"),
            Place::Status => format!("{scope}{kind}Status"),
            Place::Token => format!("{scope}{kind}Token"),
            Place::AllNamespaces => format!("{kind}ForAllNamespaces"),
        };
        naming.id(self.verb, &rest)
    }

    fn render(&self, naming: &Naming, rt: &ResourceType) -> Value {
        let responses: Map<String, Value> = self
            .codes
            .iter()
            .map(|code| {
                let text = match code {
                    200 => "OK",
                    201 => "Created",
                    202 => "Accepted",
                    _ => "Unauthorized",
                };
                (code.to_string(), json!({"description": text}))
            })
            .collect();
        let gvk = match self.place {
            Place::Token => {
                json!({"group": "authentication.k8s.io", "kind": "TokenRequest", "version": "v1"})
            }
            _ => json!({"group": rt.group, "kind": rt.kind, "version": rt.version}),
        };
        let mut op = json!({
            "description": self.description.replace("{kind}", &rt.kind),
            "operationId": self.id(naming, rt),
            "responses": responses,
            "tags": [naming.tag],
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": gvk,
        });
        if !self.parameters.is_empty() {
            op["parameters"] = self.parameters.iter().map(|p| query(p)).collect();
        }
        op
    }
}

/// The paths of one resource type, each with its operations and the
/// parameters they share.
fn resource_paths(
    rt: &ResourceType,
    prefix: &str,
    naming: &Naming,
    paths: &mut Map<String, Value>,
) {
    let plural = &rt.plural;
    let collection = if rt.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{plural}")
    } else {
        format!("{prefix}/{plural}")
    };
    for op in OPERATIONS.iter().filter(|op| op.applies(rt)) {
        let (path, named) = match op.place {
            Place::Collection => (collection.clone(), None),
            Place::Object => (format!("{collection}/{{name}}"), Some(rt.kind.as_str())),
            Place::Status => (
                format!("{collection}/{{name}}/status"),
                Some(rt.kind.as_str()),
            ),
            Place::Token => (format!("{collection}/{{name}}/token"), Some("TokenRequest")),
            Place::AllNamespaces => (format!("{prefix}/{plural}"), None),
        };
        let item = paths.entry(path).or_insert_with(|| {
            let mut parameters: Vec<Value> = named
                .map(|kind| path_parameter("name", kind))
                .into_iter()
                .collect();
            if rt.namespaced && op.place != Place::AllNamespaces {
                parameters.push(path_parameter("namespace", &rt.kind));
            }
            parameters.push(pretty());
            json!({"parameters": parameters})
        });
        item[op.method] = op.render(naming, rt);
    }
}

/// The document of one group-version; `None` when nothing is served there.
fn document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.resources(group, version);
    if types.is_empty() {
        return None;
    }
    let prefix = format!("/{}", api_path(group, version));
    let naming = Naming::new(group, version);
    let mut paths = Map::new();
    paths.insert(
        format!("{prefix}/"),
        json!({"get": {
            "description": "get available resources",
            "operationId": naming.id("get", "APIResources"),
            "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
            "tags": [naming.tag],
        }}),
    );
    for rt in &types {
        resource_paths(rt, &prefix, &naming, &mut paths);
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": discovery::version()["gitVersion"]},
        "paths": paths,
        "components": {"securitySchemes": {"BearerToken": {
            "description": "Bearer Token authentication",
            "in": "header", "name": "authorization", "type": "apiKey",
        }}},
        "security": [{"BearerToken": []}],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_named_as_upstream_names_them() {
        let rbac = Naming::new("rbac.authorization.k8s.io", "v1");
        assert_eq!(
            rbac.id("list", "NamespacedRole"),
            "listRbacAuthorizationV1NamespacedRole"
        );
        assert_eq!(rbac.tag, "rbacAuthorization_v1");
        let core = Naming::new("", "v1");
        assert_eq!(core.id("read", "NodeStatus"), "readCoreV1NodeStatus");
        assert_eq!(core.tag, "core_v1");
        let custom = Naming::new("wasm-ccm.io", "v1alpha1");
        assert_eq!(
            custom.id("patch", "NamespacedCloudProvider"),
            "patchWasmCcmIoV1alpha1NamespacedCloudProvider"
        );
        assert_eq!(custom.tag, "wasmCcmIo_v1alpha1");
    }

    #[test]
    fn a_patch_operation_names_its_kind_and_takes_field_validation() {
        let registry = Registry::new();
        let doc = document(&registry, "apps", "v1").unwrap();
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "kind": "Deployment", "version": "v1"})
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["dryRun", "fieldManager", "fieldValidation", "force"]
        );
        let namespaces = &doc["paths"];
        assert!(namespaces.get("/apis/apps/v1/deployments").is_some());
        assert!(document(&registry, "nope.io", "v1").is_none());
        let core = document(&registry, "", "v1").unwrap();
        assert!(core["paths"]["/api/v1/namespaces"].get("delete").is_none());
        assert_eq!(
            core["paths"]["/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"]["post"]["operationId"],
            "createCoreV1NamespacedServiceAccountToken"
        );
    }
}

//! The HTTP surface: bearer-token authentication (see `tokens`) and
//! authorization (see `authorization`) of every request, URL routing
//! (`/api/v1/...`, `/apis/{group}/{version}/...`, namespaced and cluster
//! paths, `/status`), query parameters, content negotiation (JSON,
//! `PartialObjectMetadata` and `Table`), fault injection and request
//! counting (per user agent and user) around every API call the user may
//! make, the `serviceaccounts/{name}/token` subresource, the `TokenReview`
//! and `SubjectAccessReview` APIs (see `reviews`), and the admin
//! endpoints under `/_emulator`. `/openapi` is `openapi`'s; bodies in
//! protobuf are read by `protobuf`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::authorization::{Attributes, Authorizer};
use crate::body::{self, Parsed};
use crate::discovery;
use crate::faults::{FaultCommand, Faults, Requests};
use crate::kinds::{self, FieldValidation, Subresource};
use crate::openapi;
use crate::patch::{PATCH_MEDIA_TYPES, PatchType};
use crate::protobuf;
use crate::resources::{Registry, ResourceType};
use crate::reviews;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, FieldError, GroupKind, GroupResource, go_strings};
use crate::store::Store;
use crate::table::{self, RowObject};
use crate::tokens::Tokens;
use crate::verbs::{self, DeleteOptions, Filter, ListQuery, Target, WriteOptions, Written};
use crate::watch::{self as watches, Presentation, Start, WatchContext, WatchRequest};

/// Upstream's limit on request bodies.
const MAX_BODY: usize = 3 * 1024 * 1024;
/// Upstream's limit on `fieldManager` (`FieldManagerMaxLength`).
const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// Everything a request handler needs.
#[derive(Debug, Clone)]
pub struct App {
    pub store: Store,
    pub faults: Faults,
    pub requests: Requests,
    pub tokens: Tokens,
    pub authorizer: Authorizer,
    pub addr: SocketAddr,
    pub bookmark_interval: Duration,
    pub shutdown: watch::Receiver<bool>,
}

pub fn router(app: App) -> Router {
    Router::new()
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .route("/version", get(version))
        .route("/_emulator/faults", get(get_faults).post(post_fault))
        .route(
            "/_emulator/requests",
            get(get_requests).delete(reset_requests),
        )
        .route("/_emulator/authorizations", get(get_authorizations))
        .fallback(dispatch)
        .with_state(app)
}

async fn ok() -> &'static str {
    "ok"
}

async fn version() -> Response {
    json_response(StatusCode::OK, &discovery::version(), &[])
}

async fn get_faults(State(app): State<App>) -> Response {
    json_response(StatusCode::OK, &json!(app.faults.state()), &[])
}

async fn post_fault(State(app): State<App>, body: axum::body::Bytes) -> Response {
    match serde_json::from_slice::<FaultCommand>(&body) {
        Ok(command) => {
            app.faults.apply(command);
            json_response(StatusCode::OK, &json!(app.faults.state()), &[])
        }
        Err(e) => ApiError::bad_request(format!("invalid fault command: {e}")).into_response(),
    }
}

async fn get_requests(State(app): State<App>) -> Response {
    json_response(StatusCode::OK, &json!(app.requests.snapshot()), &[])
}

async fn get_authorizations(State(app): State<App>) -> Response {
    json_response(StatusCode::OK, &json!(app.authorizer.snapshot()), &[])
}

/// Forgets the request counts and the authorization decisions.
async fn reset_requests(State(app): State<App>) -> StatusCode {
    app.requests.reset();
    app.authorizer.reset();
    StatusCode::NO_CONTENT
}

async fn dispatch(State(app): State<App>, req: Request) -> Response {
    handle(&app, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

fn json_response(code: StatusCode, body: &Value, warnings: &[String]) -> Response {
    let mut response = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    for warning in warnings {
        let text = format!("299 - {}", crate::status::quote(warning));
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Query parameters, in order.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(uri: &axum::http::Uri) -> Result<Query, ApiError> {
        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeated parameter, in order.
    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0" | "") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value {other:?} for parameter {key}: expected true or false"
            ))),
        }
    }

    /// An `int64` parameter (`limit`, `timeoutSeconds`).
    fn number(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid value {v:?} for parameter {key}"))
                })
            })
            .transpose()
    }
}

/// How a response represents objects, as `Accept` asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Full,
    /// `PartialObjectMetadata`, or with `list` its list.
    Metadata {
        list: bool,
    },
    /// `meta.k8s.io` `Table`, in this version (`v1` or `v1beta1`).
    Table(&'static str),
}

/// How Go's `%T` prints the internal object (or list) a handler of `rt`
/// holds: `*core.ConfigMap`, `*apps.DeploymentList`,
/// `*unstructured.Unstructured`.
fn go_internal_type(rt: &ResourceType, list: bool) -> String {
    let (package, kind) = match rt.group.as_str() {
        _ if rt.is_custom() => ("unstructured", "Unstructured"),
        // events.k8s.io serves the core type.
        "" | "events.k8s.io" => ("core", rt.kind.as_str()),
        group => (group.split('.').next().unwrap_or(group), rt.kind.as_str()),
    };
    let list = if list { "List" } else { "" };
    format!("*{package}.{kind}{list}")
}

/// The first media range of `Accept` the response can be: JSON, or its
/// `PartialObjectMetadata[List]` or `Table` form.
fn negotiate(headers: &HeaderMap) -> Result<Output, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Output::Full);
    };
    if accept.trim().is_empty() {
        return Ok(Output::Full);
    }
    for media in accept.split(',') {
        let params: Vec<&str> = media.split(';').map(str::trim).collect();
        let Some(kind) = params.first() else {
            continue;
        };
        if !matches!(*kind, "application/json" | "*/*" | "application/*") {
            continue;
        }
        let meta = params.contains(&"g=meta.k8s.io");
        let table_version = if params.contains(&"v=v1") {
            Some("meta.k8s.io/v1")
        } else if params.contains(&"v=v1beta1") {
            Some("meta.k8s.io/v1beta1")
        } else {
            None
        };
        match params.iter().find(|p| p.starts_with("as=")) {
            None => return Ok(Output::Full),
            Some(&"as=PartialObjectMetadata") if meta && params.contains(&"v=v1") => {
                return Ok(Output::Metadata { list: false });
            }
            Some(&"as=PartialObjectMetadataList") if meta && params.contains(&"v=v1") => {
                return Ok(Output::Metadata { list: true });
            }
            Some(&"as=Table") if meta => {
                if let Some(version) = table_version {
                    return Ok(Output::Table(version));
                }
            }
            Some(_) => {}
        }
    }
    Err(ApiError::NotAcceptable)
}

async fn handle(app: &App, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or(path.clone(), |p| p.as_str().to_owned());
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let is_api = matches!(segments.first(), Some(&"api") | Some(&"apis"));
    if !is_api && segments.first() != Some(&"openapi") {
        return Ok((StatusCode::NOT_FOUND, "404 page not found").into_response());
    }
    let user_agent = parts
        .headers
        .get(header::USER_AGENT)
        .map(|agent| String::from_utf8_lossy(agent.as_bytes()).into_owned())
        .unwrap_or_default();
    let user = app
        .tokens
        .authenticate(&app.store, &parts.headers)
        .inspect_err(|_| app.requests.refuse(&user_agent))?;
    // Upstream authorizes from the URL alone, before routing and before the
    // handler (here: the injected faults) runs.
    let attributes = Attributes::of(&user, &parts.method, &parts.uri);
    app.authorizer
        .authorize(&app.store, &attributes)
        .inspect_err(|_| {
            app.requests.forbid(
                &user_agent,
                &user.name,
                &attributes.verb,
                &attributes.label(),
            );
        })?;
    let user = user.name;
    if !is_api {
        app.requests.record(&user_agent, &user, "get", "openapi");
        inject(app, &parts.method, &path_and_query).await?;
        if parts.method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        return app
            .store
            .read(|s| openapi::serve(&s.registry, &segments[1..], &parts.uri, &parts.headers));
    }
    let resource_path = match segments.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => Some(("", "v1", rest.to_vec())),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => {
            Some((*group, *version, rest.to_vec()))
        }
        _ => None,
    };
    let Some((group, version, rest)) = resource_path else {
        app.requests.record(&user_agent, &user, "get", "discovery");
        inject(app, &parts.method, &path_and_query).await?;
        if parts.method != Method::GET {
            return Err(ApiError::method_not_allowed());
        }
        return discovery_response(app, &segments, &parts.headers);
    };
    if let ("", ["namespaces", namespace, "serviceaccounts", name, "token"]) =
        (group, rest.as_slice())
    {
        app.requests
            .record(&user_agent, &user, "create", "serviceaccounts/token");
        inject(app, &parts.method, &path_and_query).await?;
        let body = create_body(&parts.method, &parts.headers, body).await?;
        let (answer, warnings) = app
            .tokens
            .request(&app.store, namespace, name, &body.value)?;
        return Ok(json_response(StatusCode::CREATED, &answer, &warnings));
    }
    let review = match (group, version, rest.as_slice()) {
        ("authentication.k8s.io", "v1", ["tokenreviews"]) => Some("tokenreviews"),
        ("authorization.k8s.io", "v1", ["subjectaccessreviews"]) => Some("subjectaccessreviews"),
        _ => None,
    };
    if let Some(resource) = review {
        app.requests
            .record(&user_agent, &user, "create", &format!("{resource}.{group}"));
        inject(app, &parts.method, &path_and_query).await?;
        let body = create_body(&parts.method, &parts.headers, body).await?;
        let answer = if resource == "tokenreviews" {
            reviews::token_review(&app.tokens, &app.store, &body.value)?
        } else {
            reviews::subject_access_review(&app.authorizer, &app.store, &body.value)?
        };
        return Ok(json_response(StatusCode::CREATED, &answer, &[]));
    }
    let route = app
        .store
        .read(|s| route(&s.registry, group, version, &rest))?;
    let query = Query::parse(&parts.uri)?;
    let watching = query.flag("watch")?.unwrap_or(false);
    let verb = verb(&parts.method, &route, watching)?;
    app.requests
        .record(&user_agent, &user, verb, &route.label());
    inject(app, &parts.method, &path_and_query).await?;
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge(MAX_BODY))?;
    let call = Call {
        app,
        route,
        query,
        headers: &parts.headers,
        body: &body,
    };
    match verb {
        "get" => call.get(),
        "list" => call.list(),
        "watch" => call.watch(),
        "create" => call.create(),
        "update" => call.update(),
        "patch" => call.patch(),
        "delete" => call.delete(),
        _ => call.delete_collection(),
    }
}

/// The body of a POST to a create-only resource (a token request, a review), JSON or, for
/// the kinds `protobuf` reads, protobuf: any other method is refused as the API server
/// refuses it.
async fn create_body(method: &Method, headers: &HeaderMap, body: Body) -> Result<Parsed, ApiError> {
    if method != Method::POST {
        return Err(ApiError::method_not_allowed());
    }
    let body = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge(MAX_BODY))?;
    if protobuf::is_protobuf(content_type(headers)) {
        return protobuf_body(&body).map(Parsed::clean);
    }
    body::parse(&body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })
}

/// The request's `Content-Type`, `""` when it has none.
fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Upstream's 415 for a body it cannot decode.
fn unsupported_body() -> ApiError {
    ApiError::UnsupportedMediaType(
        "application/json, application/yaml, application/vnd.kubernetes.protobuf".into(),
    )
}

/// A protobuf body as JSON: a kind `protobuf` does not read is the 415 of
/// a body in an unknown format, a malformed one a 400.
fn protobuf_body(body: &[u8]) -> Result<Value, ApiError> {
    protobuf::decode(body).map_err(|err| match err {
        protobuf::DecodeError::Unsupported { .. } => unsupported_body(),
        other => ApiError::bad_request(other.to_string()),
    })
}

/// Latency and injected failures, before any work.
async fn inject(app: &App, method: &Method, path: &str) -> Result<(), ApiError> {
    let latency = app.faults.latency(method.as_str(), path);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match app.faults.take_failure(method.as_str(), path) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

fn discovery_response(
    app: &App,
    segments: &[&str],
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let aggregated = discovery::wants_aggregated(accept);
    let doc = app.store.read(|s| match segments {
        ["api"] if aggregated => Some(discovery::aggregated(&s.registry, true)),
        ["apis"] if aggregated => Some(discovery::aggregated(&s.registry, false)),
        ["api"] => Some(discovery::api_versions(app.addr)),
        ["apis"] => Some(discovery::group_list(&s.registry)),
        ["api", "v1"] => discovery::resource_list(&s.registry, "", "v1"),
        ["apis", group] => discovery::group(&s.registry, group),
        ["apis", group, version] => discovery::resource_list(&s.registry, group, version),
        _ => None,
    });
    let doc = doc.ok_or(ApiError::UnknownResource)?;
    let mut response = json_response(StatusCode::OK, &doc, &[]);
    if aggregated && matches!(segments, ["api"] | ["apis"]) {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
        );
    }
    Ok(response)
}

/// A resolved resource URL.
#[derive(Debug, Clone)]
struct Route {
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    name: Option<String>,
    sub: Subresource,
}

impl Route {
    /// `nodes`, `nodes/status`, `leases.coordination.k8s.io`.
    fn label(&self) -> String {
        let mut label = self.rt.plural.clone();
        if !self.rt.group.is_empty() {
            label = format!("{label}.{}", self.rt.group);
        }
        if self.sub == Subresource::Status {
            label.push_str("/status");
        }
        label
    }

    fn target(&self) -> Result<Target, ApiError> {
        Ok(Target {
            rt: self.rt.clone(),
            namespace: self.namespace.clone().unwrap_or_default(),
            name: self.name.clone().ok_or_else(ApiError::method_not_allowed)?,
            sub: self.sub,
        })
    }
}

fn route(
    registry: &Registry,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<Route, ApiError> {
    let core = group.is_empty();
    let (namespace, plural, name, sub) = match rest {
        ["namespaces"] if core => (None, "namespaces", None, None),
        ["namespaces", name] if core => (None, "namespaces", Some(*name), None),
        ["namespaces", name, sub @ ("status" | "finalize")] if core => {
            (None, "namespaces", Some(*name), Some(*sub))
        }
        ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        [plural] => (None, *plural, None, None),
        [plural, name] => (None, *plural, Some(*name), None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        _ => return Err(ApiError::UnknownResource),
    };
    if core && plural == "pods" {
        // As if the token may not read pods, rather than 404: `kubectl
        // describe node` lists the node's pods and treats only 403 as
        // "not authorized"; anything else fails the whole command.
        return Err(ApiError::Forbidden {
            resource: GroupResource::new("", "pods"),
            name: name.unwrap_or("").to_owned(),
            message: "kube-emulator does not serve pods".to_owned(),
        });
    }
    let rt = registry
        .find(group, version, plural)
        .ok_or(ApiError::UnknownResource)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::UnknownResource);
    }
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::UnknownResource);
    }
    let sub = match sub {
        None => Subresource::Main,
        Some("status") if rt.status_subresource => Subresource::Status,
        Some(_) => return Err(ApiError::UnknownResource),
    };
    Ok(Route {
        rt,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        sub,
    })
}

fn verb(method: &Method, route: &Route, watching: bool) -> Result<&'static str, ApiError> {
    let named = route.name.is_some();
    let status = route.sub == Subresource::Status;
    let unplaced = route.rt.namespaced && route.namespace.is_none();
    Ok(match *method {
        Method::GET if named => "get",
        Method::GET if watching => "watch",
        Method::GET => "list",
        Method::POST if !named && !unplaced => "create",
        Method::PUT if named => "update",
        Method::PATCH if named => "patch",
        Method::DELETE if named && !status => "delete",
        Method::DELETE if !named && !unplaced => "deletecollection",
        _ => return Err(ApiError::method_not_allowed()),
    })
}

/// One resource request being served.
struct Call<'a> {
    app: &'a App,
    route: Route,
    query: Query,
    headers: &'a HeaderMap,
    body: &'a [u8],
}

impl Call<'_> {
    fn rt(&self) -> &ResourceType {
        &self.route.rt
    }

    /// What `Accept` and, for Tables, `includeObject` ask for.
    fn presentation(&self, list: bool) -> Result<Presentation, ApiError> {
        Ok(match negotiate(self.headers)? {
            Output::Full => Presentation::Full,
            Output::Metadata { list: asked } if asked == list => Presentation::Metadata,
            // Upstream negotiates either form for any endpoint, then fails
            // converting (`asPartialObjectMetadata[List]`), naming the
            // internal Go type it was given.
            Output::Metadata { list: asked } => {
                let got = go_internal_type(self.rt(), list);
                return Err(ApiError::NotAcceptableAs(if asked {
                    format!(
                        "you requested PartialObjectMetadataList, but the requested object is not a list ({got})"
                    )
                } else {
                    format!(
                        "you requested PartialObjectMetadata, but the requested object is a list ({got})"
                    )
                }));
            }
            Output::Table(api_version) => {
                let value = self.query.get("includeObject");
                let rows = RowObject::parse(value).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "includeObject: Unsupported value: {:?}: supported values: \"None\", \"Metadata\", \"Object\"",
                        value.unwrap_or("")
                    ))
                })?;
                Presentation::Table(table::Format { api_version, rows })
            }
        })
    }

    fn get(self) -> Result<Response, ApiError> {
        let presentation = self.presentation(false)?;
        let target = self.route.target()?;
        if let Some(err) = verbs::unparsable_rv(self.query.get("resourceVersion").unwrap_or("")) {
            return Err(err);
        }
        let object = self.app.store.read(|s| verbs::get(s, &target))?;
        let body = match presentation {
            Presentation::Full => object,
            Presentation::Metadata => watches::present_metadata(object),
            Presentation::Table(format) => table::object(self.rt(), &object, format),
        };
        Ok(json_response(StatusCode::OK, &body, &[]))
    }

    fn filter(&self) -> Result<Filter, ApiError> {
        let labels = LabelSelector::parse(self.query.get("labelSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(self.query.get("fieldSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        let supported: Vec<String> = kinds::selectable_fields(self.rt(), &json!({}))
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        if let Some(unsupported) = fields.fields().find(|f| !supported.iter().any(|s| s == f)) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {unsupported}"
            )));
        }
        Ok(Filter { labels, fields })
    }

    fn list_options_errors(&self, watching: bool) -> Result<Vec<FieldError>, ApiError> {
        let rv = self.query.get("resourceVersion").unwrap_or("");
        let matching = self.query.get("resourceVersionMatch").unwrap_or("");
        let continued = !self.query.get("continue").unwrap_or("").is_empty();
        let initial = self.query.flag("sendInitialEvents")?;
        let mut errs = Vec::new();
        if watching {
            // `validateWatchOptions` (WatchList on, as in 1.32). It does not
            // require `allowWatchBookmarks`: without it the initial events
            // come with no bookmark ending them.
            if initial.is_some() && matching != "NotOlderThan" {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !matching.is_empty() {
                if initial.is_none() {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if matching != "NotOlderThan" {
                    errs.push(FieldError::not_supported(
                        "resourceVersionMatch",
                        matching,
                        &["NotOlderThan"],
                    ));
                }
                if continued {
                    errs.push(FieldError::forbidden(
                        "resourceVersionMatch",
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return Ok(errs);
        }
        if !matching.is_empty() {
            if rv.is_empty() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if continued {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if matching != "Exact" && matching != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    matching,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if matching == "Exact" && rv == "0" {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if initial.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        Ok(errs)
    }

    fn check_list_options(&self, watching: bool) -> Result<(), ApiError> {
        let errs = self.list_options_errors(watching)?;
        if errs.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(
                &GroupKind::new("meta.k8s.io", "ListOptions"),
                "",
                errs,
            ))
        }
    }

    fn list(self) -> Result<Response, ApiError> {
        let presentation = self.presentation(true)?;
        self.check_list_options(false)?;
        let query = ListQuery {
            filter: self.filter()?,
            // Upstream pages only for a positive limit; zero or negative is
            // a whole list.
            limit: self
                .query
                .number("limit")?
                .and_then(|l| u64::try_from(l).ok())
                .filter(|l| *l > 0),
            continue_token: self
                .query
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            resource_version: self.query.get("resourceVersion").map(str::to_owned),
            version_match: self
                .query
                .get("resourceVersionMatch")
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
        };
        let list = self
            .app
            .store
            .read(|s| verbs::list(s, self.rt(), self.route.namespace.as_deref(), &query))?;
        let body = match presentation {
            Presentation::Full => list,
            Presentation::Metadata => watches::present_metadata_list(list),
            Presentation::Table(format) => table::list(self.rt(), &list, format),
        };
        Ok(json_response(StatusCode::OK, &body, &[]))
    }

    fn watch(self) -> Result<Response, ApiError> {
        let presentation = self.presentation(false)?;
        self.check_list_options(true)?;
        let rv = self.query.get("resourceVersion").unwrap_or("");
        if let Some(err) = verbs::unparsable_rv(rv) {
            return Err(err);
        }
        let requested = verbs::parse_rv(rv).unwrap_or(0);
        let current = self.app.store.resource_version();
        let bookmarks = self.query.flag("allowWatchBookmarks")?.unwrap_or(false);
        let start = match self.query.flag("sendInitialEvents")? {
            Some(true) => {
                if requested > current {
                    return Err(ApiError::ResourceVersionTooLarge { requested, current });
                }
                Start::Now {
                    initial_events: true,
                    end_bookmark: bookmarks,
                }
            }
            Some(false) if rv.is_empty() || rv == "0" => Start::Now {
                initial_events: false,
                end_bookmark: false,
            },
            None if rv.is_empty() || rv == "0" => Start::Now {
                initial_events: true,
                end_bookmark: false,
            },
            _ => Start::After(requested),
        };
        let request = WatchRequest {
            rt: self.route.rt.clone(),
            namespace: self.route.namespace.clone(),
            filter: self.filter()?,
            start,
            bookmarks,
            timeout: self
                .query
                .number("timeoutSeconds")?
                .and_then(|t| u64::try_from(t).ok())
                .filter(|t| *t > 0)
                .map(Duration::from_secs),
            presentation,
        };
        let ctx = WatchContext {
            store: self.app.store.clone(),
            drops: self.app.faults.drops(),
            shutdown: self.app.shutdown.clone(),
            bookmark_interval: self.app.bookmark_interval,
        };
        let body: Body = watches::serve(ctx, request);
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response())
    }

    /// `dryRun`: every value must be `All` (`ValidateDryRun`).
    fn dry_run(&self, errs: &mut Vec<FieldError>) -> bool {
        let values = self.query.all("dryRun");
        if values.iter().any(|v| *v != "All") {
            errs.push(FieldError::not_supported(
                "dryRun",
                go_strings(&values),
                &["All"],
            ));
        }
        !values.is_empty()
    }

    /// The options of a create, update or patch, validated together as
    /// `ValidateCreateOptions`, `ValidateUpdateOptions` and
    /// `ValidatePatchOptions` do: one 422 on `CreateOptions` (…) naming
    /// everything wrong.
    fn write_options(&self, patch: Option<PatchType>) -> Result<WriteOptions, ApiError> {
        let field_manager = self.query.get("fieldManager").unwrap_or("");
        let force = self.query.flag("force")?;
        let mut errs = Vec::new();
        let kind = match (patch, self.route.name.is_some()) {
            (Some(PatchType::Apply), _) => {
                if field_manager.is_empty() {
                    errs.push(FieldError::required(
                        "fieldManager",
                        "is required for apply patch",
                    ));
                }
                "PatchOptions"
            }
            (Some(_), _) => {
                if force.is_some() {
                    errs.push(FieldError::forbidden(
                        "force",
                        "may not be specified for non-apply patch",
                    ));
                }
                "PatchOptions"
            }
            (None, true) => "UpdateOptions",
            (None, false) => "CreateOptions",
        };
        if field_manager.len() > FIELD_MANAGER_MAX_LENGTH {
            errs.push(FieldError::too_long(
                "fieldManager",
                FIELD_MANAGER_MAX_LENGTH,
            ));
        }
        for (at, c) in field_manager.char_indices() {
            if c.is_control() || (c.is_whitespace() && c != ' ') {
                errs.push(FieldError::invalid(
                    "fieldManager",
                    field_manager,
                    format!(
                        "invalid character U+{:04X} (at position {at})",
                        u32::from(c)
                    ),
                ));
            }
        }
        let dry_run = self.dry_run(&mut errs);
        let field_validation = match self.query.get("fieldValidation") {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            Some(other) => {
                errs.push(FieldError::not_supported(
                    "fieldValidation",
                    other,
                    &["Ignore", "Strict", "Warn"],
                ));
                FieldValidation::Warn
            }
        };
        if !errs.is_empty() {
            return Err(ApiError::invalid(
                &GroupKind::new("meta.k8s.io", kind),
                "",
                errs,
            ));
        }
        Ok(WriteOptions {
            dry_run,
            field_manager: field_manager.to_owned(),
            field_validation,
            repeated_keys: Vec::new(),
        })
    }

    fn content_type(&self) -> &str {
        content_type(self.headers)
    }

    /// The body of a create or update: JSON, or protobuf for the kinds
    /// `protobuf` reads.
    fn json_body(&self) -> Result<Parsed, ApiError> {
        let content_type = self.content_type();
        if protobuf::is_protobuf(content_type) {
            return protobuf_body(self.body).map(Parsed::clean);
        }
        let media = content_type.split(';').next().unwrap_or("").trim();
        if media != "application/json" {
            return Err(unsupported_body());
        }
        body::parse(self.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })
    }

    fn written(written: Written) -> Response {
        let code = if written.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        json_response(code, &written.object, &written.warnings)
    }

    fn check_conflict(&self) -> Result<(), ApiError> {
        if self.app.faults.take_conflict(&self.route.label()) {
            return Err(ApiError::stale(
                &self.rt().group_resource(),
                self.route.name.as_deref().unwrap_or(""),
            ));
        }
        Ok(())
    }

    fn create(self) -> Result<Response, ApiError> {
        let mut options = self.write_options(None)?;
        let body = self.json_body()?;
        options.repeated_keys = body.duplicates;
        let body = body.value;
        let namespace = self.route.namespace.clone().unwrap_or_default();
        let rt = self.route.rt.clone();
        let written = self
            .app
            .store
            .write(|s| verbs::create(s, &rt, &namespace, body, &options))?;
        Ok(Self::written(written))
    }

    fn update(self) -> Result<Response, ApiError> {
        let mut options = self.write_options(None)?;
        let body = self.json_body()?;
        options.repeated_keys = body.duplicates;
        let body = body.value;
        self.check_conflict()?;
        let target = self.route.target()?;
        let written = self
            .app
            .store
            .write(|s| verbs::replace(s, &target, body, &options))?;
        Ok(Self::written(written))
    }

    fn patch(self) -> Result<Response, ApiError> {
        let kind = PatchType::from_content_type(self.content_type())
            .ok_or_else(|| ApiError::UnsupportedMediaType(PATCH_MEDIA_TYPES.into()))?;
        if self.rt().is_custom() && kind == PatchType::Strategic {
            return Err(ApiError::UnsupportedMediaType(
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
            ));
        }
        let options = self.write_options(Some(kind))?;
        self.check_conflict()?;
        let target = self.route.target()?;
        let written = self
            .app
            .store
            .write(|s| verbs::patch(s, &target, kind, self.body, &options))?;
        Ok(Self::written(written))
    }

    /// `DeleteOptions` from the query and body, validated as
    /// `ValidateDeleteOptions` does.
    fn delete_options(&self) -> Result<DeleteOptions, ApiError> {
        let mut errs = Vec::new();
        let mut options = DeleteOptions {
            dry_run: self.dry_run(&mut errs),
            propagation_policy: self.query.get("propagationPolicy").map(str::to_owned),
            ..DeleteOptions::default()
        };
        if self.body.iter().any(|b| !b.is_ascii_whitespace()) {
            let body: Value = if protobuf::is_protobuf(self.content_type()) {
                protobuf_body(self.body)?
            } else {
                serde_json::from_slice(self.body)
                    .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
            };
            let text = |pointer: &str| {
                body.pointer(pointer)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            options.uid = text("/preconditions/uid");
            options.resource_version = text("/preconditions/resourceVersion");
            if let Some(policy) = text("/propagationPolicy") {
                options.propagation_policy = Some(policy);
            }
            if let Some(dry) = body.get("dryRun").and_then(Value::as_array) {
                options.dry_run |= dry.iter().any(|d| d == "All");
            }
        }
        if let Some(policy) = options
            .propagation_policy
            .as_deref()
            .filter(|p| !["Foreground", "Background", "Orphan"].contains(p))
        {
            errs.insert(
                0,
                FieldError::not_supported(
                    "propagationPolicy",
                    policy,
                    &["Foreground", "Background", "Orphan", "nil"],
                ),
            );
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid(
                &GroupKind::new("meta.k8s.io", "DeleteOptions"),
                "",
                errs,
            ));
        }
        Ok(options)
    }

    fn delete(self) -> Result<Response, ApiError> {
        let options = self.delete_options()?;
        let target = self.route.target()?;
        let body = self
            .app
            .store
            .write(|s| verbs::delete(s, &target, &options))?;
        Ok(json_response(StatusCode::OK, &body, &[]))
    }

    fn delete_collection(self) -> Result<Response, ApiError> {
        let options = self.delete_options()?;
        let filter = self.filter()?;
        let rt = self.route.rt.clone();
        let namespace = self.route.namespace.clone();
        let body = self
            .app
            .store
            .write(|s| verbs::delete_collection(s, &rt, namespace.as_deref(), &filter, &options))?;
        Ok(json_response(StatusCode::OK, &body, &[]))
    }
}

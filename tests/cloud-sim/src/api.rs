//! The HTTP surface: the route table, thin handlers that call [`SimState`],
//! and extractors that turn malformed input into the standard error body.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorCode};
use crate::faults::Faults;
use crate::gateway::gateway;
use crate::model::{
    Instance, InstanceList, InstanceStatus, LoadBalancer, LoadBalancerList, LoadBalancerUpdate,
    NewInstance, NewLoadBalancer, NewRoute, RouteList, StateSnapshot, TargetCounts, TargetsUpdate,
};
use crate::requests::RequestList;
use crate::state::SimState;

type ApiResult<T> = Result<T, ApiError>;

/// The complete application: routes, fallbacks and the gateway middleware.
pub(crate) fn router(sim: SimState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route(
            "/_admin/requests",
            get(admin_requests).delete(admin_clear_requests),
        )
        .route("/_admin/faults", get(admin_faults).put(admin_set_faults))
        .route("/_admin/state", get(admin_state))
        .route("/_admin/target-counts", get(admin_target_counts))
        .route("/v1/instances", get(list_instances).post(create_instance))
        .route(
            "/v1/instances/{id}",
            get(get_instance).delete(delete_instance),
        )
        .route("/v1/instances/{id}/start", post(start_instance))
        .route("/v1/instances/{id}/stop", post(stop_instance))
        .route(
            "/v1/load-balancers",
            get(list_load_balancers).post(create_load_balancer),
        )
        .route(
            "/v1/load-balancers/{id}",
            get(get_load_balancer)
                .put(update_load_balancer)
                .delete(delete_load_balancer),
        )
        .route(
            "/v1/load-balancers/{id}/targets",
            put(set_load_balancer_targets),
        )
        .route("/v1/routes", get(list_routes).post(create_route))
        .route("/v1/routes/{id}", delete(delete_route))
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
        .layer(from_fn_with_state(sim.clone(), gateway))
        .with_state(sim)
}

// ---- extractors ------------------------------------------------------------

/// A JSON body, parsed whatever the `Content-Type`. Syntax errors are 400,
/// well-formed JSON of the wrong shape 422; both name the offending path.
pub(crate) struct JsonBody<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> ApiResult<Self> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                ApiError::new(
                    rejection.status(),
                    ErrorCode::Invalid,
                    rejection.body_text(),
                )
            })?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let status = match err.inner().classify() {
            serde_json::error::Category::Data => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(
            status,
            ErrorCode::Invalid,
            format!("invalid JSON body: {err}"),
        )
    })?;
    deserializer.end().map_err(|err| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::Invalid,
            format!("invalid JSON body: {err}"),
        )
    })?;
    Ok(value)
}

/// The `{id}` path segment.
pub(crate) struct Id(String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|rejection: PathRejection| {
                ApiError::new(
                    rejection.status(),
                    ErrorCode::Invalid,
                    rejection.body_text(),
                )
            })?;
        Ok(Id(id))
    }
}

/// Query parameters.
pub(crate) struct Params<T>(T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        let Query(params) = Query::<T>::from_request_parts(parts, state).await.map_err(
            |rejection: QueryRejection| {
                ApiError::new(
                    rejection.status(),
                    ErrorCode::Invalid,
                    rejection.body_text(),
                )
            },
        )?;
        Ok(Params(params))
    }
}

#[derive(Deserialize)]
struct NameFilter {
    name: Option<String>,
}

#[derive(Deserialize)]
struct LoadBalancerFilter {
    name: Option<String>,
    cluster: Option<String>,
}

#[derive(Deserialize)]
struct ClusterFilter {
    cluster: Option<String>,
}

// ---- fallbacks and health ----------------------------------------------------

async fn healthz() -> &'static str {
    "ok"
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        format!("no such path: {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    let message = format!("method {method} is not allowed on {}", uri.path());
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, ErrorCode::Invalid, message)
}

// ---- admin -------------------------------------------------------------------

#[derive(Deserialize)]
struct LogPosition {
    from: Option<u64>,
}

async fn admin_requests(
    State(sim): State<SimState>,
    Params(position): Params<LogPosition>,
) -> Json<RequestList> {
    Json(sim.requests_from(position.from.unwrap_or(0)))
}

async fn admin_clear_requests(State(sim): State<SimState>) -> StatusCode {
    sim.clear_requests();
    StatusCode::NO_CONTENT
}

async fn admin_faults(State(sim): State<SimState>) -> Json<Faults> {
    Json(sim.faults())
}

async fn admin_set_faults(
    State(sim): State<SimState>,
    JsonBody(faults): JsonBody<Faults>,
) -> ApiResult<Json<Faults>> {
    faults.validate()?;
    sim.set_faults(faults);
    Ok(Json(sim.faults()))
}

async fn admin_state(State(sim): State<SimState>) -> Json<StateSnapshot> {
    Json(sim.snapshot())
}

async fn admin_target_counts(State(sim): State<SimState>) -> Json<TargetCounts> {
    Json(sim.target_counts())
}

// ---- instances -----------------------------------------------------------------

async fn list_instances(
    State(sim): State<SimState>,
    Params(filter): Params<NameFilter>,
) -> Json<InstanceList> {
    Json(InstanceList {
        instances: sim.list_instances(filter.name.as_deref()),
    })
}

async fn get_instance(State(sim): State<SimState>, Id(id): Id) -> ApiResult<Json<Instance>> {
    sim.instance(&id).map(Json)
}

async fn create_instance(
    State(sim): State<SimState>,
    JsonBody(new): JsonBody<NewInstance>,
) -> ApiResult<impl IntoResponse> {
    let instance = sim.try_add_instance(new)?;
    Ok((StatusCode::CREATED, Json(instance)))
}

async fn start_instance(State(sim): State<SimState>, Id(id): Id) -> ApiResult<Json<Instance>> {
    sim.transition_instance(&id, InstanceStatus::Running)
        .map(Json)
}

async fn stop_instance(State(sim): State<SimState>, Id(id): Id) -> ApiResult<Json<Instance>> {
    sim.transition_instance(&id, InstanceStatus::Stopped)
        .map(Json)
}

async fn delete_instance(State(sim): State<SimState>, Id(id): Id) -> ApiResult<StatusCode> {
    sim.terminate_instance(&id)?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- load balancers --------------------------------------------------------------

async fn list_load_balancers(
    State(sim): State<SimState>,
    Params(filter): Params<LoadBalancerFilter>,
) -> Json<LoadBalancerList> {
    let load_balancers = sim.list_load_balancers(filter.name.as_deref(), filter.cluster.as_deref());
    Json(LoadBalancerList { load_balancers })
}

async fn get_load_balancer(
    State(sim): State<SimState>,
    Id(id): Id,
) -> ApiResult<Json<LoadBalancer>> {
    sim.load_balancer(&id).map(Json)
}

async fn create_load_balancer(
    State(sim): State<SimState>,
    JsonBody(new): JsonBody<NewLoadBalancer>,
) -> ApiResult<impl IntoResponse> {
    let lb = sim.create_load_balancer(new)?;
    Ok((StatusCode::CREATED, Json(lb)))
}

async fn update_load_balancer(
    State(sim): State<SimState>,
    Id(id): Id,
    JsonBody(update): JsonBody<LoadBalancerUpdate>,
) -> ApiResult<Json<LoadBalancer>> {
    sim.update_load_balancer(&id, update).map(Json)
}

async fn set_load_balancer_targets(
    State(sim): State<SimState>,
    Id(id): Id,
    JsonBody(update): JsonBody<TargetsUpdate>,
) -> ApiResult<Json<LoadBalancer>> {
    sim.set_load_balancer_targets(&id, update.targets).map(Json)
}

async fn delete_load_balancer(State(sim): State<SimState>, Id(id): Id) -> ApiResult<StatusCode> {
    sim.remove_load_balancer(&id)?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- routes ------------------------------------------------------------------------

async fn list_routes(
    State(sim): State<SimState>,
    Params(filter): Params<ClusterFilter>,
) -> Json<RouteList> {
    Json(RouteList {
        routes: sim.list_routes(filter.cluster.as_deref()),
    })
}

async fn create_route(
    State(sim): State<SimState>,
    JsonBody(new): JsonBody<NewRoute>,
) -> ApiResult<impl IntoResponse> {
    let route = sim.create_route(new)?;
    Ok((StatusCode::CREATED, Json(route)))
}

async fn delete_route(State(sim): State<SimState>, Id(id): Id) -> ApiResult<StatusCode> {
    sim.remove_route(&id)?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NewInstance;

    #[test]
    fn syntax_errors_are_400_and_shape_errors_422() {
        let syntax = parse_json::<NewInstance>(b"{\"name\":").expect_err("truncated");
        assert_eq!(syntax.status, StatusCode::BAD_REQUEST);
        let shape =
            parse_json::<NewInstance>(br#"{"name":"a","zone":"z"}"#).expect_err("missing field");
        assert_eq!(shape.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(shape.message.contains("instance_type"), "{}", shape.message);
        let trailing =
            parse_json::<NewInstance>(br#"{"name":"a","zone":"z","instance_type":"t"} x"#);
        assert_eq!(
            trailing.map_err(|e| e.status).err(),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn nested_errors_name_the_path() {
        let body = br#"{"name":"a","cluster":"c","service_uid":"u","targets":[],
            "listeners":[{"port":80,"protocol":"http","node_port":30080}]}"#;
        let err = parse_json::<NewLoadBalancer>(body).expect_err("bad protocol");
        assert!(
            err.message.contains("listeners[0].protocol"),
            "{}",
            err.message
        );
    }
}

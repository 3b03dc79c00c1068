//! The front door every request passes: bearer-token authentication for
//! `/v1`, fault injection, and the request log. `/healthz` and `/_admin`
//! pass straight through, unauthenticated and unrecorded.

use std::time::Instant;

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, ErrorCode};
use crate::requests::{RequestRecord, recorded_body, redacted_headers};
use crate::state::SimState;

/// Larger request bodies are refused with 413.
const MAX_BODY: usize = 1024 * 1024;

/// Axum middleware wrapping the whole router.
pub(crate) async fn gateway(State(sim): State<SimState>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == "/healthz" || path == "/_admin" || path.starts_with("/_admin/") {
        return next.run(request).await;
    }
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let authorized = is_authorized(&sim, &parts.headers);
    let mut record = RequestRecord {
        seq: sim.next_seq(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        status: 0,
        authorized,
        headers: redacted_headers(&parts.headers),
        body: String::new(),
        latency_ms: 0,
    };
    let response = match to_bytes(body, MAX_BODY).await {
        Ok(body) => {
            record.body = recorded_body(&body);
            handle(&sim, parts, body, authorized, next).await
        }
        Err(err) => body_unreadable(&err).into_response(),
    };
    record.status = response.status().as_u16();
    record.latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::debug!(
        seq = record.seq,
        method = %record.method,
        path = %record.path,
        status = record.status,
        latency_ms = record.latency_ms,
        "request"
    );
    sim.record(record);
    response
}

/// Runs the request through authentication and faults, then the router.
async fn handle(
    sim: &SimState,
    parts: Parts,
    body: Bytes,
    authorized: bool,
    next: Next,
) -> Response {
    if let Some(rejection) = admit(sim, &parts, authorized).await {
        return rejection;
    }
    next.run(Request::from_parts(parts, Body::from(body))).await
}

/// Authentication, then faults, for `/v1`; `Some` answers the request.
async fn admit(sim: &SimState, parts: &Parts, authorized: bool) -> Option<Response> {
    let path = parts.uri.path();
    if path != "/v1" && !path.starts_with("/v1/") {
        return None;
    }
    if !authorized {
        return Some(unauthorized(&parts.headers).into_response());
    }
    let latency = sim.fault_latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    sim.decide_fault().map(IntoResponse::into_response)
}

/// The `Bearer` credential from the `Authorization` header, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn is_authorized(sim: &SimState, headers: &HeaderMap) -> bool {
    bearer(headers).is_some_and(|token| sim.token_matches(token))
}

fn unauthorized(headers: &HeaderMap) -> ApiError {
    if headers.contains_key(header::AUTHORIZATION) {
        ApiError::unauthorized(
            "invalid credentials: expected 'Authorization: Bearer <token>' with a valid token",
        )
    } else {
        ApiError::unauthorized("missing 'Authorization: Bearer <token>' header")
    }
}

fn body_unreadable(err: &axum::Error) -> ApiError {
    let message = format!("request body unreadable or larger than {MAX_BODY} bytes: {err}");
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::Invalid, message)
}

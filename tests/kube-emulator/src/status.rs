//! API errors and the `Status` objects that carry them: the reasons, codes,
//! messages and `details` a real kube-apiserver sends, so clients (kube-rs'
//! `Error::Api`, `is_not_found`, `is_conflict`…) classify them the same way.

use std::fmt;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A group and resource, e.g. (`coordination.k8s.io`, `leases`), as errors
/// name them: `leases.coordination.k8s.io "x" not found`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> GroupResource {
        GroupResource {
            group: group.to_owned(),
            resource: resource.to_owned(),
        }
    }
}

impl fmt::Display for GroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// A group and kind, e.g. (`coordination.k8s.io`, `Lease`), as `Invalid`
/// errors name them: `Lease.coordination.k8s.io "x" is invalid: …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupKind {
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: &str, kind: &str) -> GroupKind {
        GroupKind {
            group: group.to_owned(),
            kind: kind.to_owned(),
        }
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// What is wrong with one field, as apimachinery's `field.Error` types it.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldErrorType {
    Required,
    /// The bad value, rendered the way Go's validation renders it.
    Invalid(BadValue),
    /// A value of the wrong JSON type (`field.TypeInvalid`): printed like
    /// `Invalid`, but with its own reason.
    TypeInvalid(BadValue),
    NotSupported(BadValue, Vec<String>),
    Duplicate(BadValue),
    Forbidden,
    TooLong(usize),
    /// A list longer than allowed: the actual length and the maximum.
    TooMany(i64, usize),
}

/// A rejected value: strings are quoted, numbers and booleans printed bare,
/// anything else printed as Go's `%#v` would (approximately).
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    Str(String),
    Int(i64),
    Bool(bool),
    /// Pre-rendered, for composite values and Go's `0x0` for unsigned zero.
    Raw(String),
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => write!(f, "{}", quote(s)),
            BadValue::Int(i) => write!(f, "{i}"),
            BadValue::Bool(b) => write!(f, "{b}"),
            BadValue::Raw(r) => f.write_str(r),
        }
    }
}

impl From<&str> for BadValue {
    fn from(value: &str) -> BadValue {
        BadValue::Str(value.to_owned())
    }
}

impl From<String> for BadValue {
    fn from(value: String) -> BadValue {
        BadValue::Str(value)
    }
}

impl From<i64> for BadValue {
    fn from(value: i64) -> BadValue {
        BadValue::Int(value)
    }
}

impl From<bool> for BadValue {
    fn from(value: bool) -> BadValue {
        BadValue::Bool(value)
    }
}

/// Renders a JSON value the way it appears in a validation message: Go
/// prints an `interface{}` holding a scalar with `%v` (strings quoted),
/// `nil` as `null`, and maps and slices with `%#v`.
pub fn bad_value(value: &Value) -> BadValue {
    match value {
        Value::String(s) => BadValue::Str(s.clone()),
        Value::Bool(b) => BadValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => BadValue::Int(i),
            None => BadValue::Raw(go_number(n)),
        },
        Value::Null => BadValue::Raw("null".to_owned()),
        composite => BadValue::Raw(go_syntax(composite)),
    }
}

/// Go's `%#v` of a value decoded from JSON into `interface{}`, e.g.
/// `map[string]interface {}{"name":"a", "port":80}`.
pub fn go_syntax(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => quote(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(go_syntax).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(map) => {
            // Go prints map keys sorted, as serde_json's map keeps them.
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), go_syntax(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", entries.join(", "))
        }
    }
}

/// A JSON number as Go prints the `int64` or `float64` it decodes to.
fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    // `%v` is `%g` with the shortest digits: an exponent below -4 or from
    // 6 up is printed as `1.5e+06`.
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return f.to_string();
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if f == 0.0 || (-4..6).contains(&exp) {
        return f.to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
pub fn go_strings<S: AsRef<str>>(list: &[S]) -> BadValue {
    let quoted: Vec<String> = list.iter().map(|s| quote(s.as_ref())).collect();
    BadValue::Raw(format!("[]string{{{}}}", quoted.join(", ")))
}

/// Go's `%q` for the ASCII strings that appear in Kubernetes objects.
pub fn quote(s: &str) -> String {
    // serde_json escapes like Go for printable ASCII, quotes and backslashes.
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// One field error: the path (`spec.taints[0].effect`), what is wrong, and
/// an optional detail.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub kind: FieldErrorType,
    pub detail: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::Required,
            detail: detail.into(),
        }
    }

    pub fn invalid(
        field: impl Into<String>,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::Invalid(value.into()),
            detail: detail.into(),
        }
    }

    /// `field.TypeInvalid`: the value has the wrong JSON type.
    pub fn type_invalid(
        field: impl Into<String>,
        value: impl Into<BadValue>,
        detail: impl Into<String>,
    ) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::TypeInvalid(value.into()),
            detail: detail.into(),
        }
    }

    pub fn not_supported(
        field: impl Into<String>,
        value: impl Into<BadValue>,
        supported: &[&str],
    ) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::NotSupported(
                value.into(),
                supported.iter().map(|s| (*s).to_owned()).collect(),
            ),
            detail: String::new(),
        }
    }

    pub fn duplicate(field: impl Into<String>, value: impl Into<BadValue>) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::Duplicate(value.into()),
            detail: String::new(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::Forbidden,
            detail: detail.into(),
        }
    }

    pub fn too_long(field: impl Into<String>, max: usize) -> FieldError {
        FieldError {
            field: field.into(),
            kind: FieldErrorType::TooLong(max),
            detail: String::new(),
        }
    }

    /// `field.TooMany`: `actual` items where at most `max` are allowed.
    pub fn too_many(field: impl Into<String>, actual: i64, max: usize) -> FieldError {
        let items = if max == 1 { "item" } else { "items" };
        FieldError {
            field: field.into(),
            kind: FieldErrorType::TooMany(actual, max),
            detail: format!("must have at most {max} {items}"),
        }
    }

    /// `field is immutable`, as `ValidateImmutableField` reports it.
    pub fn immutable(field: impl Into<String>, value: impl Into<BadValue>) -> FieldError {
        FieldError::invalid(field, value, "field is immutable")
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Invalid(_) => "FieldValueInvalid",
            FieldErrorType::TypeInvalid(_) => "FieldValueTypeInvalid",
            FieldErrorType::NotSupported(..) => "FieldValueNotSupported",
            FieldErrorType::Duplicate(_) => "FieldValueDuplicate",
            FieldErrorType::Forbidden => "FieldValueForbidden",
            FieldErrorType::TooLong(_) => "FieldValueTooLong",
            FieldErrorType::TooMany(..) => "FieldValueTooMany",
        }
    }

    /// The message without the field path, as in a `StatusCause`.
    pub fn body(&self) -> String {
        let mut body = match &self.kind {
            FieldErrorType::Required => "Required value".to_owned(),
            FieldErrorType::Forbidden => "Forbidden".to_owned(),
            FieldErrorType::Invalid(v) | FieldErrorType::TypeInvalid(v) => {
                format!("Invalid value: {v}")
            }
            FieldErrorType::TooMany(actual, _) => format!("Too many: {actual}"),
            FieldErrorType::Duplicate(v) => format!("Duplicate value: {v}"),
            FieldErrorType::TooLong(max) => format!("Too long: may not be more than {max} bytes"),
            FieldErrorType::NotSupported(v, supported) => {
                let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
                format!(
                    "Unsupported value: {v}: supported values: {}",
                    list.join(", ")
                )
            }
        };
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// An error answered as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("{resource} {name:?} not found")]
    NotFound {
        resource: GroupResource,
        name: String,
    },
    #[error("the server could not find the requested resource")]
    UnknownResource,
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        resource: GroupResource,
        name: String,
    },
    #[error("Operation cannot be fulfilled on {resource} {name:?}: {message}")]
    Conflict {
        resource: GroupResource,
        name: String,
        message: String,
    },
    #[error("{}", invalid_message(kind, name, causes))]
    Invalid {
        kind: GroupKind,
        name: String,
        causes: Vec<FieldError>,
    },
    #[error("{0}")]
    BadRequest(String),
    /// A body the decoder cannot turn into an object of the kind
    /// (`transformDecodeError`): a type mismatch, a malformed time, or
    /// strict decoding errors. The detail is the decoder's own message.
    #[error(
        "{kind} in version {} cannot be handled as a {kind}: {detail}",
        quote(version)
    )]
    Undecodable {
        kind: String,
        version: String,
        detail: String,
    },
    /// A JSON patch that cannot be applied (an unknown or malformed
    /// operation, a failing `test`, a path that is not there). Upstream
    /// answers `NewGenericServerResponse(422)`, whose message drops the
    /// cause.
    #[error("the server rejected our request due to an error in our request")]
    Unprocessable,
    #[error("{}", forbidden_message(resource, name, message))]
    Forbidden {
        resource: GroupResource,
        name: String,
        message: String,
    },
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A verb the resource refuses for now (`NewMethodNotSupported` with
    /// its own message), such as creating custom resources of a
    /// terminating CRD.
    #[error("{message}")]
    MethodNotSupported {
        resource: GroupResource,
        message: String,
    },
    #[error("{0}")]
    Expired(String),
    /// A continue token older than the history, answered as etcd's store
    /// does (`handleCompactedErrorForPaging`): a 410 whose
    /// `metadata.continue` goes on with the list at the latest state.
    #[error(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
    )]
    ContinueExpired { token: String },
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    #[error("only the following media types are accepted: application/json")]
    NotAcceptable,
    /// A representation the object cannot be converted to.
    #[error("{0}")]
    NotAcceptableAs(String),
    #[error("Request entity too large: limit is {0}")]
    TooLarge(usize),
    #[error("Too large resource version: {requested}, current: {current}")]
    ResourceVersionTooLarge { requested: u64, current: u64 },
    #[error("Unauthorized")]
    Unauthorized,
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// A plain Go error no layer turned into a `Status` (`ErrorToAPIStatus`
    /// then answers 500 with no reason and the error's text), such as an
    /// unparsable resourceVersion reaching the watch cache.
    #[error("{0}")]
    Unclassified(String),
    /// A failure injected by a test through the fault controls.
    #[error("{message}")]
    Injected { code: u16, message: String },
}

/// `NewForbidden`: a collection (empty name) is forbidden unquoted, a
/// request for no resource (a path) just "forbidden".
fn forbidden_message(resource: &GroupResource, name: &str, message: &str) -> String {
    if resource.group.is_empty() && resource.resource.is_empty() {
        format!("forbidden: {message}")
    } else if name.is_empty() {
        format!("{resource} is forbidden: {message}")
    } else {
        format!("{resource} {name:?} is forbidden: {message}")
    }
}

fn invalid_message(kind: &GroupKind, name: &str, causes: &[FieldError]) -> String {
    let list = match causes {
        [one] => one.to_string(),
        many => {
            let all: Vec<String> = many.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        }
    };
    format!("{kind} {} is invalid: {list}", quote(name))
}

impl ApiError {
    pub fn not_found(resource: &GroupResource, name: &str) -> ApiError {
        ApiError::NotFound {
            resource: resource.clone(),
            name: name.to_owned(),
        }
    }

    /// The optimistic-concurrency conflict every client knows.
    pub fn stale(resource: &GroupResource, name: &str) -> ApiError {
        ApiError::Conflict {
            resource: resource.clone(),
            name: name.to_owned(),
            message: "the object has been modified; please apply your changes to the latest version and try again".to_owned(),
        }
    }

    pub fn invalid(kind: &GroupKind, name: &str, causes: Vec<FieldError>) -> ApiError {
        ApiError::Invalid {
            kind: kind.clone(),
            name: name.to_owned(),
            causes,
        }
    }

    /// The generic 405 for a verb the resource does not support.
    pub fn method_not_allowed() -> ApiError {
        ApiError::MethodNotAllowed(
            "the server does not allow this method on the requested resource".to_owned(),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest(message.into())
    }

    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::UnknownResource => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } => 409,
            ApiError::Invalid { .. } | ApiError::Unprocessable => 422,
            ApiError::BadRequest(_) | ApiError::Undecodable { .. } => 400,
            ApiError::Forbidden { .. } => 403,
            ApiError::MethodNotAllowed(_) | ApiError::MethodNotSupported { .. } => 405,
            ApiError::Expired(_) | ApiError::ContinueExpired { .. } => 410,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable | ApiError::NotAcceptableAs(_) => 406,
            ApiError::TooLarge(_) => 413,
            ApiError::ResourceVersionTooLarge { .. } => 504,
            ApiError::Unauthorized => 401,
            ApiError::Internal(_) | ApiError::Unclassified(_) => 500,
            ApiError::Injected { code, .. } => *code,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::UnknownResource => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::Unprocessable => "Invalid",
            ApiError::BadRequest(_) | ApiError::Undecodable { .. } => "BadRequest",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::MethodNotAllowed(_) | ApiError::MethodNotSupported { .. } => {
                "MethodNotAllowed"
            }
            ApiError::Expired(_) | ApiError::ContinueExpired { .. } => "Expired",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable | ApiError::NotAcceptableAs(_) => "NotAcceptable",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::ResourceVersionTooLarge { .. } => "Timeout",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unclassified(_) => "",
            ApiError::Injected { code, .. } => reason_for_code(*code),
        }
    }

    fn details(&self) -> Option<Value> {
        match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. }
            | ApiError::Forbidden { resource, name, .. } => Some(resource_details(resource, name)),
            ApiError::Invalid { kind, name, causes } => {
                let mut details =
                    non_empty(&[("name", name), ("group", &kind.group), ("kind", &kind.kind)]);
                details["causes"] = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason(), "message": c.body(), "field": c.field}))
                    .collect();
                Some(details)
            }
            ApiError::UnknownResource | ApiError::Unprocessable => Some(json!({})),
            ApiError::MethodNotSupported { resource, .. } => Some(non_empty(&[
                ("group", &resource.group),
                ("kind", &resource.resource),
            ])),
            ApiError::ResourceVersionTooLarge { .. } => Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            })),
            ApiError::Injected { code: 429, .. } => Some(json!({"retryAfterSeconds": 1})),
            ApiError::Internal(message) => Some(json!({"causes": [{"message": message}]})),
            _ => None,
        }
    }

    /// The `Status` object for this error.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "code": self.code(),
        });
        if !self.reason().is_empty() {
            status["reason"] = json!(self.reason());
        }
        if let Some(details) = self.details() {
            status["details"] = details;
        }
        if let ApiError::ContinueExpired { token } = self {
            status["metadata"] = json!({"continue": token});
        }
        status
    }
}

fn resource_details(resource: &GroupResource, name: &str) -> Value {
    non_empty(&[
        ("name", name),
        ("group", &resource.group),
        ("kind", &resource.resource),
    ])
}

/// A `StatusDetails` object of the fields that are set: Go omits empty
/// ones (`omitempty`).
fn non_empty(fields: &[(&str, &str)]) -> Value {
    let map = fields
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| ((*key).to_owned(), json!(value)))
        .collect();
    Value::Object(map)
}

/// The reason a real server puts on a Status with this code.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// A successful deletion, when the store does not return the deleted object.
pub fn success_status(resource: &GroupResource, name: &str, uid: &str) -> Value {
    let mut details = resource_details(resource, name);
    details["uid"] = json!(uid);
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (code, axum::Json(self.status())).into_response();
        if code == StatusCode::TOO_MANY_REQUESTS {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_status_names_kind_and_causes() {
        let err = ApiError::invalid(
            &GroupKind::new("", "Node"),
            "n1",
            vec![FieldError::not_supported(
                "metadata.taints[0].effect",
                "Bad",
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            )],
        );
        let status = err.status();
        assert_eq!(
            status["message"],
            "Node \"n1\" is invalid: metadata.taints[0].effect: Unsupported value: \"Bad\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueNotSupported"
        );
        assert_eq!(status["code"], 422);
    }

    #[test]
    fn conflict_message_matches_the_real_one() {
        let err = ApiError::stale(&GroupResource::new("coordination.k8s.io", "leases"), "l");
        assert_eq!(
            err.to_string(),
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"l\": the object has been modified; please apply your changes to the latest version and try again"
        );
        assert_eq!(err.status()["details"]["group"], "coordination.k8s.io");
    }

    #[test]
    fn several_causes_are_bracketed() {
        let err = ApiError::invalid(
            &GroupKind::new("", "Service"),
            "s",
            vec![
                FieldError::required("spec.ports", ""),
                FieldError::forbidden("spec.x", "no"),
            ],
        );
        assert_eq!(
            err.to_string(),
            "Service \"s\" is invalid: [spec.ports: Required value, spec.x: Forbidden: no]"
        );
    }
}

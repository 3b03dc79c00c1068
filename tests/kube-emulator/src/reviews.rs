//! The review APIs a delegating server calls: `TokenReview`
//! (`POST /apis/authentication.k8s.io/v1/tokenreviews`: who a bearer token
//! is, answered by the same authenticators as the emulator's own requests)
//! and `SubjectAccessReview` (`POST
//! /apis/authorization.k8s.io/v1/subjectaccessreviews`: whether a user may
//! do something, answered by the same authorizer), as upstream's
//! `tokenreview` and `subjectaccessreview` REST storages answer them: the
//! object sent back with its `status` filled, 201, nothing stored.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::authorization::{Attributes, Authorizer};
use crate::status::{ApiError, FieldError, GroupKind};
use crate::store::Store;
use crate::tokens::{API_AUDIENCE, Tokens};

/// `TokenReview`: `status.authenticated` and the user when `spec.token` is
/// one the API server knows and was issued for one of `spec.audiences`
/// (none asked: the API server's own); `status.audiences` what both share.
pub fn token_review(tokens: &Tokens, store: &Store, body: &Value) -> Result<Value, ApiError> {
    let mut review: TokenReview = decode(body, "authentication.k8s.io/v1", "TokenReview")?;
    let token = review.spec.token.clone().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let wanted = match review.spec.audiences.clone().unwrap_or_default() {
        asked if asked.is_empty() => vec![API_AUDIENCE.to_owned()],
        asked => asked,
    };
    let status = match tokens.review(store, &token) {
        Some((user, audiences)) => {
            let shared: Vec<String> = wanted
                .into_iter()
                .filter(|audience| audiences.contains(audience))
                .collect();
            if shared.is_empty() {
                TokenReviewStatus {
                    authenticated: Some(false),
                    error: Some("token audiences is invalid for the target audiences".into()),
                    ..TokenReviewStatus::default()
                }
            } else {
                TokenReviewStatus {
                    authenticated: Some(true),
                    audiences: Some(shared),
                    user: Some(UserInfo {
                        username: Some(user.name),
                        groups: Some(user.groups),
                        ..UserInfo::default()
                    }),
                    ..TokenReviewStatus::default()
                }
            }
        }
        None => TokenReviewStatus {
            authenticated: Some(false),
            ..TokenReviewStatus::default()
        },
    };
    review.status = Some(status);
    encode(&review)
}

/// `SubjectAccessReview`: `status.allowed` as the emulator's authorizer
/// decides for the user, groups and attributes of `spec`; a refusal with
/// `denied` unset (RBAC allows or has no opinion) and the authorizer's reason.
pub fn subject_access_review(
    authorizer: &Authorizer,
    store: &Store,
    body: &Value,
) -> Result<Value, ApiError> {
    let mut review: SubjectAccessReview =
        decode(body, "authorization.k8s.io/v1", "SubjectAccessReview")?;
    let spec = &review.spec;
    let mut causes = Vec::new();
    match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (Some(_), Some(_)) => causes.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            crate::status::BadValue::Raw(
                serde_json::to_string(&spec.non_resource_attributes).unwrap_or_default(),
            ),
            "cannot be specified in combination with resourceAttributes",
        )),
        (None, None) => causes.push(FieldError::invalid(
            "spec.resourceAttributes",
            crate::status::BadValue::Raw("nil".into()),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    let user = spec.user.clone().unwrap_or_default();
    let groups = spec.groups.clone().unwrap_or_default();
    if user.is_empty() && groups.is_empty() {
        causes.push(FieldError::invalid(
            "spec.user",
            "",
            "at least one of user or group must be specified",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            &GroupKind::new("authorization.k8s.io", "SubjectAccessReview"),
            "",
            causes,
        ));
    }
    let mut attributes = Attributes {
        user,
        groups,
        verb: String::new(),
        resource_request: false,
        api_group: String::new(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        path: String::new(),
    };
    if let Some(asked) = &spec.non_resource_attributes {
        attributes.verb = asked.verb.clone().unwrap_or_default();
        attributes.path = asked.path.clone().unwrap_or_default();
    }
    if let Some(asked) = &spec.resource_attributes {
        attributes.resource_request = true;
        attributes.verb = asked.verb.clone().unwrap_or_default();
        attributes.api_group = asked.group.clone().unwrap_or_default();
        attributes.resource = asked.resource.clone().unwrap_or_default();
        attributes.subresource = asked.subresource.clone().unwrap_or_default();
        attributes.namespace = asked.namespace.clone().unwrap_or_default();
        attributes.name = asked.name.clone().unwrap_or_default();
    }
    let status = match authorizer.review(store, &attributes) {
        Ok(()) => SubjectAccessReviewStatus {
            allowed: true,
            ..SubjectAccessReviewStatus::default()
        },
        Err(reason) => SubjectAccessReviewStatus {
            allowed: false,
            reason: (!reason.is_empty()).then_some(reason),
            ..SubjectAccessReviewStatus::default()
        },
    };
    review.status = Some(status);
    encode(&review)
}

/// The body as `kind` of `api_version`: a `TypeMeta` naming another is
/// upstream's 400, a field of the wrong type the decoder's.
fn decode<T: DeserializeOwned>(body: &Value, api_version: &str, kind: &str) -> Result<T, ApiError> {
    let field = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or("");
    let given_version = field("apiVersion");
    if !given_version.is_empty() && given_version != api_version {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({given_version}) does not match the expected API version ({api_version})"
        )));
    }
    let given_kind = field("kind");
    if !given_kind.is_empty() && given_kind != kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({given_kind}) does not match the expected kind ({kind})"
        )));
    }
    serde_json::from_value(body.clone()).map_err(|error| ApiError::Undecodable {
        kind: kind.to_owned(),
        version: "v1".to_owned(),
        detail: error.to_string(),
    })
}

fn encode<T: k8s_openapi::Resource + serde::Serialize>(review: &T) -> Result<Value, ApiError> {
    let mut value = serde_json::to_value(review)
        .map_err(|error| ApiError::bad_request(format!("cannot encode the review: {error}")))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("apiVersion".into(), T::API_VERSION.into());
        object.insert("kind".into(), T::KIND.into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::Authorization;

    #[test]
    fn token_review_names_the_user_of_a_known_token_and_refuses_others() {
        let store = Store::new(10);
        let tokens = Tokens::new("admin-token", None);
        let answer = token_review(
            &tokens,
            &store,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": "admin-token"}}),
        )
        .expect("a review");
        assert_eq!(answer["status"]["authenticated"], true);
        assert_eq!(answer["status"]["user"]["username"], crate::ADMIN_USER);
        assert_eq!(answer["status"]["audiences"], json!([API_AUDIENCE]));
        assert_eq!(answer["kind"], "TokenReview");

        let unknown =
            token_review(&tokens, &store, &json!({"spec": {"token": "guess"}})).expect("a review");
        assert_eq!(unknown["status"]["authenticated"], false);
        assert!(unknown["status"].get("user").is_none());

        let elsewhere = token_review(
            &tokens,
            &store,
            &json!({"spec": {"token": "admin-token", "audiences": ["vault"]}}),
        )
        .expect("a review");
        assert_eq!(elsewhere["status"]["authenticated"], false);

        let empty = token_review(&tokens, &store, &json!({"spec": {}})).expect_err("no token");
        assert_eq!(
            empty.to_string(),
            "token is required for TokenReview in authentication"
        );
    }

    #[test]
    fn subject_access_review_is_validated_as_upstream() {
        let store = Store::new(10);
        let authorizer = Authorizer::new(Authorization::Rbac);
        let error = subject_access_review(&authorizer, &store, &json!({"spec": {}}))
            .expect_err("nothing asked")
            .to_string();
        assert!(
            error.contains("exactly one of nonResourceAttributes or resourceAttributes")
                && error.contains("at least one of user or group must be specified"),
            "{error}"
        );
    }

    #[test]
    fn subject_access_review_decides_as_rbac() {
        let store = Store::new(10);
        let authorizer = Authorizer::new(Authorization::Rbac);
        let ask = |user: &str, groups: &[&str], path: &str| {
            subject_access_review(
                &authorizer,
                &store,
                &json!({"spec": {"user": user, "groups": groups,
                        "nonResourceAttributes": {"path": path, "verb": "get"}}}),
            )
            .expect("a review")["status"]["allowed"]
                .clone()
        };
        assert_eq!(ask("someone", &["system:authenticated"], "/metrics"), false);
        assert_eq!(ask("someone", &["system:authenticated"], "/healthz"), true);
        assert_eq!(ask("someone", &[], "/healthz"), false);
        assert_eq!(ask("root", &["system:masters"], "/metrics"), true);
        assert!(
            authorizer.snapshot().is_empty(),
            "reviews are not the caller's decisions"
        );
    }
}

//! Authentication: who a request is. The kubeconfig's bearer token is the
//! admin ([`ADMIN_USER`], in `system:masters`); the
//! `serviceaccounts/{name}/token` subresource (an `authentication.k8s.io/v1`
//! `TokenRequest`, as `kubectl create token` and client-go's `CreateToken`
//! send it) issues tokens that authenticate as
//! `system:serviceaccount:{namespace}:{name}` (in the groups upstream's
//! service-account authenticator gives it) until they expire, and only
//! while their ServiceAccount (the same one, by uid) exists. Anything else is
//! a 401, as the real server answers an expired or unknown token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, header};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::meta;
use crate::status::{ApiError, FieldError, GroupKind, GroupResource};
use crate::store::Store;

/// The user the kubeconfig's token authenticates as (the kubeconfig names
/// its user so, too).
pub const ADMIN_USER: &str = "kube-emulator";

/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group whose members may do anything (`user.SystemPrivilegedGroup`).
pub const MASTERS: &str = "system:masters";

/// `spec.expirationSeconds` when a request has none (upstream's default).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime `ValidateTokenRequest` accepts.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest.
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// Audiences of a token that asks for none: the API server's own (what
/// kubeadm's default `--service-account-issuer` makes them).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// An authenticated user: a name and groups, as `user.Info` carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    fn admin() -> User {
        User {
            name: ADMIN_USER.to_owned(),
            groups: vec![MASTERS.to_owned(), AUTHENTICATED.to_owned()],
        }
    }

    /// A service account, in the groups upstream's `UserInfo` puts it in.
    fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: service_account_user(namespace, name),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.to_owned(),
            ],
        }
    }
}

/// A token issued by the token subresource.
#[derive(Debug, Clone)]
struct Issued {
    namespace: String,
    name: String,
    uid: String,
    expires: SystemTime,
    audiences: Vec<String>,
}

/// The admin token and the tokens issued so far. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tokens {
    admin: Arc<str>,
    /// `--service-account-max-token-expiration`: longer requests are shortened to it.
    max_expiration: Option<Duration>,
    issued: Arc<Mutex<HashMap<String, Issued>>>,
}

impl Tokens {
    pub fn new(admin: &str, max_expiration: Option<Duration>) -> Tokens {
        Tokens {
            admin: Arc::from(admin),
            max_expiration,
            issued: Arc::default(),
        }
    }

    fn issued(&self) -> MutexGuard<'_, HashMap<String, Issued>> {
        self.issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The user whose bearer token `headers` carry, or 401.
    pub fn authenticate(&self, store: &Store, headers: &HeaderMap) -> Result<User, ApiError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(ApiError::Unauthorized)?;
        self.review(store, presented)
            .map(|(user, _)| user)
            .ok_or(ApiError::Unauthorized)
    }

    /// Who `token` is, and the audiences it was issued for (the API
    /// server's for the admin token), or `None` for an unknown, expired
    /// or orphaned token: what the API server's authenticators answer, for
    /// requests and for a `TokenReview` alike.
    pub fn review(&self, store: &Store, token: &str) -> Option<(User, Vec<String>)> {
        if token == &*self.admin {
            return Some((User::admin(), vec![API_AUDIENCE.to_owned()]));
        }
        let issued = self.issued().get(token).cloned()?;
        if SystemTime::now() >= issued.expires {
            return None;
        }
        let account = store.get("serviceaccounts", Some(&issued.namespace), &issued.name)?;
        if meta::uid(&account) != issued.uid {
            return None;
        }
        let user = User::service_account(&issued.namespace, &issued.name);
        Some((user, issued.audiences))
    }

    /// `POST .../namespaces/{namespace}/serviceaccounts/{name}/token`: the
    /// `TokenRequest` answered with `status.token` and
    /// `status.expirationTimestamp`, and the warnings, as upstream's
    /// `TokenREST.Create` checks and fills them.
    pub fn request(
        &self,
        store: &Store,
        namespace: &str,
        name: &str,
        body: &Value,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let kind = GroupKind::new("authentication.k8s.io", "TokenRequest");
        check_type_meta(body)?;
        // The body may name the account, but only as the URL does.
        for (field, given, wanted) in [
            ("name", meta::name(body), name),
            ("namespace", meta::namespace(body), namespace),
        ] {
            if !given.is_empty() && given != wanted {
                return Err(ApiError::invalid(
                    &kind,
                    name,
                    vec![FieldError::invalid(
                        format!("metadata.{field}"),
                        given,
                        format!("must match the service account {field} if specified"),
                    )],
                ));
            }
        }
        let account = store
            .get("serviceaccounts", Some(namespace), name)
            .ok_or_else(|| ApiError::not_found(&GroupResource::new("", "serviceaccounts"), name))?;
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let mut audiences = match spec.get("audiences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .map(|a| a.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| undecodable("spec.audiences: expected a list of strings"))?,
            Some(_) => return Err(undecodable("spec.audiences: expected a list of strings")),
        };
        if audiences.is_empty() {
            audiences.push(API_AUDIENCE.to_owned());
        }
        let mut seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(value) => value
                .as_i64()
                .ok_or_else(|| undecodable("spec.expirationSeconds: expected an int64"))?,
        };
        let mut errs = Vec::new();
        if seconds < MIN_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid(
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if seconds > MAX_EXPIRATION_SECONDS {
            errs.push(FieldError::invalid(
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid(&kind, "", errs));
        }
        if spec.get("boundObjectRef").is_some_and(|r| !r.is_null()) {
            return Err(ApiError::bad_request(
                "kube-emulator does not bind tokens to objects (spec.boundObjectRef)",
            ));
        }
        let mut warnings = Vec::new();
        if let Some(max) = self.max_expiration {
            let max_seconds = i64::try_from(max.as_secs()).unwrap_or(i64::MAX).max(1);
            if seconds > max_seconds {
                warnings.push(format!(
                    "requested expiration of {seconds} seconds shortened to {max_seconds} seconds"
                ));
                seconds = max_seconds;
            }
        }
        let now = SystemTime::now();
        let expires = now + Duration::from_secs(seconds.unsigned_abs());
        let token = hex::encode(rand::random::<[u8; 32]>());
        self.issued().insert(
            token.clone(),
            Issued {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: meta::uid(&account).to_owned(),
                expires,
                audiences: audiences.clone(),
            },
        );
        let answer = json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": meta::now()},
            "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
            "status": {"token": token, "expirationTimestamp": rfc3339_seconds(expires)},
        });
        Ok((answer, warnings))
    }
}

/// The user name of a service account, as upstream's `MakeUsername`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

fn check_type_meta(body: &Value) -> Result<(), ApiError> {
    let api_version = meta_field(body, "apiVersion");
    if !api_version.is_empty() && api_version != "authentication.k8s.io/v1" {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version (authentication.k8s.io/v1)"
        )));
    }
    let kind = meta_field(body, "kind");
    if !kind.is_empty() && kind != "TokenRequest" {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind (TokenRequest)"
        )));
    }
    Ok(())
}

fn meta_field<'a>(body: &'a Value, key: &str) -> &'a str {
    body.get(key).and_then(Value::as_str).unwrap_or("")
}

fn undecodable(detail: &str) -> ApiError {
    ApiError::Undecodable {
        kind: "TokenRequest".to_owned(),
        version: "v1".to_owned(),
        detail: detail.to_owned(),
    }
}

/// A `metav1.Time`: RFC 3339 in UTC, whole seconds.
fn rfc3339_seconds(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    Timestamp::from_second(seconds).map_or_else(|_| meta::now(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_whole_seconds_in_utc() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_900);
        assert_eq!(rfc3339_seconds(time), "2023-11-14T22:13:20Z");
    }
}

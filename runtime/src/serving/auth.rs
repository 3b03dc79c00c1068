//! Who may read the secure port: every request but those to
//! `--authorization-always-allow-paths` is authenticated and authorised through the API
//! server, as upstream's cloud-controller-manager delegates both
//! (`DelegatingAuthenticationOptions`, `DelegatingAuthorizationOptions`).
//!
//! - **Authentication**: a client certificate verified during the TLS handshake against
//!   `--client-ca-file` is the user of its subject's common name, in the groups of its
//!   organizations (upstream's `CommonNameUserConversion`); otherwise the
//!   `Authorization: Bearer` token is sent to the API server in a `TokenReview`. No
//!   credentials, a token the API server does not know, or a review that fails is a 401.
//! - **Authorisation**: a `SubjectAccessReview` asks whether that user may use the HTTP
//!   method, lowercased, on the path (`get` on the non-resource URL `/metrics`, as RBAC's
//!   `nonResourceURLs` rules grant it); a refusal is upstream's 403, `forbidden: User "…"
//!   cannot get path "/metrics"`; a review that fails, a 500.
//! - **Caching**, as upstream's: reviewed tokens for `--authentication-token-webhook-cache-ttl`
//!   (keyed by the token's SHA-256, never the token), decisions for
//!   `--authorization-webhook-cache-authorized-ttl` and `…-unauthorized-ttl` (10 s each),
//!   each cache bounded ([`TOKEN_CACHE_SIZE`], [`DECISION_CACHE_SIZE`]); a failed review is
//!   not cached. Tokens the API server refused are kept apart from those it knows, so each
//!   costs one review per TTL, and a flood of distinct bad tokens evicts only bad ones.
//!
//! Unlike upstream, a request with no credentials is refused (401) at once rather than
//! reviewed as `system:anonymous`, and an always-allowed path is answered without looking
//! at credentials, so health probes never wait for the API server.
//!
//! ```
//! use wasm_ccm::serving::AuthConfig;
//!
//! let auth = AuthConfig::default();
//! assert!(auth.always_allows("/healthz"));
//! assert!(!auth.always_allows("/metrics"));
//! ```

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use sha2::{Digest, Sha256};
use tokio::time::Instant;
use tracing::{debug, warn};

/// Reviewed tokens kept at most, the known and the refused each (upstream's token cache is
/// bounded only by its TTL).
pub const TOKEN_CACHE_SIZE: usize = 4096;
/// Authorisation decisions kept at most (upstream's webhook authorizer keeps 8192).
pub const DECISION_CACHE_SIZE: usize = 8192;

/// How requests to the secure port are authenticated and authorised, from the flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// `--authorization-always-allow-paths`: answered to anyone; a path ending in `*` is a
    /// prefix.
    pub always_allow_paths: Vec<String>,
    /// `--client-ca-file`: client certificates signed by it authenticate their subject.
    pub client_ca_file: Option<PathBuf>,
    /// `--authentication-token-webhook-cache-ttl`: how long a reviewed token is trusted.
    pub token_ttl: Duration,
    /// `--authorization-webhook-cache-authorized-ttl`.
    pub authorized_ttl: Duration,
    /// `--authorization-webhook-cache-unauthorized-ttl`.
    pub unauthorized_ttl: Duration,
}

/// Upstream's default `--authorization-always-allow-paths`.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            always_allow_paths: DEFAULT_ALWAYS_ALLOW_PATHS.map(str::to_owned).to_vec(),
            client_ca_file: None,
            token_ttl: Duration::from_secs(10),
            authorized_ttl: Duration::from_secs(10),
            unauthorized_ttl: Duration::from_secs(10),
        }
    }
}

/// Why `--authorization-always-allow-paths` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// A path that is not absolute, or has a `*` before its end.
    #[error(
        "--authorization-always-allow-paths {path:?}: a path starts with '/' and may end with '*' (a prefix), with no other '*'"
    )]
    Path {
        /// The path given.
        path: String,
    },
}

impl AuthConfig {
    /// Checks the always-allowed paths as upstream's path authorizer does.
    pub fn validate(&self) -> Result<(), AuthConfigError> {
        for path in &self.always_allow_paths {
            let body = path.strip_suffix('*').unwrap_or(path);
            if !path.starts_with('/') || body.contains('*') {
                return Err(AuthConfigError::Path { path: path.clone() });
            }
        }
        Ok(())
    }

    /// Whether `path` is answered without authentication.
    pub fn always_allows(&self, path: &str) -> bool {
        self.always_allow_paths
            .iter()
            .any(|allowed| match allowed.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => path == allowed,
            })
    }
}

/// An authenticated caller, as the API server's `UserInfo` names one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    name: String,
    uid: String,
    groups: Vec<String>,
    extra: BTreeMap<String, Vec<String>>,
}

/// What the TLS handshake learnt of the client: a certificate verified against
/// `--client-ca-file`, read as a user, or why it names none.
#[derive(Clone, Debug)]
pub(super) struct ClientCertificate(Result<Caller, String>);

impl ClientCertificate {
    /// The user of a verified leaf certificate: its subject's common name, in the groups of
    /// its organizations.
    pub(super) fn read(der: &[u8]) -> ClientCertificate {
        let read = || -> Result<Caller, String> {
            let (_, certificate) = x509_parser::parse_x509_certificate(der)
                .map_err(|error| format!("unreadable client certificate: {error}"))?;
            let subject = certificate.subject();
            let name = subject
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or_default()
                .to_owned();
            if name.is_empty() {
                return Err("the client certificate's subject has no common name".to_owned());
            }
            let groups = subject
                .iter_organization()
                .filter_map(|o| o.as_str().ok().map(str::to_owned))
                .collect();
            Ok(Caller {
                name,
                uid: String::new(),
                groups,
                extra: BTreeMap::new(),
            })
        };
        ClientCertificate(read())
    }
}

/// Why a review could not be made (not a refusal: the API server did not answer one).
#[derive(Debug, thiserror::Error)]
enum ReviewError {
    #[error("{kind} failed: {error}")]
    Api {
        kind: &'static str,
        error: kube::Error,
    },
    #[error("{kind} answered without a status")]
    NoStatus { kind: &'static str },
}

/// A map whose entries expire, holding at most `capacity`: when full, the expired entries
/// go, then the one closest to expiring.
#[derive(Debug)]
struct Expiring<K, V> {
    capacity: usize,
    entries: HashMap<K, (V, Instant)>,
}

impl<K: Eq + Hash + Clone, V: Clone> Expiring<K, V> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &K, now: Instant) -> Option<V> {
        self.entries
            .get(key)
            .filter(|(_, expires)| *expires > now)
            .map(|(value, _)| value.clone())
    }

    fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        if ttl.is_zero() || self.capacity == 0 {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, expires)| *expires > now);
            if self.entries.len() >= self.capacity
                && let Some(soonest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, expires))| *expires)
                    .map(|(key, _)| key.clone())
            {
                self.entries.remove(&soonest);
            }
        }
        self.entries.insert(key, (value, now + ttl));
    }
}

/// What authorisation is asked about: who, which verb, which path.
type Question = (Caller, String, String);

/// A refusal or failure as the response upstream's filters write.
enum Refusal {
    Unauthorized,
    Forbidden(String),
    Failed(String),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (code, reason, message) = match self {
            Refusal::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "Unauthorized".to_owned(),
            ),
            Refusal::Forbidden(message) => (StatusCode::FORBIDDEN, "Forbidden", message),
            Refusal::Failed(message) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, message).into_response();
            }
        };
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": {}, "code": code.as_u16(),
        });
        (
            code,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            format!("{status}\n"),
        )
            .into_response()
    }
}

/// The secure port's gatekeeper: its configuration, the API client it reviews with, and
/// what it remembers. Cheap to clone.
#[derive(Clone)]
pub(super) struct Delegation {
    config: Arc<AuthConfig>,
    client: kube::Client,
    /// Tokens the API server knows, with who they are.
    tokens: Arc<Mutex<Expiring<[u8; 32], Caller>>>,
    /// Tokens it refused: apart, so that refused ones never evict known ones.
    refused: Arc<Mutex<Expiring<[u8; 32], ()>>>,
    decisions: Arc<Mutex<Expiring<Question, Result<(), String>>>>,
}

impl Delegation {
    pub(super) fn new(config: AuthConfig, client: kube::Client) -> Self {
        Self {
            config: Arc::new(config),
            client,
            tokens: Arc::new(Mutex::new(Expiring::new(TOKEN_CACHE_SIZE))),
            refused: Arc::new(Mutex::new(Expiring::new(TOKEN_CACHE_SIZE))),
            decisions: Arc::new(Mutex::new(Expiring::new(DECISION_CACHE_SIZE))),
        }
    }

    /// Who sent a request with the client `certificate` and `authorization` header, or why
    /// nobody is known.
    async fn authenticate(
        &self,
        certificate: Option<ClientCertificate>,
        authorization: Option<String>,
    ) -> Result<Caller, Refusal> {
        if let Some(ClientCertificate(certificate)) = certificate {
            return certificate.map_err(|reason| {
                debug!(%reason, "client certificate refused");
                Refusal::Unauthorized
            });
        }
        let token = authorization
            .as_deref()
            .and_then(|value| {
                let (scheme, token) = value.trim().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|token| !token.is_empty())
            .ok_or(Refusal::Unauthorized)?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(known) = locked(&self.tokens).get(&key, Instant::now()) {
            return Ok(known);
        }
        if locked(&self.refused).get(&key, Instant::now()).is_some() {
            return Err(Refusal::Unauthorized);
        }
        let reviewed = self.review_token(token).await.map_err(|error| {
            warn!(%error, "cannot authenticate a request to the secure port");
            Refusal::Unauthorized
        })?;
        let ttl = self.config.token_ttl;
        match reviewed {
            Some(caller) => {
                locked(&self.tokens).insert(key, caller.clone(), ttl, Instant::now());
                Ok(caller)
            }
            None => {
                locked(&self.refused).insert(key, (), ttl, Instant::now());
                Err(Refusal::Unauthorized)
            }
        }
    }

    async fn review_token(&self, token: &str) -> Result<Option<Caller>, ReviewError> {
        const KIND: &str = "TokenReview";
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|error| ReviewError::Api { kind: KIND, error })?;
        let status = answer.status.ok_or(ReviewError::NoStatus { kind: KIND })?;
        if status.authenticated != Some(true) {
            return Ok(None);
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(Caller {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }

    /// Whether `caller` may use `verb` on `path`; a refusal carries the reviewer's reason.
    async fn authorize(&self, caller: Caller, verb: String, path: String) -> Result<(), Refusal> {
        let question = (caller, verb, path);
        let cached = locked(&self.decisions).get(&question, Instant::now());
        let decision = match cached {
            Some(decision) => decision,
            None => {
                let decision = self.review_access(&question).await.map_err(|error| {
                    warn!(%error, "cannot authorise a request to the secure port");
                    Refusal::Failed(format!("Internal Server Error: {:?}: {error}", question.2))
                })?;
                let ttl = match decision {
                    Ok(()) => self.config.authorized_ttl,
                    Err(_) => self.config.unauthorized_ttl,
                };
                locked(&self.decisions).insert(
                    question.clone(),
                    decision.clone(),
                    ttl,
                    Instant::now(),
                );
                decision
            }
        };
        let (caller, verb, path) = question;
        decision.map_err(|reason| {
            let mut message = format!(
                "forbidden: User {:?} cannot {verb} path {path:?}",
                caller.name
            );
            if !reason.is_empty() {
                message = format!("{message}: {reason}");
            }
            Refusal::Forbidden(message)
        })
    }

    async fn review_access(
        &self,
        (caller, verb, path): &Question,
    ) -> Result<Result<(), String>, ReviewError> {
        const KIND: &str = "SubjectAccessReview";
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.name.clone()),
                uid: (!caller.uid.is_empty()).then(|| caller.uid.clone()),
                groups: Some(caller.groups.clone()),
                extra: (!caller.extra.is_empty()).then(|| caller.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some(verb.clone()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|error| ReviewError::Api { kind: KIND, error })?;
        let status = answer.status.ok_or(ReviewError::NoStatus { kind: KIND })?;
        Ok(if status.allowed && status.denied != Some(true) {
            Ok(())
        } else {
            Err(status.reason.unwrap_or_default())
        })
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The middleware in front of every route: always-allowed paths pass, anything else is
/// authenticated, then authorised.
pub(super) async fn gate(
    State(delegation): State<Delegation>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if delegation.config.always_allows(&path) {
        return next.run(request).await;
    }
    let certificate = request.extensions().get::<ClientCertificate>().cloned();
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let caller = match delegation.authenticate(certificate, authorization).await {
        Ok(caller) => caller,
        Err(refusal) => return refusal.into_response(),
    };
    let verb = request.method().as_str().to_lowercase();
    match delegation.authorize(caller, verb, path).await {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_allowed_paths_match_exactly_or_by_prefix() {
        let config = AuthConfig {
            always_allow_paths: vec!["/healthz".into(), "/debug/*".into()],
            ..AuthConfig::default()
        };
        assert!(config.validate().is_ok());
        assert!(config.always_allows("/healthz"));
        assert!(!config.always_allows("/healthz/leaderElection"));
        assert!(config.always_allows("/debug/pprof"));
        assert!(!config.always_allows("/metrics"));
        for bad in ["healthz", "/a*b", "*"] {
            let config = AuthConfig {
                always_allow_paths: vec![bad.into()],
                ..AuthConfig::default()
            };
            let error = config.validate().expect_err(bad).to_string();
            assert!(
                error.contains("--authorization-always-allow-paths") && error.contains(bad),
                "{error}"
            );
        }
    }

    /// A client of an API server whose every TokenReview answers "not authenticated",
    /// counting the reviews.
    fn refusing_api(reviews: Arc<std::sync::atomic::AtomicUsize>) -> kube::Client {
        let service = tower::service_fn(move |_: http::Request<kube::client::Body>| {
            reviews.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async {
                let body = serde_json::json!({
                    "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {}, "status": {"authenticated": false}
                });
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(
                            body.to_string(),
                        )))
                        .unwrap(),
                )
            }
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_bad_token_costs_one_review_per_ttl_and_a_flood_of_them_evicts_no_good_one() {
        let reviews = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let delegation = Delegation::new(AuthConfig::default(), refusing_api(reviews.clone()));
        let good = Caller {
            name: "prometheus".into(),
            uid: String::new(),
            groups: Vec::new(),
            extra: BTreeMap::new(),
        };
        let good_key: [u8; 32] = Sha256::digest(b"good").into();
        let ttl = delegation.config.token_ttl;
        locked(&delegation.tokens).insert(good_key, good.clone(), ttl, Instant::now());
        let bearer = |token: &str| Some(format!("Bearer {token}"));
        for _ in 0..3 {
            assert!(delegation.authenticate(None, bearer("bad")).await.is_err());
        }
        assert_eq!(
            reviews.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "one review"
        );
        for index in 0..TOKEN_CACHE_SIZE + 100 {
            let _ = delegation
                .authenticate(None, bearer(&format!("bad-{index}")))
                .await;
        }
        let known = delegation.authenticate(None, bearer("good")).await;
        assert_eq!(known.ok().map(|caller| caller.name), Some(good.name));
    }

    #[test]
    fn cache_entries_expire_and_the_cache_stays_bounded() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let mut cache = Expiring::new(2);
        cache.insert("a", 1, ttl, now);
        assert_eq!(cache.get(&"a", now + Duration::from_secs(9)), Some(1));
        assert_eq!(cache.get(&"a", now + ttl), None, "expired");
        cache.insert("b", 2, ttl, now + Duration::from_secs(1));
        cache.insert("c", 3, ttl, now + Duration::from_secs(2));
        assert_eq!(cache.entries.len(), 2);
        assert_eq!(cache.get(&"a", now), None, "the soonest to expire went");
        assert_eq!(cache.get(&"c", now), Some(3));
        cache.insert("d", 4, Duration::ZERO, now);
        assert_eq!(cache.get(&"d", now), None, "a zero TTL caches nothing");
    }

    #[test]
    fn a_certificate_names_its_common_name_in_its_organizations() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "prometheus");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "monitoring");
        let certificate = params.self_signed(&key).expect("certificate");
        let ClientCertificate(caller) = ClientCertificate::read(certificate.der());
        let caller = caller.expect("a user");
        assert_eq!(
            (caller.name.as_str(), caller.groups.as_slice()),
            ("prometheus", ["monitoring".to_owned()].as_slice())
        );

        let mut nameless = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        nameless.distinguished_name = rcgen::DistinguishedName::new();
        let nameless = nameless.self_signed(&key).expect("certificate");
        let ClientCertificate(refused) = ClientCertificate::read(nameless.der());
        assert!(refused.expect_err("no user").contains("common name"));
    }
}

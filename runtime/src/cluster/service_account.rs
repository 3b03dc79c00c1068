//! `--use-service-account-credentials`: each controller calls the API server as the
//! ServiceAccount upstream gives it, in `kube-system`, with a bearer token from the
//! TokenRequest API, as upstream's `DynamicControllerClientBuilder` does.
//!
//! The manager's own client (its kubeconfig or in-cluster credentials) gets the account,
//! creating it if missing, and asks `serviceaccounts/NAME/token` for a token of an hour
//! (upstream's `expirationSeconds`). The token is cached and refreshed once 80% of its
//! lifetime has passed (upstream's 20% leeway), lazily, by the first request that needs
//! it; one refresh at a time per account, the other requests wait for it. A refresh that
//! fails keeps the old token while it is still valid, is logged naming the account and the
//! API server's answer, and is retried after a backoff (0.5 s doubling to 30 s) rather
//! than by every request; requests that have no valid token meanwhile fail with that
//! error, and the controllers retry them as any failed request. A 401 drops the token it
//! was sent with, so the next request gets a new one.
//!
//! Controllers that share an account (cloud-node and cloud-node-lifecycle share
//! `node-controller`, as upstream) share its token.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderValue, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Where the accounts live, as upstream (`metav1.NamespaceSystem`).
pub const NAMESPACE: &str = "kube-system";
/// The lifetime asked of each token (upstream's `defaultExpirationSeconds`).
const EXPIRATION_SECONDS: i64 = 3600;
/// The share of a token's lifetime left when it is refreshed (upstream's
/// `defaultLeewayPercent`).
const LEEWAY_PERCENT: u32 = 20;
/// Upstream pins a lifetime shorter than this to it, taking the difference for clock skew
/// (the API server never grants less: 10 minutes is its minimum).
const MIN_LIFETIME: Duration = Duration::from_secs(600);
/// The first pause after a failed refresh; it doubles with each failure in a row.
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest pause between refresh attempts.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Why a controller has no token for its service account (in [`NAMESPACE`]).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// The account could not be read or created.
    #[error(
        "service account kube-system/{account}: getting or creating it failed: {answer}; with --use-service-account-credentials the manager's own credentials need get and create on serviceaccounts in kube-system"
    )]
    Account {
        /// The account's name.
        account: String,
        /// What the API server answered.
        answer: String,
    },
    /// The TokenRequest failed.
    #[error(
        "service account kube-system/{account}: TokenRequest failed: {answer}; with --use-service-account-credentials the manager's own credentials need create on serviceaccounts/token in kube-system"
    )]
    Token {
        /// The account's name.
        account: String,
        /// What the API server answered.
        answer: String,
    },
    /// The TokenRequest succeeded without a token.
    #[error("service account kube-system/{account}: the TokenRequest answer has no token")]
    Empty {
        /// The account's name.
        account: String,
    },
}

/// The API server's answer, short: `403 Forbidden: serviceaccounts "x" is forbidden: …`.
fn answer(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} {}: {}", status.code, status.reason, status.message)
        }
        other => other.to_string(),
    }
}

/// The token sources of every account, made on first use, and the client they use.
pub(super) struct ServiceAccounts {
    /// The manager's own client: it gets and creates accounts and asks for their tokens.
    client: kube::Client,
    sources: Mutex<BTreeMap<String, Arc<TokenSource>>>,
}

impl ServiceAccounts {
    pub(super) fn new(client: kube::Client) -> ServiceAccounts {
        ServiceAccounts {
            client,
            sources: Mutex::default(),
        }
    }

    /// A layer that authenticates requests as `account`.
    pub(super) fn layer(&self, account: &str) -> BearerLayer {
        let mut sources = self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let source = sources
            .entry(account.to_string())
            .or_insert_with(|| Arc::new(TokenSource::new(self.client.clone(), account)))
            .clone();
        BearerLayer { source }
    }
}

/// How long a token may be used, from the TokenRequest's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lifetime {
    /// Refresh after this long.
    refresh: Duration,
    /// Do not send it after this long.
    valid: Duration,
}

impl Lifetime {
    /// `granted`: the answer's `spec.expirationSeconds` (the server shortens it to its
    /// maximum); `expires_in`: from now to the answer's `status.expirationTimestamp`, by
    /// this machine's clock (`None` if already past). The shorter wins; like upstream, a
    /// lifetime under 10 minutes is taken for clock skew and counted as 10 minutes, unless
    /// the server granted less than that.
    fn new(granted: i64, expires_in: Option<Duration>) -> Lifetime {
        let granted = Duration::from_secs(granted.max(0).unsigned_abs());
        let seen = expires_in.unwrap_or_default().min(granted);
        let valid = if granted >= MIN_LIFETIME {
            seen.max(MIN_LIFETIME)
        } else if seen.is_zero() {
            granted
        } else {
            seen
        };
        Lifetime {
            refresh: valid * (100 - LEEWAY_PERCENT) / 100,
            valid,
        }
    }
}

/// A token and when to stop using it.
#[derive(Debug, Clone)]
struct Token {
    header: HeaderValue,
    refresh_at: Instant,
    expires_at: Instant,
}

/// The last failed refresh.
#[derive(Debug, Clone)]
struct Failure {
    error: TokenError,
    delay: Duration,
    retry_at: Instant,
}

/// What to do for a request.
#[derive(Debug)]
enum Lookup {
    /// Send this token.
    Use(HeaderValue),
    /// Ask for a new token.
    Refresh,
    /// The last refresh failed and it is not time to try again: send the old token if it
    /// is still valid, else fail with the error.
    Wait(Result<HeaderValue, TokenError>),
}

/// The cached token of one account and the last failure to refresh it.
#[derive(Debug, Default)]
struct Cache {
    token: Option<Token>,
    failure: Option<Failure>,
}

impl Cache {
    fn lookup(&self, now: Instant) -> Lookup {
        if let Some(token) = &self.token
            && now < token.refresh_at
        {
            return Lookup::Use(token.header.clone());
        }
        match &self.failure {
            Some(failure) if now < failure.retry_at => {
                Lookup::Wait(self.valid(now).ok_or_else(|| failure.error.clone()))
            }
            _ => Lookup::Refresh,
        }
    }

    /// The cached token if it has not expired.
    fn valid(&self, now: Instant) -> Option<HeaderValue> {
        self.token
            .as_ref()
            .filter(|token| now < token.expires_at)
            .map(|token| token.header.clone())
    }

    fn store(&mut self, header: HeaderValue, lifetime: Lifetime, issued: Instant) {
        self.token = Some(Token {
            header,
            refresh_at: issued + lifetime.refresh,
            expires_at: issued + lifetime.valid,
        });
        self.failure = None;
    }

    /// Record a failed refresh; the old token if it is still valid.
    fn fail(&mut self, error: TokenError, now: Instant) -> Result<HeaderValue, TokenError> {
        let delay = self
            .failure
            .as_ref()
            .map_or(FIRST_RETRY, |failure| (failure.delay * 2).min(MAX_RETRY));
        self.failure = Some(Failure {
            error: error.clone(),
            delay,
            retry_at: now + delay,
        });
        self.valid(now).ok_or(error)
    }

    /// The API server refused `header` (401): stop using it.
    fn forget(&mut self, header: &HeaderValue) {
        if self.token.as_ref().is_some_and(|t| t.header == *header) {
            self.token = None;
        }
    }
}

/// The token of one account: cached, refreshed by one caller at a time.
pub(super) struct TokenSource {
    client: kube::Client,
    account: String,
    cache: Mutex<Cache>,
    /// Held while asking for a token, so there is one refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
}

impl TokenSource {
    fn new(client: kube::Client, account: &str) -> TokenSource {
        TokenSource {
            client,
            account: account.to_string(),
            cache: Mutex::default(),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The `Authorization` header for the next request.
    async fn bearer(&self) -> Result<HeaderValue, TokenError> {
        if let Lookup::Use(header) = self.cache().lookup(Instant::now()) {
            return Ok(header);
        }
        let _refreshing = self.refreshing.lock().await;
        // Whoever held the lock before may have refreshed it, or failed to.
        match self.cache().lookup(Instant::now()) {
            Lookup::Use(header) => return Ok(header),
            Lookup::Wait(result) => return result,
            Lookup::Refresh => {}
        }
        let started = Instant::now();
        match self.request().await {
            Ok((header, lifetime)) => {
                tracing::debug!(
                    account = %self.account,
                    refresh_in = ?lifetime.refresh,
                    "service account token issued"
                );
                self.cache().store(header.clone(), lifetime, started);
                Ok(header)
            }
            Err(error) => {
                tracing::error!("{error}");
                self.cache().fail(error, Instant::now())
            }
        }
    }

    /// Get or create the account (as upstream, before every TokenRequest), then ask for a
    /// token.
    async fn request(&self) -> Result<(HeaderValue, Lifetime), TokenError> {
        let accounts = Api::<ServiceAccount>::namespaced(self.client.clone(), NAMESPACE);
        let account_error = |error: kube::Error| TokenError::Account {
            account: self.account.clone(),
            answer: answer(&error),
        };
        if accounts
            .get_opt(&self.account)
            .await
            .map_err(account_error)?
            .is_none()
        {
            let new = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(self.account.clone()),
                    namespace: Some(NAMESPACE.to_string()),
                    ..ObjectMeta::default()
                },
                ..ServiceAccount::default()
            };
            match accounts.create(&PostParams::default(), &new).await {
                Ok(_) => {
                    tracing::info!(account = %self.account, namespace = NAMESPACE, "created service account")
                }
                // Someone else made it meanwhile.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(account_error(error)),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(EXPIRATION_SECONDS),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let answered = accounts
            .create_token_request(&self.account, &PostParams::default(), &request)
            .await
            .map_err(|error| TokenError::Token {
                account: self.account.clone(),
                answer: answer(&error),
            })?;
        let empty = || TokenError::Empty {
            account: self.account.clone(),
        };
        let status = answered.status.ok_or_else(empty)?;
        let mut header =
            HeaderValue::from_str(&format!("Bearer {}", status.token)).map_err(|_| empty())?;
        if status.token.is_empty() {
            return Err(empty());
        }
        header.set_sensitive(true);
        let expires_in = std::time::Duration::try_from(
            status
                .expiration_timestamp
                .0
                .duration_since(k8s_openapi::jiff::Timestamp::now()),
        )
        .ok();
        let granted = answered
            .spec
            .expiration_seconds
            .unwrap_or(EXPIRATION_SECONDS);
        Ok((header, Lifetime::new(granted, expires_in)))
    }

    fn forget(&self, header: &HeaderValue) {
        self.cache().forget(header);
    }
}

/// Adds the account's bearer token to every request.
#[derive(Clone)]
pub(super) struct BearerLayer {
    source: Arc<TokenSource>,
}

impl<S> Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            source: self.source.clone(),
            pending: None,
            ready: None,
        }
    }
}

type PendingToken = Pin<Box<dyn Future<Output = Result<HeaderValue, TokenError>> + Send>>;

/// The service [`BearerLayer`] makes. The token is had in `poll_ready`, so the inner
/// service (which cannot be cloned) is called in `call` as soon as it is ready; a failure
/// to get one fails the request, not the client.
pub(super) struct Bearer<S> {
    inner: S,
    source: Arc<TokenSource>,
    pending: Option<PendingToken>,
    ready: Option<Result<HeaderValue, TokenError>>,
}

impl<S, B, R> Service<http::Request<B>> for Bearer<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.ready.is_none() {
            let source = self.source.clone();
            let pending = self.pending.get_or_insert_with(|| {
                Box::pin(async move { source.bearer().await }) as PendingToken
            });
            let token = std::task::ready!(pending.as_mut().poll(cx));
            self.pending = None;
            self.ready = Some(token);
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let header = match self.ready.take() {
            Some(Ok(header)) => header,
            Some(Err(error)) => return Box::pin(async move { Err(error.into()) }),
            None => unreachable!("poll_ready gets the token before call"),
        };
        request.headers_mut().insert(AUTHORIZATION, header.clone());
        let response = self.inner.call(request);
        let source = self.source.clone();
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            if response.status() == StatusCode::UNAUTHORIZED {
                source.forget(&header);
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3600;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn an_hour_token_is_refreshed_after_48_minutes() {
        let lifetime = Lifetime::new(HOUR, Some(secs(3600)));
        assert_eq!(lifetime.refresh, secs(48 * 60));
        assert_eq!(lifetime.valid, secs(3600));
    }

    #[test]
    fn a_short_expiration_timestamp_is_clock_skew_pinned_to_ten_minutes() {
        // The server's clock is 55 minutes ahead: its timestamp leaves 5 minutes.
        let lifetime = Lifetime::new(HOUR, Some(secs(300)));
        assert_eq!(lifetime.valid, secs(600));
        assert_eq!(lifetime.refresh, secs(480));
        // Already past by this clock.
        assert_eq!(Lifetime::new(HOUR, None).valid, secs(600));
    }

    #[test]
    fn a_timestamp_beyond_the_grant_is_not_trusted() {
        // The server's clock is behind: the grant, not the timestamp, bounds the token.
        let lifetime = Lifetime::new(HOUR, Some(secs(7200)));
        assert_eq!(lifetime.valid, secs(3600));
    }

    #[test]
    fn a_server_that_grants_less_than_ten_minutes_is_believed() {
        // A --service-account-max-token-expiration shorter than upstream's floor (the
        // emulator's test knob): refreshing after the floor would use expired tokens.
        let lifetime = Lifetime::new(2, Some(Duration::from_millis(1500)));
        assert_eq!(lifetime.valid, Duration::from_millis(1500));
        assert_eq!(lifetime.refresh, Duration::from_millis(1200));
        // Its timestamp already past by this clock: the grant, not every request a refresh.
        assert_eq!(Lifetime::new(2, None).valid, secs(2));
    }

    fn header(text: &str) -> HeaderValue {
        HeaderValue::from_str(text).unwrap()
    }

    fn error() -> TokenError {
        TokenError::Token {
            account: "route-controller".into(),
            answer: "403 Forbidden: no".into(),
        }
    }

    #[test]
    fn a_token_is_used_until_its_refresh_time_then_refreshed() {
        let start = Instant::now();
        let mut cache = Cache::default();
        assert!(matches!(cache.lookup(start), Lookup::Refresh));
        cache.store(
            header("Bearer a"),
            Lifetime::new(HOUR, Some(secs(3600))),
            start,
        );
        assert!(matches!(cache.lookup(start + secs(47 * 60)), Lookup::Use(h) if h == "Bearer a"));
        assert!(matches!(
            cache.lookup(start + secs(48 * 60)),
            Lookup::Refresh
        ));
    }

    #[test]
    fn a_failed_refresh_keeps_the_valid_token_and_backs_off() {
        let start = Instant::now();
        let mut cache = Cache::default();
        cache.store(
            header("Bearer a"),
            Lifetime::new(HOUR, Some(secs(3600))),
            start,
        );
        let due = start + secs(50 * 60);
        assert_eq!(cache.fail(error(), due).unwrap(), "Bearer a");
        assert!(
            matches!(cache.lookup(due + Duration::from_millis(100)), Lookup::Wait(Ok(h)) if h == "Bearer a")
        );
        assert!(matches!(cache.lookup(due + FIRST_RETRY), Lookup::Refresh));
        // Failures in a row wait longer each time, up to the cap.
        let mut now = due;
        let mut delays = Vec::new();
        for _ in 0..8 {
            now += secs(1);
            let _ = cache.fail(error(), now);
            delays.push(cache.failure.as_ref().unwrap().delay);
        }
        assert_eq!(delays[0], secs(1));
        assert_eq!(delays[1], secs(2));
        assert_eq!(*delays.last().unwrap(), MAX_RETRY);
        // Once expired, the error is all there is.
        let expired = start + secs(3600);
        let result = cache.fail(error(), expired);
        assert!(matches!(result, Err(TokenError::Token { .. })));
        assert!(matches!(cache.lookup(expired), Lookup::Wait(Err(_))));
        // A success clears the failure.
        cache.store(
            header("Bearer b"),
            Lifetime::new(HOUR, Some(secs(3600))),
            expired,
        );
        assert!(matches!(cache.lookup(expired), Lookup::Use(h) if h == "Bearer b"));
    }

    #[test]
    fn a_refused_token_is_forgotten_but_not_its_successor() {
        let start = Instant::now();
        let mut cache = Cache::default();
        cache.store(
            header("Bearer b"),
            Lifetime::new(HOUR, Some(secs(3600))),
            start,
        );
        cache.forget(&header("Bearer a"));
        assert!(matches!(cache.lookup(start), Lookup::Use(_)));
        cache.forget(&header("Bearer b"));
        assert!(matches!(cache.lookup(start), Lookup::Refresh));
    }

    #[test]
    fn the_error_names_the_account_the_answer_and_the_fix() {
        let message = error().to_string();
        assert_eq!(
            message,
            "service account kube-system/route-controller: TokenRequest failed: 403 Forbidden: no; with --use-service-account-credentials the manager's own credentials need create on serviceaccounts/token in kube-system"
        );
    }

    /// An API server that answers every account GET and TokenRequest, slowly, and
    /// counts the TokenRequests.
    #[derive(Clone, Default)]
    struct SlowApi {
        token_requests: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Service<http::Request<kube::client::Body>> for SlowApi {
        type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
            let token = request.uri().path().ends_with("/token");
            let n = if token {
                self.token_requests
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            } else {
                0
            };
            Box::pin(async move {
                let body = if token {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    serde_json::json!({
                        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                        "spec": {"audiences": [], "expirationSeconds": 3600},
                        "status": {"token": format!("t{n}"), "expirationTimestamp": "2999-01-01T00:00:00Z"}
                    })
                } else {
                    serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "service-controller"}})
                };
                Ok(http::Response::new(http_body_util::Full::new(
                    body.to_string().into(),
                )))
            })
        }
    }

    #[tokio::test]
    async fn concurrent_requests_wait_for_one_token_request() {
        let api = SlowApi::default();
        let source = TokenSource::new(
            kube::Client::new(api.clone(), "default"),
            "service-controller",
        );
        let tokens = futures::future::join_all((0..20).map(|_| source.bearer())).await;
        assert!(
            tokens.iter().all(|t| t.as_ref().unwrap() == "Bearer t0"),
            "{tokens:?}"
        );
        assert_eq!(
            api.token_requests.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }
}

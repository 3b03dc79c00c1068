//! The Kubernetes API clients of the manager, as upstream's controller-manager arranges
//! them: one per controller, one for the shared informers, one for leader election and the
//! manager's own; and ours: one for the event recorders, so no event spends a state write's
//! budget, and one for the secure port's token and access reviews. All are
//! built from the same `--kubeconfig` (or the in-cluster service account); each has its own
//! `--kube-api-qps`/`--kube-api-burst` token bucket, as each client-go clientset has its own
//! rate limiter, so a busy controller spends only its own budget; and each names itself in
//! its user agent,
//! `wasm-ccm/<version> (<os>/<arch>) <client name>`, so the API server's audit log tells
//! them apart. Requests of all of them are counted and timed with client-go's metrics and
//! labels (`rest_client_requests_total`, `rest_client_request_duration_seconds`), the count
//! also by client (`client`, ours), so that a dashboard or a benchmark on a real cluster
//! can tell event writes and the Lease's from state writes; the bytes of their request and
//! response bodies are counted by client and method (`wasm_ccm_rest_client_*_bytes_total`,
//! a response body as it is read: [`Counted`]).
//!
//! The limiter sits in the client's `poll_ready`, so a request waits for a token of its
//! client before it is sent, exactly once per request.
//!
//! With `--use-service-account-credentials` the controllers' clients drop the configured
//! credentials and authenticate as each controller's ServiceAccount instead (see
//! [`service_account`]); the shared informers, leader election, the event recorders and the
//! manager's own client (the accounts' TokenRequests, the `CloudProvider`'s status) keep the
//! configured credentials, as upstream arranges them.

pub mod service_account;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::HeaderValue;
use http::header::USER_AGENT;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

use wasm_ccm_host::rate::{Budgets, RateBudget};

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The `--kubeconfig` file could not be read or used.
    #[error("--kubeconfig {path}: {error}")]
    Kubeconfig {
        /// The file given to `--kubeconfig`.
        path: PathBuf,
        /// Why kube could not read or use it; its message includes its causes, so it is
        /// not a `source` (the causes would be printed twice).
        error: kube::config::KubeconfigError,
    },
    /// No `--kubeconfig`, and neither `KUBECONFIG`, `~/.kube/config` nor the in-cluster
    /// service account worked.
    #[error(
        "no --kubeconfig given and no usable default (KUBECONFIG, ~/.kube/config or the in-cluster service account): {0}"
    )]
    Infer(kube::config::InferConfigError),
    /// The configuration was read but no client could be built from it (e.g. bad TLS data).
    #[error("building the Kubernetes client from {origin}: {error}")]
    Client {
        /// Where the configuration came from: the `--kubeconfig` path or the inferred one.
        origin: String,
        /// What kube said (not a `source`, as above).
        error: kube::Error,
    },
    /// A client name that cannot be sent in a header (a bug: the names are constants).
    #[error("user agent {agent:?} is not a valid header value")]
    UserAgent {
        /// The user agent made from the client's name.
        agent: String,
    },
}

/// The client of the shared node and service informers (upstream's name).
pub const SHARED_INFORMERS: &str = "shared-informers";
/// The client of leader election (upstream's name).
pub const LEADER_ELECTION: &str = "leader-election";
/// The client of the secure port's delegated authentication and authorisation: its
/// `TokenReview`s and `SubjectAccessReview`s spend their own token bucket, so scrapes never
/// slow the controllers.
pub const DELEGATED_AUTH: &str = "delegated-auth";
/// The manager's own client, named after the component as upstream's: it follows the
/// `CloudProvider` and, with `--use-service-account-credentials`, gets or creates the
/// controllers' service accounts and asks for their tokens.
pub const MANAGER: &str = "cloud-controller-manager";
/// The client of the event recorders (see [`crate::controllers::EventBroadcaster`]): events
/// spend its token bucket only, so a flood of them never delays a state write, a
/// `CloudProvider` status write or a service-account token.
pub const EVENT_RECORDER: &str = "event-recorder";

/// How the manager talks to the API server.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `--kubeconfig`; `None` uses the in-cluster service account (or `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// `--kube-api-qps`: of each client.
    pub qps: f64,
    /// `--kube-api-burst`: of each client.
    pub burst: u32,
    /// `--use-service-account-credentials`: each controller calls as its own ServiceAccount
    /// in `kube-system`, with tokens from the TokenRequest API.
    pub use_service_account_credentials: bool,
}

/// `rest_client_requests_total` labels: client-go's, and the client's name.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: String,
    client: Arc<str>,
}

/// `rest_client_request_duration_seconds` labels, as client-go.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    verb: String,
    host: String,
}

/// client-go's request latency buckets, in seconds.
fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
    ])
}

/// `wasm_ccm_rest_client_{request,response}_bytes_total` labels: the client and method.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    client: Arc<str>,
    method: String,
}

/// Requests the manager sent to the API server.
#[derive(Debug, Clone)]
pub struct ClientMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    request_bytes: Family<BytesLabels, Counter>,
    response_bytes: Family<BytesLabels, Counter>,
    sent: Counter,
}

impl Default for ClientMetrics {
    fn default() -> Self {
        ClientMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            request_bytes: Family::default(),
            response_bytes: Family::default(),
            sent: Counter::default(),
        }
    }
}

impl ClientMetrics {
    /// Add `rest_client_requests_total` and `rest_client_request_duration_seconds` to
    /// `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests to the Kubernetes API, partitioned by status code, method, and host, and by the manager's client that sent them",
            self.requests.clone(),
        );
        registry.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds until the response headers, after the rate limiter. Broken down by verb and host",
            self.latency.clone(),
        );
        registry.register(
            "wasm_ccm_rest_client_request_bytes",
            "Bytes of request bodies sent to the Kubernetes API, by the manager's client and method",
            self.request_bytes.clone(),
        );
        registry.register(
            "wasm_ccm_rest_client_response_bytes",
            "Bytes of response bodies read from the Kubernetes API (watch streams as they come), by the manager's client and method",
            self.response_bytes.clone(),
        );
    }

    /// Every request sent so far (for the scale benchmark and tests).
    pub fn total(&self) -> u64 {
        self.sent.get()
    }
}

/// Makes the manager's clients: the configuration is read once, each client gets its own
/// token bucket and user agent.
#[derive(Clone)]
pub struct Clients {
    base: Base,
    manager: kube::Client,
    /// With `--use-service-account-credentials`.
    accounts: Option<Arc<service_account::ServiceAccounts>>,
}

/// What every client is made from.
#[derive(Clone)]
struct Base {
    config: kube::Config,
    origin: String,
    budget: RateBudget,
    metrics: ClientMetrics,
    host: Arc<str>,
}

impl Clients {
    /// Read the configuration `settings` name and check a client can be built from it.
    pub async fn connect(
        settings: &ClusterSettings,
        metrics: &ClientMetrics,
    ) -> Result<Clients, ClusterError> {
        let (config, origin) = match &settings.kubeconfig {
            Some(path) => (load_kubeconfig(path).await?, path.display().to_string()),
            None => (
                kube::Config::infer().await.map_err(ClusterError::Infer)?,
                "the inferred configuration".to_string(),
            ),
        };
        let host = config
            .cluster_url
            .authority()
            .map(ToString::to_string)
            .unwrap_or_default();
        let base = Base {
            config,
            origin,
            budget: RateBudget {
                per_second: settings.qps,
                burst: settings.burst,
            },
            metrics: metrics.clone(),
            host: host.into(),
        };
        // Bad TLS data shows now, at start, not when a controller starts.
        let manager = base.client(MANAGER, None)?;
        let accounts = settings
            .use_service_account_credentials
            .then(|| Arc::new(service_account::ServiceAccounts::new(manager.clone())));
        Ok(Clients {
            base,
            manager,
            accounts,
        })
    }

    /// A new client named `name` (e.g. `shared-informers`), with its own token bucket and
    /// the configured credentials.
    pub fn client(&self, name: &str) -> Result<kube::Client, ClusterError> {
        self.base.client(name, None)
    }

    /// The manager's own client ([`MANAGER`]), one for the whole process.
    pub fn manager(&self) -> kube::Client {
        self.manager.clone()
    }

    /// A new client for a controller named `name` (e.g. `service-controller`), with its own
    /// token bucket; with `--use-service-account-credentials` it authenticates as
    /// `account` in [`service_account::NAMESPACE`], else with the configured credentials.
    pub fn controller(&self, name: &str, account: &str) -> Result<kube::Client, ClusterError> {
        let bearer = self
            .accounts
            .as_ref()
            .map(|accounts| accounts.layer(account));
        self.base.client(name, bearer)
    }
}

impl Base {
    /// A client named `name`; with `bearer`, anonymous but for the bearer's tokens (as
    /// client-go's `AnonymousClientConfig`: no token, certificate, basic auth, exec plugin
    /// or impersonation of the configuration, its server and CA kept).
    fn client(
        &self,
        name: &str,
        bearer: Option<service_account::BearerLayer>,
    ) -> Result<kube::Client, ClusterError> {
        let mut config = self.config.clone();
        if bearer.is_some() {
            config.auth_info = kube::config::AuthInfo::default();
        }
        let agent = user_agent(name);
        let value = HeaderValue::from_str(&agent).map_err(|_| ClusterError::UserAgent {
            agent: agent.clone(),
        })?;
        config.headers.retain(|(header, _)| header != USER_AGENT);
        config.headers.push((USER_AGENT, value));
        let builder = ClientBuilder::try_from(config).map_err(|error| ClusterError::Client {
            origin: self.origin.clone(),
            error,
        })?;
        let throttle = ThrottleLayer {
            budgets: Arc::new(Budgets::new(self.budget)),
            metrics: self.metrics.clone(),
            host: self.host.clone(),
            client: name.into(),
        };
        Ok(match bearer {
            None => builder.with_layer(&throttle).build(),
            Some(bearer) => builder.with_layer(&bearer).with_layer(&throttle).build(),
        })
    }
}

/// `wasm-ccm/<version> (<os>/<arch>) <name>`, as client-go's default user agent with the
/// client's name after it; os and arch in Go's words (`linux/amd64`).
pub fn user_agent(name: &str) -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!(
        "wasm-ccm/{} ({}/{arch}) {name}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
    )
}

async fn load_kubeconfig(path: &Path) -> Result<kube::Config, ClusterError> {
    let error = |error| ClusterError::Kubeconfig {
        path: path.to_path_buf(),
        error,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(error)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(error)
}

/// The one token bucket of a client's `Budgets`, as client-go's `flowcontrol` limiter.
const BUCKET: &str = "kube-apiserver";

#[derive(Clone)]
struct ThrottleLayer {
    budgets: Arc<Budgets>,
    metrics: ClientMetrics,
    host: Arc<str>,
    /// The client's name, as its user agent ends.
    client: Arc<str>,
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            budgets: self.budgets.clone(),
            metrics: self.metrics.clone(),
            host: self.host.clone(),
            client: self.client.clone(),
            wait: None,
            permitted: false,
        }
    }
}

struct Throttle<S> {
    inner: S,
    budgets: Arc<Budgets>,
    metrics: ClientMetrics,
    host: Arc<str>,
    client: Arc<str>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A token was taken for the next `call`.
    permitted: bool,
}

impl<S, B, R> Service<http::Request<B>> for Throttle<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    B: http_body::Body,
{
    type Response = http::Response<Counted<R>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.permitted {
            if let Some(wait) = self.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            match self.budgets.take(BUCKET) {
                Ok(()) => self.permitted = true,
                Err(refusal) => {
                    self.wait = Some(Box::pin(tokio::time::sleep(
                        refusal.retry_after().max(Duration::from_micros(100)),
                    )));
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.permitted = false;
        let method = request.method().to_string();
        let metrics = self.metrics.clone();
        let host = self.host.to_string();
        let client = self.client.clone();
        let bytes = BytesLabels {
            client: client.clone(),
            method: method.clone(),
        };
        // kube-rs sends whole bodies, whose size is known before they go.
        let size = http_body::Body::size_hint(request.body());
        metrics
            .request_bytes
            .get_or_create(&bytes)
            .inc_by(size.exact().unwrap_or(size.lower()));
        let received = metrics.response_bytes.get_or_create(&bytes).clone();
        let response = self.inner.call(request);
        let started = std::time::Instant::now();
        Box::pin(async move {
            let result = response.await;
            metrics
                .latency
                .get_or_create(&LatencyLabels {
                    verb: method.clone(),
                    host: host.clone(),
                })
                .observe(started.elapsed().as_secs_f64());
            let code = match &result {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => "<error>".to_string(),
            };
            metrics.sent.inc();
            metrics
                .requests
                .get_or_create(&RequestLabels {
                    code,
                    method,
                    host,
                    client,
                })
                .inc();
            result.map(|response| {
                response.map(|body| Counted {
                    inner: body,
                    received,
                })
            })
        })
    }
}

/// A response body that counts its bytes as they are read.
pub struct Counted<B> {
    inner: B,
    received: Counter,
}

impl<B: http_body::Body + Unpin> http_body::Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &frame
            && let Some(data) = frame.data_ref()
        {
            self.received.inc_by(bytes::Buf::remaining(data) as u64);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_version_platform_and_client() {
        let agent = user_agent("service-controller");
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            agent.starts_with(&format!("wasm-ccm/{version} (")),
            "{agent}"
        );
        assert!(agent.ends_with(") service-controller"), "{agent}");
        if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            assert_eq!(
                agent,
                format!("wasm-ccm/{version} (linux/amd64) service-controller")
            );
        }
    }
}

//! The egress gate: the only way out of the sandbox.
//!
//! Every `wasi:http` request a provider makes passes through [`GateHooks`], in this order:
//! 1. **grant**: scheme, host and port must match an allow-list entry (deny by default);
//! 2. **address**: when a new connection is opened (step 5), the name is resolved here and
//!    internal addresses (private, loopback, link-local, cloud metadata and platform, and
//!    IPv6 addresses carrying one of those: [`address`]) are refused unless the entry names
//!    that very address; answers are cached for their TTL, bounded, per gate
//!    ([`dns`]), and the check runs on every new connection whether the answer was cached
//!    or not;
//! 3. **budget**: a per-destination token bucket, at most
//!    [`EgressConfig::max_destinations`] of them; an exhausted budget answers a synthetic
//!    `429` with `Retry-After`, which the guest SDK turns into `retry-after`;
//! 4. **credentials**: headers bound to the destination are added from the host's secrets,
//!    or the request is signed for AWS ([`sigv4`]: its body buffered, bounded, and signed
//!    last, so what is signed is what is sent; its API action read and checked against the
//!    actions never signed, the rule's allow-list and, for a shadow, the reads; its answer
//!    read whole and withheld if it carries AWS keys); providers can neither read nor set them
//!    (`authorization`, `proxy-authorization`, `cookie`, every injected header and, with a
//!    signing rule, the SigV4 headers are forbidden to guests);
//! 5. **transport**: a pooled keep-alive connection for this provider version, destination
//!    and grant, or a new one, which repeats the address check at connect time
//!    ([`Connections`]); connect and first-byte timeouts, a between-bytes timeout and a
//!    response size cap;
//! 6. **audit**: one record per request, allowed or not, saying whether the connection was
//!    reused; its log event within the version's audit log budget; counted in metrics under
//!    the grant that matched, never the destination a provider named.

mod address;
mod audit;
mod credentials;
mod dns;
mod policy;
mod pool;
mod sigv4;
mod transport;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderName;
use http_body_util::BodyExt;
use tokio_rustls::rustls::pki_types::CertificateDer;
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, Error, ForbiddenHeaderFilter, RequestOptions, WasiBody,
    WasiHttpHooks,
};

pub use address::{Carrier, Internal, carried_v4, metadata_name, platform_service};
pub use audit::{Audit, AuditLogLimits, AuditLogScope, AuditRecord, AwsCall};
pub use credentials::{
    CredentialError, CredentialRule, RuleProblem, SecretError, SecretSource, SharedSecret,
    Unavailable,
};
pub use dns::{DNS_CACHE_ANSWERS, DNS_MAX_POSITIVE_TTL};
pub use policy::{HostPattern, MethodPolicy, MethodRefused, PatternError, PatternProblem};
pub use pool::{Connections, PoolLimits};
pub use sigv4::{
    AwsKeys, CREDENTIAL_ACTIONS, ExchangeProblem, KeyError, MAX_SIGNED_BODY, MAX_STS_ANSWER,
    REST_SERVICES, RuleError, SigV4, SigningError, StsEndpointError, WebIdentityConfig,
    WebIdentityError, check_sts_endpoint, is_action_pattern, sts_endpoint_allowed,
};
pub use transport::Limits;

use crate::metrics::Metrics;
pub use crate::rate::RateBudget;
use crate::rate::{Budgets, Refusal};
use credentials::Applied;
use policy::Destination;
use sigv4::StsClient;
use transport::ConnectRefusal;

/// How long a credential value read from its source is reused before it is read again
/// (a rotated secret file takes effect within this time).
const CREDENTIAL_REFRESH: Duration = Duration::from_secs(1);

/// Refusals one call keeps (and warns about); later ones are only audited and counted.
const MAX_DENIALS_KEPT: usize = 16;
/// Hints one call keeps (one per host at most).
const MAX_HINTS_KEPT: usize = 4;
/// Longest request text a kept refusal holds.
const MAX_DENIAL_TEXT: usize = 512;

/// Default of [`EgressConfig::max_destinations`].
pub const DEFAULT_MAX_DESTINATIONS: usize = 1024;

/// The longest host name the gate sends to: DNS names are at most 253 bytes.
const MAX_HOST_NAME: usize = 253;

/// Headers a provider may never set, whatever the credential rules.
const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "proxy-authorization", "cookie"];

/// The methods cloud APIs are spoken with; any other (`TRACE`, `CONNECT`, an extension
/// method) is refused for every grant.
const CLOUD_METHODS: [http::Method; 7] = [
    http::Method::GET,
    http::Method::HEAD,
    http::Method::POST,
    http::Method::PUT,
    http::Method::PATCH,
    http::Method::DELETE,
    http::Method::OPTIONS,
];

/// Headers by which servers take a request as another method than its own: removed where
/// methods are limited.
const METHOD_OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Longest method a record keeps (an extension method may be any length; a refused one is
/// recorded).
const MAX_METHOD: usize = 16;

/// What providers may reach and with which credentials; validated once at start-up.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    /// The hosts providers may reach (`--allow`); every other destination is denied.
    pub allow: Vec<HostPattern>,
    /// Where `allow` and `credentials` were set, so that a refusal names it.
    pub source: GrantSource,
    /// Headers the gate adds to requests for matching hosts (`--credential`).
    pub credentials: Vec<CredentialRule>,
    /// The methods requests may use: any, or only safe ones for a shadow version.
    pub methods: MethodPolicy,
    /// Requests allowed to each destination host (`--egress-rate`, `--egress-burst`).
    pub budget: RateBudget,
    /// Most destinations holding a rate budget at once (`--egress-max-destinations`,
    /// default 1024): a wildcard grant lets a provider name destinations without end. A
    /// budget that has refilled is forgotten to make room (which changes nothing); while
    /// every one is still refilling, a request to a new destination is answered `429`
    /// until the first is full again.
    pub max_destinations: usize,
    /// Timeouts and the response size cap of every request.
    pub limits: Limits,
    /// Bounds of each provider version's connection pool.
    pub pool: PoolLimits,
    /// How many audit log events each provider version may write.
    pub audit_log: AuditLogLimits,
    /// Certificates trusted as TLS roots besides the Mozilla set (a private cloud's CA; a
    /// test server's self-signed certificate).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// The DNS server asked instead of those in `/etc/resolv.conf` (a test's own server);
    /// the hosts file still answers first. Library only: the manager has no flag for it.
    pub name_server: Option<SocketAddr>,
    /// Whether `allow` may name a cloud metadata or platform service
    /// (`--egress-allow-metadata-grants`, default false): see [`EgressConfig::check_grants`].
    pub allow_metadata_grants: bool,
    /// STS endpoints besides AWS's own a web identity may send the manager's token to
    /// (`--sts-endpoint-allow`, default none): see [`EgressConfig::check_sts_endpoints`].
    pub sts_endpoints: Vec<HostPattern>,
}

/// Where a gate's grants and credential rules were set: what its refusals and hints name,
/// so a user is pointed at what they typed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GrantSource {
    /// The manager's or the CLI's flags (`--allow`, `--credential`).
    #[default]
    Flags,
    /// A `CloudProvider`'s spec (`spec.egress.allowedHosts`, `spec.credentials`).
    Resource,
}

impl GrantSource {
    /// The flag or field that lists the granted hosts.
    pub fn hosts(self) -> &'static str {
        match self {
            GrantSource::Flags => "--allow",
            GrantSource::Resource => "spec.egress.allowedHosts",
        }
    }

    /// The flag or field that lists the credential rules.
    pub fn credentials(self) -> &'static str {
        match self {
            GrantSource::Flags => "--credential",
            GrantSource::Resource => "spec.credentials",
        }
    }
}

/// A web identity credential names an STS endpoint the manager does not send its token to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct StsEndpointRefused {
    /// Where the rule is in [`EgressConfig::credentials`].
    pub index: usize,
    /// Why, naming the endpoint and what is allowed.
    pub problem: String,
}

/// A grant names a cloud metadata or platform service, which the operator did not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{grant} names {service}: a provider granted it could read the node's cloud credentials; the manager allows such a grant only with --egress-allow-metadata-grants"
)]
pub struct MetadataGrant {
    /// Where the grant is in [`EgressConfig::allow`].
    pub index: usize,
    /// The grant, e.g. `http://169.254.169.254`.
    pub grant: String,
    /// What it names, e.g. `169.254.169.254, a cloud metadata address (…)`.
    pub service: String,
}

impl EgressConfig {
    /// Refuse a grant that names a cloud metadata or platform service, by address
    /// (`http://169.254.169.254`, `http://[64:ff9b::a9fe:a9fe]`, `http://168.63.129.16`) or by
    /// a name that only means one (`http://metadata.google.internal`), unless
    /// `allow_metadata_grants`. Such an address is never reached through any other grant,
    /// and a grant naming it hands the provider the node's credentials.
    pub fn check_grants(&self) -> Result<(), MetadataGrant> {
        if self.allow_metadata_grants {
            return Ok(());
        }
        self.allow
            .iter()
            .enumerate()
            .find_map(|(index, grant)| {
                grant.platform_service().map(|service| MetadataGrant {
                    index,
                    grant: grant.to_string(),
                    service,
                })
            })
            .map_or(Ok(()), Err)
    }

    /// Refuse a web identity credential whose STS endpoint is not an AWS STS endpoint over
    /// HTTPS nor one of `sts_endpoints`: the manager would post its service account token
    /// there. The gate also never exchanges with such an endpoint, checked or not.
    pub fn check_sts_endpoints(&self) -> Result<(), StsEndpointRefused> {
        self.credentials
            .iter()
            .enumerate()
            .find_map(|(index, rule)| {
                let config = rule.web_identity()?;
                let problem = config.check_endpoint(&self.sts_endpoints).err()?;
                Some(StsEndpointRefused {
                    index,
                    problem: problem.to_string(),
                })
            })
            .map_or(Ok(()), Err)
    }
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            allow: Vec::new(),
            source: GrantSource::Flags,
            credentials: Vec::new(),
            methods: MethodPolicy::Any,
            budget: RateBudget::default(),
            max_destinations: DEFAULT_MAX_DESTINATIONS,
            limits: Limits {
                connect_timeout: Duration::from_secs(5),
                first_byte_timeout: Duration::from_secs(30),
                between_bytes_timeout: Duration::from_secs(30),
                max_response_bytes: 8 * 1024 * 1024,
            },
            pool: PoolLimits::default(),
            audit_log: AuditLogLimits::default(),
            extra_roots: Vec::new(),
            name_server: None,
            allow_metadata_grants: false,
            sts_endpoints: Vec::new(),
        }
    }
}

/// The shared gate: policy, budgets, TLS, DNS cache and audit. Each provider version (and
/// each change of egress settings) gets a new gate, so a swap starts with an empty DNS cache.
#[derive(Debug)]
pub struct EgressGate {
    config: EgressConfig,
    forbidden: Arc<Vec<HeaderName>>,
    budgets: Budgets,
    tls: Arc<tokio_rustls::rustls::ClientConfig>,
    /// Resolves the names of new connections; its answer cache lives as long as the gate.
    resolver: Arc<dns::Resolver>,
    audit: Audit,
    /// The pool of requests sent from the host side ([`EgressGate::send`]).
    host_connections: Arc<Connections>,
    /// The connections of web identity exchanges, one grant per allowed STS endpoint.
    sts_connections: Connections,
    /// For each credential rule (by index), its STS endpoint's grant in `sts_connections`;
    /// `None` for a rule without web identity, or whose endpoint is not allowed.
    sts_grants: Vec<Option<usize>>,
    /// The last value read for each credential rule (by index), and when.
    credential_values: Mutex<Vec<Option<(Instant, http::HeaderValue)>>>,
}

/// Who is calling: the provider's name and version, for audit and error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Provider name: `capabilities.name`; until `init` answers, the name it must answer
    /// (`--cloud-provider`, `spec.name`), or the file stem of its origin when none was given.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
}

/// A request the gate refused during one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `METHOD scheme://host:port/path`.
    pub request: String,
    /// Why it was refused, e.g. `no --allow entry matches (granted: …)`.
    pub reason: String,
}

impl EgressGate {
    /// The gate for `config`, with fresh rate budgets, counting into `metrics`.
    pub fn new(config: EgressConfig, metrics: Arc<Metrics>) -> Arc<Self> {
        let mut forbidden: Vec<HeaderName> = DEFAULT_FORBIDDEN_HEADERS.to_vec();
        forbidden.extend(CREDENTIAL_HEADERS.map(HeaderName::from_static));
        forbidden.extend(config.credentials.iter().flat_map(CredentialRule::headers));
        forbidden.dedup();
        let tls = transport::tls_config(&config.extra_roots);
        let resolver = Arc::new(dns::Resolver::new(config.name_server));
        let mut sts_endpoints = Vec::new();
        let sts_grants = config
            .credentials
            .iter()
            .map(|rule| {
                let identity = rule.web_identity()?;
                identity.check_endpoint(&config.sts_endpoints).ok()?;
                sts_endpoints.push(identity.endpoint_pattern().ok()?);
                Some(sts_endpoints.len() - 1)
            })
            .collect();
        Arc::new(EgressGate {
            sts_connections: Connections::new(
                &sts_endpoints,
                &tls,
                &resolver,
                config.limits,
                config.pool,
            ),
            sts_grants,
            budgets: Budgets::bounded(config.budget, config.max_destinations),
            forbidden: Arc::new(forbidden),
            host_connections: Arc::new(Connections::new(
                &config.allow,
                &tls,
                &resolver,
                config.limits,
                config.pool,
            )),
            tls,
            resolver,
            audit: Audit::new(metrics, config.audit_log),
            credential_values: Mutex::new(vec![None; config.credentials.len()]),
            config,
        })
    }

    /// The audit trail.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// An empty connection pool for one provider version; each version gets its own, so a
    /// new version never inherits the old one's connections.
    pub fn connections(&self) -> Arc<Connections> {
        Arc::new(Connections::new(
            &self.config.allow,
            &self.tls,
            &self.resolver,
            self.config.limits,
            self.config.pool,
        ))
    }

    /// Send `request` through the gate from the host side, exactly as a provider's request
    /// would go (grant, address, budget, credentials, limits, audit), and read the whole
    /// response. For probes and benchmarks of the gate without a guest; host-side requests
    /// share one pool of their own.
    pub async fn send(
        self: &Arc<Self>,
        caller: Arc<Caller>,
        request: http::Request<bytes::Bytes>,
    ) -> Result<(http::StatusCode, bytes::Bytes), SendError> {
        let hooks = self.hooks(caller, self.host_connections.clone());
        send_through(hooks, request).await
    }

    /// The `wasi:http` hooks for one call by `caller`, over its version's `connections`.
    pub fn hooks(
        self: &Arc<Self>,
        caller: Arc<Caller>,
        connections: Arc<Connections>,
    ) -> GateHooks {
        GateHooks {
            gate: self.clone(),
            caller,
            connections,
            denials: Arc::default(),
            hints: Arc::default(),
        }
    }

    /// The header value of credential rule `index`, read from its source at most once per
    /// [`CREDENTIAL_REFRESH`] (an in-memory value, on every request); `None` for a signing
    /// rule.
    fn credential_value(&self, index: usize) -> Result<Option<http::HeaderValue>, SecretError> {
        let rule = &self.config.credentials[index];
        if rule.is_in_memory() {
            return rule.header_value();
        }
        let mut values = self
            .credential_values
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(Some((read_at, value))) = values.get(index)
            && read_at.elapsed() < CREDENTIAL_REFRESH
        {
            return Ok(Some(value.clone()));
        }
        let Some(value) = rule.header_value()? else {
            return Ok(None);
        };
        values[index] = Some((Instant::now(), value.clone()));
        Ok(Some(value))
    }

    /// How a web identity exchange of credential rule `rule` reaches its STS endpoint;
    /// `None` if the rule has none or the endpoint is not allowed.
    fn sts_client(&self, rule: usize) -> Option<StsClient<'_>> {
        let grant = (*self.sts_grants.get(rule)?)?;
        Some(StsClient {
            client: self.sts_connections.client(grant)?,
            limits: self.config.limits,
        })
    }

    fn granted_list(&self) -> String {
        if self.config.allow.is_empty() {
            return "none".into();
        }
        let granted: Vec<String> = self.config.allow.iter().map(ToString::to_string).collect();
        granted.join(", ")
    }
}

/// Why a request sent from the host side ([`EgressGate::send`]) got no whole answer.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The gate refused or failed the request: its error code, and the reasons of the
    /// refusals during the call.
    #[error("{error}: {}", .reasons.join("; "))]
    Refused {
        /// The `wasi:http` error code a guest would get.
        error: Error,
        /// Each refusal's reason.
        reasons: Vec<String>,
    },
    /// Reading the answer's body failed.
    #[error("{0}")]
    Body(Error),
}

/// Send `request` through `hooks` as a guest's request would go, and read the whole response.
async fn send_through(
    mut hooks: GateHooks,
    request: http::Request<bytes::Bytes>,
) -> Result<(http::StatusCode, bytes::Bytes), SendError> {
    let request = request.map(transport::full_body);
    let sent = hooks.send_request(request, None, Box::new(async { Ok(()) }));
    let (response, connection) = match Box::into_pin(sent).await {
        Ok(exchanged) => exchanged,
        Err(error) => {
            let reasons = hooks.denials().into_iter().map(|d| d.reason).collect();
            return Err(SendError::Refused { error, reasons });
        }
    };
    let connection = tokio::spawn(Box::into_pin(connection));
    let status = response.status();
    let body = response.into_body().collect().await;
    connection.abort();
    Ok((status, body.map_err(SendError::Body)?.to_bytes()))
}

/// The gate as seen by one call's `wasi:http` implementation; also collects the call's
/// denials and hints.
pub struct GateHooks {
    gate: Arc<EgressGate>,
    caller: Arc<Caller>,
    connections: Arc<Connections>,
    denials: Arc<Mutex<Vec<Denial>>>,
    hints: Arc<Mutex<Vec<String>>>,
}

impl GateHooks {
    /// The requests refused so far during this call: the first 16, however many more the
    /// provider tried.
    pub fn denials(&self) -> Vec<Denial> {
        self.denials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the gate noticed during this call that may explain a failure, e.g. a host that
    /// answered 401 to a request no credential rule covered: one per host, the first 4.
    pub fn hints(&self) -> Vec<String> {
        self.hints.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

type SendResult = Result<(http::Response<WasiBody>, transport::ConnectionTask), Error>;

impl WasiHttpHooks for GateHooks {
    fn is_forbidden_header(&mut self, name: &HeaderName) -> bool {
        self.gate.forbidden.contains(name)
    }

    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        let forbidden = self.gate.forbidden.clone();
        Arc::new(move |name| forbidden.contains(name))
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        let attempt = Attempt {
            gate: self.gate.clone(),
            caller: self.caller.clone(),
            connections: self.connections.clone(),
            denials: self.denials.clone(),
            hints: self.hints.clone(),
            started: Instant::now(),
            method: crate::text::cut(request.method().as_str(), MAX_METHOD).to_string(),
            path: crate::text::cut(request.uri().path(), MAX_DENIAL_TEXT).to_string(),
            host: String::new(),
            grant: None,
            aws: None,
            reused: false,
        };
        Box::new(attempt.send(request))
    }
}

/// A copy of `head` to sign and send again: its method, URI, version and headers.
fn unsigned_copy(head: &http::request::Parts) -> http::request::Parts {
    let mut copy = http::Request::new(());
    *copy.method_mut() = head.method.clone();
    *copy.uri_mut() = head.uri.clone();
    *copy.version_mut() = head.version;
    *copy.headers_mut() = head.headers.clone();
    copy.into_parts().0
}

/// The gate's pooled HTTP client of one grant.
type PooledClient = hyper_util::client::legacy::Client<pool::GateConnector, WasiBody>;

/// One request on its way through the gate.
struct Attempt {
    gate: Arc<EgressGate>,
    caller: Arc<Caller>,
    connections: Arc<Connections>,
    denials: Arc<Mutex<Vec<Denial>>>,
    hints: Arc<Mutex<Vec<String>>>,
    started: Instant,
    method: String,
    path: String,
    host: String,
    /// The allow-list entry that matched, by index.
    grant: Option<usize>,
    /// The AWS service and action, once a signing rule read them.
    aws: Option<AwsCall>,
    /// Whether the response came over a pooled connection that had carried one before.
    reused: bool,
}

impl Attempt {
    async fn send(mut self, mut request: http::Request<WasiBody>) -> SendResult {
        let Some(dest) = Destination::from_uri(request.uri()) else {
            let uri = request.uri().to_string();
            self.host = crate::text::cut(&uri, MAX_DENIAL_TEXT).to_string();
            return Err(self.deny("the URL has no http(s) scheme or host".into()));
        };
        if dest.host.len() > MAX_HOST_NAME {
            self.host = crate::text::cut(&dest.to_string(), MAX_DENIAL_TEXT).to_string();
            return Err(self.deny(format!(
                "the host name is {} bytes long; no DNS name is longer than {MAX_HOST_NAME}",
                dest.host.len()
            )));
        }
        self.host = dest.to_string();
        if !CLOUD_METHODS.contains(request.method()) {
            return Err(self.deny(format!(
                "the method {} is not one a cloud API is spoken with (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)",
                self.method
            )));
        }
        let gate = self.gate.clone();
        let Some(grant) = gate.config.allow.iter().position(|p| p.matches(&dest)) else {
            let granted = gate.granted_list();
            let hosts = gate.config.source.hosts();
            return Err(self.deny(format!("no {hosts} entry matches (granted: {granted})")));
        };
        self.grant = Some(grant);
        // A request to be signed for AWS is judged by its API action, whatever its method
        // (AWS takes `GET /?Action=TerminateInstances`): see `Attempt::signed`.
        let signed = gate
            .config
            .credentials
            .iter()
            .any(|rule| rule.applies_to(&dest) && matches!(rule.applied(), Applied::SigV4(_)));
        if !signed && let Err(reason) = gate.config.methods.permits(request.method(), &dest) {
            return Err(self.deny(reason.to_string()));
        }
        let limits = gate.config.limits;
        match gate.budgets.take(&self.host) {
            Ok(()) => {}
            Err(Refusal::Exhausted(wait)) => {
                let reason = format!("rate budget for {} exhausted", self.host);
                return Ok(self.rate_limited(wait, reason));
            }
            Err(Refusal::Crowded { capacity, retry }) => {
                let reason = format!(
                    "rate budget for {} not given: {capacity} other destinations hold one that is still refilling (--egress-max-destinations)",
                    self.host
                );
                return Ok(self.rate_limited(retry, reason));
            }
        }
        let limited = !matches!(gate.config.methods, MethodPolicy::Any);
        let headers = request.headers_mut();
        for name in CREDENTIAL_HEADERS {
            headers.remove(name);
        }
        // Where methods are limited (a shadow), a header asking the server to take the
        // request as another method would undo the limit.
        if limited {
            for name in METHOD_OVERRIDE_HEADERS {
                headers.remove(name);
            }
        }
        // The authority on the wire is the one the grant matched: the pooled client sets
        // `Host` from the URI for HTTP/1.1, and HTTP/2 carries it as `:authority` alone,
        // so a `Host` naming another virtual host never reaches the server.
        headers.remove(http::header::HOST);
        let mut signing = None;
        for (index, rule) in gate.config.credentials.iter().enumerate() {
            if !rule.applies_to(&dest) {
                continue;
            }
            let header = match rule.applied() {
                Applied::SigV4(sigv4) => {
                    signing.get_or_insert((index, rule, sigv4));
                    continue;
                }
                Applied::Header(header) => header,
            };
            match gate.credential_value(index) {
                Ok(Some(value)) => {
                    headers.insert(header.clone(), value);
                }
                Ok(None) => {}
                Err(err) => return Err(self.deny(format!("credential unavailable: {err}"))),
            }
        }
        let connections = self.connections.clone();
        let Some(client) = connections.client(grant) else {
            return Err(self.failed(Error::ConfigurationError, "no pool for the grant".into()));
        };
        let response = match signing {
            None => self.exchange(client, request).await?,
            Some((index, rule, sigv4)) => {
                let (head, body) = self
                    .signed(client, index, rule, sigv4, &dest, request)
                    .await?;
                return self.signed_answer(head, body);
            }
        };
        let connection: transport::ConnectionTask = Box::new(async { Ok(()) });
        let status = response.status().as_u16();
        if matches!(status, 401 | 403)
            && !gate
                .config
                .credentials
                .iter()
                .any(|rule| rule.applies_to(&dest))
        {
            self.hint_uncredentialed(status);
        }
        self.check_declared_length(response.headers())?;
        let record = self.record(Some(status), None);
        let audit = gate.audit.clone();
        let started = self.started;
        let response = response.map(move |body| {
            transport::CappedBody::new(body, &limits, move |bytes, failure| {
                audit.record(AuditRecord {
                    response_bytes: bytes,
                    denied: failure.map(|f| format!("failed: {f}")),
                    latency: started.elapsed(),
                    ..record
                })
            })
            .boxed_unsync()
        });
        Ok((response, connection))
    }

    /// Send `request` on the pooled `client` within the connect and first-byte timeouts,
    /// once more if it is replayable and its reused connection closed unanswered.
    async fn exchange(
        &mut self,
        client: &PooledClient,
        request: http::Request<WasiBody>,
    ) -> Result<http::Response<hyper::body::Incoming>, Error> {
        let limits = self.gate.config.limits;
        // A new connection spends up to the connect timeout (address check, TCP, TLS) before
        // the request is sent; a pooled one goes straight to the first-byte wait.
        let deadline =
            tokio::time::Instant::now() + limits.connect_timeout + limits.first_byte_timeout;
        let (replay, request) = pool::Replay::watch(request);
        let mut sent = tokio::time::timeout_at(deadline, client.request(request)).await;
        if let Ok(Err(error)) = &sent
            && let Some(again) = replay.again(error)
        {
            sent = tokio::time::timeout_at(deadline, client.request(again)).await;
        }
        let response = match sent {
            Err(_) => {
                let message = "no response before the first-byte timeout".to_string();
                return Err(self.failed(Error::ConnectionReadTimeout, message));
            }
            Ok(Err(error)) => return Err(self.send_failed(&error)),
            Ok(Ok(response)) => response,
        };
        self.reused = response
            .extensions()
            .get::<pool::ConnectionUses>()
            .is_some_and(pool::ConnectionUses::reused);
        Ok(response)
    }

    /// Buffer the body of `request`, read its API action, check it against `rule` (whose
    /// `sigv4` signs it; credential rule number `index`) and the gate's policy, sign it for
    /// AWS and send it; read the answer whole. Temporary keys that AWS refuses (400, 401 or
    /// 403 with a code that says so) are refreshed and the request, already buffered, signed
    /// and sent once more: still one audit record and one rate token.
    async fn signed(
        &mut self,
        client: &PooledClient,
        index: usize,
        rule: &CredentialRule,
        sigv4: &SigV4,
        dest: &Destination,
        request: http::Request<WasiBody>,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        let (mut head, body) = request.into_parts();
        for name in sigv4::SIGNING_HEADERS {
            head.headers.remove(name);
        }
        let body = match http_body_util::Limited::new(body, MAX_SIGNED_BODY)
            .collect()
            .await
        {
            Ok(body) => body.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                return Err(self.deny(format!(
                    "the request body is over the {MAX_SIGNED_BODY}-byte bound of signed requests (it is buffered to be signed)"
                )));
            }
            Err(error) => {
                let message = format!("reading the request body failed: {error}");
                return Err(self.failed(Error::HttpProtocolError, message));
            }
        };
        // The query and form are read once, for the scope's `Version` and for the action.
        let parameters = sigv4::Parameters::read(&head, &body);
        let scope = sigv4
            .scope(dest, &parameters)
            .map_err(|reason| self.deny(format!("not signed: {reason}")))?;
        let (action, unreadable) = match parameters.action(&head, scope.service) {
            Ok(action) => (action, None),
            Err(reason) => (None, Some(reason)),
        };
        let action_label = match unreadable {
            None => sigv4::action_label(scope.service, action.as_deref(), sigv4.actions()),
            Some(_) => sigv4::OTHER.to_string(),
        };
        self.aws = Some(AwsCall {
            labels: (
                sigv4::service_label(scope.service, sigv4.services()),
                action_label,
            ),
            service: scope.service.to_string(),
            action,
        });
        if let Some(reason) = unreadable {
            return Err(self.deny(format!("not signed: {reason}")));
        }
        let action = self.aws.as_ref().and_then(|aws| aws.action.as_deref());
        let policy = &self.gate.config.methods;
        let shadow = policy.shadow_actions();
        sigv4
            .permits(rule.target(), &scope, action, shadow)
            .map_err(|reason| self.deny(format!("not signed: {reason}")))?;
        if action.is_none() && shadow.is_some() {
            // A REST request names its action by method and route: a shadow's may read.
            policy
                .permits(&head.method, dest)
                .map_err(|reason| self.deny(reason.to_string()))?;
        }
        let gate = self.gate.clone();
        let keys = sigv4
            .keys()
            .current(gate.sts_client(index))
            .await
            .map_err(|error| self.deny(format!("credential unavailable: {error}")))?;
        // Temporary keys may be refused and the request sent again, so an unsigned copy of its
        // head is kept for them; with other keys it is signed and sent with no copy kept.
        let resend = sigv4.keys().refreshable().then(|| unsigned_copy(&head));
        SigV4::sign(&mut head, &body, &scope, &keys)
            .map_err(|reason| self.deny(format!("not signed: {reason}")))?;
        let request = http::Request::from_parts(head, transport::full_body(body.clone()));
        let response = self.exchange(client, request).await?;
        let refusable = matches!(response.status().as_u16(), 400 | 401 | 403);
        let (answer, answer_body) = self.read_answer(response).await?;
        let Some(mut head) = resend.filter(|_| refusable) else {
            return Ok((answer, answer_body));
        };
        let Some(code) = sigv4::refused_keys(&answer_body) else {
            return Ok((answer, answer_body));
        };
        let refreshed = match sigv4
            .keys()
            .after_refusal(&keys, gate.sts_client(index))
            .await
        {
            Some(Ok(refreshed)) => refreshed,
            Some(Err(error)) => {
                tracing::warn!(
                    provider = %self.caller.provider,
                    version = %self.caller.version,
                    "AWS answered {code} to {} {}{}; refreshing the keys failed: {error}",
                    self.method, self.host, self.path
                );
                return Ok((answer, answer_body));
            }
            None => return Ok((answer, answer_body)),
        };
        tracing::info!(
            provider = %self.caller.provider,
            version = %self.caller.version,
            "AWS answered {code} to {} {}{}: sending it once more with refreshed keys",
            self.method, self.host, self.path
        );
        SigV4::sign(&mut head, &body, &scope, &refreshed)
            .map_err(|reason| self.deny(format!("not signed: {reason}")))?;
        let request = http::Request::from_parts(head, transport::full_body(body));
        let response = self.exchange(client, request).await?;
        self.read_answer(response).await
    }

    /// The whole of `response`, within the response cap and the between-bytes timeout.
    async fn read_answer(
        &self,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<(http::response::Parts, Bytes), Error> {
        let limits = self.gate.config.limits;
        let (head, body) = response.into_parts();
        self.check_declared_length(&head.headers)?;
        match transport::CappedBody::new(body, &limits, |_, _| {})
            .collect()
            .await
        {
            Ok(body) => Ok((head, body.to_bytes())),
            Err(error) => {
                let message = format!("reading the response failed: {error}");
                Err(self.failed(transport::same_code(&error), message))
            }
        }
    }

    /// Refuse a response whose declared length is over the response cap, before reading it.
    fn check_declared_length(&self, headers: &http::HeaderMap) -> Result<(), Error> {
        let cap = self.gate.config.limits.max_response_bytes;
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
        match declared.filter(|length| *length > cap) {
            Some(length) => {
                let message = format!("response of {length} bytes exceeds the {cap}-byte cap");
                Err(self.failed(Error::HttpResponseBodySize(Some(length)), message))
            }
            None => Ok(()),
        }
    }

    /// The answer to a signed request, read whole, handed to the guest and audited now;
    /// unless it carries AWS keys (what `GetSessionToken` or `CreateAccessKey` answer, were
    /// they signed), which a provider never gets: the guest then gets a `502` whose AWS-style
    /// error names the action and why, and the audit record says it was withheld.
    fn signed_answer(&self, head: http::response::Parts, body: Bytes) -> SendResult {
        let status = head.status.as_u16();
        let response = match sigv4::carried_credential(&body) {
            None => {
                self.gate.audit.record(AuditRecord {
                    response_bytes: body.len() as u64,
                    ..self.record(Some(status), None)
                });
                http::Response::from_parts(head, transport::full_body(body))
            }
            Some(name) => {
                let call = self.aws.as_ref().map_or_else(String::new, |aws| {
                    format!(
                        "{} {} ",
                        aws.service,
                        aws.action.as_deref().unwrap_or("(REST)")
                    )
                });
                let reason = format!(
                    "withheld: the {status} answer to {call}carries AWS credentials ({name}), which the gate never hands to a provider"
                );
                tracing::warn!(
                    provider = %self.caller.provider,
                    version = %self.caller.version,
                    "egress answer {reason}: {} {}{}",
                    self.method, self.host, self.path
                );
                self.gate
                    .audit
                    .record(self.record(Some(502), Some(reason.clone())));
                let error = format!(
                    "<ErrorResponse><Error><Type>Receiver</Type><Code>CredentialsWithheld</Code><Message>{reason}</Message></Error></ErrorResponse>"
                );
                http::Response::builder()
                    .status(http::StatusCode::BAD_GATEWAY)
                    .header(http::header::CONTENT_TYPE, "text/xml")
                    .header("x-wasm-ccm-egress", "withheld")
                    .body(transport::full_body(error))
                    .unwrap_or_else(|_| http::Response::new(transport::full_body("withheld")))
            }
        };
        Ok((response, Box::new(async { Ok(()) })))
    }

    fn record(&self, status: Option<u16>, denied: Option<String>) -> AuditRecord {
        AuditRecord {
            provider: self.caller.provider.clone(),
            version: self.caller.version.clone(),
            method: self.method.clone(),
            host: self.host.clone(),
            grant: self
                .grant
                .and_then(|index| self.gate.config.allow.get(index))
                .map(ToString::to_string),
            path: self.path.clone(),
            aws: self.aws.clone(),
            status,
            denied,
            response_bytes: 0,
            latency: self.started.elapsed(),
            connection_reused: self.reused,
        }
    }

    /// The audit record and guest-visible code of a request the pooled client failed.
    fn send_failed(&self, error: &hyper_util::client::legacy::Error) -> Error {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        let mut message = error.to_string();
        while let Some(cause) = source {
            if let Some(refusal) = cause.downcast_ref::<ConnectRefusal>() {
                return self.refused(refusal);
            }
            if let Some(code) = cause.downcast_ref::<Error>() {
                return self.failed(transport::same_code(code), format!("{message}: {code}"));
            }
            if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
                let code = if hyper.is_timeout() {
                    Error::ConnectionReadTimeout
                } else if hyper.is_incomplete_message() {
                    Error::HttpResponseIncomplete
                } else if hyper.is_closed() || hyper.is_canceled() {
                    Error::ConnectionTerminated
                } else {
                    Error::HttpProtocolError
                };
                return self.failed(code, format!("{message}: {hyper}"));
            }
            source = cause.source();
            if let Some(next) = source {
                message = format!("{message}: {next}");
            }
        }
        self.failed(Error::HttpProtocolError, message)
    }

    fn deny(&self, reason: String) -> Error {
        let mut denials = self.denials.lock().unwrap_or_else(|p| p.into_inner());
        // A provider may retry a refused request in a loop: the call keeps and warns about
        // its first refusals only; every one is still audited and counted.
        if denials.len() < MAX_DENIALS_KEPT {
            let request = format!("{} {}{}", self.method, self.host, self.path);
            let request = crate::text::cut(&request, MAX_DENIAL_TEXT);
            tracing::warn!(
                provider = %self.caller.provider,
                version = %self.caller.version,
                "egress denied: {request}: {reason}"
            );
            denials.push(Denial {
                request: request.to_string(),
                reason: reason.clone(),
            });
        }
        drop(denials);
        self.gate.audit.record(self.record(None, Some(reason)));
        Error::HttpRequestDenied
    }

    /// Note that the host answered `status` (401 or 403) to a request that carried no
    /// credential, because no rule covers it: the likeliest cause of the call's failure.
    fn hint_uncredentialed(&self, status: u16) {
        let credentials = self.gate.config.source.credentials();
        let host = &self.host;
        let hint = format!(
            "{host} answered {status} and no {credentials} rule covers it, so its requests carry no credential; add a {credentials} rule for {host} if it needs one"
        );
        let mut hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        let same_host = format!("{host} ");
        if hints.len() < MAX_HINTS_KEPT && !hints.iter().any(|h| h.starts_with(&same_host)) {
            hints.push(hint);
        }
    }

    fn refused(&self, refusal: &ConnectRefusal) -> Error {
        match refusal {
            ConnectRefusal::Internal { address, reason } => self.deny(format!(
                "{} resolves to {address}, {reason}; only a {} entry naming that address may reach it",
                self.host,
                self.gate.config.source.hosts()
            )),
            ConnectRefusal::Failed(error, message) => {
                self.failed(transport::same_code(error), message.clone())
            }
        }
    }

    fn failed(&self, error: Error, message: String) -> Error {
        self.gate
            .audit
            .record(self.record(None, Some(format!("failed: {message}"))));
        error
    }

    /// The synthetic `429` of a request the rate budgets refused for `reason` (which starts
    /// `rate budget`, the audit's `rate-limited` outcome), with `Retry-After`.
    fn rate_limited(
        &self,
        wait: Duration,
        reason: String,
    ) -> (http::Response<WasiBody>, transport::ConnectionTask) {
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        let reason = format!("{reason}; retry in {seconds}s");
        self.gate
            .audit
            .record(self.record(Some(429), Some(reason.clone())));
        let response = http::Response::builder()
            .status(http::StatusCode::TOO_MANY_REQUESTS)
            .header(http::header::RETRY_AFTER, seconds.to_string())
            .header("x-wasm-ccm-egress", "rate-limited")
            .body(transport::full_body(reason))
            .unwrap_or_else(|_| http::Response::new(transport::full_body("rate limited")));
        (response, Box::new(async { Ok(()) }))
    }
}

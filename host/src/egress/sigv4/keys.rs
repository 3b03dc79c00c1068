//! Where a SigV4 rule's keys come from, and when they are read again: static keys (an access
//! key id, a secret and an optional session token, each from the environment, a file or a
//! watched Secret), re-read as the gate's header credentials are; or temporary keys from STS
//! `AssumeRoleWithWebIdentity` (IRSA), exchanged for the token file's current contents,
//! refreshed five minutes before they expire and again when AWS refuses them, one exchange at
//! a time however many requests wait for it.
//!
//! The token goes only to an AWS STS endpoint over HTTPS (`sts.amazonaws.com`,
//! `sts[-fips].REGION.amazonaws.com`, `.amazonaws.com.cn`, the ISO partitions' and the
//! dual-stack `api.aws` names) or to one the operator lists (`--sts-endpoint-allow`), and
//! through the gate's own transport ([`StsClient`]): the address check, TLS roots and
//! timeouts of every egress connection, no redirect followed, the answer read to at most
//! [`MAX_STS_ANSWER`] bytes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::identity::Identity;
use http_body_util::BodyExt;

use super::super::PooledClient;
use super::super::credentials::{SecretError, SecretSource};
use super::super::policy::{HostPattern, PatternError};
use super::super::transport::{self, Limits};
use super::{aws_endpoint, is_region, xml_text};

/// Most bytes of an STS answer an exchange reads (an `AssumeRoleWithWebIdentity` answer is
/// about 2 KiB); a longer one fails the exchange.
pub const MAX_STS_ANSWER: usize = 64 * 1024;

/// The domains of AWS partitions whose `sts.REGION.DOMAIN` (and `sts-fips.REGION.DOMAIN`)
/// the token may be sent to: commercial and GovCloud, China, the ISO partitions, and the
/// dual-stack names.
const STS_DOMAINS: [&str; 5] = [
    "amazonaws.com",
    "amazonaws.com.cn",
    "c2s.ic.gov",
    "sc2s.sgov.gov",
    "api.aws",
];

/// How an exchange reaches STS: the gate's pooled client for the endpoint, whose every new
/// connection passes the gate's address check (internal addresses refused unless the
/// endpoint is that very address), TLS roots and connect timeout.
pub struct StsClient<'a> {
    pub client: &'a PooledClient,
    pub limits: Limits,
}

/// Temporary keys are exchanged again when they have less than this left.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(5 * 60);

/// The session name sent to STS when `AWS_ROLE_SESSION_NAME` is not set.
const DEFAULT_SESSION_NAME: &str = "wasm-ccm";

/// Why a URL does not parse.
type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// Why the keys to sign with cannot be had now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyError {
    /// A static key's source cannot be read, or its value cannot go in a header.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The web identity token file cannot be read.
    #[error("cannot read the web identity token file {}: {error}", path.display())]
    TokenUnreadable {
        /// The token file.
        path: PathBuf,
        /// Why not.
        error: Arc<std::io::Error>,
    },
    /// The web identity token file is empty.
    #[error("the web identity token file {} is empty", path.display())]
    TokenEmpty {
        /// The token file.
        path: PathBuf,
    },
    /// `AssumeRoleWithWebIdentity` failed; the message names the role and endpoint, never
    /// the token.
    #[error("STS AssumeRoleWithWebIdentity for {role_arn} at {endpoint} failed: {problem}")]
    Exchange {
        /// The role to assume.
        role_arn: String,
        /// The STS endpoint.
        endpoint: String,
        /// What went wrong.
        problem: ExchangeProblem,
    },
    /// An exchange another request waited for ended with neither keys nor a failure.
    #[error("no keys")]
    NoKeys,
}

/// What went wrong in one `AssumeRoleWithWebIdentity` exchange.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExchangeProblem {
    /// The gate may not send the token to the endpoint.
    #[error(
        "the endpoint is not one the manager sends its web identity token to (an AWS STS endpoint, or one --sts-endpoint-allow lists)"
    )]
    EndpointRefused,
    /// The request could not be made.
    #[error("cannot make the request: {0}")]
    Request(Arc<http::Error>),
    /// Sending failed: each cause in turn (an internal address refused, a TLS or connect
    /// failure).
    #[error("{0}")]
    Send(String),
    /// The answer is over [`MAX_STS_ANSWER`] bytes.
    #[error("the answer is over {MAX_STS_ANSWER} bytes")]
    TooLarge,
    /// Reading the answer failed.
    #[error("reading the answer failed: {0}")]
    Read(Arc<dyn std::error::Error + Send + Sync>),
    /// No whole answer within the connect, first-byte and between-bytes timeouts.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// STS answered an error: the status and the answer's code and message.
    #[error("{status}: {code}: {message}")]
    Refused {
        /// The HTTP status.
        status: http::StatusCode,
        /// The AWS error code, or `no error code`.
        code: String,
        /// The AWS error message, if any.
        message: String,
    },
    /// The answer lacks a field (or it is empty).
    #[error("the answer has no {0}")]
    Missing(&'static str),
    /// The answer's `Expiration` is not an RFC 3339 time.
    #[error("Expiration {value:?}: {error}")]
    Expiration {
        /// The field as answered.
        value: String,
        /// Why it does not parse.
        error: chrono::ParseError,
    },
    /// The key id or session token cannot go in a header.
    #[error("the key id or session token holds characters not allowed in a header")]
    NotHeaderSafe,
}

/// Why a web identity configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebIdentityError {
    /// An environment variable the exchange needs is not set (or empty).
    #[error("web identity needs {0} set in the environment")]
    MissingVar(&'static str),
    /// No endpoint is stated and no region gives one.
    #[error(
        "web identity needs the STS region: state the region, the STS endpoint, or set AWS_REGION"
    )]
    NoRegion,
    /// The STS endpoint is not a URL.
    #[error(transparent)]
    Endpoint(#[from] StsEndpointError),
    /// The STS endpoint is a URL, but not an http(s) one with a host.
    #[error("STS endpoint {0:?} is not an http(s) URL")]
    EndpointScheme(String),
    /// The session name is not what STS takes.
    #[error("role session name {0:?} must be 2 to 64 letters, digits or +=,.@_-")]
    SessionName(String),
    /// The role ARN is empty.
    #[error("the role ARN is empty")]
    EmptyRoleArn,
}

/// Why the manager does not send its web identity token to an STS endpoint, or an
/// `--sts-endpoint-allow` entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StsEndpointError {
    /// The endpoint is not a URL.
    #[error("STS endpoint {endpoint:?} is not a URL: {error}")]
    NotUrl {
        /// The endpoint as given.
        endpoint: String,
        /// Why it does not parse.
        error: UrlError,
    },
    /// The endpoint's origin, or an entry, is not a host pattern.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// Neither an AWS STS endpoint over HTTPS nor one the operator lists.
    #[error(
        "STS endpoint {endpoint} is not an AWS STS endpoint (https://sts.REGION.amazonaws.com, https://sts.amazonaws.com, …) nor one the manager lists with --sts-endpoint-allow ({}): the manager sends its web identity token only there",
        listed(.allowed)
    )]
    NotAllowed {
        /// The endpoint as given.
        endpoint: String,
        /// The endpoints the operator lists.
        allowed: Vec<HostPattern>,
    },
    /// An `--sts-endpoint-allow` entry that is not a URL.
    #[error("{0:?} is not a URL")]
    EntryNotUrl(String),
    /// An `--sts-endpoint-allow` entry naming `*.`.
    #[error("{0} names every subdomain: an STS endpoint entry names one host")]
    EntryWildcard(String),
    /// An `--sts-endpoint-allow` entry over plain HTTP to a host not loopback.
    #[error(
        "{0} is plain HTTP: the web identity token goes over HTTPS, or over HTTP to a loopback address only"
    )]
    EntryPlainHttp(String),
}

/// `allowed` as an error lists it: `none`, or the entries joined by commas.
fn listed(allowed: &[HostPattern]) -> String {
    if allowed.is_empty() {
        return "none".to_string();
    }
    let listed: Vec<String> = allowed.iter().map(ToString::to_string).collect();
    listed.join(", ")
}

/// The keys a rule signs with.
#[derive(Clone)]
pub enum AwsKeys {
    /// Keys read from their sources.
    Static(Arc<StaticKeys>),
    /// Temporary keys from STS for a web identity token.
    WebIdentity(Arc<WebIdentity>),
}

impl fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AwsKeys::Static(keys) => write!(
                f,
                "access key id {:?}, secret {:?}, session token {:?}",
                keys.access_key_id,
                keys.secret_access_key,
                keys.session_token.as_ref().map(|(source, _)| source)
            ),
            AwsKeys::WebIdentity(identity) => write!(
                f,
                "web identity {} with token file {} from {}",
                identity.config.role_arn,
                identity.config.token_file.display(),
                identity.config.sts_endpoint
            ),
        }
    }
}

/// The keys one request is signed with (`Debug` shows the key id, never the secret or token).
#[derive(Debug, Clone)]
pub struct Keys {
    /// The credentials as `aws-sigv4` takes them, made once with the keys rather than for
    /// every request they sign, and shared by the requests they sign.
    identity: Arc<Identity>,
    /// Which exchange of a web identity made them; `None` for static keys.
    generation: Option<u64>,
}

impl Keys {
    fn new(credentials: Credentials, generation: Option<u64>) -> Keys {
        Keys {
            identity: Arc::new(credentials.into()),
            generation,
        }
    }

    pub(in super::super) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The keys themselves, as the identity holds them.
    pub(super) fn credentials(&self) -> &Credentials {
        self.identity.data().expect("keys hold credentials")
    }
}

impl AwsKeys {
    /// Keys read from `access_key_id`, `secret_access_key` and `session_token` (temporary
    /// keys), each required.
    pub fn from_sources(
        access_key_id: SecretSource,
        secret_access_key: SecretSource,
        session_token: Option<SecretSource>,
    ) -> AwsKeys {
        AwsKeys::Static(Arc::new(StaticKeys {
            access_key_id,
            secret_access_key,
            session_token: session_token.map(|token| (token, true)),
            read: Mutex::new(None),
        }))
    }

    /// Keys with a session token only when `session_token` has a value.
    fn with_optional_token(
        access_key_id: SecretSource,
        secret_access_key: SecretSource,
        session_token: SecretSource,
    ) -> AwsKeys {
        AwsKeys::Static(Arc::new(StaticKeys {
            access_key_id,
            secret_access_key,
            session_token: Some((session_token, false)),
            read: Mutex::new(None),
        }))
    }

    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (if set) of the
    /// manager's environment.
    pub fn from_env() -> AwsKeys {
        let env = |name: &str| SecretSource::Env(name.into());
        AwsKeys::with_optional_token(
            env("AWS_ACCESS_KEY_ID"),
            env("AWS_SECRET_ACCESS_KEY"),
            env("AWS_SESSION_TOKEN"),
        )
    }

    /// The files `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` (if
    /// present) of `dir`: a Secret with those keys mounted as a volume.
    pub fn from_dir(dir: &Path) -> AwsKeys {
        let file = |name: &str| SecretSource::File(dir.join(name));
        AwsKeys::with_optional_token(
            file("AWS_ACCESS_KEY_ID"),
            file("AWS_SECRET_ACCESS_KEY"),
            file("AWS_SESSION_TOKEN"),
        )
    }

    /// Temporary keys for the web identity `config`.
    pub fn web_identity(config: WebIdentityConfig) -> AwsKeys {
        AwsKeys::WebIdentity(Arc::new(WebIdentity {
            config,
            current: RwLock::new(None),
            exchange: tokio::sync::Mutex::new(None),
            exchanges: AtomicU64::new(0),
        }))
    }

    /// Whether the keys are temporary and can be refreshed when AWS refuses them.
    pub fn refreshable(&self) -> bool {
        matches!(self, AwsKeys::WebIdentity(_))
    }

    /// Check now that the keys can be had (static keys read, a token file readable), so a
    /// bad rule fails at start-up. Web identity keys are not exchanged here.
    pub fn check(&self) -> Result<(), KeyError> {
        match self {
            AwsKeys::Static(keys) => Ok(keys.read().map(drop)?),
            AwsKeys::WebIdentity(identity) => identity.token().map(drop),
        }
    }

    /// The keys to sign with now: static keys as read (at most a second old, unless they
    /// are in memory); temporary keys with more than [`REFRESH_BEFORE_EXPIRY`] left, or else
    /// exchanged again first.
    ///
    /// `sts` reaches the web identity's STS endpoint; `None` when the gate may not send the
    /// token there, which fails an exchange.
    pub(in super::super) async fn current(
        &self,
        sts: Option<StsClient<'_>>,
    ) -> Result<Keys, KeyError> {
        match self {
            AwsKeys::Static(keys) => keys.current(),
            AwsKeys::WebIdentity(identity) => identity.current(sts).await,
        }
    }

    /// The web identity these keys are exchanged for, if they are.
    pub fn web_identity_config(&self) -> Option<&WebIdentityConfig> {
        match self {
            AwsKeys::Static(_) => None,
            AwsKeys::WebIdentity(identity) => Some(&identity.config),
        }
    }

    /// New keys after AWS refused `used`, or `None` if these keys cannot be refreshed.
    /// Requests refused together share one exchange: keys already replaced since `used` was
    /// handed out are returned as they are.
    pub(in super::super) async fn after_refusal(
        &self,
        used: &Keys,
        sts: Option<StsClient<'_>>,
    ) -> Option<Result<Keys, KeyError>> {
        match self {
            AwsKeys::Static(_) => None,
            AwsKeys::WebIdentity(identity) => Some(identity.after_refusal(used, sts).await),
        }
    }
}

/// Static keys and when they were last read.
pub struct StaticKeys {
    access_key_id: SecretSource,
    secret_access_key: SecretSource,
    /// The session token's source, and whether it must have a value.
    session_token: Option<(SecretSource, bool)>,
    read: Mutex<Option<(Read, Keys)>>,
}

/// When static keys were read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// At this instant, from the environment or files: they are read again a second later.
    At(Instant),
    /// From watched Secret keys, as set this many times: read again once one is set anew.
    Set([u64; 3]),
}

impl StaticKeys {
    fn current(&self) -> Result<Keys, KeyError> {
        let sources = [&self.access_key_id, &self.secret_access_key]
            .into_iter()
            .chain(self.session_token.as_ref().map(|(source, _)| source));
        let mut set = [0; 3];
        let mut in_memory = true;
        for (generation, source) in set.iter_mut().zip(sources) {
            match source {
                SecretSource::Shared(secret) => *generation = secret.generation(),
                _ => in_memory = false,
            }
        }
        let mut read = self.read.lock().unwrap_or_else(|p| p.into_inner());
        match &*read {
            Some((Read::Set(seen), keys)) if in_memory && *seen == set => {
                return Ok(keys.clone());
            }
            Some((Read::At(at), keys))
                if !in_memory && at.elapsed() < super::super::CREDENTIAL_REFRESH =>
            {
                return Ok(keys.clone());
            }
            _ => {}
        }
        let keys = Keys::new(self.read()?, None);
        let when = if in_memory {
            Read::Set(set)
        } else {
            Read::At(Instant::now())
        };
        *read = Some((when, keys.clone()));
        Ok(keys)
    }

    fn read(&self) -> Result<Credentials, SecretError> {
        let access_key_id = header_safe(&self.access_key_id, self.access_key_id.read()?)?;
        let secret_access_key = self.secret_access_key.read()?;
        // An optional token that is not there (no variable, no file) means long-term keys.
        let session_token = match &self.session_token {
            Some((source, required)) => match source.read() {
                Ok(token) => Some(header_safe(source, token)?),
                Err(problem) if *required => return Err(problem),
                Err(_) => None,
            },
            None => None,
        };
        Ok(Credentials::new(
            access_key_id,
            secret_access_key,
            session_token,
            None,
            "wasm-ccm",
        ))
    }
}

/// `value` of `source` if it can go in a header (the key id and token do), else why not.
fn header_safe(source: &SecretSource, value: String) -> Result<String, SecretError> {
    if value.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(value)
    } else {
        Err(SecretError::NotHeaderSafe(source.clone()))
    }
}

/// What a web identity exchange needs: the role, the token file (re-read for every exchange:
/// the kubelet rotates the projected token) and the STS endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentityConfig {
    /// The role to assume (`AWS_ROLE_ARN`).
    pub role_arn: String,
    /// The file holding the web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE`).
    pub token_file: PathBuf,
    /// The session name (`AWS_ROLE_SESSION_NAME`, default `wasm-ccm`).
    pub session_name: String,
    /// Where `AssumeRoleWithWebIdentity` is posted, e.g. `https://sts.us-east-1.amazonaws.com`.
    pub sts_endpoint: String,
}

impl WebIdentityConfig {
    /// The role, token file and session name from the manager's environment (as the EKS
    /// pod identity webhook sets them for IRSA), and the STS endpoint: `sts` if given, else
    /// the regional one of `region`, of `target`'s AWS endpoint name, or of `AWS_REGION`
    /// (`AWS_DEFAULT_REGION`).
    pub fn from_env(
        sts: Option<&str>,
        region: Option<&str>,
        target: &HostPattern,
    ) -> Result<WebIdentityConfig, WebIdentityError> {
        WebIdentityConfig::from_vars(|name| std::env::var(name).ok(), sts, region, target)
    }

    /// [`WebIdentityConfig::from_env`] with the environment's variables from `var`.
    fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        sts: Option<&str>,
        region: Option<&str>,
        target: &HostPattern,
    ) -> Result<WebIdentityConfig, WebIdentityError> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let missing = WebIdentityError::MissingVar;
        let role_arn = var("AWS_ROLE_ARN").ok_or_else(|| missing("AWS_ROLE_ARN"))?;
        let token_file = var("AWS_WEB_IDENTITY_TOKEN_FILE")
            .ok_or_else(|| missing("AWS_WEB_IDENTITY_TOKEN_FILE"))?;
        let session_name =
            var("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| DEFAULT_SESSION_NAME.into());
        let sts_endpoint = match sts {
            Some(url) => url.to_string(),
            None => {
                let from_target = target
                    .dns_name()
                    .and_then(aws_endpoint)
                    .map(|(_, region)| region.to_string());
                let region = region
                    .map(String::from)
                    .or(from_target)
                    .or_else(|| var("AWS_REGION"))
                    .or_else(|| var("AWS_DEFAULT_REGION"))
                    .ok_or(WebIdentityError::NoRegion)?;
                regional_sts(&region)
            }
        };
        WebIdentityConfig::new(role_arn, token_file.into(), session_name, sts_endpoint)
    }

    /// A configuration, checked: the endpoint must be an http(s) URL, the session name
    /// what STS takes (2 to 64 of letters, digits and `+=,.@_-`).
    pub fn new(
        role_arn: String,
        token_file: PathBuf,
        session_name: String,
        sts_endpoint: String,
    ) -> Result<WebIdentityConfig, WebIdentityError> {
        let url = parse_endpoint(&sts_endpoint)?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(WebIdentityError::EndpointScheme(sts_endpoint));
        }
        let session_ok = (2..=64).contains(&session_name.len())
            && session_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c));
        if !session_ok {
            return Err(WebIdentityError::SessionName(session_name));
        }
        if role_arn.is_empty() {
            return Err(WebIdentityError::EmptyRoleArn);
        }
        Ok(WebIdentityConfig {
            role_arn,
            token_file,
            session_name,
            sts_endpoint,
        })
    }

    /// Whether the manager may send its web identity token to the STS endpoint: an AWS STS
    /// endpoint name over HTTPS on port 443, or an endpoint `allowed` names (the operator's
    /// `--sts-endpoint-allow`).
    pub fn check_endpoint(&self, allowed: &[HostPattern]) -> Result<(), StsEndpointError> {
        check_sts_endpoint(&self.sts_endpoint, allowed)
    }

    /// The endpoint's scheme, host and port, as a grant of its own.
    pub(in super::super) fn endpoint_pattern(&self) -> Result<HostPattern, StsEndpointError> {
        endpoint_pattern(&parse_endpoint(&self.sts_endpoint)?)
    }
}

/// Whether the manager may send its web identity token to `endpoint` (a URL): an AWS STS
/// endpoint name over HTTPS on port 443, or an endpoint `allowed` names (the operator's
/// `--sts-endpoint-allow`).
pub fn check_sts_endpoint(endpoint: &str, allowed: &[HostPattern]) -> Result<(), StsEndpointError> {
    let url = parse_endpoint(endpoint)?;
    let pattern = endpoint_pattern(&url)?;
    if allowed.iter().any(|allowed| allowed == &pattern) {
        return Ok(());
    }
    let host = url.host_str().unwrap_or_default();
    let aws =
        url.scheme() == "https" && url.port_or_known_default() == Some(443) && is_sts_host(host);
    if aws {
        return Ok(());
    }
    Err(StsEndpointError::NotAllowed {
        endpoint: endpoint.to_string(),
        allowed: allowed.to_vec(),
    })
}

/// The STS endpoint `endpoint` as a URL.
fn parse_endpoint(endpoint: &str) -> Result<reqwest::Url, StsEndpointError> {
    reqwest::Url::parse(endpoint).map_err(|error| StsEndpointError::NotUrl {
        endpoint: endpoint.to_string(),
        error,
    })
}

/// The scheme, host and port of `url`, as a host pattern.
fn endpoint_pattern(url: &reqwest::Url) -> Result<HostPattern, StsEndpointError> {
    let host = url.host_str().unwrap_or_default();
    let origin = match url.port() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    };
    Ok(origin.parse()?)
}

/// Whether `host` is an AWS STS endpoint name: `sts.amazonaws.com`, or `sts.REGION.DOMAIN`
/// or `sts-fips.REGION.DOMAIN` for a domain of [`STS_DOMAINS`].
fn is_sts_host(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    if host == "sts.amazonaws.com" {
        return true;
    }
    let Some(rest) = host
        .strip_prefix("sts.")
        .or_else(|| host.strip_prefix("sts-fips."))
    else {
        return false;
    };
    STS_DOMAINS.iter().any(|domain| {
        rest.strip_suffix(domain)
            .and_then(|region| region.strip_suffix('.'))
            .is_some_and(is_region)
    })
}

/// An `--sts-endpoint-allow` entry: `https://HOST[:PORT]` naming one host (no `*.`), or
/// `http://` with a loopback address (a test's STS on the same host: the token never leaves
/// it).
pub fn sts_endpoint_allowed(text: &str) -> Result<HostPattern, StsEndpointError> {
    let pattern: HostPattern = text.parse()?;
    let uri: http::Uri = text
        .parse()
        .map_err(|_| StsEndpointError::EntryNotUrl(text.to_string()))?;
    let host = uri.host().unwrap_or_default();
    if host.starts_with("*.") {
        return Err(StsEndpointError::EntryWildcard(text.to_string()));
    }
    let loopback = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if uri.scheme_str() == Some("http") && !loopback {
        return Err(StsEndpointError::EntryPlainHttp(text.to_string()));
    }
    Ok(pattern)
}

/// The regional STS endpoint of `region`, in its partition.
fn regional_sts(region: &str) -> String {
    if region.starts_with("cn-") {
        format!("https://sts.{region}.amazonaws.com.cn")
    } else {
        format!("https://sts.{region}.amazonaws.com")
    }
}

/// What failed in sending an exchange: each cause in turn (an internal address refused, a
/// TLS or connect failure).
fn exchange_error(error: &hyper_util::client::legacy::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

/// A web identity's temporary keys and the one exchange that may be running.
pub struct WebIdentity {
    config: WebIdentityConfig,
    current: RwLock<Option<Temporary>>,
    /// Held by the one exchange running; the last exchange's failure, if it failed.
    exchange: tokio::sync::Mutex<Option<KeyError>>,
    /// Exchanges finished, successful or not.
    exchanges: AtomicU64,
}

/// Keys from one exchange.
#[derive(Clone)]
struct Temporary {
    keys: Keys,
    expires: SystemTime,
}

impl Temporary {
    fn fresh(&self) -> bool {
        self.expires
            .duration_since(SystemTime::now())
            .is_ok_and(|left| left > REFRESH_BEFORE_EXPIRY)
    }

    fn unexpired(&self) -> bool {
        self.expires > SystemTime::now()
    }
}

impl WebIdentity {
    async fn current(&self, sts: Option<StsClient<'_>>) -> Result<Keys, KeyError> {
        let seen = self.exchanges.load(Ordering::SeqCst);
        if let Some(current) = self.temporary().filter(Temporary::fresh) {
            return Ok(current.keys);
        }
        let mut failure = self.exchange.lock().await;
        if self.exchanges.load(Ordering::SeqCst) != seen {
            // An exchange finished while this request waited: take its outcome.
            if let Some(current) = self.temporary().filter(Temporary::unexpired) {
                return Ok(current.keys);
            }
            return Err(failure.clone().unwrap_or(KeyError::NoKeys));
        }
        match self.exchange_now(&mut failure, sts).await {
            Ok(keys) => Ok(keys),
            Err(error) => match self.temporary().filter(Temporary::unexpired) {
                // Refreshing early failed; the keys in hand still work for now.
                Some(current) => {
                    tracing::warn!(role = %self.config.role_arn, "{error}; the current keys are used until they expire");
                    Ok(current.keys)
                }
                None => Err(error),
            },
        }
    }

    async fn after_refusal(
        &self,
        used: &Keys,
        sts: Option<StsClient<'_>>,
    ) -> Result<Keys, KeyError> {
        let replaced = |current: &Temporary| current.keys.generation != used.generation;
        let seen = self.exchanges.load(Ordering::SeqCst);
        if let Some(current) = self.temporary().filter(replaced) {
            return Ok(current.keys);
        }
        let mut failure = self.exchange.lock().await;
        if self.exchanges.load(Ordering::SeqCst) != seen {
            if let Some(current) = self.temporary().filter(replaced) {
                return Ok(current.keys);
            }
            return Err(failure.clone().unwrap_or(KeyError::NoKeys));
        }
        self.exchange_now(&mut failure, sts).await
    }

    fn temporary(&self) -> Option<Temporary> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Exchange the token for new keys, holding the exchange lock (`failure`).
    async fn exchange_now(
        &self,
        failure: &mut Option<KeyError>,
        sts: Option<StsClient<'_>>,
    ) -> Result<Keys, KeyError> {
        let outcome = self.assume_role(sts).await;
        let generation = self.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
        match outcome {
            Ok((credentials, expires)) => {
                *failure = None;
                let keys = Keys::new(credentials, Some(generation));
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Temporary {
                    keys: keys.clone(),
                    expires,
                });
                Ok(keys)
            }
            Err(error) => {
                *failure = Some(error.clone());
                Err(error)
            }
        }
    }

    /// The token file's contents now.
    fn token(&self) -> Result<String, KeyError> {
        let path = &self.config.token_file;
        let token = std::fs::read_to_string(path).map_err(|error| KeyError::TokenUnreadable {
            path: path.clone(),
            error: Arc::new(error),
        })?;
        let token = token.trim();
        if token.is_empty() {
            return Err(KeyError::TokenEmpty { path: path.clone() });
        }
        Ok(token.to_string())
    }

    /// One unsigned `AssumeRoleWithWebIdentity`: the keys and when they expire.
    async fn assume_role(
        &self,
        sts: Option<StsClient<'_>>,
    ) -> Result<(Credentials, SystemTime), KeyError> {
        let config = &self.config;
        let failed = |problem: ExchangeProblem| KeyError::Exchange {
            role_arn: config.role_arn.clone(),
            endpoint: config.sts_endpoint.clone(),
            problem,
        };
        let Some(sts) = sts else {
            return Err(failed(ExchangeProblem::EndpointRefused));
        };
        let token = self.token()?;
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", "AssumeRoleWithWebIdentity")
            .append_pair("Version", "2011-06-15")
            .append_pair("RoleArn", &config.role_arn)
            .append_pair("RoleSessionName", &config.session_name)
            .append_pair("WebIdentityToken", &token)
            .finish();
        let request = http::Request::post(&config.sts_endpoint)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::USER_AGENT, "wasm-ccm")
            .body(transport::full_body(form))
            .map_err(|error| failed(ExchangeProblem::Request(Arc::new(error))))?;
        let limits = sts.limits;
        let deadline =
            limits.connect_timeout + limits.first_byte_timeout + limits.between_bytes_timeout;
        let exchange = async {
            let response = sts
                .client
                .request(request)
                .await
                .map_err(|error| failed(ExchangeProblem::Send(exchange_error(&error))))?;
            let status = response.status();
            let body = http_body_util::Limited::new(response.into_body(), MAX_STS_ANSWER)
                .collect()
                .await
                .map_err(|error| {
                    if error.is::<http_body_util::LengthLimitError>() {
                        failed(ExchangeProblem::TooLarge)
                    } else {
                        failed(ExchangeProblem::Read(Arc::from(error)))
                    }
                })?
                .to_bytes();
            Ok::<_, KeyError>((status, body))
        };
        let (status, body) = tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| failed(ExchangeProblem::Timeout(deadline)))??;
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() {
            let code = xml_text(&body, "Code").unwrap_or("no error code");
            let message = xml_text(&body, "Message").unwrap_or_default();
            return Err(failed(ExchangeProblem::Refused {
                status,
                code: code.to_string(),
                message: message.to_string(),
            }));
        }
        let field = |tag: &'static str| {
            xml_text(&body, tag)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| failed(ExchangeProblem::Missing(tag)))
        };
        let expiration = field("Expiration")?;
        let expires = chrono::DateTime::parse_from_rfc3339(expiration).map_err(|error| {
            failed(ExchangeProblem::Expiration {
                value: expiration.to_string(),
                error,
            })
        })?;
        let expires = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(expires.timestamp()).unwrap_or(0));
        let access_key_id = field("AccessKeyId")?;
        let session_token = field("SessionToken")?;
        let header_ok = |value: &str| value.bytes().all(|b| b.is_ascii_graphic());
        if !header_ok(access_key_id) || !header_ok(session_token) {
            return Err(failed(ExchangeProblem::NotHeaderSafe));
        }
        let credentials = Credentials::new(
            access_key_id,
            field("SecretAccessKey")?,
            Some(session_token.to_string()),
            Some(expires),
            "wasm-ccm-web-identity",
        );
        Ok((credentials, expires))
    }
}

#[cfg(test)]
impl Keys {
    /// Static keys, for tests of signing.
    pub(in super::super) fn for_test(id: &str, secret: &str, token: Option<&str>) -> Keys {
        Keys::new(
            Credentials::new(id, secret, token.map(String::from), None, "test"),
            None,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::super::super::dns::Resolver;
    use super::super::super::pool::{Connections, PoolLimits};
    use super::*;

    /// A stand-in STS on loopback: answers each `AssumeRoleWithWebIdentity` with keys
    /// `ASIA<n>` expiring `expires_in` seconds from now (or `status` with an error), after a
    /// permit from `gate` when there is one; keeps the forms it was sent.
    struct FakeSts {
        url: String,
        forms: Arc<Mutex<Vec<String>>>,
        gate: Arc<tokio::sync::Semaphore>,
        connections: Arc<Connections>,
    }

    impl FakeSts {
        /// The gate's transport to this STS, as the gate hands it to an exchange.
        fn via(&self) -> Option<StsClient<'_>> {
            via(&self.connections)
        }
    }

    fn limits() -> Limits {
        super::super::super::EgressConfig::default().limits
    }

    /// The gate's own pooled transport to `origin` alone.
    fn transport(origin: &str) -> Arc<Connections> {
        let grant: HostPattern = origin.trim_end_matches('/').parse().unwrap();
        Arc::new(Connections::new(
            &[grant],
            &transport::tls_config(&[]),
            &Arc::new(Resolver::new(None)),
            limits(),
            PoolLimits::default(),
        ))
    }

    fn via(connections: &Connections) -> Option<StsClient<'_>> {
        Some(StsClient {
            client: connections.client(0).unwrap(),
            limits: limits(),
        })
    }

    async fn fake_sts(status: u16, expires_in: i64, held: bool) -> FakeSts {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let forms = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(tokio::sync::Semaphore::new(if held { 0 } else { 1000 }));
        let (kept, permits) = (forms.clone(), gate.clone());
        let served = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (kept, permits, served) = (kept.clone(), permits.clone(), served.clone());
                tokio::spawn(async move {
                    let form = read_form(&mut socket).await;
                    kept.lock().unwrap().push(form);
                    permits.acquire().await.unwrap().forget();
                    let n = served.fetch_add(1, Ordering::SeqCst) + 1;
                    let expires = chrono::Utc::now() + chrono::Duration::seconds(expires_in);
                    let body = if status == 200 {
                        format!(
                            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
                             <AccessKeyId>ASIA{n}</AccessKeyId><SecretAccessKey>secret-{n}</SecretAccessKey>\
                             <SessionToken>token-{n}</SessionToken><Expiration>{}</Expiration>\
                             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
                            expires.to_rfc3339()
                        )
                    } else {
                        "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>".to_string()
                    };
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        let connections = transport(&url);
        FakeSts {
            url,
            forms,
            gate,
            connections,
        }
    }

    /// The body of one request.
    async fn read_form(socket: &mut tokio::net::TcpStream) -> String {
        let mut received = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&received).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    return text[end + 4..end + 4 + length].to_string();
                }
            }
            let read = socket.read(&mut chunk).await.unwrap();
            if read == 0 {
                return String::new();
            }
            received.extend_from_slice(&chunk[..read]);
        }
    }

    fn identity(sts: &FakeSts, token_file: &Path) -> Arc<WebIdentity> {
        let config = WebIdentityConfig::new(
            "arn:aws:iam::123456789012:role/ccm".into(),
            token_file.into(),
            "wasm-ccm".into(),
            sts.url.clone(),
        )
        .unwrap();
        match AwsKeys::web_identity(config) {
            AwsKeys::WebIdentity(identity) => identity,
            AwsKeys::Static(_) => unreachable!(),
        }
    }

    fn key_id(keys: &Keys) -> &str {
        keys.credentials().access_key_id()
    }

    fn token_file(token: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), format!("{token}\n")).unwrap();
        file
    }

    #[tokio::test]
    async fn web_identity_keys_are_exchanged_once_and_reused_while_fresh() {
        let sts = fake_sts(200, 3600, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let first = identity.current(sts.via()).await.unwrap();
        let second = identity.current(sts.via()).await.unwrap();
        assert_eq!((key_id(&first), key_id(&second)), ("ASIA1", "ASIA1"));
        assert_eq!(first.credentials().session_token(), Some("token-1"));
        let forms = sts.forms.lock().unwrap().clone();
        assert_eq!(forms.len(), 1, "{forms:?}");
        for field in [
            "Action=AssumeRoleWithWebIdentity",
            "Version=2011-06-15",
            "RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fccm",
            "RoleSessionName=wasm-ccm",
            "WebIdentityToken=token-one",
        ] {
            assert!(forms[0].contains(field), "{field} in {}", forms[0]);
        }
    }

    #[tokio::test]
    async fn keys_within_five_minutes_of_expiry_are_exchanged_again_for_the_token_now_in_the_file()
    {
        let sts = fake_sts(200, 60, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        assert_eq!(key_id(&identity.current(sts.via()).await.unwrap()), "ASIA1");
        std::fs::write(token.path(), "token-two").unwrap();
        assert_eq!(key_id(&identity.current(sts.via()).await.unwrap()), "ASIA2");
        let forms = sts.forms.lock().unwrap().clone();
        assert!(forms[0].contains("WebIdentityToken=token-one"), "{forms:?}");
        assert!(forms[1].contains("WebIdentityToken=token-two"), "{forms:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn requests_needing_keys_together_wait_for_one_exchange() {
        let sts = fake_sts(200, 3600, true).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                let identity = identity.clone();
                let connections = sts.connections.clone();
                tokio::spawn(async move { identity.current(via(&connections)).await })
            })
            .collect();
        // Let the first request reach STS and the others the exchange lock, then answer.
        while sts.forms.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        sts.gate.add_permits(1000);
        for request in waiting {
            assert_eq!(key_id(&request.await.unwrap().unwrap()), "ASIA1");
        }
        assert_eq!(sts.forms.lock().unwrap().len(), 1, "one exchange");
    }

    #[tokio::test]
    async fn a_refusal_exchanges_once_for_every_request_signed_with_the_refused_keys() {
        let sts = fake_sts(200, 3600, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let refused = identity.current(sts.via()).await.unwrap();
        let renewed = identity.after_refusal(&refused, sts.via()).await.unwrap();
        assert_eq!(key_id(&renewed), "ASIA2");
        // Another request refused with the same keys takes the new ones.
        let again = identity.after_refusal(&refused, sts.via()).await.unwrap();
        assert_eq!(key_id(&again), "ASIA2");
        assert_eq!(key_id(&identity.current(sts.via()).await.unwrap()), "ASIA2");
        assert_eq!(sts.forms.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_failed_exchange_names_role_endpoint_and_answer_and_never_the_token() {
        let sts = fake_sts(403, 0, false).await;
        let token = token_file("the-secret-token");
        let identity = identity(&sts, token.path());
        let error = identity.current(sts.via()).await.unwrap_err().to_string();
        for part in [
            "STS AssumeRoleWithWebIdentity for arn:aws:iam::123456789012:role/ccm",
            &sts.url,
            "403 Forbidden: AccessDenied: Not authorized",
        ] {
            assert!(error.contains(part), "{part} in {error}");
        }
        assert!(!error.contains("the-secret-token"), "{error}");
        std::fs::remove_file(token.path()).unwrap();
        let unreadable = identity.current(sts.via()).await.unwrap_err().to_string();
        assert!(
            unreadable.contains("cannot read the web identity token file"),
            "{unreadable}"
        );
        assert!(AwsKeys::WebIdentity(identity).check().is_err());
    }

    #[tokio::test]
    async fn keys_still_valid_are_used_when_refreshing_them_early_fails() {
        let sts = fake_sts(200, 60, false).await;
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        assert_eq!(key_id(&identity.current(sts.via()).await.unwrap()), "ASIA1");
        std::fs::remove_file(token.path()).unwrap();
        assert_eq!(key_id(&identity.current(sts.via()).await.unwrap()), "ASIA1");
        assert_eq!(sts.forms.lock().unwrap().len(), 1);
    }

    #[test]
    fn the_sts_endpoint_is_stated_or_the_regional_one_of_the_rule_the_name_or_the_environment() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| value.to_string())
            }
        };
        const IRSA: [(&str, &str); 2] = [
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ccm"),
            (
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "/var/run/secrets/eks.amazonaws.com/token",
            ),
        ];
        let any: HostPattern = "https://*.amazonaws.com".parse().unwrap();
        let ec2: HostPattern = "https://ec2.eu-west-3.amazonaws.com".parse().unwrap();
        let endpoint = |vars, sts, region, target| {
            WebIdentityConfig::from_vars(env(vars), sts, region, target)
                .map(|config| config.sts_endpoint)
        };
        let stated = endpoint(&IRSA, Some("http://127.0.0.1:5000"), None, &any);
        assert_eq!(stated.unwrap(), "http://127.0.0.1:5000");
        let region = endpoint(&IRSA, None, Some("us-west-2"), &ec2);
        assert_eq!(region.unwrap(), "https://sts.us-west-2.amazonaws.com");
        let named = endpoint(&IRSA, None, None, &ec2);
        assert_eq!(named.unwrap(), "https://sts.eu-west-3.amazonaws.com");
        const REGIONAL: [(&str, &str); 4] = [
            IRSA[0],
            IRSA[1],
            ("AWS_DEFAULT_REGION", "ap-south-1"),
            ("AWS_REGION", "cn-north-1"),
        ];
        let from_env = endpoint(&REGIONAL, None, None, &any);
        assert_eq!(from_env.unwrap(), "https://sts.cn-north-1.amazonaws.com.cn");
        const DEFAULT_REGION: [(&str, &str); 3] =
            [IRSA[0], IRSA[1], ("AWS_DEFAULT_REGION", "ap-south-1")];
        let default = endpoint(&DEFAULT_REGION, None, None, &any);
        assert_eq!(default.unwrap(), "https://sts.ap-south-1.amazonaws.com");
        let none = endpoint(&IRSA, None, None, &any).unwrap_err().to_string();
        assert!(none.contains("needs the STS region"), "{none}");

        let config = WebIdentityConfig::from_vars(env(&IRSA), None, None, &ec2).unwrap();
        assert_eq!(config.session_name, "wasm-ccm");
        assert_eq!(config.role_arn, IRSA[0].1);
        let missing = WebIdentityConfig::from_vars(env(&IRSA[1..]), None, None, &ec2);
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("needs AWS_ROLE_ARN set")
        );
        let bad = endpoint(&IRSA, Some("sts.example.com"), None, &any)
            .unwrap_err()
            .to_string();
        assert!(bad.contains("is not a URL"), "{bad}");
    }

    #[test]
    fn the_token_goes_only_to_aws_sts_endpoints_over_https_or_to_those_listed() {
        for aws in [
            "https://sts.amazonaws.com",
            "https://sts.us-east-1.amazonaws.com/",
            "https://sts-fips.us-gov-west-1.amazonaws.com",
            "https://sts.cn-north-1.amazonaws.com.cn",
            "https://sts.us-iso-east-1.c2s.ic.gov",
            "https://sts.eu-west-3.api.aws",
            "https://STS.us-east-1.amazonaws.com:443",
        ] {
            assert_eq!(check_sts_endpoint(aws, &[]), Ok(()), "{aws}");
        }
        for other in [
            "http://sts.us-east-1.amazonaws.com",
            "https://sts.us-east-1.amazonaws.com:8443",
            "https://sts.us-east-1.amazonaws.com.evil.test",
            "https://ec2.us-east-1.amazonaws.com",
            "https://sts.not-a-region.amazonaws.com",
            "https://attacker.example.com",
            "http://127.0.0.1:5000",
        ] {
            let error = check_sts_endpoint(other, &[]).unwrap_err().to_string();
            assert!(
                error.contains("is not an AWS STS endpoint")
                    && error.contains("--sts-endpoint-allow (none)"),
                "{other}: {error}"
            );
        }
        let listed = [
            sts_endpoint_allowed("http://127.0.0.1:5000").unwrap(),
            sts_endpoint_allowed("https://sts.internal.example").unwrap(),
        ];
        assert_eq!(
            check_sts_endpoint("http://127.0.0.1:5000/", &listed),
            Ok(())
        );
        assert_eq!(
            check_sts_endpoint("https://sts.internal.example/", &listed),
            Ok(())
        );
        assert!(check_sts_endpoint("http://127.0.0.1:5001", &listed).is_err());
        assert!(check_sts_endpoint("http://sts.internal.example", &listed).is_err());
        for (entry, problem) in [
            ("http://sts.internal.example", "plain HTTP"),
            ("http://10.0.0.5:8080", "plain HTTP"),
            ("https://*.example.com", "names every subdomain"),
            ("sts.example.com", "missing scheme"),
        ] {
            let error = sts_endpoint_allowed(entry).unwrap_err().to_string();
            assert!(error.contains(problem), "{entry}: {error}");
        }
        assert!(sts_endpoint_allowed("http://[::1]:5000").is_ok());
    }

    #[tokio::test]
    async fn the_exchange_goes_through_the_gates_address_check_and_reads_a_bounded_answer() {
        // A name that resolves inward is refused, as for any egress connection.
        let sts = fake_sts(200, 3600, false).await;
        let port = sts.url.rsplit(':').next().unwrap().trim_end_matches('/');
        let localhost = format!("http://localhost:{port}/");
        let by_name = transport(&localhost);
        let token = token_file("token-one");
        let identity = identity(&sts, token.path());
        let named = WebIdentityConfig::new(
            "arn:aws:iam::123456789012:role/ccm".into(),
            token.path().into(),
            "wasm-ccm".into(),
            localhost,
        )
        .unwrap();
        let AwsKeys::WebIdentity(named) = AwsKeys::web_identity(named) else {
            unreachable!()
        };
        let refused = named.current(via(&by_name)).await.unwrap_err().to_string();
        assert!(refused.contains("loopback"), "{refused}");
        assert!(sts.forms.lock().unwrap().is_empty(), "the token never left");
        // Not allowed at all: nothing is sent.
        let error = identity.current(None).await.unwrap_err().to_string();
        assert!(
            error.contains("not one the manager sends its web identity token to"),
            "{error}"
        );
        assert!(sts.forms.lock().unwrap().is_empty());

        // An answer over the bound fails the exchange.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_form(&mut socket).await;
            let body = "x".repeat(MAX_STS_ANSWER + 1);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        });
        let large = transport(&url);
        let config = WebIdentityConfig::new(
            "arn:aws:iam::123456789012:role/ccm".into(),
            token.path().into(),
            "wasm-ccm".into(),
            url,
        )
        .unwrap();
        let AwsKeys::WebIdentity(identity) = AwsKeys::web_identity(config) else {
            unreachable!()
        };
        let error = identity.current(via(&large)).await.unwrap_err().to_string();
        assert!(error.contains("the answer is over 65536 bytes"), "{error}");
    }

    #[test]
    fn static_keys_come_from_a_directory_with_an_optional_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDEXAMPLE\n").unwrap();
        std::fs::write(dir.path().join("AWS_SECRET_ACCESS_KEY"), "the-secret\n").unwrap();
        let keys = AwsKeys::from_dir(dir.path());
        let AwsKeys::Static(read) = &keys else {
            unreachable!()
        };
        let long_term = read.current().unwrap();
        assert_eq!(key_id(&long_term), "AKIDEXAMPLE");
        assert_eq!(long_term.credentials().secret_access_key(), "the-secret");
        assert_eq!(long_term.credentials().session_token(), None);
        assert!(!format!("{keys:?}").contains("the-secret"), "{keys:?}");

        // A rotated file is read again (at most a second later).
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDROTATED").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while key_id(&read.current().unwrap()) != "AKIDROTATED" {
            assert!(Instant::now() < deadline, "the rotated key is never read");
            std::thread::sleep(Duration::from_millis(50));
        }

        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKID\nEXAMPLE").unwrap();
        let keys = AwsKeys::from_dir(dir.path());
        let error = keys.check().unwrap_err().to_string();
        assert!(error.contains("not allowed in a header"), "{error}");
        std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), "AKIDEXAMPLE").unwrap();
        std::fs::remove_file(dir.path().join("AWS_SECRET_ACCESS_KEY")).unwrap();
        let error = AwsKeys::from_dir(dir.path())
            .check()
            .unwrap_err()
            .to_string();
        assert!(error.contains("cannot read"), "{error}");
    }
}

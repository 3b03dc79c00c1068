//! Talking to OCI registries over the distribution API (oci-client's types, our requests):
//! manifests and blobs in, artifacts out, with the transport policy an operator expects of a
//! controller:
//!
//! - HTTPS always, plain HTTP only for registries named in `--insecure-registry`;
//! - transient failures (no connection, timeouts, 5xx, 429) are retried with exponential
//!   backoff, [`ATTEMPTS`] times at most; 401, 403 and 404 fail at once;
//! - every error says which registry and what to do (a TLS failure suggests
//!   `--insecure-registry`, a 401 names `--registry-config`), and never shows a credential;
//! - the credentials (none, a user name and password, an identity token) are exchanged
//!   for an access token ([`token`]) before each operation where the registry asks for one
//!   (an access token is good for one repository only);
//! - every request is made here, with reqwest: oci-client's own requests read manifests,
//!   token answers and error answers whole, so only its types are used. Nothing a registry
//!   answers is held past a bound: a manifest is read in
//!   chunks and refused past the size asked for ([`super::layout::MAX_MANIFEST_BYTES`] for a
//!   component's, less for a signature's), a layer past its stated size (at most
//!   [`MAX_COMPONENT_BYTES`]), a token answer past [`token::MAX_ANSWER_BYTES`], an error
//!   answer past [`MAX_ERROR_BYTES`], a referrers list as a manifest; and each attempt has a
//!   deadline ([`MANIFEST_DEADLINE`], [`BLOB_DEADLINE`]) besides the connect and read
//!   timeouts;
//! - a push uploads each blob whole (one `PUT`, as oras and containerd do) where the
//!   registry says (`Location`: over HTTPS unless `--insecure-registry` names its host, with
//!   the credentials only when it is the registry's own origin, as docker sends them), then
//!   puts the manifest, each step answered by exactly the status the distribution spec
//!   names;
//! - what a registry or its token service says is quoted in errors (and so in logs, the
//!   terminal and a `CloudProvider`'s status) one line at a time, cut and escaped;
//! - a layer descriptor is the registry's word: one naming other places to fetch it from
//!   (`urls`) or whose digest is none is refused before any request;
//! - a provider pull asks for image manifests only; image indexes (the manager's own
//!   multi-platform image) only the `artifact` commands ask for.
//! - a push is preceded by a check that costs one or two requests
//!   ([`RegistryClient::check_push`]: the registry answers, the credentials are taken), which
//!   `provider push` makes before it compiles the component.

use std::future::Future;
use std::sync::{Once, OnceLock};
use std::time::Duration;

use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use reqwest::StatusCode;

use super::credentials::{Credential, RegistryCredentials};
use super::layout::{INDEX_TYPES, MANIFEST_TYPES, MAX_COMPONENT_BYTES, Packed, digest_like};
use super::reference::OciRef;
use token::{Access, Grant, TokenError, quoted};

mod token;

/// What the manager calls itself to registries and token services.
const USER_AGENT: &str = concat!("wasm-ccm/", env!("CARGO_PKG_VERSION"));

/// Attempts of one registry request before a transient failure is reported.
pub const ATTEMPTS: u32 = 4;
/// The first retry's delay; each further one doubles it (250 ms, 500 ms, 1 s).
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The errors of a registry's error answer an error quotes.
const ENVELOPE_ERRORS_QUOTED: usize = 3;
/// The most of an error answer read.
pub const MAX_ERROR_BYTES: usize = 4096;

/// The longest one attempt at a manifest, or at an access token, may take.
pub const MANIFEST_DEADLINE: Duration = Duration::from_secs(60);
/// The longest one attempt at a layer may take (128 MiB at a few MB/s).
pub const BLOB_DEADLINE: Duration = Duration::from_secs(600);

/// Why a registry request failed, by what the operator should do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// 404: no such repository, tag or digest.
    #[error("not found in the registry ({0})")]
    NotFound(String),
    /// 401: no credentials, or wrong ones.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: the credentials may not read (or write) this repository.
    #[error("access denied by the registry ({0})")]
    Denied(String),
    /// The registry could not be reached, or kept failing, for [`ATTEMPTS`] attempts.
    #[error("registry unreachable after {attempts} attempts: {error}")]
    Unreachable {
        /// How many attempts were made.
        attempts: u32,
        /// The last failure.
        error: String,
    },
    /// TLS failed: most often a plain-HTTP registry reached over HTTPS.
    #[error(
        "TLS with {registry} failed ({error}); if this registry serves plain HTTP, pass --insecure-registry {registry}"
    )]
    Tls {
        /// `host[:port]`.
        registry: String,
        /// The TLS error.
        error: String,
    },
    /// Content whose digest is not the one asked for.
    #[error("{what} does not match its digest: expected {expected}, got {actual}")]
    DigestMismatch {
        /// `the manifest` or `layer sha256:…`.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of what arrived.
        actual: String,
    },
    /// Anything else the registry or the protocol got wrong.
    #[error("{0}")]
    Protocol(String),
}

impl RegistryError {
    fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unreachable { .. })
    }
}

impl From<TokenError> for RegistryError {
    fn from(error: TokenError) -> RegistryError {
        match error {
            TokenError::Refused { .. } | TokenError::NoBearerChallenge { .. } => {
                RegistryError::Unauthorized(error.to_string())
            }
            TokenError::Unavailable(error) => RegistryError::Unreachable { attempts: 1, error },
            TokenError::Tls { registry, error } => RegistryError::Tls { registry, error },
            TokenError::Protocol(error) => RegistryError::Protocol(error),
        }
    }
}

/// A registry client with the operator's transport and credential settings.
pub struct RegistryClient {
    insecure: Vec<String>,
    /// For token exchanges; made on first use.
    token_http: OnceLock<reqwest::Client>,
    /// For everything else; made on first use.
    http: OnceLock<reqwest::Client>,
    credentials: RegistryCredentials,
}

impl RegistryClient {
    /// A client that speaks plain HTTP only to `insecure` registries (`host:port`).
    pub fn new(insecure: &[String], credentials: RegistryCredentials) -> RegistryClient {
        install_crypto_provider();
        RegistryClient {
            insecure: insecure.to_vec(),
            token_http: OnceLock::new(),
            http: OnceLock::new(),
            credentials,
        }
    }

    /// How one operation on `oci`'s repository authenticates: the registry token
    /// `--registry-config` has, or what the registry asks for given the credentials (an
    /// access token from its token service, basic auth, nothing).
    async fn connect(
        &self,
        oci: &OciRef,
        operation: RegistryOperation,
    ) -> Result<RegistryAuth, RegistryError> {
        let credential = self.credentials.credential(&oci.registry);
        let grant = match credential {
            Some(Credential::Bearer(token)) => return Ok(RegistryAuth::Bearer(token.clone())),
            Some(Credential::IdentityToken(token)) => Grant::IdentityToken(token),
            Some(Credential::Basic { username, password }) => Grant::Basic { username, password },
            None => Grant::Anonymous,
        };
        let reference = reference(oci);
        let exchange = token::Exchange {
            // As requests name it: `docker.io` is asked as `index.docker.io`.
            registry: reference.resolve_registry(),
            repository: &oci.repository,
            push: matches!(operation, RegistryOperation::Push),
            insecure: &self.insecure,
            grant,
        };
        let http = self
            .token_http
            .get_or_init(|| token::http_client(USER_AGENT));
        let access = retry(oci, || {
            let asked = async { exchange.access(http).await.map_err(RegistryError::from) };
            within(MANIFEST_DEADLINE, "no access token", asked)
        })
        .await?;
        Ok(match (access, grant) {
            (Access::Bearer(token), _) => RegistryAuth::Bearer(token),
            (Access::Basic, Grant::Basic { username, password }) => {
                RegistryAuth::Basic(username.to_string(), password.to_string())
            }
            (Access::Basic | Access::Open, _) => RegistryAuth::Anonymous,
        })
    }

    /// The manifest `oci` names (its digest when pinned, else its tag), as bytes with their
    /// digest, refused past `max_bytes`. The digest is computed here, and must equal a
    /// pinned one.
    pub async fn manifest(
        &self,
        oci: &OciRef,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, String), RegistryError> {
        self.manifest_of(oci, max_bytes, &MANIFEST_TYPES).await
    }

    /// As [`RegistryClient::manifest`], an image index accepted too: for the manager's own
    /// release artifacts (a multi-platform image) and referrers lists.
    pub async fn manifest_or_index(
        &self,
        oci: &OciRef,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, String), RegistryError> {
        let accepted = [MANIFEST_TYPES, INDEX_TYPES].concat();
        self.manifest_of(oci, max_bytes, &accepted).await
    }

    async fn manifest_of(
        &self,
        oci: &OciRef,
        max_bytes: u64,
        accepted: &[&str],
    ) -> Result<(Vec<u8>, String), RegistryError> {
        let reference = reference(oci);
        let path = format!(
            "manifests/{}",
            reference.digest().or(reference.tag()).unwrap_or("latest")
        );
        let bytes = self
            .document(oci, &path, accepted, max_bytes, "manifest")
            .await?;
        // The identity is the digest in the algorithm pinned, sha256 otherwise.
        let digest = digest_like(oci.digest.as_deref().unwrap_or_default(), &bytes);
        if let Some(pinned) = &oci.digest
            && *pinned != digest
        {
            return Err(RegistryError::DigestMismatch {
                what: "the manifest".into(),
                expected: pinned.clone(),
                actual: digest,
            });
        }
        Ok((bytes, digest))
    }

    /// The referrers of the manifest `digest` in `oci`'s repository as the registry's
    /// referrers API lists them (an image index, refused past `max_bytes`); `None` when the
    /// registry has no referrers API (registries before OCI 1.1, Debian's `docker-registry`
    /// among them, answer 404).
    pub async fn referrers(
        &self,
        oci: &OciRef,
        digest: &str,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let path = format!("referrers/{digest}");
        let listed = self
            .document(oci, &path, &INDEX_TYPES, max_bytes, "referrers list")
            .await;
        match listed {
            Ok(bytes) => Ok(Some(bytes)),
            Err(RegistryError::NotFound(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// What `GET /v2/REPOSITORY/PATH` answers in `oci`'s repository (`what` it is, for
    /// errors), as [`RegistryClient::bounded_get`] reads it, each attempt within
    /// [`MANIFEST_DEADLINE`], transient failures retried.
    async fn document(
        &self,
        oci: &OciRef,
        path: &str,
        accepted: &[&str],
        max_bytes: u64,
        what: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let reference = reference(oci);
        let auth = self.connect(oci, RegistryOperation::Pull).await?;
        let late = format!("no whole {what}");
        retry(oci, || {
            let fetched = async {
                let fetched = self.bounded_get(&reference, &auth, path, accepted, max_bytes);
                fetched.await.map_err(|error| match error {
                    Fetch::Oci(error) => classify(error, oci, &self.credentials),
                    Fetch::TooLarge => RegistryError::Protocol(format!(
                        "the {what} of {} is larger than {max_bytes} bytes; refused",
                        oci.repository
                    )),
                })
            };
            within(MANIFEST_DEADLINE, &late, fetched)
        })
        .await
    }

    /// The blob `layer` describes, checked against its digest and size. The descriptor is
    /// the registry's word: its digest must be one (it goes into the request's path) and it
    /// may name no other place to fetch from (`urls`, which registry clients follow to any
    /// host, outside `--insecure-registry`'s rule). Read as a manifest is, up to its stated
    /// size, each attempt within [`BLOB_DEADLINE`].
    pub async fn blob(
        &self,
        oci: &OciRef,
        layer: &OciDescriptor,
    ) -> Result<Vec<u8>, RegistryError> {
        super::reference::check_digest(&layer.digest)
            .map_err(|problem| RegistryError::Protocol(format!("a layer's {problem}")))?;
        if layer.urls.as_ref().is_some_and(|urls| !urls.is_empty()) {
            return Err(RegistryError::Protocol(format!(
                "layer {} names other places to fetch it from (urls); refused",
                layer.digest
            )));
        }
        let reference = reference(oci);
        let auth = self.connect(oci, RegistryOperation::Pull).await?;
        let limit = layer.size.clamp(0, MAX_COMPONENT_BYTES as i64) as u64;
        let path = format!("blobs/{}", layer.digest);
        let bytes = retry(oci, || {
            let pulled = async {
                let pulled = self.bounded_get(&reference, &auth, &path, &["*/*"], limit);
                pulled.await.map_err(|error| match error {
                    Fetch::Oci(error) => classify(error, oci, &self.credentials),
                    Fetch::TooLarge => RegistryError::Protocol(format!(
                        "layer {} is larger than the {limit} bytes its manifest states (at most \
                         {MAX_COMPONENT_BYTES}); refused",
                        layer.digest
                    )),
                })
            };
            within(BLOB_DEADLINE, "no whole layer", pulled)
        })
        .await?;
        let actual = digest_like(&layer.digest, &bytes);
        if actual != layer.digest {
            return Err(RegistryError::DigestMismatch {
                what: format!("layer {}", layer.digest),
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Push `packed` as `oci` (its tag; a digest in `oci` must be the packed manifest's).
    pub async fn push(&self, oci: &OciRef, packed: &Packed) -> Result<(), RegistryError> {
        if let Some(pinned) = &oci.digest
            && *pinned != packed.manifest.1
        {
            return Err(RegistryError::DigestMismatch {
                what: "the packed manifest".into(),
                expected: pinned.clone(),
                actual: packed.manifest.1.clone(),
            });
        }
        self.push_manifest(
            oci,
            &[&packed.layer, &packed.config],
            &packed.manifest.0,
            super::layout::OCI_MANIFEST,
        )
        .await
    }

    /// Whether `oci`'s registry answers, over the protocol it is reached by (TLS unless
    /// `--insecure-registry`), and takes this client's credentials for a push (a token
    /// exchanged, a token service's challenge answered): `provider push` asks before it
    /// compiles, so a registry it cannot reach fails in a second, not after a compile.
    pub async fn check_push(&self, oci: &OciRef) -> Result<(), RegistryError> {
        if !matches!(
            self.credentials.credential(&oci.registry),
            Some(Credential::Bearer(_))
        ) {
            // Asks `/v2/`, and the token service if the registry names one.
            return self.connect(oci, RegistryOperation::Push).await.map(drop);
        }
        // A registry token goes as it is, asking nothing: ask `/v2/` (any answer, 401 too,
        // is a registry reached).
        let registry = &oci.registry;
        let url = format!("{}://{registry}/v2/", self.scheme(registry));
        retry(oci, || {
            let asked = async {
                self.http()
                    .get(&url)
                    .send()
                    .await
                    .map(drop)
                    .map_err(OciDistributionError::RequestError)
            };
            self.classified_within(oci, MANIFEST_DEADLINE, "no answer from the registry", asked)
        })
        .await
    }

    /// The client for everything but token exchanges.
    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| http_client(&self.insecure))
    }

    /// `SCHEME://REGISTRY/v2/REPOSITORY/`, where `reference`'s requests go.
    fn repository_url(&self, reference: &Reference) -> String {
        let registry = reference.resolve_registry();
        format!(
            "{}://{registry}/v2/{}/",
            self.scheme(registry),
            reference.repository()
        )
    }

    /// `http` for an `--insecure-registry`, else `https`.
    fn scheme(&self, registry: &str) -> &'static str {
        if self.insecure.iter().any(|insecure| insecure == registry) {
            "http"
        } else {
            "https"
        }
    }

    /// Push `blobs` (bytes and digest), then the `manifest` of `media_type` (an image
    /// manifest, or an index) that names them, as `oci` (its tag, or the manifest's digest).
    pub async fn push_manifest(
        &self,
        oci: &OciRef,
        blobs: &[&(Vec<u8>, String)],
        manifest: &[u8],
        media_type: &str,
    ) -> Result<(), RegistryError> {
        let reference = reference(oci);
        let auth = self.connect(oci, RegistryOperation::Push).await?;
        for (bytes, digest) in blobs {
            retry(oci, || {
                let upload = self.upload(&reference, &auth, bytes, digest);
                self.classified_within(oci, BLOB_DEADLINE, "no blob upload done", upload)
            })
            .await?;
        }
        let url = format!(
            "{}manifests/{}",
            self.repository_url(&reference),
            reference.digest().or(reference.tag()).unwrap_or("latest")
        );
        retry(oci, || {
            let request = self
                .http()
                .put(&url)
                .header(http::header::CONTENT_TYPE, media_type)
                .body(manifest.to_vec());
            let put = async {
                succeeded(
                    authorized(request, &auth).send().await,
                    &url,
                    StatusCode::CREATED,
                )
                .await
                .map(drop)
            };
            self.classified_within(oci, MANIFEST_DEADLINE, "no manifest upload done", put)
        })
        .await
    }

    /// `attempt`, an oci-client-style request, within `deadline` (`late` says what was not
    /// done in time), its failure classified.
    async fn classified_within<T>(
        &self,
        oci: &OciRef,
        deadline: Duration,
        late: &str,
        attempt: impl Future<Output = Result<T, OciDistributionError>>,
    ) -> Result<T, RegistryError> {
        let classified = async {
            attempt
                .await
                .map_err(|error| classify(error, oci, &self.credentials))
        };
        within(deadline, late, classified).await
    }

    /// Upload `bytes`, the blob `digest`, to `reference`'s repository: an upload started
    /// (`POST …/blobs/uploads/`), then the whole blob put where the registry says
    /// (`Location`, with `?digest=`), the credentials only to the registry's own origin.
    async fn upload(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(), OciDistributionError> {
        let url = format!("{}blobs/uploads/", self.repository_url(reference));
        let request = self
            .http()
            .post(&url)
            .header(http::header::CONTENT_LENGTH, "0");
        let started = succeeded(
            authorized(request, auth).send().await,
            &url,
            StatusCode::ACCEPTED,
        )
        .await?;
        let location = started
            .headers()
            .get(http::header::LOCATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|location| started.url().join(location).ok());
        let Some(mut target) = location else {
            return Err(OciDistributionError::SpecViolationError(format!(
                "{url} answered without an upload location"
            )));
        };
        if target.scheme() != "https" && !self.insecure.contains(&host_port(&target)) {
            return Err(OciDistributionError::SpecViolationError(format!(
                "{url} names an upload location that leaves HTTPS ({}); refused",
                quoted(target.as_str())
            )));
        }
        target.query_pairs_mut().append_pair("digest", digest);
        // The registry's own origin as it was asked for, not where a redirect took the
        // request: credentials go nowhere else.
        let own = reqwest::Url::parse(&url).is_ok_and(|asked| asked.origin() == target.origin());
        let request = self
            .http()
            .put(target.clone())
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec());
        let request = if own {
            authorized(request, auth)
        } else {
            request
        };
        // A transport error would quote the location, whose query may carry a signature.
        let sent = request.send().await.map_err(reqwest::Error::without_url);
        succeeded(sent, target.as_str(), StatusCode::CREATED)
            .await
            .map(drop)
    }
}

/// `attempt` within `deadline`; past it, an [`RegistryError::Unreachable`] saying `late` (what
/// was not done) and the deadline, which [`retry`] tries again.
async fn within<T>(
    deadline: Duration,
    late: &str,
    attempt: impl Future<Output = Result<T, RegistryError>>,
) -> Result<T, RegistryError> {
    tokio::time::timeout(deadline, attempt)
        .await
        .unwrap_or_else(|_| {
            Err(RegistryError::Unreachable {
                attempts: 1,
                error: format!("{late} within {deadline:?}"),
            })
        })
}

/// `host[:port]` of `url`, as `--insecure-registry` names hosts.
pub(super) fn host_port(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => String::new(),
    }
}

/// `request` with `auth`'s credentials.
fn authorized(request: reqwest::RequestBuilder, auth: &RegistryAuth) -> reqwest::RequestBuilder {
    match auth {
        RegistryAuth::Bearer(token) => request.bearer_auth(token),
        RegistryAuth::Basic(username, password) => request.basic_auth(username, Some(password)),
        RegistryAuth::Anonymous => request,
    }
}

/// `response` if it has the `expected` status; else why not: another success or a redirect
/// not followed (a push redirected into a `GET` answers 200 having stored nothing), or an
/// error from its status and at most [`MAX_ERROR_BYTES`] of its body (an error envelope in a
/// 4xx, as the distribution spec has it), `url` naming the request.
async fn succeeded(
    response: Result<reqwest::Response, reqwest::Error>,
    url: &str,
    expected: StatusCode,
) -> Result<reqwest::Response, OciDistributionError> {
    let mut response = response?;
    let status = response.status();
    if status == expected {
        return Ok(response);
    }
    if status.is_success() || status.is_redirection() {
        // A push redirected into a GET answers 200 without storing anything.
        return Err(OciDistributionError::SpecViolationError(format!(
            "{url} answered {status} instead of {expected}"
        )));
    }
    let mut message = Vec::new();
    while let Some(chunk) = response.chunk().await?
        && message.len() < MAX_ERROR_BYTES
    {
        message.extend_from_slice(&chunk);
    }
    let message = String::from_utf8_lossy(&message[..message.len().min(MAX_ERROR_BYTES)]);
    let envelope = status
        .is_client_error()
        .then(|| serde_json::from_str(&message).ok())
        .flatten();
    Err(match envelope {
        Some(envelope) => OciDistributionError::RegistryError {
            envelope,
            url: url.to_string(),
        },
        None => OciDistributionError::ServerError {
            code: status.as_u16(),
            url: url.to_string(),
            message: message.into_owned(),
        },
    })
}

/// Why a bounded fetch failed.
enum Fetch {
    /// As a request fails, in oci-client's terms.
    Oci(OciDistributionError),
    /// More bytes than asked for.
    TooLarge,
}

impl From<reqwest::Error> for Fetch {
    fn from(error: reqwest::Error) -> Fetch {
        Fetch::Oci(OciDistributionError::RequestError(error))
    }
}

impl RegistryClient {
    /// What `GET /v2/REPOSITORY/PATH` answers for `reference`'s repository (`manifests/TAG`,
    /// `referrers/DIGEST`, `blobs/DIGEST`), asking for the media types `accepted`,
    /// authenticated by `auth` (see [`RegistryClient::connect`]), read in chunks and refused
    /// past `max_bytes`; an error answer is read as [`succeeded`] reads it.
    async fn bounded_get(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        path: &str,
        accepted: &[&str],
        max_bytes: u64,
    ) -> Result<Vec<u8>, Fetch> {
        let url = format!("{}{path}", self.repository_url(reference));
        let request = self
            .http()
            .get(&url)
            .header(http::header::ACCEPT, accepted.join(", "));
        let mut response = succeeded(authorized(request, auth).send().await, &url, StatusCode::OK)
            .await
            .map_err(Fetch::Oci)?;
        if response
            .content_length()
            .is_some_and(|length| length > max_bytes)
        {
            return Err(Fetch::TooLarge);
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if (bytes.len() + chunk.len()) as u64 > max_bytes {
                return Err(Fetch::TooLarge);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }
}

/// The client of every request but token exchanges (manifests, referrers lists, layers,
/// pushes): as the token client, following up to five redirects (registry.k8s.io sends every `/v2/`
/// request to a regional registry, registries send layers to a CDN), to HTTPS only but for
/// `--insecure-registry` hosts. reqwest drops the `Authorization` header on a redirect to
/// another host.
fn http_client(insecure: &[String]) -> reqwest::Client {
    let insecure = insecure.to_vec();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        let url = attempt.url().clone();
        // reqwest drops the credentials on a hop to another origin than the last one, but
        // each hop starts from the first request's headers: a second hop within another
        // origin than the registry's would carry them there.
        let previous = attempt.previous();
        let elsewhere = previous
            .first()
            .zip(previous.last())
            .is_some_and(|(first, last)| first.origin() != last.origin());
        if previous.len() >= 5 {
            attempt.error("more than 5 redirects")
        } else if elsewhere
            && previous
                .last()
                .is_some_and(|last| last.origin() == url.origin())
        {
            attempt.error(format!(
                "a second redirect within {}, away from the registry; refused, as it would \
                 carry the registry's credentials there",
                host_port(&url)
            ))
        } else if url.scheme() == "https" || insecure.contains(&host_port(&url)) {
            attempt.follow()
        } else {
            attempt.error(format!("a redirect to {url} leaves HTTPS"))
        }
    });
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .redirect(policy)
        .build()
        .unwrap_or_default()
}

/// Run `request` until it succeeds, fails for good, or [`ATTEMPTS`] transient failures; an
/// [`RegistryError::Unreachable`] counts the attempts made.
async fn retry<T, F, Fut>(oci: &OciRef, mut request: F) -> Result<T, RegistryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RegistryError>>,
{
    let mut delay = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        let mut error = match request().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if let RegistryError::Unreachable { attempts, .. } = &mut error {
            *attempts = attempt;
        }
        if !error.is_transient() || attempt >= ATTEMPTS {
            return Err(error);
        }
        tracing::warn!(registry = %oci.registry, attempt, "registry request failed, retrying in {delay:?}: {error}");
        tokio::time::sleep(delay).await;
        delay *= 2;
        attempt += 1;
    }
}

/// oci-client's reference for `oci`: the digest when pinned (it wins), else the tag.
fn reference(oci: &OciRef) -> Reference {
    match (&oci.digest, &oci.tag) {
        (Some(digest), _) => {
            Reference::with_digest(oci.registry.clone(), oci.repository.clone(), digest.clone())
        }
        (None, tag) => Reference::with_tag(
            oci.registry.clone(),
            oci.repository.clone(),
            tag.clone().unwrap_or_default(),
        ),
    }
}

/// What a failure (in oci-client's terms) means for the operator.
fn classify(
    error: OciDistributionError,
    oci: &OciRef,
    credentials: &RegistryCredentials,
) -> RegistryError {
    let unauthorized = || {
        if credentials.has(&oci.registry) {
            RegistryError::Unauthorized(format!(
                "the registry rejected the credentials --registry-config has for {} (401)",
                oci.registry
            ))
        } else {
            RegistryError::Unauthorized(format!(
                "the registry requires credentials (401); --registry-config has none for {}",
                oci.registry
            ))
        }
    };
    // `retry` counts the attempts.
    let unreachable = |error: String| RegistryError::Unreachable { attempts: 1, error };
    match error {
        OciDistributionError::UnauthorizedError { .. } => unauthorized(),
        OciDistributionError::AuthenticationFailure(reason) => {
            RegistryError::Unauthorized(format!(
                "the registry's token service refused the credentials: {}",
                quoted(&reason)
            ))
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            // The registry's words, a few errors of one line each.
            let mut text: Vec<String> = envelope
                .errors
                .iter()
                .take(ENVELOPE_ERRORS_QUOTED)
                .map(|e| {
                    let code = serde_json::to_value(&e.code)
                        .ok()
                        .and_then(|code| code.as_str().map(str::to_string))
                        .unwrap_or_else(|| format!("{:?}", e.code));
                    format!("{code}: {}", quoted(&e.message))
                })
                .collect();
            if envelope.errors.len() > ENVELOPE_ERRORS_QUOTED {
                text.push(format!(
                    "and {} more",
                    envelope.errors.len() - ENVELOPE_ERRORS_QUOTED
                ));
            }
            let text = text.join("; ");
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                RegistryError::NotFound(text)
            } else if codes.contains(&&OciErrorCode::Unauthorized) {
                unauthorized()
            } else if codes.contains(&&OciErrorCode::Denied) {
                RegistryError::Denied(text)
            } else if codes.contains(&&OciErrorCode::Toomanyrequests) {
                unreachable(format!("rate limited (429): {text}"))
            } else {
                RegistryError::Protocol(format!("the registry refused the request: {text}"))
            }
        }
        OciDistributionError::ImageManifestNotFoundError(message) => {
            RegistryError::NotFound(quoted(&message))
        }
        OciDistributionError::ServerError { code, message, .. } => match code {
            401 => unauthorized(),
            403 => RegistryError::Denied(format!("403: {}", quoted(&message))),
            404 => RegistryError::NotFound(format!("404: {}", quoted(&message))),
            429 | 500.. => unreachable(format!("{code}: {}", quoted(&message))),
            _ => RegistryError::Protocol(format!("{code}: {}", quoted(&message))),
        },
        OciDistributionError::RequestError(error) => match error.status() {
            Some(status) if status.as_u16() == 401 => unauthorized(),
            Some(status) if status.as_u16() == 403 => RegistryError::Denied(status.to_string()),
            Some(status) if status.as_u16() == 404 => RegistryError::NotFound(status.to_string()),
            Some(status) if status.as_u16() == 429 || status.is_server_error() => {
                unreachable(status.to_string())
            }
            _ => match tls_error(&error) {
                Some(tls) => RegistryError::Tls {
                    registry: oci.registry.clone(),
                    error: tls,
                },
                None => unreachable(chain(&error)),
            },
        },
        OciDistributionError::IoError(error) => RegistryError::Protocol(quoted(&error.to_string())),
        // Their messages may quote the registry.
        other => RegistryError::Protocol(quoted(&other.to_string())),
    }
}

/// The TLS failure inside `error`, if it is one. (`io::Error::source` skips the error it
/// wraps, so wrapped I/O errors are opened by hand: reqwest's connector nests two.)
pub(super) fn tls_error(error: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(tls) = current.downcast_ref::<tokio_rustls::rustls::Error>() {
            return Some(tls.to_string());
        }
        source = match current.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => None,
            },
            None => current.source(),
        };
    }
    None
}

/// `error` and its causes on one line (reqwest's own message omits the cause), escaped and
/// cut to [`CHAIN_BYTES`]: a reqwest error names its URL, which a registry may choose (a
/// realm, a redirect's target).
pub(super) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    crate::text::ellipsized(crate::text::escaped(&text).into_owned(), CHAIN_BYTES)
}

/// The most of a transport error [`chain`] keeps.
const CHAIN_BYTES: usize = 512;

/// reqwest's rustls has no built-in crypto provider in this workspace: install ring, the
/// one every TLS client here uses, once per process.
fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    });
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;
    use crate::source::layout::{OCI_MANIFEST, sha256_digest};

    const MANIFEST: &[u8] = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.wasm.config.v0+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#;

    /// A registry on loopback whose manifest endpoint answers with `statuses` in turn (the
    /// last one repeating; 200 serves [`MANIFEST`]); returns its address and a count of
    /// manifest requests.
    async fn scripted_registry(statuses: &'static [u16]) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let count = Arc::new(AtomicUsize::new(0));
        let served = count.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let served = served.clone();
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let served = served.clone();
                    async move {
                        let mut response = http::Response::builder();
                        if !request.uri().path().contains("/manifests/") {
                            return Ok::<_, Infallible>(
                                response.status(200).body(Full::new(Bytes::new())).unwrap(),
                            );
                        }
                        let n = served.fetch_add(1, Ordering::SeqCst);
                        let status = statuses[n.min(statuses.len() - 1)];
                        let body = match status {
                            200 => {
                                response = response
                                    .header("content-type", OCI_MANIFEST)
                                    .header("docker-content-digest", crate::source::layout::sha256_digest(MANIFEST));
                                Bytes::from_static(MANIFEST)
                            }
                            404 => Bytes::from_static(
                                br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
                            ),
                            _ => Bytes::from_static(b"try again later"),
                        };
                        Ok(response.status(status).body(Full::new(body)).unwrap())
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        (addr, count)
    }

    /// A client of a [`scripted_registry`] (plain HTTP), the reference it serves, and the
    /// count of its manifest requests.
    async fn scripted_client(
        statuses: &'static [u16],
    ) -> (RegistryClient, OciRef, Arc<AtomicUsize>) {
        let (addr, count) = scripted_registry(statuses).await;
        let (client, oci) = client_of(addr);
        (client, oci, count)
    }

    /// A client without credentials of the registry at `addr` (plain HTTP), and the
    /// reference `p/simcloud:v1` there.
    fn client_of(addr: String) -> (RegistryClient, OciRef) {
        let client = RegistryClient::new(std::slice::from_ref(&addr), Default::default());
        let oci = OciRef {
            registry: addr,
            repository: "p/simcloud".into(),
            tag: Some("v1".into()),
            digest: None,
        };
        (client, oci)
    }

    async fn manifest_from(statuses: &'static [u16]) -> (Result<String, RegistryError>, usize) {
        manifest_within(statuses, crate::source::layout::MAX_MANIFEST_BYTES).await
    }

    /// The digest of the manifest a registry answering `statuses` serves, asked for at most
    /// `max_bytes`, and how many manifest requests it saw.
    async fn manifest_within(
        statuses: &'static [u16],
        max_bytes: u64,
    ) -> (Result<String, RegistryError>, usize) {
        let (client, oci, count) = scripted_client(statuses).await;
        let result = client
            .manifest(&oci, max_bytes)
            .await
            .map(|(_, digest)| digest);
        (result, count.load(Ordering::SeqCst))
    }

    /// A manifest past the size asked for is refused, not held: a registry answering
    /// gigabytes costs the manager nothing past the bound.
    #[tokio::test]
    async fn a_manifest_larger_than_asked_for_is_refused_unread() {
        let (refused, _) = manifest_within(&[200], 16).await;
        assert!(
            matches!(&refused, Err(RegistryError::Protocol(text)) if text.contains("larger than 16 bytes")),
            "{refused:?}"
        );
    }

    /// A layer descriptor is the registry's word: one naming other places to fetch from
    /// (oci-client would follow them to any host) or with a digest that is none (it would go
    /// into the request's path) is refused before any request.
    #[tokio::test]
    async fn a_layer_elsewhere_or_without_a_digest_is_refused_unrequested() {
        // (A request would be answered with an empty blob: a digest mismatch, not these.)
        let (client, oci, _) = scripted_client(&[200]).await;
        let elsewhere = OciDescriptor {
            media_type: "application/wasm".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 10,
            urls: Some(vec!["http://169.254.169.254/latest/meta-data/".into()]),
            annotations: None,
            artifact_type: None,
        };
        let refused = client.blob(&oci, &elsewhere).await;
        assert!(
            matches!(&refused, Err(RegistryError::Protocol(text)) if text.contains("(urls); refused")),
            "{refused:?}"
        );
        let pathless = OciDescriptor {
            digest: "sha256:../../../v2/other/blobs/x".into(),
            urls: None,
            ..elsewhere
        };
        let refused = client.blob(&oci, &pathless).await;
        assert!(
            matches!(&refused, Err(RegistryError::Protocol(text)) if text.starts_with("a layer's digest")),
            "{refused:?}"
        );
    }

    /// A body that never ends, counting the bytes it hands out.
    struct Endless(Arc<AtomicUsize>);

    static CHUNK: [u8; 64 * 1024] = [b'x'; 64 * 1024];

    impl hyper::body::Body for Endless {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
            self.0.fetch_add(CHUNK.len(), Ordering::SeqCst);
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                &CHUNK,
            )))))
        }
    }

    type Reply = http::Response<http_body_util::Either<Full<Bytes>, Endless>>;

    /// A registry on loopback where `route(ADDR, REQUEST, SENT)` answers every request
    /// (`SENT` counts what endless bodies handed out); a client of it (plain HTTP, no
    /// credentials), the reference `p/simcloud:v1`, and the count.
    async fn hostile_registry(
        route: fn(&str, &http::Request<hyper::body::Incoming>, &Arc<AtomicUsize>) -> Reply,
    ) -> (RegistryClient, OciRef, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let sent = Arc::new(AtomicUsize::new(0));
        let (served_addr, served_sent) = (addr.clone(), sent.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (addr, sent) = (served_addr.clone(), served_sent.clone());
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let reply = route(&addr, &request, &sent);
                    async move { Ok::<_, Infallible>(reply) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        let (client, oci) = client_of(addr);
        (client, oci, sent)
    }

    fn reply(status: u16, body: &'static [u8]) -> Reply {
        http::Response::builder()
            .status(status)
            .body(http_body_util::Either::Left(Full::new(Bytes::from_static(
                body,
            ))))
            .unwrap()
    }

    fn endless(sent: &Arc<AtomicUsize>) -> Reply {
        http::Response::builder()
            .status(200)
            .body(http_body_util::Either::Right(Endless(sent.clone())))
            .unwrap()
    }

    /// The token service is any URL a registry names, and its answer is read here, not by
    /// oci-client (which reads it whole): one that never ends costs 64 KiB, not the
    /// manager's memory, and is not asked again.
    #[tokio::test]
    async fn a_token_service_answering_without_end_is_refused_past_64_kib() {
        let (client, oci, sent) =
            hostile_registry(|addr, request, sent| match request.uri().path() {
                "/v2/" => {
                    let mut refused = reply(401, b"");
                    refused.headers_mut().insert(
                        http::header::WWW_AUTHENTICATE,
                        http::HeaderValue::from_str(&format!(
                            r#"Bearer realm="http://{addr}/token",service="hostile""#
                        ))
                        .unwrap(),
                    );
                    refused
                }
                "/token" => endless(sent),
                _ => reply(404, b""),
            })
            .await;
        let refused = client.manifest(&oci, 1 << 20).await;
        assert_refused_unread(refused, "answered more than 65536 bytes", &sent);
    }

    /// `refused` is a protocol error saying `needle`, and the endless answer behind it was
    /// dropped: what loopback's socket buffers took is a few MiB however fast the machine,
    /// where reading the whole answer would take gigabytes.
    fn assert_refused_unread<T: std::fmt::Debug>(
        refused: Result<T, RegistryError>,
        needle: &str,
        sent: &AtomicUsize,
    ) {
        assert!(
            matches!(&refused, Err(RegistryError::Protocol(text)) if text.contains(needle)),
            "{refused:?}"
        );
        let sent = sent.load(Ordering::SeqCst);
        assert!(sent < 64 << 20, "{sent} bytes sent");
    }

    /// A layer is read up to the size its manifest states, however much the registry sends.
    #[tokio::test]
    async fn a_layer_past_its_stated_size_is_refused_unread() {
        let (client, oci, sent) = hostile_registry(|_, request, sent| match request.uri().path() {
            "/v2/" => reply(200, b"{}"),
            path if path.starts_with("/v2/p/simcloud/blobs/") => endless(sent),
            _ => reply(404, b""),
        })
        .await;
        let layer = OciDescriptor {
            media_type: "application/wasm".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 10,
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        let refused = client.blob(&oci, &layer).await;
        assert_refused_unread(
            refused,
            "is larger than the 10 bytes its manifest states",
            &sent,
        );
    }

    /// What a registry says in an error answer reaches the operator's terminal, the log and
    /// a CloudProvider's status: a few of its errors, one short escaped line each.
    #[tokio::test]
    async fn what_a_registry_says_in_an_error_is_quoted_one_short_line_each() {
        let (client, oci, _) = hostile_registry(|_, request, _| match request.uri().path() {
            "/v2/" => reply(200, b"{}"),
            _ => {
                static ENVELOPE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
                    let message = format!(
                        r"\u001b]0;owned\u0007\u001b[2J{}\nlevel=error msg=forged",
                        "x".repeat(600)
                    );
                    let error = format!(r#"{{"code":"DENIED","message":"{message}"}}"#);
                    format!(r#"{{"errors":[{}]}}"#, vec![error; 5].join(","))
                });
                reply(403, ENVELOPE.as_bytes())
            }
        })
        .await;
        let refused = client.manifest(&oci, 1 << 20).await;
        let Err(RegistryError::Denied(text)) = &refused else {
            panic!("{refused:?}");
        };
        assert!(
            text.starts_with("DENIED: \\u{1b}]0;owned\\u{7}\\u{1b}[2Jxxx")
                && text.ends_with("; and 2 more"),
            "{text}"
        );
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\n']) && !text.contains("forged"),
            "{text}"
        );
        assert!(text.len() < 1024, "{} bytes", text.len());
    }

    /// `alice:pa55word` for `registry`, as `--registry-config` gives them (sent as
    /// `Basic YWxpY2U6cGE1NXdvcmQ=`).
    fn alice_at(registry: &str) -> RegistryCredentials {
        let config = format!(r#"{{"auths":{{"{registry}":{{"auth":"YWxpY2U6cGE1NXdvcmQ="}}}}}}"#);
        RegistryCredentials::parse(config.as_bytes()).unwrap()
    }

    /// A user name and password go to the registry as basic auth wherever it asks for no
    /// bearer token, `/v2/` open to anyone included (a repository may still want them);
    /// without credentials, nothing goes.
    #[tokio::test]
    async fn basic_credentials_go_to_a_registry_asking_for_no_bearer_token() {
        // `/v2/` open; a manifest refused (401), its `Authorization` header recorded.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let recorded = recorded.clone();
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let status = if request.uri().path() == "/v2/" {
                        200
                    } else {
                        recorded.lock().unwrap().push(
                            request
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .and_then(|value| value.to_str().ok())
                                .map(str::to_string),
                        );
                        401
                    };
                    async move { Ok::<_, Infallible>(reply(status, b"")) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service),
                );
            }
        });
        let (anonymous, oci) = client_of(addr.clone());
        let refused = anonymous.manifest(&oci, 1 << 20).await;
        assert!(
            matches!(&refused, Err(RegistryError::Unauthorized(text)) if text.contains("--registry-config has none")),
            "{refused:?}"
        );
        let logged_in = RegistryClient::new(std::slice::from_ref(&addr), alice_at(&addr));
        let refused = logged_in.manifest(&oci, 1 << 20).await;
        assert!(
            matches!(&refused, Err(RegistryError::Unauthorized(text)) if text.contains("rejected the credentials")),
            "{refused:?}"
        );
        assert_eq!(
            *seen.lock().unwrap(),
            [None, Some("Basic YWxpY2U6cGE1NXdvcmQ=".to_string())]
        );
    }

    /// A blob is pushed where the registry says, with the credentials only to the
    /// registry's own origin: an upload location elsewhere (a storage service's, or anyone's
    /// the registry names) gets the blob, not the password.
    #[tokio::test]
    async fn a_pushed_blob_carries_the_credentials_only_to_the_registrys_own_origin() {
        /// Each PUT's path and `Authorization` header, wherever it landed.
        static PUTS: std::sync::Mutex<Vec<(String, Option<String>)>> =
            std::sync::Mutex::new(Vec::new());
        static ELSEWHERE: OnceLock<String> = OnceLock::new();
        fn record(request: &http::Request<hyper::body::Incoming>) -> Reply {
            let authorization = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            PUTS.lock()
                .unwrap()
                .push((request.uri().path().to_string(), authorization));
            reply(201, b"")
        }
        let (_, elsewhere, _) = hostile_registry(|_, request, _| record(request)).await;
        ELSEWHERE.set(elsewhere.registry).unwrap();
        // The first upload stays in the registry (a relative location), the second goes
        // elsewhere.
        let (_, oci, _) = hostile_registry(|_, request, posts| {
            match (request.method().as_str(), request.uri().path()) {
                ("GET", "/v2/") => reply(200, b"{}"),
                ("POST", "/v2/p/simcloud/blobs/uploads/") => {
                    let location = match posts.fetch_add(1, Ordering::SeqCst) {
                        0 => "/v2/p/simcloud/blobs/uploads/1?_state=s".to_string(),
                        _ => format!("http://{}/storage/2", ELSEWHERE.get().unwrap()),
                    };
                    let mut started = reply(202, b"");
                    started.headers_mut().insert(
                        http::header::LOCATION,
                        http::HeaderValue::from_str(&location).unwrap(),
                    );
                    started
                }
                ("PUT", _) => record(request),
                _ => reply(404, b""),
            }
        })
        .await;
        let credentials = alice_at(&oci.registry);
        let insecure = [oci.registry.clone(), ELSEWHERE.get().unwrap().clone()];
        let client = RegistryClient::new(&insecure, credentials.clone());
        let (one, two) = (
            (b"one".to_vec(), sha256_digest(b"one")),
            (b"two".to_vec(), sha256_digest(b"two")),
        );
        client
            .push_manifest(&oci, &[&one, &two], MANIFEST, OCI_MANIFEST)
            .await
            .unwrap();
        let basic = Some("Basic YWxpY2U6cGE1NXdvcmQ=".to_string());
        assert_eq!(
            *PUTS.lock().unwrap(),
            [
                ("/v2/p/simcloud/blobs/uploads/1".to_string(), basic.clone()),
                ("/storage/2".to_string(), None),
                ("/v2/p/simcloud/manifests/v1".to_string(), basic),
            ]
        );

        // Over plain HTTP to a host --insecure-registry does not name: refused, unsent.
        let client = RegistryClient::new(std::slice::from_ref(&oci.registry), credentials);
        let refused = client
            .push_manifest(&oci, &[&one], MANIFEST, OCI_MANIFEST)
            .await;
        assert!(
            matches!(&refused, Err(RegistryError::Protocol(text)) if text.contains("names an upload location that leaves HTTPS")),
            "{refused:?}"
        );
        assert_eq!(PUTS.lock().unwrap().len(), 3);
    }

    /// A redirect away from the registry drops the credentials (reqwest), and a second one
    /// within that other host, which reqwest would send them with, is refused.
    #[tokio::test]
    async fn credentials_never_follow_a_redirect_away_from_the_registry() {
        /// Each request to the other host: its path and `Authorization` header.
        static SEEN: std::sync::Mutex<Vec<(String, Option<String>)>> =
            std::sync::Mutex::new(Vec::new());
        static ELSEWHERE: OnceLock<String> = OnceLock::new();
        fn redirect(to: String) -> Reply {
            let mut moved = reply(307, b"");
            moved.headers_mut().insert(
                http::header::LOCATION,
                http::HeaderValue::from_str(&to).unwrap(),
            );
            moved
        }
        let (_, elsewhere, _) = hostile_registry(|addr, request, _| {
            let path = request.uri().path().to_string();
            let authorization = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_string);
            SEEN.lock().unwrap().push((path.clone(), authorization));
            match path.as_str() {
                "/hop" => redirect(format!("http://{addr}/landed")),
                _ => {
                    let mut found = reply(200, MANIFEST);
                    found.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static(OCI_MANIFEST),
                    );
                    found
                }
            }
        })
        .await;
        ELSEWHERE.set(elsewhere.registry).unwrap();
        // v1 is elsewhere in one hop, v2 in two.
        let (_, oci, _) = hostile_registry(|_, request, _| match request.uri().path() {
            "/v2/" => reply(200, b"{}"),
            "/v2/p/simcloud/manifests/v1" => {
                redirect(format!("http://{}/landed", ELSEWHERE.get().unwrap()))
            }
            _ => redirect(format!("http://{}/hop", ELSEWHERE.get().unwrap())),
        })
        .await;
        let insecure = [oci.registry.clone(), ELSEWHERE.get().unwrap().clone()];
        let client = RegistryClient::new(&insecure, alice_at(&oci.registry));

        let (_, digest) = client.manifest(&oci, 1 << 20).await.unwrap();
        assert_eq!(digest, sha256_digest(MANIFEST));
        let v2 = OciRef {
            tag: Some("v2".into()),
            ..oci.clone()
        };
        let refused = client.manifest(&v2, 1 << 20).await;
        assert!(
            matches!(&refused, Err(RegistryError::Unreachable { error, .. } | RegistryError::Protocol(error)) if error.contains("a second redirect within")),
            "{refused:?}"
        );
        let seen = SEEN.lock().unwrap();
        assert!(
            seen.iter()
                .all(|(_, authorization)| authorization.is_none())
                && seen.iter().any(|(path, _)| path == "/landed")
                && seen.iter().any(|(path, _)| path == "/hop"),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn transient_failures_are_retried_and_definite_ones_are_not() {
        let (result, requests) = manifest_from(&[503, 429, 200]).await;
        assert_eq!(
            result.unwrap(),
            crate::source::layout::sha256_digest(MANIFEST)
        );
        assert_eq!(requests, 3, "two transient failures, then the manifest");

        let (result, requests) = manifest_from(&[404]).await;
        assert!(
            matches!(&result, Err(RegistryError::NotFound(text)) if text.contains("MANIFEST_UNKNOWN")),
            "{result:?}"
        );
        assert_eq!(requests, 1, "a 404 is not retried");

        for status in [401, 403] {
            let (result, requests) =
                manifest_from(if status == 401 { &[401] } else { &[403] }).await;
            assert!(
                matches!(
                    &result,
                    Err(RegistryError::Unauthorized(_) | RegistryError::Denied(_))
                ),
                "{status}: {result:?}"
            );
            assert_eq!(requests, 1, "a {status} is not retried");
        }

        let (result, requests) = manifest_from(&[500]).await;
        assert!(
            matches!(
                &result,
                Err(RegistryError::Unreachable {
                    attempts: ATTEMPTS,
                    ..
                })
            ),
            "{result:?}"
        );
        assert_eq!(requests, ATTEMPTS as usize, "retries are bounded");
    }
}

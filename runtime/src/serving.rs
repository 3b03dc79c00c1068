//! The manager's HTTPS endpoints: `/healthz`, `/readyz` and `/livez` (each aggregate, plus
//! `/<probe>/<check>`) and `/metrics`, on `--secure-port` (upstream 10258).
//!
//! The health endpoints behave like the Kubernetes `healthz` package, so kubelet probes and
//! people used to upstream read them the same way: every probe has a built-in `ping` check;
//! `?verbose` lists each check, `?exclude=<name>` skips one, and a failing check's reason is
//! logged but withheld from the body. Controllers add their checks when they start and remove
//! them when they stop:
//!
//! ```
//! use wasm_ccm::serving::{HealthChecks, Probe};
//!
//! let checks = HealthChecks::default();
//! checks.add("leaderElection", &[Probe::Healthz], || Ok(()));
//! checks.remove("leaderElection");
//! ```
//!
//! The certificate is generated in memory at start unless `--tls-cert-file` and
//! `--tls-private-key-file` name one, as upstream does without `--cert-dir`.

use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// A client that connects but never finishes the handshake must not hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Common name of the in-memory certificate, after upstream's self-signed pair name.
const SELF_SIGNED_NAME: &str = "cloud-controller-manager";

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which endpoints include a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Healthz,
    Readyz,
    Livez,
}

impl Probe {
    const ALL: [Probe; 3] = [Probe::Healthz, Probe::Readyz, Probe::Livez];

    /// The endpoint's path segment, also the word in "healthz check passed".
    fn name(self) -> &'static str {
        match self {
            Probe::Healthz => "healthz",
            Probe::Readyz => "readyz",
            Probe::Livez => "livez",
        }
    }
}

type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

struct Check {
    name: String,
    probes: Vec<Probe>,
    run: CheckFn,
}

/// Named health checks, shared and cloneable; controllers add theirs when they start and
/// remove them when they stop.
#[derive(Clone, Default)]
pub struct HealthChecks {
    // In the order they were added, which is the order `?verbose` lists them.
    checks: Arc<Mutex<Vec<Check>>>,
}

impl HealthChecks {
    /// Adds `check` to the endpoints in `probes`, or replaces the check of that name.
    /// `ping` is built in and cannot be replaced.
    pub fn add(
        &self,
        name: &str,
        probes: &[Probe],
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        if name == "ping" {
            warn!("health check `ping` is built in; ignoring a second one");
            return;
        }
        let added = Check {
            name: name.to_owned(),
            probes: probes.to_vec(),
            run: Arc::new(check),
        };
        let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        match checks.iter_mut().find(|c| c.name == name) {
            Some(existing) => *existing = added,
            None => checks.push(added),
        }
    }

    /// Removes the check called `name`, if there is one.
    pub fn remove(&self, name: &str) {
        self.checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|c| c.name != name);
    }

    /// The checks of one endpoint, `ping` first. A snapshot, so a check runs without the lock
    /// held and may itself add or remove checks.
    fn for_probe(&self, probe: Probe) -> Vec<(String, CheckFn)> {
        let ping: CheckFn = Arc::new(|| Ok(()));
        let checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(("ping".to_owned(), ping))
            .chain(
                checks
                    .iter()
                    .filter(|c| c.probes.contains(&probe))
                    .map(|c| (c.name.clone(), Arc::clone(&c.run))),
            )
            .collect()
    }
}

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// Generated in memory at start, for `localhost`, `127.0.0.1` and the bind address.
    SelfSigned,
    /// PEM files from `--tls-cert-file` (the chain, leaf first) and `--tls-private-key-file`.
    Files { cert: PathBuf, key: PathBuf },
}

/// Where and how to serve, from `--bind-address`, `--secure-port` and the `--tls-*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingConfig {
    pub bind_address: IpAddr,
    /// 0 disables serving, as upstream.
    pub port: u16,
    pub tls: TlsSource,
}

impl Default for ServingConfig {
    fn default() -> Self {
        Self {
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 10258,
            tls: TlsSource::SelfSigned,
        }
    }
}

/// Endpoints being served; they stop when the `shutdown` token given to [`serve`] is cancelled.
#[derive(Debug)]
pub struct Serving {
    local_addr: SocketAddr,
}

impl Serving {
    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Why serving could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    #[error(
        "cannot listen on {address} (--bind-address, --secure-port): {error}; free the port, choose another --secure-port, or set --secure-port=0 to disable serving"
    )]
    Bind {
        address: SocketAddr,
        error: io::Error,
    },
    #[error("serving certificate {path} (--tls-cert-file): {reason}")]
    CertFile { path: PathBuf, reason: String },
    #[error("serving key {path} (--tls-private-key-file): {reason}")]
    KeyFile { path: PathBuf, reason: String },
    #[error(
        "serving certificate {cert} (--tls-cert-file) and key {key} (--tls-private-key-file) cannot be used together: {error}"
    )]
    CertAndKey {
        cert: PathBuf,
        key: PathBuf,
        error: tokio_rustls::rustls::Error,
    },
    #[error("cannot generate the self-signed serving certificate: {0}")]
    SelfSigned(String),
    #[error("cannot set up TLS on the secure port: {0}")]
    Tls(tokio_rustls::rustls::Error),
}

/// Binds (errors name the address and flag `--secure-port`/`--bind-address`, or the cert/key
/// file and `--tls-cert-file`/`--tls-private-key-file`), then serves in a background task until
/// `shutdown` is cancelled. Returns None when port is 0.
pub async fn serve(
    config: ServingConfig,
    checks: HealthChecks,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> Result<Option<Serving>, ServingError> {
    if config.port == 0 {
        info!("--secure-port=0: not serving /healthz, /readyz, /livez or /metrics");
        return Ok(None);
    }
    let tls = tls_config(&config)?;
    let address = SocketAddr::new(config.bind_address, config.port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|error| ServingError::Bind { address, error })?;
    let local_addr = listener
        .local_addr()
        .map_err(|error| ServingError::Bind { address, error })?;
    let app = router(checks, registry);
    tokio::spawn(accept(
        listener,
        TlsAcceptor::from(Arc::new(tls)),
        app,
        shutdown,
    ));
    info!(%local_addr, "serving /healthz, /readyz, /livez and /metrics over HTTPS");
    Ok(Some(Serving { local_addr }))
}

fn tls_config(config: &ServingConfig) -> Result<ServerConfig, ServingError> {
    let (chain, key) = match &config.tls {
        TlsSource::SelfSigned => self_signed(config.bind_address)?,
        TlsSource::Files { cert, key } => (read_chain(cert)?, read_key(key)?),
    };
    let builder = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(ServingError::Tls)?
        .with_no_client_auth();
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|error| match &config.tls {
            TlsSource::Files { cert, key } => ServingError::CertAndKey {
                cert: cert.clone(),
                key: key.clone(),
                error,
            },
            TlsSource::SelfSigned => ServingError::Tls(error),
        })?;
    // Only HTTP/1.1 is served; say so, so a client offering h2 falls back instead of guessing.
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(server)
}

/// The names the in-memory certificate is valid for: what a local probe dials, plus the bind
/// address when it is a specific one.
fn self_signed_params(bind_address: IpAddr) -> Result<rcgen::CertificateParams, rcgen::Error> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut names = vec!["localhost".to_owned(), loopback.to_string()];
    if !bind_address.is_unspecified() && bind_address != loopback {
        names.push(bind_address.to_string());
    }
    let mut params = rcgen::CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, SELF_SIGNED_NAME);
    Ok(params)
}

fn self_signed(
    bind_address: IpAddr,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ServingError> {
    let generate = || -> Result<_, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let cert = self_signed_params(bind_address)?.self_signed(&key)?;
        Ok((vec![cert.der().clone()], PrivateKeyDer::from(key)))
    };
    generate().map_err(|error| ServingError::SelfSigned(error.to_string()))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, ServingError> {
    let cert_error = |reason: String| ServingError::CertFile {
        path: path.to_owned(),
        reason,
    };
    let pem =
        std::fs::read(path).map_err(|error| cert_error(format!("cannot read it: {error}")))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| cert_error(format!("not valid PEM: {error}")))?;
    if chain.is_empty() {
        return Err(cert_error("contains no PEM `CERTIFICATE` block".to_owned()));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, ServingError> {
    let key_error = |reason: String| ServingError::KeyFile {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|error| key_error(format!("cannot read it: {error}")))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|error| match error {
        tokio_rustls::rustls::pki_types::pem::Error::NoItemsFound => key_error(
            "contains no PEM private key (`PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`)"
                .to_owned(),
        ),
        error => key_error(format!("not valid PEM: {error}")),
    })
}

/// Accepts connections until shutdown; each connection's handshake and requests run in their
/// own task, so one slow or broken client cannot hold up the others.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                tokio::spawn(connection(
                    stream,
                    peer,
                    acceptor.clone(),
                    app.clone(),
                    shutdown.clone(),
                ));
            }
            Err(error) => {
                // Out of file descriptors and the like: back off rather than spin.
                warn!(%error, "cannot accept a connection on the secure port");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    debug!("secure port closed");
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) {
    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            debug!(%peer, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = result {
        debug!(%peer, %error, "HTTPS connection ended with an error");
    }
}

#[derive(Clone)]
struct Endpoints {
    checks: HealthChecks,
    registry: Arc<Registry>,
}

fn router(checks: HealthChecks, registry: Arc<Registry>) -> Router {
    let mut router = Router::new().route("/metrics", get(metrics));
    for probe in Probe::ALL {
        let all = move |State(state): State<Endpoints>,
                        Query(query): Query<Vec<(String, String)>>| async move {
            all_checks(&state.checks, probe, &query)
        };
        let one = move |State(state): State<Endpoints>, UrlPath(name): UrlPath<String>| async move {
            one_check(&state.checks, probe, &name)
        };
        router = router
            .route(&format!("/{}", probe.name()), get(all))
            .route(&format!("/{}/{{check}}", probe.name()), get(one));
    }
    router.with_state(Endpoints { checks, registry })
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        body,
    )
        .into_response()
}

/// One endpoint's aggregate, as upstream's `handleRootHealth`: `ok` on success, the listing
/// when asked for or on failure, reasons only in the log.
fn all_checks(checks: &HealthChecks, probe: Probe, query: &[(String, String)]) -> Response {
    let verbose = query.iter().any(|(key, _)| key == "verbose");
    let mut excluded: Vec<&str> = query
        .iter()
        .filter(|(key, _)| key == "exclude")
        .map(|(_, value)| value.as_str())
        .collect();
    let mut listing = String::new();
    let mut failures = Vec::new();
    for (name, run) in checks.for_probe(probe) {
        if excluded.contains(&name.as_str()) {
            excluded.retain(|e| *e != name);
            let _ = writeln!(listing, "[+]{name} excluded: ok");
            continue;
        }
        match run() {
            Ok(()) => {
                let _ = writeln!(listing, "[+]{name} ok");
            }
            Err(reason) => {
                let _ = writeln!(listing, "[-]{name} failed: reason withheld");
                failures.push(format!("{name}: {reason}"));
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        let _ = writeln!(
            listing,
            "warn: some health checks cannot be excluded: no matches for {}",
            quoted.join(",")
        );
    }
    let probe = probe.name();
    if !failures.is_empty() {
        warn!(failures = %failures.join("; "), "{probe} check failed");
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{listing}{probe} check failed\n"),
        );
    }
    if verbose {
        text(StatusCode::OK, format!("{listing}{probe} check passed\n"))
    } else {
        text(StatusCode::OK, "ok".to_owned())
    }
}

/// `/<probe>/<check>`: one check. Nothing here is behind authentication, so unlike upstream
/// the reason is withheld here too and only logged.
fn one_check(checks: &HealthChecks, probe: Probe, check: &str) -> Response {
    let Some((_, run)) = checks
        .for_probe(probe)
        .into_iter()
        .find(|(name, _)| name == check)
    else {
        return text(
            StatusCode::NOT_FOUND,
            format!("no {} check named {check:?}\n", probe.name()),
        );
    };
    match run() {
        Ok(()) => text(StatusCode::OK, "ok".to_owned()),
        Err(reason) => {
            warn!(check, %reason, "{} check failed", probe.name());
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: reason withheld\n".to_owned(),
            )
        }
    }
}

async fn metrics(State(endpoints): State<Endpoints>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &endpoints.registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(OPENMETRICS_CONTENT_TYPE),
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            warn!(%error, "cannot encode the metrics registry");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot encode metrics\n".to_owned(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::client::WebPkiServerVerifier;
    use tokio_rustls::rustls::client::danger::{
        HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
    };
    use tokio_rustls::rustls::pki_types::{ServerName, UnixTime};
    use tokio_rustls::rustls::{
        ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    };

    /// Trusts a server's certificate only if it is a valid self-signed certificate for the
    /// name dialled: the presented certificate becomes the sole root, then the usual webpki
    /// checks (signature, validity, SAN) run against it.
    #[derive(Debug)]
    struct SelfSignedFor;

    impl ServerCertVerifier for SelfSignedFor {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
            let mut roots = RootCertStore::empty();
            roots.add(end_entity.clone().into_owned())?;
            WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(ring::default_provider()),
            )
            .build()
            .map_err(|e| tokio_rustls::rustls::Error::General(e.to_string()))?
            .verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            )
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
            tokio_rustls::rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &ring::default_provider().signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
            tokio_rustls::rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &ring::default_provider().signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            ring::default_provider()
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    fn trusting_self_signed() -> ClientConfig {
        ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SelfSignedFor))
            .with_no_client_auth()
    }

    fn trusting(root: CertificateDer<'static>) -> ClientConfig {
        let mut roots = RootCertStore::empty();
        roots.add(root).expect("test CA is a valid root");
        ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth()
    }

    struct Reply {
        status: StatusCode,
        content_type: String,
        body: String,
    }

    async fn https_get(addr: SocketAddr, client: ClientConfig, path: &str) -> Reply {
        let tcp = TcpStream::connect(addr)
            .await
            .expect("connect to the secure port");
        let tls = TlsConnector::from(Arc::new(client))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
            .expect("TLS handshake");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(connection);
        let request = http::Request::get(path)
            .header(header::HOST, "localhost")
            .body(Empty::<Bytes>::new())
            .expect("valid request");
        let response = sender.send_request(request).await.expect("response");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        Reply {
            status,
            content_type,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// A loopback port that was free a moment ago (port 0 would mean "disabled").
    fn free_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        listener.local_addr().expect("local address").port()
    }

    fn loopback_config(tls: TlsSource) -> ServingConfig {
        ServingConfig {
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: free_port(),
            tls,
        }
    }

    /// Serves with a self-signed certificate on loopback; the server task ends when the token
    /// is cancelled or the test's runtime is dropped.
    async fn start(checks: HealthChecks, registry: Registry) -> (SocketAddr, CancellationToken) {
        let shutdown = CancellationToken::new();
        let serving = serve(
            loopback_config(TlsSource::SelfSigned),
            checks,
            Arc::new(registry),
            shutdown.clone(),
        )
        .await
        .expect("serving starts")
        .expect("serving is enabled");
        (serving.local_addr(), shutdown)
    }

    async fn get(addr: SocketAddr, path: &str) -> Reply {
        https_get(addr, trusting_self_signed(), path).await
    }

    #[tokio::test]
    async fn healthz_with_only_ping_is_ok() {
        let (addr, _shutdown) = start(HealthChecks::default(), Registry::default()).await;
        let reply = get(addr, "/healthz").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "ok");
        assert_eq!(reply.content_type, "text/plain; charset=utf-8");

        let reply = get(addr, "/healthz?verbose").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "[+]ping ok\nhealthz check passed\n");
        let reply = get(addr, "/livez?verbose=1").await;
        assert_eq!(reply.body, "[+]ping ok\nlivez check passed\n");
    }

    #[tokio::test]
    async fn failing_check_fails_healthz_and_withholds_its_reason() {
        let checks = HealthChecks::default();
        checks.add("cloud-node", &Probe::ALL, || Ok(()));
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease not renewed for 45s".into())
        });
        let (addr, _shutdown) = start(checks, Registry::default()).await;

        for path in ["/healthz", "/healthz?verbose"] {
            let reply = get(addr, path).await;
            assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
            assert_eq!(
                reply.body,
                "[+]ping ok\n[+]cloud-node ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n",
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn excluded_check_is_skipped() {
        let checks = HealthChecks::default();
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease lost".into())
        });
        checks.add("route", &[Probe::Healthz], || Err("cloud down".into()));
        let (addr, _shutdown) = start(checks, Registry::default()).await;

        let reply = get(addr, "/healthz?exclude=leaderElection&exclude=route").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));

        let reply = get(
            addr,
            "/healthz?exclude=leaderElection&exclude=route&exclude=nope&verbose",
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.body,
            "[+]ping ok\n[+]leaderElection excluded: ok\n[+]route excluded: ok\n\
             warn: some health checks cannot be excluded: no matches for \"nope\"\n\
             healthz check passed\n"
        );

        let reply = get(addr, "/healthz?exclude=route").await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[tokio::test]
    async fn single_check_endpoint_runs_only_that_check() {
        let checks = HealthChecks::default();
        checks.add("service-lb", &Probe::ALL, || Ok(()));
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease lost".into())
        });
        let (addr, _shutdown) = start(checks.clone(), Registry::default()).await;

        for path in [
            "/healthz/ping",
            "/healthz/service-lb",
            "/readyz/ping",
            "/livez/service-lb",
        ] {
            let reply = get(addr, path).await;
            assert_eq!(
                (reply.status, reply.body.as_str()),
                (StatusCode::OK, "ok"),
                "{path}"
            );
        }
        let reply = get(addr, "/healthz/leaderElection").await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!reply.body.contains("lease lost"), "{}", reply.body);
        assert_eq!(
            get(addr, "/healthz/nope").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            get(addr, "/livez/leaderElection").await.status,
            StatusCode::NOT_FOUND
        );

        checks.remove("leaderElection");
        assert_eq!(
            get(addr, "/healthz/leaderElection").await.status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(get(addr, "/healthz").await.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn readyz_only_check_does_not_affect_livez_or_healthz() {
        let checks = HealthChecks::default();
        checks.add("informer-sync", &[Probe::Readyz], || {
            Err("not synced".into())
        });
        let (addr, _shutdown) = start(checks, Registry::default()).await;

        let reply = get(addr, "/readyz").await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            reply.body,
            "[+]ping ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n"
        );
        assert_eq!(get(addr, "/livez").await.status, StatusCode::OK);
        assert_eq!(get(addr, "/healthz").await.status, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_serves_registered_counter() {
        let mut registry = Registry::default();
        let syncs: Counter = Counter::default();
        registry.register("route_controller_route_sync", "Route syncs", syncs.clone());
        syncs.inc();
        let (addr, _shutdown) = start(HealthChecks::default(), registry).await;

        let reply = get(addr, "/metrics").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.content_type, OPENMETRICS_CONTENT_TYPE);
        assert!(
            reply.body.contains("route_controller_route_sync_total 1\n"),
            "{}",
            reply.body
        );
        assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
    }

    #[tokio::test]
    async fn unknown_path_is_not_found() {
        let (addr, _shutdown) = start(HealthChecks::default(), Registry::default()).await;
        for path in ["/", "/configz", "/healthzz", "/metrics/slis"] {
            assert_eq!(
                get(addr, path).await.status,
                StatusCode::NOT_FOUND,
                "{path}"
            );
        }
    }

    #[tokio::test]
    async fn serves_certificate_from_files() {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
        let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .expect("leaf params")
            .signed_by(&leaf_key, &ca)
            .expect("leaf certificate");

        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("tls.crt");
        let key = dir.path().join("tls.key");
        std::fs::write(&cert, leaf.pem() + &ca.pem()).expect("write cert");
        std::fs::write(&key, leaf_key.serialize_pem()).expect("write key");

        let shutdown = CancellationToken::new();
        let serving = serve(
            loopback_config(TlsSource::Files { cert, key }),
            HealthChecks::default(),
            Arc::new(Registry::default()),
            shutdown.clone(),
        )
        .await
        .expect("serving starts")
        .expect("serving is enabled");

        let reply = https_get(serving.local_addr(), trusting(ca.der().clone()), "/healthz").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
        shutdown.cancel();
    }

    async fn serve_files(cert: PathBuf, key: PathBuf) -> ServingError {
        serve(
            loopback_config(TlsSource::Files { cert, key }),
            HealthChecks::default(),
            Arc::new(Registry::default()),
            CancellationToken::new(),
        )
        .await
        .expect_err("bad TLS files are refused")
    }

    #[tokio::test]
    async fn unusable_cert_or_key_file_names_file_and_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("cert");
        let other = rcgen::KeyPair::generate().expect("other key");
        let [cert, key, other_key, garbage, missing] = [
            "tls.crt",
            "tls.key",
            "other.key",
            "garbage.pem",
            "missing.pem",
        ]
        .map(|f| dir.path().join(f));
        std::fs::write(&cert, good.cert.pem()).expect("write cert");
        std::fs::write(&key, good.signing_key.serialize_pem()).expect("write key");
        std::fs::write(&other_key, other.serialize_pem()).expect("write other key");
        std::fs::write(&garbage, "not a certificate\n").expect("write garbage");

        let error = serve_files(missing.clone(), key.clone()).await.to_string();
        assert!(error.contains(&missing.display().to_string()), "{error}");
        assert!(error.contains("--tls-cert-file"), "{error}");

        let error = serve_files(garbage.clone(), key.clone()).await.to_string();
        assert!(error.contains(&garbage.display().to_string()), "{error}");
        assert!(error.contains("--tls-cert-file"), "{error}");

        let error = serve_files(cert.clone(), garbage.clone()).await.to_string();
        assert!(error.contains(&garbage.display().to_string()), "{error}");
        assert!(error.contains("--tls-private-key-file"), "{error}");

        let error = serve_files(cert, other_key).await.to_string();
        assert!(error.contains("--tls-cert-file"), "{error}");
        assert!(error.contains("--tls-private-key-file"), "{error}");
    }

    #[tokio::test]
    async fn port_zero_disables_serving() {
        let config = ServingConfig {
            port: 0,
            ..ServingConfig::default()
        };
        let serving = serve(
            config,
            HealthChecks::default(),
            Arc::new(Registry::default()),
            CancellationToken::new(),
        )
        .await
        .expect("port 0 is not an error");
        assert!(serving.is_none());
    }

    #[tokio::test]
    async fn port_in_use_error_names_address_and_flags() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("local address").port();
        let config = ServingConfig {
            port,
            ..loopback_config(TlsSource::SelfSigned)
        };
        let error = serve(
            config,
            HealthChecks::default(),
            Arc::new(Registry::default()),
            CancellationToken::new(),
        )
        .await
        .expect_err("the port is taken")
        .to_string();
        assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
        assert!(
            error.contains("--secure-port") && error.contains("--bind-address"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn plain_http_does_not_stop_the_server() {
        let (addr, _shutdown) = start(HealthChecks::default(), Registry::default()).await;
        let mut plain = TcpStream::connect(addr).await.expect("connect");
        plain
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("write");
        let mut answer = Vec::new();
        // The server answers with a TLS alert or nothing, then closes.
        tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer))
            .await
            .expect("the server closes a plain HTTP connection")
            .ok();
        assert!(
            !answer.starts_with(b"HTTP/"),
            "answered plain HTTP: {answer:?}"
        );

        let reply = get(addr, "/healthz").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    }

    #[tokio::test]
    async fn shutdown_stops_listening() {
        let (addr, shutdown) = start(HealthChecks::default(), Registry::default()).await;
        assert_eq!(get(addr, "/healthz").await.status, StatusCode::OK);
        shutdown.cancel();
        let closed = async {
            while TcpStream::connect(addr).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), closed)
            .await
            .expect("the secure port closes after shutdown");
    }

    #[test]
    fn self_signed_certificate_names_localhost_loopback_and_a_specific_bind_address() {
        let names = |bind: &str| {
            let params = self_signed_params(bind.parse().expect("IP")).expect("params");
            params.subject_alt_names
        };
        let localhost = rcgen::SanType::DnsName("localhost".try_into().expect("DNS name"));
        let loopback = rcgen::SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let specific = rcgen::SanType::IpAddress("10.0.0.7".parse().expect("IP"));
        assert_eq!(names("0.0.0.0"), [localhost.clone(), loopback.clone()]);
        assert_eq!(names("::"), [localhost.clone(), loopback.clone()]);
        assert_eq!(names("127.0.0.1"), [localhost.clone(), loopback.clone()]);
        assert_eq!(names("10.0.0.7"), [localhost, loopback, specific]);
    }

    #[test]
    fn adding_a_check_again_replaces_it_in_place() {
        let checks = HealthChecks::default();
        checks.add("a", &[Probe::Healthz], || Err("old".into()));
        checks.add("b", &[Probe::Healthz], || Ok(()));
        checks.add("a", &[Probe::Healthz, Probe::Livez], || Ok(()));
        checks.add("ping", &[Probe::Healthz], || Err("shadowed".into()));
        let healthz: Vec<_> = checks.for_probe(Probe::Healthz);
        let names: Vec<&str> = healthz.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["ping", "a", "b"]);
        assert!(healthz.iter().all(|(_, run)| run().is_ok()));
        let livez: Vec<String> = checks
            .for_probe(Probe::Livez)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(livez, ["ping", "a"]);
    }
}

//! The secure port: binds `--bind-address`:`--secure-port` (upstream 10258), accepts TLS
//! connections, lets `auth` decide who may ask, and routes `/healthz`, `/readyz`, `/livez`
//! (each aggregate, plus `/<probe>/<check>`) and `/metrics`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
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
use tokio_util::sync::CancellationToken;
use tower::Service;
use tracing::{debug, info, warn};

use super::auth::{self, AuthConfig, AuthConfigError, ClientCertificate, Delegation};
use super::health::{HealthChecks, Probe, all_checks, one_check};
use super::tls::{self, TlsError, TlsSource};

/// A client that connects but never finishes the handshake must not hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; one past it is closed as soon as it is accepted, so a flood
/// of connections holds neither memory nor tasks beyond it (Prometheus and the kubelet's
/// probes need a handful).
pub const MAX_CONNECTIONS: usize = 256;

/// Connections served at once from one address: one client cannot take every connection
/// and shut out the kubelet's probes.
pub const MAX_CONNECTIONS_PER_PEER: usize = 32;

const _: () = assert!(MAX_CONNECTIONS_PER_PEER < MAX_CONNECTIONS);

const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Where and how to serve, from `--bind-address`, `--secure-port` and the `--tls-*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingConfig {
    /// `--bind-address`.
    pub bind_address: IpAddr,
    /// `--secure-port`; 0 disables serving, as upstream.
    pub port: u16,
    /// The certificate: self-signed, or the `--tls-*` files.
    pub tls: TlsSource,
    /// Who may ask what: the delegated authentication and authorisation flags.
    pub auth: AuthConfig,
}

impl Default for ServingConfig {
    fn default() -> Self {
        Self {
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 10258,
            tls: TlsSource::SelfSigned,
            auth: AuthConfig::default(),
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
    /// The port cannot be bound (taken, or not allowed).
    #[error(
        "cannot listen on {address} (--bind-address, --secure-port): {error}; free the port, choose another --secure-port, or set --secure-port=0 to disable serving"
    )]
    Bind {
        /// `--bind-address`:`--secure-port`.
        address: SocketAddr,
        /// What the system said.
        error: io::Error,
    },
    /// The serving certificate or the client CA cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The authorisation flags are wrong.
    #[error(transparent)]
    Auth(#[from] AuthConfigError),
}

/// Binds (errors name the address and flag `--secure-port`/`--bind-address`, the cert/key
/// file and `--tls-cert-file`/`--tls-private-key-file`, or `--client-ca-file`), then serves
/// in a background task until `shutdown` is cancelled; `client` reviews the callers' tokens
/// and access. Returns None when port is 0.
pub async fn serve(
    config: ServingConfig,
    checks: HealthChecks,
    registry: Arc<Registry>,
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<Option<Serving>, ServingError> {
    if config.port == 0 {
        info!("--secure-port=0: not serving /healthz, /readyz, /livez or /metrics");
        return Ok(None);
    }
    config.auth.validate()?;
    let tls = tls::server_config(
        &config.tls,
        config.bind_address,
        config.auth.client_ca_file.as_deref(),
    )?;
    let address = SocketAddr::new(config.bind_address, config.port);
    let listener = TcpListener::bind(address)
        .await
        .map_err(|error| ServingError::Bind { address, error })?;
    let local_addr = listener
        .local_addr()
        .map_err(|error| ServingError::Bind { address, error })?;
    let app = router(checks, registry, Delegation::new(config.auth, client));
    tokio::spawn(accept(
        listener,
        TlsAcceptor::from(Arc::new(tls)),
        app,
        shutdown,
    ));
    info!(%local_addr, "serving /healthz, /readyz, /livez and /metrics over HTTPS");
    Ok(Some(Serving { local_addr }))
}

/// Accepts connections until shutdown; each connection's handshake and requests run in their
/// own task, so one slow or broken client cannot hold up the others.
async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: CancellationToken,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let peers: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(held) = PeerSlot::take(&peers, peer.ip()) else {
                    debug!(%peer, "{MAX_CONNECTIONS_PER_PEER} connections open from this address; closing this one");
                    continue;
                };
                let Ok(permit) = open.clone().try_acquire_owned() else {
                    debug!(%peer, "{MAX_CONNECTIONS} connections open; closing this one");
                    continue;
                };
                let (acceptor, app, shutdown) = (acceptor.clone(), app.clone(), shutdown.clone());
                tokio::spawn(async move {
                    connection(stream, peer, acceptor, app, shutdown).await;
                    drop((permit, held));
                });
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

/// One of an address's connections, given back when dropped.
struct PeerSlot {
    peers: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`, unless it has [`MAX_CONNECTIONS_PER_PEER`] already.
    fn take(peers: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr) -> Option<PeerSlot> {
        let mut open = peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(ip).or_default();
        if *count >= MAX_CONNECTIONS_PER_PEER {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: peers.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
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
    // A client certificate was verified in the handshake; each request carries what it says.
    let certificate = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(<[_]>::first)
        .map(|leaf| ClientCertificate::read(leaf));
    let service = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        if let Some(certificate) = &certificate {
            request.extensions_mut().insert(certificate.clone());
        }
        app.clone().call(request)
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
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

fn router(checks: HealthChecks, registry: Arc<Registry>, delegation: Delegation) -> Router {
    let mut router = Router::new().route("/metrics", get(metrics));
    for probe in Probe::ALL {
        let all = move |State(state): State<Endpoints>,
                        Query(query): Query<Vec<(String, String)>>| async move {
            let (status, body) = all_checks(&state.checks, probe, &query);
            text(status, body)
        };
        let one = move |State(state): State<Endpoints>, UrlPath(name): UrlPath<String>| async move {
            let (status, body) = one_check(&state.checks, probe, &name);
            text(status, body)
        };
        router = router
            .route(&format!("/{}", probe.name()), get(all))
            .route(&format!("/{}/{{check}}", probe.name()), get(one));
    }
    router
        .with_state(Endpoints { checks, registry })
        .layer(axum::middleware::from_fn_with_state(delegation, auth::gate))
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
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::CertificateDer;
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

    /// Every path open: these tests are about routing and TLS; `auth_refuses_…` below and
    /// the end-to-end tests are about who may ask.
    fn loopback_config(tls: TlsSource) -> ServingConfig {
        ServingConfig {
            bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: free_port(),
            tls,
            auth: AuthConfig {
                always_allow_paths: vec!["/*".to_owned()],
                ..AuthConfig::default()
            },
        }
    }

    /// A client of an API server that cannot be reached: every review fails.
    fn unreachable_api() -> kube::Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<Empty<Bytes>>, _>(std::io::Error::other(
                "no API server in this test",
            ))
        });
        kube::Client::new(service, "default")
    }

    /// Serves with a self-signed certificate on loopback; the server task ends when the token
    /// is cancelled or the test's runtime is dropped.
    async fn start(checks: HealthChecks, registry: Registry) -> (SocketAddr, CancellationToken) {
        let shutdown = CancellationToken::new();
        let serving = serve(
            loopback_config(TlsSource::SelfSigned),
            checks,
            Arc::new(registry),
            unreachable_api(),
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
    async fn health_endpoints_answer_in_plain_text_with_query_and_check_paths() {
        let checks = HealthChecks::default();
        checks.add("service-lb", &Probe::ALL, || Ok(()));
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease lost".into())
        });
        let (addr, _shutdown) = start(checks, Registry::default()).await;

        let reply = get(addr, "/livez").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
        assert_eq!(reply.content_type, "text/plain; charset=utf-8");
        let reply = get(addr, "/readyz?verbose").await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (
                StatusCode::OK,
                "[+]ping ok\n[+]service-lb ok\nreadyz check passed\n"
            )
        );
        let reply = get(addr, "/healthz?exclude=leaderElection&verbose=1").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert!(reply.body.contains("[+]leaderElection excluded: ok\n"));
        let reply = get(addr, "/healthz").await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!reply.body.contains("lease lost"), "{}", reply.body);
        assert_eq!(reply.content_type, "text/plain; charset=utf-8");

        assert_eq!(get(addr, "/livez/service-lb").await.status, StatusCode::OK);
        assert_eq!(
            get(addr, "/healthz/leaderElection").await.status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            get(addr, "/readyz/leaderElection").await.status,
            StatusCode::NOT_FOUND
        );
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
    async fn auth_refuses_metrics_without_credentials_or_a_reviewable_token() {
        let shutdown = CancellationToken::new();
        let config = ServingConfig {
            auth: AuthConfig::default(),
            ..loopback_config(TlsSource::SelfSigned)
        };
        let serving = serve(
            config,
            HealthChecks::default(),
            Arc::new(Registry::default()),
            unreachable_api(),
            shutdown.clone(),
        )
        .await
        .expect("serving starts")
        .expect("serving is enabled");
        let addr = serving.local_addr();
        let reply = get(addr, "/metrics").await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert_eq!(reply.content_type, "application/json");
        let status: serde_json::Value = serde_json::from_str(&reply.body).expect("a Status");
        assert_eq!(
            (&status["kind"], &status["reason"], &status["code"]),
            (&"Status".into(), &"Unauthorized".into(), &401.into())
        );
        // Unknown paths are protected too: nothing tells an anonymous caller what exists.
        assert_eq!(get(addr, "/configz").await.status, StatusCode::UNAUTHORIZED);
        // The API server cannot review the token: refused, not let through.
        let tls = TlsConnector::from(Arc::new(trusting_self_signed()))
            .connect(
                ServerName::IpAddress(addr.ip().into()),
                TcpStream::connect(addr).await.expect("connect"),
            )
            .await
            .expect("TLS handshake");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
        tokio::spawn(connection);
        let request = http::Request::get("/metrics")
            .header(header::HOST, "localhost")
            .header(header::AUTHORIZATION, "Bearer some-token")
            .body(Empty::<Bytes>::new())
            .expect("valid request");
        let response = sender.send_request(request).await.expect("response");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        for open in ["/healthz", "/readyz", "/livez"] {
            assert_eq!(get(addr, open).await.status, StatusCode::OK, "{open}");
        }
        shutdown.cancel();
    }

    /// A flood of connections from one address that never even handshake holds at most
    /// that address's bound: one past it is closed at once (not held until the handshake
    /// times out), and once some end the port serves it again.
    #[tokio::test]
    async fn connections_past_the_bound_are_closed_and_the_port_serves_again_once_some_end() {
        let (addr, _shutdown) = start(HealthChecks::default(), Registry::default()).await;
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_PEER {
            held.push(TcpStream::connect(addr).await.expect("connect"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut extra = TcpStream::connect(addr).await.expect("connect");
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(HANDSHAKE_TIMEOUT / 2, extra.read(&mut byte))
            .await
            .expect("closed at once, not held until the handshake timeout");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        held.truncate(MAX_CONNECTIONS_PER_PEER - 8);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(get(addr, "/healthz").await.status, StatusCode::OK);
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
            unreachable_api(),
            shutdown.clone(),
        )
        .await
        .expect("serving starts")
        .expect("serving is enabled");

        let reply = https_get(serving.local_addr(), trusting(ca.der().clone()), "/healthz").await;
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
        shutdown.cancel();
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
            unreachable_api(),
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
            unreachable_api(),
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
}

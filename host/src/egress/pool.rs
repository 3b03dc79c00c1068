//! The connections of one provider version: keep-alive HTTP/1.1 connections (HTTP/2 where
//! the server offers it through ALPN) pooled per destination and grant, reused across the
//! requests and calls of that version only.
//!
//! hyper-util's pooled client does the pooling; the gate's [`GateConnector`] opens every new
//! connection, so each one still passes the address check (resolved here, from the gate's
//! DNS cache while an answer is fresh, internal addresses refused unless the grant names
//! them), the connect timeout, TLS with the Mozilla roots, and the per-version bound on open
//! connections. A swap to a new provider version gets a new [`Connections`]; dropping the
//! old one closes its idle connections. A replayable request whose reused connection closed
//! unanswered is sent once more ([`Replay`]); nothing else is ever sent twice.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::{Client, Error as LegacyError};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::rustls;
use wasmtime_wasi_http::{Error, WasiBody};

use super::dns::Resolver;
use super::policy::{Destination, HostPattern};
use super::transport::{self, ConnectRefusal, Limits};

/// How many TLS sessions each provider version remembers for resumption.
const TLS_SESSIONS: usize = 256;

/// Bounds of a provider version's connection pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    /// Idle keep-alive connections kept per destination (`--egress-max-idle-per-host`,
    /// default 8); 0 turns reuse off.
    pub max_idle_per_host: usize,
    /// Open connections, idle or busy, of one provider version across all destinations
    /// (`--egress-max-connections`, default 64). A request that needs a new connection
    /// beyond this waits up to the connect timeout for one to close.
    pub max_connections: usize,
    /// How long an idle connection is kept (`--egress-idle-timeout`, default 90s).
    pub idle_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            max_idle_per_host: 8,
            max_connections: 64,
            idle_timeout: Duration::from_secs(90),
        }
    }
}

/// The pooled connections of one provider version: one pooled client per grant, so a
/// connection opened under one grant never carries a request allowed by another, and
/// hyper-util's own key (scheme and authority) keeps destinations apart within a grant.
pub struct Connections {
    clients: Vec<Client<GateConnector, WasiBody>>,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections")
            .field("grants", &self.clients.len())
            .finish()
    }
}

impl Connections {
    /// An empty pool for the grants `allow`, with its own TLS session cache, resolving
    /// names with the gate's `resolver`.
    pub(super) fn new(
        allow: &[HostPattern],
        tls: &rustls::ClientConfig,
        resolver: &Arc<Resolver>,
        limits: Limits,
        pool: PoolLimits,
    ) -> Self {
        // Resumption is on by default in rustls; a cache per version keeps one version's
        // sessions from another's.
        let mut tls = tls.clone();
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        tls.resumption = rustls::client::Resumption::in_memory_sessions(TLS_SESSIONS);
        let tls = Arc::new(tls);
        let permits = Arc::new(Semaphore::new(pool.max_connections.max(1)));
        let clients = allow
            .iter()
            .map(|grant| {
                let connector = GateConnector {
                    grant: grant.clone(),
                    tls: tls.clone(),
                    resolver: resolver.clone(),
                    limits,
                    permits: permits.clone(),
                    max_connections: pool.max_connections.max(1),
                };
                Client::builder(FirstPollHere)
                    .pool_timer(TokioTimer::new())
                    .timer(TokioTimer::new())
                    .pool_idle_timeout(pool.idle_timeout)
                    .pool_max_idle_per_host(pool.max_idle_per_host)
                    .build(connector)
            })
            .collect();
        Connections { clients }
    }

    /// The pooled client for requests allowed by grant number `grant`.
    pub(super) fn client(&self, grant: usize) -> Option<&Client<GateConnector, WasiBody>> {
        self.clients.get(grant)
    }
}

/// Runs the pooled client's background tasks (each connection's I/O, idle reaping): polls
/// each task once where it is handed over, then spawns it on tokio if it is not finished.
///
/// hyper-util spawns a new connection's task and then waits for that task's first poll
/// before it sends the request; polling once here lets the request go out without that
/// handoff between tasks (5–8 µs a new connection on loopback, measured with hyper-util's
/// own connector). Correct because the spawned task is always polled again: anything that
/// happened after the first poll (whose waker does nothing) is seen then.
#[derive(Debug, Clone, Copy)]
struct FirstPollHere;

impl<F> hyper::rt::Executor<F> for FirstPollHere
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        let mut future = Box::pin(future);
        if future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending()
        {
            tokio::spawn(future);
        }
    }
}

/// How many responses a connection has carried; attached to every response it carries, so
/// the gate can tell a reused connection from a new one.
#[derive(Debug, Clone, Default)]
pub(super) struct ConnectionUses(Arc<AtomicU64>);

impl ConnectionUses {
    /// Count one more response; whether the connection had carried one before.
    pub(super) fn reused(&self) -> bool {
        self.0.fetch_add(1, Ordering::Relaxed) > 0
    }

    /// Whether the connection has carried a response.
    fn carried_any(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// What sending a request again takes, kept for a request that may be sent twice: a
/// replayable one (GET, HEAD, OPTIONS or TRACE, as Go's transport has it) whose body turned
/// out empty. Such a request is sent again, once, when the reused connection it went out on
/// closed before any answer: the server may have closed that idle connection just as the
/// request was written. Nothing else is ever sent twice. (A request never written because its
/// connection had just closed is retried by hyper-util itself, whatever its method.)
pub(super) struct Replay {
    /// For a replayable request: its head, and what its body turned out to be.
    again: Option<(http::request::Parts, Arc<BodyWatch>)>,
}

/// What a request's body turned out to be, as it was sent.
#[derive(Debug, Default)]
struct BodyWatch {
    data: AtomicBool,
    ended: AtomicBool,
}

impl Replay {
    /// `request`, with its body watched if it is replayable, and what sending it again would
    /// take. Any other request goes as it is.
    pub(super) fn watch(request: http::Request<WasiBody>) -> (Replay, http::Request<WasiBody>) {
        let replayable = [
            http::Method::GET,
            http::Method::HEAD,
            http::Method::OPTIONS,
            http::Method::TRACE,
        ]
        .contains(request.method());
        if !replayable {
            return (Replay { again: None }, request);
        }
        let (parts, body) = request.into_parts();
        let mut head = http::Request::new(());
        *head.method_mut() = parts.method.clone();
        *head.uri_mut() = parts.uri.clone();
        *head.version_mut() = parts.version;
        *head.headers_mut() = parts.headers.clone();
        let watch = Arc::new(BodyWatch::default());
        let body = Watched {
            body,
            watch: watch.clone(),
        }
        .boxed_unsync();
        let replay = Replay {
            again: Some((head.into_parts().0, watch)),
        };
        (replay, http::Request::from_parts(parts, body))
    }

    /// The request to send again after `error`, if it may be: replayable, its body ended
    /// with no data, and its connection had carried an answer before and closed before
    /// answering this one.
    pub(super) fn again(self, error: &LegacyError) -> Option<http::Request<WasiBody>> {
        let (parts, body) = self.again?;
        let empty = body.ended.load(Ordering::SeqCst) && !body.data.load(Ordering::SeqCst);
        let mut extras = http::Extensions::new();
        if let Some(connected) = error.connect_info() {
            connected.get_extras(&mut extras);
        }
        let reused = extras
            .get::<ConnectionUses>()
            .is_some_and(ConnectionUses::carried_any);
        let unanswered = std::error::Error::source(error)
            .and_then(|cause| cause.downcast_ref::<hyper::Error>())
            .is_some_and(hyper::Error::is_incomplete_message);
        (empty && reused && unanswered)
            .then(|| http::Request::from_parts(parts, super::transport::full_body(Bytes::new())))
    }
}

/// A request body that tells its [`BodyWatch`] whether it carried data and ended.
struct Watched {
    body: WasiBody,
    watch: Arc<BodyWatch>,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.watch.ended.store(true, Ordering::SeqCst),
            Poll::Ready(Some(Ok(frame))) if frame.data_ref().is_some_and(|d| !d.is_empty()) => {
                self.watch.data.store(true, Ordering::SeqCst);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // hyper sends a body known to be over without polling it.
        let ended = self.body.is_end_stream();
        if ended {
            self.watch.ended.store(true, Ordering::SeqCst);
        }
        ended
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Opens the connections of one grant: address check (on the gate's possibly cached DNS
/// answer), connect timeout, TLS, and a permit from the version's connection bound that
/// lives as long as the connection.
#[derive(Clone)]
pub(super) struct GateConnector {
    grant: HostPattern,
    tls: Arc<rustls::ClientConfig>,
    resolver: Arc<Resolver>,
    limits: Limits,
    permits: Arc<Semaphore>,
    max_connections: usize,
}

type Connecting = Pin<Box<dyn Future<Output = Result<PooledStream, ConnectRefusal>> + Send>>;

impl tower_service::Service<http::Uri> for GateConnector {
    type Response = PooledStream;
    type Error = ConnectRefusal;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        Box::pin(self.clone().open(uri))
    }
}

impl GateConnector {
    async fn open(self, uri: http::Uri) -> Result<PooledStream, ConnectRefusal> {
        // The gate matched the grant already; checked again so this connector can only
        // ever connect where its grant allows.
        let Some(dest) = Destination::from_uri(&uri).filter(|d| self.grant.matches(d)) else {
            let message = format!("{uri} is not allowed by {}", self.grant);
            return Err(ConnectRefusal::Failed(Error::HttpRequestDenied, message));
        };
        let permit = self.permits.clone().acquire_owned();
        let permit = match tokio::time::timeout(self.limits.connect_timeout, permit).await {
            Ok(Ok(permit)) => permit,
            _ => {
                let message = format!(
                    "all {} connections of this provider version stayed busy for the connect timeout (--egress-max-connections)",
                    self.max_connections
                );
                return Err(ConnectRefusal::Failed(
                    Error::ConnectionLimitReached,
                    message,
                ));
            }
        };
        let addresses =
            transport::resolve_allowed(&dest, &self.grant, &self.limits, &self.resolver).await?;
        let opened = transport::connect(&dest, &addresses, &self.tls, &self.limits).await?;
        Ok(PooledStream {
            io: TokioIo::new(opened.stream),
            http2: opened.http2,
            uses: ConnectionUses::default(),
            _permit: permit,
        })
    }
}

/// An open connection in the pool: the byte stream, its use count, and its place in the
/// version's connection bound, given back when it closes.
pub(super) struct PooledStream {
    io: TokioIo<Box<dyn transport::Stream>>,
    /// Whether the server chose HTTP/2 through ALPN: the connection is then shared by
    /// concurrent requests of the same destination and grant instead of pooled one by one.
    http2: bool,
    uses: ConnectionUses,
    _permit: OwnedSemaphorePermit,
}

impl Connection for PooledStream {
    fn connected(&self) -> Connected {
        let connected = Connected::new().extra(self.uses.clone());
        if self.http2 {
            connected.negotiated_h2()
        } else {
            connected
        }
    }
}

impl hyper::rt::Read for PooledStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for PooledStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    use std::sync::Mutex;

    use hyper_util::rt::TokioExecutor;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio_rustls::rustls::HandshakeKind;

    use super::*;
    use crate::egress::{
        AuditRecord, Caller, EgressConfig, EgressGate, RateBudget, SendError, send_through,
    };
    use crate::metrics::Metrics;

    /// A keep-alive HTTP/1.1 server on loopback that counts the connections it accepted and
    /// the ones that ended.
    struct Server {
        url: String,
        opened: Arc<AtomicUsize>,
        closed: Arc<AtomicUsize>,
    }

    /// `close_after`: the server closes each connection this long after its first response,
    /// without announcing it, as servers do with idle connections.
    async fn server(close_after: Option<Duration>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (opened, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (counted_open, counted_closed) = (opened.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted_open.fetch_add(1, Ordering::SeqCst);
                let closed = counted_closed.clone();
                tokio::spawn(async move {
                    answer(&mut socket, close_after).await;
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        Server {
            url,
            opened,
            closed,
        }
    }

    /// The answer the test servers give.
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    /// Read up to the end of the next request's head (a body-less request) from `socket`,
    /// keeping what came after it in `pending`; false when the client closed first.
    async fn read_request_head<S: AsyncRead + Unpin>(
        socket: &mut S,
        pending: &mut Vec<u8>,
    ) -> bool {
        let mut chunk = [0u8; 4096];
        while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => pending.extend_from_slice(&chunk[..n]),
            }
        }
        let end = pending.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        pending.drain(..end + 4);
        true
    }

    /// Answer `ok` to each request on `socket` until the client closes it, or `close_after`
    /// the first answer.
    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
        socket: &mut S,
        close_after: Option<Duration>,
    ) {
        let mut pending = Vec::new();
        loop {
            if !read_request_head(socket, &mut pending).await {
                return;
            }
            if socket.write_all(OK).await.is_err() || socket.flush().await.is_err() {
                return;
            }
            if let Some(after) = close_after {
                tokio::time::sleep(after).await;
                return;
            }
        }
    }

    /// The same server over TLS for 127.0.0.1 with a self-signed certificate; also records
    /// how each handshake went. Returns the server and a client configuration trusting it.
    /// With `http2`, the server offers only `h2` through ALPN and speaks HTTP/2.
    async fn tls_server(
        http2: bool,
    ) -> (Server, Arc<Mutex<Vec<HandshakeKind>>>, rustls::ClientConfig) {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = certified.cert.der().clone();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        if http2 {
            server_config.alpn_protocols = vec![b"h2".to_vec()];
        }
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let client_config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();

        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let (opened, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let handshakes = Arc::new(Mutex::new(Vec::new()));
        let (counted_open, counted_closed, kinds) =
            (opened.clone(), closed.clone(), handshakes.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted_open.fetch_add(1, Ordering::SeqCst);
                let (acceptor, closed, kinds) =
                    (acceptor.clone(), counted_closed.clone(), kinds.clone());
                tokio::spawn(async move {
                    if let Ok(mut tls) = acceptor.accept(socket).await {
                        if let Some(kind) = tls.get_ref().1.handshake_kind() {
                            kinds.lock().unwrap().push(kind);
                        }
                        if http2 {
                            let ok = hyper::service::service_fn(|request| async move {
                                assert_eq!(request.version(), http::Version::HTTP_2);
                                // `/authority` answers the authority and `Host` it got.
                                let answer = if request.uri().path() == "/authority" {
                                    let host = request.headers().get(http::header::HOST);
                                    format!("{} host={host:?}", request.uri().authority().unwrap())
                                } else {
                                    "ok".to_string()
                                };
                                let body = http_body_util::Full::new(bytes::Bytes::from(answer));
                                Ok::<_, std::convert::Infallible>(http::Response::new(body))
                            });
                            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .serve_connection(TokioIo::new(tls), ok)
                                .await;
                        } else {
                            answer(&mut tls, None).await;
                        }
                    }
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        let server = Server {
            url,
            opened,
            closed,
        };
        (server, handshakes, client_config)
    }

    /// A provider version's pool for the TLS `server` alone, trusting its certificate.
    fn tls_connections(
        server: &Server,
        gate: &EgressGate,
        tls: &rustls::ClientConfig,
        pool: PoolLimits,
    ) -> Arc<Connections> {
        let allow = [server.url.parse().unwrap()];
        Arc::new(Connections::new(
            &allow,
            tls,
            &gate.resolver,
            gate.config.limits,
            pool,
        ))
    }

    fn gate(servers: &[&Server], pool: PoolLimits) -> Arc<EgressGate> {
        let mut config = EgressConfig {
            allow: servers.iter().map(|s| s.url.parse().unwrap()).collect(),
            pool,
            ..EgressConfig::default()
        };
        config.limits.connect_timeout = Duration::from_millis(300);
        EgressGate::new(config, Arc::new(Metrics::default()))
    }

    /// One request by a call of the version owning `connections`, as a guest makes it.
    async fn get(
        gate: &Arc<EgressGate>,
        connections: &Arc<Connections>,
        url: &str,
    ) -> Result<(), SendError> {
        let caller = Arc::new(Caller {
            provider: "pooled".into(),
            version: "sha256:0123456789ab".into(),
        });
        let request = http::Request::get(url).body(bytes::Bytes::new()).unwrap();
        let hooks = gate.hooks(caller, connections.clone());
        let (status, body) = send_through(hooks, request).await?;
        assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
        Ok(())
    }

    fn reuse(records: &[AuditRecord]) -> Vec<bool> {
        records.iter().map(|r| r.connection_reused).collect()
    }

    async fn eventually(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !check() {
            assert!(Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn one_connection_serves_sequential_requests_of_a_provider_version() {
        let server = server(None).await;
        let gate = gate(&[&server], PoolLimits::default());
        let version = gate.connections();
        for _ in 0..10 {
            get(&gate, &version, &format!("{}/v1/instances", server.url))
                .await
                .unwrap();
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 1);
        let records = gate.audit().recent();
        assert_eq!(records.len(), 10, "one audit record per request");
        let mut expected = vec![true; 10];
        expected[0] = false;
        assert_eq!(reuse(&records), expected);
    }

    #[tokio::test]
    async fn destinations_and_provider_versions_never_share_a_connection() {
        let (a, b) = (server(None).await, server(None).await);
        let gate = gate(&[&a, &b], PoolLimits::default());
        let old = gate.connections();
        for url in [&a.url, &b.url, &a.url, &b.url] {
            get(&gate, &old, &format!("{url}/")).await.unwrap();
        }
        assert_eq!(a.opened.load(Ordering::SeqCst), 1);
        assert_eq!(b.opened.load(Ordering::SeqCst), 1);
        assert_eq!(reuse(&gate.audit().recent()), [false, false, true, true]);

        // A new version (a swap) opens its own, and dropping the old one closes its pool.
        let new = gate.connections();
        get(&gate, &new, &format!("{}/", a.url)).await.unwrap();
        assert_eq!(a.opened.load(Ordering::SeqCst), 2);
        assert!(!gate.audit().recent().last().unwrap().connection_reused);
        drop(old);
        eventually("the dropped version's connections close", || {
            a.closed.load(Ordering::SeqCst) == 1 && b.closed.load(Ordering::SeqCst) == 1
        })
        .await;
        get(&gate, &new, &format!("{}/", a.url)).await.unwrap();
        assert_eq!(
            a.opened.load(Ordering::SeqCst),
            2,
            "the new version's stays"
        );
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced_transparently() {
        let server = server(Some(Duration::from_millis(20))).await;
        let gate = gate(&[&server], PoolLimits::default());
        let version = gate.connections();
        for _ in 0..3 {
            get(&gate, &version, &format!("{}/", server.url))
                .await
                .unwrap();
            let opened = server.opened.load(Ordering::SeqCst);
            eventually("the server closes the connection", || {
                server.closed.load(Ordering::SeqCst) == opened
            })
            .await;
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 3);
        assert_eq!(reuse(&gate.audit().recent()), [false, false, false]);
    }

    /// A server that answers the first request of each connection, then reads the second
    /// and closes the connection without answering it, as a server closing an idle
    /// connection just as a request arrives. Counts connections and requests read.
    async fn server_dropping_second_requests() -> (Server, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (opened, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let requests = Arc::new(AtomicUsize::new(0));
        let (counted_open, counted_requests) = (opened.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted_open.fetch_add(1, Ordering::SeqCst);
                let requests = counted_requests.clone();
                tokio::spawn(async move {
                    let mut pending = Vec::new();
                    for answered in [true, false] {
                        if !read_request_head(&mut socket, &mut pending).await {
                            return;
                        }
                        requests.fetch_add(1, Ordering::SeqCst);
                        if answered {
                            socket.write_all(OK).await.unwrap();
                        }
                    }
                });
            }
        });
        let server = Server {
            url,
            opened,
            closed,
        };
        (server, requests)
    }

    /// One request by a call of the version owning `connections`, with `method`.
    async fn send(
        gate: &Arc<EgressGate>,
        connections: &Arc<Connections>,
        method: http::Method,
        url: &str,
    ) -> Result<(http::StatusCode, bytes::Bytes), SendError> {
        let caller = Arc::new(Caller {
            provider: "pooled".into(),
            version: "sha256:0123456789ab".into(),
        });
        let request = http::Request::builder()
            .method(method)
            .uri(url)
            .body(bytes::Bytes::new())
            .unwrap();
        send_through(gate.hooks(caller, connections.clone()), request).await
    }

    #[tokio::test]
    async fn a_replayable_request_whose_reused_connection_closed_unanswered_is_sent_again() {
        let (server, requests) = server_dropping_second_requests().await;
        let mut config = EgressConfig {
            allow: vec![server.url.parse().unwrap()],
            budget: RateBudget {
                per_second: 0.001,
                burst: 3,
            },
            ..EgressConfig::default()
        };
        config.limits.connect_timeout = Duration::from_millis(300);
        let gate = EgressGate::new(config, Arc::new(Metrics::default()));
        let version = gate.connections();
        for _ in 0..3 {
            let (status, body) = send(&gate, &version, http::Method::GET, &server.url)
                .await
                .expect("a GET is answered, sent again if need be");
            assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 3);
        assert_eq!(
            requests.load(Ordering::SeqCst),
            5,
            "the second and third GETs went out twice"
        );
        let records = gate.audit().recent();
        assert_eq!(records.len(), 3, "one audit record per request");
        assert_eq!(reuse(&records), [false, false, false]);
        // Three requests took the three tokens; their second sending took none.
        let (status, _) = send(&gate, &version, http::Method::GET, &server.url)
            .await
            .unwrap();
        assert_eq!(status.as_u16(), 429);
    }

    #[tokio::test]
    async fn a_post_whose_reused_connection_closed_unanswered_is_never_sent_again() {
        let (server, requests) = server_dropping_second_requests().await;
        let gate = gate(&[&server], PoolLimits::default());
        let version = gate.connections();
        send(&gate, &version, http::Method::POST, &server.url)
            .await
            .expect("the first POST is answered");
        let failed = send(&gate, &version, http::Method::POST, &server.url).await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 2, "the POST went out once");
        assert_eq!(server.opened.load(Ordering::SeqCst), 1);
        let record = gate.audit().recent().pop().unwrap();
        assert!(
            record
                .denied
                .is_some_and(|d| d.contains("incomplete") || d.contains("closed"))
        );
    }

    #[tokio::test]
    async fn idle_connections_close_after_the_idle_timeout() {
        let server = server(None).await;
        let pool = PoolLimits {
            idle_timeout: Duration::from_millis(100),
            ..PoolLimits::default()
        };
        let gate = gate(&[&server], pool);
        let version = gate.connections();
        get(&gate, &version, &format!("{}/", server.url))
            .await
            .unwrap();
        eventually("the idle connection is closed by the client", || {
            server.closed.load(Ordering::SeqCst) == 1
        })
        .await;
        get(&gate, &version, &format!("{}/", server.url))
            .await
            .unwrap();
        assert_eq!(server.opened.load(Ordering::SeqCst), 2);
        assert_eq!(reuse(&gate.audit().recent()), [false, false]);
    }

    #[tokio::test]
    async fn a_version_opens_no_more_than_its_connection_bound() {
        let (a, b) = (server(None).await, server(None).await);
        let pool = PoolLimits {
            max_connections: 1,
            ..PoolLimits::default()
        };
        let gate = gate(&[&a, &b], pool);
        let version = gate.connections();
        get(&gate, &version, &format!("{}/", a.url)).await.unwrap();
        // The idle connection to `a` holds the only place: `b` waits the connect timeout.
        let refused = get(&gate, &version, &format!("{}/", b.url)).await;
        assert!(refused.is_err(), "{refused:?}");
        assert_eq!(b.opened.load(Ordering::SeqCst), 0);
        let record = gate.audit().recent().pop().unwrap();
        let reason = record.denied.unwrap();
        assert!(reason.contains("--egress-max-connections"), "{reason}");
    }

    #[tokio::test]
    async fn tls_connections_are_reused_and_new_ones_resume_the_session() {
        let (server, handshakes, tls) = tls_server(false).await;
        let gate = gate(&[&server], PoolLimits::default());
        let pool = PoolLimits {
            idle_timeout: Duration::from_millis(100),
            ..PoolLimits::default()
        };
        let version = tls_connections(&server, &gate, &tls, pool);
        for _ in 0..3 {
            get(&gate, &version, &format!("{}/", server.url))
                .await
                .unwrap();
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 1);
        eventually("the idle TLS connection closes", || {
            server.closed.load(Ordering::SeqCst) == 1
        })
        .await;
        get(&gate, &version, &format!("{}/", server.url))
            .await
            .unwrap();
        assert_eq!(server.opened.load(Ordering::SeqCst), 2);
        assert_eq!(
            *handshakes.lock().unwrap(),
            [HandshakeKind::Full, HandshakeKind::Resumed],
            "the second connection resumes the first one's session"
        );
        assert_eq!(reuse(&gate.audit().recent()), [false, true, true, false]);
    }

    #[tokio::test]
    async fn a_server_offering_http2_gets_one_multiplexed_connection() {
        let (server, _, tls) = tls_server(true).await;
        let gate = gate(&[&server], PoolLimits::default());
        let version = tls_connections(&server, &gate, &tls, PoolLimits::default());
        let url = format!("{}/", server.url);
        get(&gate, &version, &url).await.unwrap();
        let concurrent: Vec<_> = (0..5)
            .map(|_| {
                let (gate, version, url) = (gate.clone(), version.clone(), url.clone());
                tokio::spawn(async move { get(&gate, &version, &url).await })
            })
            .collect();
        for request in concurrent {
            request.await.unwrap().unwrap();
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 1);
        let mut expected = vec![true; 6];
        expected[0] = false;
        assert_eq!(reuse(&gate.audit().recent()), expected);
    }

    #[tokio::test]
    async fn over_http2_the_granted_authority_is_sent_and_a_host_header_is_not() {
        let (server, _, tls) = tls_server(true).await;
        let gate = gate(&[&server], PoolLimits::default());
        let version = tls_connections(&server, &gate, &tls, PoolLimits::default());
        let caller = Arc::new(Caller {
            provider: "pooled".into(),
            version: "sha256:0123456789ab".into(),
        });
        let authority = server.url.trim_start_matches("https://").to_string();
        // wasmtime adds `Host` (the guest's authority) to every request; a host-side
        // request may name another virtual host in it.
        for host in [authority.as_str(), "admin.internal.example"] {
            let request = http::Request::get(format!("{}/authority", server.url))
                .header(http::header::HOST, host)
                .body(bytes::Bytes::new())
                .unwrap();
            let hooks = gate.hooks(caller.clone(), version.clone());
            let (status, body) = send_through(hooks, request).await.unwrap();
            assert_eq!(status, 200);
            assert_eq!(
                body,
                format!("{authority} host=None"),
                "Host sent as {host}"
            );
        }
        assert_eq!(server.opened.load(Ordering::SeqCst), 1);
        let records = gate.audit().recent();
        assert!(records.iter().all(|r| r.host == server.url), "{records:?}");
        assert_eq!(reuse(&records), [false, true]);
    }
}

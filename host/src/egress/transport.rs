//! Opening a connection for a request the gate allowed: resolve the name, refuse internal
//! addresses the grant does not name, connect (with TLS for `https`); and the between-bytes
//! timeout and size cap of the response. [`super::pool`] keeps the connections.
//!
//! Resolution happens here, not in the OS's connect, so the address checked is the address
//! connected to: a granted name that resolves inward is refused at connect time. The answer
//! may come from the gate's DNS cache ([`super::dns`]); the check runs on it for every new
//! connection all the same, so a cached answer that now points inward is refused.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;
use wasmtime_wasi_http::{Error, WasiBody};

use super::address::{self, Internal};
use super::dns::Resolver;
use super::policy::{Destination, HostPattern, Scheme};

/// Timeouts and limits of one request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time to resolve, connect and finish TLS (`--egress-connect-timeout`, default 5s).
    pub connect_timeout: Duration,
    /// Time from sending the request to the first byte of the response
    /// (`--egress-first-byte-timeout`, default 30s).
    pub first_byte_timeout: Duration,
    /// Longest pause allowed between two chunks of the response body (default 30s; the
    /// manager sets it to the first-byte timeout).
    pub between_bytes_timeout: Duration,
    /// Largest response body, in bytes (`--egress-max-response`, default 8 MiB); a larger
    /// one fails the request.
    pub max_response_bytes: u64,
}

/// Why no connection was made.
#[derive(Debug)]
pub enum ConnectRefusal {
    /// Every address of the destination is internal and the grant names none of them.
    Internal { address: IpAddr, reason: Internal },
    /// The transport failed (DNS, TCP, TLS); the error is the guest-visible code.
    Failed(Error, String),
}

impl std::fmt::Display for ConnectRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectRefusal::Internal { address, reason } => {
                write!(f, "{address} is {reason}")
            }
            ConnectRefusal::Failed(_, message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ConnectRefusal {}

/// The TLS client configuration: the Mozilla root set and `extra_roots`, ring crypto.
/// A certificate that does not parse as a trust anchor is skipped.
pub fn tls_config(extra_roots: &[CertificateDer<'static>]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    roots.add_parsable_certificates(extra_roots.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth());
    match config {
        Ok(config) => Arc::new(config),
        // ring supports the default protocol versions; this cannot fail, but never panic.
        Err(err) => unreachable!("ring lacks default TLS versions: {err}"),
    }
}

/// The addresses of `dest` a request may connect to under `grant`: `resolver`'s answer
/// (cached or not, within the connect timeout) without the internal addresses the grant
/// does not name. Runs for every new connection, so a cached answer is checked again each
/// time it is used.
pub async fn resolve_allowed(
    dest: &Destination,
    grant: &HostPattern,
    limits: &Limits,
    resolver: &Resolver,
) -> Result<Vec<SocketAddr>, ConnectRefusal> {
    let lookup = resolver.lookup(&dest.host);
    let addresses: Vec<SocketAddr> =
        match tokio::time::timeout(limits.connect_timeout, lookup).await {
            Err(_) => {
                let message = format!("DNS lookup of {} timed out", dest.host);
                return Err(ConnectRefusal::Failed(Error::DnsTimeout, message));
            }
            Ok(found) => found?
                .into_iter()
                .map(|ip| SocketAddr::new(ip, dest.port))
                .collect(),
        };
    let mut refused = None;
    let allowed: Vec<SocketAddr> = addresses
        .into_iter()
        .filter(|addr| match address::internal(addr.ip()) {
            None => true,
            Some(_) if grant.names_address(addr.ip()) => true,
            Some(reason) => {
                refused.get_or_insert((addr.ip(), reason));
                false
            }
        })
        .collect();
    match (allowed.is_empty(), refused) {
        (true, Some((address, reason))) => Err(ConnectRefusal::Internal { address, reason }),
        (true, None) => Err(ConnectRefusal::Failed(
            Error::DestinationNotFound,
            format!("{} has no addresses", dest.host),
        )),
        (false, _) => Ok(allowed),
    }
}

/// A connected byte stream, plain or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A new connection: the byte stream, and whether TLS negotiated HTTP/2 through ALPN.
pub struct Opened {
    pub stream: Box<dyn Stream>,
    pub http2: bool,
}

/// Connect to the first reachable address and, for `https`, complete TLS for `dest.host`.
pub async fn connect(
    dest: &Destination,
    addresses: &[SocketAddr],
    tls: &Arc<rustls::ClientConfig>,
    limits: &Limits,
) -> Result<Opened, ConnectRefusal> {
    let attempt = async {
        let mut last_error = None;
        for addr in addresses {
            match TcpStream::connect(addr).await {
                Ok(stream) => return Ok(stream),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
    };
    let tcp = match tokio::time::timeout(limits.connect_timeout, attempt).await {
        Err(_) => {
            return Err(ConnectRefusal::Failed(
                Error::ConnectionTimeout,
                "connect timed out".into(),
            ));
        }
        Ok(Err(err)) => {
            let message = format!("connect failed: {err}");
            return Err(ConnectRefusal::Failed(Error::ConnectionRefused, message));
        }
        Ok(Ok(tcp)) => tcp,
    };
    if dest.scheme == Scheme::Http {
        return Ok(Opened {
            stream: Box::new(tcp),
            http2: false,
        });
    }
    let server_name = match dest.host.parse::<IpAddr>() {
        Ok(ip) => rustls::pki_types::ServerName::from(ip),
        Err(_) => rustls::pki_types::ServerName::try_from(dest.host.clone()).map_err(|err| {
            ConnectRefusal::Failed(Error::TlsProtocolError, format!("invalid TLS name: {err}"))
        })?,
    };
    let handshake = TlsConnector::from(tls.clone()).connect(server_name, tcp);
    match tokio::time::timeout(limits.connect_timeout, handshake).await {
        Err(_) => Err(ConnectRefusal::Failed(
            Error::ConnectionTimeout,
            "TLS handshake timed out".into(),
        )),
        Ok(Err(err)) => {
            let message = format!("TLS handshake failed: {err}");
            Err(ConnectRefusal::Failed(Error::TlsCertificateError, message))
        }
        Ok(Ok(tls_stream)) => Ok(Opened {
            http2: tls_stream.get_ref().1.alpn_protocol() == Some(b"h2"),
            stream: Box::new(tls_stream),
        }),
    }
}

/// The connection's I/O future, to be driven by whoever keeps the response. Pooled
/// connections are driven by the pool's own tasks, so the gate hands back an empty one.
pub type ConnectionTask = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// The guest-visible code `error` stands for, as a new value (the pooled client keeps the
/// original behind a reference).
pub fn same_code(error: &Error) -> Error {
    match error {
        Error::DnsTimeout => Error::DnsTimeout,
        Error::DnsError { rcode, info_code } => Error::DnsError {
            rcode: rcode.clone(),
            info_code: *info_code,
        },
        Error::DestinationNotFound => Error::DestinationNotFound,
        Error::ConnectionRefused => Error::ConnectionRefused,
        Error::ConnectionTimeout => Error::ConnectionTimeout,
        Error::ConnectionLimitReached => Error::ConnectionLimitReached,
        Error::ConnectionTerminated => Error::ConnectionTerminated,
        Error::ConnectionReadTimeout => Error::ConnectionReadTimeout,
        Error::TlsProtocolError => Error::TlsProtocolError,
        Error::TlsCertificateError => Error::TlsCertificateError,
        Error::HttpRequestDenied => Error::HttpRequestDenied,
        Error::HttpRequestBodySize(size) => Error::HttpRequestBodySize(*size),
        Error::HttpRequestUriInvalid => Error::HttpRequestUriInvalid,
        Error::HttpResponseIncomplete => Error::HttpResponseIncomplete,
        Error::HttpProtocolError => Error::HttpProtocolError,
        other => Error::InternalError(Some(other.to_string())),
    }
}

/// A response body that fails once it exceeds `limit` bytes or stalls longer than
/// `between_bytes` between frames, and calls `on_end` with the byte count when it ends,
/// fails, or is dropped unread.
pub struct CappedBody<F: FnOnce(u64, Option<String>) + Send + Unpin + 'static> {
    inner: Incoming,
    limit: u64,
    received: u64,
    stall: Pin<Box<tokio::time::Sleep>>,
    between_bytes: Duration,
    on_end: Option<F>,
}

impl<F: FnOnce(u64, Option<String>) + Send + Unpin + 'static> CappedBody<F> {
    pub fn new(inner: Incoming, limits: &Limits, on_end: F) -> Self {
        CappedBody {
            inner,
            limit: limits.max_response_bytes,
            received: 0,
            stall: Box::pin(tokio::time::sleep(limits.between_bytes_timeout)),
            between_bytes: limits.between_bytes_timeout,
            on_end: Some(on_end),
        }
    }

    fn end(&mut self, failure: Option<String>) {
        if let Some(on_end) = self.on_end.take() {
            on_end(self.received, failure);
        }
    }
}

impl<F: FnOnce(u64, Option<String>) + Send + Unpin + 'static> Body for CappedBody<F> {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        if this.on_end.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                ready!(this.stall.as_mut().poll(cx));
                this.end(Some(
                    "response stalled past the between-bytes timeout".into(),
                ));
                Poll::Ready(Some(Err(Error::ConnectionReadTimeout)))
            }
            Poll::Ready(None) => {
                this.end(None);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(err))) => {
                this.end(Some(format!("response body failed: {err}")));
                Poll::Ready(Some(Err(Error::Hyper(err))))
            }
            Poll::Ready(Some(Ok(frame))) => {
                let deadline = tokio::time::Instant::now() + this.between_bytes;
                this.stall.as_mut().reset(deadline);
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if this.received > this.limit {
                        let limit = this.limit;
                        this.end(Some(format!("response body exceeds the {limit}-byte cap")));
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(Some(limit)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.on_end.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(u64, Option<String>) + Send + Unpin + 'static> Drop for CappedBody<F> {
    fn drop(&mut self) {
        if self.on_end.is_some() {
            let received = self.received;
            self.end(if self.inner.is_end_stream() {
                None
            } else {
                Some(format!("response dropped after {received} bytes"))
            });
        }
    }
}

/// A body of fixed bytes, for responses the gate makes itself.
pub fn full_body(text: impl Into<Bytes>) -> WasiBody {
    http_body_util::Full::new(text.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

//! A bare HTTPS GET for the manager's secure port, which serves a self-signed certificate
//! made at start: tests check what is served, not who serves it, so any certificate is
//! accepted (never do this outside tests).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, Error, SignatureScheme};

#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        tokio_rustls::rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        tokio_rustls::rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `GET https://addr/path` without credentials: the status code and body, or an error if
/// nothing answers. The manager answers only `/healthz`, `/readyz` and `/livez` so (by
/// default); `/metrics` needs [`get_with_token`].
pub async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    request(addr, path, None, None).await
}

/// `GET https://addr/path` with `Authorization: Bearer token`, as Prometheus scrapes with its
/// service account's token (tests use the API emulator's admin token, which the manager's
/// TokenReview and SubjectAccessReview accept).
pub async fn get_with_token(
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> std::io::Result<(u16, String)> {
    request(addr, path, Some(token), None).await
}

/// `GET https://addr/path` presenting the client certificate `chain_pem` (leaf first) with
/// its key `key_pem`, as a scraper authenticating with `--client-ca-file` does.
pub async fn get_with_certificate(
    addr: SocketAddr,
    path: &str,
    chain_pem: &str,
    key_pem: &str,
) -> std::io::Result<(u16, String)> {
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(std::io::Error::other)?;
    request(addr, path, None, Some((chain, key))).await
}

/// How long one request may take, handshake included: a port taken by another test's server
/// (ports are free only a moment ago) can hold a TLS handshake forever.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

async fn request(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> std::io::Result<(u16, String)> {
    tokio::time::timeout(REQUEST_TIMEOUT, exchange(addr, path, token, identity))
        .await
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {addr} within {REQUEST_TIMEOUT:?}"),
            )
        })?
}

async fn exchange(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> std::io::Result<(u16, String)> {
    let provider = Arc::new(ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)));
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(std::io::Error::other)?,
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::IpAddress(addr.ip().into()), tcp)
        .await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(connection);
    let mut request = http::Request::get(path).header(http::header::HOST, "localhost");
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(std::io::Error::other)?;
    let response = sender
        .send_request(request)
        .await
        .map_err(std::io::Error::other)?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A loopback port that was free a moment ago (0 would mean "serving disabled").
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("an ephemeral port")
}

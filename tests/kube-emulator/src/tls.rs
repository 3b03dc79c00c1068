//! HTTPS for the emulator: a certificate authority generated at start, a
//! serving certificate it signs for `localhost`, `127.0.0.1`, `::1` and the
//! bind address, and the listener that terminates TLS for axum.
//!
//! Why not plain HTTP: kubectl (like client-go) refuses to send a bearer
//! token over plain HTTP, so a kubeconfig with a token only works against
//! HTTPS. The CA goes into the kubeconfig (`certificate-authority-data`), so
//! clients verify the server as they verify a real cluster's, without
//! `insecure-skip-tls-verify`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::PrivateKeyDer;
use tokio_rustls::server::TlsStream;

/// A client that connects but never finishes the handshake must not hold a
/// task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshaken connections waiting for axum to pick them up.
const ACCEPT_BACKLOG: usize = 64;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating the certificate authority or serving certificate failed: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the serving certificate is not usable by rustls: {0}")]
    Config(#[from] tokio_rustls::rustls::Error),
}

/// The emulator's CA (its PEM, for kubeconfigs and clients) and the TLS
/// configuration serving with a certificate it signed.
pub struct Certificates {
    pub ca_pem: String,
    pub server: Arc<ServerConfig>,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates").finish_non_exhaustive()
    }
}

/// A fresh CA and a serving certificate for `bind`. Keys live only in
/// memory: every start is a new CA, so a kubeconfig is good for one run.
pub fn generate(bind: IpAddr) -> Result<Certificates, TlsError> {
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-emulator-ca");
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;

    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(serving_names(bind))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca)?;

    let mut server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone(), ca.der().clone()],
            PrivateKeyDer::from(key),
        )?;
    // Only HTTP/1.1 is served; say so, so clients offering h2 (kubectl
    // does) fall back instead of guessing.
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Certificates {
        ca_pem: ca.pem(),
        server: Arc::new(server),
    })
}

/// What a local client dials, plus the bind address when it is a specific
/// one.
fn serving_names(bind: IpAddr) -> Vec<String> {
    let loopback = [
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    let mut names = vec!["localhost".to_owned()];
    names.extend(loopback.iter().map(IpAddr::to_string));
    if !bind.is_unspecified() && !loopback.contains(&bind) {
        names.push(bind.to_string());
    }
    names
}

/// TLS connections for `axum::serve`. Handshakes run in their own tasks,
/// so one slow or broken client cannot hold up the others; axum only sees
/// connections that completed one.
pub struct TlsListener {
    local_addr: SocketAddr,
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accepting: JoinHandle<()>,
}

impl TlsListener {
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> io::Result<TlsListener> {
        let local_addr = listener.local_addr()?;
        let (sender, handshaken) = mpsc::channel(ACCEPT_BACKLOG);
        let accepting = tokio::spawn(accept(listener, TlsAcceptor::from(config), sender));
        Ok(TlsListener {
            local_addr,
            handshaken,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        // axum drops the listener at shutdown: stop accepting then.
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(connection) => connection,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

async fn accept(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    handshaken: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: back off rather than spin.
                tracing::warn!(%err, "kube-emulator cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Watch events are small writes; do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let handshaken = handshaken.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = handshaken.send((stream, peer)).await;
                }
                Ok(Err(err)) => tracing::debug!(%peer, %err, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_certificate_names_loopback_and_a_specific_bind_address() {
        let loopback = serving_names(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(loopback, ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(serving_names(IpAddr::V4(Ipv4Addr::UNSPECIFIED)), loopback);
        let specific = serving_names("10.0.0.7".parse().unwrap());
        assert_eq!(specific.last().map(String::as_str), Some("10.0.0.7"));
    }

    #[test]
    fn the_ca_is_pem() {
        let certificates = generate(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        assert!(
            certificates
                .ca_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
    }
}

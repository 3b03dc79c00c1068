//! The serving certificate: generated in memory at start unless `--tls-cert-file` and
//! `--tls-private-key-file` name one, as upstream does without `--cert-dir`; and, with
//! `--client-ca-file`, the CA that client certificates are verified against.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::ClientCertVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// Common name of the in-memory certificate, after upstream's self-signed pair name.
const SELF_SIGNED_NAME: &str = "cloud-controller-manager";

/// Where the serving certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// Generated in memory at start, for `localhost`, `127.0.0.1` and the bind address.
    SelfSigned,
    /// PEM files from `--tls-cert-file` (the chain, leaf first) and `--tls-private-key-file`.
    Files {
        /// `--tls-cert-file`.
        cert: PathBuf,
        /// `--tls-private-key-file`.
        key: PathBuf,
    },
}

/// Why the serving certificate cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or holds no certificate.
    #[error("serving certificate {path} (--tls-cert-file): {reason}")]
    CertFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key file cannot be read or holds no private key.
    #[error("serving key {path} (--tls-private-key-file): {reason}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Both files are readable, but rustls refuses the pair (say, a key of another certificate).
    #[error(
        "serving certificate {cert} (--tls-cert-file) and key {key} (--tls-private-key-file) cannot be used together: {error}"
    )]
    CertAndKey {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why rustls refused them.
        error: tokio_rustls::rustls::Error,
    },
    /// The in-memory certificate could not be generated.
    #[error("cannot generate the self-signed serving certificate: {0}")]
    SelfSigned(String),
    /// rustls refused the configuration itself.
    #[error("cannot set up TLS on the secure port: {0}")]
    Setup(tokio_rustls::rustls::Error),
    /// The client CA file cannot be read, holds no certificate, or holds one rustls refuses.
    #[error("client CA {path} (--client-ca-file): {reason}")]
    ClientCa {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The TLS side of the secure port: the certificate from `source` (generated for
/// `bind_address` when self-signed), HTTP/1.1 only. With `client_ca`, a client may present
/// a certificate, which must then chain to it (for client authentication); without one it
/// may still connect, and authenticate with a token.
pub(super) fn server_config(
    source: &TlsSource,
    bind_address: IpAddr,
    client_ca: Option<&Path>,
) -> Result<ServerConfig, TlsError> {
    let (chain, key) = match source {
        TlsSource::SelfSigned => self_signed(bind_address)?,
        TlsSource::Files { cert, key } => (read_chain(cert)?, read_key(key)?),
    };
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path, provider)?),
    };
    let mut server = builder
        .with_single_cert(chain, key)
        .map_err(|error| match source {
            TlsSource::Files { cert, key } => TlsError::CertAndKey {
                cert: cert.clone(),
                key: key.clone(),
                error,
            },
            TlsSource::SelfSigned => TlsError::Setup(error),
        })?;
    // Only HTTP/1.1 is served; say so, so a client offering h2 falls back instead of guessing.
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(server)
}

/// Verifies client certificates against the CAs in `path`; a client without one passes.
fn client_verifier(
    path: &Path,
    provider: Arc<tokio_rustls::rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let ca_error = |reason: String| TlsError::ClientCa {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|error| ca_error(format!("cannot read it: {error}")))?;
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate =
            certificate.map_err(|error| ca_error(format!("not valid PEM: {error}")))?;
        roots
            .add(certificate)
            .map_err(|error| ca_error(format!("not a usable CA certificate: {error}")))?;
    }
    if roots.is_empty() {
        return Err(ca_error("contains no PEM `CERTIFICATE` block".to_owned()));
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|error| ca_error(error.to_string()))
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
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let generate = || -> Result<_, rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let cert = self_signed_params(bind_address)?.self_signed(&key)?;
        Ok((vec![cert.der().clone()], PrivateKeyDer::from(key)))
    };
    generate().map_err(|error| TlsError::SelfSigned(error.to_string()))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let cert_error = |reason: String| TlsError::CertFile {
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

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let key_error = |reason: String| TlsError::KeyFile {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(cert: PathBuf, key: PathBuf) -> TlsError {
        server_config(
            &TlsSource::Files { cert, key },
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            None,
        )
        .expect_err("bad TLS files are refused")
    }

    #[test]
    fn unusable_cert_or_key_file_names_file_and_flag() {
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

        let error = refused(missing.clone(), key.clone()).to_string();
        assert!(error.contains(&missing.display().to_string()), "{error}");
        assert!(error.contains("--tls-cert-file"), "{error}");

        let error = refused(garbage.clone(), key.clone()).to_string();
        assert!(error.contains(&garbage.display().to_string()), "{error}");
        assert!(error.contains("--tls-cert-file"), "{error}");

        let error = refused(cert.clone(), garbage.clone()).to_string();
        assert!(error.contains(&garbage.display().to_string()), "{error}");
        assert!(error.contains("--tls-private-key-file"), "{error}");

        let error = refused(cert, other_key).to_string();
        assert!(error.contains("--tls-cert-file"), "{error}");
        assert!(error.contains("--tls-private-key-file"), "{error}");
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
}

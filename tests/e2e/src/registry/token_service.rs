//! The token service of a registry started with [`super::RegistryOptions::token_auth`]: what
//! distribution's `auth: token` delegates to, as Docker Hub's, ACR's or Harbor's token
//! endpoints are. It runs on 127.0.0.1 on a thread of its own (so a test may block on a child
//! process while the registry asks it nothing, and the client asks it for tokens), and
//! answers on `/token`:
//!
//! - `POST`, form-encoded `grant_type=refresh_token` (the OAuth2 exchange docker and
//!   containerd make with an identity token): the right refresh token gets
//!   `{"access_token": …}`, any other a 401;
//! - `GET` with `service` and `scope` query parameters (docker's and oci-client's exchange):
//!   the right basic login gets `{"token": …}`, a wrong one a 401, none a token granting
//!   nothing (anonymous, as the specification has it).
//!
//! Tokens are JWTs as distribution 2.8 verifies them (`registry/auth/token/token.go`):
//! signed ES256 (raw `r||s`) by a P-256 key whose self-signed certificate is both the
//! header's `x5c` (standard base64 DER) and the registry's `rootcertbundle`; `iss` the
//! configured issuer, `aud` the service, `nbf`/`exp` around now (the registry allows 60 s of
//! skew), and `access` the requested `repository` scopes.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD as BASE64, URL_SAFE_NO_PAD as BASE64URL};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::SigningKey;

use super::Credentials;

/// The `service` the registry names in its challenges and tokens' `aud`.
pub const SERVICE: &str = "wasm-ccm-tests-registry";
/// The `iss` of the tokens and the registry's trusted issuer.
pub const ISSUER: &str = "wasm-ccm-tests-token-service";
/// How long a token is valid.
const LIFETIME_SECS: u64 = 300;

/// Who the token service grants tokens to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenAuth {
    /// The basic login a `GET` exchange must present.
    pub login: Credentials,
    /// The OAuth2 refresh token (an identity token) a `POST` exchange must present.
    pub refresh_token: String,
}

/// One request the token service answered, for tests to check what a client asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The form's `grant_type` (`POST`).
    pub grant_type: Option<String>,
    /// The form's `client_id` (`POST`).
    pub client_id: Option<String>,
    /// The `service` asked for.
    pub service: Option<String>,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// The answer's status.
    pub status: u16,
}

/// A signing key and its certificate.
struct Signer {
    key: rcgen::KeyPair,
    certificate_der: Vec<u8>,
    certificate_pem: String,
}

impl Signer {
    fn new() -> Signer {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .expect("P-256 signing key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasm-ccm tests token signer");
        let certificate = params.self_signed(&key).expect("signing certificate");
        Signer {
            key,
            certificate_der: certificate.der().to_vec(),
            certificate_pem: certificate.pem(),
        }
    }

    /// A JWT for `subject` granting `access` (`type`, `name`, `actions`).
    fn token(&self, subject: &str, access: &[(String, String, Vec<String>)], id: u64) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs();
        let header = serde_json::json!({
            "typ": "JWT",
            "alg": "ES256",
            "x5c": [BASE64.encode(&self.certificate_der)],
        });
        let access: Vec<serde_json::Value> = access
            .iter()
            .map(|(kind, name, actions)| {
                serde_json::json!({ "type": kind, "name": name, "actions": actions })
            })
            .collect();
        let claims = serde_json::json!({
            "iss": ISSUER,
            "sub": subject,
            "aud": SERVICE,
            "exp": now + LIFETIME_SECS,
            "nbf": now - 1,
            "iat": now,
            "jti": format!("wasm-ccm-tests-{id}"),
            "access": access,
        });
        let signed = format!(
            "{}.{}",
            BASE64URL.encode(header.to_string()),
            BASE64URL.encode(claims.to_string())
        );
        let der = self.key.sign(signed.as_bytes()).expect("sign token");
        format!("{signed}.{}", BASE64URL.encode(raw_signature(&der)))
    }
}

/// An ECDSA signature as JWS wants it (`r||s`, 32 bytes each) from the DER `SEQUENCE { r, s }`
/// rcgen (as X.509) makes.
fn raw_signature(der: &[u8]) -> Vec<u8> {
    // SEQUENCE, short length (a P-256 signature is at most 72 bytes), then two INTEGERs.
    assert_eq!(der[0], 0x30, "a DER sequence");
    let mut rest = &der[2..];
    let mut raw = Vec::with_capacity(64);
    for _ in 0..2 {
        assert_eq!(rest[0], 0x02, "a DER integer");
        let len = usize::from(rest[1]);
        let value = &rest[2..2 + len];
        let value = &value[value.len().saturating_sub(32)..];
        raw.extend(std::iter::repeat_n(0, 32 - value.len()));
        raw.extend_from_slice(value);
        rest = &rest[2 + len..];
    }
    raw
}

struct State {
    auth: TokenAuth,
    signer: Signer,
    issued: AtomicU64,
    requests: Mutex<Vec<TokenRequest>>,
}

/// A running token service; stops on drop.
pub struct TokenService {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TokenService {
    /// Serve on a free loopback port.
    pub fn start(auth: TokenAuth) -> TokenService {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind token service");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("token service address");
        let state = Arc::new(State {
            auth,
            signer: Signer::new(),
            issued: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("token service runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    _ = stopped => {}
                    _ = accept(listener, serving) => {}
                }
            });
        });
        TokenService {
            addr,
            state,
            stop: Some(stop),
        }
    }

    /// `http://127.0.0.1:PORT/token`: the registry's `realm`.
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The signing certificate (PEM): the registry's `rootcertbundle`.
    pub fn certificate_pem(&self) -> &str {
        &self.state.signer.certificate_pem
    }

    /// A token for `scope` (`repository:NAME:ACTIONS`), as the exchange would grant it.
    pub fn token_for(&self, scope: &str) -> String {
        self.state.token("tests", &[scope.to_string()])
    }

    /// The requests answered so far, oldest first.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for TokenService {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn accept(listener: tokio::net::TcpListener, state: Arc<State>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let state = state.clone();
        let service = service_fn(move |request| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(state.answer(request).await) }
        });
        tokio::spawn(
            hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tcp), service),
        );
    }
}

impl State {
    fn token(&self, subject: &str, scopes: &[String]) -> String {
        let access: Vec<(String, String, Vec<String>)> = scopes
            .iter()
            .filter_map(|scope| parse_scope(scope))
            .collect();
        let id = self.issued.fetch_add(1, Ordering::SeqCst);
        self.signer.token(subject, &access, id)
    }

    async fn answer(
        &self,
        request: http::Request<hyper::body::Incoming>,
    ) -> http::Response<Full<Bytes>> {
        let method = request.method().clone();
        let authorization = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let form_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/x-www-form-urlencoded");
        let path_ok = request.uri().path() == "/token";
        let query = request.uri().query().unwrap_or_default().to_string();
        let body = Limited::new(request.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut record = TokenRequest {
            method: method.to_string(),
            grant_type: None,
            client_id: None,
            service: None,
            scopes: Vec::new(),
            status: 0,
        };
        let (status, json) = if !path_ok {
            (404, serde_json::json!({ "error": "not_found" }))
        } else if method == http::Method::POST {
            let form = parse_form(&String::from_utf8_lossy(&body));
            let one = |name: &str| form.get(name).and_then(|v| v.first()).cloned();
            record.grant_type = one("grant_type");
            record.client_id = one("client_id");
            record.service = one("service");
            record.scopes = scopes(&form);
            if !form_type || record.grant_type.as_deref() != Some("refresh_token") {
                (
                    400,
                    serde_json::json!({ "error": "unsupported_grant_type" }),
                )
            } else if record.service.as_deref() != Some(SERVICE) {
                (400, serde_json::json!({ "error": "invalid_request" }))
            } else if one("refresh_token").as_deref() != Some(self.auth.refresh_token.as_str()) {
                (401, serde_json::json!({ "error": "invalid_grant" }))
            } else {
                let token = self.token("identity-token-holder", &record.scopes);
                (
                    200,
                    serde_json::json!({
                        "access_token": token,
                        "expires_in": LIFETIME_SECS,
                        "scope": record.scopes.join(" "),
                    }),
                )
            }
        } else if method == http::Method::GET {
            let query = parse_form(&query);
            record.service = query.get("service").and_then(|v| v.first()).cloned();
            record.scopes = scopes(&query);
            match authorization {
                None => {
                    // Anonymous: a token, granting nothing.
                    let token = self.token("", &[]);
                    (200, serde_json::json!({ "token": token }))
                }
                Some(header) if header == self.auth.login.basic_authorization() => {
                    let token = self.token(&self.auth.login.username, &record.scopes);
                    (
                        200,
                        serde_json::json!({ "token": token, "expires_in": LIFETIME_SECS }),
                    )
                }
                Some(_) => (
                    401,
                    serde_json::json!({ "details": "incorrect username or password" }),
                ),
            }
        } else {
            (405, serde_json::json!({ "error": "method not allowed" }))
        };
        record.status = status;
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record);
        http::Response::builder()
            .status(status)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json.to_string())))
            .expect("token service response")
    }
}

/// Every `scope` value, split at spaces (a client may ask several in one).
fn scopes(form: &HashMap<String, Vec<String>>) -> Vec<String> {
    form.get("scope")
        .into_iter()
        .flatten()
        .flat_map(|scope| scope.split(' '))
        .filter(|scope| !scope.is_empty())
        .map(str::to_string)
        .collect()
}

/// `repository:NAME:pull,push` as (type, name, actions); a name may hold no colon here.
fn parse_scope(scope: &str) -> Option<(String, String, Vec<String>)> {
    let (kind, rest) = scope.split_once(':')?;
    let (name, actions) = rest.rsplit_once(':')?;
    Some((
        kind.to_string(),
        name.to_string(),
        actions.split(',').map(str::to_string).collect(),
    ))
}

/// `application/x-www-form-urlencoded` (also a query string) as name → values.
fn parse_form(text: &str) -> HashMap<String, Vec<String>> {
    let mut form: HashMap<String, Vec<String>> = HashMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        form.entry(decode(name)).or_default().push(decode(value));
    }
    form
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

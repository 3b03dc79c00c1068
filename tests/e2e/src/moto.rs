//! moto (PyPI `moto[server]`, pinned in `tests/install-test-tools.sh`) as an independent AWS
//! implementation: one `moto_server` on 127.0.0.1 serving EC2, ELBv2 and STS with signature
//! checking on, seeded with an IAM user whose key may use `ec2:*`, `elasticloadbalancing:*`
//! and `sts:*`, and a role a web identity may assume with the same rights (more users, each
//! with its own policy, from [`Moto::user`]); and [`Front`], a
//! server in front of it that sees every request and may answer for moto (an injected AWS
//! error) or change what it forwards (a tampered body).
//!
//! ```no_run
//! # async fn example() {
//! let moto = e2e::moto::Moto::start().await;
//! // Sign for moto.url() in e2e::moto::REGION with moto.access_key_id and
//! // moto.secret_access_key; post web identity exchanges to moto.unsigned_sts().await.url().
//! # }
//! ```
//!
//! What moto does that AWS does not, and how the harness works around it:
//! - moto serves every service on one port and routes a signed request by the service of its
//!   credential scope (the `Host` header is ignored), so a grant for it names several
//!   services;
//! - with checking on (`INITIAL_NO_AUTH_ACTION_COUNT=0`) moto answers an unsigned request,
//!   even STS `AssumeRoleWithWebIdentity`, with 500. `POST /moto-api/reset-auth` with body
//!   `N` (content type `text/plain`: a form type gives 500) lets the next N actions through
//!   unchecked, so the harness seeds with that, and [`Moto::unsigned_sts`] sends `1` just
//!   before it forwards each exchange. Nothing else may reach moto between the two, so a
//!   test exchanging keys sends nothing else to moto at that moment;
//! - moto checks a form's signature against the form it parsed, encoded again with a space
//!   as `+`: a value with a space signed as AWS takes it (`%20`) is refused, so the harness
//!   encodes spaces as `+`;
//! - moto refuses a signed `GET` query (botocore's own signer gets 401 too): tests send the
//!   Query API as form `POST`s, as the AWS SDKs do.

use std::convert::Infallible;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// How long a starting moto may take to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The region tests sign for.
pub const REGION: &str = "us-east-1";

/// The role a web identity assumes.
pub const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/wasm-ccm";

/// What the seeded user and role may do.
const POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ec2:*","elasticloadbalancing:*","sts:*"],"Resource":"*"}]}"#;

/// Who may assume the role: any web identity (moto does not check the token).
const TRUST: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::123456789012:oidc-provider/oidc.example"},"Action":"sts:AssumeRoleWithWebIdentity"}]}"#;

/// The URL in werkzeug's ` * Running on http://127.0.0.1:PORT` line of moto's log.
fn serving_url(log: &str) -> Option<String> {
    log.lines()
        .find_map(|line| line.trim().strip_prefix("* Running on "))
        .map(|url| url.trim().to_owned())
}

/// A `moto_server` child process, killed on drop, and the key it was seeded with.
pub struct Moto {
    url: String,
    child: Mutex<Option<Child>>,
    log: tempfile::NamedTempFile,
    http: Client<HttpConnector, Full<Bytes>>,
    /// The seeded user's access key id.
    pub access_key_id: String,
    /// The seeded user's secret key.
    pub secret_access_key: String,
}

impl Moto {
    /// moto on a port of 127.0.0.1 with signature checking on, seeded.
    ///
    /// moto binds port 0 and the port it got is read from its log: a port picked free
    /// beforehand could be taken meanwhile by another test's moto, which this one would then
    /// seed and sign for.
    pub async fn start() -> Moto {
        let server = crate::python_tool("moto_server");
        let log = tempfile::NamedTempFile::new().expect("moto log");
        let child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", "0"])
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "0")
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("moto log"))
            .stderr(log.reopen().expect("moto log"))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", server.display()));
        let mut moto = Moto {
            url: String::new(),
            child: Mutex::new(Some(child)),
            log,
            http: Client::builder(TokioExecutor::new()).build_http(),
            access_key_id: String::new(),
            secret_access_key: String::new(),
        };
        moto.wait_ready().await;
        moto.seed().await;
        moto
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What moto wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Let the next `count` actions through without checking their signature.
    pub async fn reset_auth(&self, count: u32) {
        let (status, body) = self
            .post(
                "/moto-api/reset-auth",
                "text/plain",
                None,
                count.to_string(),
            )
            .await;
        assert_eq!(status, 200, "moto reset-auth {count}: {body}");
    }

    /// Send `form` to `service` unchecked, as a setup step: moto routes by the service in the
    /// (unverified) credential scope. The answer's body.
    pub async fn unchecked(&self, service: &str, form: &[(&str, &str)]) -> String {
        self.reset_auth(1).await;
        let body = form_body(form);
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=AKIDSETUP/20260101/{REGION}/{service}/aws4_request, SignedHeaders=host, Signature=0"
        );
        let (status, answer) = self
            .post(
                "/",
                "application/x-www-form-urlencoded",
                Some(&authorization),
                body,
            )
            .await;
        assert_eq!(status, 200, "moto {service} {form:?}: {answer}");
        answer
    }

    /// An STS endpoint for unsigned web identity exchanges: a [`Front`] that lets each one
    /// through moto's signature check (`reset-auth 1`) just before forwarding it.
    pub async fn unsigned_sts(&self) -> Front {
        Front::start(self, true, Arc::new(|_| None)).await
    }

    /// A [`Front`] whose `handler` sees every request first.
    pub async fn front(&self, handler: Handler) -> Front {
        Front::start(self, false, handler).await
    }

    /// Wait for moto to say where it serves (werkzeug's ` * Running on URL`), then for it
    /// to answer there.
    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_mut()
                .and_then(|child| child.try_wait().expect("moto status"));
            if let Some(status) = exited {
                panic!("moto exited ({status}) before serving:\n{}", self.log());
            }
            if self.url.is_empty() {
                self.url = serving_url(&self.log()).unwrap_or_default();
            }
            if self.url.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "moto did not say where it serves within {READY_TIMEOUT:?}:\n{}",
                    self.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let request = http::Request::get(format!("{}/moto-api/data.json", self.url))
                .body(Full::new(Bytes::new()))
                .expect("request");
            if self.http.request(request).await.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "moto did not answer on {} within {READY_TIMEOUT:?}:\n{}",
                self.url,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The IAM user `wasm-ccm` with a key and the policy, and the role `wasm-ccm` with it.
    async fn seed(&mut self) {
        let (access_key_id, secret_access_key) = self.user("wasm-ccm", POLICY).await;
        self.access_key_id = access_key_id;
        self.secret_access_key = secret_access_key;
        let iam = |action: &'static str| [("Action", action), ("Version", "2010-05-08")];
        let role = [("RoleName", "wasm-ccm")];
        self.unchecked(
            "iam",
            &[
                &iam("CreateRole")[..],
                &role,
                &[("AssumeRolePolicyDocument", TRUST)],
            ]
            .concat(),
        )
        .await;
        let policy = [("PolicyName", "wasm-ccm"), ("PolicyDocument", POLICY)];
        self.unchecked("iam", &[&iam("PutRolePolicy")[..], &role, &policy].concat())
            .await;
    }

    /// A new IAM user `name` allowed what `policy` (an IAM policy document) allows: its
    /// access key id and secret key. moto checks every signed request against it.
    pub async fn user(&self, name: &str, policy: &str) -> (String, String) {
        let iam = |action: &'static str| [("Action", action), ("Version", "2010-05-08")];
        let user = [("UserName", name)];
        self.unchecked("iam", &[&iam("CreateUser")[..], &user].concat())
            .await;
        let key = self
            .unchecked("iam", &[&iam("CreateAccessKey")[..], &user].concat())
            .await;
        let field = |tag: &str| {
            let start = key.find(&format!("<{tag}>")).expect(tag) + tag.len() + 2;
            let end = key[start..].find('<').expect(tag) + start;
            key[start..end].to_string()
        };
        let policy = [("PolicyName", name), ("PolicyDocument", policy)];
        self.unchecked("iam", &[&iam("PutUserPolicy")[..], &user, &policy].concat())
            .await;
        (field("AccessKeyId"), field("SecretAccessKey"))
    }

    async fn post(
        &self,
        path: &str,
        content_type: &str,
        authorization: Option<&str>,
        body: String,
    ) -> (u16, String) {
        let mut request = http::Request::post(format!("{}{path}", self.url))
            .header(http::header::CONTENT_TYPE, content_type);
        if let Some(authorization) = authorization {
            request = request.header(http::header::AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(Bytes::from(body))).expect("request");
        let response = self
            .http
            .request(request)
            .await
            .unwrap_or_else(|err| panic!("moto {path}: {err}\n{}", self.log()));
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.expect("moto answers");
        (
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(mut child) = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `form` URL-encoded, a space as `+`: moto checks a signature against the form it parsed,
/// encoded again that way.
pub fn form_body(form: &[(&str, &str)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let pairs: Vec<String> = form
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect();
    pairs.join("&")
}

/// A request a [`Front`] received, as it was received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Seen {
    /// The access key id of the request's `Authorization` header.
    pub fn access_key_id(&self) -> Option<&str> {
        let authorization = self
            .headers
            .get(http::header::AUTHORIZATION)?
            .to_str()
            .ok()?;
        let credential = authorization.split("Credential=").nth(1)?;
        credential.split('/').next()
    }
}

/// What a [`Front`] does with a request: `None` forwards it to moto as the handler left it
/// (changed or not); `Some((status, body))` answers it without moto.
pub type Handler = Arc<dyn Fn(&mut Seen) -> Option<(u16, String)> + Send + Sync>;

/// A server in front of moto: it keeps every request it receives and passes it to its
/// handler, then forwards it (with the `Host` it came with, which the signature covers) or
/// answers for moto.
pub struct Front {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    async fn start(moto: &Moto, unchecked: bool, handler: Handler) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("front listens");
        let url = format!("http://{}", listener.local_addr().expect("front address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let target = moto.url.clone();
        let (kept, http) = (seen.clone(), moto.http.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (kept, http, handler, target) =
                    (kept.clone(), http.clone(), handler.clone(), target.clone());
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let (kept, http, handler, target) =
                        (kept.clone(), http.clone(), handler.clone(), target.clone());
                    async move {
                        let (head, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let mut seen = Seen {
                            method: head.method,
                            uri: head.uri,
                            headers: head.headers,
                            body,
                        };
                        let answer = handler(&mut seen);
                        kept.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(seen.clone());
                        let (status, body) = match answer {
                            Some((status, body)) => (status, Bytes::from(body)),
                            None => forward(&http, &target, unchecked, seen).await,
                        };
                        let response = http::Response::builder()
                            .status(status)
                            .body(Full::new(body))
                            .expect("response");
                        Ok::<_, Infallible>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Front { url, seen, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Send `seen` on to moto at `target` (after `reset-auth 1` if `unchecked`); moto's answer.
async fn forward(
    http: &Client<HttpConnector, Full<Bytes>>,
    target: &str,
    unchecked: bool,
    seen: Seen,
) -> (u16, Bytes) {
    let send = |request: http::Request<Full<Bytes>>| async move {
        let response = http.request(request).await.map_err(|err| err.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|err| err.to_string())?;
        Ok::<_, String>((status, body.to_bytes()))
    };
    if unchecked {
        let reset = http::Request::post(format!("{target}/moto-api/reset-auth"))
            .header(http::header::CONTENT_TYPE, "text/plain")
            .body(Full::new(Bytes::from_static(b"1")))
            .expect("request");
        if let Err(err) = send(reset).await {
            return (502, Bytes::from(format!("moto reset-auth failed: {err}")));
        }
    }
    let path = seen.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = http::Request::builder()
        .method(seen.method)
        .uri(format!("{target}{path}"));
    for (name, value) in &seen.headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(seen.body)).expect("request");
    send(request)
        .await
        .unwrap_or_else(|err| (502, Bytes::from(format!("moto did not answer: {err}"))))
}

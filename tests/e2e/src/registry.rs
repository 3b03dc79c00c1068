//! A real OCI registry for the distribution tests: Debian's `docker-registry` (distribution
//! 2.8) run as a child process on 127.0.0.1, optionally behind htpasswd basic auth, behind
//! token auth with a token service of ours ([`token_service`]), or TLS, and ORAS's Python SDK
//! ([`Oras`]) as an independent client of it. `make test` installs both
//! (`tests/install-test-tools.sh`).
//!
//! ```no_run
//! # async fn example() {
//! use e2e::registry::{Credentials, Registry, RegistryOptions};
//! let registry = Registry::start(RegistryOptions {
//!     auth: Some(Credentials::new("alice", "s3cret")),
//!     ..RegistryOptions::default()
//! })
//! .await;
//! let wasm = std::path::Path::new("simcloud.wasm");
//! let digest = registry.oras().push_wasm(wasm, &registry.reference("simcloud:v1")).await;
//! // …run `wasm-ccm --provider oci://{reference}@{digest}` with
//! // `--registry-config` pointing at a file holding `registry.docker_config_json()`.
//! # }
//! ```
//!
//! The registry's storage is a plain directory in the distribution layout, so a test can
//! tamper with a stored blob ([`Registry::blob_path`]); [`Registry::stop`] and
//! [`Registry::restart`] take it away and bring it back on the same address and storage.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};

use crate::https;

pub mod token_service;

pub use token_service::{TokenAuth, TokenRequest, TokenService};

/// The CNCF wasm artifact's config media type.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF wasm artifact's one layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// How long a starting registry may take to answer `/v2/`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A registry user (for htpasswd) or a client's login.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl Credentials {
    pub fn new(username: &str, password: &str) -> Credentials {
        Credentials {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The `Authorization` header value: `Basic base64(user:password)`.
    pub fn basic_authorization(&self) -> String {
        format!("Basic {}", self.docker_auth())
    }

    /// `base64(user:password)`, the `auth` of a docker config entry.
    fn docker_auth(&self) -> String {
        BASE64.encode(format!("{}:{}", self.username, self.password))
    }
}

/// How to serve.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Require this user through htpasswd basic auth (bcrypt, written by `htpasswd -Bbn`).
    pub auth: Option<Credentials>,
    /// Serve HTTPS only, with a self-signed certificate for `127.0.0.1` and `localhost`.
    pub tls: bool,
    /// Require bearer tokens from a [`TokenService`] the harness runs on loopback
    /// (distribution's `auth: token`), granted for this login or refresh token. Not with
    /// `auth`.
    pub token_auth: Option<TokenAuth>,
}

/// A `docker-registry serve` child process on `127.0.0.1:PORT`, killed on drop. Its config,
/// storage, htpasswd file, certificate and log live in one temporary directory.
pub struct Registry {
    addr: SocketAddr,
    options: RegistryOptions,
    dir: tempfile::TempDir,
    certificate_pem: Option<String>,
    token_service: Option<TokenService>,
    /// Behind a lock so that stopping and restarting take `&self`: a test keeps closures that
    /// borrow the registry (for its address) across a stop.
    child: Mutex<Option<Child>>,
    /// While stopped, a socket bound (never listening) to the address: connections are
    /// refused, as a registry that is down refuses them, and no other test's server can be
    /// given the port and answer in its place.
    held_port: Mutex<Option<tokio::net::TcpSocket>>,
}

impl Registry {
    /// Write the config and start serving on a free loopback port; returns once `/v2/`
    /// answers. Panics, with what to do, when `docker-registry` or `htpasswd` is missing.
    pub async fn start(options: RegistryOptions) -> Registry {
        let dir = tempfile::tempdir().expect("registry temp dir");
        let addr = SocketAddr::from(([127, 0, 0, 1], https::free_port()));
        let storage = dir.path().join("storage");
        std::fs::create_dir(&storage).expect("registry storage dir");
        let mut config = format!(
            "version: 0.1\n\
             log:\n  level: info\n\
             storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
             http:\n  addr: {addr}\n  secret: wasm-ccm-tests\n",
            storage = yaml_path(&storage),
        );
        let mut certificate_pem = None;
        if options.tls {
            let certified =
                rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
                    .expect("self-signed certificate");
            let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
            std::fs::write(&cert, certified.cert.pem()).expect("write cert.pem");
            std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key.pem");
            config += &format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                yaml_path(&cert),
                yaml_path(&key)
            );
            certificate_pem = Some(certified.cert.pem());
        }
        if let Some(credentials) = &options.auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, htpasswd_line(credentials)).expect("write htpasswd");
            config += &format!(
                "auth:\n  htpasswd:\n    realm: wasm-ccm-tests\n    path: {}\n",
                yaml_path(&htpasswd)
            );
        }
        let mut token_service = None;
        if let Some(token_auth) = &options.token_auth {
            assert!(
                options.auth.is_none(),
                "token_auth and auth exclude each other"
            );
            let service = TokenService::start(token_auth.clone());
            let bundle = dir.path().join("token-signer.pem");
            std::fs::write(&bundle, service.certificate_pem()).expect("write rootcertbundle");
            config += &format!(
                "auth:\n  token:\n    realm: {}\n    service: {}\n    issuer: {}\n    rootcertbundle: {}\n",
                service.realm(),
                token_service::SERVICE,
                token_service::ISSUER,
                yaml_path(&bundle)
            );
            token_service = Some(service);
        }
        std::fs::write(dir.path().join("config.yml"), config).expect("write registry config");
        let registry = Registry {
            addr,
            options,
            dir,
            certificate_pem,
            token_service,
            child: Mutex::new(None),
            held_port: Mutex::new(None),
        };
        registry.serve().await;
        registry
    }

    /// Kill the registry (a test's "registry down"); its storage stays, and its address
    /// refuses connections until [`Registry::restart`].
    pub fn stop(&self) {
        if let Some(mut child) = self.child().take() {
            // Already exited is fine: either way it no longer serves.
            let _ = child.kill();
            let _ = child.wait();
            *self
                .held_port
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(hold_port(self.addr));
        }
    }

    /// Serve again on the same address with the same storage, users and certificate.
    pub async fn restart(&self) {
        self.stop();
        self.serve().await;
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:PORT/PATH`, e.g. `reference("simcloud:v1")`: what follows `oci://`.
    pub fn reference(&self, path: &str) -> String {
        format!("{}/{path}", self.addr)
    }

    /// The user htpasswd accepts, or the login the token service accepts, if the registry
    /// requires one.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.options
            .auth
            .as_ref()
            .or(self.options.token_auth.as_ref().map(|t| &t.login))
    }

    /// The token service of a registry started with `token_auth`.
    pub fn token_service(&self) -> Option<&TokenService> {
        self.token_service.as_ref()
    }

    /// The self-signed serving certificate (PEM) of a TLS registry.
    pub fn certificate_pem(&self) -> Option<&str> {
        self.certificate_pem.as_deref()
    }

    /// The data file of a stored blob (`docker/registry/v2/blobs/sha256/XX/HEX/data`), for
    /// tests that tamper with the registry's storage. Panics if it is not there.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_else(|| panic!("{digest:?} is not a sha256:HEX digest"));
        let path = self
            .dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data");
        assert!(
            path.is_file(),
            "blob {digest} is not in the registry's storage ({})",
            path.display()
        );
        path
    }

    /// A docker config (`~/.docker/config.json`, a `dockerconfigjson` Secret) with this
    /// registry's user, as `docker login 127.0.0.1:PORT` writes it. Panics without auth.
    pub fn docker_config_json(&self) -> String {
        let credentials = self
            .credentials()
            .expect("docker_config_json: the registry was started without auth");
        self.docker_config_json_for(credentials)
    }

    /// As [`Registry::docker_config_json`], for any login (say a wrong password).
    pub fn docker_config_json_for(&self, credentials: &Credentials) -> String {
        serde_json::json!({
            "auths": { self.addr.to_string(): { "auth": credentials.docker_auth() } }
        })
        .to_string()
    }

    /// A docker config with an identity token for this registry, as `docker login` writes it
    /// for ACR: a placeholder user with no password in `auth`, and the refresh token.
    pub fn docker_config_json_with_identity_token(&self, identity_token: &str) -> String {
        serde_json::json!({
            "auths": { self.addr.to_string(): {
                "auth": BASE64.encode("00000000-0000-0000-0000-000000000000:"),
                "identitytoken": identity_token,
            } }
        })
        .to_string()
    }

    /// ORAS logged in as the registry's user, if it has one.
    pub fn oras(&self) -> Oras {
        Oras::new(
            self.addr,
            self.credentials().map(|c| self.docker_config_json_for(c)),
        )
    }

    /// Run `cosign.py` (cosign's keyed signature layout implemented on its own: PyCA
    /// `cryptography` and plain registry requests, sharing no code with wasm-ccm) with `args`
    /// (`command`: `sign` or `verify`, `repository`, `digest`, `key`) against this registry;
    /// its JSON answer, or a panic with what it printed.
    pub fn cosign_py(&self, mut args: serde_json::Value) -> serde_json::Value {
        args["registry"] = self.addr.to_string().into();
        let output = Command::new(crate::python_tool("python"))
            .arg("-c")
            .arg(include_str!("registry/cosign.py"))
            .arg(args.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("run cosign.py");
        assert!(
            output.status.success(),
            "cosign.py {args}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("cosign.py prints JSON")
    }

    /// `GET http://127.0.0.1:PORT{path}` with an optional basic-auth login, accepting an OCI
    /// image manifest; the registry's response as it came. Plain HTTP, so a TLS registry
    /// answers it with a 400.
    pub async fn get(
        &self,
        path: &str,
        login: Option<&Credentials>,
    ) -> std::io::Result<http::Response<Bytes>> {
        let authorization = login.map(Credentials::basic_authorization);
        self.get_authorized(path, authorization.as_deref()).await
    }

    /// As [`Registry::get`], with any `Authorization` header (say `Bearer TOKEN`).
    pub async fn get_authorized(
        &self,
        path: &str,
        authorization: Option<&str>,
    ) -> std::io::Result<http::Response<Bytes>> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        let mut request = http::Request::get(path)
            .header(http::header::HOST, self.addr.to_string())
            .header(
                http::header::ACCEPT,
                "application/vnd.oci.image.manifest.v1+json",
            );
        if let Some(authorization) = authorization {
            request = request.header(http::header::AUTHORIZATION, authorization);
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(std::io::Error::other)?;
        let (parts, body) = sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?
            .into_parts();
        let body = body
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }

    /// What the registry logged since it was first started.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn serve(&self) {
        self.held_port
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.path().join("registry.log"))
            .expect("registry log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("registry log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot run `docker-registry` ({err}): the registry tests need Debian's \
                     docker-registry package; `make test` (or `make setup`) installs it"
                )
            });
        // Held before waiting, so a panic below still kills it (on drop).
        *self.child() = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let exited = self
                .child()
                .as_mut()
                .and_then(|child| child.try_wait().expect("registry status"));
            if let Some(status) = exited {
                panic!(
                    "docker-registry exited ({status}) before serving {}:\n{}",
                    self.addr,
                    self.log()
                );
            }
            let answered = if self.options.tls {
                https::get(self.addr, "/v2/").await.is_ok()
            } else {
                self.get("/v2/", None).await.is_ok()
            };
            if answered {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer /v2/ on {} within {READY_TIMEOUT:?}:\n{}",
                self.addr,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// YAML accepts a JSON string, which quotes any path.
fn yaml_path(path: &Path) -> String {
    serde_json::to_string(&path.to_str().expect("UTF-8 temp path")).expect("JSON string")
}

/// `user:$2y$…` for htpasswd's bcrypt, written by `htpasswd` itself so the file is what an
/// operator's would be.
fn htpasswd_line(credentials: &Credentials) -> Vec<u8> {
    let output = Command::new("htpasswd")
        .args(["-Bbn", &credentials.username, &credentials.password])
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run `htpasswd` ({err}): the registry tests need Debian's apache2-utils \
                 package; `make test` (or `make setup`) installs it"
            )
        });
    assert!(
        output.status.success(),
        "htpasswd -Bbn failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// ORAS's Python SDK (PyPI `oras`, pinned in `tests/install-test-tools.sh`) against one
/// registry over plain HTTP, logged in through a docker config file when the registry
/// requires it. References are `127.0.0.1:PORT/REPO:TAG` or `…@sha256:…`
/// ([`Registry::reference`]). Every call is one Python process; a failure panics with ORAS's
/// traceback.
pub struct Oras {
    registry: SocketAddr,
    /// HOME of the Python process (so no `~/.docker/config.json` of the machine is read),
    /// the docker config and the files of pushes.
    dir: tempfile::TempDir,
    docker_config: Option<PathBuf>,
}

impl Oras {
    fn new(registry: SocketAddr, docker_config_json: Option<String>) -> Oras {
        let dir = tempfile::tempdir().expect("oras temp dir");
        let docker_config = docker_config_json.map(|json| {
            let path = dir.path().join("docker-config.json");
            std::fs::write(&path, json).expect("write docker config");
            path
        });
        Oras {
            registry,
            dir,
            docker_config,
        }
    }

    /// Push `file` as the one layer of a manifest with this config; the manifest digest.
    pub async fn push(
        &self,
        file: &Path,
        reference: &str,
        config_media_type: &str,
        layer_media_type: &str,
        config_json: &str,
    ) -> String {
        let config = tempfile::NamedTempFile::new_in(self.dir.path()).expect("config file");
        std::fs::write(config.path(), config_json).expect("write config");
        let digest = self
            .run(serde_json::json!({
                "command": "push",
                "reference": reference,
                "file": file,
                "layer_media_type": layer_media_type,
                "config": config.path(),
                "config_media_type": config_media_type,
            }))
            .await;
        digest.as_str().expect("a digest string").to_owned()
    }

    /// Push a wasm file in the CNCF wasm layout (`application/vnd.wasm.config.v0+json`, one
    /// `application/wasm` layer) as a client other than wkg would: the config has the fields
    /// the layout requires, with a fixed `created` (the same file gives the same digest) and
    /// no `component` summary (ORAS does not read components). The manifest digest.
    pub async fn push_wasm(&self, file: &Path, reference: &str) -> String {
        let bytes = std::fs::read(file)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", file.display()));
        let config = serde_json::json!({
            "created": "2026-01-01T00:00:00Z",
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))],
        });
        self.push(
            file,
            reference,
            WASM_CONFIG_MEDIA_TYPE,
            WASM_LAYER_MEDIA_TYPE,
            &config.to_string(),
        )
        .await
    }

    /// The manifest ORAS fetches for `reference`.
    pub async fn manifest(&self, reference: &str) -> serde_json::Value {
        self.run(serde_json::json!({ "command": "manifest", "reference": reference }))
            .await
    }

    /// Pull the layers of `reference` into `dir`; the files written (named by each layer's
    /// `org.opencontainers.image.title`, else its digest).
    pub async fn pull(&self, reference: &str, dir: &Path) -> Vec<PathBuf> {
        let files = self
            .run(serde_json::json!({ "command": "pull", "reference": reference, "dir": dir }))
            .await;
        serde_json::from_value(files).expect("a list of pulled files")
    }

    async fn run(&self, mut args: serde_json::Value) -> serde_json::Value {
        let command = args["command"].as_str().expect("a command").to_owned();
        args["registry"] = self.registry.to_string().into();
        args["docker_config"] = serde_json::json!(self.docker_config);
        let python = crate::python_tool("python");
        let output = tokio::process::Command::new(&python)
            .arg("-c")
            .arg(include_str!("registry/oras.py"))
            .arg(args.to_string())
            .env("HOME", self.dir.path())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", python.display()));
        assert!(
            output.status.success(),
            "oras {command} failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "oras {command} printed no JSON ({err}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }
}

/// A socket bound to `addr` and never listening. Without `SO_REUSEADDR` no other socket may
/// bind the port (a listener's, which sets it, included); if the stopped registry left
/// connections in TIME_WAIT that bind fails, and the socket is bound with `SO_REUSEADDR`
/// instead, which still keeps the port from ephemeral (`:0`) binds such as
/// [`https::free_port`]'s.
fn hold_port(addr: SocketAddr) -> tokio::net::TcpSocket {
    let bind = |reuse: bool| {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(reuse)?;
        socket.bind(addr)?;
        Ok::<_, std::io::Error>(socket)
    };
    bind(false)
        .or_else(|_| bind(true))
        .unwrap_or_else(|err| panic!("hold the stopped registry's port {addr}: {err}"))
}

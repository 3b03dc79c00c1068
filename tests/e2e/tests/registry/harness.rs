//! The registry harness itself: what the distribution tests rely on about the registry and
//! ORAS before they test `wasm-ccm` against them.

use e2e::registry::{
    Credentials, Registry, RegistryOptions, TokenAuth, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE,
};

/// The smallest wasm module: magic and version. ORAS and the registry never look inside.
const TINY_WASM: &[u8] = b"\0asm\x01\0\0\0";

fn tiny_wasm_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("tiny.wasm");
    std::fs::write(&path, TINY_WASM).expect("write tiny.wasm");
    path
}

/// A registry that requires alice, and her login.
async fn behind_basic_auth() -> (Registry, Credentials) {
    let alice = Credentials::new("alice", "s3cret");
    let options = RegistryOptions {
        auth: Some(alice.clone()),
        ..RegistryOptions::default()
    };
    (Registry::start(options).await, alice)
}

#[tokio::test]
async fn registry_serves_the_distribution_api_on_loopback() {
    let registry = Registry::start(RegistryOptions::default()).await;
    assert!(registry.addr().ip().is_loopback());
    let response = registry.get("/v2/", None).await.expect("GET /v2/");
    assert_eq!(response.status(), 200, "{}", registry.log());
    assert_eq!(
        response.headers()["docker-distribution-api-version"],
        "registry/2.0"
    );
}

#[tokio::test]
async fn htpasswd_registry_asks_for_basic_auth_and_accepts_only_its_user() {
    let (registry, alice) = behind_basic_auth().await;

    let anonymous = registry.get("/v2/", None).await.expect("GET /v2/");
    assert_eq!(anonymous.status(), 401);
    assert_eq!(
        anonymous.headers()[http::header::WWW_AUTHENTICATE],
        r#"Basic realm="wasm-ccm-tests""#
    );
    let wrong = Credentials::new("alice", "wrong");
    let refused = registry.get("/v2/", Some(&wrong)).await.expect("GET /v2/");
    assert_eq!(refused.status(), 401);
    let accepted = registry.get("/v2/", Some(&alice)).await.expect("GET /v2/");
    assert_eq!(accepted.status(), 200, "{}", registry.log());

    let config: serde_json::Value =
        serde_json::from_str(&registry.docker_config_json()).expect("docker config is JSON");
    assert_eq!(
        config["auths"][registry.addr().to_string()]["auth"],
        "YWxpY2U6czNjcmV0",
        "base64 of alice:s3cret, as docker login writes it"
    );
}

/// ORAS logs in through the harness's docker config, pushes in the CNCF wasm layout, and the
/// registry serves exactly that over plain HTTP: media types, digests, the layer's bytes in
/// the storage where a test can tamper with them, and a byte-identical pull.
#[tokio::test]
async fn oras_pushes_wasm_in_the_cncf_layout_behind_basic_auth() {
    let (registry, alice) = behind_basic_auth().await;
    let files = tempfile::tempdir().expect("temp dir");
    let oras = registry.oras();
    let reference = registry.reference("tiny:v1");

    let digest = oras.push_wasm(&tiny_wasm_file(&files), &reference).await;

    let served = registry
        .get("/v2/tiny/manifests/v1", Some(&alice))
        .await
        .expect("GET manifest");
    assert_eq!(served.status(), 200, "{}", registry.log());
    assert_eq!(
        e2e::sha256_digest(served.body()),
        digest,
        "push returns the manifest digest"
    );
    let manifest: serde_json::Value = serde_json::from_slice(served.body()).expect("JSON");
    assert_eq!(manifest, oras.manifest(&reference).await);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest:#}");
    assert_eq!(layers[0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
    assert_eq!(layers[0]["digest"], e2e::sha256_digest(TINY_WASM));
    assert_eq!(layers[0]["size"], TINY_WASM.len());

    let config_path = registry.blob_path(manifest["config"]["digest"].as_str().unwrap());
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(config_path).unwrap()).expect("config JSON");
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["layerDigests"][0], e2e::sha256_digest(TINY_WASM));
    let stored =
        std::fs::read(registry.blob_path(&e2e::sha256_digest(TINY_WASM))).expect("stored layer");
    assert_eq!(stored, TINY_WASM);

    let pulled_dir = tempfile::tempdir().expect("temp dir");
    let by_digest = format!("{}@{digest}", registry.reference("tiny"));
    let pulled = oras.pull(&by_digest, pulled_dir.path()).await;
    assert_eq!(pulled, [pulled_dir.path().join("tiny.wasm")]);
    assert_eq!(std::fs::read(&pulled[0]).unwrap(), TINY_WASM);
}

/// What a "registry down" test relies on: a stopped registry refuses connections, and a
/// restarted one serves the same storage on the same address.
#[tokio::test]
async fn stopped_registry_refuses_connections_and_restarts_with_its_storage() {
    let registry = Registry::start(RegistryOptions::default()).await;
    let files = tempfile::tempdir().expect("temp dir");
    let reference = registry.reference("tiny:v1");
    let digest = registry
        .oras()
        .push_wasm(&tiny_wasm_file(&files), &reference)
        .await;
    let addr = registry.addr();

    registry.stop();
    let down = registry.get("/v2/", None).await;
    assert_eq!(
        down.expect_err("nothing serves").kind(),
        std::io::ErrorKind::ConnectionRefused
    );
    // Nor can another test's server take the address and answer in its place.
    assert_eq!(
        std::net::TcpListener::bind(addr)
            .expect_err("the stopped registry holds its port")
            .kind(),
        std::io::ErrorKind::AddrInUse
    );

    registry.restart().await;
    assert_eq!(registry.addr(), addr);
    let manifest = registry
        .get("/v2/tiny/manifests/v1", None)
        .await
        .expect("GET manifest");
    assert_eq!(manifest.status(), 200, "{}", registry.log());
    assert_eq!(e2e::sha256_digest(manifest.body()), digest);
}

#[tokio::test]
async fn tls_registry_serves_https_and_refuses_plain_http() {
    let registry = Registry::start(RegistryOptions {
        tls: true,
        ..RegistryOptions::default()
    })
    .await;
    assert!(
        registry
            .certificate_pem()
            .expect("a TLS registry has a certificate")
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    let (status, _) = e2e::https::get(registry.addr(), "/v2/")
        .await
        .expect("HTTPS GET /v2/");
    assert_eq!(status, 200, "{}", registry.log());

    let plain = registry.get("/v2/", None).await.expect("plain HTTP answer");
    assert_eq!(plain.status(), 400);
    assert_eq!(
        String::from_utf8_lossy(plain.body()),
        "Client sent an HTTP request to an HTTPS server.\n"
    );
}

/// What the token-auth tests rely on: the registry challenges for a bearer token from the
/// harness's token service, accepts the JWTs it signs (distribution 2.8's rules: issuer,
/// audience, time, `x5c` chained to `rootcertbundle`, ES256) for the scopes they grant, and
/// refuses one signed by any other key.
#[tokio::test]
async fn token_auth_registry_accepts_only_tokens_its_token_service_signed() {
    let token_auth = TokenAuth {
        login: Credentials::new("alice", "s3cret"),
        refresh_token: "refresh-0123".into(),
    };
    let registry = Registry::start(RegistryOptions {
        token_auth: Some(token_auth.clone()),
        ..RegistryOptions::default()
    })
    .await;
    let service = registry.token_service().expect("a token service");

    let anonymous = registry.get("/v2/", None).await.expect("GET /v2/");
    assert_eq!(anonymous.status(), 401);
    assert_eq!(
        anonymous.headers()[http::header::WWW_AUTHENTICATE],
        format!(
            r#"Bearer realm="{}",service="{}""#,
            service.realm(),
            e2e::registry::token_service::SERVICE
        )
    );

    let bearer = |token: &str| format!("Bearer {token}");
    let pull = service.token_for("repository:tiny:pull");
    let base = registry
        .get_authorized("/v2/", Some(&bearer(&pull)))
        .await
        .expect("GET /v2/");
    assert_eq!(base.status(), 200, "{}", registry.log());
    // The scope is enforced: a token for another repository does not list this one.
    let tags = registry
        .get_authorized("/v2/tiny/tags/list", Some(&bearer(&pull)))
        .await
        .expect("GET tags");
    assert_eq!(tags.status(), 404, "granted, and no such repository yet");
    let other = service.token_for("repository:other:pull");
    let tags = registry
        .get_authorized("/v2/tiny/tags/list", Some(&bearer(&other)))
        .await
        .expect("GET tags");
    assert_eq!(
        tags.status(),
        401,
        "{}",
        String::from_utf8_lossy(tags.body())
    );

    // Another token service's token (its own key and certificate) is refused.
    let stranger = e2e::registry::TokenService::start(token_auth);
    let forged = stranger.token_for("repository:tiny:pull");
    let refused = registry
        .get_authorized("/v2/", Some(&bearer(&forged)))
        .await
        .expect("GET /v2/");
    assert_eq!(refused.status(), 401);
}

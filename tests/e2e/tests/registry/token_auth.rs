//! `provider push|pull` against a registry behind token auth (distribution's `auth: token`
//! and the harness's token service): an identity token from `--registry-config` exchanged for
//! an access token as docker does it, and a user and password, or no credentials, exchanged
//! by a `GET` as docker does it (by the manager, which bounds the answer, not oci-client).

use std::path::Path;

use e2e::registry::token_service::SERVICE;
use e2e::registry::{Credentials, Registry, RegistryOptions, TokenAuth, TokenRequest};

use super::distribution::{assert_refused, insecure, pull, push, stderr, stdout};

const IDENTITY_TOKEN: &str = "idt-7c1e9b52-refresh-never-printed";
const PASSWORD: &str = "token-login-password-never-printed";

async fn behind_token_auth() -> Registry {
    Registry::start(RegistryOptions {
        token_auth: Some(TokenAuth {
            login: Credentials::new("alice", PASSWORD),
            refresh_token: IDENTITY_TOKEN.into(),
        }),
        ..RegistryOptions::default()
    })
    .await
}

fn config_file(dir: &Path, name: &str, json: String) -> String {
    let path = dir.join(name);
    std::fs::write(&path, json).unwrap();
    format!("--registry-config={}", path.display())
}

fn requests(registry: &Registry) -> Vec<TokenRequest> {
    registry
        .token_service()
        .expect("a token service")
        .requests()
}

#[tokio::test]
async fn an_identity_token_is_exchanged_for_access_tokens_to_push_and_pull() {
    let registry = behind_token_auth().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(
        dir.path(),
        "config.json",
        registry.docker_config_json_with_identity_token(IDENTITY_TOKEN),
    );
    let digest = push(
        &registry,
        guest_builds::SIMCLOUD,
        "private/simcloud:v1",
        &[&config],
    );
    let exchanges = requests(&registry);
    assert!(!exchanges.is_empty());
    for exchange in &exchanges {
        assert_eq!(
            (
                exchange.method.as_str(),
                exchange.grant_type.as_deref(),
                exchange.client_id.as_deref(),
                exchange.service.as_deref(),
                exchange.status
            ),
            (
                "POST",
                Some("refresh_token"),
                Some("wasm-ccm"),
                Some(SERVICE),
                200
            ),
            "{exchanges:?}"
        );
        assert_eq!(exchange.scopes, ["repository:private/simcloud:pull,push"]);
    }

    let out = dir.path().join("out.wasm");
    let output = pull(
        &registry,
        "private/simcloud:v1",
        &out,
        &[&insecure(&registry), &config],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), digest);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(guest_builds::SIMCLOUD).unwrap());
    let pulls: Vec<TokenRequest> = requests(&registry).split_off(exchanges.len());
    assert!(!pulls.is_empty());
    for exchange in &pulls {
        assert_eq!(exchange.method, "POST", "{pulls:?}");
        assert_eq!(exchange.scopes, ["repository:private/simcloud:pull"]);
    }

    // Nothing shows the identity token, even at debug level.
    let output = e2e::wasm_ccm_command(&e2e::wasm_ccm_binary())
        .args([
            "provider".to_string(),
            "pull".into(),
            format!("oci://{}", registry.reference("private/simcloud:v1")),
            "-o".into(),
            out.display().to_string(),
            insecure(&registry),
            config.clone(),
        ])
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let printed = stdout(&output) + &stderr(&output);
    assert!(!printed.contains(IDENTITY_TOKEN), "{printed}");
}

#[tokio::test]
async fn a_wrong_identity_token_is_refused_by_the_token_service_once_and_never_printed() {
    let registry = behind_token_auth().await;
    let dir = tempfile::tempdir().unwrap();
    let right = config_file(
        dir.path(),
        "right.json",
        registry.docker_config_json_with_identity_token(IDENTITY_TOKEN),
    );
    push(
        &registry,
        guest_builds::SIMCLOUD,
        "p/simcloud:v1",
        &[&right],
    );
    let before = requests(&registry).len();

    let wrong_token = "idt-revoked-0000-also-never-printed";
    let wrong = config_file(
        dir.path(),
        "wrong.json",
        registry.docker_config_json_with_identity_token(wrong_token),
    );
    let output = pull(
        &registry,
        "p/simcloud:v1",
        &dir.path().join("out.wasm"),
        &[&insecure(&registry), &wrong],
    );
    assert_refused(
        &output,
        &[&format!(
            "oci://{}: the registry's token service refused the identity token for {}: 401 Unauthorized: {{\"error\":\"invalid_grant\"}}; log in again (docker login {}) and update --registry-config",
            registry.reference("p/simcloud:v1"),
            registry.addr(),
            registry.addr()
        )],
    );
    assert!(!stderr(&output).contains(wrong_token));
    let after = requests(&registry);
    assert_eq!(
        after.len(),
        before + 1,
        "a refusal is not retried: {after:?}"
    );
    assert_eq!(after[before].status, 401);
}

#[tokio::test]
async fn basic_credentials_are_exchanged_for_a_bearer_token() {
    let registry = behind_token_auth().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), "config.json", registry.docker_config_json());
    let digest = push(
        &registry,
        guest_builds::SIMCLOUD,
        "p/simcloud:v1",
        &[&config],
    );
    let out = dir.path().join("out.wasm");
    let output = pull(
        &registry,
        "p/simcloud:v1",
        &out,
        &[&insecure(&registry), &config],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), digest);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(guest_builds::SIMCLOUD).unwrap());
    let exchanges = requests(&registry);
    assert!(
        !exchanges.is_empty()
            && exchanges.iter().all(|r| r.method == "GET"
                && r.status == 200
                && r.service.as_deref() == Some(SERVICE)),
        "{exchanges:?}"
    );
    assert!(
        exchanges
            .iter()
            .any(|r| r.scopes == ["repository:p/simcloud:pull,push"])
            && exchanges
                .iter()
                .any(|r| r.scopes == ["repository:p/simcloud:pull"]),
        "{exchanges:?}"
    );
    assert!(!(stdout(&output) + &stderr(&output)).contains(PASSWORD));

    // A wrong password is refused by the token service, once, which the error says; no
    // credentials get an anonymous token granting nothing, which the registry refuses.
    let wrong = config_file(
        dir.path(),
        "wrong.json",
        registry.docker_config_json_for(&Credentials::new("alice", "wrong-password-456")),
    );
    let output = pull(
        &registry,
        "p/simcloud:v1",
        &out,
        &[&insecure(&registry), &wrong],
    );
    let addr = registry.addr();
    assert_refused(
        &output,
        &[
            &format!(
                "the registry's token service refused the user name and password --registry-config has for {addr}: 401 Unauthorized"
            ),
            &format!("; check them (docker login {addr}) and update --registry-config"),
        ],
    );
    assert!(!stderr(&output).contains("wrong-password-456"));
    let before = exchanges.len();
    let refusals: Vec<(String, u16)> = requests(&registry)[before..]
        .iter()
        .map(|r| (r.method.clone(), r.status))
        .collect();
    assert_eq!(refusals, [("GET".to_string(), 401)], "asked once");
    let output = pull(&registry, "p/simcloud:v1", &out, &[&insecure(&registry)]);
    assert_refused(
        &output,
        &[&format!(
            "the registry requires credentials (401); --registry-config has none for {}",
            registry.addr()
        )],
    );
}

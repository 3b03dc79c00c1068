//! The secure port answers `/metrics` only to a caller the API server vouches for and whose
//! RBAC allows `get` on the path, as upstream's cloud-controller-manager does: the manager
//! against the API emulator with RBAC enforced, its callers Prometheus-like ServiceAccounts
//! (tokens from the TokenRequest API) and client certificates. Health paths stay open; the
//! reviews the manager sends are read from the emulator's request log: a second scrape
//! within the TTL sends no review, and with the TTL flags at 0 every scrape is reviewed. A
//! client certificate from `--client-ca-file` authenticates its CN and O without a
//! TokenReview; one from another CA is refused in the handshake.

use std::net::SocketAddr;
use std::time::Duration;

use e2e::https::{self, get, get_with_certificate, get_with_token};
use e2e::pod::service_account_token;
use e2e::testbed::{ManagerProcess, Testbed, eventually};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube_emulator::{Authorization, EmulatorOptions};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const TOKEN_REVIEWS: &str = "create tokenreviews.authentication.k8s.io";
const ACCESS_REVIEWS: &str = "create subjectaccessreviews.authorization.k8s.io";
/// Long enough that nothing a test does outlives a cached review.
const AN_HOUR: Duration = Duration::from_secs(3600);

async fn rbac_testbed() -> Testbed {
    Testbed::start_with(EmulatorOptions {
        authorization: Authorization::Rbac,
        ..EmulatorOptions::default()
    })
    .await
}

/// A manager in this process serving on a free loopback port, with `client_ca` as
/// `--client-ca-file` and hour-long review caches.
async fn serving_manager(
    bed: &Testbed,
    client_ca: Option<std::path::PathBuf>,
) -> (e2e::testbed::RunningManager, SocketAddr) {
    let port = https::free_port();
    let mut config = bed.config();
    config.serving.port = port;
    config.serving.auth.client_ca_file = client_ca;
    config.serving.auth.token_ttl = AN_HOUR;
    config.serving.auth.authorized_ttl = AN_HOUR;
    config.serving.auth.unauthorized_ttl = AN_HOUR;
    let manager = bed.run(config);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    serving(addr).await;
    (manager, addr)
}

async fn serving(addr: SocketAddr) {
    eventually("the secure port answers /healthz", WAIT, || async {
        matches!(get(addr, "/healthz").await, Ok((200, _))).then_some(())
    })
    .await;
}

async fn service_account(bed: &Testbed, name: &str) -> String {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(bed.client.clone(), "default")
        .create(&PostParams::default(), &account)
        .await
        .expect("create the ServiceAccount");
    service_account_token(&bed.client, "default", name).await
}

/// What the chart's metrics-reader role grants, bound to `subject`.
async fn allow_metrics(bed: &Testbed, binding: &str, subject: Subject) {
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(format!("{binding}-role")),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into()]),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    Api::<ClusterRole>::all(bed.client.clone())
        .create(&PostParams::default(), &role)
        .await
        .expect("create the ClusterRole");
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(binding.into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: format!("{binding}-role"),
        },
        subjects: Some(vec![subject]),
    };
    Api::<ClusterRoleBinding>::all(bed.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("create the ClusterRoleBinding");
}

fn account_subject(name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some("default".into()),
        ..Subject::default()
    }
}

/// The TokenReviews and SubjectAccessReviews the API server answered so far.
fn reviews(bed: &Testbed) -> (u64, u64) {
    let counts = bed.emulator.requests().counts;
    let count = |key: &str| counts.get(key).copied().unwrap_or(0);
    (count(TOKEN_REVIEWS), count(ACCESS_REVIEWS))
}

fn status(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|error| panic!("not a Status ({error}): {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_only_a_caller_the_api_server_vouches_for_and_rbac_allows() {
    let bed = rbac_testbed().await;
    let (manager, addr) = serving_manager(&bed, None).await;

    // Nobody: refused at once, as upstream's Status.
    let (code, body) = get(addr, "/metrics").await.expect("an answer");
    assert_eq!(code, 401, "{body}");
    let refusal = status(&body);
    assert_eq!(
        (&refusal["kind"], &refusal["reason"], &refusal["code"]),
        (&"Status".into(), &"Unauthorized".into(), &401.into())
    );
    assert!(!body.contains("wasm_ccm"), "no metric leaks: {body}");
    // A token the API server does not know.
    let (code, _) = get_with_token(addr, "/metrics", "not-a-token")
        .await
        .expect("an answer");
    assert_eq!(code, 401);

    // A ServiceAccount the API server vouches for, without RBAC for /metrics.
    let nobody = service_account(&bed, "nobody").await;
    let (code, body) = get_with_token(addr, "/metrics", &nobody)
        .await
        .expect("an answer");
    assert_eq!(code, 403, "{body}");
    let refusal = status(&body);
    assert_eq!(refusal["reason"], "Forbidden");
    assert_eq!(
        refusal["message"],
        r#"forbidden: User "system:serviceaccount:default:nobody" cannot get path "/metrics""#
    );

    // Prometheus's account, bound to get /metrics.
    let prometheus = service_account(&bed, "prometheus").await;
    allow_metrics(&bed, "prometheus-metrics", account_subject("prometheus")).await;
    let (code, body) = get_with_token(addr, "/metrics", &prometheus)
        .await
        .expect("an answer");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("wasm_ccm_build_info"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    // The probes' paths need nothing; others than the defaults do.
    for open in ["/healthz", "/livez", "/healthz?verbose"] {
        let (code, body) = get(addr, open).await.expect("an answer");
        assert_eq!(code, 200, "{open}: {body}");
    }
    let (code, _) = get(addr, "/healthz/ping").await.expect("an answer");
    assert_eq!(code, 401, "only the listed paths are open, as upstream's");
    manager.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_within_the_ttl_sends_no_review_and_without_a_cache_every_one_does() {
    let bed = rbac_testbed().await;
    let (manager, cached) = serving_manager(&bed, None).await;
    let port = https::free_port();
    let mut args = bed.provider_flags();
    args.extend([
        "--controllers=cloud-node".to_string(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--authentication-token-webhook-cache-ttl=0".into(),
        "--authorization-webhook-cache-authorized-ttl=0".into(),
        "--authorization-webhook-cache-unauthorized-ttl=0s".into(),
    ]);
    let uncached = ManagerProcess::spawn(&e2e::wasm_ccm_binary(), &args, port, true);
    serving(uncached.addr).await;

    let prometheus = service_account(&bed, "prometheus").await;
    let nobody = service_account(&bed, "nobody").await;
    allow_metrics(&bed, "prometheus-metrics", account_subject("prometheus")).await;

    let before = reviews(&bed);
    for _ in 0..2 {
        let (code, _) = get_with_token(cached, "/metrics", &prometheus)
            .await
            .expect("an answer");
        assert_eq!(code, 200);
        let (code, _) = get_with_token(cached, "/metrics", &nobody)
            .await
            .expect("an answer");
        assert_eq!(code, 403, "a refusal is remembered too");
    }
    assert_eq!(
        reviews(&bed),
        (before.0 + 2, before.1 + 2),
        "one TokenReview and one SubjectAccessReview per caller, the second scrape cached"
    );

    let before = reviews(&bed);
    for _ in 0..2 {
        let (code, _) = get_with_token(uncached.addr, "/metrics", &prometheus)
            .await
            .expect("an answer");
        assert_eq!(code, 200);
    }
    assert_eq!(
        reviews(&bed),
        (before.0 + 2, before.1 + 2),
        "with the TTLs at 0 every scrape is reviewed"
    );
    manager.stop().await.expect("a clean stop");
}

/// A CA and certificates it signs for client authentication.
struct ClientCa {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
}

impl ClientCa {
    fn new(name: &str) -> ClientCa {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().expect("CA key");
        ClientCa {
            issuer: rcgen::CertifiedIssuer::self_signed(params, key).expect("CA certificate"),
        }
    }

    /// A client certificate for `user` in `groups`, and its key, as PEM.
    fn client(&self, user: &str, groups: &[&str]) -> (String, String) {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let key = rcgen::KeyPair::generate().expect("client key");
        let certificate = params
            .signed_by(&key, &self.issuer)
            .expect("client certificate");
        (certificate.pem(), key.serialize_pem())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_from_the_client_ca_authenticates_its_subject() {
    let bed = rbac_testbed().await;
    let ca = ClientCa::new("metrics-client-ca");
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = dir.path().join("client-ca.crt");
    std::fs::write(&ca_file, ca.issuer.pem()).expect("write the client CA");
    let (manager, addr) = serving_manager(&bed, Some(ca_file)).await;
    allow_metrics(
        &bed,
        "metrics-readers",
        Subject {
            kind: "Group".into(),
            name: "metrics-readers".into(),
            ..Subject::default()
        },
    )
    .await;

    let before = reviews(&bed);
    let (chain, key) = ca.client("scraper", &["metrics-readers"]);
    let (code, body) = get_with_certificate(addr, "/metrics", &chain, &key)
        .await
        .expect("an answer");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("wasm_ccm_build_info"), "{body}");
    assert_eq!(
        reviews(&bed),
        (before.0, before.1 + 1),
        "the certificate is the credential: no TokenReview, one SubjectAccessReview"
    );

    // Its subject, not its CA, decides what it may do.
    let (chain, key) = ca.client("stranger", &[]);
    let (code, body) = get_with_certificate(addr, "/metrics", &chain, &key)
        .await
        .expect("an answer");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"stranger\" cannot get path \"/metrics\""#),
        "{body}"
    );

    // A certificate from another CA is no credential: the handshake is refused.
    let (chain, key) = ClientCa::new("elsewhere").client("scraper", &["metrics-readers"]);
    let answer = get_with_certificate(addr, "/metrics", &chain, &key).await;
    assert!(answer.is_err(), "answered: {answer:?}");
    manager.stop().await.expect("a clean stop");
}

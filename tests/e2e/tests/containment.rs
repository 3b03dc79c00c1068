//! The sandbox holds: hostile guests (tests/guests/hostile) get a typed error, the host keeps
//! serving other calls, nothing reaches a target the gate refused, and the injected secret
//! never becomes visible inside the sandbox.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use e2e::{Cloud, TOKEN, load, loopback, sandbox};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::{EgressConfig, HostPattern};
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError, ProviderLoadError};
use wasm_ccm_host::sandbox::{CallFailure, LoadError, SandboxConfig};

fn command(command: &str) -> Node {
    Node {
        name: command.to_string(),
        ..Node::default()
    }
}

async fn hostile(config: SandboxConfig, egress: EgressConfig) -> Provider {
    load(&sandbox(config), guest_builds::HOSTILE, egress, None)
        .await
        .expect("hostile guest loads")
}

/// The JSON report a hostile command returns in its `report` label.
async fn report(provider: &Provider, cmd: &str) -> Value {
    let metadata = provider
        .instance_metadata(&command(cmd))
        .await
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    let (_, report) = metadata
        .additional_labels
        .iter()
        .find(|(key, _)| key == "report")
        .expect("hostile guest reports");
    serde_json::from_str(report).expect("report is JSON")
}

fn sandbox_failure(error: ProviderError) -> CallFailure {
    match error.kind {
        ErrorKind::Sandbox(failure) => failure,
        other => panic!("expected a sandbox failure, got {other:?}"),
    }
}

/// A TCP listener that counts connections and answers each with `response`.
struct Target {
    url: String,
    connections: Arc<AtomicUsize>,
}

async fn target(response: Vec<u8>) -> Target {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    let response = Arc::new(response);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let _ = socket.write_all(&response).await;
            });
        }
    });
    Target { url, connections }
}

fn ok_response(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn grant(url: &str) -> EgressConfig {
    EgressConfig {
        allow: vec![url.parse::<HostPattern>().unwrap()],
        ..EgressConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_guest_hits_its_deadline_while_other_calls_are_served() {
    let config = SandboxConfig {
        call_timeout: Duration::from_millis(1500),
        ..SandboxConfig::default()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    let started = Instant::now();
    let looping = tokio::spawn({
        let provider = provider.clone();
        async move { provider.instance_metadata(&command("loop")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let served = report(&provider, "cache-set:k=v").await;
    let served_after = started.elapsed();
    assert_eq!(served["value"], "v");

    let error = looping.await.unwrap().unwrap_err();
    assert!(
        served_after < started.elapsed(),
        "the other call finished while the loop ran"
    );
    assert_eq!(error.outcome(), "deadline");
    assert_eq!(
        sandbox_failure(error),
        CallFailure::Deadline { limit_ms: 1500 }
    );
    assert_eq!(report(&provider, "cache-get:k").await["value"], "v");
}

#[tokio::test]
async fn allocating_guest_hits_its_memory_cap_and_the_next_call_works() {
    let config = SandboxConfig {
        memory_limit: 24 * 1024 * 1024,
        ..SandboxConfig::default()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    let error = provider
        .instance_metadata(&command("alloc"))
        .await
        .unwrap_err();
    assert_eq!(
        sandbox_failure(error),
        CallFailure::MemoryLimit {
            limit_bytes: 24 * 1024 * 1024
        }
    );
    assert_eq!(
        report(&provider, "cache-set:after=alloc").await["value"],
        "alloc"
    );
}

#[tokio::test]
async fn panicking_guest_traps_with_its_message() {
    let provider = hostile(SandboxConfig::default(), EgressConfig::default()).await;
    let error = provider
        .instance_metadata(&command("trap"))
        .await
        .unwrap_err();
    assert!(!error.is_not_found(), "a trap is never absence");
    let CallFailure::Trap { message } = sandbox_failure(error) else {
        panic!("expected a trap");
    };
    assert!(
        message.contains("hostile guest panics on purpose"),
        "{message}"
    );
    assert!(provider.instance_exists(&command("x")).await.unwrap());
}

#[tokio::test]
async fn host_not_granted_is_denied_and_receives_nothing() {
    let granted = target(ok_response("granted")).await;
    let other = target(ok_response("secret data")).await;
    let provider = hostile(SandboxConfig::default(), grant(&granted.url)).await;

    let denied = report(&provider, &format!("fetch:{}/steal", other.url)).await;
    assert_eq!(denied["kind"], "denied", "{denied}");
    let allowed = report(&provider, &format!("fetch:{}/ok", granted.url)).await;
    assert_eq!(allowed["body"], "granted", "{allowed}");

    assert_eq!(other.connections.load(Ordering::SeqCst), 0);
    assert_eq!(granted.connections.load(Ordering::SeqCst), 1);
    let audit = provider.egress().audit().recent();
    let refused = audit
        .iter()
        .find(|r| r.path == "/steal")
        .expect("denial audited");
    assert!(
        refused
            .denied
            .as_deref()
            .unwrap()
            .contains("not in allowedHosts"),
        "{refused:?}"
    );
    assert_eq!(refused.outcome(), "denied");
    assert!(
        audit
            .iter()
            .any(|r| r.path == "/ok" && r.status == Some(200))
    );
}

#[tokio::test]
async fn granted_name_resolving_to_loopback_is_refused_at_connect() {
    let listener = target(ok_response("inside")).await;
    let port = listener.url.rsplit(':').next().unwrap().to_string();
    let by_name = format!("http://localhost:{port}");
    let provider = hostile(SandboxConfig::default(), grant(&by_name)).await;

    let refused = report(&provider, &format!("fetch:{by_name}/")).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    assert_eq!(listener.connections.load(Ordering::SeqCst), 0);
    let record = provider.egress().audit().recent().pop().unwrap();
    assert!(
        record
            .denied
            .as_deref()
            .unwrap()
            .contains("loopback address"),
        "{record:?}"
    );

    // Naming the address itself is the explicit opt-in.
    let explicit = hostile(SandboxConfig::default(), grant(&listener.url)).await;
    let allowed = report(&explicit, &format!("fetch:{}/", listener.url)).await;
    assert_eq!(allowed["body"], "inside", "{allowed}");
    assert_eq!(listener.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn raw_sockets_are_refused_even_to_a_granted_address() {
    let listener = target(ok_response("inside")).await;
    let provider = hostile(SandboxConfig::default(), grant(&listener.url)).await;
    let addr = listener.url.trim_start_matches("http://");
    let outcome = report(&provider, &format!("connect:{addr}")).await;
    assert_eq!(outcome["connected"], false, "{outcome}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(listener.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cloud_metadata_address_is_refused_even_through_a_granted_name() {
    // Not granted at all.
    let provider = hostile(SandboxConfig::default(), EgressConfig::default()).await;
    let refused = report(&provider, "fetch:http://169.254.169.254/latest/meta-data/").await;
    assert_eq!(refused["kind"], "denied", "{refused}");

    // "2852039166" is a valid host name that the resolver turns into 169.254.169.254.
    let sneaky = hostile(SandboxConfig::default(), grant("http://2852039166")).await;
    let refused = report(&sneaky, "fetch:http://2852039166/latest/meta-data/").await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    let record = sneaky.egress().audit().recent().pop().unwrap();
    assert!(
        record
            .denied
            .as_deref()
            .unwrap()
            .contains("169.254.169.254, a cloud metadata address"),
        "{record:?}"
    );
}

#[tokio::test]
async fn guest_cannot_set_credential_headers() {
    let cloud = Cloud::start().await;
    let provider = hostile(SandboxConfig::default(), cloud.egress()).await;
    let report = report(
        &provider,
        &format!("set-auth:{}/v1/instances", cloud.sim.url()),
    )
    .await;
    assert_eq!(report["sdk"]["kind"], "forbidden-header", "{report}");
    let raw = report["raw"].as_array().unwrap();
    assert!(!raw.is_empty());
    for attempt in raw {
        assert_eq!(attempt["result"], "forbidden", "{attempt}");
    }
    assert!(
        cloud.sim.state().requests().iter().all(|r| r.authorized),
        "no request went out with a guest-chosen credential"
    );
}

#[tokio::test]
async fn snooping_guest_sees_no_secret_no_files_no_environment() {
    let cloud = Cloud::start().await;
    let provider = hostile(SandboxConfig::default(), cloud.egress()).await;
    let report = report(
        &provider,
        &format!("snoop:{}/v1/instances", cloud.sim.url()),
    )
    .await;

    assert_eq!(
        report["fetch"]["status"], 200,
        "the credential was injected: {report}"
    );
    let requests = cloud.sim.state().requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].authorized);

    let everything = report.to_string();
    assert!(
        !everything.contains(TOKEN),
        "the secret leaked: {everything}"
    );
    assert!(!everything.contains("Bearer"), "{everything}");
    assert_eq!(report["env"], serde_json::json!([]), "no environment");
    assert_eq!(report["args"], serde_json::json!([]), "no arguments");
    for (path, outcome) in report["fs"].as_object().unwrap() {
        assert!(
            outcome.get("error").is_some(),
            "{path} was readable: {outcome}"
        );
    }
}

#[tokio::test]
async fn a_guest_sees_only_the_node_metadata_it_declared() {
    let node = Node {
        labels: vec![
            ("topology.kubernetes.io/zone".into(), "z1".into()),
            ("team".into(), "payments".into()),
        ],
        annotations: vec![
            ("node.alpha.kubernetes.io/ttl".into(), "0".into()),
            ("acme.example/pool".into(), "blue".into()),
        ],
        ..command("metadata")
    };
    let seen = async |cloud_config: Option<&str>| {
        let provider = load(
            &sandbox(SandboxConfig::default()),
            guest_builds::HOSTILE,
            EgressConfig::default(),
            cloud_config.map(|c| c.as_bytes().to_vec()),
        )
        .await
        .expect("hostile guest loads");
        let metadata = provider.instance_metadata(&node).await.expect("metadata");
        let report: Value = serde_json::from_str(&metadata.additional_labels[0].1).unwrap();
        (provider.capabilities().node_metadata.clone(), report)
    };

    let (declared, report) = seen(None).await;
    assert_eq!(declared, None);
    assert_eq!(
        report,
        serde_json::json!({
            "labels": [["topology.kubernetes.io/zone", "z1"], ["team", "payments"]],
            "annotations": [["node.alpha.kubernetes.io/ttl", "0"], ["acme.example/pool", "blue"]],
        }),
        "a provider that declares nothing sees everything"
    );

    let config = r#"{"labels": ["topology.kubernetes.io/zone", "absent"], "annotations": ["acme.example/pool"]}"#;
    let (declared, report) = seen(Some(config)).await;
    let declared = declared.expect("keys declared");
    assert!(declared.labels.contains("absent"));
    assert_eq!(
        report,
        serde_json::json!({
            "labels": [["topology.kubernetes.io/zone", "z1"]],
            "annotations": [["acme.example/pool", "blue"]],
        })
    );

    let (_, report) = seen(Some(r#"{}"#)).await;
    assert_eq!(
        report,
        serde_json::json!({"labels": [], "annotations": []}),
        "declaring no keys passes no labels or annotations"
    );
}

#[tokio::test]
async fn huge_response_is_cut_at_the_cap() {
    let cap = 256 * 1024;
    let egress_with_cap = |url: &str| EgressConfig {
        limits: wasm_ccm_host::egress::Limits {
            max_response_bytes: cap,
            ..EgressConfig::default().limits
        },
        ..grant(url)
    };

    // Declared too large: refused before the body is read.
    let mut declared = b"HTTP/1.1 200 OK\r\ncontent-length: 67108864\r\n\r\n".to_vec();
    declared.extend(vec![b'x'; 64 * 1024]);
    let declared = target(declared).await;
    let provider = hostile(SandboxConfig::default(), egress_with_cap(&declared.url)).await;
    let outcome = report(&provider, &format!("huge:{}/", declared.url)).await;
    assert!(outcome.get("error").is_some(), "{outcome}");
    let record = provider.egress().audit().recent().pop().unwrap();
    assert!(
        record.denied.as_deref().unwrap().contains("exceeds"),
        "{record:?}"
    );

    // Undeclared length: cut while streaming.
    let mut streamed = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_vec();
    streamed.extend(vec![b'x'; 4 * 1024 * 1024]);
    let streamed = target(streamed).await;
    let provider = hostile(SandboxConfig::default(), egress_with_cap(&streamed.url)).await;
    let outcome = report(&provider, &format!("huge:{}/", streamed.url)).await;
    assert!(outcome.get("error").is_some(), "{outcome}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let record = provider.egress().audit().recent().pop().unwrap();
    assert!(record.response_bytes <= cap + 64 * 1024, "{record:?}");
    assert!(
        record.denied.as_deref().unwrap().contains("cap"),
        "{record:?}"
    );

    assert_eq!(
        report(&provider, "cache-set:still=alive").await["value"],
        "alive"
    );
}

#[tokio::test]
async fn exhausted_rate_budget_answers_429_with_retry_after() {
    let cloud = Cloud::start().await;
    let egress = EgressConfig {
        budget: wasm_ccm_host::egress::RateBudget {
            per_second: 0.5,
            burst: 2,
        },
        ..cloud.egress()
    };
    let provider = hostile(SandboxConfig::default(), egress).await;
    let url = format!("fetch:{}/v1/instances", cloud.sim.url());
    for _ in 0..2 {
        assert_eq!(report(&provider, &url).await["status"], 200);
    }
    let limited = report(&provider, &url).await;
    assert_eq!(limited["status"], 429, "{limited}");
    let headers = limited["headers"].to_string();
    assert!(headers.contains("retry-after"), "{headers}");
    assert_eq!(
        cloud.sim.state().requests().len(),
        2,
        "the third request never left"
    );
    let record = provider.egress().audit().recent().pop().unwrap();
    assert_eq!(record.outcome(), "rate-limited");
}

#[tokio::test]
async fn provider_failing_on_a_denied_request_reports_egress_denied() {
    let cloud = Cloud::start().await;
    // simcloud points at the simulator, but nothing is granted.
    let result = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::SIMCLOUD,
        EgressConfig::default(),
        Some(cloud.simcloud_config()),
    )
    .await;
    let provider = result.expect("init does not call the cloud");
    let error = provider
        .instance_metadata(&command("node-1"))
        .await
        .unwrap_err();
    let ErrorKind::EgressDenied { denials, .. } = &error.kind else {
        panic!("expected egress denied, got {error}");
    };
    assert!(
        denials[0]
            .request
            .contains(&cloud.sim.url().replace("http://", ""))
    );
    assert!(
        error
            .to_string()
            .contains("not in allowedHosts (granted: none)"),
        "{error}"
    );
    assert!(!error.is_not_found(), "a denial is never absence");
    assert!(cloud.sim.state().requests().is_empty());
}

#[tokio::test]
async fn component_importing_an_unknown_interface_is_refused_by_name() {
    let error = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::OVERREACH,
        EgressConfig::default(),
        None,
    )
    .await
    .err()
    .expect("refused");
    let ProviderLoadError::Load(LoadError::UnsatisfiedImport { import, .. }) = &error else {
        panic!("expected an unsatisfied import, got {error}");
    };
    assert_eq!(import, "evil:secrets/vault");
    assert!(error.to_string().contains("evil:secrets/vault"));
}

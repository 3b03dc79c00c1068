//! The sandbox holds: hostile guests (tests/guests/hostile) get a typed error, the host keeps
//! serving other calls, nothing reaches a target the gate refused, the injected secret
//! never becomes visible inside the sandbox, and a provider flooding the host's cache or log
//! leaves the host's memory and log within their budgets.
//!
//! The hostile guests: an endless loop, with other calls served meanwhile; a shadow
//! candidate stuck in a loop, its calls held to the shadow's bound, the rest skipped and
//! counted, the active version's answers not delayed; unbounded allocation and a panic; an
//! ungranted host (a listener proves nothing arrived); a granted name resolving to loopback,
//! and the metadata address by IP and by decimal name; a guest-set `Authorization`; a
//! snooping guest (no environment, files or secret visible); huge responses, declared and
//! streamed; a request body sent with its `content-length`, not chunked, and one the provider
//! states not sent twice; an exhausted rate budget; an unknown import.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::{Cloud, TOKEN, load, loopback, resident_bytes, sandbox};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing_subscriber::util::SubscriberInitExt;
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::{
    AuditLogLimits, AuditLogScope, EgressConfig, GrantSource, HostPattern, MethodPolicy,
};
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError, ProviderLoadError, Shadow};
use wasm_ccm_host::rate::RateBudget;
use wasm_ccm_host::sandbox::{CacheLimits, CallFailure, LoadError, LogLimits, SandboxConfig};

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
    e2e::hostile_report(provider, cmd).await
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
async fn a_slow_shadow_holds_at_most_its_bound_of_calls_and_never_delays_the_active_one() {
    let config = SandboxConfig {
        call_timeout: Duration::from_millis(1500),
        ..e2e::sandbox_config()
    };
    let active = hostile(config.clone(), EgressConfig::default()).await;
    // The candidate's mirror of a looping call holds the shadow's only slot until its
    // deadline.
    let candidate = hostile(config, EgressConfig::default()).await;
    let shadow = Shadow::new(candidate, 1);
    let provider = active.with_shadow(Some(shadow.clone()));
    let started = Instant::now();
    let looping = tokio::spawn({
        let provider = provider.clone();
        async move { provider.instance_metadata(&command("loop")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The one shadow slot is taken: these are answered by the active version alone.
    for _ in 0..3 {
        assert!(provider.instance_exists(&command("x")).await.unwrap());
    }
    let answered_after = started.elapsed();
    assert_eq!(looping.await.unwrap().unwrap_err().outcome(), "deadline");
    assert!(
        answered_after < started.elapsed(),
        "the active calls did not wait for the shadow's"
    );
    let report = shadow.report();
    assert_eq!(report.skipped, 3, "{report:?}");
    // The looping call, mirrored, agreed once the candidate's deadline passed too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shadow.report().agreeing, 1, "{:?}", shadow.report());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_guest_hits_its_deadline_while_other_calls_are_served() {
    let config = SandboxConfig {
        call_timeout: Duration::from_millis(1500),
        ..e2e::sandbox_config()
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
        ..e2e::sandbox_config()
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
    let provider = hostile(e2e::sandbox_config(), EgressConfig::default()).await;
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
async fn a_failure_that_is_not_a_wasm_trap_says_its_cause() {
    // The host refuses to drop a stream whose pollable lives: an error from its bindings,
    // not a wasm trap, whose cause once hid behind wasmtime's backtrace heading.
    let provider = hostile(e2e::sandbox_config(), EgressConfig::default()).await;
    let error = provider
        .instance_metadata(&command("orphan-pollable"))
        .await
        .unwrap_err();
    let CallFailure::Trap { message } = sandbox_failure(error) else {
        panic!("expected the call to fail as a trap");
    };
    assert!(message.contains("children"), "{message}");
    assert!(!message.contains("wasm backtrace"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
    assert!(provider.instance_exists(&command("x")).await.unwrap());
}

#[tokio::test]
async fn host_not_granted_is_denied_and_receives_nothing() {
    let granted = target(ok_response("granted")).await;
    let other = target(ok_response("secret data")).await;
    let provider = hostile(e2e::sandbox_config(), grant(&granted.url)).await;

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
            .contains("no --allow entry matches"),
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
    let provider = hostile(e2e::sandbox_config(), grant(&by_name)).await;

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
    let explicit = hostile(e2e::sandbox_config(), grant(&listener.url)).await;
    let allowed = report(&explicit, &format!("fetch:{}/", listener.url)).await;
    assert_eq!(allowed["body"], "inside", "{allowed}");
    assert_eq!(listener.connections.load(Ordering::SeqCst), 1);
}

/// A keep-alive HTTP/1.1 server answering `ok` to every request; counts its connections.
async fn keep_alive_target() -> Target {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !pending.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => pending.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = pending.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                    pending.drain(..end + 4);
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if socket.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Target { url, connections }
}

#[tokio::test]
async fn calls_of_a_loaded_provider_share_a_keep_alive_connection_and_a_reload_gets_its_own() {
    let target = keep_alive_target().await;
    let provider = hostile(e2e::sandbox_config(), grant(&target.url)).await;
    for _ in 0..5 {
        let fetched = report(&provider, &format!("fetch:{}/", target.url)).await;
        assert_eq!(fetched["body"], "ok", "{fetched}");
    }
    assert_eq!(target.connections.load(Ordering::SeqCst), 1);
    let reused: Vec<bool> = provider
        .egress()
        .audit()
        .recent()
        .iter()
        .map(|r| r.connection_reused)
        .collect();
    assert_eq!(
        reused,
        [false, true, true, true, true],
        "one record per request"
    );

    let reloaded = hostile(e2e::sandbox_config(), grant(&target.url)).await;
    let fetched = report(&reloaded, &format!("fetch:{}/", target.url)).await;
    assert_eq!(fetched["body"], "ok", "{fetched}");
    assert_eq!(target.connections.load(Ordering::SeqCst), 2);
}

/// A target that keeps the head and body of each request it gets (a body framed by its
/// `content-length`, or chunked up to its last chunk) and answers `ok`.
async fn recording_target() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let recorded = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut chunk = [0u8; 4096];
                let complete = |request: &[u8]| {
                    let text = String::from_utf8_lossy(request).to_lowercase();
                    let Some(end) = text.find("\r\n\r\n") else {
                        return false;
                    };
                    let length = text[..end].lines().find_map(|line| {
                        line.strip_prefix("content-length:")?
                            .trim()
                            .parse::<usize>()
                            .ok()
                    });
                    match length {
                        Some(length) => request.len() >= end + 4 + length,
                        None => !text.contains("chunked") || text.ends_with("\r\n0\r\n\r\n"),
                    }
                };
                while !complete(&request) {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                recorded
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&request).into_owned());
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = socket.write_all(answer).await;
            });
        }
    });
    (url, requests)
}

/// A provider's request body goes with its length, not chunked: chunked, its end was one
/// more write on the wire, and a form POST took 2.5 times as long (the `rtt` bench group).
#[tokio::test]
async fn a_provider_request_body_is_sent_with_its_length() {
    let (url, requests) = recording_target().await;
    let provider = hostile(e2e::sandbox_config(), grant(&url)).await;
    let form = "Action=DescribeInstances&Version=2016-11-15";
    let spec = |headers: Value| json!({"method": "POST", "url": format!("{url}/"), "headers": headers, "body": form});
    let sent = report(&provider, &format!("request:{}", spec(json!([])))).await;
    assert_eq!(sent["status"], 200, "{sent}");
    let stated = json!([["Content-Length", form.len().to_string()]]);
    let sent = report(&provider, &format!("request:{}", spec(stated))).await;
    assert_eq!(sent["status"], 200, "{sent}");

    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        let lower = request.to_lowercase();
        let (head, body) = lower.split_once("\r\n\r\n").unwrap();
        let lengths: Vec<&str> = head
            .lines()
            .filter(|line| line.starts_with("content-length:"))
            .collect();
        assert_eq!(
            lengths,
            [format!("content-length: {}", form.len())],
            "{request}"
        );
        assert!(!head.contains("transfer-encoding"), "{request}");
        assert_eq!(body, form.to_lowercase(), "{request}");
    }
}

/// Egress speaks only the methods a cloud API takes: `TRACE`, `CONNECT` and an extension
/// method are refused before anything is sent, even to a granted host; under a method
/// limit (a shadow's), a header asking the server to take a GET as a DELETE is removed.
#[tokio::test]
async fn only_cloud_methods_leave_and_a_method_override_never_undoes_a_limit() {
    let (url, requests) = recording_target().await;
    let provider = hostile(e2e::sandbox_config(), grant(&url)).await;
    let request = |method: &str, headers: Value| json!({"method": method, "url": format!("{url}/x"), "headers": headers});
    for method in ["TRACE", "CONNECT", "PROPFIND", &"X".repeat(300)] {
        let refused = report(
            &provider,
            &format!("request:{}", request(method, json!([]))),
        )
        .await;
        assert_eq!(refused["kind"], "denied", "{method:.20}: {refused}");
    }
    let denial = provider.egress().audit().recent();
    assert!(
        denial
            .iter()
            .all(|record| record.method.len() <= 16 && record.denied.is_some()),
        "{denial:?}"
    );
    assert!(requests.lock().unwrap().is_empty(), "nothing was sent");

    let mut limited = grant(&url);
    limited.methods = MethodPolicy::SafeOnly {
        methods: Vec::new(),
        actions: Vec::new(),
    };
    let shadow = hostile(e2e::sandbox_config(), limited).await;
    let overriding = request(
        "GET",
        json!([
            ["X-HTTP-Method-Override", "DELETE"],
            ["X-Method-Override", "DELETE"]
        ]),
    );
    let sent = report(&shadow, &format!("request:{overriding}")).await;
    assert_eq!(sent["status"], 200, "{sent}");
    let sent = requests.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert!(!sent[0].to_lowercase().contains("override"), "{}", sent[0]);
}

#[tokio::test]
async fn raw_sockets_are_refused_even_to_a_granted_address() {
    let listener = target(ok_response("inside")).await;
    let provider = hostile(e2e::sandbox_config(), grant(&listener.url)).await;
    let addr = listener.url.trim_start_matches("http://");
    let outcome = report(&provider, &format!("connect:{addr}")).await;
    assert_eq!(outcome["connected"], false, "{outcome}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(listener.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn cloud_metadata_address_is_refused_even_through_a_granted_name() {
    // Not granted at all.
    let provider = hostile(e2e::sandbox_config(), EgressConfig::default()).await;
    let refused = report(&provider, "fetch:http://169.254.169.254/latest/meta-data/").await;
    assert_eq!(refused["kind"], "denied", "{refused}");

    // "2852039166" is a valid host name that the resolver turns into 169.254.169.254.
    let sneaky = hostile(e2e::sandbox_config(), grant("http://2852039166")).await;
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
    let provider = hostile(e2e::sandbox_config(), cloud.egress()).await;
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
    let provider = hostile(e2e::sandbox_config(), cloud.egress()).await;
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
            &sandbox(e2e::sandbox_config()),
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
    let provider = hostile(e2e::sandbox_config(), egress_with_cap(&declared.url)).await;
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
    let provider = hostile(e2e::sandbox_config(), egress_with_cap(&streamed.url)).await;
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
    let provider = hostile(e2e::sandbox_config(), egress).await;
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
        &sandbox(e2e::sandbox_config()),
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
            .contains("no --allow entry matches (granted: none)"),
        "{error}"
    );
    assert!(!error.is_not_found(), "a denial is never absence");
    assert!(cloud.sim.state().requests().is_empty());
}

#[tokio::test]
async fn refusals_and_hints_name_the_field_a_cloud_provider_resource_sets() {
    let cloud = Cloud::start().await;
    let from_resource = |allow: Vec<HostPattern>| EgressConfig {
        allow,
        source: GrantSource::Resource,
        ..EgressConfig::default()
    };
    let sandbox = sandbox(e2e::sandbox_config());
    let ungranted = load(
        &sandbox,
        guest_builds::SIMCLOUD,
        from_resource(Vec::new()),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("init does not call the cloud");
    let denied = ungranted
        .instance_metadata(&command("node-1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        denied.contains("no spec.egress.allowedHosts entry matches (granted: none)"),
        "{denied}"
    );

    // Granted, but no credential: the cloud answers 401 and the error says which field
    // would add one.
    let uncredentialed = load(
        &sandbox,
        guest_builds::SIMCLOUD,
        from_resource(vec![cloud.grant()]),
        Some(cloud.simcloud_config()),
    )
    .await
    .expect("init does not call the cloud");
    let error = uncredentialed
        .instance_metadata(&command("node-1"))
        .await
        .unwrap_err();
    assert_eq!(cloud.sim.state().requests()[0].status, 401);
    let hint = format!(
        "; hint: {} answered 401 and no spec.credentials rule covers it",
        cloud.grant()
    );
    assert!(error.to_string().contains(&hint), "{error}");
    assert_eq!(error.hints.len(), 1, "one hint per host: {error}");
}

#[tokio::test]
async fn a_provider_retrying_refused_requests_is_kept_and_warned_about_16_times() {
    let target = target(ok_response("ok")).await;
    let provider = hostile(e2e::sandbox_config(), EgressConfig::default()).await;
    let gate = provider.egress().clone();
    let (logs, _guard) = Logs::capture();
    let error = provider
        .instance_metadata(&command(&format!("fetch-many:500:{}", target.url)))
        .await
        .unwrap_err();
    let ErrorKind::EgressDenied { denials, message } = &error.kind else {
        panic!("expected egress denied, got {error}");
    };
    assert_eq!(message, "fetched 500 times");
    assert_eq!(denials.len(), 16, "the call keeps its first refusals only");
    let (events, _) = logs.take();
    let warnings = events
        .iter()
        .filter(|e| {
            e["level"] == "WARN"
                && e["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("egress denied"))
        })
        .count();
    assert_eq!(warnings, 16, "one warning per kept refusal");
    let audited = gate.audit().recent();
    assert_eq!(audited.len(), 500, "every refusal is still audited");
    assert_eq!(target.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refusal_loop_logs_within_the_audit_log_budget_and_every_request_is_audited() {
    let target = target(ok_response("ok")).await;
    let egress = EgressConfig {
        audit_log: AuditLogLimits {
            rate: RateBudget {
                per_second: 0.001,
                burst: 10,
            },
            summary_interval: Duration::from_millis(200),
            scope: AuditLogScope::Failures,
        },
        ..EgressConfig::default()
    };
    let provider = hostile(e2e::sandbox_config(), egress).await;
    let gate = provider.egress().clone();
    let (logs, _guard) = Logs::capture();
    let fetch = |n: usize| command(&format!("fetch-many:{n}:{}", target.url));
    let started = Instant::now();
    for _ in 0..2 {
        provider.instance_metadata(&fetch(500)).await.unwrap_err();
    }
    // The next audit record after the interval reports what was suppressed.
    tokio::time::sleep(Duration::from_millis(250)).await;
    provider.instance_metadata(&fetch(1)).await.unwrap_err();

    let (events, bytes) = logs.take();
    let audit_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["target"] == "wasm_ccm::egress::audit")
        .collect();
    let logged = audit_events.iter().filter(|e| e["level"] == "INFO").count();
    let summaries: Vec<u64> = audit_events
        .iter()
        .filter(|e| e["level"] == "WARN")
        .map(|e| e["fields"]["suppressed"].as_u64().expect("a count"))
        .collect();
    assert_eq!(logged, 10, "the burst is logged, then nothing");
    let intervals = started.elapsed().as_millis() / 200;
    assert!(
        !summaries.is_empty() && summaries.len() as u128 <= intervals + 1,
        "at most one summary per interval ({intervals} passed): {summaries:?}"
    );
    assert_eq!(summaries.iter().sum::<u64>(), 1001 - 10, "{summaries:?}");
    eprintln!(
        "1001 refused requests: {} log events, {bytes} bytes",
        events.len()
    );
    assert_eq!(
        gate.audit().recent().len(),
        1001,
        "every request is audited"
    );
    assert_eq!(target.connections.load(Ordering::SeqCst), 0);
}

/// A quiet cluster's log is not mostly audit lines: by default a request that succeeded is
/// a DEBUG event and one that failed an INFO event; `--egress-audit-log=all` logs both.
#[tokio::test]
async fn the_audit_log_writes_failures_at_info_and_successes_only_when_asked() {
    let answering = target(ok_response("ok")).await;
    let failing = target(
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            .to_vec(),
    )
    .await;
    let granted = |scope| EgressConfig {
        allow: [&answering.url, &failing.url]
            .map(|url| url.parse::<HostPattern>().unwrap())
            .into(),
        audit_log: AuditLogLimits {
            scope,
            ..AuditLogLimits::default()
        },
        ..EgressConfig::default()
    };
    let (logs, _guard) = Logs::capture();
    for (scope, expected_successes) in [(AuditLogScope::Failures, 0), (AuditLogScope::All, 3)] {
        let provider = hostile(e2e::sandbox_config(), granted(scope)).await;
        for url in [&answering.url, &failing.url] {
            provider
                .instance_metadata(&command(&format!("fetch-many:3:{url}")))
                .await
                .unwrap_err();
        }
        let (events, _) = logs.take();
        let audited = |status: u64| {
            events
                .iter()
                .filter(|e| e["target"] == "wasm_ccm::egress::audit" && e["level"] == "INFO")
                .filter(|e| e["fields"]["status"] == status)
                .count()
        };
        assert_eq!(audited(200), expected_successes, "{scope:?}: 200s at INFO");
        assert_eq!(audited(503), 3, "{scope:?}: every 503 at INFO");
        assert_eq!(provider.egress().audit().recent().len(), 6, "all audited");
    }
}

#[tokio::test]
async fn component_importing_an_unknown_interface_is_refused_by_name() {
    let error = load(
        &sandbox(e2e::sandbox_config()),
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

const MIB: u64 = 1024 * 1024;

/// What `tracing` emits on this thread, one JSON object per event, as the manager's log
/// would hold it. Tests using it run on the current-thread runtime, where every host call
/// of the sandbox runs on the test's thread.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Capture info and above until the returned guard drops.
    fn capture() -> (Logs, impl Sized) {
        let logs = Logs::default();
        let writer = logs.clone();
        let guard = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .with_writer(move || writer.clone())
            .finish()
            .set_default();
        (logs, guard)
    }

    /// The events captured since the last call, and their size in bytes.
    fn take(&self) -> (Vec<Value>, usize) {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        let events = String::from_utf8_lossy(&bytes)
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON log line"))
            .collect();
        (events, bytes.len())
    }
}

/// Lines the provider wrote that reached the log, and the host's "dropped" warnings.
fn provider_lines_and_drops(events: &[Value]) -> (usize, Vec<&Value>) {
    let lines = events
        .iter()
        .filter(|e| e["target"] == "wasm_ccm::provider")
        .count();
    let drops = events
        .iter()
        .filter(|e| e["target"] == "wasm_ccm::sandbox" && e["fields"]["dropped"].is_u64())
        .collect();
    (lines, drops)
}

#[tokio::test]
async fn cache_flood_stays_within_the_byte_budget() {
    // An unoptimised test build copies lists out of the guest at ~100 MB/s, slower on a
    // busy machine: the push gets time enough.
    let config = SandboxConfig {
        call_timeout: Duration::from_secs(120),
        ..e2e::sandbox_config()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    let budget = CacheLimits::default().max_bytes;
    // 400 values of 1 MB: 400 MB for a host without a budget, four times the bound below.
    let (count, size) = (400, 1_000_000);
    let before = resident_bytes();
    let started = Instant::now();
    let filled = report(&provider, &format!("cache-fill:{count}x{size}")).await;
    let grown = resident_bytes().saturating_sub(before);
    eprintln!(
        "stored {count} x {size} bytes in {:?}; resident memory grew {} MiB (budget {} MiB)",
        started.elapsed(),
        grown / MIB,
        budget as u64 / MIB
    );
    assert!(
        grown < 6 * budget as u64,
        "resident memory grew {grown} bytes for a {budget}-byte cache"
    );

    // Each entry is charged its key, its value and 256 bytes.
    let fit = budget / (size + "fill-0000".len() + 256);
    let present = filled["present"].as_u64().unwrap() as usize;
    assert!(0 < present && present <= fit, "{filled}");
    assert_eq!(
        filled["last_present"], true,
        "the newest values stay: {filled}"
    );
    assert!(
        filled["first_present"].as_u64().unwrap() as usize >= count - fit,
        "the first to expire went first: {filled}"
    );
    assert_eq!(
        report(&provider, "cache-get:fill-0").await["value"],
        Value::Null,
        "an evicted key is gone in later calls"
    );

    // Keys: 1 KiB at most; a 20 MB key is not stored.
    assert_eq!(report(&provider, "cache-key:1024").await["stored"], true);
    assert_eq!(report(&provider, "cache-key:1025").await["stored"], false);
    assert_eq!(
        report(&provider, "cache-key:20000000").await["stored"],
        false
    );
}

#[tokio::test]
async fn log_flood_is_cut_at_the_call_budget_with_one_warning() {
    let (logs, _guard) = Logs::capture();
    // The rate across calls is tested on its own below.
    let limits = LogLimits {
        rate: RateBudget {
            per_second: 1e9,
            burst: u32::MAX,
        },
        ..LogLimits::default()
    };
    let config = SandboxConfig {
        provider_logs: limits,
        ..e2e::sandbox_config()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    logs.take();

    // 100,000 lines of 8,000 bytes: 800 MB of log for a host without a budget.
    let before = resident_bytes();
    let started = Instant::now();
    report(&provider, "log-flood:100000x8000").await;
    let grown = resident_bytes().saturating_sub(before);
    let (events, log_bytes) = logs.take();
    eprintln!(
        "100000 lines of 8000 bytes in {:?}: {log_bytes} bytes of log; resident memory grew {} MiB",
        started.elapsed(),
        grown / MIB
    );
    assert!(grown < 64 * MIB, "resident memory grew {grown} bytes");
    let fit = limits.bytes_per_call / 8000;
    let (lines, drops) = provider_lines_and_drops(&events);
    assert_eq!(lines, fit, "lines within --provider-log-bytes-per-call");
    assert_eq!(drops.len(), 1, "one warning for the call: {drops:?}");
    let fields = &drops[0]["fields"];
    assert_eq!(fields["dropped"], 100_000 - fit as u64);
    assert_eq!(fields["limits"], "bytes-per-call");
    assert_eq!(fields["provider"], "hostile");
    assert_eq!(
        fields["version"],
        provider.label().split_once('@').unwrap().1
    );
    let message = fields["message"].as_str().unwrap();
    assert!(
        message.contains("--provider-log-bytes-per-call"),
        "{message}"
    );

    // Short lines run into the line cap instead.
    report(&provider, "log-flood:100000x10").await;
    let (events, _) = logs.take();
    let (lines, drops) = provider_lines_and_drops(&events);
    assert_eq!(lines, limits.lines_per_call as usize);
    assert_eq!(drops.len(), 1, "{drops:?}");
    assert_eq!(drops[0]["fields"]["dropped"], 99_000);
    assert_eq!(drops[0]["fields"]["limits"], "lines-per-call");

    // A call within the budget logs everything and warns of nothing.
    report(&provider, "log-flood:10x10").await;
    let (events, _) = logs.take();
    assert_eq!(provider_lines_and_drops(&events), (10, vec![]));
}

#[tokio::test]
async fn stdout_and_stderr_share_the_call_budget_with_the_host_log() {
    let (logs, _guard) = Logs::capture();
    let config = SandboxConfig {
        provider_logs: LogLimits {
            lines_per_call: 2,
            ..LogLimits::default()
        },
        ..e2e::sandbox_config()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    logs.take();
    // One line each to the host log, stdout and stderr.
    report(&provider, "log:hello").await;
    let (events, _) = logs.take();
    let (lines, drops) = provider_lines_and_drops(&events);
    assert_eq!(lines, 2);
    assert_eq!(drops.len(), 1, "{events:?}");
    assert_eq!(drops[0]["fields"]["dropped"], 1);
    let streams: Vec<&Value> = events.iter().map(|e| &e["fields"]["stream"]).collect();
    assert!(streams.contains(&&Value::from("stdout")), "{events:?}");
    assert!(!streams.contains(&&Value::from("stderr")), "{events:?}");
}

#[tokio::test]
async fn log_rate_is_shared_by_the_calls_of_a_provider_version() {
    let (logs, _guard) = Logs::capture();
    let config = SandboxConfig {
        provider_logs: LogLimits {
            rate: RateBudget {
                per_second: 0.001,
                burst: 50,
            },
            ..LogLimits::default()
        },
        ..e2e::sandbox_config()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    logs.take();

    report(&provider, "log-flood:40x10").await;
    let (events, _) = logs.take();
    assert_eq!(provider_lines_and_drops(&events), (40, vec![]));

    // 10 lines left in the bucket: a flood of 100,000 gets 10 through and one warning.
    let before = resident_bytes();
    report(&provider, "log-flood:100000x8000").await;
    let grown = resident_bytes().saturating_sub(before);
    let (events, _) = logs.take();
    eprintln!(
        "rate-limited flood: resident memory grew {} MiB",
        grown / MIB
    );
    assert!(grown < 64 * MIB, "resident memory grew {grown} bytes");
    let (lines, drops) = provider_lines_and_drops(&events);
    assert_eq!(lines, 10);
    assert_eq!(drops.len(), 1, "{drops:?}");
    assert_eq!(drops[0]["fields"]["limits"], "rate");
    let dropped = drops[0]["fields"]["dropped"].as_u64().unwrap();
    assert_eq!(dropped, 100_000 - 10);

    // The next call finds the bucket still empty.
    report(&provider, "log-flood:5x10").await;
    let (events, _) = logs.take();
    let (lines, drops) = provider_lines_and_drops(&events);
    assert_eq!(lines, 0);
    assert_eq!(drops[0]["fields"]["limits"], "rate");
}

#[tokio::test]
async fn an_answer_over_the_result_cap_fails_the_call_and_nothing_is_kept() {
    let limit = 4 * MIB;
    let config = SandboxConfig {
        max_result_bytes: limit,
        ..e2e::sandbox_config()
    };
    let provider = hostile(config, EgressConfig::default()).await;
    let small = report(&provider, "answer:1000").await;
    assert_eq!(small.as_str().map(str::len), Some(1000));

    let before = resident_bytes();
    let calls = 20;
    for _ in 0..calls {
        let error = provider
            .instance_metadata(&command("answer:6000000"))
            .await
            .unwrap_err();
        assert_eq!(error.outcome(), "result-too-large");
        match sandbox_failure(error) {
            CallFailure::ResultTooLarge { bytes, limit_bytes } => {
                assert!(bytes > 6_000_000, "{bytes}");
                assert_eq!(limit_bytes, limit);
            }
            other => panic!("expected result-too-large, got {other:?}"),
        }
    }
    let grown = resident_bytes().saturating_sub(before);
    assert!(
        grown < 64 * MIB,
        "{calls} answers of 6 MB grew the host by {} MiB",
        grown / MIB
    );
    assert_eq!(report(&provider, "answer:10").await, "a".repeat(10));
}

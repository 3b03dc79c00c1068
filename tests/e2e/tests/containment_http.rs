//! What a provider's `wasi:http` resources make the host hold stays within the call's budgets
//! (`--http-memory-limit`, `--max-http-resources`): floods of fields, of request bodies and
//! of resources fail the call with `http-budget` while the host's resident memory stays
//! within a stated bound, and calls that make ordinary requests, one after another, are not
//! affected.
//!
//! The floods: 20,000 fields of one 60 KB header (1.2 GB without the budget), 300 unsent
//! request bodies of 2 MiB and 5,000 empty fields each fail the call with `http-budget`
//! naming the flag, counted in the calls metric, with resident memory grown less than
//! 96 MiB; the next call works. 60 requests in one call, and a POST with several headers and
//! a 512 KiB body, go through under a 5 MiB budget.
//!
//! The tests of this file measure the resident memory of their own process
//! ([`e2e::resident_bytes`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use e2e::{hostile_counted, loopback, resident_bytes};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::{EgressConfig, HostPattern};
use wasm_ccm_host::metrics::{CallLabels, Metrics};
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError};
use wasm_ccm_host::sandbox::{CallFailure, HttpBudget, HttpLimits, SandboxConfig};

const MIB: u64 = 1024 * 1024;

async fn run(provider: &Provider, command: &str) -> Result<Value, ProviderError> {
    let node = Node {
        name: command.to_string(),
        ..Node::default()
    };
    let metadata = provider.instance_metadata(&node).await?;
    let (_, report) = metadata
        .additional_labels
        .iter()
        .find(|(key, _)| key == "report")
        .expect("a report label");
    Ok(serde_json::from_str(report).expect("JSON report"))
}

/// The `http-budget` failure of a call that went past its budget.
fn budget_failure(error: ProviderError) -> HttpBudget {
    assert_eq!(error.outcome(), "http-budget", "{error}");
    match error.kind {
        ErrorKind::Sandbox(CallFailure::HttpBudget { budget }) => budget,
        other => panic!("expected an http-budget failure, got {other:?}"),
    }
}

/// Calls of `instance-metadata` that ended with `outcome`.
fn calls(metrics: &Metrics, provider: &Provider, outcome: &str) -> u64 {
    let version = provider.label().split_once('@').unwrap().1.to_string();
    metrics
        .provider_calls
        .get_or_create(&CallLabels {
            provider: "hostile".into(),
            version,
            function: "instance-metadata".into(),
            outcome: outcome.into(),
        })
        .get()
}

#[tokio::test]
async fn a_fields_flood_fails_at_the_http_memory_limit_and_the_host_stays_small() {
    let (provider, metrics) = hostile_counted(e2e::sandbox_config(), EgressConfig::default()).await;
    let limit = HttpLimits::default().max_memory;

    // 20,000 fields of one 60 KB header, all kept: 1.2 GB of host memory without a budget.
    let before = resident_bytes();
    let error = run(&provider, "fields-flood:20000x60000")
        .await
        .unwrap_err();
    let grown = resident_bytes().saturating_sub(before);
    eprintln!(
        "fields flood: resident memory grew {} MiB (--http-memory-limit {} MiB)",
        grown / MIB,
        limit / MIB
    );
    let message = error.to_string();
    match budget_failure(error) {
        HttpBudget::Memory { bytes, limit_bytes } => {
            assert_eq!(limit_bytes, limit);
            assert!(bytes > limit && bytes <= limit + 61_000, "{bytes}");
        }
        other => panic!("expected the memory budget, got {other:?}"),
    }
    assert!(message.contains("--http-memory-limit"), "{message}");
    // The budget, the guest's own 64 MiB of linear memory at most, and the allocator's slack.
    assert!(grown < 96 * MIB, "resident memory grew {grown} bytes");
    assert_eq!(calls(&metrics, &provider, "http-budget"), 1);

    // The next call works, and a flood within the budget is no failure.
    let kept = run(&provider, "fields-flood:100x60000").await.unwrap();
    assert_eq!(kept["count"], 100);
}

#[tokio::test]
async fn a_request_body_flood_fails_at_the_http_memory_limit() {
    let (provider, metrics) = hostile_counted(e2e::sandbox_config(), EgressConfig::default()).await;
    // 300 unsent requests whose bodies hold 2 MiB each: 600 MiB without a budget.
    let before = resident_bytes();
    let error = run(&provider, "bodies-flood:300").await.unwrap_err();
    let grown = resident_bytes().saturating_sub(before);
    eprintln!("bodies flood: resident memory grew {} MiB", grown / MIB);
    assert!(
        matches!(budget_failure(error), HttpBudget::Memory { .. }),
        "the memory budget"
    );
    assert!(grown < 96 * MIB, "resident memory grew {grown} bytes");
    assert_eq!(calls(&metrics, &provider, "http-budget"), 1);
    // Bodies within the budget are kept until the call ends.
    let kept = run(&provider, "bodies-flood:3").await.unwrap();
    assert_eq!(kept["count"], 3);
}

#[tokio::test]
async fn a_resource_flood_fails_at_the_resource_limit() {
    let config = SandboxConfig {
        http: HttpLimits {
            max_resources: 200,
            ..HttpLimits::default()
        },
        ..e2e::sandbox_config()
    };
    let (provider, metrics) = hostile_counted(config, EgressConfig::default()).await;
    // Empty headers cost little memory each: the count stops them.
    let error = run(&provider, "fields-flood:5000x0").await.unwrap_err();
    let message = error.to_string();
    assert_eq!(budget_failure(error), HttpBudget::Resources { limit: 200 });
    assert!(message.contains("--max-http-resources"), "{message}");
    assert_eq!(calls(&metrics, &provider, "http-budget"), 1);
    assert_eq!(
        run(&provider, "fields-flood:150x0").await.unwrap()["count"],
        150
    );
}

/// A server answering every request `200 OK` on a fresh connection, counting them.
async fn counting_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(loopback()).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // Read the head and whatever body arrives with it, then answer.
                let mut request = vec![0u8; 1 << 20];
                let mut read = 0;
                while let Ok(n) = socket.read(&mut request[read..]).await {
                    read += n;
                    let head = &request[..read];
                    let done = head
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .is_some_and(|end| {
                            let length = String::from_utf8_lossy(&head[..end])
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            read >= end + 4 + length
                        });
                    if n == 0 || done {
                        break;
                    }
                }
                let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, requests)
}

#[tokio::test]
async fn ordinary_requests_one_after_another_stay_within_a_small_budget() {
    let (url, requests) = counting_server().await;
    // Room for two request bodies' buffers at once: a budget that counted what was
    // written, rather than what is held, would end this call after two requests.
    let config = SandboxConfig {
        http: HttpLimits {
            max_memory: 5 * MIB,
            max_resources: 100,
        },
        ..e2e::sandbox_config()
    };
    let egress = EgressConfig {
        allow: vec![url.parse::<HostPattern>().unwrap()],
        ..EgressConfig::default()
    };
    let (provider, metrics) = hostile_counted(config, egress).await;

    let error = run(&provider, &format!("fetch-many:60:{url}/item"))
        .await
        .unwrap_err();
    assert_eq!(error.outcome(), "other", "{error}");
    assert!(error.to_string().contains("fetched 60 times"), "{error}");
    assert_eq!(requests.load(Ordering::SeqCst), 60);

    // Several headers and a 512 KiB body.
    let request = serde_json::json!({
        "method": "POST",
        "url": format!("{url}/items"),
        "headers": [["x-a", "1"], ["x-b", "two"], ["x-c", "three"], ["content-type", "text/plain"]],
        "body_bytes": 512 * 1024,
    });
    let report = run(&provider, &format!("request:{request}")).await.unwrap();
    assert_eq!(report["status"], 200, "{report}");
    assert_eq!(report["body"], "ok");
    assert_eq!(calls(&metrics, &provider, "http-budget"), 0);
}

//! A provider naming endless destinations grows neither the host's memory nor its metrics:
//! a refused name is never a label value, and the per-destination state a wildcard grant
//! lets a provider create is bounded. These tests measure the process's resident memory
//! ([`e2e::resident_bytes`]).
//!
//! A provider names 50,000 never-granted hosts in one call, and 20,000 under a wildcard grant
//! (`.invalid`, a closed name server on loopback): no new metric series, `/metrics` the same
//! size, resident memory grown less than 16 MiB (200,000 names grew it by 373 MiB and
//! `/metrics` to 635 MB before). Past `--egress-max-destinations` a new destination is
//! answered `429` naming the flag, and a host name over 253 bytes is refused.

use std::time::Duration;

use e2e::{hostile_counted, hostile_report, loopback, resident_bytes};
use serde_json::{Value, json};
use wasm_ccm_host::egress::{EgressConfig, HostPattern};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::Provider;
use wasm_ccm_host::rate::RateBudget;
use wasm_ccm_host::sandbox::SandboxConfig;

const MIB: u64 = 1024 * 1024;

fn grant(url: &str) -> EgressConfig {
    EgressConfig {
        allow: vec![url.parse::<HostPattern>().unwrap()],
        ..EgressConfig::default()
    }
}

async fn report(provider: &Provider, command: &str) -> Value {
    hostile_report(provider, command).await
}

/// A name server address nothing answers at: a closed port on loopback, so a lookup fails
/// at once and nothing leaves the machine.
fn closed_name_server() -> std::net::SocketAddr {
    let socket = std::net::UdpSocket::bind(loopback()).unwrap();
    socket.local_addr().unwrap()
}

/// `metrics` as `/metrics` serves them.
fn rendered(metrics: &Metrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics render");
    text
}

/// The series of rendered metrics: each sample's name and labels, without its value.
fn series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' ').map(|(series, _)| series))
        .collect()
}

/// Ask for `names` distinct hosts under `pattern` in one call, after a first call of 1,000
/// that makes what any such call makes (the grant's series, the audit trail); what the
/// second call added to the host's resident memory, and the metrics before and after it.
async fn name_flood(
    provider: &Provider,
    metrics: &Metrics,
    pattern: &str,
    names: u32,
) -> (Value, u64, String, String) {
    report(provider, &format!("fetch-names:1000:{pattern}")).await;
    let before_text = rendered(metrics);
    let before = resident_bytes();
    let flood = report(provider, &format!("fetch-names:{names}:{pattern}")).await;
    let grown = resident_bytes().saturating_sub(before);
    (flood, grown, before_text, rendered(metrics))
}

/// Before the fix, each refused name became three series (one a histogram) labelled with
/// it: 200,000 names grew the host by 250 MB in one call, and /metrics with it; 50,000 still
/// grow it by about 90 MiB, far past the bound asserted.
#[tokio::test]
async fn a_provider_naming_50000_hosts_never_granted_grows_neither_metrics_nor_memory() {
    let config = SandboxConfig {
        call_timeout: Duration::from_secs(600),
        ..e2e::sandbox_config()
    };
    let egress = grant("https://api.granted.test");
    let (provider, metrics) = hostile_counted(config, egress).await;
    let names = 50_000;
    let (flood, grown, before, after) =
        name_flood(&provider, &metrics, "http://{}.never-granted.test/", names).await;
    assert_eq!(flood["outcomes"], json!({"denied": names}), "{flood}");
    eprintln!(
        "{names} refused names: resident memory +{} KiB, /metrics {} -> {} bytes",
        grown / 1024,
        before.len(),
        after.len()
    );
    assert!(
        !after.contains("never-granted"),
        "a refused name became a label"
    );
    assert_eq!(series(&before), series(&after), "no new series");
    assert!(
        after.len() <= before.len() + 256,
        "only counts changed: {} -> {} bytes",
        before.len(),
        after.len()
    );
    assert!(
        after.contains(r#"grant="denied",outcome="denied"} 51000"#),
        "every request is counted, under no grant:\n{after}"
    );
    assert!(
        grown < 16 * MIB,
        "{names} refused names grew the host by {} MiB",
        grown / MIB
    );
}

/// Under a wildcard grant each name is a destination of its own: a rate budget, and a
/// lookup (`.invalid` names fail without a query, RFC 6761; the name server given is a
/// closed port on loopback, so nothing leaves the machine).
#[tokio::test]
async fn a_provider_naming_20000_hosts_under_a_wildcard_grant_grows_neither_metrics_nor_memory() {
    let config = SandboxConfig {
        call_timeout: Duration::from_secs(600),
        ..e2e::sandbox_config()
    };
    let egress = EgressConfig {
        name_server: Some(closed_name_server()),
        ..grant("http://*.invalid")
    };
    let (provider, metrics) = hostile_counted(config, egress).await;
    let names = 20_000;
    let (flood, grown, before, after) =
        name_flood(&provider, &metrics, "http://{}.invalid/", names).await;
    eprintln!(
        "{names} names under a wildcard grant: {flood}; resident memory +{} KiB, /metrics {} -> {} bytes",
        grown / 1024,
        before.len(),
        after.len()
    );
    let outcomes = flood["outcomes"].as_object().expect("outcomes");
    assert_eq!(
        outcomes.values().filter_map(Value::as_u64).sum::<u64>(),
        u64::from(names)
    );
    assert!(
        !after.contains("n1999.invalid"),
        "a destination became a label"
    );
    assert_eq!(series(&before), series(&after), "no new series");
    assert!(after.contains(r#"grant="http://*.invalid""#), "{after}");
    assert!(
        grown < 16 * MIB,
        "{names} names under a wildcard grant grew the host by {} MiB",
        grown / MIB
    );
}

/// With a slow refill, the bound on destinations holding a rate budget is reached: a new
/// destination is answered 429, naming the flag, and the host holds no more budgets.
#[tokio::test]
async fn past_its_bound_on_destinations_a_new_destination_is_answered_429() {
    let egress = EgressConfig {
        name_server: Some(closed_name_server()),
        budget: RateBudget {
            per_second: 0.001,
            burst: 1,
        },
        max_destinations: 16,
        ..grant("http://*.invalid")
    };
    let (provider, _metrics) = hostile_counted(e2e::sandbox_config(), egress).await;
    let flood = report(&provider, "fetch-names:100:http://{}.invalid/").await;
    assert_eq!(flood["outcomes"]["429"], 84, "{flood}");
    let crowded = provider
        .egress()
        .audit()
        .recent()
        .into_iter()
        .filter_map(|record| record.denied)
        .filter(|reason| {
            reason.contains("16 other destinations") && reason.contains("--egress-max-destinations")
        })
        .count();
    assert_eq!(crowded, 84);
}

/// A host name longer than any DNS name is refused before it is looked up, kept or counted.
#[tokio::test]
async fn a_host_name_longer_than_dns_allows_is_refused_by_its_length() {
    let egress = EgressConfig {
        name_server: Some(closed_name_server()),
        ..grant("http://*.granted.test")
    };
    let (provider, _metrics) = hostile_counted(e2e::sandbox_config(), egress).await;
    let long = format!("http://{}.granted.test/", "a.".repeat(150));
    let fetched = report(&provider, &format!("fetch:{long}")).await;
    assert_eq!(fetched["kind"], "denied", "{fetched}");
    let records = provider.egress().audit().recent();
    let reason = records[0].denied.as_deref().unwrap_or_default();
    assert!(
        reason.contains("no DNS name is longer than 253"),
        "{reason}"
    );
}

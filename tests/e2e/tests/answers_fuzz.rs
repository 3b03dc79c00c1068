//! Arbitrary answers, errors and delays through the provider facade, as a property test:
//! whatever a provider answers, the facade returns either what the host's checks accept,
//! within every bound ([`wasm_ccm_host::bounds`]), or a failure whose text is one line
//! within its bound and whose delay is clamped; nothing panics. The hostile guest answers
//! what each case writes into a node's or Service's annotation, so the answers cross the
//! real component boundary. `make test` runs 32 cases of each property; `make fuzz` many
//! more (`PROPTEST_CASES`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use wasm_ccm_host::answers::{AnswerChecks, AnswerPolicy, special_use};
use wasm_ccm_host::bounds;
use wasm_ccm_host::contract::{AddressKind, Node, Service, ServicePort};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{Provider, ProviderError};

/// Cases of each property: `PROPTEST_CASES`, else 32.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(32)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

/// The hostile guest, its answers checked as the manager checks them (the ranges of a
/// kubeadm cluster, node names only).
fn hostile(runtime: &tokio::runtime::Runtime) -> Provider {
    let sandbox = e2e::sandbox(e2e::sandbox_config());
    let provider = runtime
        .block_on(e2e::load(
            &sandbox,
            guest_builds::HOSTILE,
            EgressConfig::default(),
            None,
        ))
        .expect("the hostile guest loads");
    let policy = AnswerPolicy {
        service_cidrs: Some("10.96.0.0/12".parse().unwrap()),
        cluster_cidrs: Some("10.244.0.0/16".parse().unwrap()),
        node_dns_suffixes: Some(vec!["example.internal".into()]),
        ..AnswerPolicy::default()
    };
    provider.with_checks(Arc::new(AnswerChecks::standalone(policy)))
}

/// Text a provider might choose: names, any Unicode, control characters, and now and
/// then a lot of one character.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9.-]{0,70}",
        2 => any::<String>(),
        1 => "[\\x00-\\x1f\\u{202e}\\u{200b}a-z]{0,40}",
        1 => (any::<char>(), 0usize..300_000).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
}

/// An address a provider might answer: any IPv4 or IPv6 address, a special one, or text.
fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<std::net::Ipv4Addr>().prop_map(|ip| ip.to_string()),
        2 => any::<std::net::Ipv6Addr>().prop_map(|ip| ip.to_string()),
        2 => prop::sample::select(vec![
            "127.0.0.1", "169.254.169.254", "10.96.0.1", "10.244.1.5", "0.0.0.0", "::",
            "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe", "168.63.129.16", "fd00:ec2::254",
            "n1", "n1.example.internal", "ip-10-96-0-1.example.internal",
            "metadata.google.internal", "localhost", "0x7f000001",
        ])
        .prop_map(String::from),
        1 => text(),
    ]
}

fn kind() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "InternalIP",
        "ExternalIP",
        "Hostname",
        "InternalDNS",
        "ExternalDNS",
    ])
}

/// An `instance-metadata` answer as the hostile guest's annotation takes it.
fn metadata() -> impl Strategy<Value = Value> {
    (
        prop_oneof![text(), text().prop_map(|id| format!("hostile://{id}"))],
        (text(), text(), text()),
        prop::collection::vec((kind(), address()), 0..600),
        prop::collection::vec((text(), text()), 0..80),
    )
        .prop_map(|(id, (instance_type, zone, region), addresses, labels)| {
            json!({
                "providerID": id,
                "instanceType": instance_type,
                "zone": zone,
                "region": region,
                "addresses": addresses,
                "labels": labels,
            })
        })
}

/// A load-balancer status as the hostile guest's annotation takes it.
fn status() -> impl Strategy<Value = Value> {
    let port = (
        prop_oneof![Just(80), any::<i32>()],
        prop::sample::select(vec!["tcp", "udp", "sctp"]),
        prop::option::of(text()),
    )
        .prop_map(
            |(port, protocol, error)| json!({"port": port, "protocol": protocol, "error": error}),
        );
    let point = (
        prop::option::of(address()),
        prop::option::of(address()),
        prop::option::of(prop::sample::select(vec!["vip", "proxy"])),
        prop::collection::vec(port, 0..4),
    )
        .prop_map(|(ip, hostname, mode, ports)| {
            json!({"ip": ip, "hostname": hostname, "ipMode": mode, "ports": ports})
        });
    prop::collection::vec(point, 0..40).prop_map(Value::from)
}

/// An error as the hostile guest's annotation takes it: any kind, delay and length.
fn error() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["retry-after", "other", "not-found"]),
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::from(u32::MAX)),
            Just(u64::MAX),
            any::<u64>()
        ],
        prop_oneof![4 => 0usize..2048, 1 => 0usize..(2 << 20)],
    )
        .prop_map(|(kind, delay, bytes)| json!({"kind": kind, "delayMs": delay, "bytes": bytes}))
}

/// A failure's text: one line, and not much of it whatever the provider said.
fn bounded(error: &ProviderError) -> Result<(), TestCaseError> {
    let text = error.to_string();
    prop_assert!(text.len() <= 32 * 1024, "{} bytes", text.len());
    prop_assert!(!text.contains('\n') && !text.contains('\r'), "{text:.200}");
    if let Some(delay) = error.retry_after() {
        prop_assert!(
            (bounds::MIN_RETRY_AFTER..=bounds::MAX_RETRY_AFTER).contains(&delay),
            "{delay:?}"
        );
    }
    Ok(())
}

/// An IP a written answer may hold: it parses and is no special-use address.
fn usable_ip(text: &str) -> Result<(), TestCaseError> {
    let ip: IpAddr = text
        .parse()
        .map_err(|_| TestCaseError::fail(format!("{text:?} is no IP")))?;
    prop_assert!(special_use(ip).is_none(), "{ip}");
    Ok(())
}

fn plain_name(text: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !text.is_empty() && text.len() <= 253 && text.bytes().all(|b| b.is_ascii_graphic()),
        "{text:?}"
    );
    Ok(())
}

#[test]
fn whatever_instance_metadata_a_provider_answers_the_facade_returns_it_checked_or_refuses_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = hostile(&runtime);
    runner()
        .run(&metadata(), |answer| {
            let node = Node {
                name: "n1".into(),
                annotations: vec![("hostile.wasm-ccm.io/metadata".into(), answer.to_string())],
                ..Node::default()
            };
            match runtime.block_on(provider.instance_metadata(&node)) {
                Ok(metadata) => {
                    prop_assert!(metadata.provider_id.len() <= 1024);
                    prop_assert!(
                        metadata.provider_id.is_empty()
                            || metadata.provider_id.starts_with("hostile://")
                    );
                    prop_assert!(metadata.node_addresses.len() <= bounds::MAX_NODE_ADDRESSES);
                    prop_assert!(metadata.additional_labels.len() <= bounds::MAX_LABELS);
                    for value in [&metadata.zone, &metadata.region, &metadata.instance_type] {
                        prop_assert!(value.len() <= 63, "{value:?}");
                    }
                    for address in &metadata.node_addresses {
                        match address.kind {
                            AddressKind::InternalIP | AddressKind::ExternalIP => {
                                usable_ip(&address.address)?
                            }
                            _ => plain_name(&address.address)?,
                        }
                    }
                }
                Err(error) => bounded(&error)?,
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn whatever_load_balancer_status_a_provider_answers_the_facade_returns_it_checked_or_refuses_it() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = hostile(&runtime);
    let nodes: Arc<[Node]> = Arc::from(Vec::new());
    runner()
        .run(&status(), |answer| {
            let service = Service {
                name: "web".into(),
                ports: vec![ServicePort {
                    port: 80,
                    ..ServicePort::default()
                }],
                annotations: vec![("hostile.wasm-ccm.io/ingress".into(), answer.to_string())],
                ..Service::default()
            };
            match runtime.block_on(provider.ensure_load_balancer("kubernetes", &service, &nodes)) {
                Ok(status) => {
                    prop_assert!(status.ingress.len() <= bounds::MAX_INGRESS);
                    for point in &status.ingress {
                        if let Some(ip) = &point.ip {
                            usable_ip(ip)?;
                        }
                        if let Some(hostname) = &point.hostname {
                            plain_name(hostname)?;
                        }
                        prop_assert!(point.ports.len() <= service.ports.len());
                    }
                }
                Err(error) => bounded(&error)?,
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn whatever_error_and_delay_a_provider_answers_its_text_is_cut_and_its_delay_clamped() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let provider = hostile(&runtime);
    let nodes: Arc<[Node]> = Arc::from(Vec::new());
    runner()
        .run(&error(), |answer| {
            let service = Service {
                name: "web".into(),
                annotations: vec![("hostile.wasm-ccm.io/error".into(), answer.to_string())],
                ..Service::default()
            };
            let error = runtime
                .block_on(provider.ensure_load_balancer("kubernetes", &service, &nodes))
                .expect_err("the guest answers an error");
            bounded(&error)?;
            prop_assert!(
                error.to_string().len() <= bounds::MAX_MESSAGE + 512,
                "{}",
                error.to_string().len()
            );
            if answer["kind"] == "retry-after" {
                let delay = error.retry_after().expect("a delay");
                let asked = Duration::from_millis(answer["delayMs"].as_u64().unwrap());
                prop_assert_eq!(
                    delay,
                    asked.clamp(bounds::MIN_RETRY_AFTER, bounds::MAX_RETRY_AFTER)
                );
            }
            Ok(())
        })
        .unwrap();
}

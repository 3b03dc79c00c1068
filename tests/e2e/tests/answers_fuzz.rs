//! Arbitrary answers, errors and delays through the provider facade, as a property test:
//! whatever a provider answers, the facade returns either what the host's checks accept,
//! within every bound ([`wasm_ccm_host::bounds`]), or a failure whose text is one line
//! within its bound and whose delay is clamped; nothing panics. The hostile guest answers
//! what each case writes into a node's or Service's annotation, so the answers cross the
//! real component boundary. The last property takes answers mostly as a working provider
//! gives them, a field now and then hostile, on through a manager's cloud-node and service
//! controllers to the API emulator: what they write, and what they report. `make test` runs 32 cases of each property; `make fuzz` many more
//! (`PROPTEST_CASES`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseResult, TestRunner};
use serde_json::{Value, json};
use wasm_ccm_host::answers::{AnswerChecks, AnswerPolicy, special_use};
use wasm_ccm_host::bounds;
use wasm_ccm_host::contract::{AddressKind, Node, Service, ServicePort};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{Provider, ProviderError};

use crate::controllers::answers::refusals;

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
/// then a lot of one character (at most `long`).
fn text(long: usize) -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z0-9.-]{0,70}",
        2 => any::<String>(),
        1 => "[\\x00-\\x1f\\u{202e}\\u{200b}a-z]{0,40}",
        1 => (any::<char>(), 0..long).prop_map(|(c, n)| c.to_string().repeat(n)),
    ]
    .boxed()
}

/// An address a provider might answer: any IPv4 or IPv6 address, a special one, or text.
fn address(long: usize) -> impl Strategy<Value = String> {
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
        1 => text(long),
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

/// The fields of an `instance-metadata` answer: providerID, (instance type, zone, region),
/// addresses by type, labels.
type MetadataFields = (
    String,
    (String, String, String),
    Vec<(&'static str, String)>,
    Vec<(String, String)>,
);

/// The hostile guest's annotation answering `fields`.
fn metadata_annotation(fields: MetadataFields) -> Value {
    let (id, (instance_type, zone, region), addresses, labels) = fields;
    json!({
        "providerID": id,
        "instanceType": instance_type,
        "zone": zone,
        "region": region,
        "addresses": addresses,
        "labels": labels,
    })
}

/// An `instance-metadata` answer as the hostile guest's annotation takes it, its text at
/// most `long` of one character.
fn metadata(long: usize) -> impl Strategy<Value = Value> {
    let text = || text(long);
    (
        prop_oneof![text(), text().prop_map(|id| format!("hostile://{id}"))],
        (text(), text(), text()),
        prop::collection::vec((kind(), address(long)), 0..600),
        prop::collection::vec((text(), text()), 0..80),
    )
        .prop_map(metadata_annotation)
}

/// A load-balancer status as the hostile guest's annotation takes it, its text at most
/// `long` of one character.
fn status(long: usize) -> impl Strategy<Value = Value> {
    let port = (
        prop_oneof![Just(80), any::<i32>()],
        prop::sample::select(vec!["tcp", "udp", "sctp"]),
        prop::option::of(text(long)),
    )
        .prop_map(
            |(port, protocol, error)| json!({"port": port, "protocol": protocol, "error": error}),
        );
    let point = (
        prop::option::of(address(long)),
        prop::option::of(address(long)),
        prop::option::of(prop::sample::select(vec!["vip", "proxy"])),
        prop::collection::vec(port, 0..4),
    )
        .prop_map(|(ip, hostname, mode, ports)| {
            json!({"ip": ip, "hostname": hostname, "ipMode": mode, "ports": ports})
        });
    prop::collection::vec(point, 0..40).prop_map(Value::from)
}

/// An error as the hostile guest's annotation takes it: one of `kinds`, any delay and
/// length.
fn error(kinds: &[&'static str]) -> impl Strategy<Value = Value> {
    (
        prop::sample::select(kinds.to_vec()),
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
        .run(&metadata(300_000), |answer| {
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
        .run(&status(300_000), |answer| {
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
        .run(&error(&["retry-after", "other", "not-found"]), |answer| {
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

/// What a case makes the hostile guest answer through a manager's controllers: a node's
/// `instance-metadata`, a Service's load-balancer status, or an error for it.
#[derive(Debug, Clone)]
enum Answer {
    Metadata(Value),
    Ingress(Value),
    Error(Value),
}

/// Mostly `valid`, now and then `hostile`: one refused field refuses a whole answer, so
/// the write path is reached only by answers that are mostly what a working provider says.
fn mostly<T: std::fmt::Debug + Clone + 'static>(
    valid: impl Strategy<Value = T> + 'static,
    hostile: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![40 => valid, 1 => hostile].boxed()
}

/// A label value, or nothing.
const LABEL_VALUE: &str = "([a-z0-9]([-a-z0-9_.]{0,40}[a-z0-9])?)?";
/// The text of the write path's answers: at most this much of one character, so an answer
/// fits in an annotation (the API server takes 256 KiB of them).
const LONG: usize = 1_000;

/// An `instance-metadata` answer a working provider might give, now and then a field of it
/// hostile.
fn plausible_metadata() -> impl Strategy<Value = Value> {
    let text = || text(LONG);
    let usable = prop_oneof![
        any::<std::net::Ipv4Addr>().prop_map(|ip| ("InternalIP", ip.to_string())),
        any::<std::net::Ipv6Addr>().prop_map(|ip| ("ExternalIP", ip.to_string())),
        "[a-z]{3,12}".prop_map(|name| ("InternalDNS", format!("{name}.hostile.internal"))),
        "[a-z]{3,12}".prop_map(|name| ("Hostname", format!("{name}.hostile.internal"))),
        // Names of the nodes of earlier cases, bare and under the suffix.
        (0..40u32).prop_map(|i| ("Hostname", format!("n{i}.hostile.internal"))),
        (0..40u32).prop_map(|i| ("InternalDNS", format!("n{i}"))),
    ];
    let label = ("[a-z]{1,20}", LABEL_VALUE)
        .prop_map(|(name, value)| (format!("hostile.example/{name}"), value));
    (
        mostly("hostile://[a-z0-9-]{1,40}", text()),
        (
            mostly(LABEL_VALUE, text()),
            mostly(LABEL_VALUE, text()),
            mostly(LABEL_VALUE, text()),
        ),
        prop::collection::vec(mostly(usable, (kind(), address(LONG))), 0..6),
        prop::collection::vec(mostly(label, (text(), text())), 0..6),
    )
        .prop_map(metadata_annotation)
}

/// A load-balancer status a working provider might give for a Service of port 80/TCP, now
/// and then a field of it hostile.
fn plausible_status() -> impl Strategy<Value = Value> {
    let port = mostly(
        prop::option::of("[a-z]{1,20}").prop_map(
            |error| json!({"port": 80, "protocol": "tcp", "error": error.map(|e| format!("hostile.example/{e}"))}),
        ),
        (any::<i32>(), prop::option::of(text(LONG)))
            .prop_map(|(port, error)| json!({"port": port, "protocol": "udp", "error": error})),
    );
    let point = (
        mostly(
            prop::option::of(any::<std::net::Ipv4Addr>().prop_map(|ip| ip.to_string())),
            prop::option::of(address(LONG)),
        ),
        mostly(
            prop::option::of("[a-z]{3,12}".prop_map(|name| format!("{name}.lb.example"))),
            prop::option::of(address(LONG)),
        ),
        prop::option::of(prop::sample::select(vec!["vip", "proxy"])),
        prop::collection::vec(port, 0..2),
    )
        .prop_map(|(ip, hostname, mode, ports)| {
            let mode = ip.as_ref().and(mode);
            let ip = if hostname.is_none() && ip.is_none() {
                Some("198.51.100.7".to_string())
            } else {
                ip
            };
            json!({"ip": ip, "hostname": hostname, "ipMode": mode, "ports": ports})
        });
    prop::collection::vec(point, 0..3).prop_map(Value::from)
}

/// [`Answer`]s for the write path: mostly what a working provider answers (a node's always
/// with a providerID, without which its sync fails unreported, as upstream's does); an
/// error's text is not in its annotation (`bytes` says how much the guest makes).
fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        plausible_metadata().prop_map(|mut metadata| {
            if metadata["providerID"] == "" {
                metadata["providerID"] = "hostile://i-0".into();
            }
            Answer::Metadata(metadata)
        }),
        plausible_status().prop_map(Answer::Ingress),
        error(&["other", "not-found"]).prop_map(Answer::Error),
    ]
}

/// A note or message as written: one line, at most `max` bytes.
fn one_line_within(text: &str, max: usize) -> Result<(), TestCaseError> {
    prop_assert!(text.len() <= max, "{} bytes", text.len());
    prop_assert!(!text.contains('\n') && !text.contains('\r'), "{text:.200}");
    Ok(())
}

/// The node or Service named `name` once the controller wrote the answer or reported it.
async fn written(bed: &e2e::testbed::Testbed, name: &str, answer: &Answer) -> TestCaseResult {
    use e2e::testbed::{eventually, is_uninitialized};
    const WAIT: Duration = Duration::from_secs(30);
    match answer {
        Answer::Metadata(metadata) => {
            let node = eventually(
                &format!("node {name} initialised or its answer refused"),
                WAIT,
                || async {
                    let node = bed.node(name).await?;
                    let refused = !refusals(bed, name).await.is_empty();
                    (refused || !is_uninitialized(&node)).then_some(node)
                },
            )
            .await;
            if is_uninitialized(&node) {
                let spec = node.spec.unwrap_or_default();
                prop_assert!(
                    spec.provider_id.is_none(),
                    "a refused answer writes nothing"
                );
                return Ok(());
            }
            let id = node
                .spec
                .unwrap_or_default()
                .provider_id
                .unwrap_or_default();
            prop_assert!(
                id.starts_with("hostile://") && id.len() <= 1024,
                "{id:.200}"
            );
            let labels = node.metadata.labels.unwrap_or_default();
            prop_assert!(
                labels.len() <= 3 + 6 + bounds::MAX_LABELS,
                "{}",
                labels.len()
            );
            let answered = metadata["addresses"].as_array().map_or(0, Vec::len);
            let addresses = eventually(&format!("node {name}'s addresses"), WAIT, || async {
                let node = bed.node(name).await?;
                let addresses = node.status?.addresses.unwrap_or_default();
                (answered == 0 || !addresses.is_empty()).then_some(addresses)
            })
            .await;
            prop_assert!(addresses.len() <= bounds::MAX_NODE_ADDRESSES);
            for address in &addresses {
                match address.type_.as_str() {
                    "InternalIP" | "ExternalIP" => usable_ip(&address.address)?,
                    _ => {
                        plain_name(&address.address)?;
                        // Neither another node's name nor its name under a suffix.
                        let first = address.address.split('.').next().unwrap_or_default();
                        for named in [address.address.as_str(), first] {
                            prop_assert!(
                                named == name || bed.node(named).await.is_none(),
                                "node {name} holds {named}, another node's name"
                            );
                        }
                    }
                }
            }
        }
        Answer::Ingress(_) | Answer::Error(_) => {
            let service = eventually(
                &format!("Service {name}'s load balancer ensured or its failure reported"),
                WAIT,
                || async {
                    let service = bed.service(name).await?;
                    let conditions = service.status.as_ref()?.conditions.as_ref();
                    let failed = conditions.is_some_and(|c| !c.is_empty());
                    let ensured = bed
                        .event_reasons(name)
                        .await
                        .iter()
                        .any(|reason| reason == "EnsuredLoadBalancer");
                    (failed || ensured).then_some(service)
                },
            )
            .await;
            let status = service.status.unwrap_or_default();
            for condition in status.conditions.unwrap_or_default() {
                one_line_within(&condition.message, 4096)?;
            }
            let ingress = status.load_balancer.unwrap_or_default().ingress;
            let ingress = ingress.unwrap_or_default();
            prop_assert!(ingress.len() <= bounds::MAX_INGRESS);
            prop_assert!(
                ingress.is_empty() || matches!(answer, Answer::Ingress(_)),
                "an error writes no ingress"
            );
            for point in &ingress {
                if let Some(ip) = &point.ip {
                    usable_ip(ip)?;
                }
                if let Some(hostname) = &point.hostname {
                    plain_name(hostname)?;
                }
                prop_assert!(point.ports.as_ref().is_none_or(|ports| ports.len() <= 1));
            }
        }
    }
    for event in bed.events_about(name).await {
        one_line_within(event.note.as_deref().unwrap_or_default(), 1024)?;
    }
    Ok(())
}

/// Answers through a manager's cloud-node and service controllers against the API emulator:
/// each is written within the bounds, and nothing the checks pass is refused by the API
/// server (which would leave it failing unreported); or it is reported on the object (event,
/// condition) one line within its bound, and nothing is written.
#[test]
fn whatever_a_provider_answers_the_controllers_write_it_within_bounds_or_report_it() {
    use crate::controllers::answers::{hostile, node};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bed = runtime.block_on(e2e::testbed::Testbed::start());
    let manager = {
        let _entered = runtime.enter();
        hostile(&bed, "cloud-node,service", |config| {
            config.settings.service_cidrs = Some("10.96.0.0/12".parse().unwrap());
        })
    };
    let case = std::sync::atomic::AtomicUsize::new(0);
    runner()
        .run(&answer(), |answer| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runtime.block_on(async {
                match &answer {
                    Answer::Metadata(metadata) => {
                        let name = format!("n{case}");
                        bed.create_node(&node(&name, metadata.clone())).await;
                        written(&bed, &name, &answer).await
                    }
                    Answer::Ingress(value) | Answer::Error(value) => {
                        let name = format!("s{case}");
                        let key = match answer {
                            Answer::Ingress(_) => "hostile.wasm-ccm.io/ingress",
                            _ => "hostile.wasm-ccm.io/error",
                        };
                        let mut service = e2e::testbed::Testbed::lb_service(&name);
                        service.metadata.annotations =
                            Some([(key.to_string(), value.to_string())].into());
                        bed.services()
                            .create(&Default::default(), &service)
                            .await
                            .expect("create service");
                        written(&bed, &name, &answer).await
                    }
                }
            })
        })
        .unwrap();
    runtime.block_on(manager.stop()).unwrap();
}

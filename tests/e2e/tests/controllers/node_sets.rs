//! Load-balancer nodes reach a provider as it reads them: lent as a `node-set` to a provider
//! built with the SDK, which copies only the fields it asks for; passed as a `list<node>` to a
//! provider built for the contract without node sets (tests/guests/legacy). A set is read
//! field by field (names, provider IDs, whole nodes with only the declared labels, whole nodes
//! more than once). A provider that abuses a node set ends only its own call: re-reading a
//! set without end meets its deadline, keeping every read meets its memory cap, and the next
//! call works.

use std::sync::Arc;
use std::time::Duration;

use e2e::{load, sandbox};
use serde_json::{Value, json};
use wasm_ccm_host::contract::{CloudError, Node, Service};
use wasm_ccm_host::egress::EgressConfig;
use wasm_ccm_host::provider::{ErrorKind, Provider, ProviderError};
use wasm_ccm_host::sandbox::{CallFailure, SandboxConfig};

const ZONE: &str = "topology.kubernetes.io/zone";

/// `count` nodes with two labels each; every third has no provider ID.
fn nodes(count: usize) -> Arc<[Node]> {
    (0..count)
        .map(|i| Node {
            name: format!("node-{i:05}"),
            uid: format!("uid-{i}"),
            labels: vec![
                (ZONE.into(), "sim-central-1a".into()),
                ("kubernetes.io/os".into(), "linux".into()),
            ],
            provider_id: (i % 3 != 2).then(|| format!("simcloud://i-{i:08x}")),
            ..Node::default()
        })
        .collect()
}

async fn provider(guest: &str, config: SandboxConfig, cloud_config: Option<Value>) -> Provider {
    load(
        &sandbox(config),
        guest,
        EgressConfig::default(),
        cloud_config.map(|c| c.to_string().into_bytes()),
    )
    .await
    .expect("the guest loads")
}

fn service(name: &str) -> Service {
    Service {
        name: name.into(),
        ..Service::default()
    }
}

/// What the guest reported reading, from the error it answers with.
fn read(error: ProviderError) -> Value {
    match error.kind {
        ErrorKind::Cloud(CloudError::Other { message }) => {
            serde_json::from_str(&message).expect("the report is JSON")
        }
        other => panic!("expected a report, got {other:?}"),
    }
}

#[tokio::test]
async fn a_provider_copies_only_the_fields_it_reads_from_a_lent_node_set() {
    let only_zone = json!({"labels": [ZONE]});
    let hostile = provider(
        guest_builds::HOSTILE,
        e2e::sandbox_config(),
        Some(only_zone),
    )
    .await;
    let nodes = nodes(30);
    let update = |field: &str| {
        let svc = service(&format!("read-nodes:{field}"));
        let (hostile, nodes) = (&hostile, &nodes);
        async move {
            hostile
                .update_load_balancer("kubernetes", &svc, nodes)
                .await
                .unwrap_err()
        }
    };
    assert_eq!(read(update("names").await), json!({"read": 30}));
    assert_eq!(
        read(update("provider-ids").await),
        json!({"read": 30, "provider_ids": 20})
    );
    // Whole nodes carry the declared label only, as node lists do.
    assert_eq!(
        read(update("all").await),
        json!({"read": 30, "labels": 30, "provider_ids": 20})
    );
    // More than one read of whole nodes (the SDK reads 1,024 at a time), in order.
    assert_eq!(
        read(
            hostile
                .update_load_balancer("kubernetes", &service("read-nodes:all"), &self::nodes(2500))
                .await
                .unwrap_err()
        ),
        json!({"read": 2500, "labels": 2500, "provider_ids": 1667})
    );
}

#[tokio::test]
async fn a_provider_built_without_node_sets_gets_the_nodes_as_a_list() {
    let nodes = nodes(30);
    let declared = provider(
        guest_builds::LEGACY,
        e2e::sandbox_config(),
        Some(json!({"labels": [ZONE]})),
    )
    .await;
    let svc = service("web");
    let expected = json!({"read": 30, "labels": 30, "provider_ids": 20});
    assert_eq!(
        read(
            declared
                .update_load_balancer("kubernetes", &svc, &nodes)
                .await
                .unwrap_err()
        ),
        expected
    );
    assert_eq!(
        read(
            declared
                .ensure_load_balancer("kubernetes", &svc, &nodes)
                .await
                .unwrap_err()
        ),
        expected
    );
    let undeclared = provider(guest_builds::LEGACY, e2e::sandbox_config(), None).await;
    assert_eq!(
        read(
            undeclared
                .update_load_balancer("kubernetes", &svc, &nodes)
                .await
                .unwrap_err()
        )["labels"],
        60
    );
}

#[tokio::test]
async fn a_provider_rereading_a_node_set_without_end_meets_its_deadline() {
    let config = SandboxConfig {
        call_timeout: Duration::from_millis(1500),
        ..e2e::sandbox_config()
    };
    let hostile = provider(guest_builds::HOSTILE, config, Some(json!({}))).await;
    let nodes = nodes(5000);
    let error = hostile
        .update_load_balancer("kubernetes", &service("reread-nodes"), &nodes)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.kind,
            ErrorKind::Sandbox(CallFailure::Deadline { limit_ms: 1500 })
        ),
        "{error}"
    );
    next_call_reads(&hostile, &nodes).await;
}

#[tokio::test]
async fn a_provider_keeping_every_read_of_a_node_set_meets_its_memory_cap() {
    let config = SandboxConfig {
        memory_limit: 24 * 1024 * 1024,
        ..e2e::sandbox_config()
    };
    let hostile = provider(guest_builds::HOSTILE, config, Some(json!({}))).await;
    let nodes = nodes(5000);
    let error = hostile
        .update_load_balancer("kubernetes", &service("hoard-nodes"), &nodes)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.kind,
            ErrorKind::Sandbox(CallFailure::MemoryLimit {
                limit_bytes: 25_165_824
            })
        ),
        "{error}"
    );
    next_call_reads(&hostile, &nodes).await;
}

/// The call after a failed one reads the same set.
async fn next_call_reads(hostile: &Provider, nodes: &Arc<[Node]>) {
    let svc = service("read-nodes:names");
    let error = hostile
        .update_load_balancer("kubernetes", &svc, nodes)
        .await
        .unwrap_err();
    assert_eq!(read(error), json!({"read": nodes.len()}));
}

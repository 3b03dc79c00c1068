//! The guests built for hot-swap tests behave as their docs say: the two simcloud builds
//! differ observably but name the cloud's resources alike, and the rollout guest's cloud
//! config sets its name and capabilities, fails `init`, or makes every Nth call trap.

use std::sync::Arc;
use std::time::Duration;

use cloud_sim::{CloudSim, NewInstance, SimOptions};
use wasm_ccm_host::contract::{Node, Protocol, Service, ServicePort};
use wasm_ccm_host::egress::{EgressConfig, EgressGate};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderLoadError, ProviderSource};
use wasm_ccm_host::sandbox::{Sandbox, SandboxConfig};
use wasm_ccm_host::source::Artifact;

const TOKEN: &str = "swap-guests-token";
const CLUSTER: &str = "kubernetes";
const BUILD_LABEL: &str = "simcloud.wasm-ccm.io/build";

async fn load(
    path: &str,
    egress: EgressConfig,
    cloud_config: serde_json::Value,
) -> Result<Provider, ProviderLoadError> {
    let metrics = Arc::new(Metrics::default());
    let sandbox = Sandbox::new(SandboxConfig::default(), metrics.clone()).expect("sandbox");
    let source = ProviderSource {
        artifact: Artifact::from_bytes(path, guest_builds::read(path).into()),
        cloud_config: Some(cloud_config.to_string().into_bytes()),
    };
    Provider::load(
        &sandbox,
        EgressGate::new(egress, metrics.clone()),
        source,
        metrics,
    )
    .await
}

fn node(name: &str) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        ..Node::default()
    }
}

fn service() -> Service {
    Service {
        name: "web".into(),
        namespace: "shop".into(),
        uid: "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b".into(),
        ports: vec![ServicePort {
            protocol: Protocol::Tcp,
            port: 80,
            node_port: Some(30080),
            ..ServicePort::default()
        }],
        ..Service::default()
    }
}

#[tokio::test]
async fn simcloud_v2_labels_nodes_and_names_ingress_but_adopts_v1_load_balancers() {
    let options = SimOptions {
        token: TOKEN.into(),
        lb_provision: Duration::ZERO,
        ..SimOptions::default()
    };
    let sim = CloudSim::start(([127, 0, 0, 1], 0).into(), options)
        .await
        .expect("cloud-sim starts");
    let token = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(token.path(), TOKEN).expect("write token");
    let egress = EgressConfig {
        allow: vec![sim.url().parse().expect("host pattern")],
        credentials: vec![
            format!("{}=bearer:file:{}", sim.url(), token.path().display())
                .parse()
                .expect("credential rule"),
        ],
        ..EgressConfig::default()
    };
    let config = serde_json::json!({ "api_url": sim.url() });
    let v1 = load(guest_builds::SIMCLOUD, egress.clone(), config.clone())
        .await
        .expect("v1 loads");
    let v2 = load(guest_builds::SIMCLOUD_V2, egress, config)
        .await
        .expect("v2 loads");
    assert_ne!(v1.digest(), v2.digest());
    assert_eq!(v1.capabilities(), v2.capabilities());

    let instance = sim.state().add_instance(NewInstance {
        name: "node-1".into(),
        instance_type: "sim.small".into(),
        zone: "sim-central-1a".into(),
        private_ip: None,
        public_ip: None,
        public_ipv6: None,
        hostname: None,
    });
    let build_label = |labels: &[(String, String)]| {
        labels
            .iter()
            .find(|(key, _)| key == BUILD_LABEL)
            .map(|(_, value)| value.clone())
    };
    let metadata = v1
        .instance_metadata(&node("node-1"))
        .await
        .expect("v1 metadata");
    assert_eq!(build_label(&metadata.additional_labels), None);
    let metadata = v2
        .instance_metadata(&node("node-1"))
        .await
        .expect("v2 metadata");
    assert_eq!(
        build_label(&metadata.additional_labels).as_deref(),
        Some(guest_builds::SIMCLOUD_V2_BUILD)
    );
    assert_eq!(metadata.provider_id, format!("simcloud://{}", instance.id));

    let svc = service();
    let target = Node {
        provider_id: Some(format!("simcloud://{}", instance.id)),
        ..node("node-1")
    };
    let nodes = &Arc::from([target]);
    // Provisioning is immediate, but the first answer still reports it.
    let _ = v1.ensure_load_balancer(CLUSTER, &svc, nodes).await;
    let by_v1 = v1
        .ensure_load_balancer(CLUSTER, &svc, nodes)
        .await
        .expect("v1 ensures");
    let by_v2 = v2
        .ensure_load_balancer(CLUSTER, &svc, nodes)
        .await
        .expect("v2 ensures");
    assert_eq!(sim.state().load_balancers().len(), 1, "v2 adopted v1's");
    let lb = &sim.state().load_balancers()[0];
    assert_eq!(by_v1.ingress[0].hostname, None);
    assert_eq!(by_v1.ingress[0].ip, by_v2.ingress[0].ip);
    assert_eq!(
        by_v2.ingress[0].hostname,
        Some(format!("v2.{}.lb.simcloud.test", lb.name))
    );
    let got = v2.get_load_balancer(CLUSTER, &svc).await.expect("v2 gets");
    assert_eq!(got, Some(by_v2));
    assert_eq!(
        v1.get_load_balancer_name(CLUSTER, &svc)
            .await
            .expect("v1 name"),
        v2.get_load_balancer_name(CLUSTER, &svc)
            .await
            .expect("v2 name"),
    );
}

#[tokio::test]
async fn rollout_reports_the_name_and_capabilities_its_config_sets() {
    let rollout = load(
        guest_builds::ROLLOUT,
        EgressConfig::default(),
        serde_json::json!({}),
    )
    .await
    .expect("rollout loads");
    let caps = rollout.capabilities();
    assert_eq!(caps.name, "rollout");
    assert!(caps.instances && caps.load_balancer && caps.routes && caps.has_cluster_id);

    let config = serde_json::json!({ "name": "simcloud", "routes": false });
    let rollout = load(guest_builds::ROLLOUT, EgressConfig::default(), config)
        .await
        .expect("rollout loads");
    let caps = rollout.capabilities();
    assert_eq!(caps.name, "simcloud");
    assert!(caps.instances && caps.load_balancer && !caps.routes);
    let metadata = rollout
        .instance_metadata(&node("node-1"))
        .await
        .expect("metadata");
    assert_eq!(metadata.provider_id, "simcloud://node-1");
    assert_eq!(metadata.instance_type, "rollout");
}

#[tokio::test]
async fn rollout_fails_init_with_the_configured_message() {
    let config = serde_json::json!({ "failInit": "refused on purpose" });
    let Err(err) = load(guest_builds::ROLLOUT, EgressConfig::default(), config).await else {
        panic!("init should fail");
    };
    assert!(
        matches!(err, ProviderLoadError::Init { .. }),
        "an init failure, got {err}"
    );
    assert!(err.to_string().contains("refused on purpose"), "{err}");
}

#[tokio::test]
async fn rollout_traps_every_nth_call_and_never_without_trap_every() {
    let config = serde_json::json!({ "trapEvery": 3 });
    let rollout = load(guest_builds::ROLLOUT, EgressConfig::default(), config)
        .await
        .expect("rollout loads");
    let mut trapped = Vec::new();
    for call in 1..=7 {
        match rollout.instance_exists(&node("node-1")).await {
            Ok(exists) => assert!(exists),
            Err(err) => {
                assert_eq!(err.outcome(), "trap", "{err}");
                trapped.push(call);
            }
        }
    }
    assert_eq!(trapped, [3, 6]);

    let rollout = load(
        guest_builds::ROLLOUT,
        EgressConfig::default(),
        serde_json::json!({}),
    )
    .await
    .expect("rollout loads");
    for _ in 0..7 {
        rollout
            .instance_exists(&node("node-1"))
            .await
            .expect("no trap without trapEvery");
    }
}

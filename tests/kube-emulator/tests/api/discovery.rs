//! kube-rs discovery, legacy and aggregated, sees what is served.

use kube::discovery::{Discovery, Scope, verbs};

use crate::harness::start;

#[tokio::test]
async fn discovery_finds_the_served_resources() {
    let cluster = start().await;
    for aggregated in [false, true] {
        let discovery = Discovery::new(cluster.client.clone());
        let discovery = if aggregated {
            discovery.run_aggregated().await
        } else {
            discovery.run().await
        }
        .unwrap();
        let (nodes, caps) = discovery.get("").unwrap().recommended_kind("Node").unwrap();
        assert_eq!(nodes.plural, "nodes");
        assert_eq!(caps.scope, Scope::Cluster);
        assert!(caps.supports_operation(verbs::WATCH));
        assert!(
            caps.subresources
                .iter()
                .any(|(sub, _)| sub.plural == "nodes/status" || sub.plural == "status"),
            "{:?}",
            caps.subresources
        );
        let (leases, caps) = discovery
            .get("coordination.k8s.io")
            .unwrap()
            .recommended_kind("Lease")
            .unwrap();
        assert_eq!(leases.api_version, "coordination.k8s.io/v1");
        assert_eq!(caps.scope, Scope::Namespaced);
        assert!(discovery.get("events.k8s.io").is_some());
        assert!(discovery.get("apiextensions.k8s.io").is_some());
    }
    let version = cluster.client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "32")
    );
}

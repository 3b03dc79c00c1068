//! Label and field selectors on lists, including the 400 for field labels
//! a resource does not support.

use k8s_openapi::api::core::v1::{Node, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};

use crate::harness::{self, start, status};

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items.iter().map(ResourceExt::name_any).collect()
}

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    for (name, zone, role) in [
        ("a", "z1", Some("edge")),
        ("b", "z2", None),
        ("c", "z3", Some("core")),
    ] {
        let mut node = harness::node(name);
        node.labels_mut().insert("zone".into(), zone.into());
        if let Some(role) = role {
            node.labels_mut().insert("role".into(), role.into());
        }
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    for (selector, want) in [
        ("zone=z1", vec!["a"]),
        ("zone==z2", vec!["b"]),
        ("zone!=z1", vec!["b", "c"]),
        ("zone in (z1,z3)", vec!["a", "c"]),
        ("zone notin (z1,z3)", vec!["b"]),
        ("role", vec!["a", "c"]),
        ("!role", vec!["b"]),
        ("role,zone=z3", vec!["c"]),
    ] {
        let list = nodes
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(names(&list.items), want, "{selector}");
    }
    let err = status(
        nodes
            .list(&ListParams::default().labels("zone in ("))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn field_selectors_support_each_resources_fields_only() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    harness::create_node(&cluster.client, "a").await;
    let mut cordoned = harness::node("b");
    cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
    nodes
        .create(&PostParams::default(), &cordoned)
        .await
        .unwrap();
    let list = nodes
        .list(&ListParams::default().fields("metadata.name=a"))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["a"]);
    let list = nodes
        .list(&ListParams::default().fields("spec.unschedulable=true"))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["b"]);
    let list = nodes
        .list(&ListParams::default().fields("spec.unschedulable!=true,metadata.name!=x"))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["a"]);

    let err = status(
        nodes
            .list(&ListParams::default().fields("spec.providerID=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (400, "field label not supported: spec.providerID")
    );
    let err = status(
        nodes
            .list(&ListParams::default().fields("metadata.namespace=default"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.code, 400,
        "cluster-scoped kinds have no metadata.namespace field"
    );

    let services = Api::<Service>::all(cluster.client.clone());
    Api::<Service>::namespaced(cluster.client.clone(), "default")
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let list = services
        .list(&ListParams::default().fields("spec.type=LoadBalancer"))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["web"]);
    let list = services
        .list(&ListParams::default().fields("metadata.namespace=default"))
        .await
        .unwrap();
    assert_eq!(names(&list.items), ["kubernetes", "web"]);
    let empty = services
        .list(
            &ListParams::default()
                .fields("metadata.namespace=kube-system")
                .labels("app"),
        )
        .await
        .unwrap();
    assert!(empty.items.is_empty());
}

//! Create, read, list, update and delete: resourceVersions, conflicts,
//! status subresource isolation, finalizers and namespaces.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, VersionMatch,
};
use serde_json::json;

use crate::harness::{self, create_node, http_client, start, status};

#[tokio::test]
async fn nodes_are_created_read_listed_and_updated_with_optimistic_concurrency() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let created = create_node(&cluster.client, "n1").await;
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(
        created.metadata.generation, None,
        "core kinds have no generation upstream"
    );
    let addresses = created
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .map(Vec::len);
    assert_eq!(addresses, Some(2), "node status is writable on create");

    let dup = status(
        nodes
            .create(&PostParams::default(), &harness::node("n1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(dup.message, "nodes \"n1\" already exists");

    let missing = status(nodes.get("nope").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "nodes \"nope\" not found");
    assert_eq!(
        missing.details.as_ref().map(|d| d.kind.as_str()),
        Some("nodes")
    );

    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv >= created.resource_version().unwrap().parse::<u64>().unwrap());

    let mut update = created.clone();
    update.labels_mut().insert("zone".into(), "a".into());
    let updated = nodes
        .replace("n1", &PostParams::default(), &update)
        .await
        .unwrap();
    assert_ne!(updated.resource_version(), created.resource_version());

    let stale = status(
        nodes
            .replace("n1", &PostParams::default(), &update)
            .await
            .unwrap_err(),
    );
    assert_eq!((stale.code, stale.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        stale.message,
        "Operation cannot be fulfilled on nodes \"n1\": the object has been modified; please apply your changes to the latest version and try again"
    );

    let mut unconditional = updated.clone();
    unconditional.metadata.resource_version = None;
    unconditional.labels_mut().insert("zone".into(), "b".into());
    let forced = nodes
        .replace("n1", &PostParams::default(), &unconditional)
        .await
        .unwrap();
    assert_eq!(forced.labels()["zone"], "b");

    let same = nodes
        .replace("n1", &PostParams::default(), &forced)
        .await
        .unwrap();
    assert_eq!(
        same.resource_version(),
        forced.resource_version(),
        "a no-op update writes nothing"
    );

    let store = cluster.emulator.store();
    let stored = store
        .get("nodes", None, "n1")
        .expect("the store sees the node");
    assert_eq!(stored["metadata"]["labels"]["zone"], "b");
    assert_eq!(store.list("namespaces", None).len(), 4);
    assert_eq!(
        store.list("services", Some("default")).len(),
        1,
        "the kubernetes service"
    );
}

#[tokio::test]
async fn the_status_subresource_and_the_main_resource_are_isolated() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let node = create_node(&cluster.client, "n1").await;

    let mut main = node.clone();
    main.status.as_mut().unwrap().addresses = Some(vec![]);
    main.spec.as_mut().unwrap().unschedulable = Some(true);
    let after = nodes
        .replace("n1", &PostParams::default(), &main)
        .await
        .unwrap();
    assert_eq!(after.spec.as_ref().unwrap().unschedulable, Some(true));
    assert_eq!(
        after
            .status
            .as_ref()
            .unwrap()
            .addresses
            .as_ref()
            .unwrap()
            .len(),
        2,
        "main update ignores status"
    );

    let mut status_update = after.clone();
    status_update.spec.as_mut().unwrap().unschedulable = Some(false);
    status_update.status.as_mut().unwrap().addresses = Some(vec![]);
    status_update
        .labels_mut()
        .insert("via".into(), "status".into());
    let after = nodes
        .replace_status("n1", &PostParams::default(), &status_update)
        .await
        .unwrap();
    assert_eq!(
        after.spec.as_ref().unwrap().unschedulable,
        Some(true),
        "status update ignores spec"
    );
    assert_eq!(
        after
            .status
            .as_ref()
            .unwrap()
            .addresses
            .as_ref()
            .map(Vec::len),
        Some(0)
    );
    assert_eq!(
        after.labels()["via"],
        "status",
        "node status updates may change metadata"
    );

    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    let mut svc = harness::load_balancer("web");
    svc.status =
        serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}})).unwrap();
    let created = services.create(&PostParams::default(), &svc).await.unwrap();
    assert_eq!(
        created.status.unwrap().load_balancer.unwrap().ingress,
        None,
        "service status is reset on create"
    );
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.2"));
    assert!(spec.ports.as_ref().unwrap()[0].node_port.is_some());

    let patched = services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"type": "ClusterIP"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.spec.as_ref().unwrap().type_.as_deref(),
        Some("LoadBalancer")
    );
    let ingress = patched
        .status
        .unwrap()
        .load_balancer
        .unwrap()
        .ingress
        .unwrap();
    assert_eq!(
        ingress[0].ip_mode.as_deref(),
        Some("VIP"),
        "ipMode defaults to VIP"
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_the_last_one_goes() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "held", "finalizers": ["example.com/hold", "example.com/other"]},
        "data": {"k": "v"}
    }))
    .unwrap();
    maps.create(&PostParams::default(), &cm).await.unwrap();

    let deleting = maps
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("object, not status");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(0));
    let again = maps
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(
        again.resource_version(),
        deleting.resource_version(),
        "a second delete changes nothing"
    );

    let added = maps
        .patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "example.com/other", "example.com/new"]}})))
        .await
        .unwrap_err();
    let added = status(added);
    assert_eq!(added.code, 422);
    assert!(
        added
            .message
            .contains("no new finalizers can be added if the object is being deleted"),
        "{}",
        added.message
    );
    // Go lists the new ones as a sorted set; swapping one for another is
    // adding one too.
    let swapped = status(
        maps.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [
                "example.com/other", "example.com/zeta", "example.com/alpha", "example.com/zeta"
            ]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        swapped.message,
        r#"ConfigMap "held" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{"example.com/alpha", "example.com/zeta"}"#
    );

    let one_left = maps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(one_left.finalizers(), ["example.com/other"]);
    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "remove", "path": "/metadata/finalizers"}
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    assert!(
        maps.get_opt("held").await.unwrap().is_none(),
        "gone once the last finalizer is removed"
    );

    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "plain"}})).unwrap(),
    )
    .await
    .unwrap();
    let gone = maps
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    let status = gone.right().expect("configmaps answer a Status");
    assert_eq!(status.details.unwrap().name, "plain");

    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    services
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let deleted = services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        deleted.left().is_some(),
        "services answer the deleted object"
    );
}

#[tokio::test]
async fn delete_preconditions_and_dry_runs_are_honoured() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    create_node(&cluster.client, "n1").await;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: Some("1".into()),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let err = status(nodes.delete("n1", &params).await.unwrap_err());
    assert_eq!(err.code, 409);
    assert!(
        err.message
            .contains("Precondition failed: ResourceVersion in precondition: 1"),
        "{}",
        err.message
    );

    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    nodes.create(&dry, &harness::node("n2")).await.unwrap();
    assert!(
        nodes.get_opt("n2").await.unwrap().is_none(),
        "dry runs store nothing"
    );
    nodes
        .delete(
            "n1",
            &DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    assert!(nodes.get_opt("n1").await.unwrap().is_some());
}

#[tokio::test]
async fn namespaces_must_exist_and_terminate_with_their_content() {
    let cluster = start().await;
    let missing = Api::<ConfigMap>::namespaced(cluster.client.clone(), "nope");
    let err = status(
        missing
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "namespaces \"nope\" not found")
    );

    harness::create_namespace(&cluster.client, "team").await;
    let namespaces = Api::<Namespace>::all(cluster.client.clone());
    let ns = namespaces.get("team").await.unwrap();
    assert_eq!(ns.labels()["kubernetes.io/metadata.name"], "team");
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));

    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "team");
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "free"}})).unwrap(),
    )
    .await
    .unwrap();
    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("team").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    assert!(maps.get_opt("free").await.unwrap().is_none());
    let err = status(
        maps.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert!(
        err.message.contains("because it is being terminated"),
        "{}",
        err.message
    );

    maps.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        namespaces.get_opt("team").await.unwrap().is_none(),
        "an empty terminating namespace goes away"
    );
}

#[tokio::test]
async fn lists_paginate_and_read_exact_past_versions() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    for i in 0..5 {
        maps.create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": format!("cm{i}")}, "data": {"v": "1"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    }
    let first = maps.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let at = first.metadata.resource_version.clone().unwrap();
    maps.patch(
        "cm4",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "cm5"}})).unwrap(),
    )
    .await
    .unwrap();
    let mut names: Vec<String> = first.items.iter().map(ResourceExt::name_any).collect();
    let mut token = first.metadata.continue_.clone();
    let mut pages = Vec::new();
    while let Some(next) = token.filter(|t| !t.is_empty()) {
        let page = maps
            .list(&ListParams::default().limit(2).continue_token(&next))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(at.as_str()),
            "pages share one resourceVersion"
        );
        names.extend(page.items.iter().map(ResourceExt::name_any));
        pages.extend(page.items);
        token = page.metadata.continue_;
    }
    assert_eq!(
        names,
        ["cm0", "cm1", "cm2", "cm3", "cm4"],
        "a consistent snapshot"
    );
    let cm4 = pages.iter().find(|c| c.name_any() == "cm4").unwrap();
    assert_eq!(cm4.data.as_ref().unwrap()["v"], "1");

    let exact = maps
        .list(&ListParams::default().at(&at).matching(VersionMatch::Exact))
        .await
        .unwrap();
    assert_eq!(exact.items.len(), 5);
    cluster.emulator.store().compact();
    let err = status(
        maps.list(&ListParams::default().at(&at).matching(VersionMatch::Exact))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
    // kube-rs retries 504s, so ask directly: a future resourceVersion.
    let future = http_client(&cluster.emulator)
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?resourceVersion=999999",
            cluster.emulator.url()
        ))
        .bearer_auth("kube-emulator")
        .send()
        .await
        .unwrap();
    assert_eq!(future.status(), 504);
    let body: serde_json::Value = future.json().await.unwrap();
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
}

#[tokio::test]
async fn unknown_fields_warn_by_default_and_fail_strictly() {
    let cluster = start().await;
    let http = http_client(&cluster.emulator);
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps",
        cluster.emulator.url()
    );
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}, "bogus": 1});
    let response = http
        .post(&url)
        .bearer_auth("kube-emulator")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let warning = response
        .headers()
        .get("warning")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert_eq!(warning, "299 - \"unknown field \\\"bogus\\\"\"");
    let stored: serde_json::Value = response.json().await.unwrap();
    assert!(stored.get("bogus").is_none(), "unknown fields are dropped");

    let strict = http
        .post(format!("{url}?fieldValidation=Strict"))
        .bearer_auth("kube-emulator")
        .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "bogus": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(strict.status(), 400);
    let typed = http
        .post(&url)
        .bearer_auth("kube-emulator")
        .json(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(typed.status(), 400, "type mismatches fail decoding");
    let unauthorized = http.get(&url).send().await.unwrap();
    assert_eq!(unauthorized.status(), 401);
}

#[tokio::test]
async fn lists_from_a_compacted_resource_version_are_410_only_where_etcd_serves_them() {
    let cluster = start().await;
    let url = |query: &str| {
        format!(
            "{}/api/v1/namespaces/default/configmaps?{query}",
            cluster.emulator.url()
        )
    };
    let list = |query: String| {
        let request = http_client(&cluster.emulator)
            .get(url(&query))
            .bearer_auth("kube-emulator");
        async move {
            let response = request.send().await.unwrap();
            let code = response.status().as_u16();
            (code, response.json::<serde_json::Value>().await.unwrap())
        }
    };
    let names = |list: &serde_json::Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    for name in ["cm0", "cm1", "cm2"] {
        maps.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    }
    let (_, first) = list("limit=1".into()).await;
    let at = first["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    maps.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "cm3"}})).unwrap(),
    )
    .await
    .unwrap();

    // A paged list at a resourceVersion without a match reads exactly there
    // (etcd's legacy case); without a limit it is only a lower bound.
    let (code, exact) = list(format!("limit=10&resourceVersion={at}")).await;
    assert_eq!(code, 200);
    assert_eq!(names(&exact), ["cm0", "cm1", "cm2"]);
    let (code, cached) = list(format!("resourceVersion={at}")).await;
    assert_eq!((code, names(&cached).len()), (200, 4));

    cluster.emulator.store().compact();
    let too_old = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "The resourceVersion for the provided list is too old.",
        "reason": "Expired", "code": 410
    });
    for query in [
        format!("limit=10&resourceVersion={at}"),
        format!("resourceVersionMatch=Exact&resourceVersion={at}"),
    ] {
        assert_eq!(list(query.clone()).await, (410, too_old.clone()), "{query}");
    }
    let (code, cached) = list(format!("resourceVersion={at}")).await;
    assert_eq!(
        (code, names(&cached).len()),
        (200, 4),
        "the watch cache serves it"
    );

    // An expired continue token: etcd's 410 offers a token that goes on,
    // inconsistently, from the latest state.
    let (code, expired) = list(format!("limit=10&continue={token}")).await;
    assert_eq!(
        (code, &expired["reason"], &expired["message"]),
        (
            410,
            &json!("Expired"),
            &json!(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
            )
        )
    );
    let offered = expired["metadata"]["continue"].as_str().unwrap();
    let (code, rest) = list(format!("limit=10&continue={offered}")).await;
    assert_eq!(code, 200, "{rest}");
    assert_eq!(
        names(&rest),
        ["cm1", "cm2", "cm3"],
        "cm3 came after the first page"
    );
    assert_eq!(
        rest["metadata"]["resourceVersion"],
        cluster.emulator.store().resource_version().to_string()
    );
}

//! Watches: replay from a resourceVersion, initial events, bookmarks, 410
//! Gone and the kube-runtime watcher's relist, dropped connections,
//! streaming lists and their options, selector transitions and timeouts.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{
    Api, DeleteParams, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use kube_emulator::EmulatorOptions;
use serde_json::{Value, json};

use crate::harness::{Cluster, create_node, get, http_client, start, start_with, within};

const MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// An emulator whose periodic bookmarks never come within a test.
async fn start_without_periodic_bookmarks() -> Cluster {
    start_with(EmulatorOptions {
        bookmark_interval: Duration::from_secs(3600),
        ..EmulatorOptions::default()
    })
    .await
}

/// The whole body of a watch of default's config maps with `query` (answered 200), which
/// must end within `seconds`.
async fn watch_body(cluster: &Cluster, query: &str, seconds: u64) -> String {
    let response = http_client(&cluster.emulator)
        .get(format!(
            "{}{MAPS}?watch=true&{query}",
            cluster.emulator.url()
        ))
        .bearer_auth("kube-emulator")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    within(seconds, response.text()).await.unwrap()
}

/// Every event of a watch of default's config maps with `query`, read until
/// its `timeoutSeconds` ends it: `(type, name)`, and the last bookmark's object.
async fn watch_to_the_end(cluster: &Cluster, query: &str) -> (Vec<(String, String)>, Value) {
    let body = watch_body(cluster, query, 10).await;
    let mut events = Vec::new();
    let mut bookmark = Value::Null;
    for line in body.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let kind = event["type"].as_str().unwrap().to_owned();
        if kind == "BOOKMARK" {
            bookmark = event["object"].clone();
        }
        let name = event["object"]["metadata"]["name"].as_str().unwrap_or("");
        events.push((kind, name.to_owned()));
    }
    (events, bookmark)
}

fn events(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(kind, name)| ((*kind).to_owned(), (*name).to_owned()))
        .collect()
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "web"}}})).unwrap()
}

async fn create_config_map(client: &Client, name: &str) -> ConfigMap {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &config_map(name))
        .await
        .unwrap()
}

/// Next watcher event that is not a bookmark-free `Init`-phase marker.
async fn next_event(
    stream: &mut (
             impl futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin
         ),
) -> watcher::Event<ConfigMap> {
    within(5, stream.try_next())
        .await
        .expect("watcher error")
        .expect("watcher ended")
}

async fn wait_for_apply(
    stream: &mut (
             impl futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Unpin
         ),
    name: &str,
) {
    loop {
        match next_event(stream).await {
            watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) if cm.name_any() == name => {
                return;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_watch_replays_changes_after_its_resource_version_and_sends_bookmarks() {
    let cluster = start().await;
    let nodes = Api::<Node>::all(cluster.client.clone());
    let n1 = create_node(&cluster.client, "n1").await;
    let from = n1.resource_version().unwrap();
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    create_node(&cluster.client, "n2").await;

    let mut stream = nodes
        .watch(&WatchParams::default().timeout(30), &from)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match within(5, stream.try_next()).await.unwrap().unwrap() {
            WatchEvent::Modified(n) => seen.push(format!("MODIFIED {}", n.name_any())),
            WatchEvent::Added(n) => seen.push(format!("ADDED {}", n.name_any())),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["MODIFIED n1", "ADDED n2"]);
    nodes.delete("n2", &DeleteParams::default()).await.unwrap();
    loop {
        match within(5, stream.try_next()).await.unwrap().unwrap() {
            WatchEvent::Deleted(n) => {
                assert_eq!(n.name_any(), "n2");
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    match within(5, stream.try_next()).await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata.resource_version,
                cluster.emulator.store().resource_version().to_string()
            );
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_watch_from_a_listed_resource_version_replays_the_writes_since_at_once() {
    // A real kube-apiserver sends the ADDED / MODIFIED / DELETED events
    // since the requested resourceVersion as soon as the watch starts, not
    // with the next write: here nothing is written after the watch opens
    // and bookmarks are off, so only that replay can arrive.
    let cluster = start_with(EmulatorOptions {
        bookmark_interval: Duration::from_secs(3600),
        ..EmulatorOptions::default()
    })
    .await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    create_config_map(&cluster.client, "kept").await;
    let from = maps
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    create_config_map(&cluster.client, "passing").await;
    maps.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    maps.delete("passing", &DeleteParams::default())
        .await
        .unwrap();

    let mut stream = maps
        .watch(&WatchParams::default().disable_bookmarks(), &from)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(2), stream.try_next())
            .await
            .expect("the writes since the listed resourceVersion arrive at once")
            .unwrap()
            .expect("the watch stays open");
        seen.push(match event {
            WatchEvent::Added(cm) => format!("ADDED {}", cm.name_any()),
            WatchEvent::Modified(cm) => format!("MODIFIED {}", cm.name_any()),
            WatchEvent::Deleted(cm) => format!("DELETED {}", cm.name_any()),
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(seen, ["ADDED passing", "MODIFIED kept", "DELETED passing"]);
}

#[tokio::test]
async fn an_expired_resource_version_is_410_gone_and_the_watcher_relists() {
    let cluster = start_with(EmulatorOptions {
        history: 20,
        ..EmulatorOptions::default()
    })
    .await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let first = create_config_map(&cluster.client, "a").await;
    create_config_map(&cluster.client, "later").await;
    cluster.emulator.store().compact();
    let mut stream = maps
        .watch(&WatchParams::default(), &first.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    match within(5, stream.try_next()).await.unwrap().unwrap() {
        WatchEvent::Error(status) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version"),
                "{}",
                status.message
            );
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    assert!(
        within(5, stream.try_next()).await.unwrap().is_none(),
        "the watch ends after its error"
    );

    let config = watcher::Config::default().disable_bookmarks();
    let mut events = watcher(maps.clone(), config).boxed();
    wait_for_apply(&mut events, "a").await;
    loop {
        if let watcher::Event::InitDone = next_event(&mut events).await {
            break;
        }
    }
    // Move the store past the watcher's resourceVersion without it seeing
    // anything, forget history, and cut the connection: the resumed watch
    // is too old, so the watcher must list again.
    create_node(&cluster.client, "elsewhere").await;
    cluster.emulator.store().compact();
    cluster.emulator.faults().drop_watches();
    create_config_map(&cluster.client, "b").await;
    let mut relisted = false;
    loop {
        match within(5, events.next()).await.expect("watcher ended") {
            Ok(watcher::Event::Init) => relisted = true,
            Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm))
                if cm.name_any() == "b" =>
            {
                break;
            }
            _ => {}
        }
    }
    assert!(relisted, "the watcher relisted after 410");
    assert!(cluster.emulator.requests().get("list", "configmaps") >= 2);
}

#[tokio::test]
async fn a_dropped_watch_resumes_without_a_relist_or_lost_events() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    create_config_map(&cluster.client, "a").await;
    // Consume the watcher in its own task so its watch request is made
    // (a watcher only calls the server while it is polled).
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = tokio::spawn(async move {
        let mut events = watcher(maps, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            if tx.send(event).is_err() {
                return;
            }
        }
    });
    while cluster.emulator.requests().get("watch", "configmaps") == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    cluster.emulator.faults().drop_watches();
    create_config_map(&cluster.client, "b").await;
    loop {
        match within(5, rx.recv()).await.expect("watcher ended") {
            Ok(watcher::Event::Apply(cm)) if cm.name_any() == "b" => break,
            Ok(watcher::Event::Init)
                if cluster.emulator.requests().get("list", "configmaps") > 1 =>
            {
                panic!("no relist needed")
            }
            _ => {}
        }
    }
    consumer.abort();
    let requests = cluster.emulator.requests();
    assert_eq!(requests.get("list", "configmaps"), 1);
    assert_eq!(requests.get("watch", "configmaps"), 2, "{requests:?}");
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    create_config_map(&cluster.client, "a").await;
    create_config_map(&cluster.client, "b").await;
    let mut events = watcher(maps, watcher::Config::default().streaming_lists()).boxed();
    let mut initial = Vec::new();
    loop {
        match next_event(&mut events).await {
            watcher::Event::InitApply(cm) => initial.push(cm.name_any()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(initial, ["a", "b"]);
    create_config_map(&cluster.client, "c").await;
    wait_for_apply(&mut events, "c").await;
    assert_eq!(
        cluster.emulator.requests().get("list", "configmaps"),
        0,
        "no list call at all"
    );
}

#[tokio::test]
async fn leaving_a_selection_is_a_deletion_and_timeouts_end_the_watch() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    create_config_map(&cluster.client, "a").await;
    let params = WatchParams::default().labels("app=web").timeout(1);
    let mut stream = maps.watch(&params, "0").await.unwrap().boxed();
    match within(5, stream.try_next()).await.unwrap().unwrap() {
        WatchEvent::Added(cm) => assert_eq!(cm.name_any(), "a"),
        other => panic!("unexpected {other:?}"),
    }
    maps.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    match within(5, stream.try_next()).await.unwrap().unwrap() {
        WatchEvent::Deleted(cm) => {
            assert_eq!(cm.labels()["app"], "web", "the last state that matched")
        }
        other => panic!("unexpected {other:?}"),
    }
    loop {
        match within(5, stream.try_next())
            .await
            .expect("no transport error")
        {
            None => break,
            Some(WatchEvent::Bookmark(_)) => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn metadata_watchers_get_partial_objects() {
    let cluster = start().await;
    create_config_map(&cluster.client, "a").await;
    let maps = Api::<PartialObjectMeta<ConfigMap>>::namespaced(cluster.client.clone(), "default");
    let mut events = watcher(maps, watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitApply(meta) =
            within(5, events.try_next()).await.unwrap().unwrap()
        {
            assert_eq!(meta.name_any(), "a");
            assert_eq!(
                meta.types.as_ref().map(|t| t.kind.as_str()),
                Some("PartialObjectMetadata")
            );
            return;
        }
    }
}

#[tokio::test]
async fn many_concurrent_watches_each_see_every_write() {
    let cluster = start().await;
    let maps = Api::<ConfigMap>::namespaced(cluster.client.clone(), "default");
    let from = maps
        .list(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut watchers = Vec::new();
    for _ in 0..20 {
        let stream = maps
            .watch(&WatchParams::default().timeout(30), &from)
            .await
            .unwrap()
            .boxed();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream;
            let mut added = 0;
            while added < 100 {
                match within(10, stream.try_next()).await.unwrap().unwrap() {
                    WatchEvent::Added(_) => added += 1,
                    WatchEvent::Bookmark(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
            added
        }));
    }
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let client = cluster.client.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    create_config_map(&client, &format!("w{w}-{i}")).await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    for watcher in watchers {
        assert_eq!(watcher.await.unwrap(), 100);
    }
}

#[tokio::test]
async fn a_watch_from_a_compacted_resource_version_is_one_error_event_not_an_http_410() {
    // The watch cache's `newErrWatcher`: the request succeeds and its one
    // event carries the Status; Y is the newest resourceVersion it lost.
    let cluster = start().await;
    let first = create_config_map(&cluster.client, "a").await;
    create_config_map(&cluster.client, "later").await;
    let compacted = cluster.emulator.store().resource_version();
    cluster.emulator.store().compact();
    let from = first.resource_version().unwrap();
    let body = watch_body(&cluster, &format!("resourceVersion={from}"), 5).await;
    let lines: Vec<Value> = body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines,
        [json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from} ({compacted})"),
            "reason": "Expired", "code": 410
        }})]
    );
}

#[tokio::test]
async fn watches_from_no_resource_version_or_0_start_with_every_object() {
    let cluster = start_without_periodic_bookmarks().await;
    create_config_map(&cluster.client, "a").await;
    create_config_map(&cluster.client, "b").await;
    let initial = events(&[("ADDED", "a"), ("ADDED", "b")]);
    for query in ["timeoutSeconds=1", "resourceVersion=0&timeoutSeconds=1"] {
        let (seen, _) = watch_to_the_end(&cluster, query).await;
        assert_eq!(seen, initial, "{query}");
    }
    // Bookmarks allowed, but no streaming list: no bookmark ends them.
    let (seen, _) = watch_to_the_end(&cluster, "allowWatchBookmarks=true&timeoutSeconds=1").await;
    assert_eq!(seen, initial);
    // An explicit `sendInitialEvents=false` starts from now with nothing.
    let (seen, _) = watch_to_the_end(
        &cluster,
        "sendInitialEvents=false&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    )
    .await;
    assert_eq!(seen, []);
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_an_annotated_bookmark() {
    let cluster = start_without_periodic_bookmarks().await;
    create_config_map(&cluster.client, "a").await;
    create_config_map(&cluster.client, "b").await;
    let now = cluster.emulator.store().resource_version();
    let (seen, bookmark) = watch_to_the_end(
        &cluster,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true\
         &timeoutSeconds=1",
    )
    .await;
    assert_eq!(
        seen,
        events(&[("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", "")])
    );
    assert_eq!(
        bookmark,
        json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {
            "resourceVersion": now.to_string(), "creationTimestamp": null,
            "annotations": {"k8s.io/initial-events-end": "true"}
        }})
    );
    // Upstream does not require bookmarks for a streaming list (that would
    // break older clients): without them the initial events come unended.
    let (seen, _) = watch_to_the_end(
        &cluster,
        "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
    )
    .await;
    assert_eq!(seen, events(&[("ADDED", "a"), ("ADDED", "b")]));
}

#[tokio::test]
async fn bad_watch_and_list_options_are_invalid_list_options() {
    let cluster = start().await;
    let forbidden = |detail: &str| format!("Forbidden: {detail}");
    let cases = [
        (
            "watch=true&sendInitialEvents=true",
            vec![(
                "resourceVersionMatch",
                forbidden(
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ),
            )],
        ),
        (
            "watch=true&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true",
            vec![
                (
                    "resourceVersionMatch",
                    forbidden(
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    ),
                ),
                (
                    "resourceVersionMatch",
                    r#"Unsupported value: "Exact": supported values: "NotOlderThan""#.to_owned(),
                ),
            ],
        ),
        (
            "watch=true&resourceVersionMatch=NotOlderThan",
            vec![(
                "resourceVersionMatch",
                forbidden(
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ),
            )],
        ),
        (
            "sendInitialEvents=true",
            vec![(
                "sendInitialEvents",
                forbidden("sendInitialEvents is forbidden for list"),
            )],
        ),
    ];
    for (query, causes) in cases {
        let answer = get(&cluster, &format!("{MAPS}?{query}")).await;
        assert_eq!(
            (answer.code, &answer.body["reason"]),
            (422, &json!("Invalid")),
            "{query}"
        );
        let rendered: Vec<String> = causes
            .iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect();
        let listed = match rendered.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        assert_eq!(
            answer.body["message"],
            format!("ListOptions.meta.k8s.io \"\" is invalid: {listed}"),
            "{query}"
        );
        let details = &answer.body["details"];
        assert_eq!(
            (&details["group"], &details["kind"], details.get("name")),
            (&json!("meta.k8s.io"), &json!("ListOptions"), None)
        );
        let fields: Vec<&str> = details["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["field"].as_str().unwrap())
            .collect();
        let expected: Vec<&str> = causes.iter().map(|(field, _)| *field).collect();
        assert_eq!(fields, expected, "{query}");
    }
}

#[tokio::test]
async fn a_watch_with_a_timeout_gets_a_last_bookmark_before_it_ends() {
    // With bookmarks a minute apart, upstream's cache watcher still sends
    // one two seconds before `timeoutSeconds` runs out; without
    // `allowWatchBookmarks`, none.
    let cluster = start_without_periodic_bookmarks().await;
    create_config_map(&cluster.client, "a").await;
    let now = cluster.emulator.store().resource_version();
    let from = format!("resourceVersion={now}&timeoutSeconds=3");
    let bookmarked = format!("{from}&allowWatchBookmarks=true");
    let ((with, bookmark), (without, _)) = tokio::join!(
        watch_to_the_end(&cluster, &bookmarked),
        watch_to_the_end(&cluster, &from),
    );
    assert_eq!(with, events(&[("BOOKMARK", "")]));
    assert_eq!(
        bookmark,
        json!({"kind": "ConfigMap", "apiVersion": "v1",
               "metadata": {"resourceVersion": now.to_string(), "creationTimestamp": null}})
    );
    assert_eq!(without, []);
}

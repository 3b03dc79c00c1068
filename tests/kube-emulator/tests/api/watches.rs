//! Watches: replay from a resourceVersion, bookmarks, 410 Gone and the
//! kube-runtime watcher's relist, dropped connections, streaming lists,
//! selector transitions and timeouts.

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
use serde_json::json;

use crate::harness::{create_node, start, start_with, within};

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

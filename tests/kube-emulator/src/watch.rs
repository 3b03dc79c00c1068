//! Watch streams: newline-delimited JSON `WatchEvent`s replayed from the
//! store's history after a resourceVersion (or synthetic `ADDED` events for
//! the current state), `BOOKMARK`s, the `k8s.io/initial-events-end`
//! bookmark of streaming lists, selector transitions (an object leaving
//! the selection is `DELETED`), a 410 `ERROR` event once the history no
//! longer reaches back far enough, `timeoutSeconds` (with a last bookmark
//! two seconds before it), and fault-injected drops.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::kinds;
use crate::meta;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::{ChangeKind, Compacted, State, Store};
use crate::table;
use crate::verbs::Filter;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Synthetic `ADDED` events for the current state, then changes; with
    /// `end_bookmark`, a bookmark marking the end of the initial events.
    Now {
        initial_events: bool,
        end_bookmark: bool,
    },
    /// Changes after this resourceVersion.
    After(u64),
}

/// A parsed watch request.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub rt: Arc<ResourceType>,
    pub namespace: Option<String>,
    pub filter: Filter,
    pub start: Start,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
    pub presentation: Presentation,
}

/// How event objects are presented (the negotiated `Accept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presentation {
    Full,
    /// `PartialObjectMetadata`.
    Metadata,
    /// A one-row `Table` per event, as `kubectl get --watch` asks for.
    Table(table::Format),
}

/// What a watch needs from the server.
#[derive(Debug, Clone)]
pub struct WatchContext {
    pub store: Store,
    pub drops: watch::Receiver<u64>,
    pub shutdown: watch::Receiver<bool>,
    pub bookmark_interval: Duration,
}

/// Events buffered per watch before the watch waits for its client.
const BUFFER: usize = 64;

/// How long before a `timeoutSeconds` deadline the last bookmark comes.
const FAREWELL_BOOKMARK: Duration = Duration::from_secs(2);

/// Starts the watch and returns its response body.
pub fn serve(ctx: WatchContext, req: WatchRequest) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Bytes, io::Error>>(BUFFER);
    tokio::spawn(run(ctx, req, tx));
    Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

/// Converts a stored object for the watch's endpoint and Accept type.
pub fn present(rt: &ResourceType, stored: &Value, presentation: Presentation) -> Value {
    let view = kinds::to_view(rt, stored);
    match presentation {
        Presentation::Full => view,
        Presentation::Metadata => present_metadata(view),
        Presentation::Table(format) => table::object(rt, &view, format),
    }
}

/// An object as `meta.k8s.io/v1` `PartialObjectMetadata`.
pub fn present_metadata(view: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": view.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list as `meta.k8s.io/v1` `PartialObjectMetadataList`.
pub fn present_metadata_list(list: Value) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|items| items.iter().cloned().map(present_metadata).collect())
        .unwrap_or_default();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    })
}

fn line(kind: &str, object: Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn gone(rv: u64, compacted: Compacted) -> Bytes {
    let status = ApiError::Expired(format!(
        "too old resource version: {rv} ({})",
        compacted.through
    ))
    .status();
    line("ERROR", status)
}

fn bookmark(req: &WatchRequest, rv: u64, initial_end: bool) -> Bytes {
    let (kind, api_version) = if req.presentation == Presentation::Metadata {
        (
            "PartialObjectMetadata".to_owned(),
            "meta.k8s.io/v1".to_owned(),
        )
    } else {
        (req.rt.kind.clone(), req.rt.api_version())
    };
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}),
    )
}

/// The events a watch opens with and the resourceVersion it continues
/// after. From a resourceVersion these are the changes since then, sent at
/// once as upstream's watch cache does (not with the next write); from
/// "now", synthetic `ADDED` events for the current objects if asked for,
/// and the bookmark that ends them for a streaming list. `Err` as for
/// [`catch_up`].
fn begin(state: &State, req: &WatchRequest) -> Result<(Vec<Bytes>, u64), Option<Bytes>> {
    match req.start {
        Start::After(rv) => catch_up(state, req, rv),
        Start::Now {
            initial_events,
            end_bookmark,
        } => {
            let rv = state.resource_version();
            let mut events: Vec<Bytes> = if initial_events {
                state
                    .list(&req.rt.storage, req.namespace.as_deref())
                    .into_iter()
                    .filter(|o| req.filter.matches(&req.rt, None, o))
                    .map(|o| line("ADDED", present(&req.rt, &o, req.presentation)))
                    .collect()
            } else {
                Vec::new()
            };
            if end_bookmark {
                events.push(bookmark(req, rv, true));
            }
            Ok((events, rv))
        }
    }
}

/// The events of changes after `cursor`, and the new cursor; `Err` when
/// the watch must end, with its last events if any (history gone past the
/// cursor: a 410 `ERROR`; its resource removed: what happened before).
fn catch_up(
    state: &State,
    req: &WatchRequest,
    cursor: u64,
) -> Result<(Vec<Bytes>, u64), Option<Bytes>> {
    let changes = state
        .changes_after(cursor)
        .map_err(|c| Some(gone(cursor, c)))?;
    let ns = req.namespace.as_deref();
    let mut events = Vec::new();
    for change in changes.iter().filter(|c| c.storage == req.rt.storage) {
        let was = change
            .previous
            .as_ref()
            .is_some_and(|p| req.filter.matches(&req.rt, ns, p));
        let is =
            change.kind != ChangeKind::Deleted && req.filter.matches(&req.rt, ns, &change.object);
        let event = match (was, is) {
            (false, true) => Some(("ADDED", (*change.object).clone())),
            (true, true) => Some(("MODIFIED", (*change.object).clone())),
            (true, false) => {
                let mut last = change.previous.as_deref().cloned().unwrap_or(Value::Null);
                if change.kind == ChangeKind::Deleted {
                    last = (*change.object).clone();
                } else {
                    meta::set(&mut last, "resourceVersion", json!(change.rv.to_string()));
                }
                Some(("DELETED", last))
            }
            (false, false) => None,
        };
        if let Some((kind, object)) = event {
            events.push(line(kind, present(&req.rt, &object, req.presentation)));
        }
    }
    // The CRD is gone: the watch ends, but only after the events that led
    // there (its objects' DELETED events), as upstream delivers them.
    if req.rt.is_custom()
        && state
            .registry
            .find(&req.rt.group, &req.rt.version, &req.rt.plural)
            .is_none()
    {
        return Err((!events.is_empty()).then(|| Bytes::from(events.concat())));
    }
    Ok((events, state.resource_version()))
}

/// The sending end of one watch response. Every send also gives way to a
/// fault-injected drop or a server shutdown, so a client that stopped
/// reading cannot pin the watch.
struct Sink {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    drops: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
}

/// Why a watch ends.
enum End {
    /// The client went away, the server is stopping, or the stream is done.
    Quietly,
    /// A fault cut the connection.
    Dropped,
}

impl Sink {
    async fn send(&mut self, event: Bytes) -> Result<(), End> {
        tokio::select! {
            biased;
            _ = self.drops.changed() => Err(End::Dropped),
            _ = self.shutdown.changed() => Err(End::Quietly),
            sent = self.tx.send(Ok(event)) => sent.map_err(|_| End::Quietly),
        }
    }

    async fn send_all(&mut self, events: Vec<Bytes>) -> Result<(), End> {
        for event in events {
            self.send(event).await?;
        }
        Ok(())
    }

    /// Ends the response: cleanly, or by failing the body so the
    /// connection is cut.
    async fn finish(self, end: End) {
        if let End::Dropped = end {
            let cut = io::Error::new(
                io::ErrorKind::ConnectionReset,
                "watch dropped by fault injection",
            );
            let _ = self.tx.send(Err(cut)).await;
        }
    }
}

async fn run(ctx: WatchContext, req: WatchRequest, tx: mpsc::Sender<Result<Bytes, io::Error>>) {
    let WatchContext {
        store,
        mut drops,
        mut shutdown,
        bookmark_interval,
    } = ctx;
    drops.borrow_and_update();
    shutdown.borrow_and_update();
    let mut sink = Sink {
        tx,
        drops,
        shutdown,
    };
    let end = stream(&store, &req, &mut sink, bookmark_interval).await;
    sink.finish(end).await;
}

/// Sends the watch's events until it ends, and says how it ended.
async fn stream(
    store: &Store,
    req: &WatchRequest,
    sink: &mut Sink,
    bookmark_interval: Duration,
) -> End {
    let mut changes = store.subscribe();
    changes.borrow_and_update();
    let mut cursor = match store.read(|state| begin(state, req)) {
        Ok((initial, cursor)) => {
            if let Err(end) = sink.send_all(initial).await {
                return end;
            }
            cursor
        }
        Err(Some(last)) => return sink.send(last).await.err().unwrap_or(End::Quietly),
        Err(None) => return End::Quietly,
    };
    let deadline = req.timeout.map(|t| Instant::now() + t);
    // Upstream's cache watcher also sends a bookmark two seconds before the
    // deadline, so the client resumes from the newest resourceVersion.
    let mut farewell = deadline
        .and_then(|d| d.checked_sub(FAREWELL_BOOKMARK))
        .filter(|at| req.bookmarks && *at > Instant::now());
    let mut ticker =
        tokio::time::interval_at(Instant::now() + bookmark_interval, bookmark_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        // Biased: a drop or shutdown wins over pending changes, so a dropped
        // watch never delivers events that happened after the drop.
        let bookmark_due = tokio::select! {
            biased;
            _ = sink.drops.changed() => return End::Dropped,
            _ = sink.shutdown.changed() => return End::Quietly,
            () = sink.tx.closed() => return End::Quietly,
            () = sleep_until(deadline) => return End::Quietly,
            changed = changes.changed() => {
                if changed.is_err() {
                    return End::Quietly;
                }
                false
            }
            _ = ticker.tick(), if req.bookmarks => true,
            () = sleep_until(farewell) => {
                farewell = None;
                true
            }
        };
        match store.read(|state| catch_up(state, req, cursor)) {
            Ok((events, next)) => {
                cursor = next;
                if let Err(end) = sink.send_all(events).await {
                    return end;
                }
            }
            Err(last) => {
                if let Some(last) = last {
                    return sink.send(last).await.err().unwrap_or(End::Quietly);
                }
                return End::Quietly;
            }
        }
        if bookmark_due && let Err(end) = sink.send(bookmark(req, cursor, false)).await {
            return end;
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

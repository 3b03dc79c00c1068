//! A shared informer: one watch per resource kind for the whole manager, a cache every
//! controller reads, and add/update/delete notifications with the *old* object too, as
//! client-go's informers give. Upstream's handlers decide on old-versus-new (a service's
//! spec changed, a node's providerID changed), which kube-runtime's `Controller` hides.
//!
//! A relist (after a dropped watch or `410 Gone`) is diffed against the cache, so objects
//! that changed or vanished while the watch was down are reported like any other change.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// One change to a cached object.
#[derive(Debug)]
pub enum Change<K> {
    Added(Arc<K>),
    Updated { old: Arc<K>, new: Arc<K> },
    Deleted(Arc<K>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Added(new) => Change::Added(new.clone()),
            Change::Updated { old, new } => Change::Updated {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted(old) => Change::Deleted(old.clone()),
        }
    }
}

/// A notification: one change, or "changes were missed, look at everything" when a
/// subscriber fell behind.
#[derive(Debug, Clone)]
pub enum Notice<K> {
    Change(Change<K>),
    Resync,
}

/// The cache and change feed of one resource kind.
pub struct Informer<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Receiver<bool>,
    /// Held while a relist is announced, so a new subscriber either sees its changes or
    /// is told to look at everything, never neither.
    announcing: Arc<Mutex<()>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer {
            store: self.store.clone(),
            changes: self.changes.clone(),
            synced: self.synced.clone(),
            announcing: self.announcing.clone(),
        }
    }
}

/// Changes a slow subscriber may fall behind by before it is told to resync.
const BACKLOG: usize = 16_384;

impl<K> Informer<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Start watching `api` until `stop` is cancelled.
    pub fn start(api: kube::Api<K>, stop: CancellationToken) -> Informer<K> {
        let (store, writer) = reflector::store();
        let (changes, _) = broadcast::channel(BACKLOG);
        let (synced_tx, synced) = watch::channel(false);
        let informer = Informer {
            store,
            changes,
            synced,
            announcing: Arc::default(),
        };
        let feed = Feed {
            store: informer.store.clone(),
            writer,
            changes: informer.changes.clone(),
            synced: synced_tx,
            announcing: informer.announcing.clone(),
            relist: None,
        };
        tokio::spawn(async move {
            tokio::select! {
                () = feed.run(api) => {}
                () = stop.cancelled() => {}
            }
        });
        informer
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Informer<K> {
    /// The cache.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// A feed of changes from now on. A subscriber that comes after the first full list
    /// starts with [`Notice::Resync`]; one that comes before sees every object added.
    pub fn subscribe(&self) -> Subscription<K> {
        let _announcing = self.announcing.lock().unwrap_or_else(|p| p.into_inner());
        Subscription {
            receiver: self.changes.subscribe(),
            missed_initial_list: *self.synced.borrow(),
        }
    }

    /// Wait until the first full list is in the cache.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        // The sender lives as long as the watch task; if that ended, there is nothing to wait for.
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// The cached object named `name` (cluster-scoped kinds).
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// The cached object `namespace/name`.
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }
}

/// One subscriber's view of an informer's changes.
pub struct Subscription<K> {
    receiver: broadcast::Receiver<Change<K>>,
    missed_initial_list: bool,
}

impl<K: Clone> Subscription<K> {
    /// The next notice; `None` once the informer stopped.
    pub async fn next(&mut self) -> Option<Notice<K>> {
        if std::mem::take(&mut self.missed_initial_list) {
            return Some(Notice::Resync);
        }
        match self.receiver.recv().await {
            Ok(change) => Some(Notice::Change(change)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "controller fell behind the informer; resyncing");
                Some(Notice::Resync)
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

struct Feed<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    writer: reflector::store::Writer<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Sender<bool>,
    announcing: Arc<Mutex<()>>,
    /// The objects of a relist in progress.
    relist: Option<Vec<Arc<K>>>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    async fn run(mut self, api: kube::Api<K>) {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(event),
                Err(error) => tracing::warn!(
                    kind = %K::kind(&()),
                    %error,
                    "watch failed; retrying with backoff"
                ),
            }
        }
    }

    fn apply(&mut self, event: watcher::Event<K>) {
        match &event {
            watcher::Event::Init => self.relist = Some(Vec::new()),
            watcher::Event::InitApply(object) => {
                if let Some(relist) = self.relist.as_mut() {
                    relist.push(Arc::new(object.clone()));
                }
            }
            watcher::Event::InitDone => {
                let announcing = self.announcing.clone();
                let _announcing = announcing.lock().unwrap_or_else(|p| p.into_inner());
                let before: HashMap<ObjectRef<K>, Arc<K>> = self
                    .store
                    .state()
                    .into_iter()
                    .map(|object| (ObjectRef::from_obj(object.as_ref()), object))
                    .collect();
                self.writer.apply_watcher_event(&event);
                self.announce_relist(before);
                self.synced.send_replace(true);
                return;
            }
            watcher::Event::Apply(object) => {
                let old = self.store.get(&ObjectRef::from_obj(object));
                self.writer.apply_watcher_event(&event);
                let new = Arc::new(object.clone());
                let change = match old {
                    Some(old) => Change::Updated { old, new },
                    None => Change::Added(new),
                };
                let _ = self.changes.send(change);
                return;
            }
            watcher::Event::Delete(object) => {
                self.writer.apply_watcher_event(&event);
                let _ = self.changes.send(Change::Deleted(Arc::new(object.clone())));
                return;
            }
        }
        self.writer.apply_watcher_event(&event);
    }

    /// Report what a relist changed against the cache as it was before.
    fn announce_relist(&mut self, mut before: HashMap<ObjectRef<K>, Arc<K>>) {
        for new in self.relist.take().unwrap_or_default() {
            let change = match before.remove(&ObjectRef::from_obj(&new)) {
                None => Change::Added(new),
                Some(old) => Change::Updated { old, new },
            };
            let _ = self.changes.send(change);
        }
        for (_, gone) in before {
            let _ = self.changes.send(Change::Deleted(gone));
        }
    }
}

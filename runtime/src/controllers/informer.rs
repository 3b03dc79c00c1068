//! A shared informer: one watch per resource kind for the whole manager, a cache every
//! controller reads, and add/update/delete notifications with the *old* object too, as
//! client-go's informers give. Upstream's handlers decide on old-versus-new (a service's
//! spec changed, a node's providerID changed), which kube-runtime's `Controller` hides.
//!
//! A relist (after a dropped watch or `410 Gone`) is diffed against the cache, so objects
//! that changed or vanished while the watch was down are reported like any other change.
//! As with client-go's relist, every listed object already cached comes as an update,
//! changed or not; handlers compare old and new.
//!
//! Each object is held once: the changes a subscriber receives share the cache's copy, and
//! objects are cached without `metadata.managedFields` and whatever else of them the
//! informer's owner says nothing reads (a Node's status but its addresses and conditions:
//! [`crate::controllers::node_cached`]).
//!
//! The cache is also indexed by the addresses its objects hold (a node's IPs and DNS names, a
//! Service's cluster, external and ingress IPs), as client-go's `Indexer`: "what holds this address?" is one
//! lookup, where a pass over 5,000 nodes cost milliseconds (their objects are scattered in
//! memory) for every load-balancer answer checked.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::StreamExt;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use wasm_ccm_host::answers::Address;

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

/// The addresses an object holds, by which the cache indexes it.
pub type AddressesOf<K> = fn(&K) -> Vec<Address>;

/// Drops from an object what nothing reads, before it is cached.
pub type Unread<K> = fn(&mut K);

/// The cache and change feed of one resource kind.
pub struct Informer<K: Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    addresses: Arc<RwLock<AddressIndex<K>>>,
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
            addresses: self.addresses.clone(),
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
    /// Start watching `api` until `stop` is cancelled, caching each object without
    /// `managedFields` and what `unread` drops, and indexing it by the addresses
    /// `addresses_of` finds in it.
    pub fn start(
        api: kube::Api<K>,
        addresses_of: AddressesOf<K>,
        unread: Unread<K>,
        stop: CancellationToken,
    ) -> Informer<K> {
        let (informer, feed) = Informer::unfed(addresses_of);
        tokio::spawn(async move {
            tokio::select! {
                () = feed.run(api, unread) => {}
                () = stop.cancelled() => {}
            }
        });
        informer
    }

    /// An informer and the feed that fills it from watch events.
    fn unfed(addresses_of: AddressesOf<K>) -> (Informer<K>, Feed<K>) {
        let (store, writer) = reflector::store();
        let (changes, _) = broadcast::channel(BACKLOG);
        let (synced_tx, synced) = watch::channel(false);
        let informer = Informer {
            store,
            addresses: Arc::new(RwLock::new(AddressIndex {
                addresses_of,
                holders: HashMap::new(),
            })),
            changes,
            synced,
            announcing: Arc::default(),
        };
        let feed = Feed {
            store: informer.store.clone(),
            addresses: informer.addresses.clone(),
            writer,
            changes: informer.changes.clone(),
            synced: synced_tx,
            announcing: informer.announcing.clone(),
            relist: None,
        };
        (informer, feed)
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

    /// The cached objects that hold `address`.
    pub fn holding(&self, address: &Address) -> Vec<Arc<K>> {
        let index = self
            .addresses
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let holders = index
            .holders
            .get(address)
            .map(Vec::as_slice)
            .unwrap_or_default();
        holders
            .iter()
            .filter_map(|holder| self.store.get(holder))
            .collect()
    }
}

/// The objects of the cache by the addresses they hold.
struct AddressIndex<K: Resource<DynamicType = ()> + 'static> {
    addresses_of: AddressesOf<K>,
    holders: HashMap<Address, Vec<ObjectRef<K>>>,
}

impl<K: Resource<DynamicType = ()> + 'static> AddressIndex<K> {
    /// Move `object` from the addresses `old` held to those `new` holds (either absent).
    fn update(&mut self, old: Option<&K>, new: Option<&K>) {
        let old_addresses = old.map(self.addresses_of).unwrap_or_default();
        let new_addresses = new.map(self.addresses_of).unwrap_or_default();
        if old_addresses == new_addresses {
            return;
        }
        if let Some(old) = old {
            let reference = ObjectRef::from_obj(old);
            for address in old_addresses {
                if let Entry::Occupied(mut holders) = self.holders.entry(address) {
                    holders.get_mut().retain(|holder| *holder != reference);
                    if holders.get().is_empty() {
                        holders.remove();
                    }
                }
            }
        }
        if let Some(new) = new {
            let reference = ObjectRef::from_obj(new);
            for address in new_addresses {
                let holders = self.holders.entry(address).or_default();
                if !holders.contains(&reference) {
                    holders.push(reference.clone());
                }
            }
        }
    }

    /// Index `objects` afresh (after a list).
    fn rebuild(&mut self, objects: &[Arc<K>]) {
        self.holders.clear();
        for object in objects {
            self.update(None, Some(object));
        }
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
    addresses: Arc<RwLock<AddressIndex<K>>>,
    writer: reflector::store::Writer<K>,
    changes: broadcast::Sender<Change<K>>,
    synced: watch::Sender<bool>,
    announcing: Arc<Mutex<()>>,
    /// The objects of a relist in progress, in the order listed.
    relist: Option<Vec<ObjectRef<K>>>,
}

impl<K> Feed<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    async fn run(mut self, api: kube::Api<K>, unread: Unread<K>) {
        // Lists ask for `resourceVersion=0`, as client-go's reflector does: the API server
        // answers from its watch cache in one response, where a list of the latest version
        // is read from etcd in pages of 500 (ten requests for 5,000 nodes). Without a page
        // size: kube-rs leaves `resourceVersion=0` out of a list that has a limit (the
        // cache would ignore the limit anyway).
        let config = watcher::Config {
            page_size: None,
            ..watcher::Config::default()
        }
        .any_semantic();
        // No controller reads `managedFields`; on a real API server they are a good part of
        // every Node (each writer's field set), so the cache does without them.
        let mut events = watcher(api, config)
            .default_backoff()
            .modify(move |object| {
                object.meta_mut().managed_fields = None;
                unread(object);
            })
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
                    relist.push(ObjectRef::from_obj(object));
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
                self.index().rebuild(&self.store.state());
                self.announce_relist(before);
                self.synced.send_replace(true);
                return;
            }
            watcher::Event::Apply(object) => {
                let reference = ObjectRef::from_obj(object);
                let old = self.store.get(&reference);
                self.writer.apply_watcher_event(&event);
                // The cache's own copy: a change holds no second one.
                let Some(new) = self.store.get(&reference) else {
                    return;
                };
                self.index().update(old.as_deref(), Some(&new));
                let change = match old {
                    Some(old) => Change::Updated { old, new },
                    None => Change::Added(new),
                };
                let _ = self.changes.send(change);
                return;
            }
            watcher::Event::Delete(object) => {
                let old = self.store.get(&ObjectRef::from_obj(object));
                self.writer.apply_watcher_event(&event);
                self.index().update(old.as_deref(), None);
                self.index().update(Some(object), None);
                let _ = self.changes.send(Change::Deleted(Arc::new(object.clone())));
                return;
            }
        }
        self.writer.apply_watcher_event(&event);
    }

    fn index(&self) -> std::sync::RwLockWriteGuard<'_, AddressIndex<K>> {
        self.addresses
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Report what a relist changed against the cache as it was before.
    fn announce_relist(&mut self, mut before: HashMap<ObjectRef<K>, Arc<K>>) {
        for reference in self.relist.take().unwrap_or_default() {
            // The cache's own copy, as the relist just stored it.
            let Some(new) = self.store.get(&reference) else {
                continue;
            };
            let change = match before.remove(&reference) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::node_addresses;
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeStatus};
    use kube::api::ObjectMeta;
    use watcher::Event;

    fn node(name: &str, version: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn label(node: &Node) -> String {
        format!(
            "{}@{}",
            node.metadata.name.as_deref().unwrap_or_default(),
            node.metadata
                .resource_version
                .as_deref()
                .unwrap_or_default()
        )
    }

    /// The notices waiting for `subscription`, in order, as short words.
    fn notices(subscription: &mut Subscription<Node>) -> Vec<String> {
        std::iter::from_fn(|| subscription.next().now_or_never().flatten())
            .map(|notice| match notice {
                Notice::Change(Change::Added(new)) => format!("added {}", label(&new)),
                Notice::Change(Change::Updated { old, new }) => {
                    format!("updated {} -> {}", label(&old), label(&new))
                }
                Notice::Change(Change::Deleted(old)) => format!("deleted {}", label(&old)),
                Notice::Resync => "resync".into(),
            })
            .collect()
    }

    fn cached(informer: &Informer<Node>) -> Vec<String> {
        let mut cached: Vec<String> = informer.store().state().iter().map(|n| label(n)).collect();
        cached.sort();
        cached
    }

    fn list(feed: &mut Feed<Node>, nodes: &[Node]) {
        feed.apply(Event::Init);
        for node in nodes {
            feed.apply(Event::InitApply(node.clone()));
        }
        feed.apply(Event::InitDone);
    }

    /// An informer whose first list held `nodes`, and a subscriber that has seen it.
    fn listed(nodes: &[Node]) -> (Informer<Node>, Feed<Node>, Subscription<Node>) {
        let (informer, mut feed) = Informer::unfed(node_addresses);
        let mut subscription = informer.subscribe();
        list(&mut feed, nodes);
        notices(&mut subscription);
        (informer, feed, subscription)
    }

    #[test]
    fn a_subscriber_before_the_first_list_sees_every_object_added_once_synced() {
        let (informer, mut feed) = Informer::<Node>::unfed(node_addresses);
        let mut subscription = informer.subscribe();
        feed.apply(Event::Init);
        feed.apply(Event::InitApply(node("a", "1")));
        feed.apply(Event::InitApply(node("b", "1")));
        assert!(
            notices(&mut subscription).is_empty(),
            "nothing before the list is done"
        );
        assert!(
            informer.wait_synced().now_or_never().is_none(),
            "not synced yet"
        );
        feed.apply(Event::InitDone);
        assert_eq!(notices(&mut subscription), ["added a@1", "added b@1"]);
        assert!(informer.wait_synced().now_or_never().is_some(), "synced");
        assert_eq!(cached(&informer), ["a@1", "b@1"]);
    }

    #[test]
    fn a_relist_that_drops_an_object_reports_it_deleted() {
        let (informer, mut feed, mut subscription) = listed(&[node("a", "1"), node("b", "1")]);
        feed.apply(Event::Init);
        feed.apply(Event::InitApply(node("a", "1")));
        assert_eq!(
            cached(&informer),
            ["a@1", "b@1"],
            "the cache holds until the relist is done"
        );
        feed.apply(Event::InitDone);
        assert_eq!(
            notices(&mut subscription),
            ["updated a@1 -> a@1", "deleted b@1"]
        );
        assert_eq!(cached(&informer), ["a@1"]);
    }

    #[test]
    fn a_relist_that_changes_or_adds_an_object_reports_old_and_new() {
        let (informer, mut feed, mut subscription) = listed(&[node("a", "1")]);
        list(&mut feed, &[node("a", "7"), node("c", "7")]);
        assert_eq!(
            notices(&mut subscription),
            ["updated a@1 -> a@7", "added c@7"]
        );
        assert_eq!(cached(&informer), ["a@7", "c@7"]);
    }

    /// As client-go's relist: every listed object is an update, and handlers compare.
    #[test]
    fn a_relisted_unchanged_object_is_an_update_with_equal_old_and_new() {
        let (_informer, mut feed, mut subscription) = listed(&[node("a", "1")]);
        list(&mut feed, &[node("a", "1")]);
        let Some(Notice::Change(Change::Updated { old, new })) =
            subscription.next().now_or_never().flatten()
        else {
            panic!("an update");
        };
        assert_eq!(old, new);
        assert!(notices(&mut subscription).is_empty());
    }

    #[test]
    fn watch_events_are_reported_with_the_old_object() {
        let (informer, mut feed, mut subscription) = listed(&[node("a", "1")]);
        feed.apply(Event::Apply(node("a", "2")));
        feed.apply(Event::Apply(node("b", "3")));
        feed.apply(Event::Delete(node("a", "4")));
        assert_eq!(
            notices(&mut subscription),
            ["updated a@1 -> a@2", "added b@3", "deleted a@4"]
        );
        assert_eq!(cached(&informer), ["b@3"]);
    }

    #[test]
    fn a_subscriber_after_the_first_list_starts_with_one_resync() {
        let (informer, mut feed, _early) = listed(&[node("a", "1")]);
        let mut late = informer.subscribe();
        feed.apply(Event::Apply(node("a", "2")));
        assert_eq!(notices(&mut late), ["resync", "updated a@1 -> a@2"]);
        list(&mut feed, &[node("a", "2")]);
        assert_eq!(
            notices(&mut late),
            ["updated a@2 -> a@2"],
            "a relist is not another resync"
        );
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_told_to_resync() {
        let (_informer, mut feed, mut subscription) = listed(&[]);
        for version in 0..=BACKLOG {
            feed.apply(Event::Apply(node("a", &version.to_string())));
        }
        let seen = notices(&mut subscription);
        assert_eq!(seen[0], "resync");
        assert_eq!(seen.len(), BACKLOG + 1, "then the changes still held");
        assert_eq!(
            seen.last().map(String::as_str),
            Some(format!("updated a@{} -> a@{BACKLOG}", BACKLOG - 1).as_str())
        );
    }

    fn addressed(name: &str, version: &str, addresses: &[&str]) -> Node {
        let addresses = addresses.iter().map(|address| NodeAddress {
            type_: "InternalIP".into(),
            address: address.to_string(),
        });
        Node {
            status: Some(NodeStatus {
                addresses: Some(addresses.collect()),
                ..Default::default()
            }),
            ..node(name, version)
        }
    }

    fn holder(informer: &Informer<Node>, address: &str) -> Option<String> {
        let address = match address.parse() {
            Ok(ip) => Address::Ip(ip),
            Err(_) => Address::name(address),
        };
        let holders = informer.holding(&address);
        assert!(holders.len() <= 1, "{holders:?}");
        holders.first().map(|node| label(node))
    }

    #[test]
    fn the_cache_is_indexed_by_the_addresses_its_objects_hold() {
        let (informer, mut feed, _subscription) = listed(&[
            addressed("a", "1", &["10.0.0.1", "2001:db8::1"]),
            addressed("b", "1", &["10.0.0.2"]),
        ]);
        assert_eq!(holder(&informer, "10.0.0.1").as_deref(), Some("a@1"));
        assert_eq!(
            holder(&informer, "2001:db8:0::1").as_deref(),
            Some("a@1"),
            "any textual form of the address"
        );
        assert_eq!(holder(&informer, "10.0.0.3"), None);
        assert_eq!(
            holder(&informer, "b").as_deref(),
            Some("b@1"),
            "a node holds its name"
        );

        feed.apply(Event::Apply(addressed("a", "2", &["10.0.0.3"])));
        assert_eq!(holder(&informer, "10.0.0.1"), None, "an address let go");
        assert_eq!(holder(&informer, "2001:db8::1"), None);
        assert_eq!(holder(&informer, "10.0.0.3").as_deref(), Some("a@2"));

        feed.apply(Event::Apply(addressed("c", "3", &["10.0.0.2"])));
        feed.apply(Event::Delete(addressed("b", "4", &[])));
        assert_eq!(
            holder(&informer, "10.0.0.2").as_deref(),
            Some("c@3"),
            "a deleted node lets go of what it held cached, another holder stays"
        );

        list(&mut feed, &[addressed("d", "5", &["10.0.0.9"])]);
        assert_eq!(holder(&informer, "10.0.0.3"), None, "a relist starts over");
        assert_eq!(holder(&informer, "10.0.0.2"), None);
        assert_eq!(holder(&informer, "10.0.0.9").as_deref(), Some("d@5"));
    }
}

//! The object store: every object as JSON, one global resourceVersion
//! counter (like etcd's revision) bumped on every write, and a bounded
//! history of changes that watches replay and that lists at an exact past
//! resourceVersion (and continue tokens) are served from. Anything older
//! than the history is "compacted": asking for it is a 410 Gone.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::kinds::Cluster;
use crate::meta;
use crate::resources::{Registry, StorageKey};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One write, as watches see it.
#[derive(Debug, Clone)]
pub struct Change {
    pub rv: u64,
    pub storage: StorageKey,
    pub kind: ChangeKind,
    /// The object after the write (for a deletion: its last state, carrying
    /// the deletion's resourceVersion).
    pub object: Arc<Value>,
    /// The object before the write (none for an addition).
    pub previous: Option<Arc<Value>>,
}

/// `(storage, namespace, name)`; namespace is empty for cluster-scoped objects.
type Key = (StorageKey, String, String);

/// The asked-for resourceVersion is no longer in the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// The newest resourceVersion that is no longer retained.
    pub through: u64,
}

/// Everything behind the store's lock.
#[derive(Debug)]
pub struct State {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Change>,
    history_limit: usize,
    compacted: u64,
    pub registry: Registry,
    /// `--service-node-port-range`.
    node_ports: std::ops::RangeInclusive<i64>,
}

impl State {
    fn new(history_limit: usize) -> State {
        State {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            registry: Registry::new(),
            node_ports: crate::kinds::DEFAULT_NODE_PORTS,
        }
    }

    /// The current (latest committed) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn get(&self, storage: &str, namespace: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects
            .get(&(Arc::from(storage), namespace.to_owned(), name.to_owned()))
    }

    /// Current objects of a storage key, optionally of one namespace, in
    /// key order (namespace, then name).
    pub fn list(&self, storage: &str, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let key: StorageKey = Arc::from(storage);
        let start = (
            key.clone(),
            namespace.unwrap_or("").to_owned(),
            String::new(),
        );
        self.objects
            .range(start..)
            .take_while(|((s, ns, _), _)| *s == key && namespace.is_none_or(|want| want == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Whether any object lives in this namespace.
    pub fn namespace_in_use(&self, namespace: &str) -> bool {
        self.objects.keys().any(|(_, ns, _)| ns == namespace)
    }

    /// Every object of a namespace, whatever its resource.
    pub fn in_namespace(&self, namespace: &str) -> Vec<(StorageKey, Arc<Value>)> {
        self.objects
            .iter()
            .filter(|((_, ns, _), _)| ns == namespace)
            .map(|((s, _, _), v)| (s.clone(), v.clone()))
            .collect()
    }

    /// Writes `object` (stamping the next resourceVersion), or removes it
    /// for [`ChangeKind::Deleted`], and records the change.
    pub fn commit(
        &mut self,
        storage: &StorageKey,
        kind: ChangeKind,
        mut object: Value,
    ) -> Arc<Value> {
        self.rv += 1;
        meta::set(&mut object, "resourceVersion", json!(self.rv.to_string()));
        let key = (
            storage.clone(),
            meta::namespace(&object).to_owned(),
            meta::name(&object).to_owned(),
        );
        let object = Arc::new(object);
        let previous = match kind {
            ChangeKind::Deleted => self.objects.remove(&key),
            ChangeKind::Added | ChangeKind::Modified => self.objects.insert(key, object.clone()),
        };
        self.history.push_back(Change {
            rv: self.rv,
            storage: storage.clone(),
            kind,
            object: object.clone(),
            previous,
        });
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.rv;
            }
        }
        object
    }

    /// Forgets all history: every resourceVersion before now becomes too old.
    pub fn compact(&mut self) {
        self.history.clear();
        self.compacted = self.rv;
    }

    fn check_retained(&self, rv: u64) -> Result<(), Compacted> {
        if rv < self.compacted {
            Err(Compacted {
                through: self.compacted,
            })
        } else {
            Ok(())
        }
    }

    /// The changes after `rv`, oldest first.
    pub fn changes_after(&self, rv: u64) -> Result<Vec<Change>, Compacted> {
        self.check_retained(rv)?;
        let start = self.history.partition_point(|c| c.rv <= rv);
        Ok(self.history.range(start..).cloned().collect())
    }

    /// The objects of a storage key as they were at `rv`, rebuilt by
    /// undoing newer changes.
    pub fn snapshot(
        &self,
        storage: &str,
        namespace: Option<&str>,
        rv: u64,
    ) -> Result<Vec<Arc<Value>>, Compacted> {
        self.check_retained(rv)?;
        let mut objects: BTreeMap<(String, String), Arc<Value>> = self
            .list(storage, namespace)
            .into_iter()
            .map(|o| {
                (
                    (meta::namespace(&o).to_owned(), meta::name(&o).to_owned()),
                    o,
                )
            })
            .collect();
        for change in self.history.iter().rev().take_while(|c| c.rv > rv) {
            if &*change.storage != storage {
                continue;
            }
            let key = (
                meta::namespace(&change.object).to_owned(),
                meta::name(&change.object).to_owned(),
            );
            if namespace.is_some_and(|ns| ns != key.0) {
                continue;
            }
            match &change.previous {
                Some(previous) => objects.insert(key, previous.clone()),
                None => objects.remove(&key),
            };
        }
        Ok(objects.into_values().collect())
    }
}

impl Cluster for State {
    fn objects(&self, storage: &str) -> Vec<Arc<Value>> {
        self.list(storage, None)
    }

    fn node_ports(&self) -> std::ops::RangeInclusive<i64> {
        self.node_ports.clone()
    }
}

/// A shared handle on the store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
    latest: Arc<watch::Sender<u64>>,
}

impl Store {
    /// Give Services node ports from `range` (`--service-node-port-range`).
    pub(crate) fn set_node_ports(&self, range: std::ops::RangeInclusive<u16>) {
        self.lock().node_ports = i64::from(*range.start())..=i64::from(*range.end());
    }

    pub(crate) fn new(history_limit: usize) -> Store {
        let (latest, _) = watch::channel(0);
        Store {
            state: Arc::new(Mutex::new(State::new(history_limit))),
            latest: Arc::new(latest),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as consistent
        // as it was between two statements; keep serving.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` under the lock and wakes watches if it wrote anything.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let (out, rv) = {
            let mut state = self.lock();
            let out = f(&mut state);
            (out, state.rv)
        };
        self.latest.send_if_modified(|latest| {
            let changed = *latest != rv;
            *latest = rv;
            changed
        });
        out
    }

    /// Runs `f` under the lock, for reading.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.lock())
    }

    /// Wakes when the store's resourceVersion moves.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.read(State::resource_version)
    }

    /// A stored object as stored (core/v1 form for events), by resource
    /// (`nodes`, `leases.coordination.k8s.io`, `widgets.example.com`),
    /// namespace (`None` for cluster-scoped) and name.
    pub fn get(&self, resource: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let storage = storage_key(resource);
        self.read(|s| {
            s.get(&storage, namespace.unwrap_or(""), name)
                .map(|o| (**o).clone())
        })
    }

    /// All stored objects of a resource (see [`Store::get`]).
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        let storage = storage_key(resource);
        self.read(|s| {
            s.list(&storage, namespace)
                .iter()
                .map(|o| (**o).clone())
                .collect()
        })
    }

    /// Drops the change history, so every earlier resourceVersion is
    /// "too old" for watches and exact lists (as after an etcd compaction).
    pub fn compact(&self) {
        self.write(State::compact);
    }
}

/// `nodes` → `/nodes`; `leases.coordination.k8s.io` → `coordination.k8s.io/leases`.
fn storage_key(resource: &str) -> String {
    match resource.split_once('.') {
        Some((plural, group)) => format!("{group}/{plural}"),
        None => format!("/{resource}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, v: i64) -> Value {
        json!({"metadata": {"name": name}, "v": v})
    }

    #[test]
    fn snapshots_undo_newer_changes() {
        let mut state = State::new(10);
        let key: StorageKey = Arc::from("/nodes");
        state.commit(&key, ChangeKind::Added, obj("a", 1));
        let at = state.resource_version();
        state.commit(&key, ChangeKind::Modified, obj("a", 2));
        state.commit(&key, ChangeKind::Added, obj("b", 1));
        let snap = state.snapshot("/nodes", None, at).unwrap();
        assert_eq!(snap.len(), 1);
        assert_eq!(snap[0]["v"], 1);
        assert_eq!(state.list("/nodes", None).len(), 2);
        let deleted = state.get("/nodes", "", "b").unwrap().as_ref().clone();
        state.commit(&key, ChangeKind::Deleted, deleted);
        assert_eq!(state.snapshot("/nodes", None, at + 2).unwrap().len(), 2);
    }

    #[test]
    fn history_is_bounded() {
        let mut state = State::new(2);
        let key: StorageKey = Arc::from("/nodes");
        for v in 0..5 {
            state.commit(&key, ChangeKind::Added, obj(&format!("n{v}"), v));
        }
        assert!(matches!(
            state.changes_after(1),
            Err(Compacted { through: 3 })
        ));
        assert_eq!(state.changes_after(3).unwrap().len(), 2);
        assert!(state.snapshot("/nodes", None, 2).is_err());
    }

    #[test]
    fn resources_name_their_storage() {
        assert_eq!(storage_key("nodes"), "/nodes");
        assert_eq!(
            storage_key("leases.coordination.k8s.io"),
            "coordination.k8s.io/leases"
        );
    }
}

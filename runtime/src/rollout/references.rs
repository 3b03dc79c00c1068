//! The Secrets and ConfigMaps a `CloudProvider` names (its cloud config, its credentials),
//! each watched by name while the spec names it, in the manager's namespace unless the
//! reference gives one.
//!
//! Credential values are handed to the egress gate as [`SharedSecret`]s that the watch
//! updates, so a rotated Secret applies to the next request without touching the provider;
//! a change to any watched object also wakes the rollout (a cloud config in a ConfigMap
//! re-`init`s the provider). Values never leave this module except into those handles and
//! the cloud config bytes: no log line, event or status names more than the object and key.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use tokio::sync::watch;

use crate::resource::KeyRef;
use wasm_ccm_host::egress::SharedSecret;

/// A Secret or a ConfigMap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `v1` Secret.
    Secret,
    /// `v1` ConfigMap.
    ConfigMap,
}

/// One watched object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Secret or ConfigMap.
    pub kind: Kind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// What the watch knows of an object.
#[derive(Debug, Clone, Default)]
enum Seen {
    /// Not listed yet.
    #[default]
    Unread,
    /// It does not exist.
    Missing,
    /// It cannot be read, and why (e.g. RBAC forbids it); until a read succeeds.
    Unreadable(String),
    /// Its data, by key.
    Present(BTreeMap<String, Vec<u8>>),
}

struct Watched {
    seen: Arc<RwLock<Seen>>,
    /// Handles given to the egress gate, by key.
    secrets: HashMap<String, SharedSecret>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watched objects.
pub struct References {
    client: kube::Client,
    namespace: String,
    objects: Mutex<HashMap<ObjectKey, Watched>>,
    changed: watch::Sender<u64>,
}

impl References {
    /// Nothing watched yet; references without a namespace name `namespace`.
    pub fn new(client: kube::Client, namespace: String) -> Arc<References> {
        Arc::new(References {
            client,
            namespace,
            objects: Mutex::default(),
            changed: watch::Sender::new(0),
        })
    }

    /// Changes whenever a watched object does.
    pub fn changed(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The object `reference` names.
    pub fn key(&self, kind: Kind, reference: &KeyRef) -> ObjectKey {
        ObjectKey {
            kind,
            namespace: reference
                .namespace
                .clone()
                .unwrap_or_else(|| self.namespace.clone()),
            name: reference.name.clone(),
        }
    }

    /// Watch exactly `wanted`: start watches for new objects, stop the others.
    pub fn watch(self: &Arc<Self>, wanted: &[ObjectKey]) {
        let mut objects = self.objects();
        objects.retain(|key, _| wanted.contains(key));
        for key in wanted {
            if !objects.contains_key(key) {
                let seen = Arc::new(RwLock::new(Seen::Unread));
                let task = tokio::spawn(self.clone().follow(key.clone(), seen.clone()));
                objects.insert(
                    key.clone(),
                    Watched {
                        seen,
                        secrets: HashMap::new(),
                        task,
                    },
                );
            }
        }
    }

    /// Whether every watched object has been listed once.
    pub fn all_read(&self) -> bool {
        self.objects()
            .values()
            .all(|watched| !matches!(*read(&watched.seen), Seen::Unread))
    }

    /// The value of a ConfigMap key (`data`, or `binaryData`).
    pub fn config_map_key(&self, reference: &KeyRef) -> Result<Vec<u8>, String> {
        self.value(&self.key(Kind::ConfigMap, reference), &reference.key)
    }

    /// The value of a Secret key.
    pub fn secret_key(&self, reference: &KeyRef) -> Result<Vec<u8>, String> {
        self.value(&self.key(Kind::Secret, reference), &reference.key)
    }

    /// A live handle on a Secret key's value, for the egress gate.
    pub fn shared_secret(&self, reference: &KeyRef) -> SharedSecret {
        let key = self.key(Kind::Secret, reference);
        let mut objects = self.objects();
        let Some(watched) = objects.get_mut(&key) else {
            // Not watched (cannot happen: the spec's references are watched before it is
            // parsed); a handle that explains itself.
            return SharedSecret::new(
                format!("{key} key {}", reference.key),
                format!("{key} is not watched"),
            );
        };
        let seen = read(&watched.seen).clone();
        watched
            .secrets
            .entry(reference.key.clone())
            .or_insert_with(|| {
                let secret =
                    SharedSecret::new(format!("{key} key {}", reference.key), String::new());
                secret.set(secret_value(&key, &reference.key, &seen));
                secret
            })
            .clone()
    }

    /// What is wrong with each credential Secret key the spec names, e.g. `Secret
    /// kube-system/simcloud has no key token`.
    pub fn credential_problems(&self) -> Vec<String> {
        let objects = self.objects();
        let mut problems: Vec<String> = objects
            .iter()
            .flat_map(|(key, watched)| {
                let seen = read(&watched.seen).clone();
                watched
                    .secrets
                    .keys()
                    .filter_map(move |name| secret_value(key, name, &seen).err())
                    .collect::<Vec<_>>()
            })
            .collect();
        problems.sort();
        problems
    }

    fn value(&self, key: &ObjectKey, data_key: &str) -> Result<Vec<u8>, String> {
        let objects = self.objects();
        let Some(watched) = objects.get(key) else {
            return Err(format!("{key} is not watched"));
        };
        let seen = read(&watched.seen);
        match &*seen {
            Seen::Unread => Err(format!("{key} has not been read yet")),
            Seen::Missing => Err(format!("{key} not found")),
            Seen::Unreadable(why) => Err(why.clone()),
            Seen::Present(data) => data
                .get(data_key)
                .cloned()
                .ok_or_else(|| format!("{key} has no key {data_key}")),
        }
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, Watched>> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follow one object until its watch is stopped.
    async fn follow(self: Arc<Self>, key: ObjectKey, seen: Arc<RwLock<Seen>>) {
        let client = self.client.clone();
        let mut changes = match key.kind {
            Kind::Secret => {
                let api: Api<Secret> = Api::namespaced(client, &key.namespace);
                watch_object(api, &key.name)
                    .default_backoff()
                    .map(|change| change.map(|secret| secret.map(secret_data)))
                    .boxed()
            }
            Kind::ConfigMap => {
                let api: Api<ConfigMap> = Api::namespaced(client, &key.namespace);
                watch_object(api, &key.name)
                    .default_backoff()
                    .map(|change| change.map(|map| map.map(config_map_data)))
                    .boxed()
            }
        };
        while let Some(change) = changes.next().await {
            let now = match change {
                Ok(Some(data)) => Seen::Present(data),
                Ok(None) => Seen::Missing,
                Err(error) => {
                    tracing::warn!(object = %key, %error, "watching a CloudProvider reference failed; retrying");
                    // What was read stays; what never was is reported, not waited for.
                    if !matches!(*read(&seen), Seen::Unread | Seen::Unreadable(_)) {
                        continue;
                    }
                    Seen::Unreadable(unreadable(&key, &error))
                }
            };
            *seen.write().unwrap_or_else(|p| p.into_inner()) = now.clone();
            if let Some(watched) = self.objects().get(&key) {
                for (name, secret) in &watched.secrets {
                    secret.set(secret_value(&key, name, &now));
                }
            }
            self.changed.send_modify(|count| *count += 1);
        }
    }
}

fn read(seen: &RwLock<Seen>) -> std::sync::RwLockReadGuard<'_, Seen> {
    seen.read().unwrap_or_else(|p| p.into_inner())
}

fn secret_value(key: &ObjectKey, data_key: &str, seen: &Seen) -> Result<String, String> {
    match seen {
        Seen::Unread => Err(format!("{key} has not been read yet")),
        Seen::Missing => Err(format!("{key} not found")),
        Seen::Unreadable(why) => Err(why.clone()),
        Seen::Present(data) => {
            let bytes = data
                .get(data_key)
                .ok_or_else(|| format!("{key} has no key {data_key}"))?;
            String::from_utf8(bytes.clone())
                .map_err(|_| format!("{key} key {data_key} is not UTF-8 text"))
        }
    }
}

/// Why `key` cannot be read, saying what to grant when the API server forbids it.
fn unreadable(key: &ObjectKey, error: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    let status = match error {
        Error::InitialListFailed(kube::Error::Api(status))
        | Error::WatchStartFailed(kube::Error::Api(status))
        | Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        Error::WatchError(status) => Some(status.code),
        _ => None,
    };
    match status {
        Some(403) => format!(
            "{key} cannot be read: the manager's account may not list and watch it by name \
             (the Helm chart grants exactly the Secrets and ConfigMaps its values name)"
        ),
        _ => format!("{key} cannot be read: {error}"),
    }
}

fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.0))
        .collect();
    for (key, value) in secret.string_data.unwrap_or_default() {
        data.insert(key, value.into_bytes());
    }
    data
}

fn config_map_data(map: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = map
        .binary_data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.0))
        .collect();
    for (key, value) in map.data.unwrap_or_default() {
        data.insert(key, value.into_bytes());
    }
    data
}

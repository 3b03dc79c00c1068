//! Upstream's CRD finalizer controller (`apiextensions-apiserver`'s
//! `controller/finalizer`), running beside the API as on a real cluster, so
//! deleting a CRD is asynchronous. The DELETE only marks the CRD (a
//! `deletionTimestamp`, the `customresourcecleanup.apiextensions.k8s.io`
//! finalizer, `Terminating` with reason `InstanceDeletionPending`, creates
//! of its resources refused with a 405). Then this controller, through the
//! same verbs a client uses:
//!
//! 1. sets `Terminating` to `InstanceDeletionInProgress`;
//! 2. deletes every custom resource of the CRD (watchers get their
//!    `DELETED` events; one with finalizers of its own is only marked);
//! 3. once none is left, sets `Terminating` to `False` /
//!    `InstanceDeletionCompleted` (or `NeverEstablished` for a CRD that was
//!    never served) and removes its finalizer, and the CRD disappears.
//!
//! It acts on every store change rather than polling every second for a
//! minute as upstream does, so a CRD held by a custom resource's finalizer
//! waits as long as that finalizer stays, and never shows
//! `InstanceDeletionCheck`.

use serde_json::Value;
use tokio::sync::watch;

use crate::kinds::{self, Subresource};
use crate::meta;
use crate::resources::Rules;
use crate::store::{State, Store};
use crate::verbs::{self, DeleteOptions, Target, WriteOptions};

const CRD_STORAGE: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// Runs until `shutdown` turns true: after every write, finalizes the
/// CRDs being deleted.
pub async fn run(store: Store, mut shutdown: watch::Receiver<bool>) {
    let mut changes = store.subscribe();
    loop {
        changes.borrow_and_update();
        if store.read(|state| !terminating(state).is_empty()) {
            store.write(sync);
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// The CRDs being deleted that still carry the cleanup finalizer.
fn terminating(state: &State) -> Vec<String> {
    state
        .list(CRD_STORAGE, None)
        .iter()
        .filter(|crd| {
            meta::is_deleting(crd)
                && meta::finalizers(crd)
                    .iter()
                    .any(|f| f == kinds::CRD_CLEANUP_FINALIZER)
        })
        .map(|crd| meta::name(crd).to_owned())
        .collect()
}

fn sync(state: &mut State) {
    for name in terminating(state) {
        finalize(state, &name);
    }
}

/// One pass of upstream's `CRDFinalizer.sync` for one CRD.
fn finalize(state: &mut State, name: &str) {
    let Some(mut crd) = state.get(CRD_STORAGE, "", name).map(|c| (**c).clone()) else {
        return;
    };
    kinds::set_crd_condition(
        &mut crd,
        "Terminating",
        true,
        "InstanceDeletionInProgress",
        "CustomResource deletion is in progress",
    );
    let Some(mut crd) = update_status(state, name, crd) else {
        return;
    };
    let (reason, message) = if kinds::crd_condition_is_true(&crd, "Established") {
        if !delete_instances(state, name, &crd) {
            return;
        }
        ("InstanceDeletionCompleted", "removed all instances")
    } else {
        ("NeverEstablished", "resource was never established")
    };
    kinds::set_crd_condition(&mut crd, "Terminating", false, reason, message);
    let finalizers: Vec<String> = meta::finalizers(&crd)
        .into_iter()
        .filter(|f| f != kinds::CRD_CLEANUP_FINALIZER)
        .collect();
    meta::set(&mut crd, "finalizers", Value::from(finalizers));
    update_status(state, name, crd);
}

/// Deletes the CRD's custom resources; true once none is left.
fn delete_instances(state: &mut State, name: &str, crd: &Value) -> bool {
    let rt = state.registry.custom(name).first().cloned();
    let storage = rt.as_ref().map_or_else(
        || {
            format!(
                "{}/{}",
                kinds::str_at(crd, "/spec/group"),
                kinds::str_at(crd, "/spec/names/plural")
            )
        },
        |rt| rt.storage.to_string(),
    );
    if let Some(rt) = rt {
        for obj in state.list(&storage, None) {
            if meta::is_deleting(&obj) {
                continue;
            }
            let target = Target {
                rt: rt.clone(),
                namespace: meta::namespace(&obj).to_owned(),
                name: meta::name(&obj).to_owned(),
                sub: Subresource::Main,
            };
            if let Err(err) = verbs::delete(state, &target, &DeleteOptions::default()) {
                tracing::warn!(crd = name, object = target.name, %err, "deleting a custom resource failed");
            }
        }
    }
    state.list(&storage, None).is_empty()
}

/// `UpdateStatus` of the CRD; returns it as stored after the write (none
/// once it is gone).
fn update_status(state: &mut State, name: &str, crd: Value) -> Option<Value> {
    let rt = state.registry.builtin(Rules::CustomResourceDefinition)?;
    let target = Target {
        rt,
        namespace: String::new(),
        name: name.to_owned(),
        sub: Subresource::Status,
    };
    if let Err(err) = verbs::replace(state, &target, crd, &WriteOptions::default()) {
        tracing::warn!(crd = name, %err, "updating a terminating CRD failed");
    }
    state.get(CRD_STORAGE, "", name).map(|c| (**c).clone())
}

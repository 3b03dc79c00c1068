//! The slot every controller calls through: it holds the active provider version and
//! swaps it atomically.
//!
//! A sync takes the version active when it starts ([`ProviderSlot::current`]) and makes all
//! its calls on it, so calls already running finish on the old version while new ones go to
//! the new; controllers, informers, caches and queues never notice a swap. A swap to another
//! version (or the same one re-initialised) is announced on [`ProviderSlot::activations`],
//! so controllers can resync what the new version should see; a reconfiguration of the same
//! version (new egress grants or credentials) is not.
//!
//! Every version the slot serves checks its answers with the slot's [`AnswerChecks`] (the
//! manager's ranges and the cluster's addresses), whoever loaded it.

use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use super::Provider;
use crate::answers::AnswerChecks;

/// The active provider version; cheap to clone, every clone sees the same version.
#[derive(Clone)]
pub struct ProviderSlot {
    inner: Arc<Inner>,
}

struct Inner {
    active: RwLock<Arc<Provider>>,
    /// What every version's answers are checked against.
    checks: Arc<AnswerChecks>,
    /// How many versions have been activated after the first.
    activations: watch::Sender<u64>,
}

impl ProviderSlot {
    /// A slot serving `provider`, its answers and those of every version it serves later
    /// checked by `checks`.
    pub fn new(provider: Provider, checks: Arc<AnswerChecks>) -> ProviderSlot {
        ProviderSlot {
            inner: Arc::new(Inner {
                active: RwLock::new(Arc::new(provider.with_checks(checks.clone()))),
                checks,
                activations: watch::Sender::new(0),
            }),
        }
    }

    /// The version serving calls now; a sync holds it for all its calls.
    pub fn current(&self) -> Arc<Provider> {
        self.inner
            .active
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Make `provider` the active version and announce it; returns the version it replaces
    /// (still finishing the calls it started).
    pub fn activate(&self, provider: Provider) -> Arc<Provider> {
        let previous = self.replace(Arc::new(provider));
        self.inner.activations.send_modify(|count| *count += 1);
        previous
    }

    /// Reactivate a version kept warm (a rollback), announced as [`ProviderSlot::activate`].
    pub fn reactivate(&self, provider: Arc<Provider>) -> Arc<Provider> {
        let previous = self.replace(provider);
        self.inner.activations.send_modify(|count| *count += 1);
        previous
    }

    /// Replace the active version by the same version reconfigured (e.g.
    /// [`Provider::with_egress`]), without announcing an activation.
    pub fn reconfigure(&self, provider: Provider) {
        self.replace(Arc::new(provider));
    }

    /// Changes each time another version is activated, for controllers that resync after
    /// a swap.
    pub fn activations(&self) -> watch::Receiver<u64> {
        self.inner.activations.subscribe()
    }

    fn replace(&self, provider: Arc<Provider>) -> Arc<Provider> {
        let provider = Arc::new(provider.with_checks(self.inner.checks.clone()));
        let mut active = self
            .inner
            .active
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::replace(&mut *active, provider)
    }
}

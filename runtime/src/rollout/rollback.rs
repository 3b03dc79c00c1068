//! Automatic rollback: the rollback window after an activation (the previous version kept
//! loaded, failure rates compared every tick), the rollback itself, and how a generation that
//! was rolled back stays so: not rolled out again, followed by standbys, and restored by a
//! manager started afterwards.

use std::time::Instant;

use wasm_ccm_host::provider::CallCounts;
use wasm_ccm_host::source::ProviderRef;

use super::status::{self, set_condition};
use super::{Active, Rollout, spec, version_status};
use crate::resource::{CloudProviderStatus, ConditionStatus, VersionCalls, condition};

/// The rollback window after an activation: the previous version, kept loaded.
pub(super) struct RollbackWindow {
    pub(super) previous: Active,
    pub(super) until: Instant,
    pub(super) policy: spec::RollbackPolicy,
}

impl Rollout {
    /// The version this generation was rolled back to, as the stored status says.
    pub(super) fn rolled_back_to(&self, generation: Option<i64>) -> Option<(ProviderRef, String)> {
        let stored = self.object.as_ref()?.status.as_ref()?;
        let rolled_back = status::condition(stored, condition::ROLLED_BACK)?;
        if rolled_back.status != ConditionStatus::True
            || rolled_back.observed_generation != generation
        {
            return None;
        }
        let active = stored.active.as_ref()?;
        Some((active.reference.parse().ok()?, active.digest.clone()))
    }

    /// Whether this generation's version was rolled back (by this replica or, as status
    /// says, by the leader): it is not activated again until the spec changes.
    pub(super) fn rolled_back(&self, generation: Option<i64>) -> bool {
        let stored = self
            .object
            .as_ref()
            .and_then(|object| object.status.as_ref());
        let says = |status: &CloudProviderStatus| {
            status::condition(status, condition::ROLLED_BACK).is_some_and(|rolled_back| {
                rolled_back.status == ConditionStatus::True
                    && rolled_back.observed_generation == generation
            })
        };
        (says(&self.status) || stored.is_some_and(says)) && self.active.is_some()
    }

    /// As a standby: when the leader rolled this generation back (the stored status says
    /// so), do the same with the version kept warm, so a failover never brings the
    /// rolled-back version back. Whether the rollback is followed (nothing else to do).
    pub(super) fn follow_rollback(&mut self, generation: Option<i64>) -> bool {
        let Some(stored) = self
            .object
            .as_ref()
            .and_then(|object| object.status.clone())
        else {
            return false;
        };
        let rolled_back = status::condition(&stored, condition::ROLLED_BACK).is_some_and(|c| {
            c.status == ConditionStatus::True && c.observed_generation == generation
        });
        let Some(target) = stored.active.as_ref().map(|active| active.digest.clone()) else {
            return false;
        };
        if !rolled_back || self.active.is_none() {
            return false;
        }
        let active_digest = self
            .active
            .as_ref()
            .map(|active| active.provider.identity().digest.clone());
        if active_digest.as_deref() == Some(target.as_str()) {
            return true;
        }
        let warm = self
            .window
            .as_ref()
            .is_some_and(|window| window.previous.provider.identity().digest == target);
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return false;
        };
        if !warm {
            return false;
        }
        let window = self.window.take().expect("checked above");
        slot.reactivate(window.previous.provider.clone());
        if let Some(rolled_back) = self.active.replace(window.previous) {
            tracing::warn!(resource = %self.settings.resource, provider = %rolled_back.provider.label(), "the leader rolled this version back; following");
            self.unloaded(&rolled_back.provider);
        }
        self.status = stored;
        true
    }

    /// During the rollback window: compare failure rates, and roll back when the new
    /// version fails too much more than the previous one.
    pub(super) fn judge_window(&mut self) {
        let (Some(window), Some(active)) = (&self.window, &self.active) else {
            return;
        };
        let new = active
            .provider
            .call_counts()
            .since(active.counts_at_activation);
        // The previous version's calls since its activation, including the ones it was
        // still finishing at the swap.
        let old = window
            .previous
            .provider
            .call_counts()
            .since(window.previous.counts_at_activation);
        self.status.version_calls = vec![
            VersionCalls {
                digest: active.provider.identity().digest.clone(),
                calls: new.calls as i64,
                failures: new.failures as i64,
            },
            VersionCalls {
                digest: window.previous.provider.identity().digest.clone(),
                calls: old.calls as i64,
                failures: old.failures as i64,
            },
        ];
        self.status
            .version_calls
            .dedup_by(|a, b| a.digest == b.digest);
        let excess = (new.failure_rate() - old.failure_rate()) * 100.0;
        if new.calls >= window.policy.minimum_calls && excess > window.policy.threshold {
            self.roll_back(new, old);
            return;
        }
        if Instant::now() >= window.until {
            let window = self.window.take().expect("checked");
            tracing::info!(provider = %active.provider.label(), "rollback window over: {} calls, {} failed; {} unloaded", new.calls, new.failures, window.previous.provider.label());
            self.unloaded(&window.previous.provider);
            self.status.version_calls.clear();
            self.status.previous = None;
        }
    }

    pub(super) fn roll_back(&mut self, new: CallCounts, old: CallCounts) {
        let window = self.window.take().expect("checked by the caller");
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let generation = self.generation();
        let rolled_back = self.active.take().expect("checked by the caller");
        slot.reactivate(window.previous.provider.clone());
        let message = format!(
            "{} failed {} of {} calls ({:.1}%) after activation, {:.1} points above {} ({} of {} calls, {:.1}%), over the threshold of {} points; {} reactivated. Change the spec to roll out again",
            rolled_back.provider.label(),
            new.failures,
            new.calls,
            new.failure_rate() * 100.0,
            (new.failure_rate() - old.failure_rate()) * 100.0,
            window.previous.provider.label(),
            old.failures,
            old.calls,
            old.failure_rate() * 100.0,
            window.policy.threshold,
            window.previous.provider.label(),
        );
        tracing::error!(resource = %self.settings.resource, "rolled back: {message}");
        let now = status::now();
        self.status.active = Some(version_status(&window.previous, None));
        self.status.previous = Some(version_status(&rolled_back, Some(now)));
        set_condition(
            &mut self.status,
            condition::ROLLED_BACK,
            ConditionStatus::True,
            "FailureRate",
            message.clone(),
            generation,
        );
        set_condition(
            &mut self.status,
            condition::READY,
            ConditionStatus::True,
            "Active",
            format!("{} is serving calls", window.previous.provider.label()),
            generation,
        );
        self.warn("RolledBack", &rolled_back.provider.label(), message);
        self.unloaded(&rolled_back.provider);
        self.active = Some(window.previous);
    }
}

//! Automatic rollback: the rollback window after an activation (the previous version kept
//! loaded, failure rates compared every tick), the rollback itself, and how a generation that
//! was rolled back stays so: not rolled out again, followed by standbys, and restored by a
//! manager started afterwards.
//!
//! Across restarts, only the [`RollbackRecord`] counts, never the status: a manager
//! starting runs the spec's version, unless the record says this generation was rolled
//! back, and then the recorded previous version (by digest); inside a recorded window it
//! loads the previous version again, warm, and keeps judging the spec's. The rules (when to
//! roll back, how long a restored window lasts) are [`machine`]'s; this module does them.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::provider::{CallCounts, Compiled, Provider};

use super::activation::version_status;
use super::machine::{self, RollbackWindow, WindowVerdict};
use super::record::RollbackRecord;
use super::spec::Desired;
use super::status::{self, set_condition};
use super::{Active, Rollout, spec};
use crate::resource::{ConditionStatus, VersionCalls, condition};

impl Rollout {
    /// Whether this generation's version was rolled back (by this replica or, as the record
    /// says, by the leader): it is not activated again until the spec changes.
    pub(super) fn rolled_back(&self, generation: Option<i64>) -> bool {
        self.phase.active().is_some()
            && self
                .record
                .as_ref()
                .is_some_and(|record| record.rolled_back_at(generation))
    }

    /// As a standby, when the leader rolled this generation back (its record says so): do
    /// the same with the version kept warm, so a failover never brings the rolled-back
    /// version back.
    pub(super) fn follow_rollback(&mut self) {
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let Some((rolled_back, _)) = self.phase.roll_back() else {
            return;
        };
        if let Some(active) = self.phase.active() {
            slot.reactivate(active.provider.clone());
        }
        tracing::warn!(resource = %self.settings.resource, provider = %rolled_back.provider.label(), "the leader rolled this version back; following");
        self.unloaded(&rolled_back.provider);
        self.take_stored_status();
    }

    /// As a standby, report what the leader reported (should it take over).
    pub(super) fn take_stored_status(&mut self) {
        if let Some(stored) = self.object.as_ref().and_then(|o| o.status.clone()) {
            self.status = stored;
        }
    }

    /// During the rollback window: compare failure rates, and roll back when the new
    /// version fails too much more than the previous one.
    pub(super) fn judge_window(&mut self) {
        let (Some(window), Some(active)) = (self.phase.window(), self.phase.active()) else {
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
        match machine::judge_window(new, old, &window.policy, window.until, Instant::now()) {
            WindowVerdict::Watching => {}
            WindowVerdict::RollBack => self.roll_back(new, old),
            WindowVerdict::Over => {
                let active = active.provider.label();
                let Some(window) = self.phase.close_window() else {
                    return;
                };
                tracing::info!(provider = %active, "rollback window over: {} calls, {} failed; {} unloaded", new.calls, new.failures, window.previous.provider.label());
                self.unloaded(&window.previous.provider);
                self.status.version_calls.clear();
                self.status.previous = None;
                self.status.rollback_window_end = None;
            }
        }
    }

    /// Reactivate the version the window keeps: the active one answered `new` and failed
    /// too much more than it did (`old`).
    fn roll_back(&mut self, new: CallCounts, old: CallCounts) {
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let generation = self.generation();
        let Some((rolled_back, policy)) = self.phase.roll_back() else {
            return;
        };
        let Some(previous) = self.phase.active() else {
            return;
        };
        slot.reactivate(previous.provider.clone());
        let message = format!(
            "{} failed {} of {} calls ({:.1}%) after activation, {:.1} points above {} ({} of {} calls, {:.1}%), over the threshold of {} points; {} reactivated. Change the spec to roll out again",
            rolled_back.provider.label(),
            new.failures,
            new.calls,
            new.failure_rate() * 100.0,
            machine::excess_points(new, old),
            previous.provider.label(),
            old.failures,
            old.calls,
            old.failure_rate() * 100.0,
            policy.threshold,
            previous.provider.label(),
        );
        tracing::error!(resource = %self.settings.resource, "rolled back: {message}");
        let now = status::now();
        if let Some(generation) = generation {
            self.record = Some(RollbackRecord::keeping(
                generation,
                previous,
                now.clone(),
                true,
            ));
        }
        self.status.rollback_window_end = None;
        self.status.active = Some(version_status(previous, None));
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
            condition::SPEC_APPLIED,
            ConditionStatus::False,
            "RolledBack",
            message.clone(),
            generation,
        );
        set_condition(
            &mut self.status,
            condition::READY,
            ConditionStatus::True,
            "Active",
            format!("{} is serving calls", previous.provider.label()),
            generation,
        );
        self.warn("RolledBack", &rolled_back.provider.label(), message);
        self.unloaded(&rolled_back.provider);
    }
}

impl Rollout {
    /// As a manager starts (the spec's version just activated): inside the window its
    /// record names for this generation, load the recorded previous version again, warm,
    /// and keep judging the active one until the window's end (at most the spec's window
    /// from now). A previous version that cannot be loaded is reported; the active version
    /// keeps serving, without a rollback target.
    pub(super) async fn restore_window(&mut self, desired: &Desired, generation: Option<i64>) {
        let (Some(record), Some(active)) = (self.record.clone(), self.phase.active()) else {
            return;
        };
        let Some(left) = machine::window_to_restore(
            &record,
            generation,
            &active.provider.identity().digest,
            desired.rollout.rollback.window,
            Timestamp::now(),
        ) else {
            return;
        };
        let label = active.provider.label();
        let mut version = desired.version.clone();
        let loaded = match record.previous_reference.parse() {
            Ok(reference) => {
                version.pin(reference, record.previous_digest.clone());
                self.recorded_cloud_config(&mut version);
                self.load_previous(desired, &version).await
            }
            Err(error) => Err(format!("{error}")),
        };
        let previous = match loaded {
            Ok(previous) => previous,
            Err(problem) => {
                let note = format!(
                    "{label} was activated {}s before the rollback window's end, but {} ({}) cannot be loaded again to roll back to: {problem}; {label} keeps serving without a rollback target",
                    left.as_secs(),
                    record.previous_reference,
                    record.previous_digest
                );
                tracing::error!(resource = %self.settings.resource, "{note}");
                self.warn("RollbackWindowLost", &label, note);
                return;
            }
        };
        let previous = Active {
            call_limits: version.sandbox.call_limits(),
            counts_at_activation: previous.call_counts(),
            provider: Arc::new(previous),
            version,
            egress_key: desired.egress_key.clone(),
            since: status::now(),
        };
        let note = format!(
            "{label} keeps being judged for {}s more, with {} loaded again to roll back to",
            left.as_secs(),
            previous.provider.label()
        );
        tracing::info!(resource = %self.settings.resource, "{note}");
        self.normal("RollbackWindowRestored", &label, note);
        self.status.previous = Some(version_status(&previous, None));
        self.status.rollback_window_end = Some(record.window_end.clone());
        self.phase.open_window(RollbackWindow {
            previous,
            until: Instant::now() + left,
            policy: desired.rollout.rollback,
        });
    }

    /// Give `version` the cloud config the record keeps for the previous version (none
    /// recorded, or unreadable: the spec's, and a warning).
    pub(super) fn recorded_cloud_config(&self, version: &mut spec::VersionSpec) {
        let Some(record) = &self.record else {
            return;
        };
        let Some(source) = &record.previous_cloud_config else {
            version.cloud_config = None;
            version.cloud_config_source = None;
            return;
        };
        match spec::cloud_config(source, &self.references) {
            Ok(bytes) => {
                version.cloud_config = Some(bytes);
                version.cloud_config_source = Some(source.clone());
            }
            Err(error) => {
                tracing::warn!(resource = %self.settings.resource, %error, "the cloud config recorded for {} cannot be read; using the spec's", record.previous_reference);
            }
        }
    }

    /// Fetch, verify, compile and `init` `version` (the recorded previous version: the
    /// spec's egress, limits and cloud config, pinned to the recorded digest), without
    /// reporting steps in status.
    async fn load_previous(
        &mut self,
        desired: &Desired,
        version: &spec::VersionSpec,
    ) -> Result<Provider, String> {
        let artifact = self
            .distribution
            .fetch(&version.reference)
            .await
            .map_err(|error| error.to_string())?;
        if version.digest.as_ref() != Some(&artifact.identity.digest) {
            return Err(format!(
                "{} has digest {}, not the recorded one",
                version.reference, artifact.identity.digest
            ));
        }
        let sandbox = self
            .sandbox_for(version)
            .map_err(|refusal| refusal.message)?;
        let compiled = Compiled::new(&sandbox, artifact)
            .await
            .map_err(|error| error.to_string())?
            .with_limits(version.sandbox.call_limits())
            .expecting(&version.name);
        let gate = EgressGate::new(desired.egress.clone(), self.metrics.clone());
        let provider = compiled
            .init(gate, version.cloud_config.clone(), self.metrics.clone())
            .await
            .map_err(|error| error.to_string())?;
        if let Err(refusal) = self.check(&provider, version) {
            self.unloaded(&provider);
            return Err(refusal.message);
        }
        Ok(provider)
    }
}

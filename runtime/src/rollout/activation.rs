//! Activating a loaded version: the slot's switch (calls already running finish on the
//! version they started on), the status and conditions that say what serves, and the
//! rollback window the replaced version is kept loaded for.

use std::time::Instant;

use super::machine::RollbackWindow;
use super::record::RollbackRecord;
use super::spec::Desired;
use super::status::{self, set_condition};
use super::{Active, Rollout};
use crate::resource::{ConditionStatus, ProviderVersion, condition};
use wasm_ccm_host::provider::{Provider, ProviderSlot};

impl Rollout {
    /// Make `provider` serve, keep the version it replaces for the rollback window (or unload
    /// it when the policy has none) and say so in status, conditions and an event.
    pub(super) fn activate(
        &mut self,
        desired: Desired,
        provider: Provider,
        generation: Option<i64>,
        started: Instant,
    ) {
        let label = provider.label();
        let identity = provider.identity().clone();
        let now = status::now();
        // A replica taking over the version the status names keeps its activation time.
        let since = match &self.status.active {
            Some(active) if active.digest == identity.digest && self.phase.active().is_none() => {
                active.since.clone().unwrap_or_else(|| now.clone())
            }
            _ => now.clone(),
        };
        // (Not `match self.slot_tx.borrow()…`: the borrow would live through the arms and
        // `send_replace` would wait for it forever.)
        let slot = self.slot_tx.borrow().clone();
        match slot {
            None => {
                let checks = self.settings.answer_checks.clone();
                self.slot_tx
                    .send_replace(Some(ProviderSlot::new(provider, checks)));
            }
            // The replaced version finishes the calls it started; `previous` below keeps it.
            Some(slot) => drop(slot.activate(provider)),
        }
        let slot = self.slot_tx.borrow().clone().expect("just set");
        let provider = slot.current();
        let active = Active {
            call_limits: desired.version.sandbox.call_limits(),
            version: desired.version,
            egress_key: desired.egress_key,
            counts_at_activation: provider.call_counts(),
            provider,
            since,
        };
        let (previous, closed) = self.phase.activated(active);
        // A version rolled out while a window is open replaces the window's previous one.
        if let Some(window) = closed {
            self.unloaded(&window.previous.provider);
        }
        let elapsed = started.elapsed();
        let note = match &previous {
            Some(previous) => format!(
                "{label} ({}) activated in {} ms, replacing {}",
                identity.reference,
                elapsed.as_millis(),
                previous.provider.label()
            ),
            None => format!(
                "{label} ({}) activated in {} ms",
                identity.reference,
                elapsed.as_millis()
            ),
        };
        tracing::info!(resource = %self.settings.resource, "{note}");
        self.status.candidate = None;
        self.status.active = self
            .phase
            .active()
            .map(|active| version_status(active, None));
        self.status.previous = previous
            .as_ref()
            .map(|previous| version_status(previous, Some(now.clone())));
        self.status.rollback_window_end = None;
        self.status.version_calls.clear();
        set_condition(
            &mut self.status,
            condition::READY,
            ConditionStatus::True,
            "Active",
            format!("{label} ({}) is serving calls", identity.reference),
            generation,
        );
        set_condition(
            &mut self.status,
            condition::PROGRESSING,
            ConditionStatus::False,
            "Activated",
            note.clone(),
            generation,
        );
        // A rollback of an earlier generation is over; one of this generation stays (a
        // restart activating the version it rolled back to) if the record says so.
        let recorded = self
            .record
            .as_ref()
            .is_some_and(|record| record.rolled_back_at(generation));
        if recorded {
            self.spec_applied(
                ConditionStatus::False,
                "RolledBack",
                format!(
                    "this generation was rolled back to {label}; change the spec to roll out again"
                ),
                generation,
            );
        } else {
            self.spec_applied(
                ConditionStatus::True,
                "Applied",
                format!("{label} runs this generation's spec"),
                generation,
            );
        }
        if status::condition(&self.status, condition::ROLLED_BACK).is_some_and(|rolled_back| {
            rolled_back.observed_generation != generation
                || (rolled_back.status == ConditionStatus::True && !recorded)
        }) {
            set_condition(
                &mut self.status,
                condition::ROLLED_BACK,
                ConditionStatus::False,
                "Activated",
                format!("{label} was activated for this generation"),
                generation,
            );
        }
        self.normal("Activated", &label, note);
        self.set_not_ready(None);
        if let Some(object) = self.object.clone() {
            self.resolved(&object.spec, generation, &identity);
        }
        if let Some(previous) = previous {
            let policy = desired.rollout.rollback;
            if policy.window.is_zero() {
                self.unloaded(&previous.provider);
            } else {
                let window_end = status::later(policy.window);
                if let Some(generation) = generation {
                    self.record = Some(RollbackRecord::keeping(
                        generation,
                        &previous,
                        window_end.clone(),
                        false,
                    ));
                }
                self.status.rollback_window_end = Some(window_end);
                self.phase.open_window(RollbackWindow {
                    previous,
                    until: Instant::now() + policy.window,
                    policy,
                });
            }
        }
    }

    /// A version no longer loaded leaves `wasm_ccm_provider_info`.
    pub(super) fn unloaded(&self, provider: &Provider) {
        let label = provider.label();
        let short = label.split_once('@').map_or("", |(_, short)| short);
        self.metrics
            .provider_unloaded(&provider.capabilities().name, short, provider.identity());
    }
}

/// How status names a loaded version (`since`: when it stopped serving, for `previous`).
pub(super) fn version_status(
    version: &Active,
    since: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> ProviderVersion {
    ProviderVersion {
        reference: version.provider.identity().reference.clone(),
        digest: version.provider.identity().digest.clone(),
        version: Some(version.provider.label()),
        since: Some(since.unwrap_or_else(|| version.since.clone())),
    }
}

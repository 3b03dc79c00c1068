//! The Shadow strategy's side of a rollout: a loaded candidate answering the read-only calls
//! beside the active version ([`Shadow`]), its comparison reported in status every tick, and
//! its promotion once enough answers agreed with none diverging (the rule:
//! [`machine::judge_shadow`]).

use std::time::Instant;

use super::Rollout;
use super::machine::{self, ShadowVerdict, Shadowing};
use super::spec::Desired;
use super::status::{self, set_condition};
use crate::resource::{
    CandidatePhase, ConditionStatus, Divergence, ShadowStatus, VersionCalls, condition,
};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::provider::{Provider, Shadow};

impl Rollout {
    /// Let `candidate` answer the read-only calls beside the active version.
    pub(super) async fn start_shadowing(
        &mut self,
        desired: Desired,
        candidate: Provider,
        generation: Option<i64>,
    ) {
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let in_flight = (desired.version.sandbox.max_concurrent_calls as usize / 4).max(1);
        let shadow = Shadow::new(candidate, in_flight);
        let label = shadow.candidate().label();
        let agreeing_calls = desired.rollout.shadow.agreeing_calls;
        let reference = desired.version.reference.to_string();
        let digest = shadow.candidate().identity().digest.clone();
        let shadowing = Shadowing {
            desired,
            shadow: shadow.clone(),
            generation,
            started: Instant::now(),
            diverged: false,
        };
        let Some(active) = self.phase.start_shadowing(shadowing) else {
            return;
        };
        slot.reconfigure(active.provider.with_shadow(Some(shadow)));
        active.provider = slot.current();
        let note = format!(
            "{label} answers the read-only calls beside {}; it is activated after {agreeing_calls} agreeing answers with no divergence",
            active.provider.label(),
        );
        tracing::info!(resource = %self.settings.resource, "{note}");
        self.spec_applied(
            ConditionStatus::Unknown,
            "Shadowing",
            note.clone(),
            generation,
        );
        self.normal("Shadowing", &label, note);
        self.status.shadow = Some(ShadowStatus::default());
        self.phase(
            &reference,
            Some(&digest),
            CandidatePhase::Shadowing,
            generation,
        )
        .await;
    }

    /// Detach the shadow from the active version.
    pub(super) fn stop_shadowing(&mut self) {
        let Some(shadowing) = self.phase.stop_shadowing() else {
            return;
        };
        if let Some(slot) = self.slot_tx.borrow().clone()
            && let Some(active) = self.phase.active_mut()
        {
            slot.reconfigure(active.provider.with_shadow(None));
            active.provider = slot.current();
        }
        self.unloaded(shadowing.shadow.candidate());
        self.status.shadow = None;
        self.status.candidate = None;
        self.status.version_calls.clear();
    }

    /// While shadowing: report the comparison, and promote the candidate once enough
    /// answers agreed with none diverging.
    pub(super) fn judge_shadow(&mut self) {
        let (Some(shadowing), Some(active)) = (self.phase.shadowing(), self.phase.active()) else {
            return;
        };
        let report = shadowing.shadow.report();
        let candidate = shadowing.shadow.candidate().clone();
        let previous = self.status.shadow.take().unwrap_or_default();
        self.status.shadow = Some(ShadowStatus {
            agreeing_calls: report.agreeing as i64,
            diverging_calls: report.diverging as i64,
            skipped_calls: report.skipped as i64,
            divergences: report
                .divergences
                .iter()
                .enumerate()
                .map(|(index, divergence)| Divergence {
                    function: divergence.function.name().to_string(),
                    diff: divergence.diff.clone(),
                    // Kept from when it was first reported.
                    observed_at: previous
                        .divergences
                        .get(index)
                        .and_then(|seen| seen.observed_at.clone())
                        .or_else(|| Some(status::now())),
                })
                .collect(),
        });
        let active_counts = active
            .provider
            .call_counts()
            .since(active.counts_at_activation);
        let candidate_counts = candidate.call_counts();
        self.status.version_calls = vec![
            VersionCalls {
                digest: candidate.identity().digest.clone(),
                calls: candidate_counts.calls as i64,
                failures: candidate_counts.failures as i64,
            },
            VersionCalls {
                digest: active.provider.identity().digest.clone(),
                calls: active_counts.calls as i64,
                failures: active_counts.failures as i64,
            },
        ];
        self.status
            .version_calls
            .dedup_by(|a, b| a.digest == b.digest);
        let generation = shadowing.generation;
        let policy = &shadowing.desired.rollout.shadow;
        match machine::judge_shadow(report.agreeing, report.diverging, policy) {
            ShadowVerdict::Comparing => {}
            ShadowVerdict::Diverged => {
                let first = report
                    .divergences
                    .first()
                    .map(|d| format!("{}: {}", d.function, d.diff))
                    .unwrap_or_default();
                let message = format!(
                    "{} answered {} of {} read-only calls differently from {} (first: {first}); promotion waits: change the spec to roll out another version",
                    candidate.label(),
                    report.diverging,
                    report.diverging + report.agreeing,
                    active.provider.label()
                );
                let first_time = !shadowing.diverged;
                self.spec_applied(
                    ConditionStatus::False,
                    "ShadowDiverged",
                    message.clone(),
                    generation,
                );
                set_condition(
                    &mut self.status,
                    condition::PROGRESSING,
                    ConditionStatus::True,
                    "ShadowDiverged",
                    message.clone(),
                    generation,
                );
                if first_time {
                    self.warn("ShadowDiverged", &candidate.label(), message);
                }
                if let Some(shadowing) = self.phase.shadowing_mut() {
                    shadowing.diverged = true;
                }
            }
            ShadowVerdict::Promote => self.promote(report.agreeing),
        }
    }

    /// Activate the candidate shadowing, which agreed on `agreeing` calls.
    fn promote(&mut self, agreeing: u64) {
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let Some(shadowing) = self.phase.stop_shadowing() else {
            return;
        };
        if let Some(active) = self.phase.active_mut() {
            slot.reconfigure(active.provider.with_shadow(None));
            active.provider = slot.current();
        }
        let candidate = shadowing.shadow.candidate();
        tracing::info!(
            resource = %self.settings.resource,
            "{} agreed on {agreeing} read-only calls in {:?}: promoting it",
            candidate.label(),
            shadowing.started.elapsed()
        );
        // Promoted, it may use every method again.
        let gate = EgressGate::new(shadowing.desired.egress.clone(), self.metrics.clone());
        let promoted = candidate.with_egress(gate);
        self.status.shadow = None;
        self.activate(
            shadowing.desired,
            promoted,
            shadowing.generation,
            shadowing.started,
        );
    }
}

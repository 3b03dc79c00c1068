//! Bringing a candidate version up: fetch it (with its signature), check its digest, compile
//! it against the host contract, `init` it behind its egress gate (a shadow's limited to safe
//! methods) and check its name and capabilities, reporting each step in status (`Fetched`,
//! `Verified`, `Progressing` and the candidate's phase). A step that refuses the candidate
//! becomes a [`Refusal`]: its condition, reason and message, and whether trying again later
//! may succeed ([`super::machine::Failure`] decides when).

use std::time::Instant;

use super::machine::Failure;
use super::spec::{Desired, VersionSpec};
use super::status::{self, set_condition};
use super::{Rollout, condition};
use crate::controllers::Controller;
use crate::resource::{Candidate, CandidatePhase, ConditionStatus};
use wasm_ccm_host::contract::Capabilities;
use wasm_ccm_host::egress::{EgressGate, MethodPolicy};
use wasm_ccm_host::provider::{Compiled, Provider, ProviderLoadError};
use wasm_ccm_host::sandbox::{LoadError, Sandbox};
use wasm_ccm_host::source::{FetchError, RegistryError};

/// A step of a rollout that refused the candidate.
pub(super) struct Refusal {
    /// The condition the step reports (`Fetched` or `Verified`), if any besides
    /// `Progressing`.
    pub(super) condition: Option<&'static str>,
    /// CamelCase, as conditions and events carry it.
    pub(super) reason: &'static str,
    pub(super) message: String,
    /// Whether trying again later may succeed.
    pub(super) transient: bool,
}

impl Refusal {
    /// What makes a refusal that will not pass by itself pass: most are the spec's to fix;
    /// some, the manager's flags (which a restart reads again).
    fn remedy(&self) -> &'static str {
        match self.reason {
            "Untagged" => {
                "roll out a version that reports a cluster ID, or restart the manager with --allow-untagged-cloud"
            }
            "CapabilityDropped" => {
                "roll out a version that supports it, or restart the manager without the controllers that need it (--controllers=*,-NAME)"
            }
            _ => "fix the spec",
        }
    }
}

impl Rollout {
    /// Report the candidate's step: `status.candidate` and the `Progressing` condition.
    pub(super) async fn phase(
        &mut self,
        reference: &str,
        digest: Option<&str>,
        phase: CandidatePhase,
        generation: Option<i64>,
    ) {
        self.status.candidate = Some(Candidate {
            reference: reference.to_string(),
            digest: digest.map(str::to_string),
            phase,
            since: Some(status::now()),
        });
        set_condition(
            &mut self.status,
            condition::PROGRESSING,
            ConditionStatus::True,
            &format!("{phase:?}"),
            format!("rolling out {reference}: {}", describe_phase(phase)),
            generation,
        );
        self.write_status().await;
    }

    /// Fetch, verify, compile and `init` the desired version, with the egress of a shadow
    /// (safe methods only) if `shadow`.
    pub(super) async fn load(
        &mut self,
        desired: &Desired,
        generation: Option<i64>,
        shadow: bool,
    ) -> Result<Provider, Refusal> {
        let version = &desired.version;
        let reference = version.reference.to_string();
        let artifact = self
            .distribution
            .fetch_signed(&version.reference, &version.signature)
            .await
            .map_err(fetch_refusal)?;
        let digest = artifact.identity.digest.clone();
        if let Some(pinned) = &version.digest
            && *pinned != digest
        {
            return Err(Refusal {
                condition: Some(condition::VERIFIED),
                reason: "DigestMismatch",
                message: format!("{reference} has digest {digest}, but spec.digest is {pinned}"),
                transient: false,
            });
        }
        set_condition(
            &mut self.status,
            condition::FETCHED,
            ConditionStatus::True,
            "Fetched",
            format!(
                "{reference} fetched: {digest}, {} bytes",
                artifact.wasm.len()
            ),
            generation,
        );
        self.phase(
            &reference,
            Some(&digest),
            CandidatePhase::Verifying,
            generation,
        )
        .await;
        let sandbox = self.sandbox_for(version)?;
        let compiled = Compiled::new(&sandbox, artifact)
            .await
            .map_err(load_refusal)?
            .with_limits(version.sandbox.call_limits())
            .expecting(&version.name);
        set_condition(
            &mut self.status,
            condition::VERIFIED,
            ConditionStatus::True,
            "Verified",
            format!("{reference} ({digest}) implements the host contract and imports nothing else"),
            generation,
        );
        self.phase(
            &reference,
            Some(&digest),
            CandidatePhase::Initializing,
            generation,
        )
        .await;
        let mut egress = desired.egress.clone();
        if shadow {
            egress.methods = MethodPolicy::SafeOnly {
                methods: desired.rollout.shadow.methods.clone(),
                actions: desired.rollout.shadow.actions.clone(),
            };
        }
        let gate = EgressGate::new(egress, self.metrics.clone());
        let provider = compiled
            .init(gate, version.cloud_config.clone(), self.metrics.clone())
            .await
            .map_err(|error| match error {
                ProviderLoadError::Load(error) => load_refusal(error),
                ProviderLoadError::Init { error, .. } => Refusal {
                    condition: None,
                    reason: "InitFailed",
                    message: format!("{reference}: init failed: {error}"),
                    transient: true,
                },
            })?;
        if let Err(refusal) = self.check(&provider, version) {
            self.unloaded(&provider);
            return Err(refusal);
        }
        Ok(provider)
    }

    /// The engine for `version`'s limits: the one in use, or a new one when they changed.
    pub(super) fn sandbox_for(&mut self, version: &VersionSpec) -> Result<Sandbox, Refusal> {
        let limits = version.engine_limits();
        if let Some((made_for, sandbox)) = &self.sandbox
            && *made_for == limits
        {
            return Ok(sandbox.clone());
        }
        let sandbox =
            Sandbox::new(version.sandbox.clone(), self.metrics.clone()).map_err(|error| {
                Refusal {
                    condition: None,
                    reason: "SandboxFailed",
                    message: format!("spec.limits: cannot set up the sandbox: {error}"),
                    transient: false,
                }
            })?;
        self.sandbox = Some((limits, sandbox.clone()));
        Ok(sandbox)
    }

    /// The candidate reports the name the spec asks for, and supports every controller
    /// running.
    pub(super) fn check(&self, provider: &Provider, version: &VersionSpec) -> Result<(), Refusal> {
        let capabilities = provider.capabilities();
        if capabilities.name != version.name {
            return Err(Refusal {
                condition: Some(condition::VERIFIED),
                reason: "WrongName",
                message: format!(
                    "{} reports its name as {:?}, but spec.name is {:?}",
                    version.reference, capabilities.name, version.name
                ),
                transient: false,
            });
        }
        if !capabilities.has_cluster_id && !self.settings.allow_untagged_cloud {
            return Err(Refusal {
                condition: Some(condition::VERIFIED),
                reason: "Untagged",
                message: format!(
                    "{} reports no cluster ID (has-cluster-id = false); run the manager with --allow-untagged-cloud to accept it",
                    version.reference
                ),
                transient: false,
            });
        }
        if let Some(running) = self.required.get() {
            let dropped: Vec<String> = running
                .iter()
                .filter_map(|controller| {
                    let (needed, supported) = needed_capability(*controller, capabilities);
                    (!supported).then(|| format!("{needed} (needed by {controller})"))
                })
                .collect();
            if !dropped.is_empty() {
                return Err(Refusal {
                    condition: Some(condition::VERIFIED),
                    reason: "CapabilityDropped",
                    message: format!(
                        "{} does not support {}, which a running controller needs",
                        version.reference,
                        dropped.join(", ")
                    ),
                    transient: false,
                });
            }
        }
        Ok(())
    }

    /// Report a refused step, keep the active version serving and schedule another try if
    /// the refusal may pass.
    pub(super) fn refused(&mut self, desired: &Desired, generation: Option<i64>, refusal: Refusal) {
        let failure = Failure::after(
            self.phase.failure(),
            desired.version.clone(),
            refusal.transient,
            Instant::now(),
        );
        let retry_at = failure.retry_at();
        self.phase.failed(failure);
        let serving = match self.phase.active() {
            Some(active) => format!("{} keeps serving", active.provider.label()),
            None => "no version is active".to_string(),
        };
        let retry = match retry_at {
            Some(at) => format!(
                "; trying again in {}s",
                at.saturating_duration_since(Instant::now()).as_secs()
            ),
            None => format!("; {} to try again", refusal.remedy()),
        };
        let message = format!("{}; {serving}{retry}", refusal.message);
        let applied = if retry_at.is_some() {
            ConditionStatus::Unknown
        } else {
            ConditionStatus::False
        };
        if !self.rolled_back_at(generation) {
            self.spec_applied(applied, refusal.reason, message.clone(), generation);
        }
        // As the status quotes it: a refusal may quote a registry or a provider.
        let logged = wasm_ccm_host::text::ellipsized(
            wasm_ccm_host::text::escaped(&message).into_owned(),
            status::MAX_CONDITION_MESSAGE,
        );
        tracing::error!(resource = %self.settings.resource, reason = refusal.reason, "rollout refused: {logged}");
        if let Some(type_) = refusal.condition {
            set_condition(
                &mut self.status,
                type_,
                ConditionStatus::False,
                refusal.reason,
                refusal.message.clone(),
                generation,
            );
        }
        if refusal.reason == "FetchFailed" {
            set_condition(
                &mut self.status,
                condition::FETCHED,
                ConditionStatus::False,
                refusal.reason,
                refusal.message.clone(),
                generation,
            );
        }
        set_condition(
            &mut self.status,
            condition::PROGRESSING,
            ConditionStatus::False,
            refusal.reason,
            message.clone(),
            generation,
        );
        self.status.candidate = None;
        if self.phase.active().is_none() {
            set_condition(
                &mut self.status,
                condition::READY,
                ConditionStatus::False,
                refusal.reason,
                message.clone(),
                generation,
            );
            self.set_not_ready(Some(message.clone()));
        }
        let subject = desired.version.reference.to_string();
        self.warn(refusal.reason, &subject, message);
    }
}

/// The capability `controller` needs, and whether `capabilities` has it.
fn needed_capability(controller: Controller, capabilities: &Capabilities) -> (&'static str, bool) {
    match controller {
        Controller::CloudNode | Controller::CloudNodeLifecycle => {
            ("instances", capabilities.instances)
        }
        Controller::ServiceLoadBalancer => ("load-balancer", capabilities.load_balancer),
        Controller::NodeRoute => ("routes", capabilities.routes),
    }
}

fn describe_phase(phase: CandidatePhase) -> &'static str {
    match phase {
        CandidatePhase::Fetching => "downloading the artifact",
        CandidatePhase::Verifying => {
            "checking the component against the host contract and compiling it"
        }
        CandidatePhase::Initializing => "calling init with the cloud config",
        CandidatePhase::Shadowing => "answering read-only calls beside the active version",
    }
}

fn fetch_refusal(error: FetchError) -> Refusal {
    let message = error.to_string();
    let (condition, reason, transient) = match &error {
        FetchError::Registry {
            error: RegistryError::DigestMismatch { .. },
            ..
        } => (Some(condition::VERIFIED), "DigestMismatch", false),
        FetchError::Layout { .. } => (Some(condition::VERIFIED), "NotAWasmArtifact", false),
        FetchError::Registry { .. } | FetchError::File { .. } => (None, "FetchFailed", true),
        // A signature may be pushed (or the registry come back) later: tried again with
        // backoff, as a failed fetch.
        FetchError::Signature(signature) => match signature.reason() {
            "FetchFailed" => (None, "FetchFailed", true),
            reason => (Some(condition::VERIFIED), reason, true),
        },
    };
    Refusal {
        condition,
        reason,
        message,
        transient,
    }
}

fn load_refusal(error: LoadError) -> Refusal {
    let reason = match &error {
        LoadError::Invalid { .. } => "InvalidComponent",
        LoadError::UnsatisfiedImport { .. } => "UnsatisfiedImport",
        LoadError::NotAProvider { .. } => "MissingExport",
        LoadError::MemoryLimit { .. } => "SandboxFailed",
        _ => "CompileFailed",
    };
    Refusal {
        condition: Some(condition::VERIFIED),
        reason,
        message: error.to_string(),
        transient: false,
    }
}

//! No silent tag drift. A spec naming a tag and no digest runs the digest the tag named when
//! its generation rolled out: the leader records it in the `wasm-ccm.io/resolved` annotation
//! (JSON: `generation`, `reference`, `digest`), and every replica, and every manager
//! restarted, runs that digest (fetched by digest: from `--cache-dir` with no registry
//! request when cached), not what the tag names by then. The leader checks the tag every
//! `--tag-check-interval` (one manifest request, nothing downloaded); a tag that names
//! another digest is reported (`TagCurrent` False, reason `TagMoved`, and one `TagMoved`
//! event per new digest), and rolled out through the usual rollout (verification, `init`,
//! shadow, rollback window) only with `rollout.followTag`. A registry that cannot be asked
//! is reported (`TagCurrent` Unknown), never a reason to change what runs.
//!
//! Why an annotation and not the status, as for the rollback record ([`super::record`]):
//! the record chooses what runs, and the status subresource may be patched by principals
//! who may not edit the resource; the annotation is written through the resource itself,
//! by those who may edit its spec (and so choose what runs anyway) and by the manager. The
//! status reports what runs (`active.digest`, the `TagCurrent` condition) for people.
//!
//! A record applies to the spec generation and the `spec.provider` it names. A spec change
//! that rolls a version out (provider, name, cloud config) resolves the tag afresh; one that
//! applies in place (egress, credentials, limits, rollout policy) keeps the running digest,
//! and the leader records it for the new generation.

use std::sync::Arc;

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::Rollout;
use super::spec::Desired;
use super::status::{self, set_condition};
use crate::resource::{
    CloudProvider, CloudProviderSpec, ConditionStatus, RolloutStrategy, condition,
};
use wasm_ccm_host::source::{Distribution, Identity, OciRef, ProviderRef};

/// The annotation holding the record.
pub const ANNOTATION: &str = "wasm-ccm.io/resolved";

/// The digest `reference`'s tag named when generation `generation` rolled out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRecord {
    /// The spec generation it applies to.
    pub generation: i64,
    /// `spec.provider` as written (`oci://REGISTRY/REPO:TAG`).
    pub reference: String,
    /// The manifest digest the tag named: every replica runs it.
    pub digest: String,
}

/// Why the record on an object cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ResolvedError {
    /// Not the record's JSON.
    #[error("annotation {ANNOTATION} is not a resolved-tag record: {0}")]
    Json(#[from] serde_json::Error),
    /// A digest no registry would serve.
    #[error("annotation {ANNOTATION}: digest {0:?} is not sha256:<64 hex digits>")]
    Digest(String),
}

impl ResolvedRecord {
    /// The record on `object`, if it carries one.
    pub fn of(object: &CloudProvider) -> Option<Result<ResolvedRecord, ResolvedError>> {
        let text = object.metadata.annotations.as_ref()?.get(ANNOTATION)?;
        Some(ResolvedRecord::parse(text))
    }

    fn parse(text: &str) -> Result<ResolvedRecord, ResolvedError> {
        let record: ResolvedRecord = serde_json::from_str(text)?;
        let well_formed = record
            .digest
            .strip_prefix("sha256:")
            .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !well_formed {
            return Err(ResolvedError::Digest(record.digest));
        }
        Ok(record)
    }

    /// Whether it records the tag of `provider` (`spec.provider`) for `generation`.
    pub fn applies(&self, generation: Option<i64>, provider: &str) -> bool {
        generation == Some(self.generation) && self.reference == provider
    }

    /// Write it on the resource `name`.
    pub async fn write(&self, api: &Api<CloudProvider>, name: &str) -> Result<(), kube::Error> {
        let text = serde_json::to_string(self).expect("a record is plain data");
        let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: text}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }
}

/// The tag `spec` names and nothing pins: `spec.provider` as an `oci://` reference with a
/// tag, and neither a digest in it nor `spec.digest`.
pub fn unpinned_tag(spec: &CloudProviderSpec) -> Option<OciRef> {
    if spec.digest.is_some() {
        return None;
    }
    match spec.provider.parse() {
        Ok(ProviderRef::Oci(oci)) if oci.tag.is_some() && oci.digest.is_none() => Some(oci),
        _ => None,
    }
}

/// Whether a version identified by `reference` (`oci://…:TAG`, pinned or not) was fetched
/// through `tag`: the same registry, repository and tag. A version a rollback went back to
/// may carry another reference, and its digest is never recorded for this tag.
pub fn through(reference: &str, tag: &OciRef) -> bool {
    matches!(reference.parse(), Ok(ProviderRef::Oci(oci))
        if oci.registry == tag.registry && oci.repository == tag.repository && oci.tag == tag.tag)
}

/// What a check of the tag found, against the recorded digest.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The tag names the recorded digest.
    Current,
    /// It names another: `report` it (the first time this digest is seen), and `follow` it
    /// (roll it out) with `rollout.followTag`.
    Moved { report: bool, follow: bool },
}

/// Judge a check: the tag names `named`; the generation runs `recorded`; `reported` is the
/// digest last reported as moved to.
pub fn judge(recorded: &str, named: &str, follow_tag: bool, reported: Option<&str>) -> Verdict {
    if named == recorded {
        return Verdict::Current;
    }
    Verdict::Moved {
        report: reported != Some(named),
        follow: follow_tag,
    }
}

/// A finished check of a tag, for the rollout loop.
pub struct TagCheck {
    /// The generation and `spec.provider` it was made for, and the digest recorded then.
    record: ResolvedRecord,
    /// The digest the tag names, or why the registry could not say.
    result: Result<String, String>,
}

/// The rollout's view of the tag: the record and the checks.
#[derive(Default)]
pub(super) struct Tags {
    /// The record as this replica follows it: the leader's own, or the object's.
    pub(super) record: Option<ResolvedRecord>,
    /// The record last written (or read from the object).
    written: Option<ResolvedRecord>,
    /// A moved tag's digest to roll out (`rollout.followTag`), found by the last check.
    follow: Option<ResolvedRecord>,
    /// The digest last reported as moved to.
    reported: Option<String>,
    /// Whether a check is under way.
    checking: bool,
    /// The registry client of the checks, made on the first one.
    checker: Option<Arc<Distribution>>,
}

impl Rollout {
    /// As a manager starts, and on a standby: take up the object's record (the leader keeps
    /// its own, which the object may not carry yet).
    pub(super) fn read_resolved(&mut self, object: &CloudProvider, first: bool) {
        if !first && self.leading() {
            return;
        }
        match ResolvedRecord::of(object) {
            Some(Ok(record)) => {
                self.tags.record = Some(record.clone());
                self.tags.written = Some(record);
            }
            Some(Err(error)) if first => {
                tracing::warn!(resource = %self.settings.resource, %error, "ignoring the resolved-tag record; the tag is resolved afresh");
            }
            _ => {}
        }
    }

    /// Pin `desired` to the digest its tag runs: the one a check found to follow, else the
    /// recorded one. Without a record for this generation the tag is resolved afresh.
    pub(super) fn pin_tag(
        &mut self,
        spec: &CloudProviderSpec,
        generation: Option<i64>,
        desired: &mut Desired,
    ) {
        if unpinned_tag(spec).is_none() {
            self.tags.follow = None;
            self.status
                .conditions
                .retain(|c| c.type_ != condition::TAG_CURRENT);
            return;
        }
        let applies = |record: &&ResolvedRecord| record.applies(generation, &spec.provider);
        let follow = self
            .tags
            .follow
            .as_ref()
            .filter(applies)
            .filter(|_| desired.rollout.follow_tag);
        if let Some(record) = follow.or(self.tags.record.as_ref().filter(applies)) {
            desired
                .version
                .pin(desired.version.reference.clone(), record.digest.clone());
            // A standby loads the digest the leader recorded, which the leader activated
            // (after its shadow, if any) directly: a standby has no calls to shadow with.
            let running = self
                .phase
                .active()
                .map(|active| active.provider.identity().digest.as_str());
            if !self.leading() && running != Some(record.digest.as_str()) {
                desired.rollout.strategy = RolloutStrategy::Direct;
            }
        }
    }

    /// The active version runs the spec's version under a new generation that changed only
    /// what applies in place: its digest stays the tag's for this generation.
    pub(super) fn carry_resolution(&mut self, spec: &CloudProviderSpec, generation: Option<i64>) {
        let Some(active) = self.phase.active() else {
            return;
        };
        let active = active.provider.identity().clone();
        let recorded = self
            .tags
            .record
            .as_ref()
            .is_some_and(|record| record.applies(generation, &spec.provider));
        if !recorded && !self.rolled_back(generation) {
            self.resolved(spec, generation, &active);
        }
    }

    /// A version fetched through the spec's tag was activated as `identity`: record the
    /// digest the tag named for this generation (not a version a rollback went back to).
    pub(super) fn resolved(
        &mut self,
        spec: &CloudProviderSpec,
        generation: Option<i64>,
        identity: &Identity,
    ) {
        let (Some(tag), Some(generation)) = (unpinned_tag(spec), generation) else {
            return;
        };
        let rolled_back = self
            .record
            .as_ref()
            .and_then(|record| record.rolled_back_to(Some(generation)));
        if !through(&identity.reference, &tag) || rolled_back.is_some() {
            return;
        }
        let record = ResolvedRecord {
            generation,
            reference: spec.provider.clone(),
            digest: identity.digest.clone(),
        };
        // Recorded already (a restart, a standby following the leader): the status says
        // what the checks found since.
        if self.tags.record.as_ref() == Some(&record) {
            return;
        }
        tracing::info!(resource = %self.settings.resource, tag = %spec.provider, digest = %record.digest, generation, "recording the digest the tag names for this generation");
        set_condition(
            &mut self.status,
            condition::TAG_CURRENT,
            ConditionStatus::True,
            "Resolved",
            format!(
                "{} names {}, recorded for generation {generation}: every replica runs it, after restarts too",
                spec.provider, record.digest
            ),
            Some(generation),
        );
        self.tags.record = Some(record);
    }

    /// Write the record, as the leader, when it changed.
    pub(super) async fn write_resolved(&mut self) {
        if self.tags.record == self.tags.written {
            return;
        }
        let Some(record) = &self.tags.record else {
            return;
        };
        match record.write(&self.api, &self.settings.resource).await {
            Ok(()) => self.tags.written = self.tags.record.clone(),
            Err(error) => {
                tracing::warn!(resource = %self.settings.resource, %error, "writing the resolved-tag record failed; retrying with the next change");
            }
        }
    }

    /// Whether the leader should ask the registry what the tag names now: the spec names an
    /// unpinned tag whose digest is recorded for this generation, which was not rolled back.
    pub(super) fn tag_check_due(&self) -> bool {
        !self.settings.tag_check_interval.is_zero()
            && !self.tags.checking
            && self.leading()
            && self.phase.active().is_some()
            && self.checked_record().is_some()
    }

    /// The record a check compares with, and the tag.
    fn checked_record(&self) -> Option<(ResolvedRecord, OciRef)> {
        let object = self.object.as_ref()?;
        let generation = object.metadata.generation;
        let tag = unpinned_tag(&object.spec)?;
        let record = self
            .tags
            .record
            .as_ref()
            .filter(|record| record.applies(generation, &object.spec.provider))?;
        (!self.rolled_back(generation)).then(|| (record.clone(), tag))
    }

    /// Ask the registry, in a task of its own (the loop keeps judging rollbacks), which
    /// digest the tag names; the answer comes back on `done`.
    pub(super) fn start_tag_check(&mut self, done: mpsc::Sender<TagCheck>) {
        let Some((record, tag)) = self.checked_record() else {
            return;
        };
        let settings = &self.settings.distribution;
        let checker = self
            .tags
            .checker
            .get_or_insert_with(|| Arc::new(Distribution::new(settings.clone())))
            .clone();
        self.tags.checking = true;
        tokio::spawn(async move {
            let result = checker
                .resolve(&tag)
                .await
                .map_err(|error| error.to_string());
            // The loop is gone when the manager stops; nothing to report then.
            let _ = done.send(TagCheck { record, result }).await;
        });
    }

    /// Report a check: `TagCurrent`, and a `TagMoved` event once per new digest. Whether
    /// the moved tag is to be rolled out (`rollout.followTag`).
    pub(super) fn tag_checked(&mut self, check: TagCheck) -> bool {
        self.tags.checking = false;
        // Leadership lost while the registry was asked: the next leader checks (and
        // reports) again.
        if !self.leading() {
            return false;
        }
        let Some(object) = &self.object else {
            return false;
        };
        let generation = object.metadata.generation;
        let follow_tag = object
            .spec
            .rollout
            .as_ref()
            .and_then(|rollout| rollout.follow_tag)
            .unwrap_or(false);
        let TagCheck { record, result } = check;
        // The spec or the record moved on while the registry was asked.
        if self.tags.record.as_ref() != Some(&record)
            || !record.applies(generation, &object.spec.provider)
        {
            return false;
        }
        let (tag, recorded) = (&record.reference, &record.digest);
        let named = match result {
            Ok(named) => named,
            Err(problem) => {
                tracing::warn!(resource = %self.settings.resource, %tag, "cannot check which digest the tag names: {problem}");
                set_condition(
                    &mut self.status,
                    condition::TAG_CURRENT,
                    ConditionStatus::Unknown,
                    "CheckFailed",
                    format!(
                        "cannot tell which digest {tag} names now: {problem}; {recorded} keeps running"
                    ),
                    generation,
                );
                return false;
            }
        };
        // Reported already: by this replica, or as the status says (before a restart or a
        // failover).
        let in_status = status::condition(&self.status, condition::TAG_CURRENT)
            .is_some_and(|c| c.reason == "TagMoved" && c.message.contains(&named));
        let reported = match in_status {
            true => Some(named.as_str()),
            false => self.tags.reported.as_deref(),
        };
        match judge(recorded, &named, follow_tag, reported) {
            Verdict::Current => {
                self.tags.follow = None;
                set_condition(
                    &mut self.status,
                    condition::TAG_CURRENT,
                    ConditionStatus::True,
                    "Current",
                    format!("{tag} still names {recorded}, which runs"),
                    generation,
                );
                false
            }
            Verdict::Moved { report, follow } => {
                let then = format!(
                    "{tag} now names {named}, not {recorded}, which it named when generation {} rolled out",
                    record.generation
                );
                let message = if follow {
                    format!("{then}; rolling {named} out (spec.rollout.followTag)")
                } else {
                    format!(
                        "{then}; {recorded} keeps running: set spec.digest to {named} to roll it out, or spec.rollout.followTag to follow the tag"
                    )
                };
                set_condition(
                    &mut self.status,
                    condition::TAG_CURRENT,
                    ConditionStatus::False,
                    "TagMoved",
                    message.clone(),
                    generation,
                );
                if report {
                    tracing::warn!(resource = %self.settings.resource, "{message}");
                    self.warn("TagMoved", &named, message);
                    self.tags.reported = Some(named.clone());
                }
                if follow {
                    self.tags.follow = Some(ResolvedRecord {
                        digest: named,
                        ..record
                    });
                }
                follow
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn object(annotation: Option<&str>) -> CloudProvider {
        let mut object: CloudProvider = serde_json::from_value(json!({
            "apiVersion": "wasm-ccm.io/v1alpha1",
            "kind": "CloudProvider",
            "metadata": {"name": "p", "generation": 3},
            "spec": {"provider": "oci://r.example/p:v1", "name": "p"},
        }))
        .unwrap();
        if let Some(text) = annotation {
            object.metadata.annotations = Some([(ANNOTATION.to_string(), text.to_string())].into());
        }
        object
    }

    fn spec(provider: &str, digest: Option<&str>) -> CloudProviderSpec {
        serde_json::from_value(json!({"provider": provider, "name": "p", "digest": digest}))
            .unwrap()
    }

    #[test]
    fn a_record_applies_to_its_generation_and_reference_only() {
        let record = ResolvedRecord {
            generation: 3,
            reference: "oci://r.example/p:v1".into(),
            digest: DIGEST.into(),
        };
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            text,
            format!(r#"{{"generation":3,"reference":"oci://r.example/p:v1","digest":"{DIGEST}"}}"#)
        );
        let read = ResolvedRecord::of(&object(Some(&text))).unwrap().unwrap();
        assert_eq!(read, record);
        assert!(read.applies(Some(3), "oci://r.example/p:v1"));
        assert!(
            !read.applies(Some(4), "oci://r.example/p:v1"),
            "stale after a spec change"
        );
        assert!(
            !read.applies(Some(3), "oci://r.example/p:v2"),
            "another tag"
        );
        assert!(!read.applies(None, "oci://r.example/p:v1"));
        assert!(ResolvedRecord::of(&object(None)).is_none());
    }

    #[test]
    fn a_record_that_does_not_parse_or_names_no_digest_is_named() {
        let error = ResolvedRecord::of(&object(Some("{\"generation\": 3}")))
            .unwrap()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("annotation wasm-ccm.io/resolved is not a resolved-tag record"),
            "{error}"
        );
        let text =
            r#"{"generation":3,"reference":"oci://r.example/p:v1","digest":"sha256:../../x"}"#;
        let error = ResolvedRecord::of(&object(Some(text)))
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"annotation wasm-ccm.io/resolved: digest "sha256:../../x" is not sha256:<64 hex digits>"#
        );
    }

    #[test]
    fn only_a_tag_nothing_pins_is_unpinned() {
        let tag = unpinned_tag(&spec("oci://r.example/p:v1", None)).unwrap();
        assert_eq!(tag.tag.as_deref(), Some("v1"));
        assert!(unpinned_tag(&spec("oci://r.example/p:v1", Some(DIGEST))).is_none());
        assert!(unpinned_tag(&spec(&format!("oci://r.example/p:v1@{DIGEST}"), None)).is_none());
        assert!(unpinned_tag(&spec(&format!("oci://r.example/p@{DIGEST}"), None)).is_none());
        assert!(unpinned_tag(&spec("file:///p.wasm", None)).is_none());
        assert!(unpinned_tag(&spec("not a reference", None)).is_none());
    }

    #[test]
    fn a_version_counts_as_the_tags_only_when_fetched_through_it() {
        let tag = unpinned_tag(&spec("oci://r.example:5000/acme/p:v1", None)).unwrap();
        assert!(through("oci://r.example:5000/acme/p:v1", &tag));
        assert!(through(
            &format!("oci://r.example:5000/acme/p:v1@{DIGEST}"),
            &tag
        ));
        assert!(!through(
            &format!("oci://r.example:5000/acme/p:v0@{DIGEST}"),
            &tag
        ));
        assert!(!through(
            &format!("oci://r.example:5000/acme/p@{DIGEST}"),
            &tag
        ));
        assert!(!through("oci://r.example:5000/acme/q:v1", &tag));
        assert!(!through("oci://other.example/acme/p:v1", &tag));
        assert!(!through("file:///p.wasm", &tag));
    }

    #[test]
    fn a_moved_tag_is_reported_once_per_digest_and_followed_only_when_asked() {
        let (d1, d2, d3) = ("sha256:1", "sha256:2", "sha256:3");
        assert_eq!(judge(d1, d1, true, None), Verdict::Current);
        assert_eq!(judge(d1, d1, false, Some(d2)), Verdict::Current);
        assert_eq!(
            judge(d1, d2, false, None),
            Verdict::Moved {
                report: true,
                follow: false
            }
        );
        assert_eq!(
            judge(d1, d2, false, Some(d2)),
            Verdict::Moved {
                report: false,
                follow: false
            },
            "not again at every check"
        );
        assert_eq!(
            judge(d1, d3, false, Some(d2)),
            Verdict::Moved {
                report: true,
                follow: false
            },
            "moved again"
        );
        assert_eq!(
            judge(d1, d2, true, Some(d2)),
            Verdict::Moved {
                report: false,
                follow: true
            }
        );
    }
}

//! The rollout's record of a rollback window, which a restarted manager trusts: the
//! `wasm-ccm.io/rollback` annotation on the `CloudProvider` (JSON), written by the leader.
//!
//! Why an annotation and not the status: a restarted manager decides from it what to run
//! (the version rolled back to) and what to keep loaded for a rollback (the previous
//! version), and the status subresource may be patched by principals who may not edit the
//! resource. An annotation is written through the resource itself, by those who may edit
//! its spec, and so choose what runs anyway (and by the manager): status alone never
//! chooses what runs. The status reports the same window (`previous`,
//! `rollbackWindowEnd`) for people; the manager reads only the record, as the Deployment
//! controller keeps a Deployment's revision in an annotation.
//!
//! A record applies to the spec generation it names: after any spec change it is stale and
//! ignored, so the version it names is always one a spec of this resource named.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::{Deserialize, Serialize};

use super::Active;
use crate::resource::{CloudConfigSource, CloudProvider};
use wasm_ccm_host::source::ProviderRef;

/// The annotation holding the record.
pub const ANNOTATION: &str = "wasm-ccm.io/rollback";

/// A rollback window opened by activating generation `generation`'s version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollbackRecord {
    /// The spec generation whose version was activated.
    pub generation: i64,
    /// The reference of the version active before it.
    pub previous_reference: String,
    /// That version's digest: a restarted manager loads only a component with it.
    pub previous_digest: String,
    /// The cloud config it ran with (its spec's `cloudConfig`, as written: a reference
    /// names a Secret or ConfigMap key, never holds its value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_cloud_config: Option<CloudConfigSource>,
    /// When the window ends.
    pub window_end: Time,
    /// Whether the version was rolled back to the previous one.
    #[serde(default)]
    pub rolled_back: bool,
}

/// Why the record on an object cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("annotation {ANNOTATION} is not a rollback record: {0}")]
pub struct RecordError(#[from] serde_json::Error);

impl RollbackRecord {
    /// The record of generation `generation`'s window, which keeps `previous` loaded until
    /// `window_end` (`rolled_back`: and runs it again).
    pub(super) fn keeping(
        generation: i64,
        previous: &Active,
        window_end: Time,
        rolled_back: bool,
    ) -> RollbackRecord {
        let identity = previous.provider.identity();
        RollbackRecord {
            generation,
            previous_reference: identity.reference.to_string(),
            previous_digest: identity.digest.clone(),
            previous_cloud_config: previous.version.cloud_config_source.clone(),
            window_end,
            rolled_back,
        }
    }

    /// The record on `object`, if it carries one.
    pub fn of(object: &CloudProvider) -> Option<Result<RollbackRecord, RecordError>> {
        let text = object.metadata.annotations.as_ref()?.get(ANNOTATION)?;
        Some(serde_json::from_str(text).map_err(RecordError::from))
    }

    /// Whether it records the window of `generation` (a record of another one is stale).
    pub fn is_for(&self, generation: Option<i64>) -> bool {
        generation == Some(self.generation)
    }

    /// Whether `generation`'s version was rolled back, as recorded.
    pub fn rolled_back_at(&self, generation: Option<i64>) -> bool {
        self.is_for(generation) && self.rolled_back
    }

    /// The version `generation` was rolled back to, as recorded: its reference and digest.
    pub fn rolled_back_to(&self, generation: Option<i64>) -> Option<(ProviderRef, String)> {
        if !self.rolled_back_at(generation) {
            return None;
        }
        let reference = self.previous_reference.parse().ok()?;
        Some((reference, self.previous_digest.clone()))
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

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn object(annotation: Option<&str>) -> CloudProvider {
        let mut object: CloudProvider = serde_json::from_value(json!({
            "apiVersion": "wasm-ccm.io/v1alpha1",
            "kind": "CloudProvider",
            "metadata": {"name": "p", "generation": 3},
            "spec": {"provider": "file:///p.wasm", "name": "p"},
        }))
        .unwrap();
        if let Some(text) = annotation {
            object.metadata.annotations = Some([(ANNOTATION.to_string(), text.to_string())].into());
        }
        object
    }

    #[test]
    fn a_record_applies_to_its_generation_only() {
        let record = RollbackRecord {
            generation: 3,
            previous_reference: "oci://r.example/p:v1".into(),
            previous_digest: format!("sha256:{}", "a".repeat(64)),
            previous_cloud_config: Some(
                serde_json::from_value(json!({"secretKeyRef": {"name": "c", "key": "k"}})).unwrap(),
            ),
            window_end: Time("2026-11-27T10:00:00Z".parse::<Timestamp>().unwrap()),
            rolled_back: true,
        };
        let text = serde_json::to_string(&record).unwrap();
        let read = RollbackRecord::of(&object(Some(&text))).unwrap().unwrap();
        assert_eq!(read, record);
        assert!(read.rolled_back_at(Some(3)));
        assert!(!read.rolled_back_at(Some(4)), "stale after a spec change");
        let (reference, digest) = read.rolled_back_to(Some(3)).unwrap();
        assert_eq!(reference.to_string(), "oci://r.example/p:v1");
        assert_eq!(digest, record.previous_digest);
        assert!(read.rolled_back_to(Some(4)).is_none());
        assert!(!read.is_for(None));
        assert!(RollbackRecord::of(&object(None)).is_none());
    }

    #[test]
    fn a_record_that_does_not_parse_is_named() {
        let error = RollbackRecord::of(&object(Some("{\"generation\": \"x\"}")))
            .unwrap()
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("annotation wasm-ccm.io/rollback is not a rollback record"),
            "{error}"
        );
    }
}

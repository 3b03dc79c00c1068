//! OCI referrers: a file (a release's SBOM) attached to a manifest by an artifact manifest
//! whose `subject` names that manifest, and found again from it, as `oras attach` and `oras
//! discover` do. A registry with the OCI 1.1 referrers API lists referrers itself; for one
//! without (Debian's `docker-registry`, distribution before 3.0) the writer keeps the list
//! the distribution spec gives as the fallback: an image index tagged `sha256-HEX` (the
//! subject's digest) naming every referrer, which readers look for when the API is missing.
//!
//! What a registry answers is bounded and checked as a provider's manifest is: a referrers
//! list [`MAX_MANIFEST_BYTES`] (its digests checked before they name a request), at most
//! [`MAX_ATTACHED`] files of a type, each read only after its manifest names the subject,
//! the type and one layer within [`MAX_ATTACHMENT_BYTES`].

use oci_client::manifest::OciDescriptor;
use serde_json::{Value, json};

use super::layout::{MAX_MANIFEST_BYTES, OCI_INDEX, OCI_MANIFEST, sha256_digest};
use super::{Distribution, FetchError, OciRef, RegistryError, registry_error};

/// The largest attached file read back: 64 MiB (the release's SBOM is well under 1 MiB).
pub const MAX_ATTACHMENT_BYTES: i64 = 64 << 20;
/// The most files of one type listed as attached to one manifest (a release has one SBOM).
pub const MAX_ATTACHED: usize = 16;

/// The config of an artifact manifest that has none of its own: the OCI empty descriptor.
const EMPTY_CONFIG: &[u8] = b"{}";
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The annotation naming an attached file.
const TITLE: &str = "org.opencontainers.image.title";

/// A file attached to a manifest.
#[derive(Debug, Clone)]
pub struct Attached {
    /// The subject's manifest digest.
    pub subject: String,
    /// The artifact manifest that carries the file, by digest.
    pub reference: OciRef,
    /// Where readers find it.
    pub listing: Listing,
}

/// How a registry lists a manifest's referrers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// Its referrers API (OCI 1.1).
    Api,
    /// The fallback index at this tag (`sha256-HEX`), kept by the writer.
    Tag(OciRef),
}

/// A referrer as a listing describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrer {
    /// Its manifest digest.
    pub digest: String,
    /// What it is (`application/spdx+json`, cosign's signature types...).
    pub artifact_type: String,
}

/// An attached file read back.
#[derive(Debug, Clone)]
pub struct Attachment {
    /// The referrer it came from.
    pub referrer: Referrer,
    /// Its file name, when the referrer gives one.
    pub title: Option<String>,
    /// The file, checked against its digest.
    pub bytes: Vec<u8>,
}

/// The fallback tag listing the referrers of `digest`: `sha256:HEX` → `sha256-HEX`.
fn fallback_tag(subject: &OciRef, digest: &str) -> OciRef {
    OciRef {
        registry: subject.registry.clone(),
        repository: subject.repository.clone(),
        tag: Some(digest.replace(':', "-")),
        digest: None,
    }
}

fn pinned(subject: &OciRef, digest: &str) -> OciRef {
    OciRef {
        registry: subject.registry.clone(),
        repository: subject.repository.clone(),
        tag: None,
        digest: Some(digest.to_string()),
    }
}

fn protocol(reference: &OciRef, problem: String) -> FetchError {
    FetchError::Registry {
        reference: reference.to_string(),
        error: RegistryError::Protocol(problem),
    }
}

/// The artifact manifest carrying `file` of `artifact_type`, named `title`, about `subject`.
fn artifact_manifest(
    artifact_type: &str,
    title: &str,
    file: &(Vec<u8>, String),
    subject: Value,
) -> Vec<u8> {
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": sha256_digest(EMPTY_CONFIG),
            "size": EMPTY_CONFIG.len(),
        },
        "layers": [{
            "mediaType": artifact_type,
            "digest": file.1,
            "size": file.0.len(),
            "annotations": {TITLE: title},
        }],
        "subject": subject,
    });
    serde_json::to_vec(&manifest).unwrap_or_default()
}

/// The referrers an index lists, each with its artifact type (a descriptor without one
/// is listed with its media type, as the spec says a registry lists it).
fn listed(index: &[u8]) -> Result<Vec<Referrer>, String> {
    let index: Value = serde_json::from_slice(index).map_err(|error| error.to_string())?;
    let manifests = index["manifests"]
        .as_array()
        .ok_or("the referrers list is not an image index (no manifests)")?;
    manifests
        .iter()
        .map(|descriptor| {
            let digest = descriptor["digest"]
                .as_str()
                .ok_or("a referrer without a digest")?;
            // It is requested next, by digest: nothing but a digest goes into that path.
            let digest = super::reference::check_digest(digest)
                .map_err(|problem| format!("a referrer's {problem}"))?;
            let artifact_type = descriptor["artifactType"]
                .as_str()
                .or(descriptor["mediaType"].as_str())
                .unwrap_or_default();
            Ok(Referrer {
                digest: digest.to_string(),
                artifact_type: artifact_type.to_string(),
            })
        })
        .collect()
}

/// The one layer of an attached file's manifest, which must be about `subject` (its digest)
/// and of `artifact_type`, refused (unread) past [`MAX_ATTACHMENT_BYTES`].
fn attached_layer(
    manifest: &[u8],
    subject: &str,
    artifact_type: &str,
) -> Result<OciDescriptor, String> {
    let manifest: Value = serde_json::from_slice(manifest).map_err(|error| error.to_string())?;
    if manifest["subject"]["digest"] != subject {
        return Err(format!("it is not attached to {subject}"));
    }
    if manifest["artifactType"] != artifact_type {
        return Err(format!("it is not of type {artifact_type}"));
    }
    let layer = match manifest["layers"].as_array().map(Vec::as_slice) {
        Some([layer]) => layer.clone(),
        _ => return Err("an attached file's manifest has one layer; this one has not".into()),
    };
    let layer: OciDescriptor = serde_json::from_value(layer).map_err(|error| error.to_string())?;
    if layer.media_type != artifact_type {
        return Err(format!("its layer is not of type {artifact_type}"));
    }
    if !(0..=MAX_ATTACHMENT_BYTES).contains(&layer.size) {
        return Err(format!(
            "the attached file is {} bytes; at most {MAX_ATTACHMENT_BYTES} are read",
            layer.size
        ));
    }
    Ok(layer)
}

impl Distribution {
    /// Attach `file` (named `title`, of `artifact_type`) to the manifest `subject` names: an
    /// artifact manifest with `subject` set, pushed by digest, and, on a registry without
    /// the referrers API, added to the fallback index. Attaching the same file again
    /// changes nothing (the same manifest, listed once).
    pub async fn attach(
        &self,
        subject: &OciRef,
        artifact_type: &str,
        title: &str,
        file: Vec<u8>,
    ) -> Result<Attached, FetchError> {
        let (subject_manifest, subject_digest) = self
            .registry()
            .manifest_or_index(subject, MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(subject))?;
        let subject_type = serde_json::from_slice::<Value>(&subject_manifest)
            .ok()
            .and_then(|value| value["mediaType"].as_str().map(str::to_string))
            .unwrap_or_else(|| OCI_MANIFEST.to_string());
        let file_digest = sha256_digest(&file);
        let file = (file, file_digest);
        let config = (EMPTY_CONFIG.to_vec(), sha256_digest(EMPTY_CONFIG));
        let manifest = artifact_manifest(
            artifact_type,
            title,
            &file,
            json!({
                "mediaType": subject_type,
                "digest": subject_digest,
                "size": subject_manifest.len(),
            }),
        );
        let reference = pinned(subject, &sha256_digest(&manifest));
        self.registry()
            .push_manifest(&reference, &[&file, &config], &manifest, OCI_MANIFEST)
            .await
            .map_err(registry_error(&reference))?;
        let listing = self
            .list_in_fallback(
                subject,
                &subject_digest,
                json!({
                    "mediaType": OCI_MANIFEST,
                    "artifactType": artifact_type,
                    "digest": reference.digest,
                    "size": manifest.len(),
                }),
            )
            .await?;
        Ok(Attached {
            subject: subject_digest,
            reference,
            listing,
        })
    }

    /// Add `descriptor` to the fallback index of `digest`, unless the registry lists
    /// referrers itself.
    async fn list_in_fallback(
        &self,
        subject: &OciRef,
        digest: &str,
        descriptor: Value,
    ) -> Result<Listing, FetchError> {
        let registry = self.registry();
        if registry
            .referrers(subject, digest, MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(subject))?
            .is_some()
        {
            return Ok(Listing::Api);
        }
        let tag = fallback_tag(subject, digest);
        let mut manifests = match registry.manifest_or_index(&tag, MAX_MANIFEST_BYTES).await {
            Ok((index, _)) => {
                listed(&index).map_err(|problem| protocol(&tag, problem))?;
                let index: Value = serde_json::from_slice(&index).unwrap_or_default();
                index["manifests"].as_array().cloned().unwrap_or_default()
            }
            Err(RegistryError::NotFound(_)) => Vec::new(),
            Err(error) => return Err(registry_error(&tag)(error)),
        };
        if !manifests
            .iter()
            .any(|listed| listed["digest"] == descriptor["digest"])
        {
            manifests.push(descriptor);
        }
        let index = json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": manifests,
        });
        let index = serde_json::to_vec(&index).unwrap_or_default();
        registry
            .push_manifest(&tag, &[], &index, OCI_INDEX)
            .await
            .map_err(registry_error(&tag))?;
        Ok(Listing::Tag(tag))
    }

    /// The referrers of the manifest `subject` names: from the registry's referrers API, or
    /// the fallback index when it has none (no index: none).
    pub async fn referrers(&self, subject: &OciRef) -> Result<(String, Vec<Referrer>), FetchError> {
        let digest = self.resolve_artifact(subject).await?;
        let registry = self.registry();
        let index = match registry
            .referrers(subject, &digest, MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(subject))?
        {
            Some(index) => index,
            None => {
                let tag = fallback_tag(subject, &digest);
                match registry.manifest_or_index(&tag, MAX_MANIFEST_BYTES).await {
                    Ok((index, _)) => index,
                    Err(RegistryError::NotFound(_)) => return Ok((digest, Vec::new())),
                    Err(error) => return Err(registry_error(&tag)(error)),
                }
            }
        };
        let referrers = listed(&index).map_err(|problem| protocol(subject, problem))?;
        Ok((digest, referrers))
    }

    /// The referrers of `artifact_type` of the manifest `subject` names (its digest first),
    /// each once, at most [`MAX_ATTACHED`]: what [`Distribution::attachment`] reads.
    pub async fn attached(
        &self,
        subject: &OciRef,
        artifact_type: &str,
    ) -> Result<(String, Vec<Referrer>), FetchError> {
        let (digest, referrers) = self.referrers(subject).await?;
        let mut found: Vec<Referrer> = Vec::new();
        for referrer in referrers {
            if referrer.artifact_type == artifact_type && !found.contains(&referrer) {
                found.push(referrer);
            }
        }
        if found.len() > MAX_ATTACHED {
            return Err(protocol(
                subject,
                format!(
                    "{} files of type {artifact_type} are attached; at most {MAX_ATTACHED} are read",
                    found.len()
                ),
            ));
        }
        Ok((digest, found))
    }

    /// The file `referrer` carries, attached to `subject_digest` in `subject`'s repository:
    /// its manifest checked (that subject, that type, one layer within
    /// [`MAX_ATTACHMENT_BYTES`]) before the file is read, the file against its digest.
    pub async fn attachment(
        &self,
        subject: &OciRef,
        subject_digest: &str,
        referrer: &Referrer,
    ) -> Result<Attachment, FetchError> {
        let reference = pinned(subject, &referrer.digest);
        let (manifest, _) = self
            .registry()
            .manifest(&reference, MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(&reference))?;
        let layer = attached_layer(&manifest, subject_digest, &referrer.artifact_type)
            .map_err(|problem| protocol(&reference, problem))?;
        let bytes = self
            .registry()
            .blob(&reference, &layer)
            .await
            .map_err(registry_error(&reference))?;
        let title = layer
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(TITLE).cloned());
        Ok(Attachment {
            referrer: referrer.clone(),
            title,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPDX: &str = "application/spdx+json";

    #[test]
    fn an_artifact_manifest_names_its_subject_and_file_as_oras_writes_it() {
        let file = (
            b"{\"spdxVersion\":\"SPDX-2.3\"}".to_vec(),
            sha256_digest(b"x"),
        );
        let subject = json!({"mediaType": OCI_INDEX, "digest": "sha256:aa", "size": 10});
        let manifest: Value = serde_json::from_slice(&artifact_manifest(
            "application/spdx+json",
            "sbom.spdx.json",
            &file,
            subject.clone(),
        ))
        .unwrap();
        assert_eq!(manifest["artifactType"], "application/spdx+json");
        assert_eq!(manifest["subject"], subject);
        assert_eq!(manifest["config"]["mediaType"], EMPTY_MEDIA_TYPE);
        assert_eq!(manifest["config"]["size"], 2);
        assert_eq!(manifest["layers"][0]["digest"], file.1);
        assert_eq!(
            manifest["layers"][0]["annotations"][TITLE],
            "sbom.spdx.json"
        );
        let referrer = OciRef {
            registry: "r".into(),
            repository: "wasm-ccm".into(),
            tag: Some("0.2.0".into()),
            digest: None,
        };
        assert_eq!(
            fallback_tag(&referrer, "sha256:ab12").to_string(),
            "oci://r/wasm-ccm:sha256-ab12"
        );
    }

    #[test]
    fn an_attached_file_of_another_subject_or_type_or_past_the_bound_is_refused_unread() {
        let file = (vec![0; 10], sha256_digest(&[0; 10]));
        let subject = json!({"mediaType": OCI_INDEX, "digest": "sha256:aa", "size": 10});
        let manifest = artifact_manifest(SPDX, "s.json", &file, subject);
        let layer =
            |manifest: &Value| attached_layer(manifest.to_string().as_bytes(), "sha256:aa", SPDX);
        let mut huge: Value = serde_json::from_slice(&manifest).unwrap();
        assert_eq!(layer(&huge).unwrap().size, 10);
        for (pointer, value, problem) in [
            (
                "/subject/digest",
                json!("sha256:bb"),
                "it is not attached to sha256:aa",
            ),
            (
                "/artifactType",
                json!("text/plain"),
                "it is not of type application/spdx+json",
            ),
            (
                "/layers/0/mediaType",
                json!("application/wasm"),
                "its layer is not of type application/spdx+json",
            ),
        ] {
            let mut other = huge.clone();
            *other.pointer_mut(pointer).unwrap() = value;
            assert_eq!(layer(&other).unwrap_err(), problem);
        }
        huge["layers"][0]["size"] = (MAX_ATTACHMENT_BYTES + 1).into();
        assert_eq!(
            layer(&huge).unwrap_err(),
            format!(
                "the attached file is {} bytes; at most {MAX_ATTACHMENT_BYTES} are read",
                MAX_ATTACHMENT_BYTES + 1
            )
        );
        huge["layers"][0]["size"] = (-1).into();
        assert!(layer(&huge).is_err());
        let one = huge["layers"][0].clone();
        huge["layers"] = json!([one.clone(), one]);
        assert!(layer(&huge).unwrap_err().contains("one layer"));
    }

    #[test]
    fn a_listing_that_is_not_an_index_is_refused() {
        assert!(listed(b"{}").unwrap_err().contains("not an image index"));
        assert!(listed(b"{\"manifests\": [{}]}").is_err());
        assert!(
            listed(b"{\"manifests\": [{\"digest\": \"../../v2/x\"}]}")
                .unwrap_err()
                .starts_with("a referrer's digest")
        );
        let index = json!({"manifests": [
            {"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "1".repeat(64)), "artifactType": "application/spdx+json"},
            {"mediaType": OCI_MANIFEST, "digest": format!("sha256:{}", "2".repeat(64))},
        ]});
        assert_eq!(
            listed(index.to_string().as_bytes()).unwrap(),
            [
                Referrer {
                    digest: format!("sha256:{}", "1".repeat(64)),
                    artifact_type: "application/spdx+json".into()
                },
                Referrer {
                    digest: format!("sha256:{}", "2".repeat(64)),
                    artifact_type: OCI_MANIFEST.into()
                },
            ]
        );
    }
}

//! Distribution: a [`ProviderRef`] turned into the verified bytes of a component, with the
//! identity an operator sees everywhere (the reference and the manifest digest). This module
//! knows references, files, registries, manifests, digests, registry credentials, signatures
//! ([`signature`]: who published a version, checked against the operator's policy before the
//! component is downloaded), files attached to a manifest as OCI referrers (`referrers`) and
//! the artifact cache; nothing about the sandbox or the controllers. The same signing and
//! referrers serve the manager's own release artifacts (its image index, its chart, its SBOM:
//! [`Distribution::sign_artifact`], [`Distribution::attach`]).
//!
//! An `oci://` reference is served from the cache when it can be: a pinned digest whose
//! manifest and component are cached makes no request at all, so the manager starts with the
//! registry down; a tag is resolved with one manifest request on every start, and only what
//! is missing is downloaded.

mod credentials;
pub mod layout;
mod reference;
mod referrers;
mod registry;
pub mod signature;
mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub use credentials::{CredentialsError, RegistryCredentials};
pub use layout::{ComponentWorld, LayoutError, ManifestSummary};
pub use reference::{OciRef, ProviderRef, ReferenceError};
pub use referrers::{Attached, Attachment, Listing, MAX_ATTACHED, MAX_ATTACHMENT_BYTES, Referrer};
pub use registry::RegistryError;
pub use signature::{
    KeyError, PublicKey, Signature, SignatureError, SignaturePolicy, SigningKey, TrustedKeys,
    Verified,
};
pub use store::ArtifactStore;

use registry::RegistryClient;

/// A provider component's bytes and what it is.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The component.
    pub wasm: Arc<[u8]>,
    /// Where it came from and its digest.
    pub identity: Identity,
}

impl Artifact {
    /// A component read by other means (a test, an embedded default), identified by
    /// `reference` and its own sha256.
    pub fn from_bytes(reference: impl Into<String>, wasm: Arc<[u8]>) -> Artifact {
        Artifact {
            identity: Identity {
                reference: reference.into(),
                digest: layout::sha256_digest(&wasm),
                manifest: None,
            },
            wasm,
        }
    }
}

/// What exactly runs: the reference an operator wrote and the digest it resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The reference as given (`file://…`, `oci://…`).
    pub reference: String,
    /// The manifest digest of an OCI artifact; the component's sha256 for a file.
    pub digest: String,
    /// The manifest of an OCI artifact.
    pub manifest: Option<ManifestSummary>,
}

impl Identity {
    /// `file` or `oci`: the `source` of `wasm_ccm_provider_info`.
    pub fn scheme(&self) -> &'static str {
        if self.manifest.is_some() {
            "oci"
        } else {
            "file"
        }
    }
}

/// Why a provider's bytes could not be had. The message starts with the reference.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The file of a `file://` reference cannot be read.
    #[error("{reference}: {error}")]
    File {
        /// The reference as given.
        reference: String,
        /// Why it cannot be read.
        error: std::io::Error,
    },
    /// The registry refused, failed, or served something else than was asked for.
    #[error("{reference}: {error}")]
    Registry {
        /// The reference as given.
        reference: String,
        /// What went wrong.
        error: RegistryError,
    },
    /// The artifact is not a wasm component in the CNCF layout.
    #[error("{reference}: {error}")]
    Layout {
        /// The reference as given.
        reference: String,
        /// What it is instead.
        error: LayoutError,
    },
    /// The signature policy refuses the version (its message starts with the reference).
    #[error(transparent)]
    Signature(SignatureError),
}

/// How references are resolved: `--insecure-registry`, `--registry-config`, `--cache-dir`,
/// and which signatures every version fetched must carry (`--provider-signature-key`).
#[derive(Debug, Clone, Default)]
pub struct DistributionSettings {
    /// Registries (`host:port`) reached over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// Credentials per registry.
    pub credentials: RegistryCredentials,
    /// The artifact cache, if any.
    pub cache: Option<ArtifactStore>,
    /// The operator's signature policy: every version [`Distribution::fetch`] returns is
    /// signed by one of its keys.
    pub signatures: SignaturePolicy,
}

/// Fetches and publishes provider artifacts.
pub struct Distribution {
    insecure_registries: Vec<String>,
    credentials: RegistryCredentials,
    /// Made on first use: a start served from the cache never pays for an HTTP client (it
    /// loads the system's root certificates).
    registry: OnceLock<RegistryClient>,
    cache: Option<ArtifactStore>,
    signatures: SignaturePolicy,
}

/// What `provider push` publishes besides the component.
#[derive(Debug, Clone, Default)]
pub struct PushRequest {
    /// The component's imports and exports, for the artifact's config.
    pub world: ComponentWorld,
    /// `org.opencontainers.image.version`.
    pub version: Option<String>,
    /// `org.opencontainers.image.source`.
    pub source: Option<String>,
    /// `org.opencontainers.image.created`, RFC 3339; now when unset.
    pub created: Option<String>,
}

impl Distribution {
    /// A distribution client with these settings.
    pub fn new(settings: DistributionSettings) -> Distribution {
        Distribution {
            insecure_registries: settings.insecure_registries,
            credentials: settings.credentials,
            registry: OnceLock::new(),
            cache: settings.cache,
            signatures: settings.signatures,
        }
    }

    fn registry(&self) -> &RegistryClient {
        self.registry.get_or_init(|| {
            RegistryClient::new(&self.insecure_registries, self.credentials.clone())
        })
    }

    /// The component `reference` names, verified: its digests, and the operator's
    /// signature policy.
    pub async fn fetch(&self, reference: &ProviderRef) -> Result<Artifact, FetchError> {
        self.fetch_signed(reference, &SignaturePolicy::default())
            .await
    }

    /// As [`Distribution::fetch`], with the signatures `also` requires on top of the
    /// operator's policy (a CloudProvider's `spec.signature`: it tightens, never loosens).
    pub async fn fetch_signed(
        &self,
        reference: &ProviderRef,
        also: &SignaturePolicy,
    ) -> Result<Artifact, FetchError> {
        let mut policy = self.signatures.clone();
        policy.required.extend(also.required.iter().cloned());
        match reference {
            ProviderRef::File(path) => {
                let wasm = tokio::fs::read(path)
                    .await
                    .map_err(|error| FetchError::File {
                        reference: reference.to_string(),
                        error,
                    })?;
                let artifact = Artifact::from_bytes(reference.to_string(), wasm.into());
                self.verify_signatures(reference, &artifact.identity.digest, &policy)
                    .await
                    .map_err(FetchError::Signature)?;
                // The compiled code of earlier files counts against the bound as an OCI
                // version's does; this one's stays.
                if let Some(cache) = &self.cache {
                    cache.evict(&[&artifact.identity.digest]);
                }
                Ok(artifact)
            }
            ProviderRef::Oci(oci) => self.fetch_oci(oci, &policy).await,
        }
    }

    async fn fetch_oci(
        &self,
        oci: &OciRef,
        policy: &SignaturePolicy,
    ) -> Result<Artifact, FetchError> {
        let registry_error = |error| FetchError::Registry {
            reference: oci.to_string(),
            error,
        };
        let cached_manifest = oci.digest.as_ref().and_then(|digest| {
            let cache = self.cache.as_ref()?;
            Some((cache.manifest(digest)?, digest.clone()))
        });
        let from_cache = cached_manifest.is_some();
        let (manifest, digest) = match cached_manifest {
            Some(cached) => cached,
            None => self
                .registry()
                .manifest(oci, layout::MAX_MANIFEST_BYTES)
                .await
                .map_err(registry_error)?,
        };
        let (summary, layer) =
            layout::check_manifest(&manifest, &digest).map_err(|error| FetchError::Layout {
                reference: oci.to_string(),
                error,
            })?;
        // Before the component is downloaded or anything cached: an unsigned version costs
        // the manifest only.
        self.verify_signatures(&ProviderRef::Oci(oci.clone()), &digest, policy)
            .await
            .map_err(FetchError::Signature)?;
        let cached_layer = self.cache.as_ref().and_then(|c| c.blob(&layer.digest));
        let wrote_layer = cached_layer.is_none();
        let wasm = match cached_layer {
            Some(wasm) => wasm,
            None => {
                let wasm = self
                    .registry()
                    .blob(oci, &layer)
                    .await
                    .map_err(registry_error)?;
                self.remember(|cache| cache.put_blob(&layer.digest, &wasm));
                wasm
            }
        };
        // A manifest read from the cache is there already (and marked used by the read);
        // the bound is checked only when something was written.
        if !from_cache {
            self.remember(|cache| cache.put_manifest(&digest, &manifest));
        }
        if let Some(cache) = &self.cache
            && (wrote_layer || !from_cache)
        {
            cache.evict(&[&digest]);
        }
        Ok(Artifact {
            wasm: wasm.into(),
            identity: Identity {
                reference: oci.to_string(),
                digest,
                manifest: Some(summary),
            },
        })
    }

    /// Write to the cache; a failure costs a download next time, so it only warns.
    fn remember(&self, write: impl FnOnce(&ArtifactStore) -> std::io::Result<()>) {
        if let Some(cache) = &self.cache
            && let Err(error) = write(cache)
        {
            tracing::warn!("cannot write the artifact cache: {error}");
        }
    }

    /// The manifest digest `oci` names now (a tag resolved, a pinned digest checked): one
    /// manifest request, never served from the cache, nothing downloaded or cached. Used by
    /// `provider verify` and by the rollout's check for a moved tag.
    pub async fn resolve(&self, oci: &OciRef) -> Result<String, FetchError> {
        let (_, digest) = self
            .registry()
            .manifest(oci, layout::MAX_MANIFEST_BYTES)
            .await
            .map_err(|error| FetchError::Registry {
                reference: oci.to_string(),
                error,
            })?;
        Ok(digest)
    }

    /// The digest of whatever manifest `oci` names, an image index too: the manager's own
    /// release artifacts, which `wasm-ccm artifact` signs and checks.
    pub async fn resolve_artifact(&self, oci: &OciRef) -> Result<String, FetchError> {
        let (_, digest) = self
            .registry()
            .manifest_or_index(oci, layout::MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(oci))?;
        Ok(digest)
    }

    /// Whether `oci`'s registry answers, over the protocol it is reached by, and takes the
    /// credentials for a push; `provider push` asks before it compiles.
    pub async fn check_push(&self, oci: &OciRef) -> Result<(), FetchError> {
        self.registry()
            .check_push(oci)
            .await
            .map_err(|error| FetchError::Registry {
                reference: oci.to_string(),
                error,
            })
    }

    /// Publish `wasm` as `oci` in the CNCF wasm layout; returns the manifest digest.
    pub async fn push(
        &self,
        wasm: Vec<u8>,
        oci: &OciRef,
        request: &PushRequest,
    ) -> Result<String, FetchError> {
        let created = request.created.clone().unwrap_or_else(|| {
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        });
        let mut annotations = BTreeMap::new();
        annotations.insert(layout::annotation::CREATED.to_string(), created.clone());
        if let Some(version) = &request.version {
            annotations.insert(layout::annotation::VERSION.to_string(), version.clone());
        }
        if let Some(source) = &request.source {
            annotations.insert(layout::annotation::SOURCE.to_string(), source.clone());
        }
        let packed = layout::pack(wasm, &request.world, &created, annotations);
        self.registry()
            .push(oci, &packed)
            .await
            .map_err(|error| FetchError::Registry {
                reference: oci.to_string(),
                error,
            })?;
        Ok(packed.manifest.1)
    }
}

/// Why a signature could not be made or published (`provider sign`).
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The artifact to sign, or its signature artifact, could not be read or written.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// The key could not sign.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The signature artifact there cannot take another signature.
    #[error("{reference}: {problem}")]
    Existing {
        /// The signature artifact's reference.
        reference: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// A signature `provider sign` published.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The manifest digest signed.
    pub digest: String,
    /// Where the signatures live: `oci://REGISTRY/REPO:sha256-HEX.sig`.
    pub signatures: OciRef,
    /// How many signatures it now holds.
    pub count: usize,
}

/// Why the signature artifact of a digest could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureReadError {
    /// The registry failed (may pass).
    Unavailable(String),
    /// The artifact is there but malformed or over a bound.
    Malformed(String),
}

impl std::fmt::Display for SignatureReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignatureReadError::Unavailable(text) | SignatureReadError::Malformed(text) => {
                f.write_str(text)
            }
        }
    }
}

/// A registry failure on `reference`, as a [`FetchError`] naming it.
fn registry_error(reference: &OciRef) -> impl FnOnce(RegistryError) -> FetchError + use<> {
    let reference = reference.to_string();
    move |error| FetchError::Registry { reference, error }
}

/// The reference of the signature artifact of `digest` in `oci`'s repository.
fn signature_ref(oci: &OciRef, digest: &str) -> OciRef {
    OciRef {
        registry: oci.registry.clone(),
        repository: oci.repository.clone(),
        tag: Some(signature::signature_tag(digest)),
        digest: None,
    }
}

impl Distribution {
    /// The signatures of the manifest `digest` in `oci`'s repository (its `sha256-HEX.sig`
    /// artifact); `None` when there is none. Payloads are read within
    /// [`signature::MAX_PAYLOAD_BYTES`]; one that cannot be read is kept with its problem.
    pub async fn signatures(
        &self,
        oci: &OciRef,
        digest: &str,
    ) -> Result<Option<Vec<Signature>>, SignatureReadError> {
        let signatures = signature_ref(oci, digest);
        let manifest = match self
            .registry()
            .manifest(&signatures, signature::MAX_SIGNATURE_MANIFEST_BYTES as u64)
            .await
        {
            Ok((manifest, _)) => manifest,
            Err(RegistryError::NotFound(_)) => return Ok(None),
            Err(error) => return Err(SignatureReadError::Unavailable(error.to_string())),
        };
        let layers =
            signature::signature_layers(&manifest).map_err(SignatureReadError::Malformed)?;
        let mut found = Vec::with_capacity(layers.len());
        for signature::SignatureLayer {
            descriptor: layer,
            signature,
        } in layers
        {
            let payload = if layer.size < 0 || layer.size > signature::MAX_PAYLOAD_BYTES {
                Err(format!(
                    "layer {}: the payload is {} bytes; at most {} are read",
                    layer.digest,
                    layer.size,
                    signature::MAX_PAYLOAD_BYTES
                ))
            } else {
                match self.registry().blob(&signatures, &layer).await {
                    Ok(payload) => Ok(payload),
                    Err(
                        error @ (RegistryError::Unreachable { .. }
                        | RegistryError::Tls { .. }
                        | RegistryError::Unauthorized(_)
                        | RegistryError::Denied(_)),
                    ) => return Err(SignatureReadError::Unavailable(error.to_string())),
                    Err(error) => Err(format!("layer {}: {error}", layer.digest)),
                }
            };
            found.push(Signature { payload, signature });
        }
        Ok(Some(found))
    }

    /// Check `policy` for the version `reference` resolved to `digest`. A digest the cache
    /// records as verified with keys that meet the policy costs no request and no signature
    /// check; a verdict reached here is recorded.
    pub async fn verify_signatures(
        &self,
        reference: &ProviderRef,
        digest: &str,
        policy: &SignaturePolicy,
    ) -> Result<Verified, SignatureError> {
        if !policy.is_required() {
            return Ok(Verified {
                keys: Vec::new(),
                cached: false,
            });
        }
        let oci = match reference {
            ProviderRef::File(_) => {
                return Err(SignatureError::file(&reference.to_string(), digest, policy));
            }
            ProviderRef::Oci(oci) => oci,
        };
        if let Some(cache) = &self.cache {
            let known = cache.verified_keys(digest);
            if policy.met_by(&known) {
                return Ok(Verified {
                    keys: known,
                    cached: true,
                });
            }
        }
        let found = match self.signatures(oci, digest).await {
            Ok(found) => found,
            Err(SignatureReadError::Unavailable(error)) => {
                return Err(SignatureError::Unavailable {
                    reference: reference.to_string(),
                    digest: digest.to_string(),
                    tag: signature::signature_tag(digest),
                    error,
                });
            }
            Err(SignatureReadError::Malformed(problem)) => {
                return Err(SignatureError::Invalid {
                    reference: reference.to_string(),
                    digest: digest.to_string(),
                    keys: policy.describe(),
                    detail: problem,
                });
            }
        };
        let verified = signature::verify(policy, &reference.to_string(), digest, found.as_deref())?;
        self.remember(|cache| cache.put_verified_keys(digest, &verified.keys));
        Ok(verified)
    }

    /// Sign the provider `oci` names with `key` and publish the signature in the cosign
    /// layout: appended to the signature artifact of its digest, which is made if missing.
    /// What `oci` names must be a provider (a component in the wasm layout).
    pub async fn sign(&self, oci: &OciRef, key: &SigningKey) -> Result<Signed, SignError> {
        let (manifest, digest) = self
            .registry()
            .manifest(oci, layout::MAX_MANIFEST_BYTES)
            .await
            .map_err(registry_error(oci))?;
        layout::check_manifest(&manifest, &digest).map_err(|error| FetchError::Layout {
            reference: oci.to_string(),
            error,
        })?;
        self.sign_digest(oci, digest, key).await
    }

    /// Sign whatever manifest `oci` names (an image, an image index, a Helm chart) with
    /// `key`, as [`Distribution::sign`] signs a provider: the manager's own release artifacts.
    pub async fn sign_artifact(&self, oci: &OciRef, key: &SigningKey) -> Result<Signed, SignError> {
        let digest = self.resolve_artifact(oci).await?;
        self.sign_digest(oci, digest, key).await
    }

    async fn sign_digest(
        &self,
        oci: &OciRef,
        digest: String,
        key: &SigningKey,
    ) -> Result<Signed, SignError> {
        let signatures = signature_ref(oci, &digest);
        let mut layers: Vec<serde_json::Value> = match self
            .registry()
            .manifest(&signatures, signature::MAX_SIGNATURE_MANIFEST_BYTES as u64)
            .await
        {
            Err(RegistryError::NotFound(_)) => Vec::new(),
            Err(error) => return Err(registry_error(&signatures)(error).into()),
            Ok((existing, _)) => {
                let existing_error = |problem: String| SignError::Existing {
                    reference: signatures.to_string(),
                    problem,
                };
                signature::signature_layers(&existing).map_err(existing_error)?;
                let value: serde_json::Value = serde_json::from_slice(&existing)
                    .map_err(|error| existing_error(error.to_string()))?;
                let layers = value["layers"].as_array().cloned().unwrap_or_default();
                if layers.len() >= signature::MAX_SIGNATURES {
                    return Err(existing_error(format!(
                        "it holds {} signatures already, the most a verifier reads",
                        layers.len()
                    )));
                }
                layers
            }
        };
        let repository = format!("{}/{}", oci.registry, oci.repository);
        let payload = signature::Payload::new(&repository, &digest).to_bytes();
        let signed = key.sign(&payload)?;
        layers.push(signature::signature_layer(&payload, &signed));
        let layer_digests: Vec<String> = layers
            .iter()
            .filter_map(|layer| layer["digest"].as_str().map(str::to_string))
            .collect();
        let config = signature::signature_config(&layer_digests);
        let manifest = signature::signature_manifest(&config, &layers);
        let payload_digest = layout::sha256_digest(&payload);
        let config_digest = layout::sha256_digest(&config);
        self.registry()
            .push_manifest(
                &signatures,
                &[&(payload, payload_digest), &(config, config_digest)],
                &manifest,
                layout::OCI_MANIFEST,
            )
            .await
            .map_err(registry_error(&signatures))?;
        Ok(Signed {
            digest,
            count: layers.len(),
            signatures,
        })
    }
}

/// Where the compiled code of `settings`' cache lives, for the sandbox.
pub fn compiled_dir(settings: &DistributionSettings) -> Option<PathBuf> {
    settings.cache.as_ref().map(ArtifactStore::compiled_dir)
}

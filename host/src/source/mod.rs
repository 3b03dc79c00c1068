//! Distribution: a [`ProviderRef`] turned into the verified bytes of a component, with the
//! identity an operator sees everywhere (the reference and the manifest digest). This module
//! knows references, files, registries, manifests, digests, registry credentials and the
//! artifact cache; nothing about the sandbox or the controllers.
//!
//! An `oci://` reference is served from the cache when it can be: a pinned digest whose
//! manifest and component are cached makes no request at all, so the manager starts with the
//! registry down; a tag is resolved with one manifest request on every start, and only what
//! is missing is downloaded.

mod credentials;
pub mod layout;
mod reference;
mod registry;
mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pub use credentials::{CredentialsError, RegistryCredentials};
pub use layout::{ComponentWorld, LayoutError, ManifestSummary};
pub use reference::{OciRef, ProviderRef, ReferenceError};
pub use registry::RegistryError;
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
}

/// How references are resolved: `--insecure-registry`, `--registry-config`, `--cache-dir`.
#[derive(Debug, Clone, Default)]
pub struct DistributionSettings {
    /// Registries (`host:port`) reached over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// Credentials per registry.
    pub credentials: RegistryCredentials,
    /// The artifact cache, if any.
    pub cache: Option<ArtifactStore>,
}

/// Fetches and publishes provider artifacts.
pub struct Distribution {
    insecure_registries: Vec<String>,
    credentials: RegistryCredentials,
    /// Made on first use: a start served from the cache never pays for an HTTP client (it
    /// loads the system's root certificates).
    registry: OnceLock<RegistryClient>,
    cache: Option<ArtifactStore>,
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
        }
    }

    fn registry(&self) -> &RegistryClient {
        self.registry.get_or_init(|| {
            RegistryClient::new(&self.insecure_registries, self.credentials.clone())
        })
    }

    /// The component `reference` names, verified.
    pub async fn fetch(&self, reference: &ProviderRef) -> Result<Artifact, FetchError> {
        match reference {
            ProviderRef::File(path) => {
                let wasm = tokio::fs::read(path)
                    .await
                    .map_err(|error| FetchError::File {
                        reference: reference.to_string(),
                        error,
                    })?;
                Ok(Artifact::from_bytes(reference.to_string(), wasm.into()))
            }
            ProviderRef::Oci(oci) => self.fetch_oci(oci).await,
        }
    }

    async fn fetch_oci(&self, oci: &OciRef) -> Result<Artifact, FetchError> {
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
                .manifest(oci)
                .await
                .map_err(registry_error)?,
        };
        let (summary, layer) =
            layout::check_manifest(&manifest, &digest).map_err(|error| FetchError::Layout {
                reference: oci.to_string(),
                error,
            })?;
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

/// Where the compiled code of `settings`' cache lives, for the sandbox.
pub fn compiled_dir(settings: &DistributionSettings) -> Option<PathBuf> {
    settings.cache.as_ref().map(ArtifactStore::compiled_dir)
}

//! Where provider bytes come from: a [`ProviderRef`] turned into the bytes of a component,
//! with the reference it was read from. This module knows references, files and (to come)
//! registries, digests and the artifact cache; nothing about the sandbox or the controllers.

mod reference;

use std::sync::Arc;

pub use reference::{OciRef, ProviderRef, ReferenceError};

/// A provider component's bytes and where they came from.
#[derive(Debug, Clone)]
pub struct Artifact {
    /// The component.
    pub wasm: Arc<[u8]>,
    /// The reference it was read from, for messages and the provider's identity.
    pub origin: String,
}

/// Why a provider's bytes could not be had.
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
    /// An `oci://` reference: pulling from registries is not built yet.
    #[error(
        "{reference}: pulling providers from OCI registries is not supported yet; use file://PATH"
    )]
    OciUnsupported {
        /// The reference as given.
        reference: String,
    },
}

/// The component `reference` names.
pub async fn fetch(reference: &ProviderRef) -> Result<Artifact, FetchError> {
    match reference {
        ProviderRef::File(path) => {
            let wasm = tokio::fs::read(path)
                .await
                .map_err(|error| FetchError::File {
                    reference: reference.to_string(),
                    error,
                })?;
            Ok(Artifact {
                wasm: wasm.into(),
                origin: reference.to_string(),
            })
        }
        ProviderRef::Oci(oci) => Err(FetchError::OciUnsupported {
            reference: oci.to_string(),
        }),
    }
}

//! The cloud configuration: the bytes of `--cloud-config` the operator gave the manager.
//!
//! It is configuration, not a secret store: credentials are injected by the host into
//! requests and never reach the provider.

use serde::de::DeserializeOwned;

use crate::Error;
use crate::bindings::wasm_ccm::provider::host;

/// The raw bytes, if a cloud configuration was given.
pub fn raw() -> Option<Vec<u8>> {
    host::cloud_config()
}

/// The configuration parsed as JSON, or `T::default()` when none was given.
pub fn json_or_default<T: DeserializeOwned + Default>() -> Result<T, Error> {
    parse(raw())
}

/// Parse configuration bytes as JSON; `None` gives `T::default()`.
pub fn parse<T: DeserializeOwned + Default>(bytes: Option<Vec<u8>>) -> Result<T, Error> {
    match bytes {
        None => Ok(T::default()),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|err| Error::other(format!("invalid cloud config: {err}"))),
    }
}

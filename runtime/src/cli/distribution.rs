//! Where providers come from: the registry flags every command that talks to a registry
//! shares (`--insecure-registry`, `--registry-config`: [`RegistryFlags`]), the cache flags
//! of those that read or publish a provider (`--cache-dir`, `--cache-max-size`:
//! [`DistributionFlags`]), and how a command-line reference is read.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::units::parse_size;
use wasm_ccm_host::source::{
    ArtifactStore, Distribution, DistributionSettings, ProviderRef, RegistryCredentials,
};

/// Registries and their credentials: what every command that talks to a registry takes,
/// and all the `artifact` subcommands take (they check a release against its registry,
/// never a copy).
#[derive(Debug, Clone, Args)]
pub struct RegistryFlags {
    /// A registry (HOST:PORT) reached over plain HTTP instead of HTTPS. Repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT", value_parser = registry_host, help_heading = "Registry")]
    pub insecure_registries: Vec<String>,

    /// Registry credentials: a docker config JSON file (as `docker login` writes it, or the
    /// `.dockerconfigjson` key of a kubernetes.io/dockerconfigjson Secret).
    #[arg(long, value_name = "FILE", help_heading = "Registry")]
    pub registry_config: Option<PathBuf>,
}

impl RegistryFlags {
    /// The settings these flags describe, without a cache: reads `--registry-config`,
    /// naming the flag in any error.
    pub fn settings(&self) -> anyhow::Result<DistributionSettings> {
        let credentials = match &self.registry_config {
            None => RegistryCredentials::default(),
            Some(path) => RegistryCredentials::from_file(path)
                .map_err(|error| anyhow::anyhow!("--registry-config {error}"))?,
        };
        Ok(DistributionSettings {
            insecure_registries: self.insecure_registries.clone(),
            credentials,
            cache: None,
            signatures: Default::default(),
        })
    }

    /// A distribution client for these flags, reading nothing from a cache.
    pub fn distribution(&self) -> anyhow::Result<Distribution> {
        Ok(Distribution::new(self.settings()?))
    }
}

/// Registries, their credentials, and the artifact cache.
#[derive(Debug, Clone, Args)]
pub struct DistributionFlags {
    /// Registries and their credentials.
    #[command(flatten)]
    pub registry: RegistryFlags,

    /// Directory that keeps pulled providers (by digest) and their compiled code, so a
    /// restart neither downloads nor compiles; shareable by processes on one node. Compiled
    /// code is sealed with a key kept in it (`key`, this user's, mode 0600).
    #[arg(long, value_name = "DIR", help_heading = "Registry")]
    pub cache_dir: Option<PathBuf>,

    /// Most bytes --cache-dir may hold; the least recently used versions not in use go
    /// first (e.g. 512Mi).
    #[arg(long, value_name = "SIZE", default_value = "512Mi", value_parser = parse_size, help_heading = "Registry")]
    pub cache_max_size: u64,
}

impl DistributionFlags {
    /// The settings these flags describe: the registry flags' and `--cache-dir` opened,
    /// naming the flag in any error.
    pub fn settings(&self) -> anyhow::Result<DistributionSettings> {
        let mut settings = self.registry.settings()?;
        settings.cache = match &self.cache_dir {
            None => None,
            Some(dir) => Some(
                ArtifactStore::open(dir, self.cache_max_size)
                    .with_context(|| format!("--cache-dir {}", dir.display()))?,
            ),
        };
        Ok(settings)
    }

    /// A distribution client for these flags.
    pub fn distribution(&self) -> anyhow::Result<Distribution> {
        Ok(Distribution::new(self.settings()?))
    }
}

/// A provider reference as the `provider` subcommands take it: `file://PATH`, `oci://…`,
/// or a plain path to a file.
pub fn parse_reference(text: &str) -> anyhow::Result<ProviderRef> {
    if text.contains("://") {
        return text.parse().map_err(|error| anyhow::anyhow!("{error}"));
    }
    if text.is_empty() {
        anyhow::bail!("the provider is empty: give a FILE, file://PATH or oci://REGISTRY/REPO:TAG");
    }
    Ok(ProviderRef::File(PathBuf::from(text)))
}

fn registry_host(text: &str) -> Result<String, String> {
    let probe = format!("oci://{text}/probe:v");
    match probe.parse::<ProviderRef>() {
        Ok(ProviderRef::Oci(oci)) if oci.registry == text && text.contains(':') => {
            Ok(text.to_string())
        }
        _ => Err(format!(
            "{text:?} is not HOST:PORT of a registry (e.g. 127.0.0.1:5000, registry.local:80)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insecure_registries_are_host_and_port() {
        assert_eq!(registry_host("127.0.0.1:5000").unwrap(), "127.0.0.1:5000");
        assert_eq!(registry_host("[::1]:5000").unwrap(), "[::1]:5000");
        for bad in ["127.0.0.1", "http://r:5000", "r:5000/x", "r:0", ""] {
            assert!(registry_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subcommands_take_plain_paths_as_files() {
        assert_eq!(
            parse_reference("simcloud.wasm").unwrap(),
            ProviderRef::File("simcloud.wasm".into())
        );
        assert!(matches!(
            parse_reference("oci://127.0.0.1:5000/p/simcloud:v1").unwrap(),
            ProviderRef::Oci(_)
        ));
        let error = parse_reference("oci://127.0.0.1:5000/p/simcloud").unwrap_err();
        assert!(error.to_string().contains("does not assume :latest"));
    }
}

//! Where providers come from: the registry flags every command that talks to a registry
//! shares (`--insecure-registry`, `--registry-config`: [`RegistryFlags`]), the cache flags
//! of those that read or publish a provider (`--cache-dir`, `--no-cache`, `--cache-max-size`:
//! [`DistributionFlags`]; the cache is the user's cache directory unless a flag says
//! otherwise), and how a command-line reference is read.

use std::ffi::OsString;
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
    /// code is sealed with a key kept in it (`key`, this user's, mode 0600). Without it, the
    /// user's cache directory: $XDG_CACHE_HOME/wasm-ccm, else $HOME/.cache/wasm-ccm.
    #[arg(long, value_name = "DIR", help_heading = "Registry")]
    pub cache_dir: Option<PathBuf>,

    /// Keep no cache: every start downloads and compiles its provider again.
    #[arg(long, conflicts_with = "cache_dir", help_heading = "Registry")]
    pub no_cache: bool,

    /// Most bytes the cache may hold; the least recently used versions not in use go
    /// first (e.g. 512Mi).
    #[arg(long, value_name = "SIZE", default_value = "512Mi", value_parser = parse_size, help_heading = "Registry")]
    pub cache_max_size: u64,
}

/// Where the cache is, and who chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CacheChoice {
    /// `--cache-dir`: a directory that cannot be used stops the command.
    Named(PathBuf),
    /// The user's cache directory: one that cannot be used is warned about, and the command
    /// runs without a cache.
    Default(PathBuf),
    /// `--no-cache`, or no user cache directory is known.
    None,
}

impl DistributionFlags {
    /// The settings these flags describe: the registry flags' and the cache opened,
    /// naming the flag in any error.
    pub fn settings(&self) -> anyhow::Result<DistributionSettings> {
        let mut settings = self.registry.settings()?;
        settings.cache = self.open_cache(self.cache_choice(|name| std::env::var_os(name)))?;
        Ok(settings)
    }

    /// The cache `choice` names, opened; `None` if there is none, or the user's cache
    /// directory cannot be used (warned about). Err: `--cache-dir` cannot be used.
    fn open_cache(&self, choice: CacheChoice) -> anyhow::Result<Option<ArtifactStore>> {
        Ok(match choice {
            CacheChoice::Named(dir) => Some(
                ArtifactStore::open(&dir, self.cache_max_size)
                    .with_context(|| format!("--cache-dir {}", dir.display()))?,
            ),
            CacheChoice::Default(dir) => match ArtifactStore::open(&dir, self.cache_max_size) {
                Ok(store) => Some(store),
                Err(error) => {
                    tracing::warn!(
                        dir = %dir.display(),
                        %error,
                        "the user's cache directory cannot be used: running without a cache, so \
                         every start downloads and compiles its provider again (set --cache-dir \
                         to a writable directory, or --no-cache)"
                    );
                    None
                }
            },
            CacheChoice::None => None,
        })
    }

    /// A distribution client for these flags.
    pub fn distribution(&self) -> anyhow::Result<Distribution> {
        Ok(Distribution::new(self.settings()?))
    }

    /// `--cache-dir`, else none with `--no-cache`, else the user's cache directory as the
    /// XDG base directory specification places it (`var` reads the environment).
    fn cache_choice(&self, var: impl Fn(&str) -> Option<OsString>) -> CacheChoice {
        if let Some(dir) = &self.cache_dir {
            return CacheChoice::Named(dir.clone());
        }
        if self.no_cache {
            return CacheChoice::None;
        }
        match user_cache_dir(var) {
            Some(dir) => CacheChoice::Default(dir.join("wasm-ccm")),
            None => {
                tracing::warn!(
                    "neither XDG_CACHE_HOME nor HOME is an absolute path: running without a \
                     cache, so every start downloads and compiles its provider again (set \
                     --cache-dir, or --no-cache)"
                );
                CacheChoice::None
            }
        }
    }
}

/// `$XDG_CACHE_HOME`, else `$HOME/.cache`; a variable unset, empty or relative is ignored,
/// as the XDG base directory specification says.
fn user_cache_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |name: &str| {
        var(name)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".cache")))
}

/// A provider reference as the `provider` subcommands take it: `file://PATH`, `oci://…`,
/// or a plain path to a file. A relative path is made absolute (the working directory's),
/// so what the commands print of it (`file:///home/me/p.wasm`) is a well-formed URL that
/// names the file from anywhere.
pub fn parse_reference(text: &str) -> anyhow::Result<ProviderRef> {
    let reference = if text.contains("://") {
        text.parse().map_err(|error| anyhow::anyhow!("{error}"))?
    } else if text.is_empty() {
        anyhow::bail!("the provider is empty: give a FILE, file://PATH or oci://REGISTRY/REPO:TAG");
    } else {
        ProviderRef::File(PathBuf::from(text))
    };
    Ok(match reference {
        ProviderRef::File(path) => ProviderRef::File(
            std::path::absolute(&path)
                .with_context(|| format!("the provider file {}", path.display()))?,
        ),
        other => other,
    })
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
    use clap::Parser;

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
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            parse_reference("simcloud.wasm").unwrap(),
            ProviderRef::File(here.join("simcloud.wasm"))
        );
        assert_eq!(
            parse_reference("file://target/simcloud.wasm")
                .unwrap()
                .to_string(),
            format!("file://{}", here.join("target/simcloud.wasm").display()),
            "printed as a URL with an absolute path"
        );
        assert_eq!(
            parse_reference("/opt/p.wasm").unwrap(),
            ProviderRef::File("/opt/p.wasm".into())
        );
        assert!(matches!(
            parse_reference("oci://127.0.0.1:5000/p/simcloud:v1").unwrap(),
            ProviderRef::Oci(_)
        ));
        let error = parse_reference("oci://127.0.0.1:5000/p/simcloud").unwrap_err();
        assert!(error.to_string().contains("does not assume :latest"));
    }

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        distribution: DistributionFlags,
    }

    fn choice(args: &[&str], env: &[(&str, &str)]) -> CacheChoice {
        let flags = Flags::try_parse_from(std::iter::once("wasm-ccm").chain(args.iter().copied()))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"));
        flags.distribution.cache_choice(|name| {
            env.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| OsString::from(value))
        })
    }

    #[test]
    fn the_cache_is_the_users_unless_a_flag_names_one_or_none() {
        let home = [("HOME", "/home/op")];
        let default = |dir: &str| CacheChoice::Default(PathBuf::from(dir));
        assert_eq!(choice(&[], &home), default("/home/op/.cache/wasm-ccm"));
        assert_eq!(
            choice(&[], &[("XDG_CACHE_HOME", "/var/cache/op"), home[0]]),
            default("/var/cache/op/wasm-ccm")
        );
        // Unset, empty or relative: ignored, as the XDG specification says.
        for xdg in ["", "cache"] {
            assert_eq!(
                choice(&[], &[("XDG_CACHE_HOME", xdg), home[0]]),
                default("/home/op/.cache/wasm-ccm"),
                "{xdg:?}"
            );
        }
        assert_eq!(choice(&[], &[("HOME", "op")]), CacheChoice::None);
        assert_eq!(choice(&[], &[]), CacheChoice::None);
        assert_eq!(choice(&["--no-cache"], &home), CacheChoice::None);
        assert_eq!(
            choice(&["--cache-dir", "/srv/c"], &home),
            CacheChoice::Named("/srv/c".into())
        );
        let both = Flags::try_parse_from(["wasm-ccm", "--cache-dir", "/srv/c", "--no-cache"]);
        let error = both
            .err()
            .expect("--no-cache with --cache-dir is refused")
            .to_string();
        assert!(
            error.contains("--no-cache") && error.contains("--cache-dir"),
            "{error}"
        );
    }

    #[test]
    fn a_default_cache_that_cannot_be_made_leaves_the_command_running_without_one() {
        // A file where the directory would be: the default is given up, not the command.
        let file = tempfile::NamedTempFile::new().unwrap();
        let flags = DistributionFlags {
            registry: RegistryFlags {
                insecure_registries: Vec::new(),
                registry_config: None,
            },
            cache_dir: None,
            no_cache: false,
            cache_max_size: 1 << 20,
        };
        let store = ArtifactStore::open(&file.path().join("wasm-ccm"), 1 << 20);
        assert!(store.is_err(), "a directory under a file cannot be made");
        assert!(
            flags
                .open_cache(CacheChoice::Default(file.path().join("wasm-ccm")))
                .unwrap()
                .is_none()
        );
        let named = flags.open_cache(CacheChoice::Named(file.path().join("wasm-ccm")));
        let error = format!("{:#}", named.unwrap_err());
        assert!(error.starts_with("--cache-dir "), "{error}");
    }
}

//! The cloud configuration (`--cloud-config`): where the simulator's API is and whether load
//! balancers use the PROXY protocol. Parsed and validated by `init`, re-read by every call.

use serde::Deserialize;
use wasm_ccm_sdk::Error;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL of the simulator, without a trailing slash.
    pub api_url: String,
    /// Whether load balancers send the PROXY protocol to their targets.
    pub proxy_protocol: bool,
}

/// The configuration as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    api_url: Option<String>,
    #[serde(default)]
    proxy_protocol: bool,
}

impl Config {
    /// The configuration given to this provider version.
    pub fn load() -> Result<Config, Error> {
        Config::parse(wasm_ccm_sdk::config::raw())
    }

    /// Parse and validate configuration bytes; no configuration at all lacks `api_url`.
    pub fn parse(bytes: Option<Vec<u8>>) -> Result<Config, Error> {
        let raw: RawConfig = wasm_ccm_sdk::config::parse(bytes)?;
        let api_url = raw.api_url.ok_or_else(|| {
            Error::other("simcloud cloud config: \"api_url\" is required (set --cloud-config)")
        })?;
        Ok(Config {
            api_url: validated_url(&api_url)?,
            proxy_protocol: raw.proxy_protocol,
        })
    }
}

/// `url` without trailing slashes if it is an absolute `http(s)://host[...]` URL.
fn validated_url(url: &str) -> Result<String, Error> {
    let invalid = || {
        Error::other(format!(
            "simcloud cloud config: \"api_url\" must be an http:// or https:// URL without query, got {url:?}"
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let http = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    let authority_missing = rest.is_empty() || rest.starts_with('/');
    if !http || authority_missing || rest.contains(['?', '#', '@']) {
        return Err(invalid());
    }
    Ok(url.trim_end_matches('/').to_string())
}

//! The cloud configuration (`--cloud-config`): where the simulator's API is, the name the
//! provider reports, whether load balancers use the PROXY protocol and the node label keys
//! Services may choose their targets by. Parsed and validated by `init`, re-read by every
//! call.

use serde::Deserialize;
use wasm_ccm_sdk::Error;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Base URL of the simulator, without a trailing slash.
    pub api_url: String,
    /// The name `init` reports, and the scheme of provider IDs: `simcloud` unless the
    /// configuration names another cloud (a second simulator run as another provider).
    pub name: String,
    /// Whether load balancers send the PROXY protocol to their targets.
    pub proxy_protocol: bool,
    /// The node label keys a Service's target-node-labels annotation may name: the labels
    /// `init` declares in `node-metadata`, so the host passes them (and no other).
    pub target_node_label_keys: Vec<String>,
}

/// The field listing the node label keys the target-node-labels annotation may name.
pub const TARGET_NODE_LABEL_KEYS: &str = "target_node_label_keys";

/// The configuration as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    api_url: Option<String>,
    name: Option<String>,
    #[serde(default)]
    proxy_protocol: bool,
    /// Read as any JSON value so a wrong type gets an error naming the field.
    target_node_label_keys: Option<serde_json::Value>,
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
            name: validated_name(raw.name)?,
            proxy_protocol: raw.proxy_protocol,
            target_node_label_keys: label_keys(raw.target_node_label_keys)?,
        })
    }
}

/// `target_node_label_keys`: a list of distinct Kubernetes label keys, if given.
fn label_keys(value: Option<serde_json::Value>) -> Result<Vec<String>, Error> {
    wasm_ccm_sdk::labels::label_keys(value).map_err(|error| {
        Error::other(format!(
            "simcloud cloud config: \"{TARGET_NODE_LABEL_KEYS}\" must be a list of node label \
             keys such as [\"node-role.example.com/lb\"]: {error}"
        ))
    })
}

/// `name` if it is a DNS label (a provider's name must be); `simcloud` if none is given.
fn validated_name(name: Option<String>) -> Result<String, Error> {
    let Some(name) = name else {
        return Ok(DEFAULT_NAME.to_string());
    };
    let label = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !label {
        return Err(Error::other(format!(
            "simcloud cloud config: \"name\" must be a DNS label (lowercase letters, digits, '-'), got {name:?}"
        )));
    }
    Ok(name)
}

/// The name reported when the configuration names none.
pub const DEFAULT_NAME: &str = "simcloud";

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

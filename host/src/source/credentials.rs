//! Registry credentials from a docker config JSON file (`--registry-config`): the file
//! `docker login` writes and a Kubernetes `kubernetes.io/dockerconfigjson` Secret holds, or
//! the older `.dockercfg` form without the `auths` wrapper.
//!
//! Like cloud credentials they stay in the host: they are never passed to a provider, and
//! `Debug` prints the registries they are for, never their values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// How the manager authenticates to one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// HTTP basic auth, or a password offered at a bearer-token exchange (as oci-client
    /// does it).
    Basic {
        /// User name.
        username: String,
        /// Password or access token.
        password: String,
    },
    /// A registry token sent as `Authorization: Bearer` (`registrytoken` in the file).
    Bearer(String),
}

/// Credentials per registry host (`host[:port]`).
#[derive(Clone, Default)]
pub struct RegistryCredentials {
    by_registry: BTreeMap<String, Credential>,
}

impl fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_registry.keys()).finish()
    }
}

/// Why `--registry-config` cannot be used; names the file and the entry.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct CredentialsError {
    /// The file as given.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

#[derive(Deserialize)]
struct DockerConfig {
    auths: Option<BTreeMap<String, AuthEntry>>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
    identitytoken: Option<String>,
    registrytoken: Option<String>,
}

impl RegistryCredentials {
    /// Read a docker config JSON file.
    pub fn from_file(path: &Path) -> Result<RegistryCredentials, CredentialsError> {
        let refuse = |problem: String| CredentialsError {
            path: path.display().to_string(),
            problem,
        };
        let text = std::fs::read(path).map_err(|error| refuse(error.to_string()))?;
        Self::parse(&text).map_err(refuse)
    }

    /// Parse the file's contents; the error says which entry is wrong.
    pub fn parse(text: &[u8]) -> Result<RegistryCredentials, String> {
        let value: serde_json::Value = serde_json::from_slice(text)
            .map_err(|error| format!("not a docker config JSON file: {error}"))?;
        // `{"auths": {...}}` (config.json, dockerconfigjson), or the map alone (.dockercfg).
        let entries: BTreeMap<String, AuthEntry> = if value.get("auths").is_some() {
            let config: DockerConfig = serde_json::from_value(value)
                .map_err(|error| format!("not a docker config JSON file: {error}"))?;
            config.auths.unwrap_or_default()
        } else {
            serde_json::from_value(value)
                .map_err(|error| format!("not a docker config JSON file: {error}"))?
        };
        let mut by_registry = BTreeMap::new();
        for (key, entry) in entries {
            let host = registry_host(&key);
            if let Some(credential) = entry
                .credential()
                .map_err(|problem| format!("auths[{key:?}]: {problem}"))?
            {
                by_registry.insert(host, credential);
            }
        }
        Ok(RegistryCredentials { by_registry })
    }

    /// What to present to `registry` (`host[:port]`): anonymous when the file has nothing
    /// for it.
    pub fn auth_for(&self, registry: &str) -> RegistryAuth {
        let host = registry_host(registry);
        match self.by_registry.get(&host) {
            Some(Credential::Basic { username, password }) => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
            Some(Credential::Bearer(token)) => RegistryAuth::Bearer(token.clone()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Whether the file has credentials for `registry`.
    pub fn has(&self, registry: &str) -> bool {
        self.by_registry.contains_key(&registry_host(registry))
    }
}

impl AuthEntry {
    fn credential(self) -> Result<Option<Credential>, String> {
        if let Some(token) = self.registrytoken.filter(|t| !t.is_empty()) {
            return Ok(Some(Credential::Bearer(token)));
        }
        if self.identitytoken.as_deref().is_some_and(|t| !t.is_empty()) {
            return Err("identity tokens (OAuth2 refresh tokens) are not supported yet; use a user name and password or access token (\"auth\")".into());
        }
        if let (Some(username), Some(password)) = (&self.username, &self.password)
            && !username.is_empty()
        {
            return Ok(Some(Credential::Basic {
                username: username.clone(),
                password: password.clone(),
            }));
        }
        let Some(auth) = self.auth.filter(|a| !a.is_empty()) else {
            return Ok(None);
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| "\"auth\" is not base64".to_string())?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| "\"auth\" is not UTF-8 text".to_string())?;
        let Some((username, password)) = decoded.split_once(':') else {
            return Err("\"auth\" is not base64 of USER:PASSWORD".into());
        };
        Ok(Some(Credential::Basic {
            username: username.to_string(),
            password: password.to_string(),
        }))
    }
}

/// The `host[:port]` a config key or registry names: the scheme and path docker writes for
/// some keys (`https://index.docker.io/v1/`) are dropped, and Docker Hub's aliases are one.
fn registry_host(key: &str) -> String {
    let without_scheme = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = without_scheme
        .split('/')
        .next()
        .unwrap_or(without_scheme)
        .to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> RegistryAuth {
        RegistryAuth::Basic(user.into(), password.into())
    }

    #[test]
    fn docker_login_and_dockerconfigjson_files_are_read() {
        // `docker login` writes base64(user:password) under "auth".
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let file = format!(
            r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{auth}"}},
                "https://index.docker.io/v1/": {{"username": "bob", "password": "pw"}},
                "ghcr.io": {{"registrytoken": "tok"}},
                "empty.example": {{}}}},
              "credsStore": "desktop"}}"#
        );
        let credentials = RegistryCredentials::parse(file.as_bytes()).unwrap();
        assert_eq!(
            credentials.auth_for("127.0.0.1:5000"),
            basic("alice", "s3cr:et")
        );
        assert_eq!(credentials.auth_for("docker.io"), basic("bob", "pw"));
        assert_eq!(
            credentials.auth_for("registry-1.docker.io"),
            basic("bob", "pw")
        );
        assert_eq!(
            credentials.auth_for("ghcr.io"),
            RegistryAuth::Bearer("tok".into())
        );
        assert_eq!(
            credentials.auth_for("empty.example"),
            RegistryAuth::Anonymous
        );
        assert_eq!(
            credentials.auth_for("127.0.0.1:5001"),
            RegistryAuth::Anonymous
        );
        // The legacy .dockercfg form has no "auths" wrapper.
        let legacy = format!(r#"{{"127.0.0.1:5000": {{"auth": "{auth}"}}}}"#);
        assert!(
            RegistryCredentials::parse(legacy.as_bytes())
                .unwrap()
                .has("127.0.0.1:5000")
        );
    }

    #[test]
    fn bad_files_are_refused_naming_the_entry_and_never_the_secret() {
        let error = |text: &str| RegistryCredentials::parse(text.as_bytes()).unwrap_err();
        assert!(error("not json").contains("not a docker config JSON file"));
        let not_base64 = error(r#"{"auths": {"r.example": {"auth": "%%%secret"}}}"#);
        assert_eq!(not_base64, r#"auths["r.example"]: "auth" is not base64"#);
        let no_colon = base64::engine::general_purpose::STANDARD.encode("justsecret");
        let no_colon = error(&format!(
            r#"{{"auths": {{"r": {{"auth": "{no_colon}"}}}}}}"#
        ));
        assert!(no_colon.contains("USER:PASSWORD") && !no_colon.contains("justsecret"));
        assert!(error(r#"{"auths": {"r": {"identitytoken": "t"}}}"#).contains("identity tokens"));
    }

    #[test]
    fn debug_names_registries_not_secrets() {
        let credentials = RegistryCredentials::parse(
            br#"{"auths": {"r.example": {"username": "u", "password": "hunter2"}}}"#,
        )
        .unwrap();
        let printed = format!("{credentials:?}");
        assert!(printed.contains("r.example") && !printed.contains("hunter2"));
    }
}

//! Registry credentials from a docker config JSON file (`--registry-config`): the file
//! `docker login` writes and a Kubernetes `kubernetes.io/dockerconfigjson` Secret holds, or
//! the older `.dockercfg` form without the `auths` wrapper.
//!
//! An entry is basic auth (`auth`, or `username`/`password`), a registry token
//! (`registrytoken`), or an identity token (`identitytoken`: the OAuth2 refresh token `docker
//! login` stores for registries such as ACR and Harbor, exchanged for an access token by the
//! `token` module before each registry operation).
//!
//! Like cloud credentials they stay in the host: they are never passed to a provider, and
//! `Debug` prints the registries they are for and the kind of credential, never their values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use base64::Engine as _;
use serde::Deserialize;

/// How the manager authenticates to one registry.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// HTTP basic auth, or a password offered at a bearer-token exchange (as docker
    /// does it).
    Basic {
        /// User name.
        username: String,
        /// Password or access token.
        password: String,
    },
    /// A registry token sent as `Authorization: Bearer` (`registrytoken` in the file).
    Bearer(String),
    /// An OAuth2 refresh token (`identitytoken` in the file), exchanged at the registry's
    /// token service for an access token scoped to one repository and operation.
    IdentityToken(String),
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Credential::Basic { .. } => "Basic",
            Credential::Bearer(_) => "Bearer",
            Credential::IdentityToken(_) => "IdentityToken",
        })
    }
}

/// Credentials per registry host (`host[:port]`).
#[derive(Clone, Default)]
pub struct RegistryCredentials {
    by_registry: BTreeMap<String, Credential>,
}

impl fmt::Debug for RegistryCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(&self.by_registry).finish()
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

    /// What to present to `registry` (`host[:port]`): none when the file has nothing for it
    /// (anonymous access).
    pub(super) fn credential(&self, registry: &str) -> Option<&Credential> {
        self.by_registry.get(&registry_host(registry))
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
        // docker writes a placeholder user in "auth" beside an identity token: the token wins.
        if let Some(token) = self.identitytoken.filter(|t| !t.is_empty()) {
            return Ok(Some(Credential::IdentityToken(token)));
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

    fn basic(user: &str, password: &str) -> Option<Credential> {
        Some(Credential::Basic {
            username: user.into(),
            password: password.into(),
        })
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
        let credential = |registry: &str| credentials.credential(registry).cloned();
        assert!(credential("127.0.0.1:5000") == basic("alice", "s3cr:et"));
        assert!(credential("docker.io") == basic("bob", "pw"));
        assert!(credential("registry-1.docker.io") == basic("bob", "pw"));
        assert!(credential("ghcr.io") == Some(Credential::Bearer("tok".into())));
        assert!(credential("empty.example").is_none());
        assert!(credential("127.0.0.1:5001").is_none());
        // The legacy .dockercfg form has no "auths" wrapper.
        let legacy = format!(r#"{{"127.0.0.1:5000": {{"auth": "{auth}"}}}}"#);
        assert!(
            RegistryCredentials::parse(legacy.as_bytes())
                .unwrap()
                .has("127.0.0.1:5000")
        );
    }

    #[test]
    fn an_identity_token_wins_over_the_placeholder_user_docker_writes_beside_it() {
        // What `docker login` writes for ACR: a fixed user with no password, and the token.
        let placeholder = base64::engine::general_purpose::STANDARD
            .encode("00000000-0000-0000-0000-000000000000:");
        let file = format!(
            r#"{{"auths": {{"acr.example.io": {{"auth": "{placeholder}", "identitytoken": "eyJhbGciOi.refresh"}},
                "harbor.example": {{"identitytoken": "harbor-refresh"}},
                "blank.example": {{"identitytoken": "", "username": "u", "password": "p"}}}}}}"#
        );
        let credentials = RegistryCredentials::parse(file.as_bytes()).unwrap();
        assert!(
            credentials.credential("acr.example.io")
                == Some(&Credential::IdentityToken("eyJhbGciOi.refresh".into()))
        );
        assert!(
            credentials.credential("https://harbor.example/v2/")
                == Some(&Credential::IdentityToken("harbor-refresh".into()))
        );
        // An empty identity token is no identity token.
        assert!(credentials.credential("blank.example").cloned() == basic("u", "p"));
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
    }

    #[test]
    fn debug_names_registries_and_kinds_not_secrets() {
        let credentials = RegistryCredentials::parse(
            br#"{"auths": {"r.example": {"username": "u", "password": "hunter2"},
                "acr.example.io": {"identitytoken": "refresh-hunter3"}}}"#,
        )
        .unwrap();
        let printed = format!("{credentials:?}");
        assert_eq!(
            printed,
            r#"{"acr.example.io": IdentityToken, "r.example": Basic}"#
        );
    }
}

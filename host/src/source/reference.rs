//! Provider references as operators write them (`--provider`, later the `CloudProvider`
//! resource): `file://PATH`, or `oci://REGISTRY/REPO` with a tag, a digest, or both, checked
//! against the OCI distribution grammar so a typo is refused at start, naming what is wrong.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a provider component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderRef {
    /// `file://PATH`: a `.wasm` on the local file system.
    File(PathBuf),
    /// `oci://REGISTRY/REPO[:TAG][@DIGEST]`: an artifact in an OCI registry.
    Oci(OciRef),
}

/// An artifact in an OCI registry. At least one of tag and digest is set; when both are,
/// the digest is what gets pulled and the tag only documents it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// `host[:port]` of the registry, e.g. `ghcr.io` or `127.0.0.1:5000`.
    pub registry: String,
    /// The repository inside it, e.g. `acme/providers/simcloud`.
    pub repository: String,
    /// The tag, e.g. `v1.2.0`.
    pub tag: Option<String>,
    /// The pinned manifest digest, `sha256:<64 hex>` or `sha512:<128 hex>`.
    pub digest: Option<String>,
}

/// Why a reference was refused; the message names the reference and the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reference:?}: {problem}")]
pub struct ReferenceError {
    /// The reference as given.
    pub reference: String,
    /// What is wrong with it, and what would be right.
    pub problem: String,
}

/// Longest repository name the distribution spec allows, registry included.
const MAX_NAME: usize = 255;
/// Longest tag the distribution spec allows.
const MAX_TAG: usize = 128;

impl FromStr for ProviderRef {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<ProviderRef, ReferenceError> {
        let refuse = |problem: String| ReferenceError {
            reference: text.to_string(),
            problem,
        };
        if let Some(path) = text.strip_prefix("file://") {
            if path.is_empty() {
                return Err(refuse("the path is empty".into()));
            }
            return Ok(ProviderRef::File(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("oci://") {
            return parse_oci(rest).map(ProviderRef::Oci).map_err(refuse);
        }
        Err(refuse(
            "a provider reference is file://PATH or oci://REGISTRY/REPO:TAG (or @sha256:DIGEST)"
                .into(),
        ))
    }
}

fn parse_oci(text: &str) -> Result<OciRef, String> {
    let (name_and_tag, digest) = match text.rsplit_once('@') {
        Some((name, digest)) => (name, Some(check_digest(digest)?)),
        None => (text, None),
    };
    let last_slash = name_and_tag.rfind('/');
    let (name, tag) = match name_and_tag.rfind(':') {
        Some(colon) if last_slash.is_none_or(|slash| colon > slash) => (
            &name_and_tag[..colon],
            Some(check_tag(&name_and_tag[colon + 1..])?),
        ),
        _ => (name_and_tag, None),
    };
    let Some((registry, repository)) = name.split_once('/') else {
        return Err(format!(
            "no repository: write oci://REGISTRY/REPO, e.g. oci://ghcr.io/acme/{name}"
        ));
    };
    check_registry(registry)?;
    check_repository(repository)?;
    if name.len() > MAX_NAME {
        return Err(format!(
            "the name is {} characters long; at most {MAX_NAME} are allowed",
            name.len()
        ));
    }
    if tag.is_none() && digest.is_none() {
        return Err(
            "name a tag (:v1.0.0) or a digest (@sha256:…); wasm-ccm does not assume :latest".into(),
        );
    }
    Ok(OciRef {
        registry: registry.to_string(),
        repository: repository.to_string(),
        tag,
        digest,
    })
}

pub(super) fn check_digest(digest: &str) -> Result<String, String> {
    let (algorithm, hex) = digest
        .split_once(':')
        .ok_or_else(|| format!("digest {digest:?} is not ALGORITHM:HEX, e.g. sha256:<64 hex>"))?;
    let length = match algorithm {
        "sha256" => 64,
        "sha512" => 128,
        other => {
            return Err(format!(
                "digest algorithm {other:?} is not sha256 or sha512"
            ));
        }
    };
    let lower_hex = hex
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if hex.len() != length || !lower_hex {
        return Err(format!(
            "digest {digest:?} needs {length} lowercase hex digits after {algorithm}:"
        ));
    }
    Ok(digest.to_string())
}

fn check_tag(tag: &str) -> Result<String, String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let valid = match tag.as_bytes() {
        [first, rest @ ..] => {
            word(*first) && rest.iter().all(|&b| word(b) || b == b'.' || b == b'-')
        }
        [] => false,
    };
    if !valid || tag.len() > MAX_TAG {
        return Err(format!(
            "tag {tag:?} is not valid: up to {MAX_TAG} letters, digits, _, . and -, not starting with . or -"
        ));
    }
    Ok(tag.to_string())
}

fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || registry.starts_with('[') => {
            (host, Some(port))
        }
        _ => (registry, None),
    };
    if let Some(port) = port
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!(
            "registry {registry:?}: port {port:?} is not a port number"
        ));
    }
    let label_ok = |label: &str| {
        !label.is_empty()
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let ipv6 = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
    if !ipv6 && !host.split('.').all(label_ok) {
        return Err(format!(
            "registry {registry:?} is not a host name or address (with an optional :PORT)"
        ));
    }
    Ok(())
}

fn check_repository(repository: &str) -> Result<(), String> {
    for component in repository.split('/') {
        if !path_component_ok(component) {
            return Err(format!(
                "repository {repository:?}: component {component:?} must be lowercase letters and digits, separated by one . or _, two _, or dashes"
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*` from the distribution spec.
fn path_component_ok(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let dashes = separator.bytes().all(|b| b == b'-');
        if !(matches!(separator, "." | "_" | "__") || dashes) {
            return false;
        }
    }
    true
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ProviderRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderRef::File(path) => write!(f, "file://{}", path.display()),
            ProviderRef::Oci(oci) => oci.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn oci(text: &str) -> OciRef {
        match text.parse::<ProviderRef>() {
            Ok(ProviderRef::Oci(oci)) => oci,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn refused(text: &str) -> String {
        text.parse::<ProviderRef>().unwrap_err().to_string()
    }

    #[test]
    fn tags_digests_and_both_parse_and_print_back() {
        let tagged = oci("oci://ghcr.io/acme/providers/simcloud:v1.2.0");
        assert_eq!(tagged.registry, "ghcr.io");
        assert_eq!(tagged.repository, "acme/providers/simcloud");
        assert_eq!(tagged.tag.as_deref(), Some("v1.2.0"));
        assert_eq!(tagged.digest, None);

        let local = oci(&format!("oci://127.0.0.1:5000/simcloud@{DIGEST}"));
        assert_eq!(local.registry, "127.0.0.1:5000");
        assert_eq!((local.tag, local.digest.as_deref()), (None, Some(DIGEST)));

        let both = format!("oci://localhost:5000/a.b/c__d/e-f:1.0_rc-1@{DIGEST}");
        let parsed = oci(&both);
        assert_eq!(parsed.tag.as_deref(), Some("1.0_rc-1"));
        assert_eq!(parsed.to_string(), both);

        let path: ProviderRef = "file:///opt/p.wasm".parse().unwrap();
        assert_eq!(path, ProviderRef::File("/opt/p.wasm".into()));
        assert_eq!(path.to_string(), "file:///opt/p.wasm");
    }

    #[test]
    fn bad_references_name_the_part_that_is_wrong() {
        let cases = [
            ("https://ghcr.io/a:1", "file://PATH or oci://"),
            ("file://", "the path is empty"),
            ("oci://ghcr.io/acme/simcloud", "does not assume :latest"),
            ("oci://simcloud:v1", "no repository"),
            ("oci://ghcr.io/Acme/simcloud:v1", "component \"Acme\""),
            ("oci://ghcr.io/acme//simcloud:v1", "component \"\""),
            (
                "oci://ghcr.io/acme/sim..cloud:v1",
                "component \"sim..cloud\"",
            ),
            ("oci://ghcr.io/acme/simcloud:", "tag \"\""),
            ("oci://ghcr.io/acme/simcloud:-v1", "tag \"-v1\""),
            ("oci://ghcr.io/acme/simcloud@sha256:abc", "64 lowercase hex"),
            ("oci://ghcr.io/acme/simcloud@md5:abc", "\"md5\""),
            ("oci://ghcr_io/acme/simcloud:v1", "registry \"ghcr_io\""),
            ("oci://ghcr.io:99999/acme/simcloud:v1", "port \"99999\""),
        ];
        for (reference, expected) in cases {
            let message = refused(reference);
            assert!(message.contains(expected), "{reference}: {message}");
            assert!(
                message.contains(reference),
                "names the reference: {message}"
            );
        }
        let long_tag = format!("oci://ghcr.io/a/b:{}", "t".repeat(129));
        assert!(refused(&long_tag).contains("up to 128"));
        let long_name = format!("oci://ghcr.io/{}:v1", "a".repeat(250));
        assert!(refused(&long_name).contains("at most 255"));
    }
}

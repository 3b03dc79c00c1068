//! Credential injection: rules that bind a host pattern to a header whose value the host
//! reads (from an environment variable, a file, or a Secret the manager watches) and adds
//! to requests bound for that host, or to AWS keys the host signs those requests with
//! ([`SigV4`]). The value is read when a request is sent, so a rotated file or Secret takes
//! effect at once, and it is never shown to the provider, logged, or printed by `Debug`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use http::HeaderName;

use super::policy::{Destination, HostPattern};
use super::sigv4::{SIGNING_HEADERS, SigV4, WebIdentityConfig};

/// Where a secret value comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// An environment variable of the manager's process.
    Env(String),
    /// A file (e.g. a mounted Secret); surrounding whitespace is trimmed.
    File(PathBuf),
    /// A value held in memory and replaced by its owner (the manager's Secret watch).
    Shared(SharedSecret),
}

/// A secret value kept current by its owner, e.g. the key of a watched Secret; clones
/// share the value.
#[derive(Clone)]
pub struct SharedSecret {
    /// What it is, for errors and `Debug`: e.g. `Secret kube-system/simcloud key token`.
    name: Arc<str>,
    /// How many times it was set, and the value.
    value: Arc<RwLock<(u64, Result<String, String>)>>,
}

impl SharedSecret {
    /// A secret named `name` (as errors name it), with no value yet: reading it fails
    /// with `missing` until [`SharedSecret::set`].
    pub fn new(name: impl Into<Arc<str>>, missing: String) -> SharedSecret {
        SharedSecret {
            name: name.into(),
            value: Arc::new(RwLock::new((0, Err(missing)))),
        }
    }

    /// The value now, or why there is none (e.g. `Secret kube-system/simcloud not found`).
    pub fn set(&self, value: Result<String, String>) {
        let mut current = self.value.write().unwrap_or_else(|p| p.into_inner());
        *current = (current.0 + 1, value);
    }

    fn get(&self) -> Result<String, String> {
        self.value
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// How many times the value was set: what was derived from it is current while this
    /// stays the same.
    pub(super) fn generation(&self) -> u64 {
        self.value.read().unwrap_or_else(|p| p.into_inner()).0
    }
}

impl PartialEq for SharedSecret {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.value, &other.value)
    }
}

impl Eq for SharedSecret {}

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::Env(var) => write!(f, "env:{var}"),
            SecretSource::File(path) => write!(f, "file:{}", path.display()),
            SecretSource::Shared(secret) => write!(f, "{secret:?}"),
        }
    }
}

impl SecretSource {
    /// Read the value now.
    pub fn read(&self) -> Result<String, String> {
        let value = match self {
            SecretSource::Env(var) => {
                std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?
            }
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read {}: {err}", path.display()))?
                .trim()
                .to_string(),
            SecretSource::Shared(secret) => secret.get()?.trim().to_string(),
        };
        if value.is_empty() {
            return Err(format!("{self:?} is empty"));
        }
        Ok(value)
    }
}

/// How the secret becomes a header value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Format {
    /// `Authorization: Bearer <value>`.
    Bearer,
    /// `<name>: <value>`.
    Raw,
}

/// One credential rule: for requests to `target`, set a header from a secret, or sign them.
#[derive(Debug, Clone)]
pub struct CredentialRule {
    target: HostPattern,
    form: Form,
}

/// What a rule does to a request.
#[derive(Debug, Clone)]
enum Form {
    /// Set `header` from `source`.
    Header {
        header: HeaderName,
        format: Format,
        source: SecretSource,
    },
    /// Sign it for AWS.
    SigV4(SigV4),
}

/// What a rule does to a request, for the gate.
pub(super) enum Applied<'a> {
    /// Sets this header.
    Header(&'a HeaderName),
    /// Signs the request.
    SigV4(&'a SigV4),
}

/// Why a credential rule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid credential {rule:?}: {problem} (expected HOSTPATTERN=bearer:env:VAR, HOSTPATTERN=bearer:file:PATH, HOSTPATTERN=header:NAME:env:VAR or HOSTPATTERN=aws-sigv4:KEYS[,region=REGION][,services=SERVICE+SERVICE][,actions=ACTION+ACTION][,sts=URL] with KEYS env, dir:PATH or web-identity)"
)]
pub struct CredentialError {
    /// The rule as given, e.g. to `--credential`.
    pub rule: String,
    /// What is wrong with it.
    pub problem: String,
}

impl FromStr for CredentialRule {
    type Err = CredentialError;

    fn from_str(rule: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| CredentialError {
            rule: rule.to_string(),
            problem,
        };
        let (target, spec) = rule
            .split_once('=')
            .ok_or_else(|| fail("missing '=' between host pattern and value".into()))?;
        let target: HostPattern = target
            .parse()
            .map_err(|err: super::PatternError| fail(err.to_string()))?;
        if let Some(sigv4) = spec.strip_prefix("aws-sigv4:") {
            let sigv4 = SigV4::parse(sigv4, &target).map_err(fail)?;
            return Ok(CredentialRule {
                target,
                form: Form::SigV4(sigv4),
            });
        }
        let (header, format, source) = if let Some(source) = spec.strip_prefix("bearer:") {
            (http::header::AUTHORIZATION, Format::Bearer, source)
        } else if let Some(rest) = spec.strip_prefix("header:") {
            let (name, source) = rest.split_once(':').ok_or_else(|| {
                fail("header:NAME must be followed by :env:VAR or :file:PATH".into())
            })?;
            let header = HeaderName::from_str(name)
                .map_err(|_| fail(format!("{name:?} is not a valid header name")))?;
            (header, Format::Raw, source)
        } else {
            return Err(fail(
                "value must start with bearer:, header: or aws-sigv4:".into(),
            ));
        };
        let source = if let Some(var) = source.strip_prefix("env:") {
            if var.is_empty() {
                return Err(fail("env: needs a variable name".into()));
            }
            SecretSource::Env(var.to_string())
        } else if let Some(path) = source.strip_prefix("file:") {
            if path.is_empty() {
                return Err(fail("file: needs a path".into()));
            }
            SecretSource::File(PathBuf::from(path))
        } else {
            return Err(fail(format!("{source:?} must be env:VAR or file:PATH")));
        };
        Ok(CredentialRule {
            target,
            form: Form::Header {
                header,
                format,
                source,
            },
        })
    }
}

impl CredentialRule {
    /// Send the value of `source` to hosts matching `target` as `Authorization: Bearer
    /// <value>`, or with `header` as `<header>: <value>`.
    pub fn new(target: HostPattern, header: Option<HeaderName>, source: SecretSource) -> Self {
        let (header, format) = match header {
            None => (http::header::AUTHORIZATION, Format::Bearer),
            Some(header) => (header, Format::Raw),
        };
        CredentialRule {
            target,
            form: Form::Header {
                header,
                format,
                source,
            },
        }
    }

    /// Sign requests to hosts matching `target` with `sigv4`; refused when `target` is not
    /// an AWS endpoint name and `sigv4` does not state its region and services.
    pub fn aws_sigv4(target: HostPattern, sigv4: SigV4) -> Result<Self, String> {
        sigv4.check_target(&target)?;
        Ok(CredentialRule {
            target,
            form: Form::SigV4(sigv4),
        })
    }

    /// Whether the value lives in memory ([`SecretSource::Shared`]), so reading it costs
    /// nothing and it need not be kept between requests.
    pub fn is_in_memory(&self) -> bool {
        matches!(
            self.form,
            Form::Header {
                source: SecretSource::Shared(_),
                ..
            }
        )
    }

    /// Whether requests to `dest` get this credential.
    pub fn applies_to(&self, dest: &Destination) -> bool {
        self.target.matches(dest)
    }

    /// The host pattern whose requests get this credential.
    pub fn target(&self) -> &HostPattern {
        &self.target
    }

    /// The web identity whose token a signing rule's keys are exchanged for, if they are.
    pub fn web_identity(&self) -> Option<&WebIdentityConfig> {
        match &self.form {
            Form::SigV4(sigv4) => sigv4.keys().web_identity_config(),
            Form::Header { .. } => None,
        }
    }

    /// The headers this rule sets; providers may not set them themselves.
    pub fn headers(&self) -> Vec<HeaderName> {
        match &self.form {
            Form::Header { header, .. } => vec![header.clone()],
            Form::SigV4(_) => SIGNING_HEADERS.map(HeaderName::from_static).to_vec(),
        }
    }

    /// What the rule does to a request.
    pub(super) fn applied(&self) -> Applied<'_> {
        match &self.form {
            Form::Header { header, .. } => Applied::Header(header),
            Form::SigV4(sigv4) => Applied::SigV4(sigv4),
        }
    }

    /// Check now that the secret can be read, so a bad rule fails at start-up.
    pub fn check(&self) -> Result<(), String> {
        match &self.form {
            Form::Header { source, .. } => source.read().map(drop),
            Form::SigV4(sigv4) => sigv4.keys().check(),
        }
    }

    /// The header value to send, read from the source now; `None` for a signing rule.
    pub fn header_value(&self) -> Result<Option<http::HeaderValue>, String> {
        let Form::Header { format, source, .. } = &self.form else {
            return Ok(None);
        };
        let secret = source.read()?;
        let value = match format {
            Format::Bearer => format!("Bearer {secret}"),
            Format::Raw => secret,
        };
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|_| format!("{source:?} holds characters not allowed in a header"))?;
        value.set_sensitive(true);
        Ok(Some(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(rule: &CredentialRule) -> &SecretSource {
        match &rule.form {
            Form::Header { source, .. } => source,
            Form::SigV4(_) => panic!("not a header rule"),
        }
    }

    fn value(rule: &CredentialRule) -> http::HeaderValue {
        rule.header_value().unwrap().expect("a header rule")
    }

    #[test]
    fn parses_the_three_forms() {
        let bearer: CredentialRule = "https://api.example.com=bearer:env:TOKEN".parse().unwrap();
        assert_eq!(bearer.headers(), [http::header::AUTHORIZATION]);
        assert_eq!(source(&bearer), &SecretSource::Env("TOKEN".into()));
        let file: CredentialRule = "https://*.example.com=bearer:file:/run/secret"
            .parse()
            .unwrap();
        assert_eq!(source(&file), &SecretSource::File("/run/secret".into()));
        let header: CredentialRule = "http://127.0.0.1:80=header:X-Auth-Token:env:T"
            .parse()
            .unwrap();
        assert_eq!(header.headers()[0].as_str(), "x-auth-token");
        assert!(matches!(
            header.form,
            Form::Header {
                format: Format::Raw,
                ..
            }
        ));
    }

    #[test]
    fn bad_rules_name_the_problem() {
        for (rule, problem) in [
            ("https://api.example.com", "missing '='"),
            ("api.example.com=bearer:env:T", "missing scheme"),
            (
                "https://a.example.com=basic:env:T",
                "bearer:, header: or aws-sigv4:",
            ),
            (
                "https://a.example.com=bearer:vault:T",
                "env:VAR or file:PATH",
            ),
            ("https://a.example.com=bearer:env:", "variable name"),
            (
                "https://a.example.com=header:bad name:env:T",
                "not a valid header name",
            ),
        ] {
            let err = rule.parse::<CredentialRule>().unwrap_err().to_string();
            assert!(err.contains(problem), "{rule}: {err}");
        }
    }

    #[test]
    fn file_values_are_read_fresh_and_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").unwrap();
        let rule: CredentialRule = format!("https://a.example.com=bearer:file:{}", path.display())
            .parse()
            .unwrap();
        assert_eq!(value(&rule), "Bearer first");
        std::fs::write(&path, "second").unwrap();
        assert_eq!(value(&rule), "Bearer second");
        assert!(value(&rule).is_sensitive());
        std::fs::remove_file(&path).unwrap();
        assert!(rule.check().unwrap_err().contains("cannot read"));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cr3t").unwrap();
        let rule: CredentialRule = format!("https://a.example.com=bearer:file:{}", path.display())
            .parse()
            .unwrap();
        assert!(!format!("{rule:?}").contains("s3cr3t"));
        assert!(!format!("{:?}", value(&rule)).contains("s3cr3t"));
    }
}

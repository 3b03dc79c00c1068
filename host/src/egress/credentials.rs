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

use super::policy::{Destination, HostPattern, PatternError};
use super::sigv4::{KeyError, RuleError, SIGNING_HEADERS, SigV4, WebIdentityConfig};

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
    /// How many times it was set, and the value or why there is none.
    value: Arc<RwLock<(u64, Result<String, String>)>>,
}

/// Why a secret's value cannot be had now; the message names the source, never the value.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SecretError {
    /// The environment variable is not set (or not Unicode).
    #[error("environment variable {0} is not set")]
    EnvUnset(String),
    /// The file cannot be read.
    #[error("cannot read {}: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: Arc<std::io::Error>,
    },
    /// A shared value has none, for the reason its owner gave (e.g. `Secret
    /// kube-system/simcloud not found`).
    #[error("{0}")]
    Unset(String),
    /// The value is empty once trimmed.
    #[error("{0:?} is empty")]
    Empty(SecretSource),
    /// The value holds characters a header may not carry.
    #[error("{0:?} holds characters not allowed in a header")]
    NotHeaderSafe(SecretSource),
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

    /// The value now, or why there is none (e.g. `Secret kube-system/simcloud not found`):
    /// the owner's own words, which reading it fails with ([`SecretError::Unset`]).
    pub fn set(&self, value: Result<String, String>) {
        let mut current = self.value.write().unwrap_or_else(|p| p.into_inner());
        *current = (current.0 + 1, value);
    }

    fn get(&self) -> Result<String, SecretError> {
        self.value
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
            .map_err(SecretError::Unset)
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
    pub fn read(&self) -> Result<String, SecretError> {
        let value = match self {
            SecretSource::Env(var) => {
                std::env::var(var).map_err(|_| SecretError::EnvUnset(var.clone()))?
            }
            SecretSource::File(path) => std::fs::read_to_string(path)
                .map_err(|error| SecretError::Unreadable {
                    path: path.clone(),
                    error: Arc::new(error),
                })?
                .trim()
                .to_string(),
            SecretSource::Shared(secret) => secret.get()?.trim().to_string(),
        };
        if value.is_empty() {
            return Err(SecretError::Empty(self.clone()));
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
    pub problem: RuleProblem,
}

/// What is wrong with a credential rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleProblem {
    /// No `=` after the host pattern.
    #[error("missing '=' between host pattern and value")]
    MissingEquals,
    /// The host pattern does not parse.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// The `aws-sigv4:` part does not make a signing rule.
    #[error(transparent)]
    SigV4(#[from] RuleError),
    /// `header:NAME` with nothing after the name.
    #[error("header:NAME must be followed by :env:VAR or :file:PATH")]
    HeaderSource,
    /// The header name as given, not a valid one.
    #[error("{0:?} is not a valid header name")]
    HeaderName(String),
    /// A form other than `bearer:`, `header:` and `aws-sigv4:`.
    #[error("value must start with bearer:, header: or aws-sigv4:")]
    Form,
    /// `env:` with no variable.
    #[error("env: needs a variable name")]
    EmptyVar,
    /// `file:` with no path.
    #[error("file: needs a path")]
    EmptyPath,
    /// The source as given, neither `env:` nor `file:`.
    #[error("{0:?} must be env:VAR or file:PATH")]
    Source(String),
}

/// Why a credential rule's secret or keys cannot be had now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// A header rule's secret.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// A signing rule's keys.
    #[error(transparent)]
    Keys(#[from] KeyError),
}

impl FromStr for CredentialRule {
    type Err = CredentialError;

    fn from_str(rule: &str) -> Result<Self, Self::Err> {
        let fail = |problem: RuleProblem| CredentialError {
            rule: rule.to_string(),
            problem,
        };
        let (target, spec) = rule
            .split_once('=')
            .ok_or_else(|| fail(RuleProblem::MissingEquals))?;
        let target: HostPattern = target
            .parse()
            .map_err(|error: PatternError| fail(error.into()))?;
        if let Some(sigv4) = spec.strip_prefix("aws-sigv4:") {
            let sigv4 = SigV4::parse(sigv4, &target).map_err(|error| fail(error.into()))?;
            return Ok(CredentialRule {
                target,
                form: Form::SigV4(sigv4),
            });
        }
        let (header, format, source) = if let Some(source) = spec.strip_prefix("bearer:") {
            (http::header::AUTHORIZATION, Format::Bearer, source)
        } else if let Some(rest) = spec.strip_prefix("header:") {
            let (name, source) = rest
                .split_once(':')
                .ok_or_else(|| fail(RuleProblem::HeaderSource))?;
            let header = HeaderName::from_str(name)
                .map_err(|_| fail(RuleProblem::HeaderName(name.to_string())))?;
            (header, Format::Raw, source)
        } else {
            return Err(fail(RuleProblem::Form));
        };
        let source = if let Some(var) = source.strip_prefix("env:") {
            if var.is_empty() {
                return Err(fail(RuleProblem::EmptyVar));
            }
            SecretSource::Env(var.to_string())
        } else if let Some(path) = source.strip_prefix("file:") {
            if path.is_empty() {
                return Err(fail(RuleProblem::EmptyPath));
            }
            SecretSource::File(PathBuf::from(path))
        } else {
            return Err(fail(RuleProblem::Source(source.to_string())));
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
    pub fn aws_sigv4(target: HostPattern, sigv4: SigV4) -> Result<Self, RuleError> {
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
    pub fn check(&self) -> Result<(), Unavailable> {
        match &self.form {
            Form::Header { source, .. } => Ok(source.read().map(drop)?),
            Form::SigV4(sigv4) => Ok(sigv4.keys().check()?),
        }
    }

    /// The header value to send, read from the source now; `None` for a signing rule.
    pub fn header_value(&self) -> Result<Option<http::HeaderValue>, SecretError> {
        let Form::Header { format, source, .. } = &self.form else {
            return Ok(None);
        };
        let secret = source.read()?;
        let value = match format {
            Format::Bearer => format!("Bearer {secret}"),
            Format::Raw => secret,
        };
        let mut value = http::HeaderValue::from_str(&value)
            .map_err(|_| SecretError::NotHeaderSafe(source.clone()))?;
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
        assert!(
            rule.check()
                .unwrap_err()
                .to_string()
                .contains("cannot read")
        );
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

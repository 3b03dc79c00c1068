//! AWS Signature Version 4 in the egress gate: a credential rule that signs a request instead
//! of adding a header, so a provider calls EC2, ELB or STS without ever holding the keys, the
//! session token or the signature.
//!
//! This module owns what is signed and for which scope: the region and service a request may
//! be signed for (from the AWS endpoint name, `ec2.us-east-1.amazonaws.com`; for a custom
//! endpoint, stated by the rule and, with several services, told apart by the request's
//! `Version`), the headers guests may not set, the bound on the body buffered to be signed,
//! the AWS error codes that mean the keys were refused, and which API actions a rule signs
//! (its `actions=` allow-list). [`actions`] owns how a request's action is read and the
//! actions and answers the gate never lets through; [`keys`] owns where the keys come from
//! and when they are refreshed. [`canonical`] writes the canonical request of a request to `/`
//! with no query (every Query and JSON-protocol call); `aws-sigv4` signs any other, and derives
//! the keys and computes the HMAC for all.

mod actions;
mod canonical;
mod keys;

use std::fmt;
use std::sync::LazyLock;
use std::time::SystemTime;

use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::{HeaderName, HeaderValue};

pub use actions::{CREDENTIAL_ACTIONS, REST_SERVICES, is_action_pattern};
pub(super) use actions::{OTHER, Parameters, action_label, carried_credential, service_label};
pub use keys::{
    AwsKeys, ExchangeProblem, KeyError, MAX_STS_ANSWER, StsEndpointError, WebIdentityConfig,
    WebIdentityError, check_sts_endpoint, sts_endpoint_allowed,
};
pub(super) use keys::{Keys, StsClient};

use super::policy::{Destination, HostPattern};

/// Largest body of a signed request, in bytes: the body is buffered to be hashed into the
/// signature, and a larger one is refused.
pub const MAX_SIGNED_BODY: usize = 1024 * 1024;

/// The headers that carry a signature. The gate sets them; guests may not.
pub(super) const SIGNING_HEADERS: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-security-token",
    "x-amz-content-sha256",
];

/// The Query API versions the gate knows, and the service each belongs to.
const API_VERSIONS: [(&str, &str); 3] = [
    ("2016-11-15", "ec2"),
    ("2015-12-01", "elasticloadbalancing"),
    ("2011-06-15", "sts"),
];

/// AWS error codes that say the keys were refused: expired or unknown temporary keys, or a
/// signature made with keys AWS no longer takes. Temporary keys are refreshed on them.
const REFUSED_KEYS: [&str; 4] = [
    "ExpiredToken",
    "InvalidClientTokenId",
    "AuthFailure",
    "SignatureDoesNotMatch",
];

/// Why a SigV4 rule is refused: as `--credential …=aws-sigv4:…` text, or as parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The region as given, not an AWS region name.
    #[error("{0:?} is not an AWS region name (e.g. us-east-1)")]
    Region(String),
    /// The service as given, not a signing name.
    #[error("{0:?} is not an AWS service signing name (e.g. ec2, elasticloadbalancing, sts)")]
    Service(String),
    /// A service listed twice.
    #[error("service {0} is named twice")]
    ServiceTwice(String),
    /// The action as given, neither a name nor a name's start followed by `*`.
    #[error(
        "{0:?} is not an API action name (e.g. DescribeInstances) or a name's start followed by * (e.g. Describe*)"
    )]
    Action(String),
    /// An action listed twice (without regard to case).
    #[error("action {0} is named twice")]
    ActionTwice(String),
    /// An option as given, with no `=`.
    #[error("{0:?} is not region=REGION, services=SERVICE+…, actions=ACTION+… or sts=URL")]
    Option(String),
    /// An option name the rule does not know.
    #[error("unknown option {0}= (expected region=, services=, actions= or sts=)")]
    UnknownOption(String),
    /// `dir:` with no directory.
    #[error("dir: needs a directory")]
    EmptyDir,
    /// The keys as given, not `env`, `dir:PATH` or `web-identity`.
    #[error("the keys {0:?} must be env, dir:PATH or web-identity")]
    Keys(String),
    /// `sts=` with keys other than a web identity.
    #[error("sts= goes with web-identity only")]
    StsWithoutWebIdentity,
    /// The web identity cannot be configured.
    #[error(transparent)]
    WebIdentity(#[from] WebIdentityError),
    /// A target not an AWS endpoint name, with the region or services unstated.
    #[error(
        "{0} is not an AWS endpoint name (SERVICE.REGION.amazonaws.com), so the rule must state the region and the services to sign for"
    )]
    Target(HostPattern),
}

/// Why the gate does not sign one request: its scope or action is not granted, or the
/// signature cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// The endpoint name's region is not the rule's.
    #[error("region {region} of {host} is not granted: the rule signs for {granted} only")]
    Region {
        /// The region the name gives.
        region: String,
        /// The request's host.
        host: String,
        /// The rule's region.
        granted: String,
    },
    /// The endpoint name's service is not among the rule's.
    #[error("service {service} of {host} is not granted (granted: {})", .granted.join(", "))]
    Service {
        /// The service the name gives.
        service: String,
        /// The request's host.
        host: String,
        /// The rule's services.
        granted: Vec<String>,
    },
    /// A name not AWS's, with the rule's region or services unstated.
    #[error("cannot tell the region and service of {0} from its name; the rule must state them")]
    Unnamed(String),
    /// The request's `Version`s belong to two services.
    #[error("the request names API versions of two services, {first} and {second}")]
    TwoServices {
        /// The service of the first version.
        first: &'static str,
        /// The service of another.
        second: &'static str,
    },
    /// A `Version` the gate does not know, with several services granted.
    #[error(
        "API version {version} is not one the gate knows ({}); with several services granted for {dest} ({}), it must tell which service the request is for",
        known_versions(),
        .granted.join(", ")
    )]
    UnknownVersion {
        /// The version as the request names it.
        version: String,
        /// Where the request is bound.
        dest: Destination,
        /// The rule's services.
        granted: Vec<String>,
    },
    /// The service of the request's `Version` is not the rule's.
    #[error(
        "service {service} (from the request's Version) is not granted for {dest} (granted: {})",
        .granted.join(", ")
    )]
    VersionNotGranted {
        /// The service of the version.
        service: &'static str,
        /// Where the request is bound.
        dest: Destination,
        /// The rule's services.
        granted: Vec<String>,
    },
    /// No `Version`, with several services granted.
    #[error(
        "cannot tell which service a request to {dest} is for: it has no Version parameter, and several services are granted ({}); the gate knows {}",
        .granted.join(", "),
        known_versions()
    )]
    NoVersion {
        /// Where the request is bound.
        dest: Destination,
        /// The rule's services.
        granted: Vec<String>,
    },
    /// No API action, to a service that is not REST.
    #[error(
        "the request to {service} names no API action (a Query Action parameter, X-Amz-Target or an RPC path); the gate signs a request without one only for the REST services {}",
        REST_SERVICES.join(", ")
    )]
    NoAction {
        /// The service.
        service: String,
    },
    /// No API action, under a rule with an allow-list.
    #[error(
        "the request to {service} names no API action (a REST request), and the aws-sigv4 rule for {target} signs only the actions it lists ({})",
        .actions.join(", ")
    )]
    NoListedAction {
        /// The service.
        service: String,
        /// The rule's host pattern.
        target: HostPattern,
        /// The rule's allow-list.
        actions: Vec<String>,
    },
    /// An action that issues or manages credentials.
    #[error(
        "{service} {action} issues or manages credentials, which the gate never signs, whatever the rule"
    )]
    IssuesCredentials {
        /// The service.
        service: String,
        /// The action.
        action: String,
    },
    /// An action that answers a secret or runs commands on instances.
    #[error(
        "{service} {action} answers a secret or runs commands on instances, which the gate never signs, whatever the rule"
    )]
    RevealsSecrets {
        /// The service.
        service: String,
        /// The action.
        action: String,
    },
    /// An action the rule's allow-list leaves out.
    #[error(
        "{service} {action} is not among the actions the aws-sigv4 rule for {target} signs ({})",
        .actions.join(", ")
    )]
    NotListed {
        /// The service.
        service: String,
        /// The action.
        action: String,
        /// The rule's host pattern.
        target: HostPattern,
        /// The rule's allow-list.
        actions: Vec<String>,
    },
    /// A shadow version's action that is not a read.
    #[error(
        "{service} {action} is not a read: a shadow version may only sign Describe*, Get* and List* actions{}; spec.rollout.shadow.actions can allow more",
        also(.extra)
    )]
    NotRead {
        /// The service.
        service: String,
        /// The action.
        action: String,
        /// The actions the shadow may sign besides reads.
        extra: Vec<String>,
    },
    /// `aws-sigv4` refused the signing parameters.
    #[error("cannot sign: {0}")]
    Params(aws_sigv4::sign::v4::signing_params::BuildError),
    /// `aws-sigv4` could not sign the request.
    #[error("cannot sign {uri}: {error}")]
    Sign {
        /// The request's URI.
        uri: String,
        /// Why not.
        error: aws_sigv4::http_request::SigningError,
    },
    /// A signature header is not a valid header value.
    #[error("the {0} header of the signature is not a valid header value")]
    Header(&'static str),
}

/// ` and A, B` after the reads a shadow may sign, or nothing.
fn also(extra: &[String]) -> String {
    if extra.is_empty() {
        String::new()
    } else {
        format!(" and {}", extra.join(", "))
    }
}

/// A SigV4 signing rule: the keys, and the region and services it may sign for.
#[derive(Clone)]
pub struct SigV4 {
    /// The one region it signs for; any region of an AWS endpoint name when `None`.
    region: Option<String>,
    /// The services it signs for; any service of an AWS endpoint name when empty.
    services: Vec<String>,
    /// The actions it signs (names, or `Prefix*`); any action when empty.
    actions: Vec<String>,
    keys: AwsKeys,
}

impl fmt::Debug for SigV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigV4")
            .field("region", &self.region)
            .field("services", &self.services)
            .field("actions", &self.actions)
            .field("keys", &self.keys)
            .finish()
    }
}

/// The region and service one request is signed for, as the rule or the endpoint name
/// spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scope<'a> {
    pub region: &'a str,
    pub service: &'a str,
}

impl SigV4 {
    /// A rule signing with `keys` for `region` (any region of an AWS endpoint name when
    /// `None`) and `services` (any service of an AWS endpoint name when empty).
    pub fn new(
        region: Option<String>,
        services: Vec<String>,
        keys: AwsKeys,
    ) -> Result<SigV4, RuleError> {
        if let Some(region) = &region
            && !is_region(region)
        {
            return Err(RuleError::Region(region.clone()));
        }
        for (index, service) in services.iter().enumerate() {
            let valid = !service.is_empty()
                && service
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if !valid {
                return Err(RuleError::Service(service.clone()));
            }
            if services[..index].contains(service) {
                return Err(RuleError::ServiceTwice(service.clone()));
            }
        }
        Ok(SigV4 {
            region,
            services,
            actions: Vec::new(),
            keys,
        })
    }

    /// The rule signing only `actions` (API action names, or `Prefix*` for every action
    /// starting so), compared without regard to case; any action when empty. Actions that
    /// issue or manage credentials are never signed, listed or not.
    pub fn with_actions(mut self, actions: Vec<String>) -> Result<SigV4, RuleError> {
        for (index, action) in actions.iter().enumerate() {
            if !actions::is_action_pattern(action) {
                return Err(RuleError::Action(action.clone()));
            }
            if actions[..index]
                .iter()
                .any(|a| a.eq_ignore_ascii_case(action))
            {
                return Err(RuleError::ActionTwice(action.clone()));
            }
        }
        self.actions = actions;
        Ok(self)
    }

    /// The actions it signs; any when empty.
    pub fn actions(&self) -> &[String] {
        &self.actions
    }

    /// The services it signs for; any of an AWS endpoint name when empty.
    pub fn services(&self) -> &[String] {
        &self.services
    }

    /// The rule of `--credential HOSTPATTERN=aws-sigv4:TEXT` for `target`: `TEXT` is the keys
    /// (`env`, `dir:PATH` or `web-identity`), then `,region=REGION`, `,services=A+B`,
    /// `,actions=A+B` and, with web identity, `,sts=URL`.
    pub(super) fn parse(text: &str, target: &HostPattern) -> Result<SigV4, RuleError> {
        let mut options = text.split(',');
        let keys = options.next().unwrap_or_default();
        let (mut region, mut services, mut actions, mut sts) = (None, Vec::new(), Vec::new(), None);
        for option in options {
            let Some((name, value)) = option.split_once('=') else {
                return Err(RuleError::Option(option.to_string()));
            };
            match name {
                "region" => region = Some(value.to_string()),
                "services" => services = value.split('+').map(String::from).collect(),
                "actions" => actions = value.split('+').map(String::from).collect(),
                "sts" => sts = Some(value),
                _ => return Err(RuleError::UnknownOption(name.to_string())),
            }
        }
        let keys = match keys {
            "env" => AwsKeys::from_env(),
            "web-identity" => {
                let config = WebIdentityConfig::from_env(sts, region.as_deref(), target)?;
                AwsKeys::web_identity(config)
            }
            _ => match keys.strip_prefix("dir:") {
                Some("") => return Err(RuleError::EmptyDir),
                Some(dir) => AwsKeys::from_dir(dir.as_ref()),
                None => return Err(RuleError::Keys(keys.to_string())),
            },
        };
        if sts.is_some() && !keys.refreshable() {
            return Err(RuleError::StsWithoutWebIdentity);
        }
        let sigv4 = SigV4::new(region, services, keys)?.with_actions(actions)?;
        sigv4.check_target(target)?;
        Ok(sigv4)
    }

    /// Whether requests to `target` can be signed: a pattern that is not an AWS endpoint
    /// name (an address, a VPC endpoint's own name, a test server) needs the region and
    /// services stated.
    pub fn check_target(&self, target: &HostPattern) -> Result<(), RuleError> {
        let aws = target.dns_name().is_some_and(is_aws_domain);
        if !aws && (self.region.is_none() || self.services.is_empty()) {
            return Err(RuleError::Target(target.clone()));
        }
        Ok(())
    }

    /// Where the keys come from.
    pub fn keys(&self) -> &AwsKeys {
        &self.keys
    }

    /// The region and service to sign a request to `dest` for, or why it may not be signed.
    ///
    /// An AWS endpoint name gives both, and they must be among those the rule names, if it
    /// names any. Any other name gets the rule's region and one of its services: the only
    /// one, or the one the request's `Version` (query or form, from `parameters`) belongs
    /// to. A request whose `Version` belongs to a service the rule does not name is refused.
    pub(super) fn scope<'a>(
        &'a self,
        dest: &'a Destination,
        parameters: &Parameters<'_>,
    ) -> Result<Scope<'a>, SigningError> {
        let host = &dest.host;
        if let Some((service, region)) = aws_endpoint(host) {
            if let Some(granted) = &self.region
                && granted != region
            {
                return Err(SigningError::Region {
                    region: region.to_string(),
                    host: host.clone(),
                    granted: granted.clone(),
                });
            }
            if !self.services.is_empty() && !self.services.iter().any(|s| s == service) {
                return Err(SigningError::Service {
                    service: service.to_string(),
                    host: host.clone(),
                    granted: self.services.clone(),
                });
            }
            return Ok(Scope { region, service });
        }
        let Some(region) = self.region.as_deref().filter(|_| !self.services.is_empty()) else {
            return Err(SigningError::Unnamed(host.clone()));
        };
        let service = self.service_for(dest, parameters)?;
        Ok(Scope { region, service })
    }

    /// The granted service a request to a custom endpoint is for, by the `Version`s of
    /// `parameters`.
    fn service_for(
        &self,
        dest: &Destination,
        parameters: &Parameters<'_>,
    ) -> Result<&str, SigningError> {
        let granted = || self.services.clone();
        let mut inferred: Option<&'static str> = None;
        for version in parameters.versions() {
            match API_VERSIONS.iter().find(|(known, _)| *known == version) {
                Some((_, service)) => {
                    if let Some(first) = inferred.filter(|other| other != service) {
                        return Err(SigningError::TwoServices {
                            first,
                            second: service,
                        });
                    }
                    inferred = Some(service);
                }
                None if self.services.len() > 1 => {
                    return Err(SigningError::UnknownVersion {
                        version: version.to_string(),
                        dest: dest.clone(),
                        granted: granted(),
                    });
                }
                None => {}
            }
        }
        match inferred {
            Some(service) if self.services.iter().any(|s| s == service) => Ok(service),
            Some(service) => Err(SigningError::VersionNotGranted {
                service,
                dest: dest.clone(),
                granted: granted(),
            }),
            None if self.services.len() == 1 => Ok(&self.services[0]),
            None => Err(SigningError::NoVersion {
                dest: dest.clone(),
                granted: granted(),
            }),
        }
    }

    /// Whether a request for `scope` naming `action` (`None`: a REST request) may be signed
    /// under the rule for `target`; `shadow` holds the actions a shadow version may sign
    /// besides reads, when the caller is one. Never: an action that issues or manages
    /// credentials; an action the rule's allow-list leaves out; a request naming no action,
    /// unless to a REST service and with no allow-list; for a shadow, an action not a read.
    pub(super) fn permits(
        &self,
        target: &HostPattern,
        scope: &Scope<'_>,
        action: Option<&str>,
        shadow: Option<&[String]>,
    ) -> Result<(), SigningError> {
        let service = scope.service;
        let Some(action) = action else {
            if !actions::is_rest_service(service) {
                return Err(SigningError::NoAction {
                    service: service.to_string(),
                });
            }
            if !self.actions.is_empty() {
                return Err(SigningError::NoListedAction {
                    service: service.to_string(),
                    target: target.clone(),
                    actions: self.actions.clone(),
                });
            }
            return Ok(());
        };
        if actions::issues_credentials(service, action) {
            return Err(SigningError::IssuesCredentials {
                service: service.to_string(),
                action: action.to_string(),
            });
        }
        if actions::reveals_secrets(service, action) {
            return Err(SigningError::RevealsSecrets {
                service: service.to_string(),
                action: action.to_string(),
            });
        }
        if !self.actions.is_empty()
            && !self
                .actions
                .iter()
                .any(|pattern| actions::matches(pattern, action))
        {
            return Err(SigningError::NotListed {
                service: service.to_string(),
                action: action.to_string(),
                target: target.clone(),
                actions: self.actions.clone(),
            });
        }
        if let Some(extra) = shadow
            && !actions::is_read(action, extra)
        {
            return Err(SigningError::NotRead {
                service: service.to_string(),
                action: action.to_string(),
                extra: extra.to_vec(),
            });
        }
        Ok(())
    }

    /// Sign the request `parts` with `body` for `scope` with `keys`: adds `authorization`,
    /// `x-amz-date` and, with temporary keys, `x-amz-security-token`. Signed: method, URL,
    /// `host`, `content-type`, every `x-amz-*` header and the SHA-256 of `body`.
    pub(super) fn sign(
        parts: &mut http::request::Parts,
        body: &[u8],
        scope: &Scope<'_>,
        keys: &Keys,
    ) -> Result<(), SigningError> {
        let time = SystemTime::now();
        let headers = match canonical::signing_headers(parts, body, scope, keys, time) {
            Some(headers) => headers,
            None => signing_headers(parts, body, scope, keys, time)?,
        };
        for (name, value) in headers {
            let mut value = HeaderValue::try_from(value).map_err(|_| SigningError::Header(name))?;
            value.set_sensitive(true);
            parts.headers.insert(HeaderName::from_static(name), value);
        }
        Ok(())
    }
}

/// The headers that sign `parts` with `body` for `scope` at `time`, made by `aws-sigv4`.
fn signing_headers(
    parts: &http::request::Parts,
    body: &[u8],
    scope: &Scope<'_>,
    keys: &Keys,
    time: SystemTime,
) -> Result<Vec<(&'static str, String)>, SigningError> {
    let params = v4::SigningParams::builder()
        .identity(keys.identity())
        .region(scope.region)
        .name(scope.service)
        .time(time)
        .settings(signing_settings())
        .build()
        .map_err(SigningError::Params)?
        .into();
    let uri = parts.uri.to_string();
    let signed_headers = parts.headers.iter().filter_map(|(name, value)| {
        let name = name.as_str();
        let signed = name == "content-type" || name.starts_with("x-amz-");
        signed.then(|| value.to_str().ok().map(|value| (name, value)))?
    });
    let request = SignableRequest::new(
        parts.method.as_str(),
        uri.as_str(),
        signed_headers,
        SignableBody::Bytes(body),
    )
    .map_err(|error| SigningError::Sign {
        uri: uri.clone(),
        error,
    })?;
    let (instructions, _) = aws_sigv4::http_request::sign(request, &params)
        .map_err(|error| SigningError::Sign {
            uri: uri.clone(),
            error,
        })?
        .into_parts();
    let (headers, _) = instructions.into_parts();
    Ok(headers
        .into_iter()
        .map(|header| (header.name(), header.value().to_string()))
        .collect())
}

/// How `aws-sigv4` signs for the gate: its defaults, made once rather than for every request,
/// less their list of headers left out of the signature (`authorization`, `user-agent`,
/// `x-amzn-trace-id`, `transfer-encoding`), which [`signing_headers`] never hands it: the same
/// signature, without comparing every signed header with the list.
fn signing_settings() -> SigningSettings {
    static SETTINGS: LazyLock<SigningSettings> = LazyLock::new(|| {
        let mut settings = SigningSettings::default();
        settings.excluded_headers = None;
        settings
    });
    SETTINGS.clone()
}

/// The code of an AWS error answer that says the keys were refused, if `body` is one.
pub(super) fn refused_keys(body: &[u8]) -> Option<&'static str> {
    let code = xml_text(std::str::from_utf8(body).ok()?, "Code")?;
    REFUSED_KEYS.into_iter().find(|refused| *refused == code)
}

/// The text of the first `<tag>` element of an AWS XML answer (their values here, keys,
/// tokens, codes and dates, hold no markup).
pub(super) fn xml_text<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{tag}>"))? + tag.len() + 2;
    let length = xml[start..].find(&format!("</{tag}>"))?;
    Some(xml[start..start + length].trim())
}

fn known_versions() -> String {
    let known: Vec<String> = API_VERSIONS
        .iter()
        .map(|(version, service)| format!("{service} {version}"))
        .collect();
    known.join(", ")
}

/// Whether `name` is in AWS's domains, `amazonaws.com` or `amazonaws.com.cn`.
fn is_aws_domain(name: &str) -> bool {
    ["amazonaws.com", "amazonaws.com.cn"]
        .iter()
        .any(|domain| name == *domain || name.ends_with(&format!(".{domain}")))
}

/// `(service, region)` of an AWS endpoint name: `SERVICE.REGION.amazonaws.com`,
/// `SERVICE.REGION.amazonaws.com.cn`, `SERVICE-fips.REGION.amazonaws.com`, or a global
/// `SERVICE.amazonaws.com` (us-east-1).
pub(super) fn aws_endpoint(host: &str) -> Option<(&str, &str)> {
    let (rest, global) = match host.strip_suffix(".amazonaws.com") {
        Some(rest) => (rest, true),
        None => (host.strip_suffix(".amazonaws.com.cn")?, false),
    };
    let (service, region) = match rest.split_once('.') {
        None if global => (rest, "us-east-1"),
        Some((service, region)) if is_region(region) => (service, region),
        _ => return None,
    };
    let service = service.strip_suffix("-fips").unwrap_or(service);
    let valid = !service.is_empty()
        && service
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    valid.then_some((service, region))
}

/// Whether `text` reads as an AWS region name: `us-east-1`, `cn-north-1`, `us-gov-west-1`.
fn is_region(text: &str) -> bool {
    let mut labels = text.split('-');
    let first = labels.next().unwrap_or_default();
    let rest: Vec<&str> = labels.collect();
    let letters = |label: &str| !label.is_empty() && label.chars().all(|c| c.is_ascii_lowercase());
    letters(first)
        && rest.len() >= 2
        && rest[..rest.len() - 1].iter().all(|label| letters(label))
        && rest
            .last()
            .is_some_and(|last| !last.is_empty() && last.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of `text` for `target`, or the message that refuses it.
    fn rule(text: &str, target: &str) -> Result<SigV4, String> {
        SigV4::parse(text, &target.parse().unwrap()).map_err(|error| error.to_string())
    }

    fn request(uri: &str, content_type: Option<&str>) -> http::request::Parts {
        let mut builder = http::Request::post(uri);
        if let Some(content_type) = content_type {
            builder = builder.header(http::header::CONTENT_TYPE, content_type);
        }
        builder.body(()).unwrap().into_parts().0
    }

    /// The region and service `rule` signs a request to `uri` with `form` for.
    fn scope(rule: &SigV4, uri: &str, form: &str) -> Result<(String, String), String> {
        scope_of(rule, uri, Some("application/x-www-form-urlencoded"), form)
    }

    fn scope_of(
        rule: &SigV4,
        uri: &str,
        content_type: Option<&str>,
        body: &str,
    ) -> Result<(String, String), String> {
        let parts = request(uri, content_type);
        let dest = Destination::from_uri(&parts.uri).unwrap();
        let parameters = Parameters::read(&parts, body.as_bytes());
        let scope = rule
            .scope(&dest, &parameters)
            .map_err(|error| error.to_string())?;
        Ok((scope.region.into(), scope.service.into()))
    }

    fn scoped(region: &str, service: &str) -> Result<(String, String), String> {
        Ok((region.into(), service.into()))
    }

    #[test]
    fn aws_endpoint_names_give_service_and_region() {
        for (host, expected) in [
            ("ec2.us-east-1.amazonaws.com", Some(("ec2", "us-east-1"))),
            (
                "elasticloadbalancing.eu-west-3.amazonaws.com",
                Some(("elasticloadbalancing", "eu-west-3")),
            ),
            (
                "sts.us-gov-west-1.amazonaws.com",
                Some(("sts", "us-gov-west-1")),
            ),
            (
                "ec2.cn-north-1.amazonaws.com.cn",
                Some(("ec2", "cn-north-1")),
            ),
            (
                "ec2-fips.us-east-2.amazonaws.com",
                Some(("ec2", "us-east-2")),
            ),
            ("sts.amazonaws.com", Some(("sts", "us-east-1"))),
            ("vpce-1a2b.ec2.us-east-1.vpce.amazonaws.com", None),
            ("ec2.not-a-region.amazonaws.com", None),
            ("ec2.us-east-1.amazonaws.com.evil.test", None),
            ("api.example.com", None),
        ] {
            assert_eq!(aws_endpoint(host), expected, "{host}");
        }
    }

    #[test]
    fn parses_keys_region_services_and_sts() {
        let custom = rule(
            "dir:/run/aws,region=us-east-1,services=ec2+elasticloadbalancing+sts",
            "http://127.0.0.1:5000",
        )
        .unwrap();
        assert_eq!(custom.region.as_deref(), Some("us-east-1"));
        assert_eq!(custom.services, ["ec2", "elasticloadbalancing", "sts"]);
        assert!(!custom.keys.refreshable());
        let aws = rule("env", "https://*.us-east-1.amazonaws.com").unwrap();
        assert_eq!((aws.region, aws.services.len()), (None, 0));
    }

    #[test]
    fn bad_rules_name_the_problem() {
        for (text, target, problem) in [
            (
                "vault",
                "https://ec2.us-east-1.amazonaws.com",
                "must be env, dir:PATH or web-identity",
            ),
            (
                "dir:",
                "https://ec2.us-east-1.amazonaws.com",
                "dir: needs a directory",
            ),
            (
                "env,zone=a",
                "https://ec2.us-east-1.amazonaws.com",
                "unknown option zone=",
            ),
            (
                "env,region",
                "https://ec2.us-east-1.amazonaws.com",
                "is not region=REGION",
            ),
            (
                "env,region=Mars",
                "https://ec2.us-east-1.amazonaws.com",
                "not an AWS region name",
            ),
            (
                "env,services=EC2",
                "https://ec2.us-east-1.amazonaws.com",
                "not an AWS service signing name",
            ),
            (
                "env,services=ec2+ec2",
                "https://*.amazonaws.com",
                "ec2 is named twice",
            ),
            (
                "env,sts=http://127.0.0.1:1",
                "https://*.amazonaws.com",
                "sts= goes with web-identity only",
            ),
            (
                "env",
                "http://127.0.0.1:5000",
                "must state the region and the services",
            ),
            (
                "env,region=us-east-1",
                "https://api.example.com",
                "must state the region and the services",
            ),
            (
                "env,services=ec2",
                "http://127.0.0.1:5000",
                "must state the region and the services",
            ),
        ] {
            let error = rule(text, target).unwrap_err();
            assert!(error.contains(problem), "{text} for {target}: {error}");
        }
    }

    #[test]
    fn an_aws_name_is_signed_for_its_own_scope_within_the_rule() {
        let any = rule("env", "https://*.amazonaws.com").unwrap();
        assert_eq!(
            scope(
                &any,
                "https://elasticloadbalancing.eu-west-1.amazonaws.com/",
                ""
            ),
            scoped("eu-west-1", "elasticloadbalancing")
        );
        let narrow = rule(
            "env,region=us-east-1,services=ec2+sts",
            "https://*.amazonaws.com",
        )
        .unwrap();
        assert_eq!(
            scope(&narrow, "https://ec2.us-east-1.amazonaws.com/", ""),
            scoped("us-east-1", "ec2")
        );
        let region = scope(&narrow, "https://ec2.eu-west-1.amazonaws.com/", "").unwrap_err();
        assert!(
            region.contains("region eu-west-1 of ec2.eu-west-1.amazonaws.com is not granted"),
            "{region}"
        );
        let service = scope(&narrow, "https://iam.us-east-1.amazonaws.com/", "").unwrap_err();
        assert!(
            service.contains(
                "service iam of iam.us-east-1.amazonaws.com is not granted (granted: ec2, sts)"
            ),
            "{service}"
        );
        let vpce = scope(&any, "https://vpce-1.ec2.us-east-1.vpce.amazonaws.com/", "").unwrap_err();
        assert!(
            vpce.contains("cannot tell the region and service"),
            "{vpce}"
        );
    }

    #[test]
    fn a_custom_endpoint_is_signed_for_the_service_its_version_names() {
        let moto = rule(
            "env,region=us-east-1,services=ec2+elasticloadbalancing",
            "http://127.0.0.1:5000",
        )
        .unwrap();
        let url = "http://127.0.0.1:5000/";
        let ec2 = "Action=DescribeVpcs&Version=2016-11-15";
        let elb = "Action=DescribeLoadBalancers&Version=2015-12-01";
        assert_eq!(scope(&moto, url, ec2), scoped("us-east-1", "ec2"));
        assert_eq!(
            scope(&moto, url, elb),
            scoped("us-east-1", "elasticloadbalancing")
        );
        let query = "http://127.0.0.1:5000/?Action=DescribeVpcs&Version=2016-11-15";
        assert_eq!(scope(&moto, query, ""), scoped("us-east-1", "ec2"));
        for (form, problem) in [
            (
                "Action=GetCallerIdentity&Version=2011-06-15",
                "service sts (from the request's Version) is not granted for http://127.0.0.1:5000 (granted: ec2, elasticloadbalancing)",
            ),
            ("Action=DescribeVpcs", "it has no Version parameter"),
            (
                "Action=ListUsers&Version=2010-05-08",
                "API version 2010-05-08 is not one the gate knows",
            ),
            (
                "Version=2016-11-15&Version=2015-12-01",
                "names API versions of two services, ec2 and elasticloadbalancing",
            ),
        ] {
            let error = scope(&moto, url, form).unwrap_err();
            assert!(error.contains(problem), "{form}: {error}");
        }
        // A form's Version counts only in a form.
        for content_type in [Some("application/json"), None] {
            let error = scope_of(&moto, url, content_type, ec2).unwrap_err();
            assert!(
                error.contains("no Version parameter"),
                "{content_type:?}: {error}"
            );
        }

        let only_ec2 = rule("env,region=us-east-1,services=ec2", "http://127.0.0.1:5000").unwrap();
        assert_eq!(
            scope(&only_ec2, url, "Action=X"),
            scoped("us-east-1", "ec2")
        );
        let sts = scope(
            &only_ec2,
            url,
            "Action=GetCallerIdentity&Version=2011-06-15",
        );
        assert!(sts.unwrap_err().contains("service sts"));
    }

    fn permits(
        rule: &SigV4,
        service: &str,
        action: Option<&str>,
        shadow: Option<&[String]>,
    ) -> Result<(), String> {
        let target: HostPattern = "https://*.amazonaws.com".parse().unwrap();
        let scope = Scope {
            region: "us-east-1",
            service,
        };
        rule.permits(&target, &scope, action, shadow)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn a_rule_signs_its_listed_actions_never_a_credential_one_and_a_shadow_reads_only() {
        let any = rule("env", "https://*.amazonaws.com").unwrap();
        assert_eq!(
            permits(&any, "ec2", Some("TerminateInstances"), None),
            Ok(())
        );
        let sts = permits(&any, "sts", Some("GetSessionToken"), None).unwrap_err();
        assert!(
            sts.contains(
                "sts GetSessionToken issues or manages credentials, which the gate never signs"
            ),
            "{sts}"
        );
        let listed = rule(
            "env,actions=DescribeInstances+Describe*+GetSessionToken",
            "https://*.amazonaws.com",
        )
        .unwrap();
        assert_eq!(
            listed.actions(),
            ["DescribeInstances", "Describe*", "GetSessionToken"]
        );
        assert_eq!(permits(&listed, "ec2", Some("DescribeVpcs"), None), Ok(()));
        let other = permits(&listed, "ec2", Some("CreateTags"), None).unwrap_err();
        assert!(
            other.contains("ec2 CreateTags is not among the actions the aws-sigv4 rule for https://*.amazonaws.com signs (DescribeInstances, Describe*, GetSessionToken)"),
            "{other}"
        );
        // Listed or not, a credential action is never signed.
        assert!(permits(&listed, "sts", Some("GetSessionToken"), None).is_err());
        // A REST request names no action: signed for a REST service, without an allow-list.
        assert_eq!(permits(&any, "s3", None, None), Ok(()));
        assert!(
            permits(&listed, "s3", None, None)
                .unwrap_err()
                .contains("signs only the actions it lists")
        );
        let unknown = permits(&any, "eks-auth", None, None).unwrap_err();
        assert!(unknown.contains("names no API action"), "{unknown}");
        // A shadow signs reads, and what the spec adds.
        let extra = vec!["SearchTransitGatewayRoutes".to_string()];
        assert_eq!(
            permits(&any, "ec2", Some("DescribeInstances"), Some(&[])),
            Ok(())
        );
        assert_eq!(
            permits(
                &any,
                "ec2",
                Some("SearchTransitGatewayRoutes"),
                Some(&extra)
            ),
            Ok(())
        );
        let write = permits(&any, "ec2", Some("CreateTags"), Some(&[])).unwrap_err();
        assert!(
            write.contains("ec2 CreateTags is not a read: a shadow version may only sign Describe*, Get* and List* actions; spec.rollout.shadow.actions can allow more"),
            "{write}"
        );
        for (text, problem) in [
            ("env,actions=Describe-Vpcs", "is not an API action name"),
            (
                "env,actions=DescribeVpcs+describevpcs",
                "action describevpcs is named twice",
            ),
            ("env,actions=", "is not an API action name"),
        ] {
            let error = rule(text, "https://*.amazonaws.com").unwrap_err();
            assert!(error.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn the_signature_covers_host_date_token_and_the_amz_headers_only() {
        let keys = Keys::for_test("AKIDEXAMPLE", "secret", Some("the-session-token"));
        let mut parts = http::Request::post("https://ec2.us-east-1.amazonaws.com/")
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .header("x-amz-target", "Service.Op")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let scope = Scope {
            region: "us-east-1",
            service: "ec2",
        };
        SigV4::sign(&mut parts, b"Action=DescribeVpcs", &scope, &keys).unwrap();
        let authorization = parts.headers["authorization"].to_str().unwrap();
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
            "{authorization}"
        );
        assert!(
            authorization.contains("/us-east-1/ec2/aws4_request"),
            "{authorization}"
        );
        assert!(
            authorization.contains(
                "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target,"
            ),
            "{authorization}"
        );
        assert_eq!(parts.headers["x-amz-security-token"], "the-session-token");
        assert!(parts.headers["authorization"].is_sensitive());
        assert!(parts.headers["x-amz-security-token"].is_sensitive());
    }

    #[test]
    fn requests_to_the_root_are_signed_as_aws_sigv4_signs_them() {
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_795_000_123, 987_654_321);
        let keys = [
            Keys::for_test(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                None,
            ),
            Keys::for_test("ASIAEXAMPLE", "another/secret", Some("the+session/token=")),
        ];
        const FORM: &[u8] = b"application/x-www-form-urlencoded; charset=utf-8";
        // Method, URI, headers, body.
        type Request = (
            &'static str,
            &'static str,
            &'static [(&'static str, &'static [u8])],
            &'static [u8],
        );
        let requests: [Request; 9] = [
            (
                "POST",
                "https://ec2.us-east-1.amazonaws.com/",
                &[("content-type", FORM)],
                b"Action=DescribeVpcs&Version=2016-11-15",
            ),
            (
                "POST",
                "https://sts.amazonaws.com",
                &[("content-type", FORM)],
                b"Action=GetCallerIdentity&Version=2011-06-15",
            ),
            (
                "POST",
                "https://ec2.us-east-1.amazonaws.com:443/?",
                &[],
                b"",
            ),
            (
                "POST",
                "http://127.0.0.1:4566/",
                &[
                    ("content-type", b"application/x-amz-json-1.1"),
                    ("x-amz-target", b"Logs_20140328.DescribeLogGroups"),
                ],
                b"{}",
            ),
            (
                "GET",
                "http://localhost:80/",
                &[
                    ("accept", b"application/json"),
                    ("user-agent", b"provider/1"),
                ],
                b"",
            ),
            (
                "PUT",
                "https://elasticloadbalancing.eu-west-1.amazonaws.com/",
                &[
                    ("content-type", b"  text/plain   with  runs   "),
                    ("x-amz-meta-a", b"one"),
                    ("x-amz-meta-b", b"\tx "),
                    ("x-amz-meta-a", b"two"),
                ],
                &[0, 255, 10, 13],
            ),
            (
                "POST",
                "https://ec2.us-east-1.amazonaws.com/",
                &[
                    ("x-amz-date", b"20000101T000000Z"),
                    ("x-amz-security-token", b"the provider's"),
                ],
                b"Action=DescribeVpcs",
            ),
            (
                "POST",
                "https://ec2.us-east-1.amazonaws.com/",
                &[("x-amz-meta-latin", b"caf\xe9"), ("content-type", FORM)],
                b"Action=DescribeVpcs",
            ),
            (
                "DELETE",
                "https://user@ec2.us-east-1.amazonaws.com:8443/",
                &[],
                b"",
            ),
        ];
        let scope = Scope {
            region: "us-east-1",
            service: "ec2",
        };
        for keys in &keys {
            for (method, uri, headers, body) in requests {
                let mut request = http::Request::builder().method(method).uri(uri);
                for (name, value) in headers {
                    request = request.header(*name, HeaderValue::from_bytes(value).unwrap());
                }
                let parts = request.body(()).unwrap().into_parts().0;
                let mut ours = canonical::signing_headers(&parts, body, &scope, keys, time)
                    .unwrap_or_else(|| panic!("{method} {uri} is a request to the root"));
                let mut theirs = signing_headers(&parts, body, &scope, keys, time).unwrap();
                ours.sort();
                theirs.sort();
                assert_eq!(ours, theirs, "{method} {uri} {headers:?}");
            }
        }
        for uri in [
            "https://ec2.us-east-1.amazonaws.com/?Action=DescribeVpcs",
            "https://lambda.us-east-1.amazonaws.com/2015-03-31/functions",
        ] {
            let parts = http::Request::get(uri).body(()).unwrap().into_parts().0;
            assert!(
                canonical::signing_headers(&parts, b"", &scope, &keys[0], time).is_none(),
                "{uri} is aws-sigv4's to sign"
            );
        }
    }

    #[test]
    fn refusals_of_the_keys_are_told_from_other_errors() {
        let ec2 = "<Response><Errors><Error><Code>AuthFailure</Code><Message>AWS was not able to validate the provided access credentials</Message></Error></Errors></Response>";
        let elb = "<ErrorResponse><Error><Type>Sender</Type><Code>ExpiredToken</Code><Message>The security token included in the request is expired</Message></Error></ErrorResponse>";
        let denied = "<Response><Errors><Error><Code>UnauthorizedOperation</Code></Error></Errors></Response>";
        assert_eq!(refused_keys(ec2.as_bytes()), Some("AuthFailure"));
        assert_eq!(refused_keys(elb.as_bytes()), Some("ExpiredToken"));
        for code in ["InvalidClientTokenId", "SignatureDoesNotMatch"] {
            let answer =
                format!("<ErrorResponse><Error><Code>{code}</Code></Error></ErrorResponse>");
            assert_eq!(refused_keys(answer.as_bytes()), Some(code));
        }
        assert_eq!(refused_keys(denied.as_bytes()), None);
        assert_eq!(refused_keys(b"not xml"), None);
    }
}

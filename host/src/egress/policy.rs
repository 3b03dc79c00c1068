//! What a provider may reach: allow-list entries (`https://api.example.com`,
//! `https://*.example.com:8443`, `http://127.0.0.1:8080`) and the rule that an address
//! inside the cluster or cloud network (private, loopback, link-local, metadata) is never
//! reached through a *name*: only an entry that names that very address allows it; and the
//! methods a version may use ([`MethodPolicy`]: a shadow version only reads).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::address;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The port a URL of this scheme uses when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        })
    }
}

/// The host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HostMatch {
    /// Exactly this DNS name (lower case).
    Name(String),
    /// Any name ending in `.suffix` (from `*.suffix`); not `suffix` itself.
    Subdomains(String),
    /// Exactly this address; also the one entry kind that may reach an internal address.
    Address(IpAddr),
}

/// One allow-list entry or credential target: scheme, host (or `*.` wildcard) and port,
/// all of which must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    scheme: Scheme,
    host: HostMatch,
    port: u16,
}

/// A destination as a request names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub scheme: Scheme,
    /// Lower-case DNS name or IP literal (IPv6 without brackets).
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

/// Why a host pattern could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid host pattern {pattern:?}: {problem} (expected e.g. https://api.example.com, https://*.example.com:8443 or http://127.0.0.1:8080)"
)]
pub struct PatternError {
    /// The pattern as given, e.g. to `--allow`.
    pub pattern: String,
    /// What is wrong with it.
    pub problem: PatternProblem,
}

/// What is wrong with a host pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternProblem {
    /// No `://`.
    #[error("missing scheme")]
    MissingScheme,
    /// A scheme other than `http` and `https`.
    #[error("scheme must be http or https")]
    Scheme,
    /// A path, query, fragment or user part.
    #[error("only scheme, host and port are allowed, no path or user")]
    NotOrigin,
    /// `[` without `]`.
    #[error("unclosed [ in IPv6 address")]
    UnclosedBracket,
    /// Something other than `:PORT` after `]`.
    #[error("junk after ]")]
    AfterBracket,
    /// No host before the port.
    #[error("missing host")]
    MissingHost,
    /// The port as given, not 1 to 65535.
    #[error("port {0:?} is not a number from 1 to 65535")]
    Port(String),
    /// The name (or the domain under `*.`) as given.
    #[error("{0:?} is not a valid DNS name")]
    DnsName(String),
}

/// A shadow version's request with a method its policy does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a shadow version may only use GET and HEAD towards {dest}; spec.rollout.shadow.methods can allow {method}"
)]
pub struct MethodRefused {
    /// The method the request used.
    pub method: http::Method,
    /// Where it was bound.
    pub dest: Destination,
}

impl FromStr for HostPattern {
    type Err = PatternError;

    fn from_str(pattern: &str) -> Result<Self, Self::Err> {
        let fail = |problem: PatternProblem| PatternError {
            pattern: pattern.to_string(),
            problem,
        };
        let (scheme, rest) = pattern
            .split_once("://")
            .ok_or_else(|| fail(PatternProblem::MissingScheme))?;
        let scheme = Scheme::parse(scheme).ok_or_else(|| fail(PatternProblem::Scheme))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(fail(PatternProblem::NotOrigin));
        }
        let (host, port) = split_host_port(rest).map_err(fail)?;
        let port = port.unwrap_or(scheme.default_port());
        let host = if let Some(suffix) = host.strip_prefix("*.") {
            validate_dns_name(suffix).map_err(fail)?;
            HostMatch::Subdomains(suffix.to_ascii_lowercase())
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            HostMatch::Address(ip)
        } else {
            validate_dns_name(host).map_err(fail)?;
            HostMatch::Name(host.to_ascii_lowercase())
        };
        Ok(HostPattern { scheme, host, port })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        match &self.host {
            HostMatch::Name(name) => f.write_str(name)?,
            HostMatch::Subdomains(suffix) => write!(f, "*.{suffix}")?,
            HostMatch::Address(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostMatch::Address(ip) => write!(f, "{ip}")?,
        }
        if self.port != self.scheme.default_port() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

impl HostPattern {
    /// Whether `dest` matches scheme, host and port.
    pub fn matches(&self, dest: &Destination) -> bool {
        if self.scheme != dest.scheme || self.port != dest.port {
            return false;
        }
        match &self.host {
            HostMatch::Name(name) => *name == dest.host,
            HostMatch::Subdomains(suffix) => dest
                .host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostMatch::Address(ip) => dest.host.parse::<IpAddr>().is_ok_and(|d| d == *ip),
        }
    }

    /// Whether this entry names `ip` itself, which is what allows an internal address.
    pub fn names_address(&self, ip: IpAddr) -> bool {
        matches!(self.host, HostMatch::Address(own) if own == canonical(ip))
    }

    /// Whether every destination this pattern admits is admitted by `ceiling`: the same
    /// scheme and port, and the same name or address, or a name (or a `*.` suffix) under
    /// the ceiling's `*.` suffix. An address is within an address only, never a name.
    pub fn within(&self, ceiling: &HostPattern) -> bool {
        if self.scheme != ceiling.scheme || self.port != ceiling.port {
            return false;
        }
        let under = |name: &str, suffix: &str| {
            name.strip_suffix(suffix)
                .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
        };
        match (&self.host, &ceiling.host) {
            (HostMatch::Name(name), HostMatch::Name(own)) => name == own,
            (HostMatch::Name(name), HostMatch::Subdomains(suffix)) => under(name, suffix),
            (HostMatch::Subdomains(inner), HostMatch::Subdomains(suffix)) => {
                inner == suffix || under(inner, suffix)
            }
            (HostMatch::Address(ip), HostMatch::Address(own)) => canonical(*ip) == canonical(*own),
            _ => false,
        }
    }

    /// The cloud metadata or platform service this entry names: by address (or by an IPv6
    /// address carrying it), or by a name that only ever means one
    /// (`metadata.google.internal`). Such a grant is refused unless the operator allows it
    /// ([`EgressConfig::check_grants`](super::EgressConfig::check_grants)).
    pub fn platform_service(&self) -> Option<String> {
        match &self.host {
            HostMatch::Address(ip) => {
                address::platform_service(*ip).map(|service| format!("{ip}, {service}"))
            }
            HostMatch::Name(name) => {
                address::metadata_name(name).map(|service| format!("{name}, the {service}"))
            }
            HostMatch::Subdomains(_) => None,
        }
    }

    /// The DNS name the pattern matches, or the domain under its `*.`; `None` for an address.
    pub(super) fn dns_name(&self) -> Option<&str> {
        match &self.host {
            HostMatch::Name(name) | HostMatch::Subdomains(name) => Some(name),
            HostMatch::Address(_) => None,
        }
    }
}

impl Destination {
    /// The destination of an absolute URI, or `None` if it has no usable scheme or host.
    pub fn from_uri(uri: &http::Uri) -> Option<Destination> {
        let scheme = Scheme::parse(uri.scheme_str()?)?;
        let host = uri.host()?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        Some(Destination { scheme, host, port })
    }
}

fn split_host_port(text: &str) -> Result<(&str, Option<u16>), PatternProblem> {
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed
            .split_once(']')
            .ok_or(PatternProblem::UnclosedBracket)?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or(PatternProblem::AfterBracket)?,
                ),
            ),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(PatternProblem::MissingHost);
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(PatternProblem::Port(port.to_string())),
            Ok(port) => Some(port),
        },
    };
    Ok((host, port))
}

fn validate_dns_name(name: &str) -> Result<(), PatternProblem> {
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(PatternProblem::DnsName(name.to_string()));
    }
    Ok(())
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Which HTTP methods requests may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MethodPolicy {
    /// Any method (an active provider version).
    #[default]
    Any,
    /// GET and HEAD, and per host pattern the methods listed (a shadow version, which must
    /// change nothing in the cloud). A request the gate signs for AWS is judged by its API
    /// action instead, whatever its method: `Describe*`, `Get*`, `List*` and `actions`.
    SafeOnly {
        /// Methods allowed besides GET and HEAD, per host pattern.
        methods: Vec<(HostPattern, Vec<http::Method>)>,
        /// AWS API actions (names, or `Prefix*`) a signed request may name besides reads.
        actions: Vec<String>,
    },
}

impl MethodPolicy {
    /// Whether `method` may be sent to `dest`, or why not.
    pub fn permits(&self, method: &http::Method, dest: &Destination) -> Result<(), MethodRefused> {
        let MethodPolicy::SafeOnly {
            methods: widened, ..
        } = self
        else {
            return Ok(());
        };
        if *method == http::Method::GET || *method == http::Method::HEAD {
            return Ok(());
        }
        let allowed = widened
            .iter()
            .any(|(pattern, methods)| pattern.matches(dest) && methods.contains(method));
        if allowed {
            Ok(())
        } else {
            Err(MethodRefused {
                method: method.clone(),
                dest: dest.clone(),
            })
        }
    }

    /// For a shadow version, the AWS actions its signed requests may name besides reads;
    /// `None` for an active version, which may sign any action its rules allow.
    pub fn shadow_actions(&self) -> Option<&[String]> {
        match self {
            MethodPolicy::Any => None,
            MethodPolicy::SafeOnly { actions, .. } => Some(actions),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(url: &str) -> Destination {
        Destination::from_uri(&url.parse().unwrap()).unwrap()
    }

    #[test]
    fn scheme_host_and_port_must_all_match() {
        let p: HostPattern = "https://api.example.com".parse().unwrap();
        assert!(p.matches(&dest("https://api.example.com/v1")));
        assert!(p.matches(&dest("https://API.example.com:443/")));
        assert!(!p.matches(&dest("http://api.example.com/")));
        assert!(!p.matches(&dest("https://api.example.com:8443/")));
        assert!(!p.matches(&dest("https://api.example.com.evil.test/")));
        assert!(!p.matches(&dest("https://xapi.example.com/")));
    }

    #[test]
    fn wildcard_matches_subdomains_only() {
        let p: HostPattern = "https://*.example.com:8443".parse().unwrap();
        assert!(p.matches(&dest("https://a.example.com:8443/")));
        assert!(p.matches(&dest("https://a.b.example.com:8443/")));
        assert!(!p.matches(&dest("https://example.com:8443/")));
        assert!(!p.matches(&dest("https://evilexample.com:8443/")));
        assert!(!p.matches(&dest("https://a.example.com/")));
    }

    #[test]
    fn address_entries_match_the_address_and_name_it() {
        let p: HostPattern = "http://127.0.0.1:8080".parse().unwrap();
        assert!(p.matches(&dest("http://127.0.0.1:8080/x")));
        assert!(!p.matches(&dest("http://localhost:8080/x")));
        assert!(p.names_address("127.0.0.1".parse().unwrap()));
        assert!(p.names_address("::ffff:127.0.0.1".parse().unwrap()));
        let v6: HostPattern = "http://[::1]:9000".parse().unwrap();
        assert!(v6.matches(&dest("http://[::1]:9000/")));
        assert_eq!(v6.to_string(), "http://[::1]:9000");
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for (pattern, problem) in [
            ("api.example.com", "missing scheme"),
            ("ftp://api.example.com", "scheme must be http or https"),
            ("https://api.example.com/v1", "no path"),
            ("https://api.example.com:0", "port"),
            ("https://api.example.com:99999", "port"),
            ("https://under_score.example.com", "not a valid DNS name"),
            ("https://", "missing host"),
            ("https://user@api.example.com", "no path or user"),
        ] {
            let err = pattern.parse::<HostPattern>().unwrap_err().to_string();
            assert!(err.contains(problem), "{pattern}: {err}");
            assert!(err.contains(pattern), "{pattern}: {err}");
        }
    }

    #[test]
    fn a_shadow_may_only_read_unless_widened_per_host() {
        let api: HostPattern = "https://api.example.com".parse().unwrap();
        let policy = MethodPolicy::SafeOnly {
            methods: vec![(api, vec![http::Method::POST])],
            actions: Vec::new(),
        };
        let api = dest("https://api.example.com/v1/x");
        let other = dest("https://other.example.com/v1/x");
        assert!(policy.permits(&http::Method::GET, &other).is_ok());
        assert!(policy.permits(&http::Method::HEAD, &other).is_ok());
        assert!(policy.permits(&http::Method::POST, &api).is_ok());
        let refused = policy
            .permits(&http::Method::POST, &other)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("only use GET and HEAD towards https://other.example.com"),
            "{refused}"
        );
        assert!(policy.permits(&http::Method::DELETE, &api).is_err());
        assert!(
            MethodPolicy::Any
                .permits(&http::Method::DELETE, &other)
                .is_ok()
        );
    }
}

//! The operator's ceiling on what a `CloudProvider` may grant (`--egress-grant-ceiling`):
//! host patterns that every destination a spec opens must fall within — its grants
//! (`spec.egress.allowedHosts`), its credentials' targets (`spec.credentials[].host`) and
//! the STS endpoint a web identity credential sends the manager's token to. Whoever may edit
//! the resource then chooses grants only inside what the cluster admin set on the manager's
//! command line; a spec outside it is refused as `InvalidSpec`, naming the field, the grant
//! and the ceiling, and the active version keeps running.
//!
//! A grant is within a ceiling pattern when every destination it admits is admitted by
//! that pattern ([`HostPattern::within`]): the same scheme and port, and the same name or
//! address, or a name (or a `*.` wildcard) under the pattern's `*.` suffix. So an IP-literal
//! grant, which skips the internal-address check by design, needs that very address in the
//! ceiling.

use std::fmt;

use super::spec::SpecError;
use crate::resource::CloudProviderSpec;
use wasm_ccm_host::egress::HostPattern;

/// The host patterns a spec's grants must fall within (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantCeiling {
    patterns: Vec<HostPattern>,
}

impl GrantCeiling {
    /// The ceiling of `patterns`; `None` (no ceiling) when there is none.
    pub fn new(patterns: Vec<HostPattern>) -> Option<GrantCeiling> {
        (!patterns.is_empty()).then_some(GrantCeiling { patterns })
    }

    /// Whether `grant` is within one of the patterns.
    pub fn admits(&self, grant: &HostPattern) -> bool {
        self.patterns.iter().any(|ceiling| grant.within(ceiling))
    }

    /// Refuse `spec` if a grant, a credential's target or a stated STS endpoint falls
    /// outside the ceiling, naming the first such field. Patterns that do not parse are
    /// left to [`super::spec::parse`], which refuses them first.
    pub fn check(&self, spec: &CloudProviderSpec) -> Result<(), SpecError> {
        let grants = spec
            .egress
            .iter()
            .flat_map(|egress| egress.allowed_hosts.iter().enumerate())
            .map(|(index, host)| (format!("spec.egress.allowedHosts[{index}]"), host.clone()));
        let credentials = spec
            .credentials
            .iter()
            .enumerate()
            .map(|(index, credential)| {
                (
                    format!("spec.credentials[{index}].host"),
                    credential.host.clone(),
                )
            });
        let sts = spec
            .credentials
            .iter()
            .enumerate()
            .filter_map(|(index, credential)| {
                let endpoint = credential
                    .aws
                    .as_ref()?
                    .web_identity
                    .as_ref()?
                    .sts_endpoint
                    .as_ref()?;
                Some((
                    format!("spec.credentials[{index}].aws.webIdentity.stsEndpoint"),
                    origin(endpoint).unwrap_or_else(|| endpoint.clone()),
                ))
            });
        for (field, text) in grants.chain(credentials).chain(sts) {
            let Ok(pattern) = text.parse::<HostPattern>() else {
                continue;
            };
            if !self.admits(&pattern) {
                return Err(SpecError {
                    field,
                    problem: format!(
                        "{text} is outside the grant ceiling the manager runs with (--egress-grant-ceiling {self}); grant a host within it, or ask the cluster admin to widen it"
                    ),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for GrantCeiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let patterns: Vec<String> = self.patterns.iter().map(ToString::to_string).collect();
        f.write_str(&patterns.join(","))
    }
}

/// `scheme://host[:port]` of a URL (its path dropped), as a host pattern reads it.
fn origin(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?;
    let host = uri.host()?;
    Some(match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ceiling(patterns: &[&str]) -> GrantCeiling {
        GrantCeiling::new(patterns.iter().map(|p| p.parse().unwrap()).collect()).unwrap()
    }

    fn within(grant: &str, patterns: &[&str]) -> bool {
        ceiling(patterns).admits(&grant.parse().unwrap())
    }

    #[test]
    fn a_grant_is_within_when_every_destination_it_admits_is() {
        let aws = ["https://*.amazonaws.com"];
        assert!(within("https://ec2.us-east-1.amazonaws.com", &aws));
        assert!(within("https://*.us-east-1.amazonaws.com", &aws));
        assert!(within("https://*.amazonaws.com", &aws));
        // The suffix itself is not under its own wildcard, nor is a look-alike.
        assert!(!within("https://amazonaws.com", &aws));
        assert!(!within("https://evilamazonaws.com", &aws));
        assert!(!within("https://*.com", &aws));
        // Scheme and port must be equal.
        assert!(!within("http://ec2.us-east-1.amazonaws.com", &aws));
        assert!(!within("https://ec2.us-east-1.amazonaws.com:8443", &aws));
        assert!(within(
            "https://api.example.com:8443",
            &["https://api.example.com:8443"]
        ));
        // A name is within the same name only; a wildcard never within a name.
        assert!(within(
            "https://api.example.com",
            &["https://API.example.com"]
        ));
        assert!(!within(
            "https://other.example.com",
            &["https://api.example.com"]
        ));
        assert!(!within(
            "https://*.api.example.com",
            &["https://api.example.com"]
        ));
    }

    #[test]
    fn an_ip_literal_grant_needs_that_address_in_the_ceiling() {
        let metadata = "http://169.254.169.254";
        assert!(!within(
            metadata,
            &["http://*.example.com", "https://169.254.169.254"]
        ));
        assert!(!within(metadata, &["http://169.254.169.253"]));
        assert!(within(metadata, &[metadata]));
        assert!(within("http://[::ffff:a9fe:a9fe]", &[metadata]));
        // A name is never within an address, nor an address within a name.
        assert!(!within("http://metadata.google.internal", &[metadata]));
        assert!(!within("http://10.0.0.1", &["http://*.internal"]));
    }

    fn spec(fields: serde_json::Value) -> CloudProviderSpec {
        let mut spec = json!({"provider": "file:///p.wasm", "name": "p"});
        spec.as_object_mut()
            .unwrap()
            .extend(fields.as_object().unwrap().clone());
        serde_json::from_value(spec).unwrap()
    }

    #[test]
    fn a_spec_outside_is_refused_naming_the_field_the_grant_and_the_ceiling() {
        let ceiling = ceiling(&["https://*.amazonaws.com", "https://api.example.com"]);
        let key = json!({"name": "s", "key": "k"});
        for (fields, field, grant) in [
            (
                json!({"egress": {"allowedHosts": ["https://api.example.com", "http://169.254.169.254"]}}),
                "spec.egress.allowedHosts[1]",
                "http://169.254.169.254",
            ),
            (
                json!({"credentials": [{"host": "https://evil.example", "secretKeyRef": key}]}),
                "spec.credentials[0].host",
                "https://evil.example",
            ),
            (
                json!({"credentials": [{"host": "https://sts.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "https://collector.example:8443/token"}}}]}),
                "spec.credentials[0].aws.webIdentity.stsEndpoint",
                "https://collector.example:8443",
            ),
        ] {
            let error = ceiling.check(&spec(fields)).unwrap_err();
            assert_eq!(error.field, field);
            assert!(error.problem.starts_with(grant), "{error}");
            assert!(
                error.problem.contains(
                    "--egress-grant-ceiling https://*.amazonaws.com,https://api.example.com"
                ),
                "{error}"
            );
        }
        let inside = spec(json!({
            "egress": {"allowedHosts": ["https://ec2.us-east-1.amazonaws.com", "https://api.example.com"]},
            "credentials": [
                {"host": "https://api.example.com", "secretKeyRef": key},
                {"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "https://sts.us-east-1.amazonaws.com/"}}},
            ],
        }));
        assert_eq!(ceiling.check(&inside), Ok(()));
    }

    #[test]
    fn no_pattern_is_no_ceiling() {
        assert_eq!(GrantCeiling::new(Vec::new()), None);
    }
}

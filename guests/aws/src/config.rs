//! The cloud configuration (`--cloud-config`, JSON): the region, the cluster's ID (its
//! `kubernetes.io/cluster/<id>` tag), the VPC, an optional route table, optional endpoints
//! per service, the node label keys Services may choose targets by and how nodes are named.
//! Parsed and validated by `init`, re-read by every call; every error names the field.

use serde::Deserialize;
use wasm_ccm_sdk::Error;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The region every call goes to, e.g. `us-east-1`.
    pub region: String,
    /// The cluster ID: resources tagged `kubernetes.io/cluster/<cluster_id>` belong to it.
    pub cluster_id: String,
    /// The cluster's VPC: the tagged route table is looked for in it.
    pub vpc_id: Option<String>,
    /// The route table for pod routes; without it, the one table with the cluster tag.
    pub route_table_id: Option<String>,
    /// EC2's endpoint, without a trailing slash.
    pub ec2_endpoint: String,
    /// ELBv2's endpoint, without a trailing slash.
    pub elbv2_endpoint: String,
    /// The node label keys a Service's `target-node-labels` may name: the labels `init`
    /// declares in `node-metadata`, so the host passes them (and no other).
    pub target_node_label_keys: Vec<String>,
    /// What the cluster's nodes are named after: a listed route's `target-node`.
    pub node_names: NodeNames,
}

/// The field listing the node label keys `target-node-labels` may name.
pub const TARGET_NODE_LABEL_KEYS: &str = "target_node_label_keys";

/// `node_names`: what the kubelets name their nodes after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NodeNames {
    /// `private-dns-name`: the instance's private DNS name, the kubelet's default.
    #[default]
    PrivateDnsName,
    /// `instance-id`: the instance ID (`i-…`).
    InstanceId,
}

/// The configuration as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    region: Option<String>,
    cluster_id: Option<String>,
    vpc_id: Option<String>,
    route_table_id: Option<String>,
    #[serde(default)]
    endpoints: RawEndpoints,
    /// Read as any JSON value so a wrong type gets an error naming the field.
    target_node_label_keys: Option<serde_json::Value>,
    /// Read as any JSON value so a wrong type gets an error naming the field.
    node_names: Option<serde_json::Value>,
}

/// `endpoints`: where to send each service's requests instead of its regional endpoint (a
/// VPC endpoint, a test server).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawEndpoints {
    ec2: Option<String>,
    elasticloadbalancing: Option<String>,
}

impl Config {
    /// The configuration given to this provider version.
    pub fn load() -> Result<Config, Error> {
        Config::parse(wasm_ccm_sdk::config::raw())
    }

    /// Parse and validate configuration bytes; no configuration at all lacks `region`.
    pub fn parse(bytes: Option<Vec<u8>>) -> Result<Config, Error> {
        let raw: RawConfig = bytes
            .map(|bytes| {
                serde_json::from_slice(&bytes)
                    .map_err(|err| invalid(format_args!("not valid JSON for this provider: {err}")))
            })
            .transpose()?
            .unwrap_or_default();
        let region = required(raw.region, "region")?;
        if !is_name(&region) {
            return Err(invalid(format_args!(
                "\"region\" must be a region name such as us-east-1, got {region:?}"
            )));
        }
        let cluster_id = required(raw.cluster_id, "cluster_id")?;
        if cluster_id.contains(['/', '=', ',']) || cluster_id.len() > 100 {
            return Err(invalid(format_args!(
                "\"cluster_id\" must be a tag-key suffix without '/', '=' or ',' (at most 100 \
                 characters), got {cluster_id:?}"
            )));
        }
        let vpc_id = prefixed(raw.vpc_id, "vpc_id", "vpc-")?;
        let route_table_id = prefixed(raw.route_table_id, "route_table_id", "rtb-")?;
        let endpoint = |given: Option<String>, field: &str, service: &str| match given {
            Some(url) => validated_url(&url, field),
            None => Ok(regional_endpoint(service, &region)),
        };
        let target_node_label_keys = label_keys(raw.target_node_label_keys)?;
        let node_names = node_names(raw.node_names)?;
        Ok(Config {
            ec2_endpoint: endpoint(raw.endpoints.ec2, "endpoints.ec2", "ec2")?,
            elbv2_endpoint: endpoint(
                raw.endpoints.elasticloadbalancing,
                "endpoints.elasticloadbalancing",
                "elasticloadbalancing",
            )?,
            region,
            cluster_id,
            vpc_id,
            route_table_id,
            target_node_label_keys,
            node_names,
        })
    }

    /// `kubernetes.io/cluster/<cluster_id>`, the tag that marks the cluster's resources.
    pub fn cluster_tag(&self) -> String {
        format!("{CLUSTER_TAG_PREFIX}{}", self.cluster_id)
    }
}

/// The prefix of every cluster's ownership tag.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

fn invalid(detail: std::fmt::Arguments<'_>) -> Error {
    Error::other(format!("aws cloud config: {detail}"))
}

fn required(value: Option<String>, field: &str) -> Result<String, Error> {
    value.filter(|value| !value.is_empty()).ok_or_else(|| {
        invalid(format_args!(
            "\"{field}\" is required (set it in the file given as --cloud-config)"
        ))
    })
}

/// `value`, if given, must start with `prefix` (`vpc-`, `rtb-`).
fn prefixed(value: Option<String>, field: &str, prefix: &str) -> Result<Option<String>, Error> {
    match value {
        Some(id) if !id.starts_with(prefix) || !is_name(&id) => Err(invalid(format_args!(
            "\"{field}\" must be an ID starting with {prefix}, got {id:?}"
        ))),
        other => Ok(other),
    }
}

/// `target_node_label_keys`: a list of distinct Kubernetes label keys, if given.
fn label_keys(value: Option<serde_json::Value>) -> Result<Vec<String>, Error> {
    wasm_ccm_sdk::labels::label_keys(value).map_err(|error| {
        invalid(format_args!(
            "\"{TARGET_NODE_LABEL_KEYS}\" must be a list of node label keys such as \
             [\"node-role.example.com/lb\"]: {error}"
        ))
    })
}

/// `node_names`: `"private-dns-name"` (the default) or `"instance-id"`.
fn node_names(value: Option<serde_json::Value>) -> Result<NodeNames, Error> {
    let Some(value) = value else {
        return Ok(NodeNames::default());
    };
    match value.as_str() {
        Some("private-dns-name") => Ok(NodeNames::PrivateDnsName),
        Some("instance-id") => Ok(NodeNames::InstanceId),
        _ => Err(invalid(format_args!(
            "\"node_names\" must be \"private-dns-name\" or \"instance-id\", got {value}"
        ))),
    }
}

/// Lowercase letters, digits and dashes: region names and resource IDs.
fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `https://SERVICE.REGION.amazonaws.com`, `.amazonaws.com.cn` in the China regions.
fn regional_endpoint(service: &str, region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://{service}.{region}.{suffix}")
}

/// `url` without trailing slashes if it is an absolute `http(s)://host[:port]` URL.
fn validated_url(url: &str, field: &str) -> Result<String, Error> {
    let fail = || {
        invalid(format_args!(
            "\"{field}\" must be an http:// or https:// URL without path or query, got {url:?}"
        ))
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(fail)?;
    let rest = rest.trim_end_matches('/');
    let http = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    if !http || rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return Err(fail());
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Config, String> {
        Config::parse(Some(json.as_bytes().to_vec())).map_err(|err| match err {
            Error::Other(message) => message,
            other => panic!("unexpected {other:?}"),
        })
    }

    #[test]
    fn endpoints_default_to_the_regional_ones() {
        let config = parse(r#"{"region":"cn-north-1","cluster_id":"c1"}"#).unwrap();
        assert_eq!(
            config.ec2_endpoint,
            "https://ec2.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(
            config.elbv2_endpoint,
            "https://elasticloadbalancing.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(config.cluster_tag(), "kubernetes.io/cluster/c1");
    }

    #[test]
    fn given_endpoints_are_used_as_written() {
        let config = parse(
            r#"{"region":"us-east-1","cluster_id":"c1","endpoints":{"ec2":"http://127.0.0.1:5000/","elasticloadbalancing":"http://127.0.0.1:5000"}}"#,
        )
        .unwrap();
        assert_eq!(config.ec2_endpoint, "http://127.0.0.1:5000");
        assert_eq!(config.elbv2_endpoint, "http://127.0.0.1:5000");
    }

    #[test]
    fn errors_name_the_field() {
        for (json, field) in [
            ("{}", "\"region\" is required"),
            (r#"{"region":"us-east-1"}"#, "\"cluster_id\" is required"),
            (r#"{"region":"US East","cluster_id":"c"}"#, "\"region\""),
            (
                r#"{"region":"us-east-1","cluster_id":"a/b"}"#,
                "\"cluster_id\"",
            ),
            (
                r#"{"region":"us-east-1","cluster_id":"c","vpc_id":"subnet-1"}"#,
                "\"vpc_id\"",
            ),
            (
                r#"{"region":"us-east-1","cluster_id":"c","route_table_id":"vpc-1"}"#,
                "\"route_table_id\"",
            ),
            (
                r#"{"region":"us-east-1","cluster_id":"c","endpoints":{"ec2":"ftp://x"}}"#,
                "\"endpoints.ec2\"",
            ),
            (
                r#"{"region":"us-east-1","cluster_id":"c","endpoints":{"s3":"http://x"}}"#,
                "unknown field `s3`",
            ),
        ] {
            let message = parse(json).unwrap_err();
            assert!(message.contains(field), "{json}: {message}");
            assert!(message.starts_with("aws cloud config: "), "{message}");
        }
        assert!(Config::parse(None).is_err());
    }

    #[test]
    fn target_node_label_keys_are_a_list_of_distinct_label_keys() {
        let config = parse(
            r#"{"region":"us-east-1","cluster_id":"c","target_node_label_keys":["node-role.example.com/lb","tier"]}"#,
        )
        .unwrap();
        assert_eq!(
            config.target_node_label_keys,
            ["node-role.example.com/lb", "tier"]
        );
        let none = parse(r#"{"region":"us-east-1","cluster_id":"c"}"#).unwrap();
        assert!(none.target_node_label_keys.is_empty());
        for (keys, detail) in [
            (r#""tier""#, "got \"tier\""),
            (r#"{"tier":true}"#, "got {\"tier\":true}"),
            ("[1]", "1 is not a string"),
            (r#"["a b"]"#, "\"a b\" is not a label key"),
            (r#"["Example.com/lb"]"#, "is not a label key"),
            (r#"["example.com/"]"#, "is not a label key"),
            (r#"["/lb"]"#, "is not a label key"),
            (r#"["tier-"]"#, "is not a label key"),
            (r#"["tier","tier"]"#, "\"tier\" is listed twice"),
        ] {
            let json = format!(
                r#"{{"region":"us-east-1","cluster_id":"c","target_node_label_keys":{keys}}}"#
            );
            let message = parse(&json).unwrap_err();
            assert!(
                message.starts_with("aws cloud config: \"target_node_label_keys\" must be a list"),
                "{json}: {message}"
            );
            assert!(message.contains(detail), "{json}: {message}");
        }
    }

    #[test]
    fn node_names_are_private_dns_names_or_instance_ids() {
        let default = parse(r#"{"region":"us-east-1","cluster_id":"c"}"#).unwrap();
        assert_eq!(default.node_names, NodeNames::PrivateDnsName);
        for (value, expected) in [
            ("private-dns-name", NodeNames::PrivateDnsName),
            ("instance-id", NodeNames::InstanceId),
        ] {
            let json =
                format!(r#"{{"region":"us-east-1","cluster_id":"c","node_names":"{value}"}}"#);
            assert_eq!(parse(&json).unwrap().node_names, expected, "{json}");
        }
        for (value, got) in [
            (r#""hostname""#, r#"got "hostname""#),
            (r#""Instance-ID""#, r#"got "Instance-ID""#),
            ("true", "got true"),
            (r#"["instance-id"]"#, r#"got ["instance-id"]"#),
        ] {
            let json = format!(r#"{{"region":"us-east-1","cluster_id":"c","node_names":{value}}}"#);
            let message = parse(&json).unwrap_err();
            assert_eq!(
                message,
                format!(
                    "aws cloud config: \"node_names\" must be \"private-dns-name\" or \
                     \"instance-id\", {got}"
                ),
                "{json}"
            );
        }
    }
}

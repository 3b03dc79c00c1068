//! The `CloudProvider` custom resource (`wasm-ccm.io/v1alpha1`, cluster-scoped): this module
//! owns its shape — the spec an operator edits to choose, configure and roll out a provider
//! version, and the status the manager reports back — and the CRD generated from it.
//!
//! Why a resource: operators change the provider the way they change everything else in
//! Kubernetes, by editing an object (`helm upgrade --set provider.ref=…:v2`), and read what
//! runs with `kubectl get cloudproviders`. Every spec field mirrors a run-mode flag and has
//! that flag's default, so a resource and a command line describe the same manager:
//!
//! ```yaml
//! apiVersion: wasm-ccm.io/v1alpha1
//! kind: CloudProvider
//! metadata:
//!   name: simcloud
//! spec:
//!   provider: oci://registry.example.com/acme/simcloud:v1.2.0
//!   name: simcloud
//!   egress:
//!     allowedHosts: ["https://api.simcloud.example"]
//!   credentials:
//!     - host: https://api.simcloud.example
//!       secretKeyRef: {name: simcloud, key: token}
//! ```
//!
//! The API server checks what a schema can say (enums, bounds, patterns, and with CEL rules
//! that `cloudConfig` names exactly one source, that `headerName` goes with `type: Header`
//! and `aws` with `type: AwsSigV4`). The manager still parses every string (references, host patterns, durations,
//! sizes) into typed settings before using a spec, as it does flags (`crate::rollout::spec`),
//! and reports what it refuses in the `Progressing` condition: an API server without CEL, or
//! an object written before a rule existed, must not get past it.
//!
//! The CRD is printed by `wasm-ccm crd` ([`crd_yaml`]) and committed as
//! `charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml`; a test fails when they differ.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// A duration as the flags take it (`500ms`, `30s`, `1m30s`, `0`).
const DURATION: &str = crate::cli::DURATION_PATTERN;
/// A size as the flags take it (`65536`, `64Ki`, `64Mi`, `1Gi`).
const SIZE: &str = crate::cli::SIZE_PATTERN;
/// The start of an `--allow` host pattern; the manager parses the rest.
const HOST_PATTERN: &str = r"^https?://[^/?#]+$";
/// A provider reference; the manager parses the rest (a tag or digest is required).
const REFERENCE: &str = r"^(oci|file)://.+$";
/// A pinned manifest digest.
const DIGEST: &str = r"^sha256:[0-9a-f]{64}$";
/// An object's name (a DNS-1123 subdomain), as ConfigMaps and Secrets have.
const DNS_SUBDOMAIN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// A namespace's name (a DNS-1123 label).
const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A key of a ConfigMap's or Secret's data.
const DATA_KEY: &str = r"^[-._a-zA-Z0-9]+$";
/// A label-style key with a prefix, as `spec.loadBalancerClass` must be: `example.com/name`.
const QUALIFIED_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";
/// An HTTP header name (RFC 9110 token).
const HEADER_NAME: &str = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

/// The most shadow divergences [`ShadowStatus::divergences`] keeps.
pub const MAX_DIVERGENCES: usize = wasm_ccm_host::provider::MAX_DIVERGENCES;

/// Which provider version runs, with what configuration, grants, credentials and limits, and
/// how a new version is rolled out.
// Each `printcolumn(...)` repeats `type_ = "string"`, which clippy takes for a duplicate.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "wasm-ccm.io",
    version = "v1alpha1",
    kind = "CloudProvider",
    plural = "cloudproviders",
    status = "CloudProviderStatus",
    derive = "PartialEq",
    category = "wasm-ccm",
    doc = "A cloud provider for wasm-ccm: the WebAssembly component that answers the cloud-controller-manager's calls, its configuration, what it may reach, and how new versions roll out.",
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".spec.name",
        description = "The name the provider reports."
    ),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.active.version",
        description = "The active version: NAME@sha256:<first 12 hex digits of its digest>."
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#,
        description = "Whether a version is active and serving calls."
    ),
    printcolumn(
        name = "Progressing",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Progressing")].status"#,
        description = "Whether a new version is being rolled out."
    ),
    printcolumn(
        name = "Spec",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="SpecApplied")].reason"#,
        description = "Whether the latest spec is what runs (Applied), is being rolled out (RollingOut, Shadowing), or why not (the refusal's reason: InvalidSpec, CapabilityDropped, ShadowDiverged, RolledBack, ...)."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Reference",
        type_ = "string",
        json_path = ".spec.provider",
        description = "The provider reference of the spec.",
        priority = 1
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#,
        description = "Why the provider is or is not ready.",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CloudProviderSpec {
    /// The provider component: oci://REGISTRY/REPO:TAG, oci://REGISTRY/REPO@sha256:DIGEST (or
    /// both: the digest wins and is enforced), or file://PATH to a .wasm on the manager's
    /// filesystem. As --provider.
    #[schemars(regex(pattern = REFERENCE))]
    pub provider: String,

    /// The manifest digest the provider must have (sha256:<64 hex>), whatever a tag in
    /// `provider` resolves to; a different artifact is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DIGEST))]
    pub digest: Option<String>,

    /// The name the provider must report from init. As --cloud-provider; a version that reports
    /// another name is refused.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,

    /// The configuration passed to the provider's init. As --cloud-config; none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_config: Option<CloudConfigSource>,

    /// What the provider may reach, and its budgets (the --allow and --egress-* flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressSpec>,

    /// Credentials the host adds to the provider's requests (the --credential rules, with the
    /// value read from a Secret). Secret values never reach the provider.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialSpec>,

    /// What each provider call may use (the sandbox flags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,

    /// How a new version is rolled out and when it is rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,

    /// Signatures a version must carry before it is Verified, on top of the manager's
    /// --provider-signature-key (both apply: this can require more, never less).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureSpec>,

    /// The nodes this provider serves before they have a providerID (after, a node is the
    /// provider's whose name is its providerID's scheme), when the manager serves several
    /// providers: a label selector, e.g. on labels the kubelet sets. Unset, every node: two
    /// providers selecting one node each claim it, and neither touches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelectorSpec>,

    /// The `spec.loadBalancerClass` of the Services whose load balancers this provider makes,
    /// e.g. `wasm-ccm.io/hcloud`. Unset, none: it serves only Services without a class, if it
    /// is the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 316), regex(pattern = QUALIFIED_NAME))]
    pub load_balancer_class: Option<String>,

    /// Whether this provider makes the load balancers of Services without a
    /// `loadBalancerClass`. Unset: only when it is the one provider the manager serves. At
    /// most one provider of a manager may be its default; with two, neither serves such
    /// Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,

    /// Which nodes this provider's load balancers send traffic to: `Own`, the nodes it
    /// serves (the default), or `All`, every eligible node whatever its provider (a cloud
    /// load balancer in front of bare metal, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_targets: Option<LoadBalancerTargets>,
}

/// A label selector over nodes, as Kubernetes writes one: a node matches when every
/// requirement holds (an empty selector matches every node).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorSpec {
    /// Labels a node must carry, each with this value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,

    /// Requirements on a node's labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

/// One requirement on a node's labels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1, max = 317))]
    pub key: String,

    /// How the label relates to `values`.
    pub operator: SelectorOperator,

    /// The values, for `In` and `NotIn` (at least one); none for `Exists` and
    /// `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub values: Vec<String>,
}

/// A label selector's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    /// The label has one of the values.
    In,
    /// The label is absent, or has none of the values.
    NotIn,
    /// The label is present, with any value.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// Which nodes a provider's load balancers send traffic to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LoadBalancerTargets {
    /// The eligible nodes this provider serves.
    #[default]
    Own,
    /// Every eligible node, whichever provider serves it.
    All,
}

/// Cosign signatures required of every version: a valid signature (in the registry, under
/// the digest's `sha256-HEX.sig` tag) by at least one of `keys`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignatureSpec {
    /// Public keys (PEM, ECDSA P-256, as cosign.pub), each from a ConfigMap or Secret key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub keys: Vec<PublicKeySource>,
}

/// Where a public key comes from: exactly one of `configMapKeyRef` or `secretKeyRef`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("[has(self.configMapKeyRef), has(self.secretKeyRef)].exists_one(set, set)").message("set exactly one of configMapKeyRef or secretKeyRef"))]
#[serde(rename_all = "camelCase")]
pub struct PublicKeySource {
    /// A key of a ConfigMap that holds the PEM public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeyRef>,

    /// A key of a Secret that holds the PEM public key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeyRef>,
}

/// Where the provider's configuration comes from: exactly one of `inline`, `configMapKeyRef`
/// or `secretKeyRef`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("[has(self.inline), has(self.configMapKeyRef), has(self.secretKeyRef)].exists_one(set, set)").message("set exactly one of inline, configMapKeyRef or secretKeyRef"))]
#[serde(rename_all = "camelCase")]
pub struct CloudConfigSource {
    /// The configuration itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,

    /// A key of a ConfigMap that holds the configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeyRef>,

    /// A key of a Secret that holds the configuration (when it holds credentials the
    /// provider itself must see).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeyRef>,
}

/// One key of a ConfigMap or Secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// The object's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,

    /// The key in its data.
    #[schemars(length(min = 1, max = 253), regex(pattern = DATA_KEY))]
    pub key: String,

    /// The object's namespace; the manager's own namespace by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL))]
    pub namespace: Option<String>,
}

/// What the provider may reach, and how much. Each field defaults to its flag's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EgressSpec {
    /// Cloud API hosts the provider may call: scheme, host (or *.domain) and port, e.g.
    /// https://api.example.com, https://*.example.com:8443, http://127.0.0.1:8080. As --allow;
    /// none by default, so the provider reaches nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = HOST_PATTERN)))]
    pub allowed_hosts: Vec<String>,

    /// Requests per second each destination host may receive. As --egress-rate; default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "positive_number")]
    pub rate: Option<f64>,

    /// Burst of requests above the rate each destination host may receive. As --egress-burst;
    /// default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub burst: Option<i32>,

    /// Time allowed to resolve, connect and finish TLS. As --egress-connect-timeout; default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub connect_timeout: Option<String>,

    /// Time allowed from sending a request to the first byte of its response, and between
    /// body chunks. As --egress-first-byte-timeout; default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub first_byte_timeout: Option<String>,

    /// Largest response body the provider may receive. As --egress-max-response; default 8Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub max_response: Option<String>,

    /// Idle keep-alive connections kept per destination (0: no reuse). As
    /// --egress-max-idle-per-host; default 8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_idle_per_host: Option<i32>,

    /// Open connections, idle or busy, across all destinations. As --egress-max-connections;
    /// default 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_connections: Option<i32>,

    /// How long an idle keep-alive connection is kept. As --egress-idle-timeout; default 90s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub idle_timeout: Option<String>,

    /// Egress audit log events per second. As --egress-audit-log-rate; default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "positive_number")]
    pub audit_log_rate: Option<f64>,

    /// Burst of egress audit log events above the rate. As --egress-audit-log-burst; default
    /// 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub audit_log_burst: Option<i32>,

    /// Which requests the audit log writes at INFO (the others are DEBUG events). As
    /// --egress-audit-log; default Failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<AuditLog>,
}

/// Which egress requests the audit log writes at INFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AuditLog {
    /// Refused, rate-limited or unanswered requests, and answers of 400 or above.
    Failures,
    /// Every request.
    All,
}

/// A credential the host adds to requests bound for matching hosts, read from a Secret key;
/// or the AWS keys the host signs those requests with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.headerName) == (has(self.type) && self.type == 'Header')").message("headerName is required with type Header, and only with it"))]
#[x_kube(validation = Rule::new("has(self.aws) == (has(self.type) && self.type == 'AwsSigV4')").message("aws is required with type AwsSigV4, and only with it"))]
#[x_kube(validation = Rule::new("has(self.secretKeyRef) != (has(self.type) && self.type == 'AwsSigV4')").message("secretKeyRef is required, except with type AwsSigV4 (whose keys are in aws)"))]
#[serde(rename_all = "camelCase")]
pub struct CredentialSpec {
    /// The host pattern whose requests carry the credential, as in `egress.allowedHosts`.
    #[schemars(regex(pattern = HOST_PATTERN))]
    pub host: String,

    /// The Secret key holding the credential's value (not with type AwsSigV4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeyRef>,

    /// How the value is sent: Bearer (`Authorization: Bearer <value>`, the default), Header
    /// (`<headerName>: <value>`), or AwsSigV4 (the request is signed with the keys `aws`
    /// names).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<CredentialType>,

    /// The header that carries the value, with type Header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = HEADER_NAME), length(max = 256))]
    pub header_name: Option<String>,

    /// The keys and scope of AWS signing, with type AwsSigV4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aws: Option<AwsSigningSpec>,
}

/// How a credential is sent (the forms of --credential).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CredentialType {
    /// `Authorization: Bearer <value>`.
    #[default]
    Bearer,
    /// `<headerName>: <value>`.
    Header,
    /// AWS Signature Version 4 (`aws-sigv4:` of --credential).
    AwsSigV4,
}

/// AWS signing: the keys (from Secret keys, or temporary keys for the manager's web
/// identity) and, for an endpoint that is not an AWS endpoint name, the region and services.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new("has(self.webIdentity) ? !(has(self.accessKeyIdRef) || has(self.secretAccessKeyRef) || has(self.sessionTokenRef)) : (has(self.accessKeyIdRef) && has(self.secretAccessKeyRef))").message("set accessKeyIdRef and secretAccessKeyRef (and sessionTokenRef for temporary keys), or webIdentity"))]
#[serde(rename_all = "camelCase")]
pub struct AwsSigningSpec {
    /// The one region requests are signed for. Required for an endpoint that is not an AWS
    /// endpoint name (SERVICE.REGION.amazonaws.com); for one that is, it limits the regions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z]+(-[a-z]+)+-[0-9]+$"))]
    pub region: Option<String>,

    /// The services requests are signed for (e.g. ec2, elasticloadbalancing, sts). Required
    /// for an endpoint that is not an AWS endpoint name, where a request's Version tells them
    /// apart; for one that is, it limits the services.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = r"^[a-z0-9-]+$")), extend("x-kubernetes-list-type" = "set"))]
    pub services: Vec<String>,

    /// The API actions requests are signed for (e.g. DescribeInstances, or Describe* for
    /// every action starting so); any action when empty. Others are refused naming the
    /// action. Actions that issue or manage credentials (STS AssumeRole*, GetSessionToken,
    /// IAM access keys and policies…) are never signed, listed or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        inner(regex(pattern = r"^[A-Za-z0-9]{1,128}\*?$")),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub actions: Vec<String>,

    /// The Secret key holding the access key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_ref: Option<KeyRef>,

    /// The Secret key holding the secret access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_ref: Option<KeyRef>,

    /// The Secret key holding the session token of temporary keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_ref: Option<KeyRef>,

    /// Temporary keys from STS AssumeRoleWithWebIdentity for the manager's web identity
    /// (IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE of its environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_identity: Option<WebIdentitySpec>,
}

/// Where a web identity's token is exchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebIdentitySpec {
    /// The STS endpoint; by default the regional one of `region`, of the host's AWS
    /// endpoint name, or of AWS_REGION. Only an AWS STS endpoint over HTTPS
    /// (https://sts.REGION.amazonaws.com…), or one the manager lists with
    /// --sts-endpoint-allow: the manager posts its service account token there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^https?://[^/?#]+(/.*)?$"))]
    pub sts_endpoint: Option<String>,
}

/// What one provider call may use. Each field defaults to its flag's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Most linear memory one call may use. As --memory-limit; default 64Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub memory: Option<String>,

    /// Longest one call may take. As --timeout; default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub timeout: Option<String>,

    /// Most calls in flight at once. As --max-concurrent-calls; default 128.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub max_concurrent_calls: Option<i32>,

    /// Most bytes one call's answer may make the host hold. As --max-result-size; default 8Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub max_result_size: Option<String>,

    /// Most host memory one call's wasi:http resources may hold at once. As
    /// --http-memory-limit; default 16Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub http_memory: Option<String>,

    /// Most resources (wasi:http fields, requests, responses, bodies, futures, their streams
    /// and pollables) one call may hold at once. As --max-http-resources; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16))]
    pub max_http_resources: Option<i32>,

    /// Most bytes the provider version may keep in its cache. As --provider-cache-size;
    /// default 16Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub cache_size: Option<String>,

    /// Most lines one call may log. As --provider-log-lines-per-call; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub log_lines_per_call: Option<i32>,

    /// Most bytes of log lines one call may log. As --provider-log-bytes-per-call; default
    /// 256Ki.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SIZE))]
    pub log_bytes_per_call: Option<String>,

    /// Log lines per second the provider version may write. As --provider-log-rate; default
    /// 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "positive_number")]
    pub log_rate: Option<f64>,

    /// Burst of log lines above the rate. As --provider-log-burst; default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub log_burst: Option<i32>,
}

/// How a new version replaces the active one, and when it is rolled back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Direct (the default): activate a new version once it is fetched, verified, compiled and
    /// its init succeeded. Shadow: first run it beside the active version on read-only calls
    /// and activate it after `shadow.agreeingCalls` answers agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RolloutStrategy>,

    /// The Shadow strategy's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSpec>,

    /// When an activated version is rolled back to the previous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackSpec>,

    /// With a tag and no digest: roll out the digest the tag names when it moves (found by
    /// the manager's periodic check, `--tag-check-interval`), through the usual rollout.
    /// False (the default): the digest the tag named when this generation rolled out keeps
    /// running, on every replica and after restarts, and a moved tag is only reported
    /// (`TagCurrent` False, event `TagMoved`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_tag: Option<bool>,
}

/// How a new version is rolled out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStrategy {
    /// Activate as soon as the new version loads and its init succeeds.
    #[default]
    Direct,
    /// Compare with the active version on read-only calls first.
    Shadow,
}

/// The Shadow strategy: the candidate answers the read-only calls (instance-exists,
/// instance-shutdown, instance-metadata, get-load-balancer, get-load-balancer-name,
/// list-routes) beside the active version; its answers are compared, never acted on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowSpec {
    /// Agreeing answers, with no divergence, after which the candidate is activated; default
    /// 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub agreeing_calls: Option<i32>,

    /// HTTP methods the candidate may use per host besides GET and HEAD, the only ones a
    /// shadow is allowed by default (so that it changes nothing in the cloud).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<ShadowMethods>,

    /// AWS API actions the candidate's signed requests may name besides reads (Describe*,
    /// Get*, List*), the only ones a shadow may sign by default, whatever the method (AWS
    /// takes GET /?Action=TerminateInstances): names, or a name's start followed by *.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        inner(regex(pattern = r"^[A-Za-z0-9]{1,128}\*?$")),
        extend("x-kubernetes-list-type" = "set")
    )]
    pub actions: Vec<String>,
}

/// Methods a shadow may use towards one host pattern.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowMethods {
    /// The host pattern, as in `egress.allowedHosts`.
    #[schemars(regex(pattern = HOST_PATTERN))]
    pub host: String,

    /// The methods allowed besides GET and HEAD.
    #[schemars(length(min = 1))]
    pub methods: Vec<HttpMethod>,
}

/// An HTTP method a shadow may be allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[allow(clippy::upper_case_acronyms)] // As HTTP spells them, and as they appear in YAML.
pub enum HttpMethod {
    /// POST.
    POST,
    /// PUT.
    PUT,
    /// PATCH.
    PATCH,
    /// DELETE.
    DELETE,
    /// OPTIONS.
    OPTIONS,
}

/// Automatic rollback: for `window` after a version is activated, its failure rate (sandbox
/// failures and `other` errors; not `not-found` or `retry-after`) is compared with the
/// previous version's, and the previous version (kept loaded) is reactivated when the new one
/// fails more.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSpec {
    /// How long after activation the new version is watched; default 5m, 0 turns automatic
    /// rollback off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub window: Option<String>,

    /// Percentage points by which the new version's failure rate may exceed the previous
    /// version's before it is rolled back; default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub failure_rate_threshold: Option<i32>,

    /// Calls the new version must have answered in the window before it can be judged;
    /// default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub minimum_calls: Option<i32>,
}

/// What the manager runs and how the last change went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudProviderStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The version serving calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<ProviderVersion>,

    /// The version active before it, kept loaded for a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<ProviderVersion>,

    /// When the rollback window of the active version ends: until then `previous` stays
    /// loaded (a manager restarted meanwhile loads it again) and the active version may be
    /// rolled back to it. Reported from the manager's record, the `wasm-ccm.io/rollback`
    /// annotation, which is what a restarted manager trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub rollback_window_end: Option<Time>,

    /// A version being rolled out, until it is activated or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Candidate>,

    /// Fetched, Verified, Ready, Progressing, SpecApplied, RolledBack, Degraded, TagCurrent
    /// and NodesUncontested, one of each at most.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Calls and failures of each version during a rollout: the candidate's and the active
    /// version's while shadowing, the new and the previous version's in the rollback window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["digest"]))]
    pub version_calls: Vec<VersionCalls>,

    /// How the candidate's answers compared with the active version's, under the Shadow
    /// strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
}

/// One provider version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderVersion {
    /// The reference it was resolved from, as in the spec.
    pub reference: String,

    /// Its manifest digest (of the component, for a file://).
    pub digest: String,

    /// NAME@sha256:<12 hex>, as metrics, audit records and logs name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// When it became active (for `active`), or stopped being (for `previous`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub since: Option<Time>,
}

/// A version being rolled out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// The reference being rolled out.
    pub reference: String,

    /// Its digest, once fetched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,

    /// The step it is at.
    pub phase: CandidatePhase,

    /// When it entered that step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub since: Option<Time>,
}

/// The steps of a rollout, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CandidatePhase {
    /// Downloading the artifact (or reading the file).
    Fetching,
    /// Checking the component against the host contract and compiling it (or loading its
    /// compiled code from the cache).
    Verifying,
    /// Calling init with the cloud config.
    Initializing,
    /// Answering read-only calls beside the active version (Shadow strategy).
    Shadowing,
}

/// Calls and failures of one version during a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionCalls {
    /// The version's digest.
    pub digest: String,

    /// Calls it answered.
    pub calls: i64,

    /// Of those, failures: sandbox failures and `other` errors (not `not-found` or
    /// `retry-after`).
    pub failures: i64,
}

/// Shadow comparison so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// Calls whose answers agreed.
    pub agreeing_calls: i64,

    /// Calls whose answers differed.
    pub diverging_calls: i64,

    /// Read-only calls not mirrored because too many shadow calls were in flight (a
    /// candidate slower than the active version gets fewer to compare).
    #[serde(default)]
    pub skipped_calls: i64,

    /// The first divergences, at most 5 (`MAX_DIVERGENCES`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_DIVERGENCES))]
    pub divergences: Vec<Divergence>,
}

/// One call where the candidate answered differently.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// The contract function, e.g. instance-metadata.
    pub function: String,

    /// What differed, short: e.g. `zone: "a" (active) != "b" (candidate)`.
    #[schemars(length(max = 1024))]
    pub diff: String,

    /// When it was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "timestamp")]
    pub observed_at: Option<Time>,
}

/// A condition, in the standard `metav1.Condition` shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// One of the `condition` constants (Ready, Progressing, SpecApplied, ...).
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    pub type_: String,

    /// True, False or Unknown.
    pub status: ConditionStatus,

    /// Why, in CamelCase (e.g. DigestMismatch).
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,

    /// What happened and what to do about it.
    #[schemars(length(max = 32768))]
    pub message: String,

    /// When the status last changed.
    #[schemars(schema_with = "timestamp")]
    pub last_transition_time: Time,

    /// The spec generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// The manager cannot tell yet.
    Unknown,
}

/// The condition types a `CloudProvider` reports.
pub mod condition {
    /// The spec's provider artifact was downloaded (or read), or why not.
    pub const FETCHED: &str = "Fetched";
    /// Its digest matched and the component satisfies the host contract, or why not.
    pub const VERIFIED: &str = "Verified";
    /// A version is active and serving calls.
    pub const READY: &str = "Ready";
    /// A new version is being rolled out (the candidate in status).
    pub const PROGRESSING: &str = "Progressing";
    /// Whether the latest generation's spec is what runs: True (`Applied`) once its version
    /// is active; Unknown while it rolls out (`RollingOut`, `Shadowing`, or a refusal that is
    /// tried again, e.g. `FetchFailed`); False with the reason when it was refused
    /// (`InvalidSpec`, `CapabilityDropped`, ...), diverged as a shadow or was rolled back,
    /// while the active version keeps serving.
    pub const SPEC_APPLIED: &str = "SpecApplied";
    /// The last activated version was rolled back, with the failure rates that decided it.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Something the active version needs is missing or failing (a Secret, a ConfigMap),
    /// while it keeps serving.
    pub const DEGRADED: &str = "Degraded";
    /// With a tag and no digest: whether the tag still names the digest recorded when the
    /// generation rolled out (False, reason `TagMoved`, when it names another).
    pub const TAG_CURRENT: &str = "TagCurrent";
    /// With several providers in one manager: whether every node this provider claims is
    /// its own alone (False, reason `NodesContested`, naming the nodes another provider
    /// claims too and that provider: none touches them).
    pub const NODES_UNCONTESTED: &str = "NodesUncontested";
    /// Every type, in the order status lists them.
    pub const ALL: [&str; 9] = [
        FETCHED,
        VERIFIED,
        READY,
        PROGRESSING,
        SPEC_APPLIED,
        ROLLED_BACK,
        DEGRADED,
        TAG_CURRENT,
        NODES_UNCONTESTED,
    ];
}

fn positive_number(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": true,
        "nullable": true,
    })
}

fn timestamp(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "string", "format": "date-time"})
}

/// The CRD as `wasm-ccm crd` prints it and the chart ships it: YAML, one document.
pub fn crd_yaml() -> String {
    let yaml = serde_saphyr::to_string(&CloudProvider::crd())
        .expect("a CRD is plain data and always serialises");
    format!(
        "# The CloudProvider CRD, generated from the manager's types: regenerate with\n\
         # `cargo run -p wasm-ccm -- crd > charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml`.\n\
         {yaml}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed CRD the chart ships.
    const COMMITTED: &str =
        include_str!("../../charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml");

    #[test]
    fn resource_committed_crd_is_the_generated_one() {
        assert!(
            COMMITTED == crd_yaml(),
            "charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml differs from the CRD the \
             types generate; regenerate it with\n    cargo run -p wasm-ccm -- crd > \
             charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml"
        );
    }
}

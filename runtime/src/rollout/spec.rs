//! From a `CloudProvider` spec to typed settings: every string is parsed as its flag would
//! be (references, host patterns, durations, sizes), on top of the flags' values as
//! defaults, and a refusal names the field (`spec.egress.allowedHosts[1]: …`). The API
//! server's schema and CEL rules are checked again here: a server without CEL, or an object
//! stored before a rule existed, must not get past the manager.
//!
//! A spec splits in three, by what a change costs:
//! - [`VersionSpec`]: the component, the name it must report and its cloud config, which
//!   make a version: changing any of them loads one (fetch, verify, compile, `init`) and
//!   rolls it out. It also carries the limits, which change in place: memory and
//!   concurrency by moving the version to a new engine ([`EngineLimits`]), the others by
//!   rebinding it.
//! - the egress: grants, budgets and credentials. Changing it reconfigures the active
//!   version in place, without `init` or resync.
//! - [`RolloutPolicy`]: how versions are rolled out and rolled back.

use std::time::Duration;

use http::HeaderName;

use super::references::{Kind, References};
use crate::cli::{parse_duration, parse_duration_or_zero, parse_size};
use crate::resource::{
    AuditLog, AwsSigningSpec, CloudConfigSource, CloudProviderSpec, CredentialSpec, CredentialType,
    EgressSpec, HttpMethod, LimitsSpec, RolloutStrategy,
};
use wasm_ccm_host::egress::{
    AuditLogScope, AwsKeys, CredentialRule, EgressConfig, GrantSource, HostPattern, RateBudget,
    SecretSource, SigV4, WebIdentityConfig, check_sts_endpoint, is_action_pattern,
};
use wasm_ccm_host::sandbox::SandboxConfig;
use wasm_ccm_host::source::{ProviderRef, PublicKey, SignaturePolicy, TrustedKeys};

/// A spec field the manager cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    /// The field's path, e.g. `spec.egress.allowedHosts[1]`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

fn refuse(field: impl Into<String>) -> impl FnOnce(String) -> SpecError {
    let field = field.into();
    move |problem| SpecError { field, problem }
}

/// What a provider version is made from; two specs with equal `VersionSpec`s run the same
/// version.
#[derive(Debug, Clone)]
pub struct VersionSpec {
    /// `spec.provider`, with `spec.digest` pinned into it for an `oci://` reference.
    pub reference: ProviderRef,
    /// `spec.digest`, also checked against a `file://` component.
    pub digest: Option<String>,
    /// `spec.name`.
    pub name: String,
    /// The bytes passed to `init`.
    pub cloud_config: Option<Vec<u8>>,
    /// `spec.cloudConfig` as written, which a rollback record keeps for the version.
    pub cloud_config_source: Option<CloudConfigSource>,
    /// `spec.limits` over the flags.
    pub sandbox: SandboxConfig,
    /// `spec.signature`: the signatures required on top of the manager's
    /// `--provider-signature-key`.
    pub signature: SignaturePolicy,
    /// The spec fields it was made from, to compare versions: the provider, digest and
    /// name.
    key: (String, Option<String>, String),
    /// The limits the engine is built with.
    engine_limits: EngineLimits,
}

/// `spec.limits.memory` and `.maxConcurrentCalls` as written: the engine is built with them,
/// so the version moves to a new engine when they change. The other limits change in place.
pub type EngineLimits = (Option<String>, Option<i32>);

impl VersionSpec {
    /// Whether `other` describes the same component, name and cloud config: the same
    /// version, `init`ed alike (its limits may differ).
    pub fn same_as(&self, other: &VersionSpec) -> bool {
        self.key == other.key && self.cloud_config == other.cloud_config
    }

    /// Whether `other` is the same version under the same limits, pinned to the same
    /// digest: a rollout that failed with these is not tried again until one of them
    /// changes (a tag that moves again is another digest).
    pub fn identical(&self, other: &VersionSpec) -> bool {
        self.same_as(other)
            && self.digest == other.digest
            && self.signature == other.signature
            && self.engine_limits == other.engine_limits
            && self.sandbox.call_limits() == other.sandbox.call_limits()
    }

    /// Run `reference` with `digest` instead of the spec's component (the version a
    /// rollback went back to), everything else as the spec says.
    pub fn pin(&mut self, reference: ProviderRef, digest: String) {
        self.reference = match reference {
            ProviderRef::Oci(mut oci) => {
                oci.digest = Some(digest.clone());
                ProviderRef::Oci(oci)
            }
            file => file,
        };
        self.digest = Some(digest);
    }

    /// The engine limits as written: versions with equal ones share one engine.
    pub fn engine_limits(&self) -> EngineLimits {
        self.engine_limits.clone()
    }
}

/// Automatic rollback, after a version is activated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RollbackPolicy {
    /// How long the new version is watched; zero turns rollback off.
    pub window: Duration,
    /// Percentage points its failure rate may exceed the previous version's.
    pub threshold: f64,
    /// Calls it must answer in the window before it is judged.
    pub minimum_calls: u64,
}

/// The Shadow strategy's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ShadowPolicy {
    /// Agreeing answers, with no divergence, after which the candidate is activated.
    pub agreeing_calls: u64,
    /// Methods besides GET and HEAD the candidate may use, per host pattern.
    pub methods: Vec<(HostPattern, Vec<http::Method>)>,
    /// AWS actions besides reads the candidate's signed requests may name.
    pub actions: Vec<String>,
}

/// How a version is rolled out and rolled back.
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutPolicy {
    /// Direct or Shadow.
    pub strategy: RolloutStrategy,
    /// The Shadow strategy's settings.
    pub shadow: ShadowPolicy,
    /// Automatic rollback.
    pub rollback: RollbackPolicy,
    /// `rollout.followTag`: roll out the digest a moved tag names.
    pub follow_tag: bool,
}

/// `spec.egress` and `spec.credentials` as written: a version's egress gate changes when
/// they do.
pub type EgressKey = (Option<EgressSpec>, Vec<CredentialSpec>);

/// A spec, parsed.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The version to run.
    pub version: VersionSpec,
    /// What it may reach, and with which credentials.
    pub egress: EgressConfig,
    /// `spec.egress` and `spec.credentials` as written, to compare.
    pub egress_key: EgressKey,
    /// `spec.rollout`.
    pub rollout: RolloutPolicy,
}

/// The flags' values, which a spec's fields override.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// The egress flags (with no `--allow` or `--credential`, refused with a resource).
    pub egress: EgressConfig,
    /// The sandbox flags.
    pub sandbox: SandboxConfig,
}

/// Parse `spec` over `defaults`; Secrets and ConfigMaps it names are read from `references`
/// (credentials stay live handles: a rotated Secret applies to the next request).
pub fn parse(
    spec: &CloudProviderSpec,
    defaults: &Defaults,
    references: &References,
) -> Result<Desired, SpecError> {
    let reference = reference(spec)?;
    if spec.name.is_empty() {
        return Err(refuse("spec.name")("must not be empty".into()));
    }
    if let Some(selector) = &spec.node_selector {
        crate::controllers::fleet::NodeSelector::parse(selector)
            .map_err(refuse("spec.nodeSelector"))?;
    }
    cloud_config_apart_from_credentials(spec, references)?;
    let cloud_config = match &spec.cloud_config {
        None => None,
        Some(source) => Some(cloud_config(source, references)?),
    };
    let sandbox = limits(spec.limits.as_ref(), &defaults.sandbox)?;
    let signature = signature_keys(spec, references)?;
    let mut egress = egress(spec.egress.as_ref(), &defaults.egress)?;
    egress.credentials = spec
        .credentials
        .iter()
        .enumerate()
        .map(|(index, credential)| {
            credential_rule(
                index,
                credential,
                references,
                &defaults.egress.sts_endpoints,
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(Desired {
        version: VersionSpec {
            reference,
            digest: spec.digest.clone(),
            name: spec.name.clone(),
            cloud_config,
            cloud_config_source: spec.cloud_config.clone(),
            sandbox,
            signature,
            key: (
                spec.provider.clone(),
                spec.digest.clone(),
                spec.name.clone(),
            ),
            engine_limits: spec.limits.as_ref().map_or((None, None), |limits| {
                (limits.memory.clone(), limits.max_concurrent_calls)
            }),
        },
        egress,
        egress_key: (spec.egress.clone(), spec.credentials.clone()),
        rollout: rollout(spec)?,
    })
}

fn reference(spec: &CloudProviderSpec) -> Result<ProviderRef, SpecError> {
    let mut reference: ProviderRef =
        spec.provider
            .parse()
            .map_err(|error: wasm_ccm_host::source::ReferenceError| {
                refuse("spec.provider")(error.to_string())
            })?;
    let Some(digest) = &spec.digest else {
        return Ok(reference);
    };
    let well_formed = digest
        .strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if !well_formed {
        return Err(refuse("spec.digest")(format!(
            "{digest:?} is not sha256:<64 hex digits>"
        )));
    }
    if let ProviderRef::Oci(oci) = &mut reference {
        match &oci.digest {
            Some(pinned) if pinned != digest => {
                return Err(refuse("spec.digest")(format!(
                    "{digest} differs from the digest in spec.provider ({pinned}); give one"
                )));
            }
            _ => oci.digest = Some(digest.clone()),
        }
    }
    Ok(reference)
}

/// The keys of `spec.signature`, read from their ConfigMaps and Secrets.
fn signature_keys(
    spec: &CloudProviderSpec,
    references: &References,
) -> Result<SignaturePolicy, SpecError> {
    let sources = spec.signature.iter().flat_map(|signature| &signature.keys);
    let mut keys = Vec::new();
    for (index, source) in sources.enumerate() {
        let field = format!("spec.signature.keys[{index}]");
        let (pem, name) = match (&source.config_map_key_ref, &source.secret_key_ref) {
            (Some(key), None) => (
                references
                    .config_map_key(key)
                    .map_err(refuse(format!("{field}.configMapKeyRef")))?,
                format!("{} key {}", references.key(Kind::ConfigMap, key), key.key),
            ),
            (None, Some(key)) => (
                references
                    .secret_key(key)
                    .map_err(refuse(format!("{field}.secretKeyRef")))?,
                format!("{} key {}", references.key(Kind::Secret, key), key.key),
            ),
            _ => {
                return Err(refuse(field)(
                    "set exactly one of configMapKeyRef or secretKeyRef".into(),
                ));
            }
        };
        let key =
            PublicKey::from_pem(name, &pem).map_err(|error| refuse(field)(error.to_string()))?;
        keys.push(key);
    }
    Ok(SignaturePolicy::default().and(TrustedKeys {
        source: "spec.signature.keys".into(),
        keys,
    }))
}

/// The bytes of the cloud config `source` names.
pub fn cloud_config(
    source: &CloudConfigSource,
    references: &References,
) -> Result<Vec<u8>, SpecError> {
    match (
        &source.inline,
        &source.config_map_key_ref,
        &source.secret_key_ref,
    ) {
        (Some(inline), None, None) => Ok(inline.clone().into_bytes()),
        (None, Some(key), None) => references
            .config_map_key(key)
            .map_err(refuse("spec.cloudConfig.configMapKeyRef")),
        (None, None, Some(key)) => references
            .secret_key(key)
            .map_err(refuse("spec.cloudConfig.secretKeyRef")),
        _ => Err(refuse("spec.cloudConfig")(
            "set exactly one of inline, configMapKeyRef or secretKeyRef".into(),
        )),
    }
}

/// Refuse a cloud config read from a Secret key that a credential also uses: `init` would
/// receive the credential's raw value, which must never enter the sandbox.
fn cloud_config_apart_from_credentials(
    spec: &CloudProviderSpec,
    references: &References,
) -> Result<(), SpecError> {
    let Some(config) = spec
        .cloud_config
        .as_ref()
        .and_then(|source| source.secret_key_ref.as_ref())
    else {
        return Ok(());
    };
    let object = references.key(Kind::Secret, config);
    for (index, credential) in spec.credentials.iter().enumerate() {
        let aws = credential.aws.iter().flat_map(|aws| {
            [
                ("aws.accessKeyIdRef", &aws.access_key_id_ref),
                ("aws.secretAccessKeyRef", &aws.secret_access_key_ref),
                ("aws.sessionTokenRef", &aws.session_token_ref),
            ]
        });
        let keys = std::iter::once(("secretKeyRef", &credential.secret_key_ref)).chain(aws);
        for (name, key) in keys {
            if let Some(key) = key
                && key.key == config.key
                && references.key(Kind::Secret, key) == object
            {
                return Err(refuse("spec.cloudConfig.secretKeyRef")(format!(
                    "{object} key {:?} is also spec.credentials[{index}].{name}: the provider's init would receive the credential; keep the cloud config under another key",
                    config.key
                )));
            }
        }
    }
    Ok(())
}

fn host_pattern(field: String, text: &str) -> Result<HostPattern, SpecError> {
    text.parse()
        .map_err(|error: wasm_ccm_host::egress::PatternError| refuse(field)(error.to_string()))
}

fn egress(spec: Option<&EgressSpec>, defaults: &EgressConfig) -> Result<EgressConfig, SpecError> {
    let mut config = EgressConfig {
        source: GrantSource::Resource,
        ..defaults.clone()
    };
    let Some(spec) = spec else {
        return Ok(config);
    };
    config.allow = spec
        .allowed_hosts
        .iter()
        .enumerate()
        .map(|(index, host)| host_pattern(format!("spec.egress.allowedHosts[{index}]"), host))
        .collect::<Result<_, _>>()?;
    config.check_grants().map_err(|refused| {
        refuse(format!("spec.egress.allowedHosts[{}]", refused.index))(refused.to_string())
    })?;
    if let Some(rate) = spec.rate {
        config.budget.per_second = positive(rate, "spec.egress.rate")?;
    }
    if let Some(burst) = spec.burst {
        config.budget.burst = count(burst, "spec.egress.burst")?;
    }
    if let Some(text) = &spec.connect_timeout {
        config.limits.connect_timeout =
            parse_duration(text).map_err(refuse("spec.egress.connectTimeout"))?;
    }
    if let Some(text) = &spec.first_byte_timeout {
        let timeout = parse_duration(text).map_err(refuse("spec.egress.firstByteTimeout"))?;
        config.limits.first_byte_timeout = timeout;
        config.limits.between_bytes_timeout = timeout;
    }
    if let Some(text) = &spec.max_response {
        config.limits.max_response_bytes =
            parse_size(text).map_err(refuse("spec.egress.maxResponse"))?;
    }
    if let Some(idle) = spec.max_idle_per_host {
        config.pool.max_idle_per_host = count(idle, "spec.egress.maxIdlePerHost")? as usize;
    }
    if let Some(max) = spec.max_connections {
        config.pool.max_connections = match count(max, "spec.egress.maxConnections")? {
            0 => {
                return Err(refuse("spec.egress.maxConnections")(
                    "must be at least 1".into(),
                ));
            }
            max => max as usize,
        };
    }
    if let Some(text) = &spec.idle_timeout {
        config.pool.idle_timeout =
            parse_duration(text).map_err(refuse("spec.egress.idleTimeout"))?;
    }
    if let Some(rate) = spec.audit_log_rate {
        config.audit_log.rate = RateBudget {
            per_second: positive(rate, "spec.egress.auditLogRate")?,
            ..config.audit_log.rate
        };
    }
    if let Some(burst) = spec.audit_log_burst {
        config.audit_log.rate.burst = count(burst, "spec.egress.auditLogBurst")?;
    }
    if let Some(which) = spec.audit_log {
        config.audit_log.scope = match which {
            AuditLog::Failures => AuditLogScope::Failures,
            AuditLog::All => AuditLogScope::All,
        };
    }
    Ok(config)
}

fn credential_rule(
    index: usize,
    spec: &CredentialSpec,
    references: &References,
    sts_endpoints: &[HostPattern],
) -> Result<CredentialRule, SpecError> {
    let field = format!("spec.credentials[{index}]");
    let target = host_pattern(format!("{field}.host"), &spec.host)?;
    let kind = spec.kind.unwrap_or_default();
    if kind == CredentialType::AwsSigV4 {
        if spec.secret_key_ref.is_some() || spec.header_name.is_some() {
            let which = if spec.secret_key_ref.is_some() {
                "secretKeyRef"
            } else {
                "headerName"
            };
            return Err(refuse(format!("{field}.{which}"))(
                "not with type AwsSigV4: its keys are in aws".into(),
            ));
        }
        let Some(aws) = &spec.aws else {
            return Err(refuse(format!("{field}.aws"))(
                "required with type AwsSigV4".into(),
            ));
        };
        return aws_rule(&field, target, aws, references, sts_endpoints);
    }
    if spec.aws.is_some() {
        return Err(refuse(format!("{field}.aws"))(
            "only allowed with type AwsSigV4".into(),
        ));
    }
    let header = match (kind, &spec.header_name) {
        (CredentialType::Header, Some(name)) => {
            Some(HeaderName::try_from(name.as_str()).map_err(|_| {
                refuse(format!("{field}.headerName"))(format!(
                    "{name:?} is not a valid header name"
                ))
            })?)
        }
        (_, Some(_)) => {
            return Err(refuse(format!("{field}.headerName"))(
                "only allowed with type Header".into(),
            ));
        }
        (CredentialType::Header, None) => {
            return Err(refuse(format!("{field}.headerName"))(
                "required with type Header".into(),
            ));
        }
        (_, None) => None,
    };
    let Some(key) = &spec.secret_key_ref else {
        return Err(refuse(format!("{field}.secretKeyRef"))(
            "required with type Bearer or Header".into(),
        ));
    };
    let secret = references.shared_secret(key);
    Ok(CredentialRule::new(
        target,
        header,
        SecretSource::Shared(secret),
    ))
}

/// The signing rule of `spec.credentials[i]` (`field`) with type AwsSigV4. A stated web
/// identity STS endpoint must be AWS's or one of `sts_endpoints` (--sts-endpoint-allow).
fn aws_rule(
    field: &str,
    target: HostPattern,
    aws: &AwsSigningSpec,
    references: &References,
    sts_endpoints: &[HostPattern],
) -> Result<CredentialRule, SpecError> {
    let field = format!("{field}.aws");
    let secret = |key: &Option<_>| {
        key.as_ref()
            .map(|key| SecretSource::Shared(references.shared_secret(key)))
    };
    let keys = match (
        &aws.web_identity,
        secret(&aws.access_key_id_ref),
        secret(&aws.secret_access_key_ref),
    ) {
        (Some(identity), None, None) if aws.session_token_ref.is_none() => {
            if let Some(endpoint) = &identity.sts_endpoint {
                check_sts_endpoint(endpoint, sts_endpoints).map_err(|error| {
                    refuse(format!("{field}.webIdentity.stsEndpoint"))(error.to_string())
                })?;
            }
            let config = WebIdentityConfig::from_env(
                identity.sts_endpoint.as_deref(),
                aws.region.as_deref(),
                &target,
            )
            .map_err(|error| refuse(format!("{field}.webIdentity"))(error.to_string()))?;
            AwsKeys::web_identity(config)
        }
        (None, Some(access_key_id), Some(secret_access_key)) => AwsKeys::from_sources(
            access_key_id,
            secret_access_key,
            secret(&aws.session_token_ref),
        ),
        _ => {
            return Err(refuse(field)(
                "set accessKeyIdRef and secretAccessKeyRef (and sessionTokenRef for temporary keys), or webIdentity".into(),
            ));
        }
    };
    let sigv4 = SigV4::new(aws.region.clone(), aws.services.clone(), keys)
        .map_err(|error| refuse(field.clone())(error.to_string()))?
        .with_actions(aws.actions.clone())
        .map_err(|error| refuse(format!("{field}.actions"))(error.to_string()))?;
    CredentialRule::aws_sigv4(target, sigv4).map_err(|error| refuse(field)(error.to_string()))
}

fn limits(spec: Option<&LimitsSpec>, defaults: &SandboxConfig) -> Result<SandboxConfig, SpecError> {
    let mut config = defaults.clone();
    let Some(spec) = spec else {
        return Ok(config);
    };
    let size = |text: &Option<String>, field: &str| -> Result<Option<u64>, SpecError> {
        text.as_deref()
            .map(|text| parse_size(text).map_err(refuse(format!("spec.limits.{field}"))))
            .transpose()
    };
    if let Some(memory) = size(&spec.memory, "memory")? {
        config.memory_limit = memory;
    }
    if let Some(text) = &spec.timeout {
        config.call_timeout = parse_duration(text).map_err(refuse("spec.limits.timeout"))?;
    }
    if let Some(calls) = spec.max_concurrent_calls {
        config.max_concurrent_calls = match count(calls, "spec.limits.maxConcurrentCalls")? {
            calls @ 1..=10_000 => calls,
            _ => {
                return Err(refuse("spec.limits.maxConcurrentCalls")(
                    "must be 1 to 10000".into(),
                ));
            }
        };
    }
    if let Some(bytes) = size(&spec.max_result_size, "maxResultSize")? {
        config.max_result_bytes = bytes;
    }
    if let Some(bytes) = size(&spec.http_memory, "httpMemory")? {
        config.http.max_memory = bytes;
    }
    if let Some(resources) = spec.max_http_resources {
        config.http.max_resources = match count(resources, "spec.limits.maxHttpResources")? {
            resources @ 16.. => resources,
            _ => {
                return Err(refuse("spec.limits.maxHttpResources")(
                    "must be at least 16: a call holds a few resources before it makes a request"
                        .into(),
                ));
            }
        };
    }
    if let Some(bytes) = size(&spec.cache_size, "cacheSize")? {
        config.provider_cache.max_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    }
    if let Some(lines) = spec.log_lines_per_call {
        config.provider_logs.lines_per_call = count(lines, "spec.limits.logLinesPerCall")?;
    }
    if let Some(bytes) = size(&spec.log_bytes_per_call, "logBytesPerCall")? {
        config.provider_logs.bytes_per_call = usize::try_from(bytes).unwrap_or(usize::MAX);
    }
    if let Some(rate) = spec.log_rate {
        config.provider_logs.rate.per_second = positive(rate, "spec.limits.logRate")?;
    }
    if let Some(burst) = spec.log_burst {
        config.provider_logs.rate.burst = count(burst, "spec.limits.logBurst")?;
    }
    Ok(config)
}

fn rollout(spec: &CloudProviderSpec) -> Result<RolloutPolicy, SpecError> {
    let rollout = spec.rollout.clone().unwrap_or_default();
    let rollback = rollout.rollback.unwrap_or_default();
    let window = match &rollback.window {
        None => Duration::from_secs(300),
        Some(text) => {
            parse_duration_or_zero(text).map_err(refuse("spec.rollout.rollback.window"))?
        }
    };
    let threshold = match rollback.failure_rate_threshold {
        None => 10,
        Some(points @ 0..=100) => points,
        Some(_) => {
            return Err(refuse("spec.rollout.rollback.failureRateThreshold")(
                "must be 0 to 100 percentage points".into(),
            ));
        }
    };
    let minimum_calls = match rollback.minimum_calls {
        None => 20,
        Some(calls) if calls >= 1 => calls as u64,
        Some(_) => {
            return Err(refuse("spec.rollout.rollback.minimumCalls")(
                "must be at least 1".into(),
            ));
        }
    };
    let shadow = rollout.shadow.unwrap_or_default();
    let agreeing_calls = match shadow.agreeing_calls {
        None => 50,
        Some(calls) if calls >= 1 => calls as u64,
        Some(_) => {
            return Err(refuse("spec.rollout.shadow.agreeingCalls")(
                "must be at least 1".into(),
            ));
        }
    };
    let methods = shadow
        .methods
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let pattern = host_pattern(
                format!("spec.rollout.shadow.methods[{index}].host"),
                &entry.host,
            )?;
            let methods = entry
                .methods
                .iter()
                .map(|method| match method {
                    HttpMethod::POST => http::Method::POST,
                    HttpMethod::PUT => http::Method::PUT,
                    HttpMethod::PATCH => http::Method::PATCH,
                    HttpMethod::DELETE => http::Method::DELETE,
                    HttpMethod::OPTIONS => http::Method::OPTIONS,
                })
                .collect();
            Ok((pattern, methods))
        })
        .collect::<Result<_, SpecError>>()?;
    for (index, action) in shadow.actions.iter().enumerate() {
        if !is_action_pattern(action) {
            return Err(refuse(format!("spec.rollout.shadow.actions[{index}]"))(
                format!(
                    "{action:?} is not an API action name (e.g. SearchTransitGatewayRoutes) or a name's start followed by *"
                ),
            ));
        }
    }
    let actions = shadow.actions.clone();
    Ok(RolloutPolicy {
        strategy: rollout.strategy.unwrap_or_default(),
        shadow: ShadowPolicy {
            agreeing_calls,
            methods,
            actions,
        },
        rollback: RollbackPolicy {
            window,
            threshold: f64::from(threshold),
            minimum_calls,
        },
        follow_tag: rollout.follow_tag.unwrap_or(false),
    })
}

fn positive(value: f64, field: &str) -> Result<f64, SpecError> {
    if value > 0.0 && value.is_finite() {
        Ok(value)
    } else {
        Err(refuse(field)(format!("{value} is not a positive number")))
    }
}

fn count(value: i32, field: &str) -> Result<u32, SpecError> {
    u32::try_from(value).map_err(|_| refuse(field)(format!("{value} is negative")))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, Patch, PatchParams};
    use kube_emulator::{Emulator, EmulatorOptions};
    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use wasm_ccm_host::egress::{Caller, EgressGate};
    use wasm_ccm_host::metrics::Metrics;

    use super::*;

    /// A spec granting `url` and signing its requests with the `aws` of `credential`.
    fn spec_with(url: &str, credential: Value) -> CloudProviderSpec {
        serde_json::from_value(json!({
            "provider": "file:///provider.wasm",
            "name": "aws",
            "egress": {"allowedHosts": [url]},
            "credentials": [credential],
        }))
        .expect("a spec")
    }

    /// References read through a client that reaches nothing (for specs that fail first).
    fn offline_references() -> std::sync::Arc<References> {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        References::new(client, "kube-system".into())
    }

    fn defaults() -> Defaults {
        Defaults {
            egress: EgressConfig::default(),
            sandbox: SandboxConfig::default(),
        }
    }

    #[test]
    fn the_http_budget_limits_are_read_and_a_bad_one_refused_naming_it() {
        let spec = |limits: Value| -> crate::resource::LimitsSpec {
            serde_json::from_value(limits).expect("limits")
        };
        let config = limits(
            Some(&spec(json!({"httpMemory": "4Mi", "maxHttpResources": 64}))),
            &SandboxConfig::default(),
        )
        .unwrap();
        assert_eq!(config.http.max_memory, 4 * 1024 * 1024);
        assert_eq!(config.http.max_resources, 64);
        let unset = limits(Some(&spec(json!({}))), &SandboxConfig::default()).unwrap();
        assert_eq!(unset.http, SandboxConfig::default().http);

        let few = limits(
            Some(&spec(json!({"maxHttpResources": 8}))),
            &SandboxConfig::default(),
        )
        .unwrap_err();
        assert_eq!(few.field, "spec.limits.maxHttpResources");
        let size = limits(
            Some(&spec(json!({"httpMemory": "lots"}))),
            &SandboxConfig::default(),
        )
        .unwrap_err();
        assert_eq!(size.field, "spec.limits.httpMemory");
    }

    async fn emulator() -> (Emulator, kube::Client) {
        let emulator = Emulator::start("127.0.0.1:0".parse().unwrap(), EmulatorOptions::default())
            .await
            .expect("emulator starts");
        let config =
            kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
                .await
                .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        (emulator, client)
    }

    async fn aws_secret(client: &kube::Client, key_id: &str) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "aws"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": key_id,
                "AWS_SECRET_ACCESS_KEY": "the-secret",
                "AWS_SESSION_TOKEN": "the-session-token",
            },
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), "kube-system")
            .patch(
                "aws",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&secret),
            )
            .await
            .unwrap();
    }

    /// A server answering 200 to every request, keeping each request's head.
    async fn capture() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let kept = heads.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let mut request = vec![0u8; 65536];
                    let read = socket.read(&mut request).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&request[..read]).to_lowercase();
                    kept.lock().unwrap().push(head);
                    let answer =
                        "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        (url, heads)
    }

    #[tokio::test]
    async fn an_aws_credential_signs_with_the_keys_of_its_secret_and_follows_their_rotation() {
        let (_emulator, client) = emulator().await;
        aws_secret(&client, "AKIDFIRST").await;
        let (url, heads) = capture().await;
        let key = |key: &str| json!({"name": "aws", "key": key});
        let spec = spec_with(
            &url,
            json!({
                "host": url,
                "type": "AwsSigV4",
                "aws": {
                    "region": "us-east-1",
                    "services": ["ec2"],
                    "accessKeyIdRef": key("AWS_ACCESS_KEY_ID"),
                    "secretAccessKeyRef": key("AWS_SECRET_ACCESS_KEY"),
                    "sessionTokenRef": key("AWS_SESSION_TOKEN"),
                },
            }),
        );
        let references = References::new(client.clone(), "kube-system".into());
        references.watch(&super::super::referenced(&references, &spec));
        while !references.all_read() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let desired = parse(&spec, &defaults(), &references).expect("the spec parses");
        assert!(references.credential_problems().is_empty());
        let gate = EgressGate::new(desired.egress, Arc::new(Metrics::default()));
        let caller = Arc::new(Caller {
            provider: "aws".into(),
            version: "sha256:0123456789ab".into(),
        });
        let describe = || {
            http::Request::post(format!("{url}/"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(bytes::Bytes::from_static(
                    b"Action=DescribeVpcs&Version=2016-11-15",
                ))
                .unwrap()
        };
        let (status, _) = gate.send(caller.clone(), describe()).await.unwrap();
        assert_eq!(status, 200);
        let head = heads.lock().unwrap()[0].clone();
        assert!(
            head.contains("credential=akidfirst/") && head.contains("/us-east-1/ec2/aws4_request"),
            "{head}"
        );
        assert!(
            head.contains("x-amz-security-token: the-session-token"),
            "{head}"
        );

        // A rotated Secret signs the next request.
        aws_secret(&client, "AKIDSECOND").await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            gate.send(caller.clone(), describe()).await.unwrap();
            let last = heads.lock().unwrap().last().cloned().unwrap();
            if last.contains("credential=akidsecond/") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{last}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn a_grant_naming_a_metadata_address_is_refused_unless_the_manager_allows_it() {
        for grant in [
            "http://169.254.169.254",
            "http://[fd00:ec2::254]",
            "http://[64:ff9b::a9fe:a9fe]",
            "http://168.63.129.16",
            "http://metadata.google.internal",
        ] {
            let spec: EgressSpec =
                serde_json::from_value(json!({"allowedHosts": ["https://api.example.com", grant]}))
                    .unwrap();
            let refused = egress(Some(&spec), &EgressConfig::default()).unwrap_err();
            assert_eq!(refused.field, "spec.egress.allowedHosts[1]", "{grant}");
            assert!(
                refused.problem.starts_with(grant)
                    && refused.problem.contains("--egress-allow-metadata-grants"),
                "{grant}: {}",
                refused.problem
            );
            let allowed = EgressConfig {
                allow_metadata_grants: true,
                ..EgressConfig::default()
            };
            let config = egress(Some(&spec), &allowed).expect("allowed by the manager's flag");
            assert_eq!(config.allow.len(), 2);
        }
    }

    #[tokio::test]
    async fn a_node_selector_the_api_server_would_refuse_is_refused_naming_it() {
        let references = offline_references();
        let mut spec = spec_with(
            "https://api.example.com",
            json!({"host": "https://api.example.com", "secretKeyRef": {"name": "t", "key": "t"}}),
        );
        spec.node_selector = Some(
            serde_json::from_value(
                json!({"matchExpressions": [{"key": "site", "operator": "In"}]}),
            )
            .unwrap(),
        );
        let error = parse(&spec, &defaults(), &references).unwrap_err();
        assert_eq!(error.field, "spec.nodeSelector");
        assert!(
            error
                .problem
                .contains("matchExpressions[0]: operator In needs at least one value"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_cloud_config_from_a_credentials_secret_key_is_refused_naming_both_fields() {
        let references = offline_references();
        let key = |name: &str, key: &str, namespace: Option<&str>| json!({"name": name, "key": key, "namespace": namespace});
        let api = "https://api.example.com";
        let with_config = |config: Value, credential: Value| {
            let mut spec = spec_with(api, credential);
            spec.cloud_config =
                Some(serde_json::from_value(json!({"secretKeyRef": config})).unwrap());
            spec
        };
        for (config, credential, field) in [
            (
                key("cloud", "token", None),
                json!({"host": api, "secretKeyRef": key("cloud", "token", Some("kube-system"))}),
                "spec.credentials[0].secretKeyRef",
            ),
            (
                key("aws", "AWS_SECRET_ACCESS_KEY", Some("kube-system")),
                json!({"host": "https://ec2.us-east-1.amazonaws.com", "type": "AwsSigV4", "aws": {
                    "accessKeyIdRef": key("aws", "AWS_ACCESS_KEY_ID", None),
                    "secretAccessKeyRef": key("aws", "AWS_SECRET_ACCESS_KEY", None),
                }}),
                "spec.credentials[0].aws.secretAccessKeyRef",
            ),
        ] {
            let error =
                parse(&with_config(config, credential), &defaults(), &references).unwrap_err();
            assert_eq!(error.field, "spec.cloudConfig.secretKeyRef");
            assert!(
                error.problem.contains(&format!("is also {field}:")),
                "{error}"
            );
            assert!(error.problem.contains("Secret kube-system/"), "{error}");
        }
        // Another key of the same Secret, or the same key of a Secret in another namespace,
        // is the provider's to read (the spec fails later, on the unread Secret).
        for config in [
            key("cloud", "config", None),
            key("cloud", "token", Some("other")),
        ] {
            let credential = json!({"host": api, "secretKeyRef": key("cloud", "token", None)});
            let error =
                parse(&with_config(config, credential), &defaults(), &references).unwrap_err();
            assert!(!error.problem.contains("is also"), "{error}");
        }
    }

    #[tokio::test]
    async fn an_sts_endpoint_the_manager_lists_passes_and_actions_reach_the_rule_and_the_shadow() {
        let references = offline_references();
        let mut spec = spec_with(
            "https://*.amazonaws.com",
            json!({"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "http://127.0.0.1:5000"}}}),
        );
        let mut listed = defaults();
        listed.egress.sts_endpoints = vec!["http://127.0.0.1:5000".parse().unwrap()];
        // Past the endpoint check, on to the environment (which has no role here).
        let error = parse(&spec, &listed, &references).unwrap_err();
        assert_eq!(
            error.field, "spec.credentials[0].aws.webIdentity",
            "{error}"
        );
        let error = parse(&spec, &defaults(), &references).unwrap_err();
        assert_eq!(
            error.field, "spec.credentials[0].aws.webIdentity.stsEndpoint",
            "{error}"
        );

        spec.credentials.clear();
        spec.rollout = Some(
            serde_json::from_value(json!({"strategy": "Shadow", "shadow": {"actions": ["SearchTransitGatewayRoutes", "Lookup*"]}}))
                .unwrap(),
        );
        let desired = parse(&spec, &defaults(), &references).unwrap();
        assert_eq!(
            desired.rollout.shadow.actions,
            ["SearchTransitGatewayRoutes", "Lookup*"]
        );
        spec.rollout = Some(
            serde_json::from_value(
                json!({"shadow": {"actions": ["Describe", "Terminate Instances"]}}),
            )
            .unwrap(),
        );
        let error = parse(&spec, &defaults(), &references).unwrap_err();
        assert_eq!(error.field, "spec.rollout.shadow.actions[1]", "{error}");
    }

    #[tokio::test]
    async fn a_bad_aws_credential_is_refused_naming_the_field() {
        let references = offline_references();
        let key = |key: &str| json!({"name": "aws", "key": key});
        let keys = json!({
            "accessKeyIdRef": key("AWS_ACCESS_KEY_ID"),
            "secretAccessKeyRef": key("AWS_SECRET_ACCESS_KEY"),
        });
        let with = |extra: Value| {
            let mut aws = keys.clone();
            aws.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            aws
        };
        let moto = "http://127.0.0.1:5000";
        for (credential, field, problem) in [
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": keys}),
                "spec.credentials[0].aws",
                "is not an AWS endpoint name (SERVICE.REGION.amazonaws.com), so the rule must state the region and the services",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4"}),
                "spec.credentials[0].aws",
                "required with type AwsSigV4",
            ),
            (
                json!({"host": moto, "aws": keys, "secretKeyRef": key("token")}),
                "spec.credentials[0].aws",
                "only allowed with type AwsSigV4",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": keys, "secretKeyRef": key("token")}),
                "spec.credentials[0].secretKeyRef",
                "not with type AwsSigV4",
            ),
            (
                json!({"host": moto, "type": "Bearer"}),
                "spec.credentials[0].secretKeyRef",
                "required with type Bearer or Header",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": {"region": "us-east-1", "services": ["ec2"], "accessKeyIdRef": key("AWS_ACCESS_KEY_ID")}}),
                "spec.credentials[0].aws",
                "set accessKeyIdRef and secretAccessKeyRef (and sessionTokenRef for temporary keys), or webIdentity",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": with(json!({"region": "us-east-1", "services": ["ec2"], "webIdentity": {}}))}),
                "spec.credentials[0].aws",
                "set accessKeyIdRef and secretAccessKeyRef",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": with(json!({"region": "us-east-1", "services": ["ec2", "ec2"]}))}),
                "spec.credentials[0].aws",
                "service ec2 is named twice",
            ),
            (
                json!({"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "sts.example.com"}}}),
                "spec.credentials[0].aws.webIdentity.stsEndpoint",
                "STS endpoint \"sts.example.com\" is not a URL",
            ),
            (
                json!({"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "https://sts.attacker.example"}}}),
                "spec.credentials[0].aws.webIdentity.stsEndpoint",
                "STS endpoint https://sts.attacker.example is not an AWS STS endpoint (https://sts.REGION.amazonaws.com, https://sts.amazonaws.com, …) nor one the manager lists with --sts-endpoint-allow (none)",
            ),
            (
                json!({"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "http://sts.us-east-1.amazonaws.com"}}}),
                "spec.credentials[0].aws.webIdentity.stsEndpoint",
                "is not an AWS STS endpoint",
            ),
            (
                json!({"host": "https://*.amazonaws.com", "type": "AwsSigV4", "aws": {"webIdentity": {"stsEndpoint": "https://sts.eu-west-1.amazonaws.com"}}}),
                "spec.credentials[0].aws.webIdentity",
                "web identity needs AWS_ROLE_ARN set in the environment",
            ),
            (
                json!({"host": moto, "type": "AwsSigV4", "aws": with(json!({"region": "us-east-1", "services": ["ec2"], "actions": ["Describe-Vpcs"]}))}),
                "spec.credentials[0].aws.actions",
                "\"Describe-Vpcs\" is not an API action name",
            ),
        ] {
            let spec = spec_with(moto, credential.clone());
            let error = parse(&spec, &defaults(), &references).unwrap_err();
            assert_eq!(error.field, field, "{credential}: {error}");
            assert!(error.problem.contains(problem), "{credential}: {error}");
        }
    }

    #[tokio::test]
    async fn signature_keys_are_read_from_their_config_maps_and_a_bad_one_is_refused_naming_it() {
        use k8s_openapi::api::core::v1::ConfigMap;

        const P256: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEsw9XNcAt2MfrQj6Apj13Wpd4Fn4F
R/Tt669XxeUcpmdyHC9ybsOds/av3zz9/Ub8516irDdTrJg4e43i7mhZxQ==
-----END PUBLIC KEY-----
";
        const ED25519: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAYl/SX996xaU17+IBJ6Y9m0cJRhZf5CAEysudFI5hQNg=
-----END PUBLIC KEY-----
";
        let (_emulator, client) = emulator().await;
        let map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "release-keys"},
            "data": {"cosign.pub": P256, "ed25519.pub": ED25519},
        }))
        .unwrap();
        Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
            .patch(
                "release-keys",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&map),
            )
            .await
            .unwrap();
        let with_keys = |keys: &[&str]| {
            let mut spec: CloudProviderSpec =
                serde_json::from_value(json!({"provider": "file:///p.wasm", "name": "p"})).unwrap();
            let keys: Vec<Value> = keys
                .iter()
                .map(|key| json!({"configMapKeyRef": {"name": "release-keys", "key": key}}))
                .collect();
            spec.signature = Some(serde_json::from_value(json!({"keys": keys})).unwrap());
            spec
        };
        let references = References::new(client.clone(), "kube-system".into());
        let spec = with_keys(&["cosign.pub", "ed25519.pub"]);
        references.watch(&super::super::referenced(&references, &spec));
        while !references.all_read() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let error = parse(&spec, &defaults(), &references).unwrap_err();
        assert_eq!(error.field, "spec.signature.keys[1]");
        assert!(
            error.problem.starts_with(
                "ConfigMap kube-system/release-keys key ed25519.pub: the key is 1.3.101.112"
            ),
            "{error}"
        );

        let desired = parse(&with_keys(&["cosign.pub"]), &defaults(), &references).unwrap();
        let [required] = desired.version.signature.required.as_slice() else {
            panic!("one set of keys: {:?}", desired.version.signature);
        };
        assert_eq!(required.source, "spec.signature.keys");
        assert_eq!(
            required.keys[0].to_string(),
            format!(
                "ConfigMap kube-system/release-keys key cosign.pub ({})",
                required.keys[0].fingerprint()
            )
        );
        // A spec without keys requires nothing; changing the keys makes another version to
        // try (a refused one is tried again), not another version to load.
        let plain = parse(&with_keys(&[]), &defaults(), &references).unwrap();
        assert!(!plain.version.signature.is_required());
        assert!(plain.version.same_as(&desired.version));
        assert!(!plain.version.identical(&desired.version));
    }
}

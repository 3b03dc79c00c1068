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

use super::references::References;
use crate::cli::{parse_duration, parse_duration_or_zero, parse_size};
use crate::resource::{
    CloudConfigSource, CloudProviderSpec, CredentialSpec, CredentialType, EgressSpec, HttpMethod,
    LimitsSpec, RolloutStrategy,
};
use wasm_ccm_host::egress::{CredentialRule, EgressConfig, HostPattern, RateBudget, SecretSource};
use wasm_ccm_host::sandbox::SandboxConfig;
use wasm_ccm_host::source::ProviderRef;

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
    /// `spec.limits` over the flags.
    pub sandbox: SandboxConfig,
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

    /// Whether `other` is the same version under the same limits: a rollout that failed
    /// with these is not tried again until one of them changes.
    pub fn identical(&self, other: &VersionSpec) -> bool {
        self.same_as(other)
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
}

/// A spec, parsed.
#[derive(Debug, Clone)]
pub struct Desired {
    /// The version to run.
    pub version: VersionSpec,
    /// What it may reach, and with which credentials.
    pub egress: EgressConfig,
    /// `spec.egress` and `spec.credentials` as written, to compare.
    pub egress_key: (Option<EgressSpec>, Vec<CredentialSpec>),
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
    let cloud_config = match &spec.cloud_config {
        None => None,
        Some(source) => Some(cloud_config(source, references)?),
    };
    let sandbox = limits(spec.limits.as_ref(), &defaults.sandbox)?;
    let mut egress = egress(spec.egress.as_ref(), &defaults.egress)?;
    egress.credentials = spec
        .credentials
        .iter()
        .enumerate()
        .map(|(index, credential)| credential_rule(index, credential, references))
        .collect::<Result<_, _>>()?;
    Ok(Desired {
        version: VersionSpec {
            reference,
            digest: spec.digest.clone(),
            name: spec.name.clone(),
            cloud_config,
            sandbox,
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

fn cloud_config(source: &CloudConfigSource, references: &References) -> Result<Vec<u8>, SpecError> {
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

fn host_pattern(field: String, text: &str) -> Result<HostPattern, SpecError> {
    text.parse()
        .map_err(|error: wasm_ccm_host::egress::PatternError| refuse(field)(error.to_string()))
}

fn egress(spec: Option<&EgressSpec>, defaults: &EgressConfig) -> Result<EgressConfig, SpecError> {
    let mut config = defaults.clone();
    let Some(spec) = spec else {
        return Ok(config);
    };
    config.allow = spec
        .allowed_hosts
        .iter()
        .enumerate()
        .map(|(index, host)| host_pattern(format!("spec.egress.allowedHosts[{index}]"), host))
        .collect::<Result<_, _>>()?;
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
    Ok(config)
}

fn credential_rule(
    index: usize,
    spec: &CredentialSpec,
    references: &References,
) -> Result<CredentialRule, SpecError> {
    let field = format!("spec.credentials[{index}]");
    let target = host_pattern(format!("{field}.host"), &spec.host)?;
    let header = match (spec.kind.unwrap_or_default(), &spec.header_name) {
        (CredentialType::Bearer, None) => None,
        (CredentialType::Header, Some(name)) => {
            Some(HeaderName::try_from(name.as_str()).map_err(|_| {
                refuse(format!("{field}.headerName"))(format!(
                    "{name:?} is not a valid header name"
                ))
            })?)
        }
        (CredentialType::Bearer, Some(_)) => {
            return Err(refuse(format!("{field}.headerName"))(
                "only allowed with type Header".into(),
            ));
        }
        (CredentialType::Header, None) => {
            return Err(refuse(format!("{field}.headerName"))(
                "required with type Header".into(),
            ));
        }
    };
    let secret = references.shared_secret(&spec.secret_key_ref);
    Ok(CredentialRule::new(
        target,
        header,
        SecretSource::Shared(secret),
    ))
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
    Ok(RolloutPolicy {
        strategy: rollout.strategy.unwrap_or_default(),
        shadow: ShadowPolicy {
            agreeing_calls,
            methods,
        },
        rollback: RollbackPolicy {
            window,
            threshold: f64::from(threshold),
            minimum_calls,
        },
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

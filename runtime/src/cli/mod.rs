//! The command line: flags parsed once into typed, validated settings, and the subcommands.
//!
//! Flag groups shared by every command that runs a provider ([`EgressFlags`],
//! [`SandboxFlags`]) live here, the registry and cache flags in [`distribution`], the secure
//! port's authentication and authorisation flags in `serving_auth`; each
//! subcommand has its own module.
//!
//! A flag given twice takes its last value, as upstream's (pflag) flags do: deployments
//! append `extraArgs` after a chart's own arguments to override them. List flags append
//! instead (`--allow`, `--credential`, and `--controllers` as upstream's string slices).

mod artifact_cmd;
mod conformance;
mod distribution;
mod provider_cmd;
mod run;
mod scaffold;
mod serving_auth;
mod units;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

pub use artifact_cmd::ArtifactCommand;
pub use distribution::DistributionFlags;
pub use provider_cmd::ProviderCommand;
pub use run::RunFlags;
pub use units::{
    DURATION_PATTERN, SIZE_PATTERN, parse_duration, parse_duration_or_zero, parse_size,
};
use wasm_ccm_host::egress::{
    AuditLogLimits, AuditLogScope, CredentialError, CredentialRule, DEFAULT_MAX_DESTINATIONS,
    EgressConfig, GrantSource, HostPattern, Limits, MetadataGrant, MethodPolicy, PoolLimits,
    RateBudget, sts_endpoint_allowed,
};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::{CacheLimits, HttpLimits, LogLimits, Sandbox, SandboxConfig};

/// wasm-ccm: a Kubernetes cloud-controller-manager whose cloud providers are WebAssembly components.
///
/// Without a subcommand it runs as the cloud-controller-manager.
#[derive(Debug, Parser)]
#[command(
    name = "wasm-ccm",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Cli {
    /// The subcommand; none for run mode.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Run mode's flags.
    #[command(flatten)]
    pub run: RunFlags,
}

/// The subcommands.
// Parsed once at start: a large variant costs nothing, and a box would complicate matching.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and call provider components (for provider authors and operators).
    #[command(subcommand)]
    Provider(ProviderCommand),

    /// Sign, verify and describe the manager's own release artifacts (its image, its chart)
    /// in a registry (for maintainers and operators).
    #[command(subcommand)]
    Artifact(ArtifactCommand),

    /// Print the CloudProvider CustomResourceDefinition (YAML) the manager's types define, as
    /// the chart ships it: `wasm-ccm crd | kubectl apply -f -`.
    Crd,
}

impl Cli {
    /// Whether this is the long-running manager (it logs at info by default).
    pub fn is_run_mode(&self) -> bool {
        self.command.is_none()
    }

    /// Run the chosen command; the process exit code is the result.
    pub async fn run(self) -> anyhow::Result<std::process::ExitCode> {
        match self.command {
            Some(Command::Provider(command)) => command.run().await,
            Some(Command::Artifact(command)) => command.run().await,
            Some(Command::Crd) => {
                out(crate::resource::crd_yaml())?;
                Ok(std::process::ExitCode::SUCCESS)
            }
            None => self.run.run().await,
        }
    }
}

/// Write `text` to stdout. A reader that has gone (`wasm-ccm crd | head -1`) is an error the
/// process ends on quietly ([`is_broken_pipe`]), not the panic `print!` would be.
pub(crate) fn out(text: impl std::fmt::Display) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "{text}")?;
    stdout.flush()
}

/// Whether `error` is stdout's reader having gone, which ends a command quietly.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// What a provider may reach, and with which credentials.
#[derive(Debug, Clone, Args)]
pub struct EgressFlags {
    /// Grant the provider a cloud API host: scheme, host (or *.domain) and port, e.g.
    /// https://api.example.com, https://*.example.com:8443, http://127.0.0.1:8080. Repeatable.
    #[arg(long = "allow", value_name = "HOSTPATTERN", help_heading = "Egress")]
    pub allow: Vec<HostPattern>,

    /// Inject a credential into requests to a host: HOSTPATTERN=bearer:env:VAR,
    /// HOSTPATTERN=bearer:file:PATH or HOSTPATTERN=header:NAME:env:VAR (or :file:PATH); or sign
    /// them for AWS: HOSTPATTERN=aws-sigv4:KEYS[,region=REGION][,services=SERVICE+SERVICE]
    /// [,actions=ACTION+ACTION][,sts=URL], KEYS env, dir:PATH or web-identity. Repeatable.
    #[arg(long = "credential", value_name = "RULE", help_heading = "Egress")]
    pub credentials: Vec<CredentialFlag>,

    /// An STS endpoint besides AWS's own (https://sts.amazonaws.com,
    /// https://sts.REGION.amazonaws.com and the other partitions') that a web identity may
    /// send the manager's service account token to: sts= of --credential, or a
    /// CloudProvider's webIdentity.stsEndpoint. https://HOST[:PORT], or http:// with a
    /// loopback address (a test's STS). Repeatable; none by default.
    #[arg(long = "sts-endpoint-allow", value_name = "URL", value_parser = sts_endpoint_allowed, help_heading = "Egress")]
    pub sts_endpoint_allow: Vec<HostPattern>,

    /// Requests per second each destination host may receive from the provider.
    #[arg(long, value_name = "RATE", default_value_t = 50.0, value_parser = positive_rate, help_heading = "Egress")]
    pub egress_rate: f64,

    /// Burst of requests above the rate each destination host may receive.
    #[arg(long, value_name = "N", default_value_t = 100, help_heading = "Egress")]
    pub egress_burst: u32,

    /// Destinations that may hold a rate budget at once, per provider version (a wildcard
    /// grant lets a provider name any number): a budget that has refilled is forgotten to
    /// make room; while all are refilling, a new destination gets a 429 until one is full.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DESTINATIONS, value_parser = positive_count, help_heading = "Egress")]
    pub egress_max_destinations: usize,

    /// Time allowed to resolve, connect and finish TLS with a cloud API host.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Egress")]
    pub egress_connect_timeout: std::time::Duration,

    /// Time allowed from sending a request to the first byte of its response.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, help_heading = "Egress")]
    pub egress_first_byte_timeout: std::time::Duration,

    /// Largest response body a provider may receive (e.g. 8Mi).
    #[arg(long, value_name = "SIZE", default_value = "8Mi", value_parser = parse_size, help_heading = "Egress")]
    pub egress_max_response: u64,

    /// Idle keep-alive connections a provider version keeps per destination (0: no reuse).
    #[arg(long, value_name = "N", default_value_t = 8, help_heading = "Egress")]
    pub egress_max_idle_per_host: usize,

    /// Open connections, idle or busy, a provider version may have across all destinations.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = positive_count, help_heading = "Egress")]
    pub egress_max_connections: usize,

    /// How long an idle keep-alive connection is kept before it is closed.
    #[arg(long, value_name = "DURATION", default_value = "90s", value_parser = parse_duration, help_heading = "Egress")]
    pub egress_idle_timeout: std::time::Duration,

    /// Egress audit log events per second a provider version may write; past the rate and
    /// burst, events are counted and summarised (every request stays in the metrics).
    #[arg(long, value_name = "RATE", default_value_t = 100.0, value_parser = positive_rate, help_heading = "Egress")]
    pub egress_audit_log_rate: f64,

    /// Burst of egress audit log events above the rate.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        help_heading = "Egress"
    )]
    pub egress_audit_log_burst: u32,

    /// Which egress requests the audit log writes at INFO: `failures` (refused,
    /// rate-limited, unanswered, or answered with 400 or above; a success is a DEBUG event)
    /// or `all`. Every request is counted in the metrics either way.
    #[arg(long, value_name = "WHICH", default_value = "failures", value_parser = audit_log_scope(), help_heading = "Egress")]
    pub egress_audit_log: AuditLogScope,

    /// Let an --allow entry (or a CloudProvider's spec.egress.allowedHosts entry) name a
    /// cloud metadata or platform service, e.g. http://169.254.169.254 or
    /// http://168.63.129.16: a provider granted one can read the node's cloud credentials.
    /// Off by default: such a grant is refused at start (or the spec refused).
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Egress")]
    pub egress_allow_metadata_grants: bool,
}

impl EgressFlags {
    /// The egress configuration these flags describe (each flag was validated as parsed).
    pub fn config(&self) -> EgressConfig {
        EgressConfig {
            allow: self.allow.clone(),
            source: GrantSource::Flags,
            credentials: self.credentials.iter().map(|c| c.rule.clone()).collect(),
            methods: MethodPolicy::Any,
            budget: RateBudget {
                per_second: self.egress_rate,
                burst: self.egress_burst,
            },
            max_destinations: self.egress_max_destinations,
            limits: Limits {
                connect_timeout: self.egress_connect_timeout,
                first_byte_timeout: self.egress_first_byte_timeout,
                between_bytes_timeout: self.egress_first_byte_timeout,
                max_response_bytes: self.egress_max_response,
            },
            pool: PoolLimits {
                max_idle_per_host: self.egress_max_idle_per_host,
                max_connections: self.egress_max_connections,
                idle_timeout: self.egress_idle_timeout,
            },
            audit_log: AuditLogLimits {
                rate: RateBudget {
                    per_second: self.egress_audit_log_rate,
                    burst: self.egress_audit_log_burst,
                },
                scope: self.egress_audit_log,
                ..AuditLogLimits::default()
            },
            extra_roots: Vec::new(),
            name_server: None,
            allow_metadata_grants: self.egress_allow_metadata_grants,
            sts_endpoints: self.sts_endpoint_allow.clone(),
        }
    }

    /// Refuse an `--allow` entry naming a cloud metadata or platform service, unless
    /// `--egress-allow-metadata-grants`.
    pub fn check_grants(&self) -> Result<(), RefusedGrant> {
        Ok(self.config().check_grants()?)
    }

    /// Read every credential now, so a rule naming a missing variable or file stops the
    /// process at start instead of failing each cloud call later; and refuse a web identity
    /// whose STS endpoint is neither AWS's nor listed by --sts-endpoint-allow.
    pub fn check_credentials(&self) -> Result<(), UnreadableSecret> {
        if let Err(refused) = self.config().check_sts_endpoints() {
            return Err(UnreadableSecret {
                flag: "--credential",
                rule: self.credentials[refused.index].text.clone(),
                problem: refused.problem,
            });
        }
        self.credentials.iter().try_for_each(|credential| {
            credential.rule.check().map_err(|problem| UnreadableSecret {
                flag: "--credential",
                rule: credential.text.clone(),
                problem: problem.to_string(),
            })
        })
    }
}

/// A `--credential` rule, with the text the operator wrote to quote in errors.
#[derive(Debug, Clone)]
pub struct CredentialFlag {
    text: String,
    rule: CredentialRule,
}

impl FromStr for CredentialFlag {
    type Err = CredentialError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(CredentialFlag {
            text: text.to_string(),
            rule: text.parse()?,
        })
    }
}

/// An `--allow` entry the manager refuses at start.
#[derive(Debug, thiserror::Error)]
#[error("--allow {0}")]
pub struct RefusedGrant(#[from] MetadataGrant);

/// A secret a flag names cannot be read at start.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {rule}: {problem}")]
pub struct UnreadableSecret {
    /// The flag, e.g. `--credential`.
    pub flag: &'static str,
    /// The rule as given on the command line.
    pub rule: String,
    /// Why it cannot be read.
    pub problem: String,
}

fn positive_line_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a positive number of lines per second"
        )),
    }
}

fn positive_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// `failures` or `all`, listed as such in `--help` and in an error.
fn audit_log_scope() -> impl clap::builder::TypedValueParser<Value = AuditLogScope> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["failures", "all"]).map(|which| match &*which {
        "all" => AuditLogScope::All,
        _ => AuditLogScope::Failures,
    })
}

fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a positive number of requests per second"
        )),
    }
}

/// Limits every provider call runs under.
#[derive(Debug, Clone, Args)]
pub struct SandboxFlags {
    /// Most linear memory one provider call may use (e.g. 64Mi).
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = parse_size, help_heading = "Sandbox")]
    pub memory_limit: u64,

    /// Most host memory one provider call's wasi:http resources may hold at once (e.g.
    /// 16Mi): header names and values, request lines, the buffer of each request body not
    /// yet sent (up to 2 MiB), response headers and 256 bytes per resource. Past it the call
    /// fails with `http-budget`.
    #[arg(long, value_name = "SIZE", default_value = "16Mi", value_parser = parse_size, help_heading = "Sandbox")]
    pub http_memory_limit: u64,

    /// Most resources one provider call may hold at once: wasi:http fields, requests,
    /// responses, bodies and futures, their streams and pollables. Past it the call fails
    /// with `http-budget`.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(16..), help_heading = "Sandbox")]
    pub max_http_resources: u32,

    /// Longest one provider call may take (e.g. 30s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, help_heading = "Sandbox")]
    pub timeout: std::time::Duration,

    /// Most provider calls in flight at once; a call passing a node list counts once more
    /// per 384 KiB of node data it passes, so calls carrying thousands of nodes cannot
    /// exhaust memory together.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=10_000), help_heading = "Sandbox")]
    pub max_concurrent_calls: u32,

    /// Preallocate sandbox slots with wasmtime's pooling allocator (faster calls).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, help_heading = "Sandbox")]
    pub pooling_allocator: bool,

    /// Most bytes one provider call's answer may make the host hold (routes, labels,
    /// messages); a larger answer fails the call (e.g. 8Mi).
    #[arg(long, value_name = "SIZE", default_value = "8Mi", value_parser = parse_size, help_heading = "Sandbox")]
    pub max_result_size: u64,

    /// Most bytes one provider version may keep in its cache: keys, values and 256 bytes
    /// per entry (e.g. 16Mi). When full, expired entries go first, then the soonest to
    /// expire; keys over 1 KiB, values over 1 MiB and entries larger than the whole cache
    /// are not stored.
    #[arg(long, value_name = "SIZE", default_value = "16Mi", value_parser = parse_size, help_heading = "Sandbox")]
    pub provider_cache_size: u64,

    /// Most lines one provider call may log (host log, stdout and stderr together); the
    /// rest are dropped and counted in one warning at the end of the call.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        help_heading = "Sandbox"
    )]
    pub provider_log_lines_per_call: u32,

    /// Most bytes of log lines one provider call may log (e.g. 256Ki).
    #[arg(long, value_name = "SIZE", default_value = "256Ki", value_parser = parse_size, help_heading = "Sandbox")]
    pub provider_log_bytes_per_call: u64,

    /// Log lines per second each provider version may write, across its calls.
    #[arg(long, value_name = "RATE", default_value_t = 100.0, value_parser = positive_line_rate, help_heading = "Sandbox")]
    pub provider_log_rate: f64,

    /// Burst of log lines above the rate each provider version may write.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1000,
        help_heading = "Sandbox"
    )]
    pub provider_log_burst: u32,
}

impl SandboxFlags {
    /// The sandbox configuration these flags describe; compiled code is kept in
    /// `compiled_dir` (the `compiled/` directory of the cache), if any.
    pub fn config(&self, compiled_dir: Option<PathBuf>) -> SandboxConfig {
        SandboxConfig {
            memory_limit: self.memory_limit,
            http: HttpLimits {
                max_memory: self.http_memory_limit,
                max_resources: self.max_http_resources,
            },
            call_timeout: self.timeout,
            pooling: self.pooling_allocator,
            max_concurrent_calls: self.max_concurrent_calls,
            cache_dir: compiled_dir,
            max_result_bytes: self.max_result_size,
            provider_cache: CacheLimits {
                max_bytes: usize::try_from(self.provider_cache_size).unwrap_or(usize::MAX),
                ..CacheLimits::default()
            },
            provider_logs: LogLimits {
                lines_per_call: self.provider_log_lines_per_call,
                bytes_per_call: usize::try_from(self.provider_log_bytes_per_call)
                    .unwrap_or(usize::MAX),
                rate: RateBudget {
                    per_second: self.provider_log_rate,
                    burst: self.provider_log_burst,
                },
            },
        }
    }

    /// The sandbox these flags describe (see [`SandboxFlags::config`]).
    pub fn sandbox(
        &self,
        metrics: Arc<Metrics>,
        compiled_dir: Option<PathBuf>,
    ) -> anyhow::Result<Sandbox> {
        Ok(Sandbox::new(self.config(compiled_dir), metrics)?)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::controllers::Controller;

    fn parse(args: &[&str]) -> Cli {
        let argv = std::iter::once("wasm-ccm").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap_or_else(|error| panic!("{args:?}: {error}"))
    }

    /// Run mode's flags for `args`, with `--no-cache`: building the configuration opens the
    /// cache, and a unit test leaves the user's cache directory alone.
    fn run(args: &[&str]) -> RunFlags {
        let args: Vec<&str> = args.iter().copied().chain(["--no-cache"]).collect();
        parse(&args).run
    }

    #[test]
    fn the_tag_check_interval_defaults_to_five_minutes_and_zero_turns_it_off() {
        let interval = |args: &[&str]| match run(args).config().unwrap().provider {
            crate::manager::ProviderMode::Resource {
                tag_check_interval, ..
            } => tag_check_interval,
            crate::manager::ProviderMode::Flags(_) => panic!("{args:?}: run from the resource"),
        };
        assert_eq!(
            interval(&["--provider-resource=p"]),
            Duration::from_secs(300)
        );
        assert_eq!(
            interval(&["--provider-resource=p", "--tag-check-interval=30s"]),
            Duration::from_secs(30)
        );
        assert_eq!(
            interval(&["--provider-resource=p", "--tag-check-interval=0"]),
            Duration::ZERO
        );
        let argv = [
            "wasm-ccm",
            "--provider-resource=p",
            "--tag-check-interval=soon",
        ];
        let error = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(error.contains("--tag-check-interval"), "{error}");
    }

    #[test]
    fn provider_resource_repeated_or_comma_separated_names_several_once_each() {
        let names = |args: &[&str]| match run(args).config().map(|c| c.provider) {
            Ok(crate::manager::ProviderMode::Resource { names, .. }) => Ok(names),
            Ok(crate::manager::ProviderMode::Flags(_)) => panic!("{args:?}: run from resources"),
            Err(error) => Err(error.to_string()),
        };
        assert_eq!(names(&["--provider-resource=p"]), Ok(vec!["p".to_string()]));
        assert_eq!(
            names(&[
                "--provider-resource=cloud,metal",
                "--provider-resource",
                "edge"
            ]),
            Ok(vec!["cloud".into(), "metal".into(), "edge".into()])
        );
        let error = names(&["--provider-resource=cloud,metal,cloud"]).unwrap_err();
        assert!(
            error.contains("names the CloudProvider cloud twice"),
            "{error}"
        );
    }

    #[test]
    fn the_grant_ceiling_takes_host_patterns_with_a_resource_only() {
        let ceiling = |args: &[&str]| match run(args).config().unwrap().provider {
            crate::manager::ProviderMode::Resource { grant_ceiling, .. } => {
                grant_ceiling.map(|ceiling| ceiling.to_string())
            }
            crate::manager::ProviderMode::Flags(_) => panic!("{args:?}: run from the resource"),
        };
        assert_eq!(ceiling(&["--provider-resource=p"]), None);
        assert_eq!(
            ceiling(&[
                "--provider-resource=p",
                "--egress-grant-ceiling=https://*.amazonaws.com,http://10.0.0.1:8080",
                "--egress-grant-ceiling",
                "https://api.example.com",
            ]),
            Some("https://*.amazonaws.com,http://10.0.0.1:8080,https://api.example.com".into())
        );
        let argv = [
            "wasm-ccm",
            "--provider-resource=p",
            "--egress-grant-ceiling=*.a.com",
        ];
        let error = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(
            error.contains("--egress-grant-ceiling") && error.contains("missing scheme"),
            "{error}"
        );
        let flags = run(&[
            "--provider=file:///p.wasm",
            "--cloud-provider=p",
            "--egress-grant-ceiling=https://a.example",
        ]);
        let error = flags.config().unwrap_err().to_string();
        assert!(
            error.starts_with("--egress-grant-ceiling bounds what a CloudProvider grants"),
            "{error}"
        );
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        // Booleans with Go's `--flag[=BOOL]` form, in every order.
        assert!(!run(&["--leader-elect", "--leader-elect=false"]).leader_elect);
        assert!(run(&["--leader-elect=false", "--leader-elect=true"]).leader_elect);
        assert!(run(&["--leader-elect=false", "--leader-elect"]).leader_elect);
        assert!(
            !run(&["--allow-untagged-cloud", "--allow-untagged-cloud=false"]).allow_untagged_cloud
        );
        assert!(
            !run(&[
                "--configure-cloud-routes=true",
                "--configure-cloud-routes=false"
            ])
            .configure_cloud_routes
        );
        assert!(
            run(&["--pooling-allocator", "false", "--pooling-allocator=true"])
                .sandbox
                .pooling_allocator
        );

        let flags = run(&[
            "--provider=file:///a.wasm",
            "--provider",
            "file:///b.wasm",
            "--kubeconfig=/a/kubeconfig",
            "--kubeconfig=/b/kubeconfig",
            "--node-monitor-period=1s",
            "--node-monitor-period=1m30s",
            "--load-balancer-drift-period=5m",
            "--load-balancer-drift-period=0",
            "--concurrent-service-syncs=3",
            "--concurrent-service-syncs",
            "5",
            "--kube-api-qps=5",
            "--kube-api-qps=50",
            "--cluster-cidr=10.0.0.0/8",
            "--cluster-cidr=10.244.0.0/16",
            "--secure-port=1",
            "--secure-port=0",
            "--bind-address=0.0.0.0",
            "--bind-address=127.0.0.1",
            "--memory-limit=16Mi",
            "--memory-limit=32Mi",
            "--egress-rate=1",
            "--egress-rate=2.5",
        ]);
        assert_eq!(flags.provider.as_deref(), Some("file:///b.wasm"));
        assert_eq!(
            flags.kubeconfig.as_deref(),
            Some(Path::new("/b/kubeconfig"))
        );
        assert_eq!(flags.node_monitor_period, Duration::from_secs(90));
        assert_eq!(flags.load_balancer_drift_period, Duration::ZERO);
        assert_eq!(flags.concurrent_service_syncs, 5);
        assert_eq!(flags.kube_api_qps, 50.0);
        assert_eq!(
            flags.cluster_cidr,
            Some("10.244.0.0/16".parse().unwrap()),
            "a plain string flag upstream: the last wins"
        );
        assert_eq!(flags.secure_port, 0);
        assert_eq!(flags.bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(flags.sandbox.memory_limit, 32 << 20);
        assert_eq!(flags.egress.egress_rate, 2.5);
    }

    #[test]
    fn an_overridden_bad_value_is_still_refused() {
        let error = Cli::try_parse_from([
            "wasm-ccm",
            "--node-monitor-period=soon",
            "--node-monitor-period=5s",
        ])
        .unwrap_err()
        .to_string();
        assert!(error.contains("--node-monitor-period"), "{error}");
    }

    #[test]
    fn list_flags_append() {
        let flags = run(&[
            "--allow=https://a.example.com",
            "--allow",
            "https://b.example.com",
            "--credential=https://a.example.com=bearer:env:A",
            "--credential=https://b.example.com=bearer:file:/run/b",
        ]);
        assert_eq!(flags.egress.allow.len(), 2);
        assert_eq!(flags.egress.config().credentials.len(), 2);
    }

    #[test]
    fn a_metadata_address_grant_is_refused_unless_allowed_by_flag() {
        let grants = [
            "--allow=https://api.example.com",
            "--allow=http://169.254.169.254",
        ];
        let refused = run(&grants).egress.check_grants().unwrap_err().to_string();
        assert!(
            refused.starts_with(
                "--allow http://169.254.169.254 names 169.254.169.254, a cloud metadata address"
            ) && refused.contains("--egress-allow-metadata-grants"),
            "{refused}"
        );
        let allowed = [&grants[..], &["--egress-allow-metadata-grants"]].concat();
        assert!(run(&allowed).egress.check_grants().is_ok());
        assert!(run(&grants[..1]).egress.check_grants().is_ok());
    }

    #[test]
    fn destinations_with_a_rate_budget_are_bounded_by_a_flag() {
        assert_eq!(run(&[]).egress.config().max_destinations, 1024);
        let flags = run(&["--egress-max-destinations=10"]);
        assert_eq!(flags.egress.config().max_destinations, 10);
        let zero = Cli::try_parse_from(["wasm-ccm", "--egress-max-destinations=0"]);
        assert!(zero.unwrap_err().to_string().contains("at least 1"));
    }

    #[test]
    fn connection_pool_bounds_are_flags_with_defaults() {
        let defaults = run(&[]).egress.config().pool;
        assert_eq!(defaults, PoolLimits::default());
        let pool = run(&[
            "--egress-max-idle-per-host=0",
            "--egress-max-connections=3",
            "--egress-idle-timeout=10s",
        ])
        .egress
        .config()
        .pool;
        assert_eq!(pool.max_idle_per_host, 0);
        assert_eq!(pool.max_connections, 3);
        assert_eq!(pool.idle_timeout, Duration::from_secs(10));
        let zero = Cli::try_parse_from(["wasm-ccm", "--egress-max-connections=0"]);
        assert!(zero.is_err(), "a pool of no connections is refused");
    }

    /// Every flag of `--help` stands under its concern's heading; none above them.
    #[test]
    fn help_groups_every_flag_under_a_heading() {
        use clap::CommandFactory;
        let help = Cli::command().render_help().to_string();
        // The flags of each section: its lines up to the next heading (an unindented line).
        let section = |heading: &str| -> Vec<String> {
            help.split_once(&format!("\n{heading}:\n"))
                .unwrap_or_else(|| panic!("no {heading} section: {help}"))
                .1
                .lines()
                .take_while(|line| line.is_empty() || line.starts_with(' '))
                .map(str::trim_start)
                .map(|line| match line.split_once(", ") {
                    Some((short, long)) if short.len() == 2 && short.starts_with('-') => long,
                    _ => line,
                })
                .filter_map(|line| line.strip_prefix("--"))
                .filter_map(|flag| flag.split([' ', '=', '[', '<']).next())
                .map(str::to_string)
                .collect()
        };
        let ungrouped = section("Options");
        assert!(
            ungrouped
                .iter()
                .all(|flag| ["help", "version"].contains(&flag.as_str())),
            "{ungrouped:?} under no heading: {help}"
        );
        assert!(section("Egress").contains(&"allow".to_string()), "{help}");
        assert!(
            section("Sandbox").contains(&"memory-limit".to_string()),
            "{help}"
        );
    }

    #[test]
    fn audit_log_budget_is_a_flag_with_the_gate_default() {
        let defaults = run(&[]).egress.config().audit_log;
        assert_eq!(defaults, AuditLogLimits::default());
        let set = run(&[
            "--egress-audit-log-rate=5",
            "--egress-audit-log-burst=20",
            "--egress-audit-log=all",
        ])
        .egress
        .config()
        .audit_log;
        assert_eq!(set.scope, AuditLogScope::All);
        let unknown = Cli::try_parse_from(["wasm-ccm", "--egress-audit-log=some"])
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("[possible values: failures, all]"),
            "{unknown}"
        );
        assert_eq!(
            set.rate,
            RateBudget {
                per_second: 5.0,
                burst: 20
            }
        );
    }

    #[test]
    fn provider_budgets_are_flags_with_the_sandbox_defaults() {
        let defaults = run(&[]).sandbox.config(None);
        let expected = SandboxConfig::default();
        assert_eq!(defaults.max_result_bytes, expected.max_result_bytes);
        assert_eq!(defaults.provider_cache, expected.provider_cache);
        assert_eq!(defaults.provider_logs, expected.provider_logs);
        assert_eq!(defaults.http, expected.http);
        let set = run(&[
            "--http-memory-limit=4Mi",
            "--max-http-resources=64",
            "--max-result-size=1Mi",
            "--provider-cache-size=2Mi",
            "--provider-log-lines-per-call=10",
            "--provider-log-bytes-per-call=4Ki",
            "--provider-log-rate=5",
            "--provider-log-burst=7",
        ])
        .sandbox
        .config(None);
        assert_eq!(set.max_result_bytes, 1024 * 1024);
        assert_eq!(set.provider_cache.max_bytes, 2 * 1024 * 1024);
        assert_eq!(set.provider_logs.lines_per_call, 10);
        assert_eq!(set.provider_logs.bytes_per_call, 4 * 1024);
        assert_eq!(set.provider_logs.rate.per_second, 5.0);
        assert_eq!(set.provider_logs.rate.burst, 7);
        assert_eq!(
            set.http,
            HttpLimits {
                max_memory: 4 * 1024 * 1024,
                max_resources: 64
            }
        );
        let argv = ["wasm-ccm", "--max-http-resources=8"];
        let error = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(error.contains("--max-http-resources"), "{error}");
    }

    /// The controllers run mode would start with `args`.
    fn controllers(args: &[&str]) -> Vec<Controller> {
        let required = ["--provider=file:///p.wasm", "--cloud-provider=p"];
        let args: Vec<&str> = required.iter().chain(args).copied().collect();
        run(&args).config().unwrap().controllers.enabled()
    }

    #[test]
    fn controllers_lists_are_joined_and_the_first_replaces_the_default() {
        use Controller::*;
        assert_eq!(controllers(&[]), Controller::ALL.to_vec());
        assert_eq!(controllers(&["--controllers=cloud-node"]), vec![CloudNode]);
        assert_eq!(
            controllers(&["--controllers=cloud-node", "--controllers=service"]),
            vec![CloudNode, ServiceLoadBalancer]
        );
        assert_eq!(
            controllers(&["--controllers=*", "--controllers=-route,-service"]),
            vec![CloudNode, CloudNodeLifecycle]
        );
        // The first entry naming a controller still decides, across occurrences.
        assert_eq!(
            controllers(&["--controllers=-route", "--controllers=route,*"]),
            vec![CloudNode, CloudNodeLifecycle, ServiceLoadBalancer]
        );
    }

    #[test]
    fn provider_subcommands_take_the_last_value_too() {
        let call = parse(&[
            "provider",
            "call",
            "p.wasm",
            "init",
            "--timeout=1s",
            "--timeout=2s",
            "--config=/a.json",
            "--config=/b.json",
            "--audit",
            "--audit",
            "--args={}",
            r#"--args={"node": {}}"#,
            "--allow=https://a.example.com",
            "--allow=https://b.example.com",
        ]);
        let Some(Command::Provider(ProviderCommand::Call {
            args, audit, load, ..
        })) = call.command
        else {
            panic!("not provider call: {call:?}");
        };
        assert_eq!(args, r#"{"node": {}}"#);
        assert_eq!(load.config.as_deref(), Some(Path::new("/b.json")));
        assert!(audit);
        assert_eq!(load.sandbox.timeout, Duration::from_secs(2));
        assert_eq!(load.egress.allow.len(), 2);

        let inspect = parse(&[
            "provider",
            "inspect",
            "p.wasm",
            "--json",
            "--json",
            "--memory-limit=1Mi",
            "--memory-limit=2Mi",
        ]);
        let Some(Command::Provider(ProviderCommand::Inspect { json, sandbox, .. })) =
            inspect.command
        else {
            panic!("not provider inspect: {inspect:?}");
        };
        assert!(json);
        assert_eq!(sandbox.memory_limit, 2 << 20);
    }

    #[test]
    fn aws_sigv4_rules_parse_and_bad_ones_name_the_flag_and_the_problem() {
        let flags = run(&[
            "--credential=https://*.amazonaws.com=aws-sigv4:env",
            "--credential=http://127.0.0.1:5000=aws-sigv4:dir:/run/aws,region=us-east-1,services=ec2+elasticloadbalancing",
        ]);
        assert_eq!(flags.egress.config().credentials.len(), 2);
        for (rule, problem) in [
            (
                "http://127.0.0.1:5000=aws-sigv4:env",
                "must state the region and the services",
            ),
            (
                "https://*.amazonaws.com=aws-sigv4:keychain",
                "must be env, dir:PATH or web-identity",
            ),
            (
                "https://*.amazonaws.com=aws-sigv4:env,regoin=us-east-1",
                "unknown option regoin=",
            ),
        ] {
            let error = Cli::try_parse_from(["wasm-ccm", "--credential", rule])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--credential"), "{error}");
            assert!(error.contains(rule), "{error}");
            assert!(error.contains(problem), "{rule}: {error}");
        }
        let missing = "https://*.amazonaws.com=aws-sigv4:dir:/nonexistent/wasm-ccm/aws";
        let error = run(&["--credential", missing])
            .egress
            .check_credentials()
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("--credential {missing}: ")),
            "{error}"
        );
        assert!(
            error.contains("cannot read /nonexistent/wasm-ccm/aws/AWS_ACCESS_KEY_ID"),
            "{error}"
        );
    }

    #[test]
    fn sts_endpoints_are_https_hosts_or_loopback_addresses() {
        let flags = run(&[
            "--sts-endpoint-allow=https://sts.internal.example",
            "--sts-endpoint-allow=http://127.0.0.1:5000",
        ]);
        assert_eq!(flags.egress.config().sts_endpoints.len(), 2);
        for (entry, problem) in [
            ("http://sts.internal.example", "plain HTTP"),
            ("https://*.example.com", "names every subdomain"),
        ] {
            let error = Cli::try_parse_from(["wasm-ccm", "--sts-endpoint-allow", entry])
                .unwrap_err()
                .to_string();
            assert!(error.contains("--sts-endpoint-allow"), "{error}");
            assert!(error.contains(problem), "{entry}: {error}");
        }
    }

    #[test]
    fn an_unreadable_credential_names_the_flag_and_the_rule() {
        let env = "https://api.example.com=bearer:env:WASM_CCM_UNIT_TEST_UNSET_TOKEN";
        let file = "https://*.example.com=header:X-Token:file:/nonexistent/wasm-ccm/token";
        let readable = format!(
            "https://other.example.com=bearer:file:{}",
            concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")
        );
        assert!(
            run(&["--credential", &readable])
                .egress
                .check_credentials()
                .is_ok()
        );

        let error = run(&["--credential", &readable, "--credential", env])
            .egress
            .check_credentials()
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("--credential {env}: ")),
            "{error}"
        );
        assert!(
            error.contains("environment variable WASM_CCM_UNIT_TEST_UNSET_TOKEN is not set"),
            "{error}"
        );

        let error = run(&["--credential", file])
            .egress
            .check_credentials()
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(&format!("--credential {file}: ")),
            "{error}"
        );
        assert!(
            error.contains("cannot read /nonexistent/wasm-ccm/token"),
            "{error}"
        );
    }
}

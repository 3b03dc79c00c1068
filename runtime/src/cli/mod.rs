//! The command line: flags parsed once into typed, validated settings, and the subcommands.
//!
//! Flag groups shared by every command that runs a provider ([`EgressFlags`],
//! [`SandboxFlags`]) live here; each subcommand has its own module.

mod provider_cmd;
mod run;
mod units;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use wasm_ccm_host::egress::{CredentialRule, EgressConfig, HostPattern, Limits, RateBudget};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::{CacheLimits, LogLimits, Sandbox, SandboxConfig};
pub use provider_cmd::ProviderCommand;
pub use run::RunFlags;
pub use units::{parse_duration, parse_duration_or_zero, parse_size};

/// wasm-ccm: a Kubernetes cloud-controller-manager whose cloud providers are WebAssembly components.
///
/// Without a subcommand it runs as the cloud-controller-manager.
#[derive(Debug, Parser)]
#[command(name = "wasm-ccm", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub run: RunFlags,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and call provider components (for provider authors and operators).
    #[command(subcommand)]
    Provider(ProviderCommand),
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
            None => self.run.run().await,
        }
    }
}

/// What a provider may reach, and with which credentials.
#[derive(Debug, Clone, Args)]
pub struct EgressFlags {
    /// Grant the provider a cloud API host: scheme, host (or *.domain) and port, e.g.
    /// https://api.example.com, https://*.example.com:8443, http://127.0.0.1:8080. Repeatable.
    #[arg(long = "allow", value_name = "HOSTPATTERN")]
    pub allow: Vec<HostPattern>,

    /// Inject a credential into requests to a host: HOSTPATTERN=bearer:env:VAR,
    /// HOSTPATTERN=bearer:file:PATH or HOSTPATTERN=header:NAME:env:VAR (or :file:PATH). Repeatable.
    #[arg(long = "credential", value_name = "RULE")]
    pub credentials: Vec<CredentialRule>,

    /// Requests per second each destination host may receive from the provider.
    #[arg(long, value_name = "RATE", default_value_t = 50.0, value_parser = positive_rate)]
    pub egress_rate: f64,

    /// Burst of requests above the rate each destination host may receive.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub egress_burst: u32,

    /// Time allowed to resolve, connect and finish TLS with a cloud API host.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub egress_connect_timeout: std::time::Duration,

    /// Time allowed from sending a request to the first byte of its response.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub egress_first_byte_timeout: std::time::Duration,

    /// Largest response body a provider may receive (e.g. 8Mi).
    #[arg(long, value_name = "SIZE", default_value = "8Mi", value_parser = parse_size)]
    pub egress_max_response: u64,
}

impl EgressFlags {
    /// The egress configuration these flags describe (each flag was validated as parsed).
    pub fn config(&self) -> EgressConfig {
        EgressConfig {
            allow: self.allow.clone(),
            credentials: self.credentials.clone(),
            budget: RateBudget {
                per_second: self.egress_rate,
                burst: self.egress_burst,
            },
            limits: Limits {
                connect_timeout: self.egress_connect_timeout,
                first_byte_timeout: self.egress_first_byte_timeout,
                between_bytes_timeout: self.egress_first_byte_timeout,
                max_response_bytes: self.egress_max_response,
            },
        }
    }
}

fn positive_line_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
        _ => Err(format!(
            "{text:?} is not a positive number of lines per second"
        )),
    }
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
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = parse_size)]
    pub memory_limit: u64,

    /// Longest one provider call may take (e.g. 30s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,

    /// Most provider calls in flight at once; a call passing a node list counts once more
    /// per 384 KiB of node data it passes, so calls carrying thousands of nodes cannot
    /// exhaust memory together.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_concurrent_calls: u32,

    /// Preallocate sandbox slots with wasmtime's pooling allocator (faster calls).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub pooling_allocator: bool,

    /// Directory for precompiled providers (keyed by digest and engine); none disables it.
    #[arg(long, value_name = "DIR")]
    pub compile_cache_dir: Option<PathBuf>,

    /// Most bytes one provider version may keep in its cache: keys, values and 256 bytes
    /// per entry (e.g. 16Mi). When full, expired entries go first, then the soonest to
    /// expire; keys over 1 KiB, values over 1 MiB and entries larger than the whole cache
    /// are not stored.
    #[arg(long, value_name = "SIZE", default_value = "16Mi", value_parser = parse_size)]
    pub provider_cache_size: u64,

    /// Most lines one provider call may log (host log, stdout and stderr together); the
    /// rest are dropped and counted in one warning at the end of the call.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub provider_log_lines_per_call: u32,

    /// Most bytes of log lines one provider call may log (e.g. 256Ki).
    #[arg(long, value_name = "SIZE", default_value = "256Ki", value_parser = parse_size)]
    pub provider_log_bytes_per_call: u64,

    /// Log lines per second each provider version may write, across its calls.
    #[arg(long, value_name = "RATE", default_value_t = 100.0, value_parser = positive_line_rate)]
    pub provider_log_rate: f64,

    /// Burst of log lines above the rate each provider version may write.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub provider_log_burst: u32,
}

impl SandboxFlags {
    /// The sandbox configuration these flags describe.
    pub fn config(&self) -> SandboxConfig {
        SandboxConfig {
            memory_limit: self.memory_limit,
            call_timeout: self.timeout,
            pooling: self.pooling_allocator,
            max_concurrent_calls: self.max_concurrent_calls,
            cache_dir: self.compile_cache_dir.clone(),
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

    /// The sandbox these flags describe.
    pub fn sandbox(&self, metrics: Arc<Metrics>) -> anyhow::Result<Sandbox> {
        Ok(Sandbox::new(self.config(), metrics)?)
    }
}

//! `wasm-ccm provider inspect|call`: look inside a provider component and call one contract
//! function by hand, under the same sandbox and egress gate the manager uses.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{EgressFlags, SandboxFlags};
use wasm_ccm_host::contract::{Function, Node, Route, Service};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderSource};
use wasm_ccm_host::sandbox::Inspection;

/// The `provider` subcommands: each loads one component under the same sandbox and egress
/// flags as run mode.
#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Print a component's digest, size, contract version, imports and exports, and whether
    /// it satisfies the host contract (exit 1 if not).
    Inspect {
        /// The provider component (.wasm).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How the component is compiled (`--compile-cache-dir`, `--pooling-allocator`...).
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
    /// Call one contract function and print its result as JSON; on a provider error print
    /// its kind and message and exit 1.
    Call {
        /// The provider component (.wasm).
        file: PathBuf,
        /// The function, as named in the WIT (e.g. instance-metadata, ensure-load-balancer).
        function: String,
        /// The arguments: a JSON object keyed by parameter name, e.g.
        /// '{"node": {"name": "node-1", "providerID": "simcloud://i-1"}}'.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        args: String,
        /// The cloud configuration file passed to init (as --cloud-config would be).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Also print the egress audit records of the call to stderr, as JSON lines.
        #[arg(long)]
        audit: bool,
        /// What `init` and the call may reach, and with which credentials (boxed: the
        /// largest group of flags).
        #[command(flatten)]
        egress: Box<EgressFlags>,
        /// Limits `init` and the call run under.
        #[command(flatten)]
        sandbox: SandboxFlags,
    },
}

impl ProviderCommand {
    /// Inspect or call. Exit code 1 when the component breaks the contract or the call fails;
    /// `Err` when the input is unusable (unreadable file, bad `--args`, missing credential).
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ProviderCommand::Inspect {
                file,
                json,
                sandbox,
            } => inspect(&file, json, &sandbox).await,
            ProviderCommand::Call {
                file,
                function,
                args,
                config,
                audit,
                egress,
                sandbox,
            } => {
                let call = CallRequest::parse(&function, &args)?;
                let cloud_config = match &config {
                    Some(path) => Some(
                        std::fs::read(path)
                            .with_context(|| format!("--config: cannot read {}", path.display()))?,
                    ),
                    None => None,
                };
                egress.check_credentials()?;
                let metrics = Arc::new(Metrics::default());
                let gate = EgressGate::new(egress.config(), metrics.clone());
                let source = ProviderSource {
                    wasm: read_component(&file)?,
                    origin: file.display().to_string(),
                    cloud_config,
                };
                let provider = Provider::load(
                    &sandbox.sandbox(metrics.clone())?,
                    gate.clone(),
                    source,
                    metrics,
                )
                .await;
                let outcome = match provider {
                    Ok(provider) => call.invoke(&provider).await,
                    Err(wasm_ccm_host::provider::ProviderLoadError::Init { error, .. }) => {
                        Err(error)
                    }
                    Err(error) => return Err(error.into()),
                };
                if audit {
                    for record in gate.audit().recent() {
                        eprintln!("{}", serde_json::to_string(&record)?);
                    }
                }
                Ok(report(outcome))
            }
        }
    }
}

fn read_component(file: &Path) -> anyhow::Result<Arc<[u8]>> {
    let bytes =
        std::fs::read(file).with_context(|| format!("cannot read provider {}", file.display()))?;
    Ok(bytes.into())
}

async fn inspect(file: &Path, json: bool, sandbox: &SandboxFlags) -> anyhow::Result<ExitCode> {
    let sandbox = sandbox.sandbox(Arc::new(Metrics::default()))?;
    let inspection = sandbox
        .inspect(read_component(file)?, &file.display().to_string())
        .await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&inspection)?);
    } else {
        print!("{}", render(file, &inspection));
    }
    Ok(if inspection.problem.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn render(file: &Path, inspection: &Inspection) -> String {
    let mut out = format!(
        "file:      {}\ndigest:    {}\nsize:      {} bytes\ncontract:  {}\n",
        file.display(),
        inspection.digest,
        inspection.size,
        inspection
            .contract_version
            .as_deref()
            .map_or("none found".to_string(), |v| format!(
                "wasm-ccm:provider@{v}"
            )),
    );
    out.push_str("imports:\n");
    for import in &inspection.imports {
        out.push_str(&format!("  {import}\n"));
    }
    out.push_str("exports:\n");
    for export in &inspection.exports {
        out.push_str(&format!("  {export}\n"));
    }
    match &inspection.problem {
        None => out.push_str("satisfies the host contract: yes\n"),
        Some(problem) => out.push_str(&format!("satisfies the host contract: no\n  {problem}\n")),
    }
    out
}

/// Print the outcome of a call: JSON on stdout, or the error on stderr.
fn report(outcome: Result<Value, ProviderError>) -> ExitCode {
    match outcome {
        Ok(value) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error ({}): {error}", error.outcome());
            ExitCode::FAILURE
        }
    }
}

/// A function and its arguments, checked before anything is loaded.
struct CallRequest {
    function: Function,
    args: Map<String, Value>,
}

/// The parameters `provider call` takes for `function`, as named in the WIT: all of them,
/// but `init`'s configuration, which comes from `--config`.
fn params(function: Function) -> &'static [&'static str] {
    match function {
        Function::Init => &[],
        _ => function.params(),
    }
}

impl CallRequest {
    fn parse(function: &str, args: &str) -> anyhow::Result<CallRequest> {
        let Some(function) = Function::named(function) else {
            let known: Vec<&str> = Function::ALL.iter().map(|f| f.name()).collect();
            bail!(
                "unknown function {function:?}; known functions: {}",
                known.join(", ")
            );
        };
        let params = params(function);
        let args: Value = serde_json::from_str(args)
            .with_context(|| format!("--args is not valid JSON: {args}"))?;
        let Value::Object(args) = args else {
            bail!(
                "--args must be a JSON object keyed by parameter name, e.g. {{\"node\": {{...}}}}"
            );
        };
        if let Some(unknown) = args.keys().find(|key| !params.contains(&key.as_str())) {
            bail!(
                "--args: {function} has no parameter {unknown:?} (parameters: {})",
                params.join(", ")
            );
        }
        if let Some(missing) = params.iter().find(|p| !args.contains_key(**p)) {
            bail!(
                "--args: {function} needs parameter {missing:?} (parameters: {})",
                params.join(", ")
            );
        }
        let request = CallRequest { function, args };
        request.check_types()?;
        Ok(request)
    }

    /// Decode every argument now, so a type error is reported before the provider loads.
    fn check_types(&self) -> anyhow::Result<()> {
        for (name, value) in &self.args {
            let value = value.clone();
            let checked = match name.as_str() {
                "node" => serde_json::from_value::<Node>(value).map(drop),
                "nodes" => serde_json::from_value::<Vec<Node>>(value).map(drop),
                "svc" => serde_json::from_value::<Service>(value).map(drop),
                "route" => serde_json::from_value::<Route>(value).map(drop),
                _ => serde_json::from_value::<String>(value).map(drop),
            };
            checked.with_context(|| format!("--args: parameter {name:?} of {}", self.function))?;
        }
        Ok(())
    }

    fn arg<T: DeserializeOwned>(&self, name: &str) -> T {
        let value = self.args.get(name).cloned().unwrap_or(Value::Null);
        // `check_types` decoded every argument already.
        serde_json::from_value(value)
            .unwrap_or_else(|e| unreachable!("argument {name} checked: {e}"))
    }

    async fn invoke(&self, p: &Provider) -> Result<Value, ProviderError> {
        let cluster: String = if self.args.contains_key("cluster-name") {
            self.arg("cluster-name")
        } else {
            String::new()
        };
        let (node, svc, route) = ("node", "svc", "route");
        Ok(match self.function {
            Function::Init => json(p.capabilities()),
            Function::InstanceExists => json(&p.instance_exists(&self.arg(node)).await?),
            Function::InstanceShutdown => json(&p.instance_shutdown(&self.arg(node)).await?),
            Function::InstanceMetadata => json(&p.instance_metadata(&self.arg(node)).await?),
            Function::GetLoadBalancer => {
                json(&p.get_load_balancer(&cluster, &self.arg(svc)).await?)
            }
            Function::GetLoadBalancerName => {
                json(&p.get_load_balancer_name(&cluster, &self.arg(svc)).await?)
            }
            Function::EnsureLoadBalancer => json(
                &p.ensure_load_balancer(&cluster, &self.arg(svc), &self.nodes())
                    .await?,
            ),
            Function::UpdateLoadBalancer => json(
                &p.update_load_balancer(&cluster, &self.arg(svc), &self.nodes())
                    .await?,
            ),
            Function::EnsureLoadBalancerDeleted => json(
                &p.ensure_load_balancer_deleted(&cluster, &self.arg(svc))
                    .await?,
            ),
            Function::ListRoutes => json(&p.list_routes(&cluster).await?),
            Function::CreateRoute => json(
                &p.create_route(&cluster, &self.arg::<String>("name-hint"), &self.arg(route))
                    .await?,
            ),
            Function::DeleteRoute => json(&p.delete_route(&cluster, &self.arg(route)).await?),
        })
    }

    fn nodes(&self) -> Vec<Node> {
        self.arg("nodes")
    }
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_is_known_and_checked() {
        assert!(CallRequest::parse("instance-metadata", r#"{"node": {"name": "n"}}"#).is_ok());
        let err = |f: &str, a: &str| CallRequest::parse(f, a).err().unwrap().to_string();
        assert!(err("instance-metadat", "{}").contains("unknown function"));
        assert!(err("instance-metadata", "{").contains("not valid JSON"));
        assert!(err("instance-metadata", "[]").contains("JSON object"));
        assert!(err("instance-metadata", "{}").contains("needs parameter \"node\""));
        assert!(
            err("instance-metadata", r#"{"node": {}, "svc": {}}"#).contains("no parameter \"svc\"")
        );
        let typed = CallRequest::parse("instance-metadata", r#"{"node": {"name": 5}}"#)
            .err()
            .unwrap();
        assert!(format!("{typed:#}").contains("parameter \"node\""));
    }
}

//! `wasm-ccm provider inspect|call|push|pull`: look inside a provider component, call one
//! contract function by hand under the same sandbox and egress gate the manager uses, and
//! publish or fetch providers in an OCI registry.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Subcommand;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::distribution::parse_reference;
use super::{DistributionFlags, EgressFlags, SandboxFlags};
use wasm_ccm_host::answers::{self, AnswerPolicy, Refusals};
use wasm_ccm_host::contract::{Function, InstanceMetadata, LbStatus, Node, Route, Service};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderSource};
use wasm_ccm_host::sandbox::Inspection;
use wasm_ccm_host::source::{
    Artifact, ComponentWorld, Distribution, Identity, ProviderRef, PushRequest,
};

/// The `provider` subcommands. PROVIDER is a FILE, file://PATH or oci://REGISTRY/REPO:TAG
/// (or @sha256:DIGEST); OCI references are pulled as run mode pulls them.
#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Print a component's digest, size, contract version, imports and exports, and whether
    /// it satisfies the host contract (exit 1 if not); for an OCI artifact also its manifest
    /// digest, media types and annotations.
    Inspect {
        /// The provider component.
        provider: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How the component is compiled (`--pooling-allocator`...).
        #[command(flatten)]
        sandbox: SandboxFlags,
        /// Registries and the cache.
        #[command(flatten)]
        distribution: DistributionFlags,
    },
    /// Call one contract function and print its result as JSON; on a provider error print
    /// its kind and message and exit 1.
    Call {
        /// The provider component.
        provider: String,
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
        /// Registries and the cache.
        #[command(flatten)]
        distribution: DistributionFlags,
    },
    /// Publish a component to an OCI registry in the CNCF wasm layout (config
    /// application/vnd.wasm.config.v0+json, one application/wasm layer) and print the
    /// manifest digest. A component that would not load as a provider is refused first.
    Push {
        /// The component (.wasm).
        file: PathBuf,
        /// Where to publish it: oci://REGISTRY/REPO:TAG.
        reference: String,
        /// The version it is (annotation org.opencontainers.image.version).
        #[arg(long, value_name = "VERSION")]
        version: Option<String>,
        /// Where its source lives (annotation org.opencontainers.image.source).
        #[arg(long, value_name = "URL")]
        source: Option<String>,
        /// When it was made, RFC 3339 (annotation org.opencontainers.image.created); now by
        /// default. Set it for reproducible digests.
        #[arg(long, value_name = "TIME", value_parser = rfc3339)]
        created: Option<String>,
        /// How the component is checked (it is compiled as run mode would).
        #[command(flatten)]
        sandbox: SandboxFlags,
        /// Registries and their credentials.
        #[command(flatten)]
        distribution: DistributionFlags,
    },
    /// Fetch a provider from an OCI registry, verified against its digests, and write the
    /// component to a file; prints the manifest digest.
    Pull {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// Where to write it; `REPO-NAME.wasm` in the current directory by default.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Registries, their credentials and the cache.
        #[command(flatten)]
        distribution: DistributionFlags,
    },
}

impl ProviderCommand {
    /// Run the subcommand. Exit code 1 when the component breaks the contract or the call
    /// fails; `Err` when the input is unusable (unreadable file, bad reference or `--args`,
    /// missing credential, registry failure).
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ProviderCommand::Inspect {
                provider,
                json,
                sandbox,
                distribution,
            } => inspect(&provider, json, &sandbox, &distribution).await,
            ProviderCommand::Call {
                provider,
                function,
                args,
                config,
                audit,
                egress,
                sandbox,
                distribution,
            } => {
                let call = CallRequest::parse(&function, &args)?;
                let cloud_config = match &config {
                    Some(path) => Some(
                        std::fs::read(path)
                            .with_context(|| format!("--config: cannot read {}", path.display()))?,
                    ),
                    None => None,
                };
                egress.check_grants()?;
                egress.check_credentials()?;
                let settings = distribution.settings()?;
                let compiled_dir = wasm_ccm_host::source::compiled_dir(&settings);
                let artifact = fetch(&Distribution::new(settings), &provider).await?;
                let metrics = Arc::new(Metrics::default());
                let gate = EgressGate::new(egress.config(), metrics.clone());
                let source = ProviderSource {
                    artifact,
                    cloud_config,
                };
                let provider = Provider::load(
                    &sandbox.sandbox(metrics.clone(), compiled_dir)?,
                    gate.clone(),
                    source,
                    metrics,
                )
                .await;
                let outcome = match provider {
                    Ok(provider) => {
                        let outcome = call.invoke(&provider).await;
                        if let Ok(answer) = &outcome
                            && let Some(refusals) = call.refused(&provider, answer)
                        {
                            eprintln!(
                                "warning: the manager would refuse this answer and write none of it: {refusals}"
                            );
                        }
                        outcome
                    }
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
            ProviderCommand::Push {
                file,
                reference,
                version,
                source,
                created,
                sandbox,
                distribution,
            } => {
                let oci = match parse_reference(&reference)? {
                    ProviderRef::Oci(oci) if oci.tag.is_some() => oci,
                    _ => bail!(
                        "{reference}: push needs an oci://REGISTRY/REPO:TAG reference (the registry names the digest)"
                    ),
                };
                let wasm = std::fs::read(&file)
                    .with_context(|| format!("cannot read provider {}", file.display()))?;
                let inspection = sandbox
                    .sandbox(Arc::new(Metrics::default()), None)?
                    .inspect(wasm.clone().into(), &file.display().to_string())
                    .await?;
                if let Some(problem) = &inspection.problem {
                    bail!(
                        "{}: not pushed: the component does not satisfy the host contract: {problem}",
                        file.display()
                    );
                }
                let request = PushRequest {
                    world: world(&inspection),
                    version,
                    source,
                    created,
                };
                let digest = distribution
                    .distribution()?
                    .push(wasm, &oci, &request)
                    .await?;
                println!("{digest}");
                eprintln!(
                    "pushed {} as {oci}; pin it with oci://{}/{}@{digest}",
                    file.display(),
                    oci.registry,
                    oci.repository
                );
                Ok(ExitCode::SUCCESS)
            }
            ProviderCommand::Pull {
                reference,
                output,
                distribution,
            } => {
                let oci = match parse_reference(&reference)? {
                    ProviderRef::Oci(oci) => oci,
                    ProviderRef::File(_) => {
                        bail!("{reference}: pull needs an oci:// reference")
                    }
                };
                let artifact = distribution
                    .distribution()?
                    .fetch(&ProviderRef::Oci(oci.clone()))
                    .await?;
                let output = output.unwrap_or_else(|| {
                    let name = oci.repository.rsplit('/').next().unwrap_or("provider");
                    PathBuf::from(format!("{name}.wasm"))
                });
                write_atomically(&output, &artifact.wasm)
                    .with_context(|| format!("-o {}", output.display()))?;
                println!("{}", artifact.identity.digest);
                eprintln!(
                    "pulled {} ({} bytes) to {}",
                    artifact.identity.reference,
                    artifact.wasm.len(),
                    output.display()
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

/// The artifact `provider` names, as run mode would fetch it.
async fn fetch(distribution: &Distribution, provider: &str) -> anyhow::Result<Artifact> {
    Ok(distribution.fetch(&parse_reference(provider)?).await?)
}

/// The interface names of `inspection`'s imports and exports, for the artifact's config.
fn world(inspection: &Inspection) -> ComponentWorld {
    let names = |items: &[String]| {
        items
            .iter()
            .filter_map(|item| item.strip_prefix("instance "))
            .map(str::to_string)
            .collect()
    };
    ComponentWorld {
        imports: names(&inspection.imports),
        exports: names(&inspection.exports),
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path)?;
    Ok(())
}

fn rfc3339(text: &str) -> Result<String, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|_| text.to_string())
        .map_err(|error| {
            format!("{text:?} is not an RFC 3339 time (e.g. 2026-11-24T00:00:00Z): {error}")
        })
}

async fn inspect(
    provider: &str,
    json: bool,
    sandbox: &SandboxFlags,
    distribution: &DistributionFlags,
) -> anyhow::Result<ExitCode> {
    let settings = distribution.settings()?;
    let compiled_dir = wasm_ccm_host::source::compiled_dir(&settings);
    let artifact = fetch(&Distribution::new(settings), provider).await?;
    let sandbox = sandbox.sandbox(Arc::new(Metrics::default()), compiled_dir)?;
    let inspection = sandbox
        .inspect(artifact.wasm.clone(), &artifact.identity.reference)
        .await?;
    if json {
        let mut value = serde_json::to_value(&inspection)?;
        value["reference"] = Value::String(artifact.identity.reference.clone());
        if let Some(manifest) = &artifact.identity.manifest {
            value["manifest"] = serde_json::to_value(manifest)?;
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{}", render(&artifact.identity, &inspection));
    }
    Ok(if inspection.problem.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn render(identity: &Identity, inspection: &Inspection) -> String {
    let mut out = format!("provider:  {}\n", identity.reference);
    if let Some(manifest) = &identity.manifest {
        out.push_str(&format!(
            "manifest:  {} ({})\nconfig:    {}\nlayers:    {}\n",
            manifest.digest,
            manifest.media_type,
            manifest.config_media_type,
            manifest.layer_media_types.join(", ")
        ));
        for (key, value) in &manifest.annotations {
            out.push_str(&format!("  {key}: {value}\n"));
        }
    }
    out.push_str(&format!(
        "digest:    {}\nsize:      {} bytes\ncontract:  {}\n",
        inspection.digest,
        inspection.size,
        inspection
            .contract_version
            .as_deref()
            .map_or("none found".to_string(), |v| format!(
                "wasm-ccm:provider@{v}"
            )),
    ));
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

    /// What the manager's checks of answers refuse in `answer`, for the functions whose
    /// answers it writes. Without a cluster no range, node or Service is known: a call
    /// previews the checks that need none.
    fn refused(&self, p: &Provider, answer: &Value) -> Option<Refusals> {
        let checked = match self.function {
            Function::InstanceMetadata => {
                let metadata: InstanceMetadata = serde_json::from_value(answer.clone()).ok()?;
                let name = &p.capabilities().name;
                answers::check_instance_metadata(&metadata, name, &self.arg("node"))
            }
            Function::EnsureLoadBalancer | Function::GetLoadBalancer => {
                let status: Option<LbStatus> = serde_json::from_value(answer.clone()).ok()?;
                AnswerPolicy::default().check_load_balancer_status(
                    &status?,
                    &self.arg("svc"),
                    |_| None,
                )
            }
            _ => return None,
        };
        checked.err()
    }

    fn nodes(&self) -> Arc<[Node]> {
        self.arg::<Vec<Node>>("nodes").into()
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

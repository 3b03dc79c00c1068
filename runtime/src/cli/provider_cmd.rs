//! `wasm-ccm provider new|inspect|call|conformance|push|pull|sign|verify`: make a provider
//! crate, look inside a provider component, call one contract function by hand under the
//! same sandbox and egress gate the manager uses, check a provider against the contract's
//! rules, publish or fetch providers in an OCI registry, and sign them (cosign's layout) or
//! check their signatures as the manager does.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde_json::{Map, Value};

use super::conformance::{self, Fixture, Verdict};
use super::distribution::{RegistryFlags, parse_reference};
use super::scaffold::Language;
use super::{DistributionFlags, EgressFlags, SandboxFlags, out};
use wasm_ccm_host::answers::{AnswerChecks, Refusals};
use wasm_ccm_host::contract::{Function, InstanceMetadata, LbStatus, Node, Route, Service};
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Provider, ProviderError, ProviderSource};
use wasm_ccm_host::sandbox::Inspection;
use wasm_ccm_host::source::{
    Artifact, ComponentWorld, Distribution, Identity, OciRef, ProviderRef, PublicKey, PushRequest,
    Signature, SignaturePolicy, Signed, SigningKey, TrustedKeys,
};

/// The `provider` subcommands. PROVIDER is a FILE, file://PATH or oci://REGISTRY/REPO:TAG
/// (or @sha256:DIGEST); OCI references are pulled as run mode pulls them.
#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Make a provider project that builds to a component as it is: the SDK of its language
    /// and the contract of this wasm-ccm beside it, its build tools pinned, a provider
    /// answering instance questions from the cloud simulator (replace its requests with your
    /// cloud's), and a README.
    New {
        /// The provider's name: its crate's or package's, the one `init` reports and its
        /// provider IDs' scheme (NAME://ID).
        name: String,
        /// The language, `rust`, `typescript` or `python`: a Rust crate (cargo), an npm
        /// package (componentize-js) or a Python project (componentize-py).
        #[arg(long, value_enum, default_value_t)]
        language: Language,
        /// Where to write it (a new or empty directory); ./NAME by default.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print a component's digest, size, contract version, imports and exports, and whether
    /// it satisfies the host contract (exit 1 if not); for an OCI artifact also its manifest
    /// digest, media types and annotations.
    Inspect {
        /// The provider component.
        provider: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// A public key (PEM, ECDSA P-256) to check the listed signatures with; repeatable.
        #[arg(long, value_name = "FILE")]
        signature_key: Vec<PathBuf>,
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
        /// Also print the egress audit records of the call to stderr, as JSON lines.
        #[arg(long)]
        audit: bool,
        /// The configuration, grants, limits and registries it is loaded with.
        #[command(flatten)]
        load: LoadFlags,
    },
    /// Check a provider against the contract's behavioural rules with its cloud (a real one
    /// or a simulator): one row per rule (PASS, FAIL or SKIP, with what was seen); exit 1 if
    /// a rule fails. The rules create a load balancer and a route and delete them again.
    Conformance {
        /// The provider component.
        provider: String,
        /// What the rules need from the cloud (YAML or JSON): instances.existing and
        /// instances.missing (nodes), loadBalancer.service, .nodes and .updatedNodes,
        /// routes.route, clusterName; a section left out skips its rules.
        #[arg(long, value_name = "FILE")]
        fixture: PathBuf,
        /// `text` (a table) or `json`.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// The configuration, grants, limits and registries it is loaded with.
        #[command(flatten)]
        load: LoadFlags,
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
        /// Also sign the pushed version with this private key (PKCS#8 PEM, ECDSA P-256), as
        /// `provider sign` does.
        #[arg(long, value_name = "FILE")]
        sign_key: Option<PathBuf>,
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
    /// Sign a provider in an OCI registry with a private key, in cosign's layout: a
    /// signature of its manifest digest appended to the artifact tagged sha256-HEX.sig in
    /// the same repository (`cosign verify --key` accepts it). Prints the digest signed.
    Sign {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// The private key: PKCS#8 PEM of an ECDSA P-256 key, e.g. from `openssl genpkey
        /// -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out signing.pem`.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Registries and their credentials.
        #[command(flatten)]
        distribution: DistributionFlags,
    },
    /// Check a provider's signatures as the manager does with --provider-signature-key:
    /// exit 0 if one of the keys signed its digest, 2 (with the reason) if not.
    Verify {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// A public key (PEM, ECDSA P-256, as cosign.pub); repeatable: one must have signed.
        #[arg(long, value_name = "FILE", required = true)]
        key: Vec<PathBuf>,
        /// Registries and their credentials.
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
            ProviderCommand::New {
                name,
                language,
                dir,
            } => {
                let dir = super::scaffold::new_provider(&name, language, dir.as_deref())?;
                out(format_args!(
                    "Created the {} provider {name} in {}. Build its component with:\n{}\n",
                    language.title(),
                    dir.display(),
                    language.build_hint(&name, &dir),
                ))?;
                Ok(ExitCode::SUCCESS)
            }
            ProviderCommand::Inspect {
                provider,
                json,
                signature_key,
                sandbox,
                distribution,
            } => {
                let keys = public_keys(&signature_key, "--signature-key")?;
                inspect(&provider, json, &keys, &sandbox, &distribution).await
            }
            ProviderCommand::Call {
                provider,
                function,
                args,
                audit,
                load,
            } => {
                let call = CallRequest::parse(&function, &args)?;
                let (loaded, gate) = load.load(&provider).await?;
                let outcome = match loaded {
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
                Ok(report(outcome)?)
            }
            ProviderCommand::Conformance {
                provider,
                fixture,
                output,
                load,
            } => {
                let fixture = Fixture::read(&fixture)?;
                let (loaded, _gate) = load.load(&provider).await?;
                let report = match loaded {
                    Ok(provider) => {
                        let made = conformance::Made::default();
                        tokio::select! {
                            report = conformance::run(&provider, &fixture, &made) => report,
                            _ = super::run::wait_for_signal() => {
                                return Ok(interrupted(&provider, &fixture, &made).await);
                            }
                        }
                    }
                    Err(wasm_ccm_host::provider::ProviderLoadError::Init { origin, error }) => {
                        conformance::Report::init_failed(&origin, &error)
                    }
                    Err(error) => return Err(error.into()),
                };
                match output {
                    Output::Text => out(report.render())?,
                    Output::Json => {
                        out(format_args!("{}\n", serde_json::to_string_pretty(&report)?))?
                    }
                }
                Ok(if report.count(Verdict::Fail) == 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                })
            }
            ProviderCommand::Push {
                file,
                reference,
                version,
                source,
                created,
                sign_key,
                sandbox,
                distribution,
            } => {
                let sign_key = match &sign_key {
                    Some(path) => Some(signing_key(path, "--sign-key")?),
                    None => None,
                };
                let oci = match parse_reference(&reference)? {
                    ProviderRef::Oci(oci) if oci.tag.is_some() => oci,
                    _ => bail!(
                        "{reference}: push needs an oci://REGISTRY/REPO:TAG reference (the registry names the digest)"
                    ),
                };
                let wasm = std::fs::read(&file)
                    .with_context(|| format!("cannot read provider {}", file.display()))?;
                let settings = distribution.settings()?;
                let compiled_dir = wasm_ccm_host::source::compiled_dir(&settings);
                // The registry first: one that cannot be reached fails now, not after a
                // compile (tens of seconds for a TypeScript or Python component).
                let distribution = Distribution::new(settings);
                distribution.check_push(&oci).await?;
                let inspection = sandbox
                    .sandbox(Arc::new(Metrics::default()), compiled_dir)?
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
                let digest = distribution.push(wasm, &oci, &request).await?;
                out(format_args!("{digest}\n"))?;
                eprintln!(
                    "pushed {} as {oci}; pin it with oci://{}/{}@{digest}",
                    file.display(),
                    oci.registry,
                    oci.repository
                );
                if let Some(key) = &sign_key {
                    let pinned = OciRef {
                        digest: Some(digest),
                        ..oci
                    };
                    let signed = distribution.sign(&pinned, key).await?;
                    report_signed(&signed, key);
                }
                Ok(ExitCode::SUCCESS)
            }
            ProviderCommand::Sign {
                reference,
                key,
                distribution,
            } => sign(&reference, &key, &distribution).await,
            ProviderCommand::Verify {
                reference,
                key,
                distribution,
            } => verify(&reference, &key, &distribution.registry, Checked::Provider).await,
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
                out(format_args!("{}\n", artifact.identity.digest))?;
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

/// Sign `reference` with the key at `key`.
async fn sign(
    reference: &str,
    key: &Path,
    distribution: &DistributionFlags,
) -> anyhow::Result<ExitCode> {
    let key = signing_key(key, "--key")?;
    let oci = oci_reference(reference, "sign")?;
    let signed = distribution.distribution()?.sign(&oci, &key).await?;
    out(format_args!("{}\n", signed.digest))?;
    report_signed(&signed, &key);
    Ok(ExitCode::SUCCESS)
}

pub(super) fn report_signed(signed: &Signed, key: &SigningKey) {
    eprintln!(
        "signed {} with {}; {} signature(s) in {}",
        signed.digest,
        key.public_key(),
        signed.count,
        signed.signatures
    );
}

/// What a `verify` checks: a provider, or any of the manager's own artifacts (an image
/// index too).
pub(super) enum Checked {
    Provider,
    Artifact,
}

/// Check `reference`'s signatures against `keys`, as run mode does (never from the cache).
pub(super) async fn verify(
    reference: &str,
    keys: &[PathBuf],
    registry: &RegistryFlags,
    checked: Checked,
) -> anyhow::Result<ExitCode> {
    let oci = oci_reference(reference, "verify")?;
    let policy = SignaturePolicy::default().and(TrustedKeys {
        source: "--key".into(),
        keys: public_keys(keys, "--key")?,
    });
    let distribution = registry.distribution()?;
    let reference = ProviderRef::Oci(oci.clone());
    let digest = match checked {
        Checked::Provider => distribution.resolve(&oci).await?,
        Checked::Artifact => distribution.resolve_artifact(&oci).await?,
    };
    let verified = distribution
        .verify_signatures(&reference, &digest, &policy)
        .await?;
    out(format_args!("{digest}\n"))?;
    let by: Vec<String> = policy
        .required
        .iter()
        .flat_map(|set| &set.keys)
        .filter(|key| verified.keys.iter().any(|f| f == key.fingerprint()))
        .map(ToString::to_string)
        .collect();
    eprintln!("{oci} ({digest}) is signed by {}", by.join(", "));
    Ok(ExitCode::SUCCESS)
}

pub(super) fn oci_reference(reference: &str, command: &str) -> anyhow::Result<OciRef> {
    match parse_reference(reference)? {
        ProviderRef::Oci(oci) => Ok(oci),
        ProviderRef::File(_) => bail!(
            "{reference}: {command} needs an oci:// reference (signatures live in the registry, beside the artifact)"
        ),
    }
}

pub(super) fn signing_key(path: &Path, flag: &str) -> anyhow::Result<SigningKey> {
    let pem = std::fs::read(path).with_context(|| format!("{flag} {}", path.display()))?;
    SigningKey::from_pem(path.display().to_string(), &pem)
        .map_err(|error| anyhow::anyhow!("{flag} {error}"))
}

pub(super) fn public_keys(paths: &[PathBuf], flag: &str) -> anyhow::Result<Vec<PublicKey>> {
    paths
        .iter()
        .map(|path| {
            let pem = std::fs::read(path).with_context(|| format!("{flag} {}", path.display()))?;
            PublicKey::from_pem(path.display().to_string(), &pem)
                .map_err(|error| anyhow::anyhow!("{flag} {error}"))
        })
        .collect()
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

pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
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
    keys: &[PublicKey],
    sandbox: &SandboxFlags,
    distribution: &DistributionFlags,
) -> anyhow::Result<ExitCode> {
    let settings = distribution.settings()?;
    let compiled_dir = wasm_ccm_host::source::compiled_dir(&settings);
    let distribution = Distribution::new(settings);
    let reference = parse_reference(provider)?;
    let artifact = distribution.fetch(&reference).await?;
    let signatures = match &reference {
        ProviderRef::Oci(oci) => Some(
            distribution
                .signatures(oci, &artifact.identity.digest)
                .await
                .map(|found| listed_signatures(found.unwrap_or_default(), keys))
                .map_err(|error| error.to_string()),
        ),
        ProviderRef::File(_) => None,
    };
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
        match &signatures {
            Some(Ok(listed)) => value["signatures"] = serde_json::to_value(listed)?,
            Some(Err(error)) => value["signatureError"] = Value::String(error.clone()),
            None => {}
        }
        out(format_args!("{}\n", serde_json::to_string_pretty(&value)?))?;
    } else {
        out(render(&artifact.identity, &inspection))?;
        if let Some(signatures) = &signatures {
            out(render_signatures(&artifact.identity.digest, signatures))?;
        }
    }
    Ok(if inspection.problem.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Text a registry or a component chose (annotations, media types, import and export
/// names, problems quoting them), as `inspect` prints it: escaped onto one line, cut to
/// 512 bytes.
fn quoted(text: &str) -> String {
    wasm_ccm_host::text::ellipsized(wasm_ccm_host::text::escaped(text).into_owned(), 512)
}

fn render(identity: &Identity, inspection: &Inspection) -> String {
    let mut out = format!("provider:  {}\n", identity.reference);
    if let Some(manifest) = &identity.manifest {
        out.push_str(&format!(
            "manifest:  {} ({})\nconfig:    {}\nlayers:    {}\n",
            manifest.digest,
            quoted(&manifest.media_type),
            quoted(&manifest.config_media_type),
            quoted(&manifest.layer_media_types.join(", "))
        ));
        for (key, value) in &manifest.annotations {
            out.push_str(&format!("  {}: {}\n", quoted(key), quoted(value)));
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
        out.push_str(&format!("  {}\n", quoted(import)));
    }
    out.push_str("exports:\n");
    for export in &inspection.exports {
        out.push_str(&format!("  {}\n", quoted(export)));
    }
    match &inspection.problem {
        None => out.push_str("satisfies the host contract: yes\n"),
        Some(problem) => out.push_str(&format!(
            "satisfies the host contract: no\n  {}\n",
            quoted(problem)
        )),
    }
    out
}

/// One signature as `provider inspect` lists it.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ListedSignature {
    /// The digest its payload claims.
    digest: Option<String>,
    /// The repository its payload names.
    repository: Option<String>,
    /// The given keys it verifies with, as `NAME (sha256:…)`.
    verified_by: Vec<String>,
    /// Why it cannot be read, if it cannot.
    problem: Option<String>,
}

fn listed_signatures(found: Vec<Signature>, keys: &[PublicKey]) -> Vec<ListedSignature> {
    found
        .iter()
        .map(|signature| ListedSignature {
            digest: signature.claimed_digest(),
            repository: signature.claimed_repository(),
            verified_by: keys
                .iter()
                .filter(|key| signature.verifies_with(key))
                .map(ToString::to_string)
                .collect(),
            problem: signature
                .payload
                .as_ref()
                .err()
                .or(signature.signature.as_ref().err())
                .cloned(),
        })
        .collect()
}

fn render_signatures(digest: &str, signatures: &Result<Vec<ListedSignature>, String>) -> String {
    let tag = wasm_ccm_host::source::signature::signature_tag(digest);
    let listed = match signatures {
        Err(error) => return format!("signatures: cannot be read ({tag}): {error}\n"),
        Ok(listed) => listed,
    };
    let mut out = format!("signatures: {} ({tag})\n", listed.len());
    for signature in listed {
        let claimed = quoted(signature.digest.as_deref().unwrap_or("no digest claimed"));
        let mark = if signature.digest.as_deref() == Some(digest) {
            ""
        } else {
            " (not this digest)"
        };
        out.push_str(&format!("  {claimed}{mark}\n"));
        for key in &signature.verified_by {
            out.push_str(&format!("    verified with {key}\n"));
        }
        if let Some(problem) = &signature.problem {
            out.push_str(&format!("    unreadable: {}\n", quoted(problem)));
        }
    }
    out
}

/// How `provider conformance` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// How `provider call` and `provider conformance` load a provider.
#[derive(Debug, Args)]
pub struct LoadFlags {
    /// The cloud configuration file passed to init (as --cloud-config would be).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What `init` and the calls may reach, and with which credentials (boxed: the largest
    /// group of flags).
    #[command(flatten)]
    pub egress: Box<EgressFlags>,
    /// Limits `init` and the calls run under.
    #[command(flatten)]
    pub sandbox: SandboxFlags,
    /// Registries and the cache.
    #[command(flatten)]
    pub distribution: DistributionFlags,
}

impl LoadFlags {
    /// Load `provider` as the manager would, under these grants and limits, `init` called
    /// with the configuration file; also the egress gate its calls go through.
    async fn load(
        &self,
        provider: &str,
    ) -> anyhow::Result<(
        Result<Provider, wasm_ccm_host::provider::ProviderLoadError>,
        Arc<EgressGate>,
    )> {
        let cloud_config = match &self.config {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("--config: cannot read {}", path.display()))?,
            ),
            None => None,
        };
        self.egress.check_grants()?;
        self.egress.check_credentials()?;
        let settings = self.distribution.settings()?;
        let compiled_dir = wasm_ccm_host::source::compiled_dir(&settings);
        let artifact = fetch(&Distribution::new(settings), provider).await?;
        let metrics = Arc::new(Metrics::default());
        let gate = EgressGate::new(self.egress.config(), metrics.clone());
        let source = ProviderSource {
            artifact,
            cloud_config,
        };
        // The commands report what the manager's checks would refuse themselves, beside
        // the answer as the provider gave it.
        let loaded = Provider::load(
            &self.sandbox.sandbox(metrics.clone(), compiled_dir)?,
            gate.clone(),
            source,
            metrics,
        )
        .await
        .map(|provider| provider.with_checks(Arc::new(AnswerChecks::unenforced())));
        Ok((loaded, gate))
    }
}

/// A conformance run interrupted (Ctrl-C or SIGTERM): delete what it asked the cloud to
/// make, saying what was deleted and what was not, and exit 130 (as a shell reports
/// SIGINT). A second signal stops the deleting, saying so.
async fn interrupted(
    provider: &wasm_ccm_host::provider::Provider,
    fixture: &Fixture,
    made: &conformance::Made,
) -> ExitCode {
    eprintln!("interrupted: deleting what the kit made (Ctrl-C again to stop)");
    tokio::select! {
        lines = conformance::clean_up(provider, fixture, made) => {
            for line in lines {
                eprintln!("{line}");
            }
        }
        _ = super::run::wait_for_signal() => {
            eprintln!("interrupted again: what the kit made may be left in the cloud (see the fixture's loadBalancer.service and routes.route)");
        }
    }
    ExitCode::from(130)
}

/// Print the outcome of a call: JSON on stdout, or the error on stderr.
fn report(outcome: Result<Value, ProviderError>) -> std::io::Result<ExitCode> {
    match outcome {
        Ok(value) => {
            out(format_args!(
                "{}\n",
                serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("error ({}): {error}", error.outcome());
            Ok(ExitCode::FAILURE)
        }
    }
}

/// A function and its arguments, checked before anything is loaded.
pub(super) struct CallRequest {
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
        CallRequest::with_args(function, args)
    }

    /// A call of `function` with `args` (keyed by the WIT's parameter names), each decoded
    /// as the facade takes it.
    pub(super) fn with_args(
        function: Function,
        args: Map<String, Value>,
    ) -> anyhow::Result<CallRequest> {
        let request = CallRequest { function, args };
        request.check_types()?;
        Ok(request)
    }

    /// The argument `name`, decoded as the facade's parameter type `T` takes it.
    fn decode<T: JsonParam + ?Sized>(&self, name: &str) -> anyhow::Result<T::Decoded> {
        let value = self.args.get(name).cloned().unwrap_or(Value::Null);
        T::decode(value).with_context(|| format!("--args: parameter {name:?} of {}", self.function))
    }

    /// The argument `name`, which [`CallRequest::check_types`] decoded already.
    fn arg<T: JsonParam + ?Sized>(&self, name: &str) -> T::Decoded {
        self.decode::<T>(name)
            .unwrap_or_else(|e| unreachable!("argument {name} checked: {e:#}"))
    }

    /// What the manager's checks of answers refuse in `answer`, for the functions whose
    /// answers it writes. Without a cluster no range, node or Service is known: a call
    /// previews the checks that need none.
    fn refused(&self, p: &Provider, answer: &Value) -> Option<Refusals> {
        let checks = AnswerChecks::default();
        let checked = match self.function {
            Function::InstanceMetadata => {
                let metadata: InstanceMetadata = serde_json::from_value(answer.clone()).ok()?;
                let name = &p.capabilities().name;
                checks.instance_metadata(&metadata, name, &self.arg::<Node>("node"))
            }
            Function::EnsureLoadBalancer | Function::GetLoadBalancer => {
                let status: Option<LbStatus> = serde_json::from_value(answer.clone()).ok()?;
                checks.load_balancer_status(&status?, &self.arg::<Service>("svc"))
            }
            Function::ListRoutes => {
                let routes: Vec<Route> = serde_json::from_value(answer.clone()).ok()?;
                checks.routes(&routes)
            }
            Function::GetLoadBalancerName => checks.load_balancer_name(answer.as_str()?),
            _ => return None,
        };
        checked.err()
    }
}

/// Declares how `provider call` checks and makes each contract function's call, from
/// [`wasm_ccm_host::contract_table!`]: every argument decoded as the facade's method takes
/// it, and the method called.
macro_rules! call_dispatch {
    (
        $init:ident: $init_interface:literal / $init_name:literal ($init_param:literal);
        $(
            $(#[$doc:meta])*
            $variant:ident: $interface:literal / $name:literal
                $how:ident fn $method:ident($($param:literal $arg:ident: &$ty:ty),*) -> $answer:ty;
        )*
    ) => {
        impl CallRequest {
            /// Decode every argument now, so a type error is reported before the provider
            /// loads.
            fn check_types(&self) -> anyhow::Result<()> {
                match self.function {
                    Function::$init => {}
                    $(Function::$variant => {
                        $(self.decode::<$ty>($param)?;)*
                    })*
                }
                Ok(())
            }

            /// Make the call through the facade; its answer as JSON.
            pub(super) async fn invoke(&self, p: &Provider) -> Result<Value, ProviderError> {
                Ok(match self.function {
                    Function::$init => json(p.capabilities()),
                    $(Function::$variant => {
                        $(let $arg = self.arg::<$ty>($param);)*
                        json(&p.$method($(<$ty as JsonParam>::lend(&$arg)),*).await?)
                    })*
                })
            }
        }
    };
}

wasm_ccm_host::contract_table!(call_dispatch);

/// A parameter of a facade method as `provider call` reads it from `--args`: what its JSON
/// decodes to, and how the method borrows that.
trait JsonParam {
    /// What the JSON decodes to.
    type Decoded;
    /// Decode the argument.
    fn decode(value: Value) -> serde_json::Result<Self::Decoded>;
    /// The method's view of it.
    fn lend(decoded: &Self::Decoded) -> &Self;
}

impl JsonParam for str {
    type Decoded = String;
    fn decode(value: Value) -> serde_json::Result<String> {
        serde_json::from_value(value)
    }
    fn lend(decoded: &String) -> &str {
        decoded
    }
}

/// `JsonParam` for the contract's records, which decode to themselves.
macro_rules! records_are_json_params {
    ($($record:ty),*) => {$(
        impl JsonParam for $record {
            type Decoded = $record;
            fn decode(value: Value) -> serde_json::Result<$record> {
                serde_json::from_value(value)
            }
            fn lend(decoded: &$record) -> &$record {
                decoded
            }
        }
    )*};
}

records_are_json_params!(Node, Service, Route);

impl JsonParam for Arc<[Node]> {
    type Decoded = Arc<[Node]>;
    fn decode(value: Value) -> serde_json::Result<Arc<[Node]>> {
        serde_json::from_value::<Vec<Node>>(value).map(Arc::from)
    }
    fn lend(decoded: &Arc<[Node]>) -> &Arc<[Node]> {
        decoded
    }
}

fn json<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    /// Every function's parameters decode from what the facade's types read, and a value of
    /// the wrong type is refused naming the parameter: the dispatch follows the contract's
    /// table, with no function left out.
    #[test]
    fn every_parameter_of_every_function_is_decoded_as_its_type() {
        let valid = |param: &str| match param {
            "node" | "svc" | "route" => json!({}),
            "nodes" => json!([{"name": "n"}]),
            _ => json!("text"),
        };
        for &function in Function::ALL {
            let args: Map<String, Value> = params(function)
                .iter()
                .map(|param| (param.to_string(), valid(param)))
                .collect();
            let request =
                CallRequest::parse(function.name(), &Value::Object(args.clone()).to_string());
            assert!(request.is_ok(), "{function}: {:?}", request.err());
            for param in params(function) {
                let mut wrong = args.clone();
                wrong.insert(param.to_string(), json!([5]));
                let error = CallRequest::parse(function.name(), &Value::Object(wrong).to_string())
                    .err()
                    .unwrap_or_else(|| panic!("{function}: {param} as [5] was taken"));
                assert!(
                    format!("{error:#}").contains(&format!("parameter {param:?} of {function}")),
                    "{error:#}"
                );
            }
        }
    }
}

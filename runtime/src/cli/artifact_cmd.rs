//! `wasm-ccm artifact sign|verify|attach|attached`: the manager's own release artifacts (its
//! multi-platform image, its Helm chart) signed in cosign's format by the code that signs
//! providers, their signatures checked, and files (the release's SBOM) attached to them as
//! OCI referrers and read back, as `oras attach` and `oras discover` do. `make release`
//! runs these; an operator without cosign or oras verifies a release with them.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Subcommand;

use super::distribution::RegistryFlags;
use super::out;
use super::provider_cmd::{
    Checked, oci_reference, public_keys, report_signed, signing_key, verify, write_atomically,
};
use wasm_ccm_host::source::{Listing, OciRef, ProviderRef, SignaturePolicy, TrustedKeys};

/// The `artifact` subcommands. REFERENCE is oci://REGISTRY/REPO:TAG or
/// oci://REGISTRY/REPO@sha256:DIGEST of any manifest: an image, an image index, a chart.
#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// Sign the manifest REFERENCE names with a private key and publish the signature in
    /// cosign's layout (tag sha256-HEX.sig beside it), as `provider sign` signs a provider;
    /// print the digest signed.
    Sign {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// The private key: PKCS#8 PEM of an ECDSA P-256 key.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Registries and their credentials.
        #[command(flatten)]
        registry: RegistryFlags,
    },
    /// Check the signatures of the manifest REFERENCE names: exit 0 if one of the keys
    /// signed its digest, 2 (with the reason) if not.
    Verify {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// A public key (PEM, ECDSA P-256, as cosign.pub); repeatable: one must have signed.
        #[arg(long, value_name = "FILE", required = true)]
        key: Vec<PathBuf>,
        /// Registries and their credentials.
        #[command(flatten)]
        registry: RegistryFlags,
    },
    /// Attach a file to the manifest REFERENCE names as an OCI referrer (an artifact
    /// manifest whose subject is that manifest), listed by the registry's referrers API or,
    /// without one, in the fallback index tagged sha256-HEX; print the referrer's digest.
    Attach {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// The file to attach.
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// What it is, e.g. application/spdx+json for an SPDX SBOM.
        #[arg(long, value_name = "MEDIA-TYPE")]
        artifact_type: String,
        /// Registries and their credentials.
        #[command(flatten)]
        registry: RegistryFlags,
    },
    /// Print (or write) the files of one type attached to the manifest REFERENCE names;
    /// exit 1 if there is none (with --key: none signed by one of the keys).
    Attached {
        /// oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// The type looked for, e.g. application/spdx+json.
        #[arg(long, value_name = "MEDIA-TYPE")]
        artifact_type: String,
        /// Only files whose referrer is signed by one of these public keys (PEM, ECDSA
        /// P-256); repeatable. Anyone who may push to the repository can attach a file.
        #[arg(long, value_name = "FILE")]
        key: Vec<PathBuf>,
        /// Write the file here instead of printing it (needed on a terminal). With several,
        /// the first (signed, with --key); each is listed on stderr.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Registries and their credentials.
        #[command(flatten)]
        registry: RegistryFlags,
    },
}

impl ArtifactCommand {
    /// Run the subcommand; `Err` (exit 2) when the input is unusable or the registry fails.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            ArtifactCommand::Sign {
                reference,
                key,
                registry,
            } => {
                let key = signing_key(&key, "--key")?;
                let oci = oci_reference(&reference, "sign")?;
                let signed = registry.distribution()?.sign_artifact(&oci, &key).await?;
                out(format_args!("{}\n", signed.digest))?;
                report_signed(&signed, &key);
                Ok(ExitCode::SUCCESS)
            }
            ArtifactCommand::Verify {
                reference,
                key,
                registry,
            } => verify(&reference, &key, &registry, Checked::Artifact).await,
            ArtifactCommand::Attach {
                reference,
                file,
                artifact_type,
                registry,
            } => {
                let oci = oci_reference(&reference, "attach")?;
                let bytes =
                    std::fs::read(&file).with_context(|| format!("--file {}", file.display()))?;
                let title = file
                    .file_name()
                    .map(|name| name.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let attached = registry
                    .distribution()?
                    .attach(&oci, &artifact_type, &title, bytes)
                    .await?;
                let digest = attached.reference.digest.clone().unwrap_or_default();
                out(format_args!("{digest}\n"))?;
                let listing = match &attached.listing {
                    Listing::Api => "listed by the registry's referrers API".to_string(),
                    Listing::Tag(tag) => {
                        format!("listed in {tag} (the registry has no referrers API)")
                    }
                };
                eprintln!(
                    "attached {} ({artifact_type}) to {oci} ({}) as {}; {listing}",
                    file.display(),
                    attached.subject,
                    attached.reference
                );
                Ok(ExitCode::SUCCESS)
            }
            ArtifactCommand::Attached {
                reference,
                artifact_type,
                key,
                output,
                registry,
            } => {
                let oci = oci_reference(&reference, "attached")?;
                if output.is_none() && std::io::stdout().is_terminal() {
                    bail!(
                        "give -o FILE: the attached file is the registry's bytes, not for a terminal"
                    );
                }
                let distribution = registry.distribution()?;
                let policy = (!key.is_empty())
                    .then(|| -> anyhow::Result<SignaturePolicy> {
                        Ok(SignaturePolicy::default().and(TrustedKeys {
                            source: "--key".into(),
                            keys: public_keys(&key, "--key")?,
                        }))
                    })
                    .transpose()?;
                let (subject, referrers) = distribution.attached(&oci, &artifact_type).await?;
                // Listed, each with why it is left out; the first that passes is read.
                let mut chosen = None;
                for referrer in &referrers {
                    let digest = &referrer.digest;
                    if chosen.is_some() {
                        eprintln!("{digest} {artifact_type}: not read (one is written)");
                        continue;
                    }
                    if let Some(policy) = &policy {
                        let signed = ProviderRef::Oci(OciRef {
                            tag: None,
                            digest: Some(digest.clone()),
                            ..oci.clone()
                        });
                        if let Err(error) = distribution
                            .verify_signatures(&signed, digest, policy)
                            .await
                        {
                            eprintln!(
                                "{digest} {artifact_type}: left out: {}",
                                wasm_ccm_host::text::escaped(&error.to_string())
                            );
                            continue;
                        }
                    }
                    let attachment = distribution.attachment(&oci, &subject, referrer).await?;
                    eprintln!(
                        "{digest} {artifact_type} ({} bytes{}{})",
                        attachment.bytes.len(),
                        attachment
                            .title
                            .as_ref()
                            // The registry's text: escaped, never a terminal control.
                            .map(|title| format!(", {}", title.escape_debug()))
                            .unwrap_or_default(),
                        if policy.is_some() {
                            ", signed by --key"
                        } else {
                            ""
                        }
                    );
                    chosen = Some(attachment);
                }
                let Some(chosen) = chosen else {
                    let signed = if key.is_empty() {
                        ""
                    } else {
                        " and signed by --key"
                    };
                    eprintln!(
                        "{oci} ({subject}): nothing of type {artifact_type}{signed} is attached"
                    );
                    return Ok(ExitCode::FAILURE);
                };
                match output {
                    Some(path) => write_atomically(&path, &chosen.bytes)
                        .with_context(|| format!("-o {}", path.display()))?,
                    None => {
                        let mut stdout = std::io::stdout().lock();
                        stdout.write_all(&chosen.bytes)?;
                        stdout.flush()?;
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

//! The default command: run as a cloud-controller-manager, with upstream's flags and
//! defaults (`ccm-behaviour.md` §3.1) plus ours for the provider, its egress and its sandbox.
//!
//! Boolean flags take Go's forms: `--leader-elect` alone means true, `--leader-elect=false`
//! turns it off.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::serving_auth::ServingAuthFlags;
use super::units::{parse_duration, parse_duration_or_zero};
use super::{DistributionFlags, EgressFlags, SandboxFlags};
use crate::cluster::ClusterSettings;
use crate::controllers::{ControllerSelection, ControllerSettings};
use crate::leader::{LeaseSettings, default_identity};
use crate::manager::{self, ManagerConfig, ProviderMode, ProviderSettings};
use crate::rollout::ceiling::GrantCeiling;
use crate::serving::{ServingConfig, TlsSource};
use wasm_ccm_host::cidr::{CidrList, DualStackCidrs};
use wasm_ccm_host::egress::HostPattern;
use wasm_ccm_host::source::{ProviderRef, PublicKey, SignaturePolicy, TrustedKeys};

/// Run mode's flags, as upstream's where upstream has one.
#[derive(Debug, Args)]
pub struct RunFlags {
    /// The provider component: oci://REGISTRY/REPO:TAG, oci://REGISTRY/REPO@sha256:DIGEST
    /// (or both: the digest wins and is enforced), or file://PATH to a .wasm.
    #[arg(long, value_name = "REFERENCE", help_heading = "Provider")]
    pub provider: Option<String>,

    /// Follow the CloudProvider resource NAME instead of --provider: it names the
    /// component, its cloud config, grants, credentials and limits, and changing it rolls a
    /// new version out without a restart. The egress and sandbox flags become the defaults
    /// its spec overrides. Repeated (or comma-separated), several providers serve side by
    /// side, each with its own versions, rollout and limits: a node is the provider's whose
    /// name is its providerID's scheme (before it has one, whose spec.nodeSelector matches
    /// it), a LoadBalancer Service the provider's whose spec.loadBalancerClass it names
    /// (without a class, the one with spec.default).
    #[arg(
        long,
        value_name = "NAME[,NAME]",
        value_delimiter = ',',
        help_heading = "Provider",
        conflicts_with_all = ["provider", "cloud_config"]
    )]
    pub provider_resource: Vec<String>,

    /// With --provider-resource: host patterns (as --allow; repeated or comma-separated)
    /// that every grant of the CloudProvider must fall within: spec.egress.allowedHosts,
    /// spec.credentials[].host and a web identity's stsEndpoint. A spec outside them is
    /// refused (InvalidSpec) and the active version keeps running. Without it, whoever may
    /// edit the CloudProvider decides every grant (a warning at start).
    #[arg(
        long,
        value_name = "HOSTPATTERN[,HOSTPATTERN]",
        value_delimiter = ',',
        help_heading = "Provider"
    )]
    pub egress_grant_ceiling: Vec<HostPattern>,

    /// With --provider-resource: how often the leader asks the registry which digest the
    /// CloudProvider's tag names (one manifest request), when the spec names a tag and no
    /// digest. A tag that moved is reported (condition TagCurrent, event TagMoved) and
    /// rolled out only with spec.rollout.followTag; until then every replica runs the digest
    /// recorded when the spec rolled out. 0: never.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration_or_zero, help_heading = "Provider")]
    pub tag_check_interval: Duration,

    /// A public key (PEM, ECDSA P-256, as cosign.pub) that signs the providers this manager
    /// runs. Repeatable: every version (--provider, and each CloudProvider version) must
    /// carry a valid cosign signature by one of them, or is refused (SignatureMissing,
    /// SignatureInvalid). A CloudProvider's spec.signature may require more, never less.
    #[arg(long, value_name = "FILE", help_heading = "Provider")]
    pub provider_signature_key: Vec<PathBuf>,

    /// The provider's name; the component must report this name from init.
    #[arg(long, value_name = "NAME", help_heading = "Provider")]
    pub cloud_provider: Option<String>,

    /// Provider configuration file, passed to the provider's init.
    #[arg(long, value_name = "FILE", help_heading = "Provider")]
    pub cloud_config: Option<PathBuf>,

    /// Run even if the provider reports no cluster ID (deprecated upstream, still common).
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Provider")]
    pub allow_untagged_cloud: bool,

    /// Path to a kubeconfig; without it $KUBECONFIG, else ~/.kube/config, else the
    /// in-cluster service account. Its current context's namespace is the manager's own.
    #[arg(long, value_name = "PATH", help_heading = "Cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// Requests per second to the API server, of each client (one per controller, and one each
    /// for the informers, leader election and events).
    #[arg(long, value_name = "QPS", default_value_t = 20.0, value_parser = positive_f64, help_heading = "Cluster")]
    pub kube_api_qps: f64,

    /// Burst of requests to the API server above the QPS, of each client.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Cluster")]
    pub kube_api_burst: u32,

    /// Each controller calls the API server as its own ServiceAccount in kube-system
    /// (node-controller, service-controller, route-controller; created if missing), with
    /// tokens from the TokenRequest API; the informers, leader election and events keep the
    /// --kubeconfig (or in-cluster) credentials, which need get and create on
    /// serviceaccounts and create on serviceaccounts/token in kube-system.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Cluster")]
    pub use_service_account_credentials: bool,

    /// Controllers to run: * (all), NAME to enable, -NAME to disable; names or aliases:
    /// cloud-node-controller (cloud-node), cloud-node-lifecycle-controller
    /// (cloud-node-lifecycle), service-lb-controller (service), node-route-controller (route).
    /// Repeated, the lists are joined (as upstream).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "*",
        help_heading = "Controllers"
    )]
    pub controllers: Vec<ControllerSelection>,

    /// Cluster name passed to the provider's load-balancer and route calls.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "kubernetes",
        help_heading = "Controllers"
    )]
    pub cluster_name: String,

    /// Pod CIDR range of the cluster (one, or an IPv4,IPv6 pair); required for routes.
    #[arg(long, value_name = "CIDR[,CIDR]", help_heading = "Controllers")]
    pub cluster_cidr: Option<DualStackCidrs>,

    /// The Services' cluster IP range (one, or an IPv4,IPv6 pair), as kube-apiserver's flag:
    /// a load-balancer ingress IP a provider answers inside it is refused. Without it only
    /// the cluster IPs of existing Services are.
    #[arg(long, value_name = "CIDR[,CIDR]", help_heading = "Controllers")]
    pub service_cluster_ip_range: Option<DualStackCidrs>,

    /// Comma-separated CIDRs the cloud's load-balancer addresses come from: an ingress IP a
    /// provider answers outside them is refused. Without it any address is accepted but
    /// special-use ones (loopback, link-local, ...), the Service and pod ranges, node
    /// addresses and Services' cluster IPs.
    #[arg(long, value_name = "CIDR,...", help_heading = "Controllers")]
    pub load_balancer_ip_ranges: Option<CidrList>,

    /// Write a load-balancer ingress IP another Service already holds (as its ingress, an
    /// external IP or its loadBalancerIP), for clouds that share one address between
    /// Services. A node's address or a cluster IP is refused still.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Controllers")]
    pub load_balancer_ip_sharing: bool,

    /// Comma-separated DNS suffixes under which a provider may name a node's Hostname,
    /// InternalDNS and ExternalDNS addresses besides the node's own name (`ec2.internal`
    /// admits `ip-10-0-0-5.ec2.internal`). kube-apiserver dials a node by these names for
    /// exec, logs and port-forward, so any other name is refused.
    #[arg(long, value_name = "SUFFIX,...", value_delimiter = ',', value_parser = parse_dns_suffix, help_heading = "Controllers")]
    pub node_address_dns_suffixes: Vec<String>,

    /// Accepted for compatibility; no controller here allocates node CIDRs.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Controllers")]
    pub allocate_node_cidrs: bool,

    /// Accepted for compatibility; unused.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "RangeAllocator",
        help_heading = "Controllers"
    )]
    pub cidr_allocator_type: String,

    /// Create cloud routes for node pod CIDRs.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Controllers")]
    pub configure_cloud_routes: bool,

    /// How often routes are reconciled with the cloud.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, help_heading = "Controllers")]
    pub route_reconciliation_period: Duration,

    /// How often node instances are checked (shutdown, deleted).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Controllers")]
    pub node_monitor_period: Duration,

    /// How often node addresses are synced from the cloud.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration, help_heading = "Controllers")]
    pub node_status_update_frequency: Duration,

    /// Nodes initialised at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000), help_heading = "Controllers")]
    pub concurrent_node_syncs: u32,

    /// Nodes whose addresses are synced at once (0: as --concurrent-node-syncs).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000), help_heading = "Controllers")]
    pub concurrent_node_status_updates: u32,

    /// Services synced at once (also the parallelism of node-triggered updates).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000), help_heading = "Controllers")]
    pub concurrent_service_syncs: u32,

    /// How often each load balancer is checked to still exist in the cloud, and ensured
    /// again if not (0 disables).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration_or_zero, help_heading = "Controllers")]
    pub load_balancer_drift_period: Duration,

    /// Run controllers only while holding the leader Lease.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Leader election")]
    pub leader_elect: bool,

    /// How long a standby waits after the last renewal before taking over.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,

    /// Pause between attempts to acquire or renew.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,

    /// The lock type; only "leases" is supported, as upstream.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "leases",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_lock: String,

    /// Name of the Lease.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "cloud-controller-manager",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_name: String,

    /// Namespace of the Lease.
    #[arg(
        long,
        value_name = "NAMESPACE",
        default_value = "kube-system",
        help_heading = "Leader election"
    )]
    pub leader_elect_resource_namespace: String,

    /// HTTPS port for /healthz, /readyz, /livez and /metrics (0 disables).
    #[arg(
        long,
        value_name = "PORT",
        default_value_t = 10258,
        help_heading = "Serving"
    )]
    pub secure_port: u16,

    /// Address to serve on.
    #[arg(
        long,
        value_name = "IP",
        default_value = "0.0.0.0",
        help_heading = "Serving"
    )]
    pub bind_address: IpAddr,

    /// Serving certificate (PEM); without it a self-signed one is made in memory.
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_private_key_file",
        help_heading = "Serving"
    )]
    pub tls_cert_file: Option<PathBuf>,

    /// Key of --tls-cert-file (PEM).
    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_cert_file",
        help_heading = "Serving"
    )]
    pub tls_private_key_file: Option<PathBuf>,

    /// Who may read the secure port.
    #[command(flatten)]
    pub serving_auth: ServingAuthFlags,

    /// What the provider may reach.
    #[command(flatten)]
    pub egress: EgressFlags,

    /// Limits of each provider call.
    #[command(flatten)]
    pub sandbox: SandboxFlags,

    /// Registries, their credentials and the artifact cache.
    #[command(flatten)]
    pub distribution: DistributionFlags,
}

fn positive_f64(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value > 0.0 && value.is_finite() => Ok(value),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

fn parse_dns_suffix(text: &str) -> Result<String, String> {
    wasm_ccm_host::answers::dns_suffix(text)
}

impl RunFlags {
    /// Check what clap cannot and build the manager's configuration.
    pub fn config(&self) -> anyhow::Result<ManagerConfig> {
        let provider = self.provider_mode()?;
        if self.leader_elect_resource_lock != "leases" {
            bail!(
                "--leader-elect-resource-lock {:?}: only \"leases\" is supported",
                self.leader_elect_resource_lock
            );
        }
        let leader_election = self.leader_elect.then(|| LeaseSettings {
            namespace: self.leader_elect_resource_namespace.clone(),
            name: self.leader_elect_resource_name.clone(),
            identity: default_identity(),
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        });
        if let Some(lease) = &leader_election {
            lease.validate()?;
        }
        let identity = leader_election
            .as_ref()
            .map_or_else(default_identity, |lease| lease.identity.clone());
        let tls = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => TlsSource::SelfSigned,
        };
        let auth = self.serving_auth.config();
        auth.validate()?;
        let mut distribution = self.distribution.settings()?;
        distribution.signatures = self.signature_policy()?;
        let compiled_dir = wasm_ccm_host::source::compiled_dir(&distribution);
        Ok(ManagerConfig {
            provider,
            distribution,
            egress: self.egress.config(),
            sandbox: self.sandbox.config(compiled_dir),
            cluster: ClusterSettings {
                kubeconfig: self.kubeconfig.clone(),
                qps: self.kube_api_qps,
                burst: self.kube_api_burst,
                use_service_account_credentials: self.use_service_account_credentials,
            },
            controllers: self.controllers.iter().cloned().collect(),
            settings: ControllerSettings {
                cluster_name: self.cluster_name.clone(),
                cluster_cidrs: self.cluster_cidr.clone(),
                service_cidrs: self.service_cluster_ip_range.clone(),
                load_balancer_ip_ranges: self.load_balancer_ip_ranges.clone(),
                load_balancer_ip_sharing: self.load_balancer_ip_sharing,
                node_address_dns_suffixes: self.node_address_dns_suffixes.clone(),
                configure_cloud_routes: self.configure_cloud_routes,
                route_reconciliation_period: self.route_reconciliation_period,
                node_monitor_period: self.node_monitor_period,
                node_status_update_frequency: self.node_status_update_frequency,
                concurrent_node_syncs: self.concurrent_node_syncs as usize,
                concurrent_node_status_updates: self.concurrent_node_status_updates as usize,
                concurrent_service_syncs: self.concurrent_service_syncs as usize,
                load_balancer_drift_period: self.load_balancer_drift_period,
                identity,
                event_queue_length: crate::controllers::QUEUE_LENGTH,
                event_retry_interval: crate::controllers::RETRY_INTERVAL,
            },
            leader_election,
            serving: ServingConfig {
                bind_address: self.bind_address,
                port: self.secure_port,
                tls,
                auth,
            },
        })
    }

    /// `--provider-signature-key`: read at start, so a bad key stops the manager before it
    /// runs anything.
    fn signature_policy(&self) -> anyhow::Result<SignaturePolicy> {
        let mut keys = Vec::with_capacity(self.provider_signature_key.len());
        for path in &self.provider_signature_key {
            let pem = std::fs::read(path).map_err(|error| {
                anyhow::anyhow!("--provider-signature-key {}: {error}", path.display())
            })?;
            let key = PublicKey::from_pem(path.display().to_string(), &pem)
                .map_err(|error| anyhow::anyhow!("--provider-signature-key {error}"))?;
            keys.push(key);
        }
        Ok(SignaturePolicy::default().and(TrustedKeys {
            source: "--provider-signature-key".into(),
            keys,
        }))
    }

    /// `--provider` and its companions, or `--provider-resource`.
    fn provider_mode(&self) -> anyhow::Result<ProviderMode> {
        if !self.provider_resource.is_empty() {
            let names = &self.provider_resource;
            if names.iter().any(String::is_empty) {
                bail!("--provider-resource needs the name of a CloudProvider");
            }
            if let Some(twice) = names
                .iter()
                .enumerate()
                .find_map(|(i, name)| names[..i].contains(name).then_some(name))
            {
                bail!("--provider-resource names the CloudProvider {twice} twice");
            }
            let longest = crate::controllers::fleet::MAX_MEMBER_NAME;
            if names.len() > 1
                && let Some(long) = names.iter().find(|name| name.len() > longest)
            {
                bail!(
                    "--provider-resource {long}: beside other providers a CloudProvider's name is at most {longest} characters (it prefixes its load balancers' cleanup finalizer, NAME.wasm-ccm.io/load-balancer-cleanup)"
                );
            }
            let name = names.join(", ");
            for (given, flag) in [
                (!self.egress.allow.is_empty(), "--allow"),
                (!self.egress.credentials.is_empty(), "--credential"),
            ] {
                if given {
                    bail!(
                        "{flag} cannot be used with --provider-resource: the CloudProvider {name} grants hosts (spec.egress.allowedHosts) and credentials (spec.credentials)"
                    );
                }
            }
            if let Some(flag) = &self.cloud_provider
                && !flag.is_empty()
            {
                bail!(
                    "--cloud-provider cannot be used with --provider-resource: the CloudProvider {name} names the provider (spec.name)"
                );
            }
            return Ok(ProviderMode::Resource {
                names: names.clone(),
                allow_untagged_cloud: self.allow_untagged_cloud,
                grant_ceiling: GrantCeiling::new(self.egress_grant_ceiling.clone()),
                tag_check_interval: self.tag_check_interval,
            });
        }
        if !self.egress_grant_ceiling.is_empty() {
            bail!(
                "--egress-grant-ceiling bounds what a CloudProvider grants, with --provider-resource; with --provider, --allow sets the grants"
            );
        }
        let Some(provider) = &self.provider else {
            bail!(
                "--provider or --provider-resource is required: the provider component, e.g. --provider file:///opt/providers/simcloud.wasm, or the CloudProvider resource that names it"
            );
        };
        let reference: ProviderRef = provider
            .parse()
            .map_err(|error| anyhow::anyhow!("--provider {error}"))?;
        let name = match self.cloud_provider.as_deref() {
            None | Some("") => bail!(
                "--cloud-provider is required: the name the provider reports (e.g. --cloud-provider=simcloud)"
            ),
            Some(name) => name.to_string(),
        };
        Ok(ProviderMode::Flags(ProviderSettings {
            reference,
            name,
            cloud_config: self.cloud_config.clone(),
            allow_untagged_cloud: self.allow_untagged_cloud,
        }))
    }

    /// Run until SIGINT or SIGTERM.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        let config = self.config()?;
        self.egress.check_grants()?;
        // Before anything connects: an unreadable credential would otherwise show only as
        // failed cloud calls, long after start.
        self.egress.check_credentials()?;
        let shutdown = CancellationToken::new();
        tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                wait_for_signal().await;
                tracing::info!("shutting down");
                shutdown.cancel();
            }
        });
        manager::run(config, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Until the process is asked to stop: Ctrl-C (SIGINT) or SIGTERM.
pub(super) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

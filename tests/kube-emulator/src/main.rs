//! The `kube-emulator` binary: parses flags, starts the emulator, writes
//! the kubeconfig (server URL, the emulator's CA and the token), prints
//! `kube-emulator listening on https://ADDR` on stdout once ready, and runs
//! until Ctrl-C or SIGTERM. Logs go to stderr (`RUST_LOG` adjusts the
//! level).

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kube_emulator::{Authorization, Emulator, EmulatorOptions};
use tracing_subscriber::EnvFilter;

/// A Kubernetes API server emulator for testing wasm-ccm.
#[derive(Parser, Debug)]
#[command(name = "kube-emulator", version)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:6443 (port 0 picks a free one).
    #[arg(long, env = "KUBE_EMULATOR_LISTEN")]
    listen: SocketAddr,
    /// Where to write the kubeconfig that reaches the emulator (kubectl
    /// --kubeconfig PATH works with it).
    #[arg(long, env = "KUBE_EMULATOR_KUBECONFIG_OUT")]
    kubeconfig_out: PathBuf,
    /// Bearer token clients must present.
    #[arg(
        long,
        env = "KUBE_EMULATOR_TOKEN",
        default_value = "kube-emulator",
        hide_env_values = true
    )]
    token: String,
    /// Writes kept for watches and exact lists; older resourceVersions get 410 Gone.
    #[arg(long, env = "KUBE_EMULATOR_HISTORY", default_value_t = 1000)]
    history: usize,
    /// Interval between watch bookmarks, in milliseconds.
    #[arg(
        long,
        env = "KUBE_EMULATOR_BOOKMARK_INTERVAL_MS",
        default_value_t = 1000
    )]
    bookmark_interval_ms: u64,
    /// Longest lifetime of a service-account token, in seconds (as the API server's
    /// --service-account-max-token-expiration; 0: no limit).
    #[arg(
        long,
        env = "KUBE_EMULATOR_MAX_TOKEN_EXPIRATION_SECONDS",
        default_value_t = 0
    )]
    max_token_expiration_seconds: u64,
    /// Who may do what, as the API server's --authorization-mode: AlwaysAllow, or RBAC
    /// (the kubeconfig's user may do anything, service accounts what their Roles and
    /// ClusterRoles allow).
    #[arg(
        long,
        env = "KUBE_EMULATOR_AUTHORIZATION_MODE",
        default_value = "AlwaysAllow"
    )]
    authorization_mode: Authorization,
    /// The node ports Services are given, as the API server's --service-node-port-range.
    #[arg(
        long,
        env = "KUBE_EMULATOR_SERVICE_NODE_PORT_RANGE",
        default_value = "30000-32767",
        value_parser = port_range
    )]
    service_node_port_range: std::ops::RangeInclusive<u16>,
}

/// `FIRST-LAST`, as kube-apiserver's `--service-node-port-range`.
fn port_range(text: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let range = text.split_once('-').and_then(|(first, last)| {
        let (first, last) = (first.parse::<u16>().ok()?, last.parse::<u16>().ok()?);
        (first > 0 && first <= last).then_some(first..=last)
    });
    range.ok_or_else(|| format!("{text:?} is not a port range FIRST-LAST (e.g. 30000-32767)"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = Args::parse();
    let options = EmulatorOptions {
        token: args.token,
        history: args.history,
        bookmark_interval: Duration::from_millis(args.bookmark_interval_ms),
        max_token_expiration: (args.max_token_expiration_seconds > 0)
            .then(|| Duration::from_secs(args.max_token_expiration_seconds)),
        authorization: args.authorization_mode,
        service_node_port_range: args.service_node_port_range,
    };
    // Listen for the signals before announcing the URL: a client that
    // stops the emulator as soon as it has answered must not find the
    // default action (death by SIGTERM) still in place.
    let shutdown = ShutdownSignal::install()?;
    let emulator = Emulator::start(args.listen, options).await?;
    emulator
        .write_kubeconfig(&args.kubeconfig_out)
        .with_context(|| {
            format!(
                "kube-emulator: writing the kubeconfig to {}",
                args.kubeconfig_out.display()
            )
        })?;
    println!("kube-emulator listening on {}", emulator.url());
    shutdown.recv().await?;
    tracing::info!("shutting down");
    emulator.shutdown().await;
    Ok(())
}

/// Ctrl-C, or SIGTERM where there is such a thing, listened for from
/// `install` on.
struct ShutdownSignal {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    fn install() -> anyhow::Result<ShutdownSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(ShutdownSignal {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(ShutdownSignal {})
    }

    /// Resolves on the first of the signals.
    async fn recv(mut self) -> anyhow::Result<()> {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await?;
        Ok(())
    }
}

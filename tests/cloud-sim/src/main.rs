//! The `cloud-sim` binary: parses flags, starts the simulator with the instances
//! `--instance` names, prints `cloud-sim listening on http://ADDR` on stdout once ready,
//! and runs until Ctrl-C or SIGTERM. Logs go to stderr (`RUST_LOG` adjusts the level).

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use cloud_sim::{CloudSim, Faults, NewInstance, SimOptions};
use tracing_subscriber::EnvFilter;

/// A small REST cloud for testing wasm-ccm providers.
#[derive(Parser, Debug)]
#[command(name = "cloud-sim", version)]
struct Args {
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free one).
    #[arg(long, env = "CLOUD_SIM_LISTEN")]
    listen: SocketAddr,
    /// Bearer token that /v1 requests must present.
    #[arg(long, env = "CLOUD_SIM_TOKEN", hide_env_values = true)]
    token: String,
    /// How long new load balancers stay "provisioning", in milliseconds.
    #[arg(long, env = "CLOUD_SIM_LB_PROVISION_MS", default_value_t = 1000)]
    lb_provision_ms: u64,
    /// Latency added to every authorised /v1 request, in milliseconds.
    #[arg(long, env = "CLOUD_SIM_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
    /// Region reported for every instance.
    #[arg(long, env = "CLOUD_SIM_REGION", default_value = "sim-central-1")]
    region: String,
    /// Where auto-assigned private addresses start (the next address up is the first
    /// given); a second simulator serving the same cluster needs another range.
    #[arg(long, value_name = "IPV4", default_value = "10.0.0.0")]
    private_ip_base: std::net::Ipv4Addr,
    /// Where load-balancer addresses start, as --private-ip-base.
    #[arg(long, value_name = "IPV4", default_value = "198.51.100.0")]
    lb_ip_base: std::net::Ipv4Addr,
    /// A running instance to start with, named NAME (as its node will be), of type
    /// sim.medium in zone REGION + "a", its private IP assigned; repeatable. More, and
    /// other shapes, through `POST /v1/instances`.
    #[arg(long = "instance", value_name = "NAME")]
    instances: Vec<String>,
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
    let options = SimOptions {
        token: args.token,
        lb_provision: Duration::from_millis(args.lb_provision_ms),
        region: args.region,
        private_ip_base: args.private_ip_base,
        lb_ip_base: args.lb_ip_base,
    };
    let zone = format!("{}a", options.region);
    let sim = CloudSim::start(args.listen, options).await?;
    sim.state().set_faults(Faults {
        latency_ms: args.latency_ms,
        ..Faults::default()
    });
    for name in args.instances {
        let new = NewInstance {
            name: name.clone(),
            instance_type: "sim.medium".into(),
            zone: zone.clone(),
            ..NewInstance::default()
        };
        let instance = sim
            .state()
            .try_add_instance(new)
            .map_err(|error| anyhow::anyhow!("--instance {name}: {}", error.message))?;
        tracing::info!(
            "instance {} {} in {}, {}",
            instance.name,
            instance.id,
            instance.zone,
            instance.private_ip
        );
    }
    println!("cloud-sim listening on {}", sim.url());
    shutdown_signal().await?;
    tracing::info!("shutting down");
    sim.shutdown().await;
    Ok(())
}

/// Resolves on Ctrl-C, or on SIGTERM where there is such a thing.
async fn shutdown_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result?,
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    Ok(())
}

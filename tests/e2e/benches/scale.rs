//! Scale benchmark: prints the tables of `e2e::scale` (see there for what is measured),
//! asserts nothing.
//!
//! Run: `make bench-scale`, or `cargo bench -p e2e --bench scale`; `SCALE_NODES`,
//! `SCALE_SERVICES` and `SCALE_LATENCY_MS` override 5000, 1000 and 10. With
//! `SCALE_KUBECONFIG`, `SCALE_CLOUD_URL` and `SCALE_CLOUD_TOKEN` it runs against that cluster
//! and that cloud simulator instead of its own.

use std::path::PathBuf;

use e2e::scale::{Settings, Target};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn target() -> Target {
    let kubeconfig = std::env::var_os("SCALE_KUBECONFIG").map(PathBuf::from);
    match (kubeconfig, std::env::var("SCALE_CLOUD_URL").ok()) {
        (None, None) => Target::InProcess,
        (Some(kubeconfig), Some(cloud_url)) => Target::Remote {
            kubeconfig,
            cloud_url,
            cloud_token: std::env::var("SCALE_CLOUD_TOKEN")
                .expect("SCALE_CLOUD_TOKEN: the token the cloud simulator was started with"),
        },
        _ => panic!("set both SCALE_KUBECONFIG and SCALE_CLOUD_URL, or neither"),
    }
}

fn main() {
    let settings = Settings {
        nodes: setting("SCALE_NODES", 5000),
        services: setting("SCALE_SERVICES", 1000),
        latency_ms: setting("SCALE_LATENCY_MS", 10) as u64,
        target: target(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = runtime.block_on(e2e::scale::run(settings));
    println!("\n{report}");
}

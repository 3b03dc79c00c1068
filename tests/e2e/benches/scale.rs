//! Scale benchmark: prints the tables of `e2e::scale` (see there for what is measured),
//! asserts nothing.
//!
//! Run: `make bench-scale`, or `cargo bench -p e2e --bench scale`; `SCALE_NODES`,
//! `SCALE_SERVICES` and `SCALE_LATENCY_MS` override 5000, 1000 and 10. With
//! `SCALE_KUBECONFIG`, `SCALE_CLOUD_URL` and `SCALE_CLOUD_TOKEN` it runs against that cluster
//! and that cloud simulator instead of its own ([`e2e::scale::Settings::from_vars`]).

use e2e::scale::Settings;

fn main() {
    let settings = match Settings::from_vars(|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(problem) => {
            eprintln!("scale: {problem}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = runtime.block_on(e2e::scale::run(settings));
    println!("\n{report}");
}

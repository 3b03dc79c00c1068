//! wasm-ccm: a Kubernetes cloud-controller-manager whose cloud providers are WebAssembly
//! components.
//!
//! Modules in the order data flows through them:

/// Run mode: load the provider, connect to the cluster, serve health, elect a leader, run
/// the controllers.
pub mod manager;
/// The Kubernetes API client: kubeconfig, client-side QPS/burst, request metrics.
pub mod cluster;
/// Leader election on a `coordination.k8s.io/v1` Lease.
pub mod leader;
/// The upstream controllers and which of them run.
pub mod controllers;
/// The provider contract as plain Rust types.
pub mod contract;
/// Typed async facade over one provider version; what controllers call.
pub mod provider;
/// The wasmtime sandbox: engine, limits, compile cache, one fresh `Store` per call.
pub mod sandbox;
/// The egress gate: allow-list, address checks, budgets, credential injection, audit.
pub mod egress;
/// Prometheus metrics of providers, sandbox, egress and controllers.
pub mod metrics;
/// `process_*` metrics and `wasm_ccm_build_info`.
pub mod process_metrics;
/// HTTPS endpoints: `/healthz`, `/readyz`, `/livez` and `/metrics`.
pub mod serving;
/// The command line: flags, subcommands.
pub mod cli;

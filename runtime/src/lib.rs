//! wasm-ccm: a Kubernetes cloud-controller-manager whose cloud providers are WebAssembly
//! components.
//!
//! Modules in the order data flows through them:

/// The provider contract as plain Rust types.
pub mod contract;
/// The upstream controllers and which of them run.
pub mod controllers;
/// Typed async facade over one provider version; what controllers call.
pub mod provider;
/// The wasmtime sandbox: engine, limits, compile cache, one fresh `Store` per call.
pub mod sandbox;
/// The egress gate: allow-list, address checks, budgets, credential injection, audit.
pub mod egress;
/// Prometheus metrics of providers, sandbox and egress.
pub mod metrics;
/// The command line: flags, subcommands.
pub mod cli;

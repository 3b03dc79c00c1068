//! wasm-ccm: a Kubernetes cloud-controller-manager whose cloud providers are WebAssembly
//! components.
//!
//! This crate is the manager: it talks to Kubernetes and calls providers through
//! [`wasm_ccm_host::provider::Provider`], never through wasmtime (which it does not depend on).
//!
//! Modules in the order data flows through them:
//!
//! - [`resource`]: The `CloudProvider` custom resource: the spec operators edit to choose
//!   and roll out a provider version, the status the manager reports, and the CRD generated
//!   from them.
//! - [`rollout`]: Run mode from a `CloudProvider` resource: follow it, roll versions out,
//!   roll them back.
//! - [`manager`]: Run mode: load the provider, connect to the cluster, serve health, elect
//!   a leader, run the controllers.
//! - [`cluster`]: The Kubernetes API clients, one per controller: kubeconfig, QPS/burst and
//!   user agent of each, request metrics, and each controller's ServiceAccount tokens with
//!   `--use-service-account-credentials`.
//! - [`leader`]: Leader election on a `coordination.k8s.io/v1` Lease.
//! - [`controllers`]: The upstream controllers and which of them run.
//! - [`process_metrics`]: `process_*` metrics and `wasm_ccm_build_info`.
//! - [`serving`]: HTTPS endpoints: `/healthz`, `/readyz`, `/livez` and `/metrics`.
//! - [`cli`]: The command line: flags, subcommands.

pub mod resource;
pub mod rollout;
pub mod manager;
pub mod cluster;
pub mod leader;
pub mod controllers;
pub mod process_metrics;
pub mod serving;
pub mod cli;
/// The docs' reference pages the code defines (flags, CloudProvider fields), checked.
#[cfg(test)]
mod reference_pages;
/// The chart's `values.schema.json` for `provider`, from the CloudProvider CRD, checked.
#[cfg(test)]
mod chart_values_schema;

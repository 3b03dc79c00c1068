//! wasm-ccm-host: everything between a controller's typed call and a provider component.
//!
//! This crate alone depends on wasmtime and wasi-http; the manager crate (`wasm-ccm`) sees
//! plain Rust types and async methods only, so a wasmtime upgrade stays inside `sandbox`
//! and `egress`. Modules in the order a call flows through them:
//!
//! - [`source`]: Distribution: provider references (`file://`, `oci://`) turned into
//!   verified bytes, from files or OCI registries (credentials, digests, cosign signatures,
//!   the artifact cache).
//! - [`contract`]: The provider contract (`wit/provider.wit`) as plain Rust types.
//! - [`provider`]: Typed async facade over one provider version, the slot that swaps
//!   versions under the controllers, and shadow calls of a candidate version: what
//!   controllers call.
//! - [`bounds`]: The bounds on what a provider chooses: the text of its errors, the delay
//!   it asks for, the entries of one answer.
//! - [`answers`]: Checks of what a provider answers (addresses, provider IDs, labels,
//!   hostnames, names, counts), run by the facade before any controller sees an answer.
//! - [`cidr`]: CIDRs and lists of them, as the manager's flags name them.
//! - [`sandbox`]: The wasmtime sandbox: engine, limits, compile cache, one fresh `Store`
//!   per call.
//! - [`egress`]: The egress gate: allow-list, address checks, budgets, credential
//!   injection, audit.
//! - [`metrics`]: Prometheus metrics of provider calls, compilation and egress.
//! - [`rate`]: Token buckets keyed by name, for the egress gate and the manager's API
//!   client.
//! - [`seal`]: Cache entries sealed with a key only this user can read: what makes
//!   precompiled code and signature verdicts safe to read back.
//! - [`text`]: Text cut to a byte budget at a character boundary, and a provider's text
//!   escaped for logs.

pub mod source;
pub mod contract;
pub mod provider;
pub mod bounds;
pub mod answers;
pub mod cidr;
pub mod sandbox;
pub mod egress;
pub mod metrics;
pub mod rate;
pub mod seal;
pub mod text;

//! The `wasm-ccm` binary as an operator runs it: run mode's flags and serving, loading a
//! provider, the demo, `/metrics` against its reference page, and the scale benchmark's
//! remote mode.

mod demo;
mod loading;
mod metrics;
mod run_mode;
mod scale;

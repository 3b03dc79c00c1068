//! The `wasm-ccm` binary as an operator runs it: run mode's flags and serving, loading a
//! provider, the demo, and the scale benchmark's remote mode. One test binary, so the manager
//! is linked once for them.

mod demo;
mod loading;
mod run_mode;
mod scale;

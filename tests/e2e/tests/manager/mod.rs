//! The `wasm-ccm` binary as an operator runs it: run mode's flags and serving, loading a
//! provider, the demo, and the scale benchmark's remote mode.

mod demo;
mod loading;
mod run_mode;
mod scale;

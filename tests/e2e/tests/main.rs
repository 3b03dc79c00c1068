//! Every end-to-end test, one module per file or directory here, in one test binary: the
//! manager, the host, wasmtime and kube are linked once for all of them instead of once per
//! file. cargo-nextest (`make test`) runs each test in a process of its own, so the tests that
//! measure their process's resident memory (`containment*`) measure only themselves.

mod answers_fuzz;
mod authoring;
mod aws;
mod aws_sigv4;
mod chart;
mod cli;
mod cloud_node;
mod containment;
mod containment_http;
mod containment_logs;
mod containment_names;
mod controllers;
mod cpu_yield;
mod deploy;
mod docs_commands;
mod hot_swap;
mod manager;
mod registry;
mod service_accounts;
mod several_providers;
mod simcloud;

//! End-to-end tests of the emulator over real HTTPS, through a kube-rs
//! client built from the emulator's kubeconfig, as the manager uses it, and
//! through the real kubectl and Helm with the kubeconfig it writes.

mod harness;

mod binary;
mod crud;
mod custom_resources;
mod discovery;
mod events;
mod faults;
mod helm;
mod kubectl;
mod leases;
mod nodes;
mod openapi;
mod patches;
mod rbac;
mod requests;
mod responses;
mod selectors;
mod service_accounts;
mod services;
mod tables;
mod validation;
mod watches;
mod workloads;

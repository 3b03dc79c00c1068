//! End-to-end tests of the emulator over real HTTP, through a kube-rs
//! client built from the emulator's kubeconfig, as the manager uses it.

mod harness;

mod binary;
mod crud;
mod custom_resources;
mod discovery;
mod events;
mod faults;
mod leases;
mod patches;
mod selectors;
mod validation;
mod watches;

//! The four controllers and what they write, end to end against the API emulator and the
//! cloud simulator: node lifecycle and routes, the nodes a provider reads, load balancers,
//! the informer's cache, leader election, the validation of a provider's answers and the
//! authenticated secure port; and simcloud ported to other languages (TypeScript, Python),
//! held to the Rust simcloud through the host and a manager.

pub(crate) mod answers;
mod informer;
mod languages;
mod leader;
mod node_lifecycle;
mod node_sets;
mod service_lb;
mod serving_auth;

//! The manager's HTTPS endpoints: `/healthz`, `/readyz` and `/livez` (each aggregate, plus
//! `/<probe>/<check>`) and `/metrics`, on `--secure-port` (upstream 10258).
//!
//! Three parts, one module each: `health` holds the named checks and answers as the
//! Kubernetes `healthz` package does (`?verbose`, `?exclude=`, reasons withheld); `tls`
//! provides the serving certificate, self-signed in memory or read from the `--tls-*`
//! files; `server` binds the port, accepts connections and routes requests. Controllers
//! add their checks when they start and remove them when they stop:
//!
//! ```
//! use wasm_ccm::serving::{HealthChecks, Probe};
//!
//! let checks = HealthChecks::default();
//! checks.add("leaderElection", &[Probe::Healthz], || Ok(()));
//! checks.remove("leaderElection");
//! ```

mod health;
mod server;
mod tls;

pub use health::{HealthChecks, Probe};
pub use server::{Serving, ServingConfig, ServingError, serve};
pub use tls::{TlsError, TlsSource};

//! The manager's HTTPS endpoints: `/healthz`, `/readyz` and `/livez` (each aggregate, plus
//! `/<probe>/<check>`) and `/metrics`, on `--secure-port` (upstream 10258).
//!
//! Four parts, one module each: `health` holds the named checks and answers as the
//! Kubernetes `healthz` package does (`?verbose`, `?exclude=`, reasons withheld); `tls`
//! provides the serving certificate, self-signed in memory or read from the `--tls-*`
//! files, and verifies client certificates against `--client-ca-file`; `auth`
//! authenticates and authorises each request through the API server (`TokenReview`,
//! `SubjectAccessReview`) but for `--authorization-always-allow-paths`, as upstream's
//! delegated authentication and authorisation do; `server` binds the port, accepts
//! connections and routes requests. Controllers
//! add their checks when they start and remove them when they stop:
//!
//! ```
//! use wasm_ccm::serving::{HealthChecks, Probe};
//!
//! let checks = HealthChecks::default();
//! checks.add("leaderElection", &[Probe::Healthz], || Ok(()));
//! checks.remove("leaderElection");
//! ```

mod auth;
mod health;
mod server;
mod tls;

pub use auth::{
    AuthConfig, AuthConfigError, DECISION_CACHE_SIZE, DEFAULT_ALWAYS_ALLOW_PATHS, TOKEN_CACHE_SIZE,
};
pub use health::{HealthChecks, Probe};
pub use server::{Serving, ServingConfig, ServingError, serve};
pub use tls::{TlsError, TlsSource};

//! `cloud-sim`: a small REST cloud that wasm-ccm's reference provider
//! (`guests/simcloud`) talks to in tests, benches and the demo.
//!
//! It behaves like a real cloud API — bearer-token auth, JSON everywhere,
//! asynchronous load-balancer provisioning, and fault knobs — and is both a
//! library ([`CloudSim::start`] runs it in-process, [`SimState`] inspects and
//! manipulates it) and the `cloud-sim` binary.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use cloud_sim::{CloudSim, NewInstance, SimOptions};
//! let sim = CloudSim::start("127.0.0.1:0".parse()?, SimOptions::new("secret")).await?;
//! let node = sim.state().add_instance(NewInstance {
//!     name: "node-1".into(),
//!     instance_type: "sim.small".into(),
//!     zone: "sim-central-1a".into(),
//!     ..NewInstance::default()
//! });
//! println!("{} at {}", node.id, sim.url());
//! sim.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # REST API
//!
//! Every `/v1` route requires `Authorization: Bearer <token>`; without it
//! the answer is 401 `unauthorized`. Bodies are JSON (the `Content-Type` is
//! not checked) and request bodies reject unknown fields.
//!
//! | Method | Path | Success | Notes |
//! |---|---|---|---|
//! | GET | `/v1/instances[?name=N]` | 200 [`InstanceList`] | deleted instances excluded |
//! | POST | `/v1/instances` | 201 [`Instance`] | body [`NewInstance`]; 409 if a live instance has the name or private IP |
//! | GET | `/v1/instances/{id}` | 200 [`Instance`] | deleted instances stay readable with status `deleted` |
//! | POST | `/v1/instances/{id}/stop`, `/start` | 200 [`Instance`] | 409 if deleted |
//! | DELETE | `/v1/instances/{id}` | 204 | status becomes `deleted`; idempotent |
//! | GET | `/v1/load-balancers[?name=N][&cluster=C]` | 200 [`LoadBalancerList`] | |
//! | POST | `/v1/load-balancers` | 201 [`LoadBalancer`] | body [`NewLoadBalancer`]; `provisioning`, then `active` with an IP after [`SimOptions::lb_provision`]; 409 on duplicate name |
//! | GET | `/v1/load-balancers/{id}` | 200 [`LoadBalancer`] | |
//! | PUT | `/v1/load-balancers/{id}` | 200 [`LoadBalancer`] | body [`LoadBalancerUpdate`]; keeps status and IP |
//! | PUT | `/v1/load-balancers/{id}/targets` | 200 [`LoadBalancer`] | body [`TargetsUpdate`] |
//! | DELETE | `/v1/load-balancers/{id}` | 204 | |
//! | GET | `/v1/routes[?cluster=C]` | 200 [`RouteList`] | `blackhole` computed on read |
//! | POST | `/v1/routes` | 201 [`Route`] | body [`NewRoute`]; 409 if the cluster already routes the CIDR |
//! | DELETE | `/v1/routes/{id}` | 204 | |
//! | GET | `/_admin/requests[?from=N]` | 200 [`RequestList`] | no token needed; from log position N on (its `next` is where to read on from) |
//! | DELETE | `/_admin/requests` | 204 | |
//! | GET, PUT | `/_admin/faults` | 200 [`Faults`] | PUT body is [`Faults`]; omitted fields take defaults |
//! | GET | `/_admin/state` | 200 [`StateSnapshot`] | deleted instances included |
//! | GET | `/_admin/target-counts` | 200 [`TargetCounts`] | each load balancer's number of targets, not the targets |
//! | GET | `/healthz` | 200 `ok` | |
//!
//! Errors always have the body [`ErrorBody`],
//! `{"error":{"code":"…","message":"…"}}`, with a code from [`ErrorCode`]:
//! 400 `invalid` for malformed JSON, 422 `invalid` for a body of the wrong
//! shape or a bad value (the message starts with the field, e.g.
//! `listeners[0].port: …`), 404 `not_found`, 405 `invalid`, 409 `conflict`,
//! 413 `invalid` for bodies over 1 MiB, 429 `rate_limited` (with
//! `Retry-After`), 500 `internal`.
//!
//! Every `/v1` request, and every request to an unknown path, is recorded as
//! a [`RequestRecord`] (authorization redacted); `/_admin` and `/healthz`
//! are not. [`Faults`] apply to authorised `/v1` requests only.

mod api;
mod error;
mod faults;
mod gateway;
mod model;
mod requests;
mod rng;
mod state;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use error::{ApiError, ErrorBody, ErrorCode, ErrorDetail};
pub use faults::Faults;
pub use model::{
    Instance, InstanceList, InstanceStatus, Listener, LoadBalancer, LoadBalancerList,
    LoadBalancerStatus, LoadBalancerUpdate, NewInstance, NewLoadBalancer, NewRoute, Protocol,
    Route, RouteList, StateSnapshot, TargetCount, TargetCounts, TargetsUpdate,
};
pub use requests::{RequestList, RequestRecord};
pub use state::SimState;

/// How long [`CloudSim::shutdown`] waits for open requests to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Configuration of a simulator.
#[derive(Clone)]
pub struct SimOptions {
    /// The bearer token `/v1` requests must present. Must not be empty.
    pub token: String,
    /// How long a new load balancer stays `provisioning`. Default 1 s.
    pub lb_provision: Duration,
    /// Region of every instance. Default `sim-central-1`.
    pub region: String,
    /// Where auto-assigned private addresses start. Default 10.0.0.0 (10.0.0.1 upwards);
    /// two simulators serving one cluster need apart ranges, as two clouds' networks are.
    pub private_ip_base: std::net::Ipv4Addr,
    /// Where load-balancer addresses start. Default 198.51.100.0 (TEST-NET-2, .1 upwards).
    pub lb_ip_base: std::net::Ipv4Addr,
}

impl SimOptions {
    /// Default options with `token`.
    pub fn new(token: impl Into<String>) -> SimOptions {
        SimOptions {
            token: token.into(),
            ..SimOptions::default()
        }
    }
}

impl Default for SimOptions {
    /// Note the empty token, which [`CloudSim::start`] refuses.
    fn default() -> SimOptions {
        SimOptions {
            token: String::new(),
            lb_provision: Duration::from_secs(1),
            region: "sim-central-1".to_owned(),
            private_ip_base: std::net::Ipv4Addr::new(10, 0, 0, 0),
            lb_ip_base: std::net::Ipv4Addr::new(198, 51, 100, 0),
        }
    }
}

impl fmt::Debug for SimOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimOptions")
            .field("token", &"<redacted>")
            .field("lb_provision", &self.lb_provision)
            .field("region", &self.region)
            .field("private_ip_base", &self.private_ip_base)
            .field("lb_ip_base", &self.lb_ip_base)
            .finish()
    }
}

/// A running simulator. Dropping it stops the server too, but
/// [`CloudSim::shutdown`] also waits for it to finish.
#[derive(Debug)]
pub struct CloudSim {
    addr: SocketAddr,
    state: SimState,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl CloudSim {
    /// Binds `listen` (port 0 picks a free one) and serves in a background task.
    pub async fn start(listen: SocketAddr, options: SimOptions) -> anyhow::Result<CloudSim> {
        anyhow::ensure!(
            !options.token.is_empty(),
            "cloud-sim: the bearer token must not be empty"
        );
        let listener = TcpListener::bind(listen)
            .await
            .with_context(|| format!("cloud-sim: binding {listen}"))?;
        let addr = listener
            .local_addr()
            .context("cloud-sim: reading the bound address")?;
        let state = SimState::new(&options);
        let app = api::router(state.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                stopped.await.ok();
            });
            if let Err(err) = serve.await {
                tracing::error!(%err, "cloud-sim server failed");
            }
        });
        tracing::info!(%addr, region = %options.region, "cloud-sim started");
        Ok(CloudSim {
            addr,
            state,
            stop: Some(stop),
            server: Some(server),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The simulator's state, for inspection and manipulation.
    pub fn state(&self) -> &SimState {
        &self.state
    }

    /// Stops accepting connections, lets open requests finish (for at most
    /// five seconds) and waits for the server to stop.
    pub async fn shutdown(mut self) {
        self.signal_stop();
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut server)
                .await
                .is_err()
        {
            server.abort();
        }
        tracing::info!(addr = %self.addr, "cloud-sim stopped");
    }

    fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may already be gone; then there is nothing to stop.
            stop.send(()).ok();
        }
    }
}

impl Drop for CloudSim {
    fn drop(&mut self) {
        self.signal_stop();
    }
}

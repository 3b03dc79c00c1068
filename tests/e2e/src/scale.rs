//! The scale benchmark (`benches/scale.rs`): the `wasm-ccm` binary managing N nodes and M
//! LoadBalancer Services, with simcloud against the cloud simulator at a fixed latency per
//! request, and the tables it prints ([`Report`]).
//!
//! Three phases, each reported with its wall time, the manager's CPU, its API requests by
//! method (and writes per Service, and its writes split into state, event and Lease writes),
//! its provider calls and the manager's peak RSS so far:
//! - start-up: the N nodes exist, uninitialised, before the manager process is spawned (with
//!   leader election, as deployed, and its compile cache warm from a first, cold start that
//!   was stopped at its first node initialised, the nodes it initialised then put back
//!   uninitialised); the phase runs from the spawn to every node initialised, so its CPU
//!   includes the manager's start;
//! - the Services get their load balancers;
//! - 100 more nodes join, or one in fifty at a larger scale, until every load balancer
//!   targets them (each should be updated exactly once; the phase counts the updates in the
//!   cloud's request log, the service controllers' node-sync rounds, and polls the cloud's
//!   target counts, not the targets).
//!
//! Also: when the first node was initialised, after the process started (cold and warm) and
//! after the Lease
//! was acquired (a watch the bench starts before the spawn sees it; the Lease's `acquireTime`
//! is the manager's clock, this machine's); the manager's LISTs and WATCHes of nodes and
//! services at start; the node phase's events still written after it (events queue behind
//! state writes; the bench waits for them before it creates the Services, so they do not
//! count as the load balancers' writes); nodes initialised per second, provider calls per
//! node and per Service, and cloud requests.
//!
//! The writes split by client (state, events, the Lease) come from the manager's own
//! `/metrics` (`rest_client_requests_total` by `client`), in both modes.
//!
//! With `SCALE_PROVIDERS=2` the same totals are served by two providers in one manager
//! (`--provider-resource`, two `CloudProvider`s of simcloud under two names against the one
//! simulator): every other node is each one's (by a label and their node selectors), every
//! other Service of the second one's class, each load balancer targeting its provider's
//! nodes.
//!
//! Two modes ([`Target`]):
//! - the API emulator and the cloud simulator in this process; the emulator counts the
//!   manager's requests by client (user agent), which gives its LISTs and WATCHes;
//! - a cluster's kubeconfig and a `cloud-sim` started elsewhere (e.g. `cloud-sim --listen
//!   0.0.0.0:8080 --token T`), so the numbers can be reproduced on a real kube-apiserver. The
//!   manager's LISTs come from the API server's `/metrics`, less the bench's own; its
//!   WATCHes are not known there. The cluster should run no other
//!   cloud-controller-manager; the bench creates its Nodes (`bench-node-NNNNN`, labelled
//!   `wasm-ccm-bench=true`) and Services (in namespace `wasm-ccm-bench`), and deletes them all
//!   at the end, then stops the manager cleanly so that it releases the Lease.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::https;
use crate::testbed::{ManagerProcess as Manager, Testbed, ingress_ip, is_uninitialized};
use cloud_sim::{Faults, NewInstance, RequestList, SimState, TargetCounts};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use kube_emulator::RequestCounts;
use wasm_ccm::cluster::{EVENT_RECORDER, LEADER_ELECTION, SHARED_INFORMERS};

/// The nodes that join in the last phase: 100, or one in fifty at a larger scale (300 at
/// 15,000).
fn added_nodes(nodes: usize) -> usize {
    (nodes / 50).max(100)
}
/// The manager's Lease, where it is by default (`--leader-elect-resource-*`).
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "cloud-controller-manager";
/// What every user agent of the manager's clients contains (`wasm-ccm/0.1.0 (linux/amd64)
/// shared-informers`).
const MANAGER_AGENT: &str = "wasm-ccm/";
/// The HTTP methods that write.
const WRITE_METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];
/// The emulator's `--service-node-port-range`: room for 10,000 one-port Services.
const BENCH_NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=39999;
/// Where the bench's Services live.
pub const NAMESPACE: &str = "wasm-ccm-bench";
/// The label on the bench's Nodes.
pub const LABEL: &str = "wasm-ccm-bench";
/// Which batch a node was created in: [`FIRST_BATCH`], before the manager starts, or
/// [`CHURN_BATCH`], the nodes added at the end (waited for without listing every node).
const BATCH_LABEL: &str = "wasm-ccm-bench-batch";
const FIRST_BATCH: &str = "first";
const CHURN_BATCH: &str = "added";
/// With two providers: the label that gives every other node to the second one (`a`, `b`).
const HALF_LABEL: &str = "wasm-ccm-bench-half";
/// With two providers: their `CloudProvider`s, the names they report, and the second one's
/// load-balancer class (the first is the default).
const RESOURCES: [(&str, &str, &str); 2] = [
    ("wasm-ccm-bench-a", "simcloud", "a"),
    ("wasm-ccm-bench-b", "simcloud-b", "b"),
];
const SECOND_CLASS: &str = "wasm-ccm.io/bench-b";
/// With two providers: the Secret (in `kube-system`) holding the simulator's token.
const TOKEN_SECRET: &str = "wasm-ccm-bench-token";

/// The size of a run and where it runs.
pub struct Settings {
    pub nodes: usize,
    pub services: usize,
    /// Added by the cloud to each request.
    pub latency_ms: u64,
    /// Providers in the manager: 1 (`--provider`), or 2 (`--provider-resource`, the nodes
    /// and Services split between them).
    pub providers: usize,
    pub target: Target,
}

impl Settings {
    /// The settings `make bench-scale` reads from the environment (`var` looks one up):
    /// `SCALE_NODES`, `SCALE_SERVICES` and `SCALE_LATENCY_MS` (5000, 1000 and 10 when unset),
    /// `SCALE_PROVIDERS` (1 or 2; 1 when unset), and for a remote run `SCALE_KUBECONFIG` with
    /// `SCALE_CLOUD_URL` and `SCALE_CLOUD_TOKEN`. Err says which variable is wrong or missing.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let number = |name: &str, default: u64| match var(name) {
            None => Ok(default),
            Some(text) => text
                .parse()
                .map_err(|_| format!("{name}={text:?} is not a whole number")),
        };
        let target = match (var("SCALE_KUBECONFIG"), var("SCALE_CLOUD_URL")) {
            (None, None) => Target::InProcess,
            (Some(kubeconfig), Some(cloud_url)) => Target::Remote {
                kubeconfig: kubeconfig.into(),
                cloud_url,
                cloud_token: var("SCALE_CLOUD_TOKEN").ok_or(
                    "SCALE_CLOUD_TOKEN: the token the cloud simulator was started with is missing",
                )?,
            },
            _ => return Err("set both SCALE_KUBECONFIG and SCALE_CLOUD_URL, or neither".into()),
        };
        let providers = match number("SCALE_PROVIDERS", 1)? {
            n @ (1 | 2) => n as usize,
            n => {
                return Err(format!(
                    "SCALE_PROVIDERS={n}: the bench runs 1 or 2 providers"
                ));
            }
        };
        Ok(Settings {
            nodes: number("SCALE_NODES", 5000)? as usize,
            services: number("SCALE_SERVICES", 1000)? as usize,
            latency_ms: number("SCALE_LATENCY_MS", 10)?,
            providers,
            target,
        })
    }
}

/// Where a run happens.
pub enum Target {
    /// The API emulator and the cloud simulator in this process.
    InProcess,
    /// A cluster and a cloud simulator elsewhere.
    Remote {
        kubeconfig: PathBuf,
        /// The simulator's URL, e.g. `http://10.0.0.5:8080`.
        cloud_url: String,
        /// The token it was started with.
        cloud_token: String,
    },
}

/// The cluster and cloud the bench runs against.
enum Setup {
    /// The emulator and the simulator in this process.
    Local(Testbed),
    /// A cluster and a cloud simulator elsewhere.
    Remote {
        client: kube::Client,
        kubeconfig: PathBuf,
        cloud: RemoteCloud,
        /// The cloud config and the token, as files for the manager's flags.
        files: tempfile::TempDir,
    },
}

/// A `cloud-sim` reached over HTTP: seeded through its API, its faults and request log
/// through `/_admin`.
struct RemoteCloud {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Setup {
    async fn new(target: Target) -> Setup {
        let Target::Remote {
            kubeconfig,
            cloud_url,
            cloud_token: token,
        } = target
        else {
            // As a cluster with more LoadBalancer Services than the default range's 2,768
            // node ports needs, a wider `--service-node-port-range`.
            return Setup::Local(
                Testbed::start_with(kube_emulator::EmulatorOptions {
                    service_node_port_range: BENCH_NODE_PORTS,
                    ..Default::default()
                })
                .await,
            );
        };
        let url = cloud_url.trim_end_matches('/').to_string();
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig)
                .unwrap_or_else(|error| panic!("kubeconfig {}: {error}", kubeconfig.display())),
            &options,
        )
        .await
        .unwrap_or_else(|error| panic!("kubeconfig {}: {error}", kubeconfig.display()));
        let client = kube::Client::try_from(config).expect("a client for the kubeconfig");
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let files = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            files.path().join("cloud.json"),
            serde_json::json!({ "api_url": url }).to_string(),
        )
        .expect("write the cloud config");
        std::fs::write(files.path().join("token"), format!("{token}\n")).expect("write the token");
        Setup::Remote {
            client,
            kubeconfig,
            cloud: RemoteCloud {
                http: reqwest::Client::new(),
                url,
                token,
            },
            files,
        }
    }

    fn client(&self) -> &kube::Client {
        match self {
            Setup::Local(bed) => &bed.client,
            Setup::Remote { client, .. } => client,
        }
    }

    /// The flags that run simcloud against this cluster and cloud.
    fn provider_flags(&self) -> Vec<String> {
        match self {
            Setup::Local(bed) => bed.provider_flags(),
            Setup::Remote {
                kubeconfig,
                cloud,
                files,
                ..
            } => vec![
                format!("--provider=file://{}", guest_builds::SIMCLOUD),
                "--cloud-provider=simcloud".into(),
                format!(
                    "--cloud-config={}",
                    files.path().join("cloud.json").display()
                ),
                format!("--kubeconfig={}", kubeconfig.display()),
                format!("--allow={}", cloud.url),
                format!(
                    "--credential={}=bearer:file:{}",
                    cloud.url,
                    files.path().join("token").display()
                ),
            ],
        }
    }

    /// With two providers: the flags that follow their `CloudProvider`s, which
    /// [`Setup::install_providers`] made.
    fn resource_flags(&self) -> Vec<String> {
        let kubeconfig = match self {
            Setup::Local(bed) => bed.kubeconfig(),
            Setup::Remote { kubeconfig, .. } => kubeconfig.clone(),
        };
        let resources: Vec<&str> = RESOURCES.iter().map(|(resource, ..)| *resource).collect();
        vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--provider-resource={}", resources.join(",")),
        ]
    }

    /// With two providers: the CRD (unless the cluster has it), the simulator's token in a
    /// Secret and the two `CloudProvider`s, each simcloud under its own name with its half of
    /// the nodes, the first the default for Services, the second of [`SECOND_CLASS`].
    async fn install_providers(&self) {
        let client = self.client();
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(client.clone());
        if crds
            .get_opt("cloudproviders.wasm-ccm.io")
            .await
            .expect("read the CRD")
            .is_none()
        {
            crate::cloud_provider::install_crd_into(client).await;
        }
        let (url, token) = match self {
            Setup::Local(bed) => (bed.cloud.sim.url(), crate::TOKEN.to_string()),
            Setup::Remote { cloud, .. } => (cloud.url.clone(), cloud.token.clone()),
        };
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": TOKEN_SECRET},
                "stringData": {"token": token},
            }))
            .expect("a Secret");
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), LEASE_NAMESPACE)
            .patch(
                TOKEN_SECRET,
                &kube::api::PatchParams::apply("wasm-ccm-bench").force(),
                &kube::api::Patch::Apply(&secret),
            )
            .await
            .expect("write the token Secret");
        let providers: Api<wasm_ccm::resource::CloudProvider> = Api::all(client.clone());
        for (index, (resource, name, half)) in RESOURCES.into_iter().enumerate() {
            let mut spec = serde_json::json!({
                "provider": format!("file://{}", guest_builds::SIMCLOUD),
                "name": name,
                "cloudConfig": {"inline": serde_json::json!({"api_url": url, "name": name}).to_string()},
                "egress": {"allowedHosts": [url]},
                "credentials": [{
                    "host": url,
                    "secretKeyRef": {"name": TOKEN_SECRET, "key": "token", "namespace": LEASE_NAMESPACE},
                }],
                "nodeSelector": {"matchLabels": {HALF_LABEL: half}},
            });
            match index {
                0 => spec["default"] = true.into(),
                _ => spec["loadBalancerClass"] = SECOND_CLASS.into(),
            }
            let object: wasm_ccm::resource::CloudProvider =
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "wasm-ccm.io/v1alpha1",
                    "kind": "CloudProvider",
                    "metadata": {"name": resource},
                    "spec": spec,
                }))
                .expect("a CloudProvider");
            providers
                .patch(
                    resource,
                    &kube::api::PatchParams::apply("wasm-ccm-bench").force(),
                    &kube::api::Patch::Apply(&object),
                )
                .await
                .expect("write the bench's CloudProvider");
        }
    }

    fn local(&self) -> Option<&SimState> {
        match self {
            Setup::Local(bed) => Some(bed.cloud.sim.state()),
            Setup::Remote { .. } => None,
        }
    }

    fn remote(&self) -> Option<&RemoteCloud> {
        match self {
            Setup::Local(_) => None,
            Setup::Remote { cloud, .. } => Some(cloud),
        }
    }

    /// The API requests the emulator has served so far, by client; `None` on a cluster.
    fn served(&self) -> Option<RequestCounts> {
        match self {
            Setup::Local(bed) => Some(bed.emulator.requests()),
            Setup::Remote { .. } => None,
        }
    }

    async fn add_instances(&self, names: Vec<String>) {
        let new = |i: usize, name: String| NewInstance {
            name,
            instance_type: "sim.small".into(),
            zone: format!("sim-central-1{}", ["a", "b", "c"][i % 3]),
            ..NewInstance::default()
        };
        if let Some(state) = self.local() {
            for (i, name) in names.into_iter().enumerate() {
                state.add_instance(new(i, name));
            }
            return;
        }
        let cloud = self.remote().expect("remote");
        futures::stream::iter(names.into_iter().enumerate())
            .for_each_concurrent(32, |(i, name)| {
                let request = cloud
                    .http
                    .post(format!("{}/v1/instances", cloud.url))
                    .bearer_auth(&cloud.token)
                    .json(&new(i, name));
                async move {
                    let response = request.send().await.expect("create an instance");
                    assert!(
                        response.status().is_success(),
                        "the cloud refused an instance: {}",
                        response.status()
                    );
                }
            })
            .await;
    }

    async fn set_latency(&self, latency_ms: u64) {
        let faults = Faults {
            latency_ms,
            ..Faults::default()
        };
        if let Some(state) = self.local() {
            state.set_faults(faults);
            return;
        }
        let cloud = self.remote().expect("remote");
        let response = cloud
            .http
            .put(format!("{}/_admin/faults", cloud.url))
            .json(&faults)
            .send()
            .await
            .expect("set the cloud's latency");
        assert!(response.status().is_success(), "{}", response.status());
    }

    /// The cloud's requests logged at position `from` or later (its `next` is where to
    /// read on from).
    async fn cloud_log(&self, from: u64) -> RequestList {
        match self.local() {
            Some(state) => state.requests_from(from),
            None => self.remote_admin(&format!("requests?from={from}")).await,
        }
    }

    /// How many targets each load balancer of the cloud has.
    async fn target_counts(&self) -> Vec<usize> {
        let counts: TargetCounts = match self.local() {
            Some(state) => state.target_counts(),
            None => self.remote_admin("target-counts").await,
        };
        counts
            .load_balancers
            .into_iter()
            .map(|lb| lb.targets)
            .collect()
    }

    /// What the remote simulator's `GET /_admin/PATH` answers.
    async fn remote_admin<T: k8s_openapi::serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let cloud = self.remote().expect("remote");
        cloud
            .http
            .get(format!("{}/_admin/{path}", cloud.url))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|error| panic!("the cloud's /_admin/{path}: {error}"))
            .json()
            .await
            .unwrap_or_else(|error| panic!("the cloud's /_admin/{path} parses: {error}"))
    }
}

/// The service controllers' node-sync rounds so far, every provider's.
async fn node_sync_rounds(manager: &Manager) -> f64 {
    Metrics::scrape(manager)
        .await
        .sum("service_controller_nodesync_latency_seconds_count", "")
}

/// The manager's peak resident set size so far.
fn peak_rss_mib(manager: &Manager) -> f64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", manager.child.id())).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// CPU seconds (user + system, all threads) a process has used so far. Linux reports them
/// in clock ticks of 1/100 s (`USER_HZ`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// What the manager's `/metrics` says, summed over the series of each metric.
struct Metrics(String);

impl Metrics {
    async fn scrape(manager: &Manager) -> Metrics {
        let text = https::get(manager.addr, "/metrics")
            .await
            .map(|(_, text)| text)
            .unwrap_or_default();
        Metrics(text)
    }

    /// Sum of a metric's series whose labels contain `filter`.
    fn sum(&self, name: &str, filter: &str) -> f64 {
        self.0
            .lines()
            .filter(|l| l.starts_with(name) && l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The manager's writes (POST, PUT, PATCH and DELETE requests) by the client that made
    /// them.
    fn writes_by_client(&self) -> Writes {
        let mut writes = Writes::default();
        for line in self
            .0
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{"))
        {
            let label = |name: &str| {
                line.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
            };
            let (Some(method), Some(client)) = (label("method"), label("client")) else {
                continue;
            };
            if !WRITE_METHODS.contains(&method) {
                continue;
            }
            let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            let count = match client {
                EVENT_RECORDER => &mut writes.events,
                LEADER_ELECTION => &mut writes.lease,
                _ => &mut writes.state,
            };
            *count += value.unwrap_or(0.0);
        }
        writes
    }

    /// Bytes sent and received by kind of client.
    fn traffic(&self) -> Traffic {
        let mut traffic = Traffic::default();
        for (name, side) in [
            ("wasm_ccm_rest_client_request_bytes_total{", 0),
            ("wasm_ccm_rest_client_response_bytes_total{", 1),
        ] {
            for line in self.0.lines().filter(|l| l.starts_with(name)) {
                let client = line
                    .split("client=\"")
                    .nth(1)
                    .and_then(|rest| rest.split('"').next())
                    .unwrap_or_default();
                let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
                let kind = match client {
                    EVENT_RECORDER => &mut traffic.events,
                    LEADER_ELECTION => &mut traffic.lease,
                    SHARED_INFORMERS => &mut traffic.informers,
                    _ => &mut traffic.state,
                };
                kind[side] += value.unwrap_or(0.0);
            }
        }
        traffic
    }

    /// API requests by HTTP method.
    fn requests_by_method(&self) -> BTreeMap<String, f64> {
        let mut methods = BTreeMap::new();
        for line in self
            .0
            .lines()
            .filter(|l| l.starts_with("rest_client_requests_total{"))
        {
            let Some(method) = line
                .split("method=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
            else {
                continue;
            };
            let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            *methods.entry(method.to_string()).or_default() += value.unwrap_or(0.0);
        }
        methods
    }
}

/// The manager's writes, by the client that made them, as its `rest_client_requests_total`
/// counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Writes {
    /// Of the Nodes, Services and anything else but events and the Lease.
    pub state: f64,
    /// Of the event recorder's client ([`EVENT_RECORDER`]).
    pub events: f64,
    /// Of the leader election's client ([`LEADER_ELECTION`]).
    pub lease: f64,
}

impl Writes {
    /// What was written from `before` to `self`.
    fn since(&self, before: &Writes) -> Writes {
        Writes {
            state: self.state - before.state,
            events: self.events - before.events,
            lease: self.lease - before.lease,
        }
    }
}

/// Bytes of request and response bodies the manager exchanged with the API server, by kind
/// of client (its own `wasm_ccm_rest_client_{request,response}_bytes_total`): `[sent,
/// received]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Traffic {
    /// The controllers' (Nodes, Services and anything else but events, the Lease and the
    /// informers).
    pub state: [f64; 2],
    /// The event recorder's.
    pub events: [f64; 2],
    /// The leader election's.
    pub lease: [f64; 2],
    /// The shared informers' lists and watches.
    pub informers: [f64; 2],
}

impl Traffic {
    fn since(&self, before: &Traffic) -> Traffic {
        let minus = |a: [f64; 2], b: [f64; 2]| [a[0] - b[0], a[1] - b[1]];
        Traffic {
            state: minus(self.state, before.state),
            events: minus(self.events, before.events),
            lease: minus(self.lease, before.lease),
            informers: minus(self.informers, before.informers),
        }
    }
}

/// The manager's LISTs and WATCHes as the emulator counted them by user agent.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ManagerRequests {
    pub list_nodes: u64,
    pub list_services: u64,
    pub watch_nodes: u64,
    pub watch_services: u64,
}

impl ManagerRequests {
    /// The requests of the manager's clients (every user agent with [`MANAGER_AGENT`]) among
    /// `served`.
    fn of(served: &RequestCounts) -> ManagerRequests {
        let mut requests = ManagerRequests::default();
        for (_, counts) in served
            .by_user_agent
            .iter()
            .filter(|(agent, _)| agent.contains(MANAGER_AGENT))
        {
            for (request, n) in counts {
                let (verb, resource) = request.split_once(' ').unwrap_or((request, ""));
                match (verb, resource) {
                    ("list", "nodes") => requests.list_nodes += n,
                    ("list", "services") => requests.list_services += n,
                    ("watch", "nodes") => requests.watch_nodes += n,
                    ("watch", "services") => requests.watch_services += n,
                    _ => {}
                }
            }
        }
        requests
    }

    /// What was made from `before` to `self`.
    fn since(&self, before: &ManagerRequests) -> ManagerRequests {
        ManagerRequests {
            list_nodes: self.list_nodes - before.list_nodes,
            list_services: self.list_services - before.list_services,
            watch_nodes: self.watch_nodes - before.watch_nodes,
            watch_services: self.watch_services - before.watch_services,
        }
    }
}

/// The cloud's requests in one phase, read from the simulator's log as they come: it keeps
/// only its last 10,000, fewer than a large run makes in a phase.
#[derive(Default)]
struct CloudTally {
    /// Where to read the log from next.
    next: u64,
    requests: usize,
    /// The simulator's own time for them (arrival to response, its injected latency
    /// included), seconds.
    served: f64,
    /// `PUT …/targets` requests by path: each one a load balancer's targets updated.
    target_updates: BTreeMap<String, usize>,
    /// Requests the log let go before they were read.
    unseen: u64,
}

impl CloudTally {
    /// A tally of the requests logged from now on.
    async fn from_now(setup: &Setup) -> Self {
        Self {
            next: setup.cloud_log(u64::MAX).await.next,
            ..Self::default()
        }
    }

    /// Count the requests logged since the last read.
    async fn read(&mut self, setup: &Setup) {
        let list = setup.cloud_log(self.next).await;
        self.next = list.next;
        self.unseen += list.dropped;
        for record in list.requests {
            self.requests += 1;
            self.served += record.latency_ms as f64 / 1000.0;
            if record.method == "PUT" && record.path.ends_with("/targets") {
                *self.target_updates.entry(record.path).or_default() += 1;
            }
        }
    }

    /// Run `work` while reading the log every second, then read it once more.
    async fn during<T>(&mut self, setup: &Setup, work: impl Future<Output = T>) -> T {
        let finished = tokio::sync::Notify::new();
        let work = async {
            let output = work.await;
            finished.notify_one();
            output
        };
        let follow = async {
            loop {
                tokio::select! {
                    () = finished.notified() => break,
                    () = tokio::time::sleep(Duration::from_secs(1)) => self.read(setup).await,
                }
            }
        };
        let (output, ()) = futures::join!(work, follow);
        self.read(setup).await;
        output
    }
}

/// The manager and this process at one moment.
struct Sample {
    at: Instant,
    manager_cpu: f64,
    bench_cpu: f64,
    requests: BTreeMap<String, f64>,
    writes: Writes,
    provider_calls: f64,
    service_times: ServiceTimes,
    traffic: Traffic,
    /// As the emulator counted them; `None` on a cluster.
    served: Option<ManagerRequests>,
}

impl Sample {
    async fn take(manager: &Manager, setup: &Setup) -> Sample {
        let metrics = Metrics::scrape(manager).await;
        Sample {
            at: Instant::now(),
            manager_cpu: cpu_seconds(manager.child.id()),
            bench_cpu: cpu_seconds(std::process::id()),
            requests: metrics.requests_by_method(),
            writes: metrics.writes_by_client(),
            provider_calls: metrics.sum("wasm_ccm_provider_calls_total", ""),
            service_times: ServiceTimes::of(&metrics),
            traffic: metrics.traffic(),
            served: setup.served().as_ref().map(ManagerRequests::of),
        }
    }

    /// The manager as it was spawned `at`: it has used no CPU and made no request yet (its
    /// `/metrics` does not answer yet).
    fn spawned(at: Instant, setup: &Setup) -> Sample {
        Sample {
            at,
            manager_cpu: 0.0,
            bench_cpu: cpu_seconds(std::process::id()),
            requests: BTreeMap::new(),
            writes: Writes::default(),
            provider_calls: 0.0,
            service_times: ServiceTimes::default(),
            traffic: Traffic::default(),
            served: setup.served().as_ref().map(ManagerRequests::of),
        }
    }
}

/// Where the service controller's time went, summed over every Service, from the manager's
/// own histograms and counters (seconds, or counts).
#[derive(Debug, Default, Clone, Copy)]
pub struct ServiceTimes {
    /// Syncs the service workers ran (`workqueue_work_duration_seconds_count`).
    pub syncs: f64,
    /// In the work queue, from added (or due, after a delay) to taken by a worker.
    pub queued: f64,
    /// In a worker's sync.
    pub syncing: f64,
    /// In provider load-balancer calls (a call slot's wait and the sandbox's set-up
    /// included).
    pub provider: f64,
    /// Of which in the provider's cloud requests, to the end of each response.
    pub cloud: f64,
    /// In PATCH requests to the API server (finalizers, statuses), the token bucket's wait
    /// apart.
    pub api_writes: f64,
    /// Provider answers asking to be called again later (`retry-after`).
    pub retry_afters: f64,
}

impl ServiceTimes {
    fn of(metrics: &Metrics) -> ServiceTimes {
        let queue = "name=\"service";
        ServiceTimes {
            syncs: metrics.sum("workqueue_work_duration_seconds_count{", queue),
            queued: metrics.sum("workqueue_queue_duration_seconds_sum{", queue),
            syncing: metrics.sum("workqueue_work_duration_seconds_sum{", queue),
            provider: metrics.sum(
                "wasm_ccm_provider_call_duration_seconds_sum{",
                "load-balancer",
            ),
            cloud: metrics.sum("wasm_ccm_egress_request_duration_seconds_sum{", ""),
            api_writes: metrics.sum(
                "rest_client_request_duration_seconds_sum{",
                "verb=\"PATCH\"",
            ),
            retry_afters: metrics.sum("wasm_ccm_provider_calls_total{", "outcome=\"retry-after\""),
        }
    }

    fn since(&self, before: &ServiceTimes) -> ServiceTimes {
        ServiceTimes {
            syncs: self.syncs - before.syncs,
            queued: self.queued - before.queued,
            syncing: self.syncing - before.syncing,
            provider: self.provider - before.provider,
            cloud: self.cloud - before.cloud,
            api_writes: self.api_writes - before.api_writes,
            retry_afters: self.retry_afters - before.retry_afters,
        }
    }
}

/// How busy this machine's cores were, second by second ([`BusySampler`]).
#[derive(Debug, Default, Clone)]
pub struct Busy {
    /// Cores busy in each whole second (user, system, irq, softirq and steal time, from
    /// `/proc/stat`).
    pub per_second: Vec<f64>,
    /// The machine's cores.
    pub cores: f64,
}

/// Reads `/proc/stat` once a second until stopped.
struct BusySampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Busy>,
}

impl BusySampler {
    fn start() -> BusySampler {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let cores = std::thread::available_parallelism().map_or(f64::NAN, |n| n.get() as f64);
            let mut busy = Busy {
                per_second: Vec::new(),
                cores,
            };
            let mut last = machine_ticks();
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            ticker.tick().await;
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = &mut stopped => return busy,
                }
                let now = machine_ticks();
                if let (Some((busy_then, _)), Some((busy_now, _))) = (last, now) {
                    // USER_HZ ticks of all cores in one second.
                    busy.per_second.push((busy_now - busy_then) / 100.0);
                }
                last = now;
            }
        });
        BusySampler { stop, task }
    }

    async fn stop(self) -> Busy {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

/// All cores' busy and idle ticks so far (the `cpu` line of `/proc/stat`).
fn machine_ticks() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|line| line.starts_with("cpu "))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is within user).
    let field = |i: usize| ticks.get(i).copied().unwrap_or(0.0);
    let busy = field(0) + field(1) + field(2) + field(5) + field(6) + field(7);
    Some((busy, field(3) + field(4)))
}

/// One phase's row: what happened between two samples.
pub struct Phase {
    pub name: String,
    pub wall: Duration,
    pub manager_cpu: f64,
    bench_cpu: f64,
    /// API requests the manager made, by HTTP method.
    pub requests: BTreeMap<String, f64>,
    /// Its writes by client.
    pub writes_by_client: Writes,
    /// Its bytes to and from the API server by kind of client.
    pub traffic: Traffic,
    /// Its LISTs and WATCHes as the emulator counted them; `None` on a cluster.
    pub served: Option<ManagerRequests>,
    pub provider_calls: f64,
    peak_rss: f64,
    /// The Services the phase made load balancers for, if it did.
    services: Option<usize>,
}

impl Phase {
    fn between(name: String, before: &Sample, after: &Sample, manager: &Manager) -> Phase {
        let requests = after
            .requests
            .iter()
            .map(|(method, n)| {
                let earlier = before.requests.get(method).copied().unwrap_or(0.0);
                (method.clone(), n - earlier)
            })
            .filter(|(_, n)| *n > 0.0)
            .collect();
        let served = match (&before.served, &after.served) {
            (Some(before), Some(after)) => Some(after.since(before)),
            _ => None,
        };
        Phase {
            name,
            wall: after.at - before.at,
            manager_cpu: after.manager_cpu - before.manager_cpu,
            bench_cpu: after.bench_cpu - before.bench_cpu,
            requests,
            writes_by_client: after.writes.since(&before.writes),
            traffic: after.traffic.since(&before.traffic),
            served,
            provider_calls: after.provider_calls - before.provider_calls,
            peak_rss: peak_rss_mib(manager),
            services: None,
        }
    }

    /// API writes: POST, PUT, PATCH and DELETE requests.
    pub fn writes(&self) -> f64 {
        WRITE_METHODS
            .iter()
            .filter_map(|m| self.requests.get(*m))
            .sum()
    }
}

/// Run the benchmark; in a remote target, leave the cluster as it was.
pub async fn run(settings: Settings) -> Report {
    let Settings {
        nodes,
        services,
        latency_ms: latency,
        providers,
        target,
    } = settings;
    let binary = crate::wasm_ccm_binary();
    let setup = Setup::new(target).await;
    let mode = match setup {
        Setup::Local(_) => "the API emulator and the cloud simulator in this process",
        Setup::Remote { .. } => "the given cluster and cloud simulator",
    };
    setup
        .add_instances((0..nodes + added_nodes(nodes)).map(node_name).collect())
        .await;
    setup.set_latency(latency).await;
    ensure_namespace(setup.client()).await;
    let client = setup.client();
    eprintln!(
        "scale: {nodes} nodes, {services} services, {latency} ms cloud latency, {providers} provider(s), on {mode}"
    );

    // The nodes are there, uninitialised, before the manager starts: its start-up is measured.
    let creating = Instant::now();
    create_nodes(client, 0..nodes, FIRST_BATCH).await;
    let created = creating.elapsed();
    warn_if_lease_held(client).await;

    let port = https::free_port();
    let mut args = match providers {
        1 => setup.provider_flags(),
        _ => {
            setup.install_providers().await;
            setup.resource_flags()
        }
    };
    // A first start with an empty cache (a cold start: it downloads nothing, but compiles),
    // stopped at its first node initialised; the start measured is a restart's, with the
    // cache that one filled (as upstream's Go binary has nothing to compile).
    let cache_dir = tempfile::tempdir().expect("a cache directory");
    args.extend(
        [
            "--controllers=cloud-node,service".to_string(),
            format!("--cache-dir={}", cache_dir.path().display()),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            "--kube-api-qps=1000".into(),
            "--kube-api-burst=2000".into(),
            "--concurrent-node-syncs=32".into(),
            "--concurrent-service-syncs=10".into(),
            "--egress-rate=100000".into(),
            "--egress-burst=100000".into(),
            "--max-concurrent-calls=32".into(),
            // The bench scrapes /metrics itself: open, so the secure port's TokenReviews and
            // SubjectAccessReviews are not counted among the controllers' API requests.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
        ]
        .map(String::from),
    );
    let cold_first_after_start = cold_start(&binary, &args, port, client, nodes).await;
    if let Setup::Local(bed) = &setup {
        // The cold start's own lists, watches and writes are not the measured manager's.
        bed.emulator.reset_requests();
    }
    warn_if_lease_held(client).await;
    let watch = NodeWatch::start(client).await;
    let bench_lists_before = watch.lists();
    let remote = matches!(setup, Setup::Remote { .. });
    let server_before = if remote {
        Some(server_lists(client).await)
    } else {
        None
    };

    let spawned = SystemTime::now();
    let mut manager = Manager::spawn(&binary, &args, port, true);
    let start = Sample::spawned(Instant::now(), &setup);
    watch.wait_initialised(nodes, &mut manager).await;
    let nodes_done = Sample::take(&manager, &setup).await;
    let server_after = if remote {
        Some(server_lists(client).await)
    } else {
        None
    };
    let bench_lists = watch.lists() - bench_lists_before;
    let first_initialised = watch.first_initialised().expect("a node was initialised");
    watch.stop();
    eprintln!(
        "scale: nodes initialised {:.1?} after the process started",
        nodes_done.at - start.at
    );
    let node_phase = Phase::between(
        format!("{nodes} nodes initialised from process start"),
        &start,
        &nodes_done,
        &manager,
    );
    let start_up = StartUp {
        cold_first_after_start,
        first_after_start: seconds_between(spawned, first_initialised),
        lease_acquired: lease_acquired(client)
            .await
            .map(|acquired| seconds_between(spawned, acquired)),
        server_lists: match (server_before, server_after) {
            (Some(Ok(before)), Some(Ok(after))) => Some(Ok([
                after[0] - before[0] - bench_lists as f64,
                after[1] - before[1],
            ])),
            (Some(Err(why)), _) | (_, Some(Err(why))) => Some(Err(why)),
            _ => None,
        },
        bench_lists,
    };

    let trailing = trailing_events(&manager, &nodes_done).await;
    let mut lb_cloud = CloudTally::from_now(&setup).await;
    let lb_start = Sample::take(&manager, &setup).await;
    let sampler = BusySampler::start();
    let make_load_balancers = async {
        futures::stream::iter(0..services)
            .for_each_concurrent(64, |i| {
                let mut service = Testbed::lb_service(&format!("svc-{i:04}"));
                service.metadata.namespace = Some(NAMESPACE.into());
                if providers == 2
                    && i % 2 == 1
                    && let Some(spec) = service.spec.as_mut()
                {
                    spec.load_balancer_class = Some(SECOND_CLASS.into());
                }
                let api = services_api(client);
                async move {
                    api.create(&PostParams::default(), &service)
                        .await
                        .expect("create service");
                }
            })
            .await;
        wait_ingress(client, services).await;
        Sample::take(&manager, &setup).await
    };
    let lbs_done = lb_cloud.during(&setup, make_load_balancers).await;
    let lb_busy = sampler.stop().await;
    let lb_times = lbs_done.service_times.since(&lb_start.service_times);
    eprintln!(
        "scale: load balancers ready after {:.1?}",
        lbs_done.at - lb_start.at
    );
    let lb_phase = Phase {
        services: Some(services),
        ..Phase::between(
            format!("{services} load balancers with an ingress"),
            &lb_start,
            &lbs_done,
            &manager,
        )
    };
    let metrics = Metrics::scrape(&manager).await;
    let metadata_calls = metrics.sum(
        "wasm_ccm_provider_calls_total",
        "function=\"instance-metadata\"",
    );
    let lb_calls = metrics.sum("wasm_ccm_provider_calls_total", "-load-balancer");
    let mut churn_cloud = CloudTally::from_now(&setup).await;
    let churn_start = Sample::take(&manager, &setup).await;
    let rounds_before = node_sync_rounds(&manager).await;
    let added = added_nodes(nodes);
    let add_nodes = async {
        create_nodes(client, nodes..nodes + added, CHURN_BATCH).await;
        wait_nodes_initialised(client, CHURN_BATCH, added).await;
    };
    churn_cloud.during(&setup, add_nodes).await;
    // Each load balancer targets its provider's nodes: all of them, or with two, every other.
    let all = nodes + added;
    let complete_targets = |targets: usize| match providers {
        1 => targets == all,
        _ => targets == all.div_ceil(2) || targets == all / 2,
    };
    // Until every load balancer targets the new nodes (or 5 minutes went by).
    let settle = Instant::now();
    let complete = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        churn_cloud.read(&setup).await;
        let counts = setup.target_counts().await;
        let complete = counts.iter().filter(|n| complete_targets(**n)).count();
        if complete == services || settle.elapsed() > Duration::from_secs(300) {
            break complete;
        }
    };
    let churn_done = Sample::take(&manager, &setup).await;
    let churn_phase = Phase::between(
        format!("+{added} nodes: every load balancer targets them"),
        &churn_start,
        &churn_done,
        &manager,
    );
    let churn_rounds = node_sync_rounds(&manager).await - rounds_before;
    let updates = &churn_cloud.target_updates;
    let updated_once = updates.values().filter(|n| **n == 1).count();
    let updated_more = updates.values().filter(|n| **n > 1).count();

    let other_cpu = match setup {
        Setup::Local(_) => "emulator + simulator + bench",
        Setup::Remote { .. } => "bench",
    };
    if let Setup::Remote { .. } = setup {
        clean_up(client, providers).await;
    }
    stop(manager).await;
    Report {
        mode,
        other_cpu,
        nodes,
        services,
        providers,
        latency_ms: latency,
        phases: vec![node_phase, lb_phase, churn_phase],
        lb_times,
        lb_cloud_served: lb_cloud.served,
        lb_busy,
        created,
        start_up,
        trailing,
        whole_run: churn_done.served,
        metadata_calls,
        lb_calls,
        cloud_requests_lbs: lb_cloud.requests,
        cloud_requests_unseen: lb_cloud.unseen + churn_cloud.unseen,
        updated_once,
        updated_more,
        complete,
        churn_rounds,
    }
}

/// How the manager started: times from the process's start, in seconds (negative if the
/// clock was stepped back between them).
pub struct StartUp {
    /// With an empty cache (compiling the provider): until the bench's watch saw the first
    /// node initialised.
    pub cold_first_after_start: f64,
    /// With the cache the cold start filled: until the bench's watch saw the first node
    /// initialised.
    pub first_after_start: f64,
    /// Until the Lease's `acquireTime`; Err says why it is not known.
    pub lease_acquired: Result<f64, String>,
    /// On a cluster, the manager's LISTs of nodes and of services from its start to every
    /// node initialised, by the API server's `/metrics` (in this process the emulator's
    /// counts are in the node phase); Err says why they are not known.
    server_lists: Option<Result<[f64; 2], String>>,
    /// LISTs of nodes the bench's watch made meanwhile (subtracted from the API server's).
    bench_lists: u64,
}

/// The node phase's events the manager wrote after its last node was initialised (events
/// queue behind state writes): its POSTs from then until none came for a second (with no
/// Service yet, only events are POSTed), and how long they went on.
pub struct Trailing {
    pub posts: f64,
    pub wall: Duration,
}

/// Wait for the node phase's events to be written, so that they do not count as the load
/// balancers' writes; at most 2 minutes.
async fn trailing_events(manager: &Manager, nodes_done: &Sample) -> Trailing {
    let posts = |requests: &BTreeMap<String, f64>| requests.get("POST").copied().unwrap_or(0.0);
    let (first, mut last, mut changed) = (
        posts(&nodes_done.requests),
        posts(&nodes_done.requests),
        nodes_done.at,
    );
    while changed.elapsed() < Duration::from_secs(1)
        && nodes_done.at.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = posts(&Metrics::scrape(manager).await.requests_by_method());
        if now != last {
            (last, changed) = (now, Instant::now());
        }
    }
    Trailing {
        posts: last - first,
        wall: changed - nodes_done.at,
    }
}

/// `to` − `from` in seconds, negative if `to` is earlier.
fn seconds_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(after) => after.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

/// The bench's own watch of its Nodes, started before the manager: when it first saw one
/// initialised, how many are initialised, and how many times it listed them.
struct NodeWatch {
    seen: tokio::sync::watch::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Clone, Default)]
struct Seen {
    /// The first list is done: every later change is seen.
    listed: bool,
    lists: u64,
    first_initialised: Option<SystemTime>,
    initialised: usize,
}

impl NodeWatch {
    /// Start watching, and return once the Nodes are listed.
    async fn start(client: &kube::Client) -> NodeWatch {
        let api: Api<Node> = Api::all(client.clone());
        // Without a page size, as the manager's informers: kube-rs sends `resourceVersion=0`
        // only without a limit, and a list without a limit is one request, so the bench's
        // own LISTs are counted exactly.
        let config = watcher::Config {
            page_size: None,
            ..watcher::Config::default()
        }
        .labels(LABEL)
        .any_semantic();
        let (report, seen) = tokio::sync::watch::channel(Seen::default());
        let task = tokio::spawn(async move {
            let mut initialised = HashSet::new();
            let mut events = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                let node = match event {
                    Ok(watcher::Event::Init) => {
                        report.send_modify(|seen| seen.lists += 1);
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {
                        report.send_modify(|seen| seen.listed = true);
                        continue;
                    }
                    Ok(watcher::Event::InitApply(node) | watcher::Event::Apply(node)) => node,
                    Ok(watcher::Event::Delete(node)) => {
                        initialised.remove(&node.name_any());
                        continue;
                    }
                    Err(error) => {
                        eprintln!("scale: the bench's watch of its nodes: {error}");
                        continue;
                    }
                };
                if is_uninitialized(&node) {
                    initialised.remove(&node.name_any());
                } else if initialised.insert(node.name_any()) {
                    let now = SystemTime::now();
                    let count = initialised.len();
                    report.send_modify(|seen| {
                        seen.first_initialised.get_or_insert(now);
                        seen.initialised = count;
                    });
                }
            }
        });
        let mut watch = NodeWatch { seen, task };
        tokio::time::timeout(
            Duration::from_secs(120),
            watch.seen.wait_for(|seen| seen.listed),
        )
        .await
        .expect("the bench's watch listed its nodes within 2 minutes")
        .expect("the bench's watch runs");
        watch
    }

    fn lists(&self) -> u64 {
        self.seen.borrow().lists
    }

    fn first_initialised(&self) -> Option<SystemTime> {
        self.seen.borrow().first_initialised
    }

    /// Wait until `count` nodes are initialised, while the manager runs.
    async fn wait_initialised(&self, count: usize, manager: &mut Manager) {
        let mut seen = self.seen.clone();
        let since = Instant::now();
        loop {
            let initialised = seen.borrow_and_update().initialised;
            if initialised >= count {
                return;
            }
            if let Some(status) = manager.child.try_wait().expect("wait on the manager") {
                panic!(
                    "the manager exited ({status}) with {initialised} of {count} nodes initialised"
                );
            }
            assert!(
                since.elapsed() < Duration::from_secs(600),
                "only {initialised} of {count} nodes initialised after 10 minutes"
            );
            let _ = tokio::time::timeout(Duration::from_millis(250), seen.changed()).await;
        }
    }

    fn stop(self) {
        self.task.abort();
    }
}

/// Start the manager with `args` (its `--cache-dir` empty, so it compiles the provider into
/// it), serving on `port`; stop it once the first of the `nodes` is initialised, and put
/// every node it initialised back as it was (deleted and created again, uninitialised), so
/// the measured start finds the same cluster. Seconds from the spawn to that first node.
async fn cold_start(
    binary: &std::path::Path,
    args: &[String],
    port: u16,
    client: &kube::Client,
    nodes: usize,
) -> f64 {
    let watch = NodeWatch::start(client).await;
    let spawned = SystemTime::now();
    let mut manager = Manager::spawn(binary, args, port, true);
    watch.wait_initialised(1, &mut manager).await;
    let first = watch.first_initialised().expect("a node was initialised");
    stop(manager).await;
    watch.stop();
    let api: Api<Node> = Api::all(client.clone());
    let listed = api
        .list(&ListParams::default().labels(LABEL))
        .await
        .expect("list the bench's nodes");
    let initialised: HashSet<String> = listed
        .items
        .iter()
        .filter(|node| !is_uninitialized(node))
        .map(ResourceExt::name_any)
        .collect();
    let again: Vec<usize> = (0..nodes)
        .filter(|i| initialised.contains(&node_name(*i)))
        .collect();
    futures::stream::iter(&again)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            async move {
                api.delete(&node_name(*i), &DeleteParams::default())
                    .await
                    .expect("delete a node the cold start initialised");
            }
        })
        .await;
    create_nodes(client, again.iter().copied(), FIRST_BATCH).await;
    eprintln!(
        "scale: cold start: first node initialised {:.2} s after the process started ({} nodes put back uninitialised)",
        seconds_between(spawned, first),
        again.len()
    );
    seconds_between(spawned, first)
}

/// Say so if the Lease is held: the manager then waits for it to expire, and the times from
/// its start include that wait.
async fn warn_if_lease_held(client: &kube::Client) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let holder = match leases.get_opt(LEASE_NAME).await {
        Ok(lease) => lease
            .and_then(|lease| lease.spec?.holder_identity)
            .filter(|holder| !holder.is_empty()),
        Err(error) => {
            eprintln!("scale: reading the Lease {LEASE_NAMESPACE}/{LEASE_NAME}: {error}");
            None
        }
    };
    if let Some(holder) = holder {
        eprintln!(
            "scale: the Lease {LEASE_NAMESPACE}/{LEASE_NAME} is held by {holder:?}: the manager waits until it expires, and the times from its start include that wait"
        );
    }
}

/// When the manager acquired the Lease (its `spec.acquireTime`, by the manager's clock).
async fn lease_acquired(client: &kube::Client) -> Result<SystemTime, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = leases
        .get_opt(LEASE_NAME)
        .await
        .map_err(|error| format!("reading the Lease {LEASE_NAMESPACE}/{LEASE_NAME}: {error}"))?
        .ok_or(format!("no Lease {LEASE_NAMESPACE}/{LEASE_NAME}"))?;
    let acquired = lease
        .spec
        .and_then(|spec| spec.acquire_time)
        .ok_or(format!(
            "the Lease {LEASE_NAMESPACE}/{LEASE_NAME} has no acquireTime"
        ))?;
    Ok(SystemTime::from(acquired.0))
}

/// The LISTs of nodes and of services (all namespaces or one) a cluster's API server has
/// served, every client's, from its `/metrics`; Err says why they are not known.
async fn server_lists(client: &kube::Client) -> Result<[f64; 2], String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|error| error.to_string())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|error| match error {
            kube::Error::Api(status) => format!(
                "the API server's /metrics answered {} ({})",
                status.code, status.message
            ),
            error => format!("the API server's /metrics: {error}"),
        })?;
    let lists = |resource: &str| {
        let resource = format!("resource=\"{resource}\"");
        text.lines()
            .filter(|line| {
                line.starts_with("apiserver_request_total{")
                    && line.contains("verb=\"LIST\"")
                    && line.contains("group=\"\"")
                    && line.contains("subresource=\"\"")
                    && line.contains(&resource)
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    if !text.contains("apiserver_request_total{") {
        return Err("the API server's /metrics has no apiserver_request_total".into());
    }
    Ok([lists("nodes"), lists("services")])
}

/// Stop the manager as a clean shutdown does (SIGTERM), so it releases the Lease and the
/// next run need not wait for it to expire; kill it after 30 s.
async fn stop(mut manager: Manager) {
    if let Ok(Some(status)) = manager.child.try_wait() {
        eprintln!("scale: the manager had exited before the end ({status})");
        return;
    }
    if crate::terminate(&mut manager.child, Duration::from_secs(30))
        .await
        .is_none()
    {
        eprintln!("scale: the manager did not stop within 30 s of SIGTERM: killed");
    }
}

/// What a run measured; `Display` prints its two tables.
pub struct Report {
    mode: &'static str,
    other_cpu: &'static str,
    pub nodes: usize,
    pub services: usize,
    /// Providers in the manager.
    pub providers: usize,
    latency_ms: u64,
    /// Nodes initialised from the manager's start, load balancers made, 100 more nodes.
    pub phases: Vec<Phase>,
    /// Where the Services' time went in the load-balancer phase.
    pub lb_times: ServiceTimes,
    /// The cloud's own time for the load-balancer phase's requests (seconds, arrival to
    /// response, as the simulator measures it).
    pub lb_cloud_served: f64,
    /// This machine's cores busy in the load-balancer phase, second by second.
    pub lb_busy: Busy,
    created: Duration,
    pub start_up: StartUp,
    pub trailing: Trailing,
    /// The manager's requests over the whole run, as the emulator counted them by client;
    /// `None` on a cluster.
    pub whole_run: Option<ManagerRequests>,
    metadata_calls: f64,
    lb_calls: f64,
    cloud_requests_lbs: usize,
    /// Cloud requests the simulator's log let go before the bench read them (its counts
    /// above miss them).
    cloud_requests_unseen: u64,
    /// After the 100 more nodes: load balancers updated once, more than once, and those
    /// targeting every node.
    pub updated_once: usize,
    pub updated_more: usize,
    pub complete: usize,
    /// The service controllers' node-sync rounds after the added nodes (each one updates
    /// the load balancers whose targets changed since the last).
    churn_rounds: f64,
}

/// Why the emulator's counts by client are not there on a cluster.
const NO_CLIENTS: &str = "not available (only the emulator counts requests by client)";

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Report {
            nodes, services, ..
        } = *self;
        let providers = match self.providers {
            1 => String::new(),
            n => format!(", {n} providers sharing them"),
        };
        writeln!(
            f,
            "On {}: {nodes} nodes, {services} services{providers}, {} ms cloud latency.\n",
            self.mode, self.latency_ms
        )?;
        writeln!(
            f,
            "| phase | wall | manager CPU | {} CPU | API requests by method | writes per Service | writes: state / events / Lease | provider calls | manager peak RSS so far |",
            self.other_cpu
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|")?;
        for phase in &self.phases {
            let per_service = phase.services.map_or(String::new(), |n| {
                format!("{:.2}", phase.writes() / n as f64)
            });
            let requests: Vec<String> = phase
                .requests
                .iter()
                .map(|(method, n)| format!("{method} {n:.0}"))
                .collect();
            let Writes {
                state,
                events,
                lease,
            } = phase.writes_by_client;
            let split = format!("{state:.0} / {events:.0} / {lease:.0}");
            writeln!(
                f,
                "| {} | {:.1} s | {:.1} s | {:.1} s | {} | {per_service} | {split} | {:.0} | {:.0} MiB |",
                phase.name,
                phase.wall.as_secs_f64(),
                phase.manager_cpu,
                phase.bench_cpu,
                requests.join(", "),
                phase.provider_calls,
                phase.peak_rss,
            )?;
        }
        writeln!(f, "\n| measurement | result |\n|---|---|")?;
        writeln!(
            f,
            "| node objects created (before the manager started) in | {:.1} s |",
            self.created.as_secs_f64()
        )?;
        let start_up = &self.start_up;
        writeln!(
            f,
            "| first node initialised after process start, cold (empty cache: compiles) | {:.2} s |",
            start_up.cold_first_after_start
        )?;
        writeln!(
            f,
            "| first node initialised after process start, warm (restart: cache filled) | {:.2} s |",
            start_up.first_after_start
        )?;
        let (acquired, after_lease) = match &start_up.lease_acquired {
            Ok(acquired) => (
                format!("{acquired:.2} s"),
                format!("{:.2} s", start_up.first_after_start - acquired),
            ),
            Err(why) => (
                format!("not available ({why})"),
                format!("not available ({why})"),
            ),
        };
        writeln!(
            f,
            "| first node initialised after the Lease was acquired | {after_lease} |"
        )?;
        writeln!(f, "| Lease acquired after process start | {acquired} |")?;
        let pair = |requests: Option<ManagerRequests>, list: bool| {
            requests.map_or(NO_CLIENTS.to_string(), |r| {
                if list {
                    format!("{} / {}", r.list_nodes, r.list_services)
                } else {
                    format!("{} / {}", r.watch_nodes, r.watch_services)
                }
            })
        };
        let at_start = self.phases[0].served;
        let lists_at_start = match &start_up.server_lists {
            None => pair(at_start, true),
            Some(Ok([nodes, services])) => format!(
                "{nodes:.0} / {services:.0} (the API server's count less the bench's {})",
                start_up.bench_lists
            ),
            Some(Err(why)) => format!("not available ({why})"),
        };
        writeln!(
            f,
            "| LIST nodes / services by the manager, process start to all nodes initialised | {lists_at_start} |"
        )?;
        let watches_at_start = match at_start {
            Some(_) => pair(at_start, false),
            None => "not available (the API server counts a watch when it ends)".into(),
        };
        writeln!(
            f,
            "| WATCH nodes / services by the manager, process start to all nodes initialised | {watches_at_start} |"
        )?;
        writeln!(
            f,
            "| LIST nodes / services by the manager, whole run | {} |",
            pair(self.whole_run, true)
        )?;
        writeln!(
            f,
            "| WATCH nodes / services by the manager, whole run | {} |",
            pair(self.whole_run, false)
        )?;
        writeln!(
            f,
            "| events written after all nodes were initialised, before the Services (POSTs) | {:.0}, the last {:.1} s after |",
            self.trailing.posts,
            self.trailing.wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| nodes initialised per second, from process start | {:.0} |",
            nodes as f64 / self.phases[0].wall.as_secs_f64()
        )?;
        writeln!(
            f,
            "| provider calls per node (instance-metadata) | {:.2} |",
            self.metadata_calls / nodes as f64
        )?;
        writeln!(
            f,
            "| provider calls per service (load-balancer functions) | {:.2} |",
            self.lb_calls / services as f64
        )?;
        writeln!(
            f,
            "| cloud requests while load balancers were made | {} ({:.1} per service) |",
            self.cloud_requests_lbs,
            self.cloud_requests_lbs as f64 / services as f64
        )?;
        if self.cloud_requests_unseen > 0 {
            writeln!(
                f,
                "| cloud requests the simulator's log let go before the bench read them (not counted above) | {} |",
                self.cloud_requests_unseen
            )?;
        }
        writeln!(
            f,
            "| after {} more nodes: load balancers updated once / more than once / targeting every node | {} / {} / {} of {services} |",
            added_nodes(nodes),
            self.updated_once,
            self.updated_more,
            self.complete
        )?;
        writeln!(
            f,
            "| after {} more nodes: the service controllers' node-sync rounds | {} |",
            added_nodes(nodes),
            self.churn_rounds
        )?;
        self.fmt_traffic(f)?;
        self.fmt_lb_profile(f)
    }
}

impl Report {
    /// The bytes of the manager's API requests and responses per object each phase was
    /// about (the request and response bodies, by kind of client).
    fn fmt_traffic(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "\nBytes to / from the API server per object (request / response bodies):\n"
        )?;
        writeln!(
            f,
            "| phase | per | state writes | events | Lease | informers' lists and watches |\n|---|---|---|---|---|---|"
        )?;
        let objects = [
            (self.nodes, "initialised node"),
            (self.services, "ready Service"),
            (added_nodes(self.nodes), "joining node"),
        ];
        for (phase, (count, per)) in self.phases.iter().zip(objects) {
            let count = count.max(1) as f64;
            let pair = |[sent, received]: [f64; 2]| {
                format!("{:.0} / {:.0} B", sent / count, received / count)
            };
            let traffic = &phase.traffic;
            writeln!(
                f,
                "| {} | {per} | {} | {} | {} | {} |",
                phase.name,
                pair(traffic.state),
                pair(traffic.events),
                pair(traffic.lease),
                pair(traffic.informers),
            )?;
        }
        Ok(())
    }

    /// The load-balancer phase's profile: where a Service's time went, per ready Service,
    /// and how busy the machine was meanwhile.
    fn fmt_lb_profile(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let times = &self.lb_times;
        let per = |seconds: f64| match self.services {
            0 => "-".to_string(),
            n => format!("{:.0} ms", seconds * 1000.0 / n as f64),
        };
        let wall = self.phases[1].wall.as_secs_f64();
        writeln!(
            f,
            "\nThe load-balancer phase, per ready Service ({:.1} syncs each, {:.2} `retry-after` answers each):\n",
            times.syncs / self.services.max(1) as f64,
            times.retry_afters / self.services.max(1) as f64,
        )?;
        writeln!(f, "| where the time went | per Service |\n|---|---|")?;
        writeln!(
            f,
            "| queued, waiting for one of the service workers | {} |",
            per(times.queued)
        )?;
        writeln!(f, "| in a worker's syncs | {} |", per(times.syncing))?;
        writeln!(
            f,
            "| of which in provider load-balancer calls | {} |",
            per(times.provider)
        )?;
        writeln!(
            f,
            "| of which in the provider's cloud requests | {} |",
            per(times.cloud)
        )?;
        writeln!(
            f,
            "| of which the cloud's own time (the simulator's, arrival to response, its latency included) | {} |",
            per(self.lb_cloud_served)
        )?;
        writeln!(
            f,
            "| of which in the provider, not waiting on its cloud (sandbox, its CPU, a call slot) | {} |",
            per(times.provider - times.cloud)
        )?;
        writeln!(
            f,
            "| of which in API writes (finalizer and status PATCHes) | {} |",
            per(times.api_writes)
        )?;
        writeln!(
            f,
            "| of which elsewhere in the sync (the manager's own work, checks, locks) | {} |",
            per(times.syncing - times.provider - times.api_writes)
        )?;
        let busy = &self.lb_busy;
        let seconds = busy.per_second.len();
        let mean = busy.per_second.iter().sum::<f64>() / seconds.max(1) as f64;
        let idle_seconds = busy
            .per_second
            .iter()
            .filter(|cores| **cores < busy.cores * 0.9)
            .count();
        writeln!(
            f,
            "| the machine's cores busy, mean over the phase ({:.1} s) | {mean:.2} of {:.0} |",
            wall, busy.cores
        )?;
        writeln!(
            f,
            "| seconds of the phase with under 90 % of the cores busy | {idle_seconds} of {seconds} |"
        )
    }
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i:05}")
}

fn services_api(client: &kube::Client) -> Api<Service> {
    Api::namespaced(client.clone(), NAMESPACE)
}

async fn ensure_namespace(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces
        .get_opt(NAMESPACE)
        .await
        .expect("get the bench namespace")
        .is_none()
    {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": NAMESPACE}}))
                .expect("a Namespace");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("create the bench namespace");
    }
}

async fn create_nodes(
    client: &kube::Client,
    indices: impl IntoIterator<Item = usize>,
    batch: &str,
) {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(indices)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            let mut node = Testbed::kubelet_node(&node_name(i));
            let labels = node.metadata.labels.get_or_insert_default();
            labels.insert(LABEL.into(), "true".into());
            labels.insert(BATCH_LABEL.into(), batch.into());
            // Which of two providers serves it; unread with one.
            labels.insert(HALF_LABEL.into(), ["a", "b"][i % 2].into());
            async move {
                api.create(&PostParams::default(), &node)
                    .await
                    .expect("create node");
            }
        })
        .await;
}

/// Wait until `count` objects listed by `api` with `params` are `done`.
async fn wait_for<K>(
    api: Api<K>,
    params: ListParams,
    what: &str,
    count: usize,
    done: impl Fn(&K) -> bool,
) where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let since = Instant::now();
    loop {
        let list = api.list(&params).await.expect("list");
        let finished = list.items.iter().filter(|item| done(item)).count();
        if finished >= count {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(600),
            "only {finished} of {count} {what} after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Wait until `count` nodes of `batch` are initialised.
async fn wait_nodes_initialised(client: &kube::Client, batch: &str, count: usize) {
    let api: Api<Node> = Api::all(client.clone());
    let params = ListParams::default().labels(&format!("{BATCH_LABEL}={batch}"));
    wait_for(api, params, "nodes initialised", count, |n| {
        !is_uninitialized(n)
    })
    .await;
}

async fn wait_ingress(client: &kube::Client, count: usize) {
    let done = |s: &Service| ingress_ip(s).is_some();
    let params = ListParams::default();
    wait_for(
        services_api(client),
        params,
        "load balancers ready",
        count,
        done,
    )
    .await;
}

/// Leave the cluster as it was: the Services go first, while the manager still runs to
/// delete their load balancers and finalizers; then the Nodes and the namespace.
async fn clean_up(client: &kube::Client, providers: usize) {
    eprintln!("scale: deleting the bench's Services, Nodes and namespace (and CloudProviders)");
    let services = services_api(client);
    services
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("delete the bench's Services");
    let since = Instant::now();
    while !services
        .list(&ListParams::default())
        .await
        .expect("list the bench's Services")
        .items
        .is_empty()
    {
        assert!(
            since.elapsed() < Duration::from_secs(600),
            "the bench's Services are still there after 10 minutes"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Api::<Node>::all(client.clone())
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(LABEL),
        )
        .await
        .expect("delete the bench's Nodes");
    Api::<Namespace>::all(client.clone())
        .delete(NAMESPACE, &DeleteParams::default())
        .await
        .expect("delete the bench namespace");
    if providers == 2 {
        // Their load balancers are gone with the Services; the CRD stays (the cluster may
        // have had it).
        let cloud_providers: Api<wasm_ccm::resource::CloudProvider> = Api::all(client.clone());
        for (resource, ..) in RESOURCES {
            cloud_providers
                .delete(resource, &DeleteParams::default())
                .await
                .expect("delete the bench's CloudProvider");
        }
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), LEASE_NAMESPACE)
            .delete(TOKEN_SECRET, &DeleteParams::default())
            .await
            .expect("delete the bench's token Secret");
    }
}

//! The scale benchmark (`benches/scale.rs`): the `wasm-ccm` binary managing N nodes and M
//! LoadBalancer Services, with simcloud against the cloud simulator at a fixed latency per
//! request, and the tables it prints ([`Report`]).
//!
//! Three phases, each reported with its wall time, the manager's CPU, its API requests by
//! method (and writes per Service), its provider calls and the manager's peak RSS so far:
//! the nodes are created and initialised, then the Services get their load balancers, then
//! 100 more nodes join (each load balancer should be updated exactly once). Also: nodes
//! initialised per second, provider calls per node and per Service, and cloud requests.
//!
//! Two modes ([`Target`]):
//! - the API emulator and the cloud simulator in this process;
//! - a cluster's kubeconfig and a `cloud-sim` started elsewhere (e.g. `cloud-sim --listen
//!   0.0.0.0:8080 --token T`), so the numbers can be reproduced on a real kube-apiserver. The
//!   cluster should run no other cloud-controller-manager; the bench creates its Nodes
//!   (`bench-node-NNNNN`, labelled `wasm-ccm-bench=true`) and Services (in namespace
//!   `wasm-ccm-bench`), and deletes them all at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::https;
use crate::testbed::{ManagerProcess as Manager, Testbed, ingress_ip, is_uninitialized};
use cloud_sim::{Faults, LoadBalancer, LoadBalancerList, NewInstance, RequestList, SimState};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

const ADDED_NODES: usize = 100;
/// Where the bench's Services live.
pub const NAMESPACE: &str = "wasm-ccm-bench";
/// The label on the bench's Nodes.
pub const LABEL: &str = "wasm-ccm-bench";

/// The size of a run and where it runs.
pub struct Settings {
    pub nodes: usize,
    pub services: usize,
    /// Added by the cloud to each request.
    pub latency_ms: u64,
    pub target: Target,
}

impl Settings {
    /// The settings `make bench-scale` reads from the environment (`var` looks one up):
    /// `SCALE_NODES`, `SCALE_SERVICES` and `SCALE_LATENCY_MS` (5000, 1000 and 10 when unset),
    /// and for a remote run `SCALE_KUBECONFIG` with `SCALE_CLOUD_URL` and `SCALE_CLOUD_TOKEN`.
    /// Err says which variable is wrong or missing.
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
        Ok(Settings {
            nodes: number("SCALE_NODES", 5000)? as usize,
            services: number("SCALE_SERVICES", 1000)? as usize,
            latency_ms: number("SCALE_LATENCY_MS", 10)?,
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
            return Setup::Local(Testbed::start().await);
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

    async fn clear_cloud_requests(&self) {
        if let Some(state) = self.local() {
            state.clear_requests();
            return;
        }
        let cloud = self.remote().expect("remote");
        cloud
            .http
            .delete(format!("{}/_admin/requests", cloud.url))
            .send()
            .await
            .expect("clear the cloud's request log");
    }

    /// The cloud requests since the last clear, as (method, path).
    async fn cloud_requests(&self) -> Vec<(String, String)> {
        let records = match self.local() {
            Some(state) => state.requests(),
            None => {
                let cloud = self.remote().expect("remote");
                let list: RequestList = cloud
                    .http
                    .get(format!("{}/_admin/requests", cloud.url))
                    .send()
                    .await
                    .and_then(reqwest::Response::error_for_status)
                    .expect("the cloud's request log")
                    .json()
                    .await
                    .expect("the cloud's request log parses");
                list.requests
            }
        };
        records.into_iter().map(|r| (r.method, r.path)).collect()
    }

    async fn load_balancers(&self) -> Vec<LoadBalancer> {
        if let Some(state) = self.local() {
            return state.load_balancers();
        }
        let cloud = self.remote().expect("remote");
        let list: LoadBalancerList = cloud
            .http
            .get(format!("{}/v1/load-balancers", cloud.url))
            .bearer_auth(&cloud.token)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .expect("the cloud's load balancers")
            .json()
            .await
            .expect("the load-balancer list parses");
        list.load_balancers
    }
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

/// The manager and this process at one moment.
struct Sample {
    at: Instant,
    manager_cpu: f64,
    bench_cpu: f64,
    requests: BTreeMap<String, f64>,
    provider_calls: f64,
}

impl Sample {
    async fn take(manager: &Manager) -> Sample {
        let metrics = Metrics::scrape(manager).await;
        Sample {
            at: Instant::now(),
            manager_cpu: cpu_seconds(manager.child.id()),
            bench_cpu: cpu_seconds(std::process::id()),
            requests: metrics.requests_by_method(),
            provider_calls: metrics.sum("wasm_ccm_provider_calls_total", ""),
        }
    }
}

/// One phase's row: what happened between two samples.
pub struct Phase {
    pub name: String,
    pub wall: Duration,
    pub manager_cpu: f64,
    bench_cpu: f64,
    /// API requests the manager made, by HTTP method.
    pub requests: BTreeMap<String, f64>,
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
        Phase {
            name,
            wall: after.at - before.at,
            manager_cpu: after.manager_cpu - before.manager_cpu,
            bench_cpu: after.bench_cpu - before.bench_cpu,
            requests,
            provider_calls: after.provider_calls - before.provider_calls,
            peak_rss: peak_rss_mib(manager),
            services: None,
        }
    }

    /// API writes: POST, PUT, PATCH and DELETE requests.
    pub fn writes(&self) -> f64 {
        ["POST", "PUT", "PATCH", "DELETE"]
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
        target,
    } = settings;
    let binary = crate::wasm_ccm_binary();
    let setup = Setup::new(target).await;
    let mode = match setup {
        Setup::Local(_) => "the API emulator and the cloud simulator in this process",
        Setup::Remote { .. } => "the given cluster and cloud simulator",
    };
    setup
        .add_instances((0..nodes + ADDED_NODES).map(node_name).collect())
        .await;
    setup.set_latency(latency).await;
    ensure_namespace(setup.client()).await;

    let port = https::free_port();
    let mut args = setup.provider_flags();
    args.extend(
        [
            "--controllers=cloud-node,service".to_string(),
            "--leader-elect=false".into(),
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
    let manager = Manager::spawn(&binary, &args, port, true);
    while https::get(manager.addr, "/healthz").await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("scale: {nodes} nodes, {services} services, {latency} ms cloud latency, on {mode}");
    let client = setup.client();

    let start = Sample::take(&manager).await;
    create_nodes(client, 0..nodes).await;
    let created = start.at.elapsed();
    wait_nodes_initialised(client, nodes).await;
    let nodes_done = Sample::take(&manager).await;
    eprintln!(
        "scale: nodes initialised after {:.1?}",
        nodes_done.at - start.at
    );
    let node_phase = Phase::between(
        format!("{nodes} nodes initialised"),
        &start,
        &nodes_done,
        &manager,
    );

    setup.clear_cloud_requests().await;
    let lb_start = Sample::take(&manager).await;
    futures::stream::iter(0..services)
        .for_each_concurrent(64, |i| {
            let mut service = Testbed::lb_service(&format!("svc-{i:04}"));
            service.metadata.namespace = Some(NAMESPACE.into());
            let api = services_api(client);
            async move {
                api.create(&PostParams::default(), &service)
                    .await
                    .expect("create service");
            }
        })
        .await;
    wait_ingress(client, services).await;
    let lbs_done = Sample::take(&manager).await;
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
    let cloud_requests_lbs = setup.cloud_requests().await.len();

    setup.clear_cloud_requests().await;
    let churn_start = Sample::take(&manager).await;
    create_nodes(client, nodes..nodes + ADDED_NODES).await;
    wait_nodes_initialised(client, nodes + ADDED_NODES).await;
    let targets = nodes + ADDED_NODES;
    let settle = Instant::now();
    while setup
        .load_balancers()
        .await
        .iter()
        .any(|lb| lb.targets.len() != targets)
        && settle.elapsed() < Duration::from_secs(300)
    {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let churn_done = Sample::take(&manager).await;
    let churn_phase = Phase::between(
        format!("+{ADDED_NODES} nodes: every load balancer updated"),
        &churn_start,
        &churn_done,
        &manager,
    );
    let mut updates: BTreeMap<String, usize> = BTreeMap::new();
    for (method, path) in setup.cloud_requests().await {
        if method == "PUT" && path.ends_with("/targets") {
            *updates.entry(path).or_default() += 1;
        }
    }
    let updated_once = updates.values().filter(|n| **n == 1).count();
    let updated_more = updates.values().filter(|n| **n > 1).count();
    let complete = setup
        .load_balancers()
        .await
        .iter()
        .filter(|lb| lb.targets.len() == targets)
        .count();

    let other_cpu = match setup {
        Setup::Local(_) => "emulator + simulator + bench",
        Setup::Remote { .. } => "bench",
    };
    if let Setup::Remote { .. } = setup {
        clean_up(client).await;
    }
    Report {
        mode,
        other_cpu,
        nodes,
        services,
        latency_ms: latency,
        phases: vec![node_phase, lb_phase, churn_phase],
        created,
        metadata_calls,
        lb_calls,
        cloud_requests_lbs,
        updated_once,
        updated_more,
        complete,
    }
}

/// What a run measured; `Display` prints its two tables.
pub struct Report {
    mode: &'static str,
    other_cpu: &'static str,
    pub nodes: usize,
    pub services: usize,
    latency_ms: u64,
    /// Nodes initialised, load balancers made, 100 more nodes.
    pub phases: Vec<Phase>,
    created: Duration,
    metadata_calls: f64,
    lb_calls: f64,
    cloud_requests_lbs: usize,
    /// After the 100 more nodes: load balancers updated once, more than once, and those
    /// targeting every node.
    pub updated_once: usize,
    pub updated_more: usize,
    pub complete: usize,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Report {
            nodes, services, ..
        } = *self;
        writeln!(
            f,
            "On {}: {nodes} nodes, {services} services, {} ms cloud latency.\n",
            self.mode, self.latency_ms
        )?;
        writeln!(
            f,
            "| phase | wall | manager CPU | {} CPU | API requests by method | writes per Service | provider calls | manager peak RSS so far |",
            self.other_cpu
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|")?;
        for phase in &self.phases {
            let per_service = phase.services.map_or(String::new(), |n| {
                format!("{:.2}", phase.writes() / n as f64)
            });
            let requests: Vec<String> = phase
                .requests
                .iter()
                .map(|(method, n)| format!("{method} {n:.0}"))
                .collect();
            writeln!(
                f,
                "| {} | {:.1} s | {:.1} s | {:.1} s | {} | {per_service} | {:.0} | {:.0} MiB |",
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
            "| node objects created in | {:.1} s |",
            self.created.as_secs_f64()
        )?;
        writeln!(
            f,
            "| nodes initialised per second | {:.0} |",
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
        writeln!(
            f,
            "| after {ADDED_NODES} more nodes: load balancers updated once / more than once / targeting every node | {} / {} / {} of {services} |",
            self.updated_once, self.updated_more, self.complete
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

async fn create_nodes(client: &kube::Client, range: std::ops::Range<usize>) {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(range)
        .for_each_concurrent(64, |i| {
            let api = api.clone();
            let mut node = Testbed::kubelet_node(&node_name(i));
            node.metadata
                .labels
                .get_or_insert_default()
                .insert(LABEL.into(), "true".into());
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

async fn wait_nodes_initialised(client: &kube::Client, count: usize) {
    let api: Api<Node> = Api::all(client.clone());
    let params = ListParams::default().labels(LABEL);
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
async fn clean_up(client: &kube::Client) {
    eprintln!("scale: deleting the bench's Services, Nodes and namespace");
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
}

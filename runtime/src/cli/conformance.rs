//! `wasm-ccm provider conformance`: the contract's behavioural rules, run against a provider
//! and its cloud (a real one or a simulator), one row per rule with its evidence.
//!
//! A provider author's question is "does my provider behave as the controllers expect?";
//! this answers it without a cluster. The rules are what the controllers rely on (upstream's
//! `cloudprovider.Interface` semantics and the WIT's comments), and the checks of answers are
//! the manager's own ([`wasm_ccm_host::answers`]): an answer the kit accepts is one the
//! manager writes. What the rules need from the cloud (a node whose instance exists, one
//! whose instance does not, a Service to balance, a route) comes from a fixture file; a
//! section the fixture lacks skips its rules, saying so.
//!
//! The kit makes real cloud resources (a load balancer, a route) and deletes them at the
//! end whatever failed on the way, as the controllers would on the Service's deletion; a
//! run interrupted before its end deletes what it had asked for ([`Made`], [`clean_up`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::provider_cmd::CallRequest;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use wasm_ccm_host::answers::AnswerChecks;
use wasm_ccm_host::contract::{Function, InstanceMetadata, LbStatus, Node, Route, Service};
use wasm_ccm_host::egress::Caller;
use wasm_ccm_host::provider::{Provider, ProviderError};

/// What the rules need from the cloud, read from `--fixture` (YAML or JSON). Nodes, the
/// Service and the route are written as `provider call --args` takes them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Fixture {
    /// The cluster name passed to load-balancer and route calls (`--cluster-name`).
    #[serde(default = "default_cluster_name")]
    pub cluster_name: String,
    /// For the instance rules.
    pub instances: Option<InstancesFixture>,
    /// For the load-balancer rules.
    pub load_balancer: Option<LoadBalancerFixture>,
    /// For the route rules.
    pub routes: Option<RoutesFixture>,
}

fn default_cluster_name() -> String {
    "kubernetes".into()
}

/// Two nodes: one whose instance exists, one whose instance does not.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InstancesFixture {
    /// A node whose instance exists. Give it no providerID to have it found by name, as a
    /// new node is.
    pub existing: Node,
    /// A node whose instance does not exist (never did, or was deleted).
    pub missing: Node,
}

/// A Service to balance and the nodes to send its traffic to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadBalancerFixture {
    /// The Service (`type: LoadBalancer`, ports with node ports). Its load balancer must not
    /// exist when the kit starts.
    pub service: Service,
    /// The nodes of `ensure-load-balancer`.
    pub nodes: Vec<Node>,
    /// The nodes of `update-load-balancer`: another set than `nodes`.
    pub updated_nodes: Vec<Node>,
    /// How long the kit keeps calling again when the provider answers `retry-after`, as the
    /// controller would (e.g. `2m`, `90s`); 2 minutes by default.
    #[serde(default, deserialize_with = "duration")]
    pub retry_for: Option<Duration>,
    /// Where the kit lists the cloud's load balancers itself, to see that a second ensure
    /// made no second one; without it that rule is skipped.
    pub cloud_list: Option<CloudList>,
}

/// A request that lists the cloud's load balancers: a GET of `url` (a POST of `form`, when
/// given) through the provider's egress grants and credentials, whose answer holds an array
/// of them at `items` (JSON), or names each once by the text `each` (any other answer, e.g.
/// XML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloudList {
    /// The listing's URL, e.g. `http://127.0.0.1:8080/v1/load-balancers?cluster=kubernetes`:
    /// best one that lists only the cluster's, so that nothing else changes the count.
    pub url: String,
    /// A form body to POST instead (`application/x-www-form-urlencoded`), as AWS's SDKs send
    /// a Query API's action: `Action=DescribeLoadBalancers&Version=2015-12-01`.
    pub form: Option<String>,
    /// A JSON pointer to the array in the answer (`/loadBalancers`; `""`, the whole answer).
    pub items: Option<String>,
    /// A text the answer holds once per load balancer (`<LoadBalancerArn>`).
    pub each: Option<String>,
}

impl CloudList {
    /// How many load balancers the cloud lists now.
    async fn count(&self, provider: &Provider) -> Result<usize, String> {
        let request = match &self.form {
            None => http::Request::get(&self.url).body(bytes::Bytes::new()),
            Some(form) => http::Request::post(&self.url)
                .header(
                    http::header::CONTENT_TYPE,
                    "application/x-www-form-urlencoded; charset=utf-8",
                )
                .body(bytes::Bytes::from(form.clone())),
        }
        .map_err(|e| format!("cloudList.url {}: {e}", self.url))?;
        let method = request.method().clone();
        let caller = Arc::new(Caller {
            provider: provider.capabilities().name.clone(),
            version: "conformance-kit".into(),
        });
        let (status, body) = provider
            .egress()
            .send(caller, request)
            .await
            .map_err(|e| format!("{method} {}: {e}", self.url))?;
        if !status.is_success() {
            let excerpt: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return Err(format!(
                "{method} {} answered {status}: {excerpt}",
                self.url
            ));
        }
        match (&self.items, &self.each) {
            (Some(items), None) => {
                let answer: Value = serde_json::from_slice(&body)
                    .map_err(|e| format!("{method} {} answered no JSON: {e}", self.url))?;
                answer
                    .pointer(items)
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .ok_or_else(|| {
                        format!(
                            "{method} {} answered no array at cloudList.items {items:?}",
                            self.url
                        )
                    })
            }
            (None, Some(each)) if !each.is_empty() => Ok(String::from_utf8_lossy(&body)
                .matches(each.as_str())
                .count()),
            _ => Err("cloudList needs one of items (a JSON pointer) or each (a text)".into()),
        }
    }
}

/// A route to create and delete.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RoutesFixture {
    /// The route (`targetNode`, `destinationCIDR`); it must not exist when the kit starts.
    pub route: Route,
    /// The `name-hint` of `create-route` (upstream passes the node's UID).
    #[serde(default)]
    pub name_hint: String,
}

/// `retryFor` as the duration flags read it (`90s`, `2m`).
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    super::parse_duration(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(120);

impl Fixture {
    /// Read a fixture file; errors name the file and the field.
    pub fn read(path: &std::path::Path) -> anyhow::Result<Fixture> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--fixture: cannot read {}", path.display()))?;
        let fixture: Fixture = serde_saphyr::from_str(&text)
            .map_err(|error| anyhow::anyhow!("--fixture {}: {error}", path.display()))?;
        fixture
            .check()
            .map_err(|problem| anyhow::anyhow!("--fixture {}: {problem}", path.display()))?;
        Ok(fixture)
    }

    /// What the rules cannot do without. The contract's records read missing fields as
    /// empty (a misspelt key too), so the ones a rule needs are checked by name.
    fn check(&self) -> Result<(), String> {
        let empty = |value: &str, field: &str| match value.is_empty() {
            true => Err(format!("{field} is missing or empty")),
            false => Ok(()),
        };
        if let Some(instances) = &self.instances {
            empty(&instances.existing.name, "instances.existing.name")?;
            empty(&instances.missing.name, "instances.missing.name")?;
        }
        if let Some(lb) = &self.load_balancer {
            empty(&lb.service.name, "loadBalancer.service.name")?;
            empty(&lb.service.namespace, "loadBalancer.service.namespace")?;
            empty(&lb.service.uid, "loadBalancer.service.uid")?;
            if lb.service.ports.is_empty() {
                return Err("loadBalancer.service.ports is missing or empty".into());
            }
            for (list, field) in [(&lb.nodes, "nodes"), (&lb.updated_nodes, "updatedNodes")] {
                for (index, node) in list.iter().enumerate() {
                    empty(&node.name, &format!("loadBalancer.{field}[{index}].name"))?;
                }
            }
            if let Some(list) = &lb.cloud_list {
                empty(&list.url, "loadBalancer.cloudList.url")?;
                match (&list.items, &list.each) {
                    (Some(_), None) => {}
                    (None, Some(each)) => empty(each, "loadBalancer.cloudList.each")?,
                    _ => {
                        return Err(
                            "loadBalancer.cloudList needs exactly one of items (a JSON pointer) or each (a text)"
                                .into(),
                        );
                    }
                }
            }
        }
        if let Some(routes) = &self.routes {
            empty(&routes.route.target_node, "routes.route.targetNode")?;
            empty(
                &routes.route.destination_cidr,
                "routes.route.destinationCidr",
            )?;
        }
        Ok(())
    }
}

/// The verdict of one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
}

/// One rule's row: its name, verdict and what was seen.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub rule: &'static str,
    pub verdict: Verdict,
    pub evidence: String,
}

/// The most bytes of one row's evidence.
const MAX_EVIDENCE: usize = 4096;

/// Every rule's row, in the order run.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    /// `name@sha256:…` of the provider checked.
    pub provider: String,
    pub rules: Vec<Row>,
}

impl Report {
    /// The report when `init` of the provider from `origin` failed with `error`: one failed
    /// `init` row, since no rule can run without the capabilities `init` answers.
    pub fn init_failed(origin: &str, error: &ProviderError) -> Report {
        let mut report = Report {
            provider: origin.to_owned(),
            ..Report::default()
        };
        report.row(
            "init",
            Verdict::Fail,
            format!(
                "answered {} ({error}): no rule can run without capabilities",
                error.outcome()
            ),
        );
        report
    }

    /// A row; its evidence quotes the provider's answers, so it is escaped onto one line and
    /// cut to [`MAX_EVIDENCE`] bytes.
    fn row(&mut self, rule: &'static str, verdict: Verdict, evidence: impl Into<String>) {
        let evidence = wasm_ccm_host::text::escaped(&evidence.into()).into_owned();
        self.rules.push(Row {
            rule,
            verdict,
            evidence: wasm_ccm_host::text::ellipsized(evidence, MAX_EVIDENCE),
        });
    }

    fn check(&mut self, rule: &'static str, passed: bool, evidence: impl Into<String>) -> bool {
        let verdict = if passed { Verdict::Pass } else { Verdict::Fail };
        self.row(rule, verdict, evidence);
        passed
    }

    fn skip(&mut self, rules: &[&'static str], why: &str) {
        for rule in rules {
            self.row(rule, Verdict::Skip, why);
        }
    }

    /// How many rules had `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.rules.iter().filter(|r| r.verdict == verdict).count()
    }

    /// One line per rule, then the totals.
    pub fn render(&self) -> String {
        let width = self.rules.iter().map(|r| r.rule.len()).max().unwrap_or(0);
        let mut text = format!("conformance of {}\n", self.provider);
        for row in &self.rules {
            let verdict = match row.verdict {
                Verdict::Pass => "PASS",
                Verdict::Fail => "FAIL",
                Verdict::Skip => "SKIP",
            };
            text.push_str(&format!(
                "{verdict}  {:width$}  {}\n",
                row.rule, row.evidence
            ));
        }
        text.push_str(&format!(
            "{} passed, {} failed, {} skipped\n",
            self.count(Verdict::Pass),
            self.count(Verdict::Fail),
            self.count(Verdict::Skip)
        ));
        text
    }
}

/// What a run has asked the cloud to make, kept apart from the run so that an interrupted
/// one (its future dropped) still knows what to delete.
#[derive(Debug, Default)]
pub struct Made {
    load_balancer: AtomicBool,
    route: AtomicBool,
}

/// Delete what an interrupted run asked the cloud to make (both deletes are idempotent in
/// the contract, so one that never happened is harmless): a line for each, saying what was
/// deleted or what could not be and must be deleted by hand.
pub async fn clean_up(provider: &Provider, fixture: &Fixture, made: &Made) -> Vec<String> {
    let cluster = fixture.cluster_name.as_str();
    let mut lines = Vec::new();
    if made.load_balancer.load(Ordering::SeqCst)
        && let Some(lb) = &fixture.load_balancer
    {
        let svc = &lb.service;
        let what = format!(
            "the load balancer of Service {}/{}",
            svc.namespace, svc.name
        );
        lines.push(
            match provider.ensure_load_balancer_deleted(cluster, svc).await {
                Ok(()) => format!("deleted {what}"),
                Err(e) => format!(
                    "could not delete {what}: {} ({e}); delete it by hand",
                    e.outcome()
                ),
            },
        );
    }
    if made.route.load(Ordering::SeqCst)
        && let Some(routes) = &fixture.routes
    {
        let route = &routes.route;
        let what = format!(
            "the route to {} via {}",
            route.destination_cidr, route.target_node
        );
        lines.push(match provider.delete_route(cluster, route).await {
            Ok(()) => format!("deleted {what}"),
            Err(e) => format!(
                "could not delete {what}: {} ({e}); delete it by hand",
                e.outcome()
            ),
        });
    }
    lines
}

/// Run every rule against `provider` with `fixture`, noting in `made` what it asks the
/// cloud to make before it asks.
pub async fn run(provider: &Provider, fixture: &Fixture, made: &Made) -> Report {
    let mut report = Report {
        provider: provider.label(),
        ..Report::default()
    };
    let capabilities = provider.capabilities().clone();
    for (declared, interface) in [
        (capabilities.instances, Interface::Instances),
        (capabilities.load_balancer, Interface::LoadBalancer),
        (capabilities.routes, Interface::Routes),
    ] {
        if !declared {
            undeclared(provider, fixture, interface, &mut report).await;
        }
    }
    if capabilities.instances {
        match &fixture.instances {
            Some(instances) => instances_rules(provider, instances, &mut report).await,
            None => report.skip(INSTANCE_RULES, "the fixture has no instances section"),
        }
    }
    if capabilities.load_balancer {
        match &fixture.load_balancer {
            Some(lb) => {
                made.load_balancer.store(true, Ordering::SeqCst);
                load_balancer_rules(provider, &fixture.cluster_name, lb, &mut report).await
            }
            None => report.skip(LB_RULES, "the fixture has no loadBalancer section"),
        }
    }
    if capabilities.routes {
        match &fixture.routes {
            Some(routes) => {
                made.route.store(true, Ordering::SeqCst);
                route_rules(provider, &fixture.cluster_name, routes, &mut report).await
            }
            None => report.skip(ROUTE_RULES, "the fixture has no routes section"),
        }
    }
    report
}

/// An interface of the contract a provider may leave undeclared, and its rule.
#[derive(Clone, Copy)]
enum Interface {
    Instances,
    LoadBalancer,
    Routes,
}

impl Interface {
    /// The interface's name in the WIT.
    fn name(self) -> &'static str {
        match self {
            Interface::Instances => "instances",
            Interface::LoadBalancer => "load-balancer",
            Interface::Routes => "routes",
        }
    }

    /// Its `capabilities/undeclared-*` rule.
    fn undeclared_rule(self) -> &'static str {
        match self {
            Interface::Instances => "capabilities/undeclared-instances-not-implemented",
            Interface::LoadBalancer => "capabilities/undeclared-load-balancer-not-implemented",
            Interface::Routes => "capabilities/undeclared-routes-not-implemented",
        }
    }
}

/// Arguments for calling any function of an interface the provider did not declare, keyed
/// by the WIT's parameter names, as `provider call --args` takes them.
fn probe_args(provider: &str, cluster: &str) -> Map<String, Value> {
    let node = Node {
        name: "conformance-probe".into(),
        provider_id: Some(format!("{provider}://conformance-probe")),
        ..Node::default()
    };
    let service = Service {
        name: "conformance-probe".into(),
        namespace: "default".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        service_type: "LoadBalancer".into(),
        ..Service::default()
    };
    let route = Route {
        target_node: "conformance-probe".into(),
        destination_cidr: "192.0.2.0/24".into(),
        ..Route::default()
    };
    let args = json!({
        "cluster-name": cluster,
        "node": node,
        "svc": service,
        "nodes": [node],
        "route": route,
        "name-hint": "conformance-probe",
    });
    match args {
        Value::Object(args) => args,
        _ => unreachable!("an object"),
    }
}

/// `capabilities/undeclared-*`: every function of an interface the provider does not declare
/// answers `not-implemented` (the host relies on the declaration; an answer would mean the
/// declaration is wrong). The functions are the contract's, as its table lists them.
async fn undeclared(
    provider: &Provider,
    fixture: &Fixture,
    interface: Interface,
    report: &mut Report,
) {
    let probe = probe_args(&provider.capabilities().name, &fixture.cluster_name);
    let mut outcomes = Vec::new();
    for &function in Function::ALL
        .iter()
        .filter(|function| function.interface() == interface.name())
        // It answers a name and has no error to answer, so it cannot say not-implemented
        // (the SDKs answer upstream's default name); the host calls it only for a declared
        // load-balancer.
        .filter(|function| **function != Function::GetLoadBalancerName)
    {
        let args = function
            .params()
            .iter()
            .map(|param| (param.to_string(), probe[*param].clone()))
            .collect();
        let request = CallRequest::with_args(function, args)
            .unwrap_or_else(|e| unreachable!("the probe has every parameter: {e:#}"));
        outcomes.push((function, request.invoke(provider).await.map(drop)));
    }
    let answered: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| !matches!(outcome, Err(e) if e.is_not_implemented()))
        .map(|(function, outcome)| format!("{function} answered {}", outcome_of(outcome)))
        .collect();
    let rule = interface.undeclared_rule();
    if answered.is_empty() {
        report.check(
            rule,
            true,
            format!(
                "{} not declared; each of its functions answered not-implemented",
                interface.name()
            ),
        );
    } else {
        report.check(
            rule,
            false,
            format!(
                "{} not declared, yet {}: declare it in init's capabilities or answer not-implemented",
                interface.name(),
                answered.join("; ")
            ),
        );
    }
}

fn outcome_of<T>(outcome: &Result<T, ProviderError>) -> String {
    match outcome {
        Ok(_) => "a value".into(),
        Err(error) => format!("{} ({error})", error.outcome()),
    }
}

/// A declared function answered `not-implemented`: its rule fails saying so.
fn declared_but(function: Function, error: &ProviderError) -> Option<String> {
    error
        .is_not_implemented()
        .then(|| format!("{function} answered not-implemented, but init declares its interface"))
}

const INSTANCE_RULES: &[&str] = &[
    "instances/exists",
    "instances/missing-does-not-exist",
    "instances/shutdown",
    "instances/metadata-valid",
    "instances/provider-id-stable",
    "instances/metadata-by-name-and-by-provider-id-agree",
    "errors/missing-instance-is-not-found",
];

async fn instances_rules(provider: &Provider, fixture: &InstancesFixture, report: &mut Report) {
    let name = provider.capabilities().name.clone();
    let existing = &fixture.existing;
    let missing = &fixture.missing;

    let exists = provider.instance_exists(existing).await;
    report.check(
        "instances/exists",
        matches!(exists, Ok(true)),
        match &exists {
            Ok(answer) => format!(
                "instance-exists({}) = {answer}; the fixture says it exists",
                existing.name
            ),
            Err(e) => declared_but(Function::InstanceExists, e).unwrap_or_else(|| {
                format!(
                    "instance-exists({}) failed: {}",
                    existing.name,
                    outcome_of(&exists)
                )
            }),
        },
    );

    let gone = provider.instance_exists(missing).await;
    report.check(
        "instances/missing-does-not-exist",
        matches!(gone, Ok(false)),
        match &gone {
            Ok(false) => format!("instance-exists({}) = false", missing.name),
            Ok(true) => format!(
                "instance-exists({}) = true, but the fixture says its instance does not exist",
                missing.name
            ),
            Err(error) => format!(
                "instance-exists({}) answered {}: a missing instance is `false` (the node controller deletes the Node on false, and on an error retries forever)",
                missing.name,
                error.outcome()
            ),
        },
    );

    let shutdown = provider.instance_shutdown(existing).await;
    report.check(
        "instances/shutdown",
        shutdown.is_ok(),
        match &shutdown {
            Ok(answer) => format!("instance-shutdown({}) = {answer}", existing.name),
            Err(e) => declared_but(Function::InstanceShutdown, e).unwrap_or_else(|| {
                format!(
                    "instance-shutdown({}) failed: {}",
                    existing.name,
                    outcome_of(&shutdown)
                )
            }),
        },
    );

    let first = provider.instance_metadata(existing).await;
    let first = match first {
        Ok(metadata) => metadata,
        Err(error) => {
            let why = declared_but(Function::InstanceMetadata, &error).unwrap_or_else(|| {
                format!(
                    "instance-metadata({}) failed: {} ({error})",
                    existing.name,
                    error.outcome()
                )
            });
            report.check("instances/metadata-valid", false, why);
            report.skip(
                &INSTANCE_RULES[4..6],
                "instance-metadata of the existing node failed",
            );
            missing_is_not_found(provider, missing, report).await;
            return;
        }
    };
    let valid = AnswerChecks::default().instance_metadata(&first, &name, existing);
    report.check(
        "instances/metadata-valid",
        valid.is_ok(),
        match &valid {
            Ok(()) => format!(
                "providerID {}, type {:?}, zone {:?}, region {:?}, {} addresses, {} labels: all as the manager accepts them",
                first.provider_id,
                first.instance_type,
                first.zone,
                first.region,
                first.node_addresses.len(),
                first.additional_labels.len()
            ),
            Err(refusals) => format!("the manager would refuse this answer: {refusals}"),
        },
    );

    let again = provider.instance_metadata(existing).await;
    let scheme = format!("{name}://");
    report.check(
        "instances/provider-id-stable",
        matches!(&again, Ok(m) if m.provider_id == first.provider_id)
            && first.provider_id.starts_with(&scheme),
        match &again {
            Ok(m) if m.provider_id != first.provider_id => format!(
                "two calls answered {} and {}: a node's providerID never changes",
                first.provider_id, m.provider_id
            ),
            Ok(_) if !first.provider_id.starts_with(&scheme) => format!(
                "providerID {} does not start with {scheme} (the provider's name, as init answers it)",
                first.provider_id
            ),
            Ok(_) => format!("{} in two calls", first.provider_id),
            Err(error) => format!("the second call failed: {} ({error})", error.outcome()),
        },
    );

    let by_id = Node {
        provider_id: Some(first.provider_id.clone()),
        ..existing.clone()
    };
    let by_name = Node {
        provider_id: None,
        ..existing.clone()
    };
    let (a, b) = (
        provider.instance_metadata(&by_name).await,
        provider.instance_metadata(&by_id).await,
    );
    report.check(
        "instances/metadata-by-name-and-by-provider-id-agree",
        matches!((&a, &b), (Ok(a), Ok(b)) if same_metadata(a, b)),
        match (&a, &b) {
            (Ok(a), Ok(b)) if same_metadata(a, b) => {
                format!(
                    "{} by name and by {} answer the same",
                    existing.name, first.provider_id
                )
            }
            (Ok(a), Ok(b)) => format!(
                "by name: {}; by providerID: {}",
                describe_metadata(a),
                describe_metadata(b)
            ),
            (Err(e), _) => format!("by name (no providerID) failed: {} ({e})", e.outcome()),
            (_, Err(e)) => format!("by providerID failed: {} ({e})", e.outcome()),
        },
    );

    missing_is_not_found(provider, missing, report).await;
}

/// `errors/missing-instance-is-not-found`: metadata of a node whose instance does not exist
/// is `not-found`, never `other` (the controllers tell absence from failure by it).
async fn missing_is_not_found(provider: &Provider, missing: &Node, report: &mut Report) {
    let metadata = provider.instance_metadata(missing).await;
    report.check(
        "errors/missing-instance-is-not-found",
        matches!(&metadata, Err(e) if e.is_not_found()),
        match &metadata {
            Err(e) if e.is_not_found() => format!("instance-metadata({}) = not-found", missing.name),
            Err(e) => format!(
                "instance-metadata({}) answered {} ({e}); a missing instance is not-found",
                missing.name,
                e.outcome()
            ),
            Ok(m) => format!(
                "instance-metadata({}) answered {}, but the fixture says its instance does not exist",
                missing.name, m.provider_id
            ),
        },
    );
}

fn same_metadata(a: &InstanceMetadata, b: &InstanceMetadata) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

fn describe_metadata(m: &InstanceMetadata) -> String {
    serde_json::to_string(m).unwrap_or_default()
}

const LB_RULES: &[&str] = &[
    "load-balancers/name-is-stable",
    "load-balancers/absent-before-ensure",
    "load-balancers/ensure-answers-a-valid-status",
    "load-balancers/get-after-ensure-agrees",
    "load-balancers/ensure-again-is-idempotent",
    "load-balancers/ensure-again-makes-no-second-one",
    "load-balancers/update-with-other-nodes",
    "load-balancers/delete-then-absent",
    "load-balancers/delete-again-succeeds",
];

async fn load_balancer_rules(
    provider: &Provider,
    cluster: &str,
    fixture: &LoadBalancerFixture,
    report: &mut Report,
) {
    let svc = &fixture.service;
    let retry_for = fixture.retry_for.unwrap_or(DEFAULT_RETRY_FOR);
    let nodes: std::sync::Arc<[Node]> = fixture.nodes.clone().into();
    let updated: std::sync::Arc<[Node]> = fixture.updated_nodes.clone().into();

    let names = (
        provider.get_load_balancer_name(cluster, svc).await,
        provider.get_load_balancer_name(cluster, svc).await,
    );
    report.check(
        "load-balancers/name-is-stable",
        matches!(&names, (Ok(a), Ok(b)) if a == b && !a.is_empty()),
        match &names {
            (Ok(a), Ok(b)) if a == b && !a.is_empty() => format!("{a} in two calls"),
            (Ok(a), Ok(b)) => format!("two calls answered {a:?} and {b:?}"),
            (Err(e), _) | (_, Err(e)) => format!("failed: {} ({e})", e.outcome()),
        },
    );

    let before = provider.get_load_balancer(cluster, svc).await;
    let absent = matches!(before, Ok(None));
    report.check(
        "load-balancers/absent-before-ensure",
        absent,
        match &before {
            Ok(None) => "get-load-balancer answered none".to_string(),
            Ok(Some(status)) => format!(
                "get-load-balancer answered {} before any ensure: the fixture's Service must have no load balancer yet",
                describe_status(status)
            ),
            Err(e) => declared_but(Function::GetLoadBalancer, e)
                .unwrap_or_else(|| format!("get-load-balancer failed: {} ({e})", e.outcome())),
        },
    );

    let listed_before = match &fixture.cloud_list {
        Some(list) => Some(list.count(provider).await),
        None => None,
    };
    let ensured = ensure(provider, cluster, svc, &nodes, retry_for).await;
    let listed_after_first = match &fixture.cloud_list {
        Some(list) => Some(list.count(provider).await),
        None => None,
    };
    let status = match &ensured.outcome {
        Ok(status) => {
            let checked = AnswerChecks::default().load_balancer_status(status, svc);
            report.check(
                "load-balancers/ensure-answers-a-valid-status",
                checked.is_ok() && !status.ingress.is_empty(),
                match checked {
                    Ok(()) if status.ingress.is_empty() => format!(
                        "ensure-load-balancer answered no ingress{}: a ready load balancer has one; while provisioning answer retry-after",
                        ensured.retries()
                    ),
                    Ok(()) => format!("{}{}", describe_status(status), ensured.retries()),
                    Err(refusals) => format!("the manager would refuse this status: {refusals}"),
                },
            );
            Some(status.clone())
        }
        Err(e) => {
            let why = declared_but(Function::EnsureLoadBalancer, e).unwrap_or_else(|| {
                format!(
                    "ensure-load-balancer failed: {} ({e}){}",
                    e.outcome(),
                    ensured.retries()
                )
            });
            report.check("load-balancers/ensure-answers-a-valid-status", false, why);
            None
        }
    };

    if let Some(status) = &status {
        let got = provider.get_load_balancer(cluster, svc).await;
        report.check(
            "load-balancers/get-after-ensure-agrees",
            matches!(&got, Ok(Some(got)) if got == status),
            match &got {
                Ok(Some(got)) if got == status => describe_status(got),
                Ok(Some(got)) => format!(
                    "get-load-balancer answered {}, ensure answered {}",
                    describe_status(got),
                    describe_status(status)
                ),
                Ok(None) => "get-load-balancer answered none after ensure".into(),
                Err(e) => format!("get-load-balancer failed: {} ({e})", e.outcome()),
            },
        );
        let second = ensure(provider, cluster, svc, &nodes, retry_for).await;
        report.check(
            "load-balancers/ensure-again-is-idempotent",
            matches!(&second.outcome, Ok(again) if again == status),
            match &second.outcome {
                Ok(again) if again == status => format!("the same status{}", second.retries()),
                Ok(again) => format!(
                    "a second ensure answered {}, the first {}",
                    describe_status(again),
                    describe_status(status)
                ),
                Err(e) => format!("a second ensure failed: {} ({e})", e.outcome()),
            },
        );
        match (&fixture.cloud_list, listed_before, listed_after_first) {
            (Some(list), Some(before), Some(first)) => {
                let second = list.count(provider).await;
                let (passed, evidence) = no_second_load_balancer(before, first, second);
                report.check(
                    "load-balancers/ensure-again-makes-no-second-one",
                    passed,
                    evidence,
                );
            }
            _ => report.skip(
                &["load-balancers/ensure-again-makes-no-second-one"],
                "the fixture's loadBalancer has no cloudList",
            ),
        }
        let update = provider.update_load_balancer(cluster, svc, &updated).await;
        report.check(
            "load-balancers/update-with-other-nodes",
            update.is_ok(),
            match &update {
                Ok(()) => format!(
                    "update-load-balancer with {} nodes succeeded",
                    updated.len()
                ),
                Err(e) => declared_but(Function::UpdateLoadBalancer, e).unwrap_or_else(|| {
                    format!("update-load-balancer failed: {} ({e})", e.outcome())
                }),
            },
        );
    } else {
        report.skip(
            &LB_RULES[3..7],
            "ensure-load-balancer did not answer a status",
        );
    }

    // Deleted whatever failed before: the kit leaks nothing.
    let deleted = provider.ensure_load_balancer_deleted(cluster, svc).await;
    let after = provider.get_load_balancer(cluster, svc).await;
    report.check(
        "load-balancers/delete-then-absent",
        deleted.is_ok() && matches!(after, Ok(None)),
        match (&deleted, &after) {
            (Err(e), _) => {
                declared_but(Function::EnsureLoadBalancerDeleted, e).unwrap_or_else(|| {
                    format!("ensure-load-balancer-deleted failed: {} ({e})", e.outcome())
                })
            }
            (Ok(()), Ok(None)) => "deleted; get-load-balancer answered none".into(),
            (Ok(()), Ok(Some(status))) => format!(
                "deleted, yet get-load-balancer answered {}",
                describe_status(status)
            ),
            (Ok(()), Err(e)) => format!("deleted; get-load-balancer failed: {} ({e})", e.outcome()),
        },
    );
    let again = provider.ensure_load_balancer_deleted(cluster, svc).await;
    report.check(
        "load-balancers/delete-again-succeeds",
        again.is_ok(),
        match &again {
            Ok(()) => "ensure-load-balancer-deleted of a deleted load balancer succeeded".into(),
            Err(e) => format!(
                "answered {} ({e}): deleting what is gone must succeed (the controller would retry forever and keep the Service's finalizer)",
                e.outcome()
            ),
        },
    );
}

/// `load-balancers/ensure-again-makes-no-second-one` from the counts the cloud listed
/// before the first ensure, after it and after the second: the first made one, the second
/// none.
fn no_second_load_balancer(
    before: Result<usize, String>,
    first: Result<usize, String>,
    second: Result<usize, String>,
) -> (bool, String) {
    match (before, first, second) {
        (Ok(before), Ok(first), Ok(second)) if first == before + 1 && second == first => (
            true,
            format!(
                "the cloud lists {before}, {first} after the first ensure, {second} after the second"
            ),
        ),
        (Ok(before), Ok(first), Ok(second)) if first <= before => (
            false,
            format!(
                "the cloud lists {before} before the first ensure and {first} after it (then {second}): cloudList must list the load balancer ensure makes"
            ),
        ),
        (Ok(before), Ok(first), Ok(second)) => (
            false,
            format!(
                "the cloud lists {before} before the first ensure, {first} after it and {second} after the second: an ensure must make one load balancer and find it again"
            ),
        ),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => (false, format!("listing failed: {e}")),
    }
}

/// An ensure, called again after each `retry-after` as the controller does, until
/// `retry_for` has passed.
struct Ensured {
    outcome: Result<LbStatus, ProviderError>,
    retried: u32,
    waited: Duration,
}

impl Ensured {
    /// What the evidence says of the retries, if there were any.
    fn retries(&self) -> String {
        if self.retried == 0 {
            String::new()
        } else {
            format!(
                " (after {} retry-after, {:.1?} waited)",
                self.retried, self.waited
            )
        }
    }
}

async fn ensure(
    provider: &Provider,
    cluster: &str,
    svc: &Service,
    nodes: &std::sync::Arc<[Node]>,
    retry_for: Duration,
) -> Ensured {
    let started = Instant::now();
    let mut retried = 0;
    loop {
        let outcome = provider.ensure_load_balancer(cluster, svc, nodes).await;
        match outcome.as_ref().err().and_then(ProviderError::retry_after) {
            Some(delay) if started.elapsed() + delay <= retry_for => {
                retried += 1;
                tokio::time::sleep(delay).await;
            }
            _ => {
                return Ensured {
                    outcome,
                    retried,
                    waited: started.elapsed(),
                };
            }
        }
    }
}

fn describe_status(status: &LbStatus) -> String {
    let ingress: Vec<String> = status
        .ingress
        .iter()
        .map(|i| match (&i.ip, &i.hostname) {
            (Some(ip), _) => ip.clone(),
            (None, Some(hostname)) => hostname.clone(),
            (None, None) => "(empty ingress)".into(),
        })
        .collect();
    if ingress.is_empty() {
        "no ingress".into()
    } else {
        format!("ingress {}", ingress.join(", "))
    }
}

const ROUTE_RULES: &[&str] = &[
    "routes/create",
    "routes/listed-after-create",
    "routes/create-again-is-idempotent",
    "routes/delete",
    "routes/absent-after-delete",
    "routes/delete-again-succeeds",
];

async fn route_rules(
    provider: &Provider,
    cluster: &str,
    fixture: &RoutesFixture,
    report: &mut Report,
) {
    let route = &fixture.route;
    let hint = &fixture.name_hint;
    let describe = format!("{} via {}", route.destination_cidr, route.target_node);
    let find = |routes: &[Route]| {
        routes
            .iter()
            .find(|r| {
                r.destination_cidr == route.destination_cidr && r.target_node == route.target_node
            })
            .cloned()
    };

    let created = provider.create_route(cluster, hint, route).await;
    let ok = report.check(
        "routes/create",
        created.is_ok(),
        match &created {
            Ok(()) => format!("create-route {describe} succeeded"),
            Err(e) => declared_but(Function::CreateRoute, e).unwrap_or_else(|| {
                format!("create-route {describe} failed: {} ({e})", e.outcome())
            }),
        },
    );
    let listed = provider.list_routes(cluster).await;
    let found = listed.as_deref().ok().and_then(find);
    if ok {
        report.check(
            "routes/listed-after-create",
            found.is_some(),
            match (&listed, &found) {
                (Ok(_), Some(found)) => format!("list-routes has it, named {:?}", found.name),
                (Ok(routes), None) => format!(
                    "list-routes answered {} routes, none {describe}",
                    routes.len()
                ),
                (Err(e), _) => declared_but(Function::ListRoutes, e)
                    .unwrap_or_else(|| format!("list-routes failed: {} ({e})", e.outcome())),
            },
        );
        let again = provider.create_route(cluster, hint, route).await;
        let listed_again = provider.list_routes(cluster).await;
        let copies = listed_again.as_ref().map(|routes| {
            routes
                .iter()
                .filter(|r| {
                    r.destination_cidr == route.destination_cidr
                        && r.target_node == route.target_node
                })
                .count()
        });
        report.check(
            "routes/create-again-is-idempotent",
            again.is_ok() && matches!(copies, Ok(1)),
            match (&again, &copies) {
                (Ok(()), Ok(1)) => "a second create-route succeeded; listed once".into(),
                (Ok(()), Ok(n)) => format!("a second create-route succeeded; listed {n} times"),
                (Err(e), _) => format!("a second create-route failed: {} ({e})", e.outcome()),
                (Ok(()), Err(e)) => format!("list-routes failed: {} ({e})", e.outcome()),
            },
        );
    } else {
        report.skip(&ROUTE_RULES[1..3], "create-route failed");
    }

    // Deleted whatever failed before (the listed route, as the controller deletes it).
    let to_delete = found.unwrap_or_else(|| route.clone());
    let deleted = provider.delete_route(cluster, &to_delete).await;
    let after = provider.list_routes(cluster).await;
    report.check(
        "routes/delete",
        deleted.is_ok(),
        match &deleted {
            Ok(()) => format!("delete-route {describe} succeeded"),
            Err(e) => declared_but(Function::DeleteRoute, e)
                .unwrap_or_else(|| format!("delete-route failed: {} ({e})", e.outcome())),
        },
    );
    report.check(
        "routes/absent-after-delete",
        matches!(&after, Ok(routes) if find(routes).is_none()),
        match &after {
            Ok(routes) if find(routes).is_none() => "list-routes no longer has it".into(),
            Ok(_) => format!("list-routes still has {describe}"),
            Err(e) => format!("list-routes failed: {} ({e})", e.outcome()),
        },
    );
    let again = provider.delete_route(cluster, &to_delete).await;
    report.check(
        "routes/delete-again-succeeds",
        again.is_ok(),
        match &again {
            Ok(()) => "delete-route of a deleted route succeeded".into(),
            Err(e) => format!(
                "answered {} ({e}): deleting what is gone must succeed",
                e.outcome()
            ),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_reads_as_provider_call_takes_its_objects_and_names_a_bad_field() {
        let fixture: Fixture = serde_saphyr::from_str(
            r#"
clusterName: prod
instances:
  existing: {name: node-1}
  missing: {name: gone, providerID: "simcloud://i-gone"}
loadBalancer:
  service:
    name: web
    namespace: default
    uid: 1f0c
    type: LoadBalancer
    ports: [{name: http, protocol: TCP, port: 80, nodePort: 30080}]
  nodes: [{name: node-1, providerID: "simcloud://i-1"}]
  updatedNodes: []
  retryFor: 90s
routes:
  route: {targetNode: node-1, destinationCidr: 10.244.1.0/24}
"#,
        )
        .unwrap();
        assert_eq!(fixture.cluster_name, "prod");
        let lb = fixture.load_balancer.unwrap();
        assert_eq!(lb.service.ports[0].node_port, Some(30080));
        assert_eq!(lb.retry_for, Some(Duration::from_secs(90)));
        assert_eq!(
            fixture.instances.unwrap().missing.provider_id.as_deref(),
            Some("simcloud://i-gone")
        );
        assert_eq!(
            fixture.routes.unwrap().route.destination_cidr,
            "10.244.1.0/24"
        );

        let error = serde_saphyr::from_str::<Fixture>("instances: {existing: {name: a}}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing"), "{error}");
        let error = serde_saphyr::from_str::<Fixture>("loadBalancers: {}")
            .unwrap_err()
            .to_string();
        assert!(error.contains("loadBalancers"), "{error}");
        let error = serde_saphyr::from_str::<Fixture>(
            "loadBalancer: {service: {name: a}, nodes: [], updatedNodes: [], retryFor: soon}",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("is not a duration"), "{error}");
        let misspelt: Fixture = serde_saphyr::from_str(
            "routes: {route: {targetNode: node-1, destinationCIDR: 10.244.1.0/24}}",
        )
        .unwrap();
        assert_eq!(
            misspelt.check().unwrap_err(),
            "routes.route.destinationCidr is missing or empty"
        );
    }

    /// A `cloudList` names exactly one way to count, and a wrong one is refused naming it.
    #[test]
    fn a_cloud_list_takes_items_or_each_and_a_fixture_with_neither_is_refused() {
        let fixture = |list: &str| {
            serde_saphyr::from_str::<Fixture>(&format!(
                "loadBalancer: {{service: {{name: web, namespace: default, uid: u, \
                 ports: [{{port: 80, nodePort: 30080}}]}}, nodes: [], updatedNodes: [], \
                 cloudList: {list}}}"
            ))
            .unwrap()
            .check()
        };
        assert_eq!(
            fixture("{url: 'http://c/lbs', items: /load_balancers}"),
            Ok(())
        );
        assert_eq!(
            fixture("{url: 'http://c/lbs', each: <LoadBalancerArn>}"),
            Ok(())
        );
        for bad in [
            "{url: 'http://c/lbs'}",
            "{url: 'http://c/lbs', items: '', each: x}",
        ] {
            assert!(
                fixture(bad).unwrap_err().contains("exactly one of items"),
                "{bad}"
            );
        }
        assert_eq!(
            fixture("{url: '', items: ''}").unwrap_err(),
            "loadBalancer.cloudList.url is missing or empty"
        );
    }

    /// The first ensure makes one load balancer, the second none; anything else fails,
    /// saying which.
    #[test]
    fn a_second_load_balancer_or_none_at_all_fails_the_listing_rule() {
        let verdict = |counts: [usize; 3]| {
            no_second_load_balancer(Ok(counts[0]), Ok(counts[1]), Ok(counts[2]))
        };
        assert!(verdict([2, 3, 3]).0);
        let (passed, evidence) = verdict([0, 1, 2]);
        assert!(
            !passed && evidence.contains("2 after the second"),
            "{evidence}"
        );
        let (passed, evidence) = verdict([0, 0, 0]);
        assert!(
            !passed && evidence.contains("must list the load balancer"),
            "{evidence}"
        );
        let (passed, evidence) =
            no_second_load_balancer(Ok(0), Err("GET x answered 403 Forbidden".into()), Ok(1));
        assert!(!passed && evidence.contains("403"), "{evidence}");
    }

    #[test]
    fn the_report_has_a_row_per_rule_and_the_totals() {
        let mut report = Report {
            provider: "simcloud@sha256:ab".into(),
            ..Report::default()
        };
        report.check("instances/exists", true, "instance-exists(node-1) = true");
        report.check("routes/create", false, "failed: error (boom)");
        report.skip(&["routes/delete"], "the fixture has no routes section");
        let text = report.render();
        assert!(
            text.contains("PASS  instances/exists  instance-exists(node-1) = true"),
            "{text}"
        );
        assert!(
            text.contains("FAIL  routes/create     failed: error (boom)"),
            "{text}"
        );
        assert!(text.contains("1 passed, 1 failed, 1 skipped"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rules"][1]["verdict"], "fail");
    }
}

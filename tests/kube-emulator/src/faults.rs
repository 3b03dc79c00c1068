//! Fault injection and request accounting, for tests: drop every open
//! watch, fail the next N matching requests with a status code, add
//! latency to every request or to those matching a method and path, make
//! the next N updates of a resource conflict; and count
//! requests per verb and resource, per user agent, and per authenticated
//! user (the kubeconfig's admin, or a service account whose token made the
//! request), and those refused with 401 or 403. Driven from the library or
//! from `/_emulator/faults` and `/_emulator/requests`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::status::{ApiError, reason_for_code};

/// Fail the next `count` requests that match, with `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailRule {
    pub count: u32,
    /// HTTP status of the injected failure, e.g. 500 or 503.
    pub status: u16,
    /// Only requests with this method (`GET`, `PATCH`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Only requests whose path and query contain this (e.g. `watch=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_contains: Option<String>,
    /// The Status message; a default one names the injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl FailRule {
    /// Fails the next `count` requests of any kind with `status`.
    pub fn new(count: u32, status: u16) -> FailRule {
        FailRule {
            count,
            status,
            method: None,
            path_contains: None,
            message: None,
        }
    }

    /// Only requests with this HTTP method.
    pub fn method(mut self, method: &str) -> FailRule {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only requests whose path and query contain `fragment`.
    pub fn path_contains(mut self, fragment: &str) -> FailRule {
        self.path_contains = Some(fragment.to_owned());
        self
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        matches(
            self.method.as_deref(),
            self.path_contains.as_deref(),
            method,
            path,
        )
    }
}

/// Whether a request with `method` to `path` (with its query) is one a rule with these
/// filters is about; `None` matches anything.
fn matches(want_method: Option<&str>, fragment: Option<&str>, method: &str, path: &str) -> bool {
    want_method.is_none_or(|m| m.eq_ignore_ascii_case(method))
        && fragment.is_none_or(|p| path.contains(p))
}

/// Delay every request that matches by `ms`, until cleared or set again with the same
/// filters (0 removes it): a slow endpoint among fast ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DelayRule {
    pub ms: u64,
    /// Only requests with this method (`POST`, `PATCH`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Only requests whose path and query contain this (e.g. `/events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_contains: Option<String>,
}

impl DelayRule {
    /// Delays every request by `latency`, until cleared.
    pub fn new(latency: Duration) -> DelayRule {
        DelayRule {
            ms: u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
            method: None,
            path_contains: None,
        }
    }

    /// Only requests with this HTTP method.
    pub fn method(mut self, method: &str) -> DelayRule {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only requests whose path and query contain `fragment`.
    pub fn path_contains(mut self, fragment: &str) -> DelayRule {
        self.path_contains = Some(fragment.to_owned());
        self
    }

    fn same_filters(&self, other: &DelayRule) -> bool {
        self.method == other.method && self.path_contains == other.path_contains
    }

    fn matches(&self, method: &str, path: &str) -> bool {
        matches(
            self.method.as_deref(),
            self.path_contains.as_deref(),
            method,
            path,
        )
    }
}

/// The faults in force, as `GET /_emulator/faults` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultState {
    pub failures: Vec<FailRule>,
    pub latency_ms: u64,
    /// Latency of the requests that match a method or path, beyond `latency_ms`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delays: Vec<DelayRule>,
    /// Resource (`nodes`, `nodes/status`, `leases.coordination.k8s.io`) →
    /// how many more updates and patches of it answer 409.
    pub conflicts: BTreeMap<String, u32>,
    /// How many times all watches were dropped.
    pub watch_drops: u64,
}

/// A command for `POST /_emulator/faults`, e.g. `"dropWatches"`,
/// `{"failNext": {"count": 2, "status": 500, "method": "GET"}}`,
/// `{"latency": {"ms": 50}}` (every request), `{"latency": {"ms": 2000, "method": "POST",
/// "pathContains": "/events"}}` (those that match; each matching rule adds its delay),
/// `{"conflictNext": {"resource": "nodes", "count": 1}}` or `"clear"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FaultCommand {
    DropWatches,
    FailNext(FailRule),
    Latency(DelayRule),
    ConflictNext { resource: String, count: u32 },
    Clear,
}

/// Handle on the fault controls. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
    drops: Arc<watch::Sender<u64>>,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            state: Arc::default(),
            drops: Arc::new(watch::channel(0).0),
        }
    }
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Cuts every open watch connection now, without a clean end.
    pub fn drop_watches(&self) {
        let drops = {
            let mut state = self.lock();
            state.watch_drops += 1;
            state.watch_drops
        };
        self.drops.send_replace(drops);
    }

    /// Fails the next requests matching `rule`.
    pub fn fail_next(&self, rule: FailRule) {
        self.lock().failures.push(rule);
    }

    /// Delays every API request by `latency` (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
    }

    /// Delays the requests `rule` matches by its `ms`, in place of an earlier rule with the
    /// same method and path (0 removes that rule); a rule matching everything is
    /// [`Faults::set_latency`].
    pub fn delay(&self, mut rule: DelayRule) {
        if let Some(method) = &mut rule.method {
            method.make_ascii_uppercase();
        }
        if rule.method.is_none() && rule.path_contains.is_none() {
            return self.set_latency(Duration::from_millis(rule.ms));
        }
        let mut state = self.lock();
        state.delays.retain(|held| !held.same_filters(&rule));
        if rule.ms > 0 {
            state.delays.push(rule);
        }
    }

    /// Makes the next `count` updates and patches of `resource` answer 409
    /// Conflict. `resource` is the plural, with `.group` outside the core
    /// group and `/status` for the status subresource.
    pub fn conflict_next_updates(&self, resource: &str, count: u32) {
        *self
            .lock()
            .conflicts
            .entry(resource.to_owned())
            .or_default() += count;
    }

    /// Removes every fault (watch drops already done stay done).
    pub fn clear(&self) {
        let mut state = self.lock();
        state.failures.clear();
        state.conflicts.clear();
        state.latency_ms = 0;
        state.delays.clear();
    }

    /// The faults in force.
    pub fn state(&self) -> FaultState {
        self.lock().clone()
    }

    /// Applies a command from the admin endpoint.
    pub fn apply(&self, command: FaultCommand) {
        match command {
            FaultCommand::DropWatches => self.drop_watches(),
            FaultCommand::FailNext(rule) => self.fail_next(rule),
            FaultCommand::Latency(rule) => self.delay(rule),
            FaultCommand::ConflictNext { resource, count } => {
                self.conflict_next_updates(&resource, count)
            }
            FaultCommand::Clear => self.clear(),
        }
    }

    /// How long to hold a request with `method` to `path` (and query) before answering.
    pub(crate) fn latency(&self, method: &str, path: &str) -> Duration {
        let state = self.lock();
        let matching = state
            .delays
            .iter()
            .filter(|rule| rule.matches(method, path))
            .fold(0, |ms: u64, rule| ms.saturating_add(rule.ms));
        Duration::from_millis(state.latency_ms.saturating_add(matching))
    }

    /// The injected failure for this request, if one is due.
    pub(crate) fn take_failure(&self, method: &str, path: &str) -> Option<ApiError> {
        let mut state = self.lock();
        let at = state
            .failures
            .iter()
            .position(|r| r.count > 0 && r.matches(method, path))?;
        let rule = &mut state.failures[at];
        rule.count -= 1;
        let error = ApiError::Injected {
            code: rule.status,
            message: rule.message.clone().unwrap_or_else(|| {
                format!(
                    "injected fault: {} ({})",
                    reason_for_code(rule.status),
                    rule.status
                )
            }),
        };
        if rule.count == 0 {
            state.failures.remove(at);
        }
        Some(error)
    }

    /// Whether this update of `resource` must conflict.
    pub(crate) fn take_conflict(&self, resource: &str) -> bool {
        let mut state = self.lock();
        match state.conflicts.get_mut(resource) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    state.conflicts.remove(resource);
                }
                true
            }
            _ => false,
        }
    }

    /// Changes each time all watches are dropped.
    pub(crate) fn drops(&self) -> watch::Receiver<u64> {
        self.drops.subscribe()
    }
}

/// A request's user agent, user, verb and resource.
type RequestKey = (String, String, String, String);

type Tally = Arc<Mutex<BTreeMap<RequestKey, u64>>>;

/// API requests seen, per user agent, user, verb and resource.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    counts: Tally,
    /// Requests refused with 403.
    forbidden: Tally,
    /// Requests refused with 401, per user agent.
    refused: Arc<Mutex<BTreeMap<String, u64>>>,
}

/// A snapshot of the request counts (see [`crate::Emulator::requests`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCounts {
    /// `"verb resource"` (e.g. `"patch nodes/status"`) → count.
    pub counts: BTreeMap<String, u64>,
    /// The same per `User-Agent` header (`""` for none) → `"verb resource"` → count, so a
    /// test sees which client of a process made which requests.
    pub by_user_agent: BTreeMap<String, BTreeMap<String, u64>>,
    /// The same per authenticated user → `"verb resource"` → count: [`crate::ADMIN_USER`]
    /// for the kubeconfig's token, `system:serviceaccount:NAMESPACE:NAME` for a token
    /// the `serviceaccounts/NAME/token` subresource issued. A request refused with 401
    /// or 403 is not counted.
    pub by_user: BTreeMap<String, BTreeMap<String, u64>>,
    /// API requests refused with 401 (no token, an unknown one, or an expired one), per
    /// user agent.
    pub unauthorized: BTreeMap<String, u64>,
    /// API requests refused with 403 because the user may not make them (see
    /// [`crate::Authorization::Rbac`]), per user → `"verb resource"` → count (`"post
    /// /api"` for a path).
    pub forbidden: BTreeMap<String, BTreeMap<String, u64>>,
    /// Every count with its user agent and user, for [`RequestCounts::client`] and
    /// [`RequestCounts::user`].
    #[serde(skip)]
    detail: BTreeMap<RequestKey, u64>,
    /// The same of the requests refused with 403.
    #[serde(skip)]
    forbidden_detail: BTreeMap<RequestKey, u64>,
}

impl RequestCounts {
    fn from_detail(
        detail: BTreeMap<RequestKey, u64>,
        forbidden_detail: BTreeMap<RequestKey, u64>,
        unauthorized: BTreeMap<String, u64>,
    ) -> RequestCounts {
        let mut snapshot = RequestCounts {
            unauthorized,
            ..RequestCounts::default()
        };
        for ((_, user, verb, resource), n) in &forbidden_detail {
            *snapshot
                .forbidden
                .entry(user.clone())
                .or_default()
                .entry(format!("{verb} {resource}"))
                .or_default() += n;
        }
        snapshot.forbidden_detail = forbidden_detail;
        for ((agent, user, verb, resource), n) in &detail {
            let key = format!("{verb} {resource}");
            *snapshot.counts.entry(key.clone()).or_default() += n;
            for (by, name) in [
                (&mut snapshot.by_user_agent, agent),
                (&mut snapshot.by_user, user),
            ] {
                *by.entry(name.clone())
                    .or_default()
                    .entry(key.clone())
                    .or_default() += n;
            }
        }
        snapshot.detail = detail;
        snapshot
    }

    /// Requests with this verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`) on this resource (`nodes`,
    /// `nodes/status`, `leases.coordination.k8s.io`).
    pub fn get(&self, verb: &str, resource: &str) -> u64 {
        self.counts
            .get(&format!("{verb} {resource}"))
            .copied()
            .unwrap_or(0)
    }

    /// All requests with this verb, on any resource.
    pub fn verb(&self, verb: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.split(' ').next() == Some(verb))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Requests with this verb on this resource refused with 403, whoever made them.
    pub fn denied(&self, verb: &str, resource: &str) -> u64 {
        let key = format!("{verb} {resource}");
        self.forbidden
            .values()
            .filter_map(|counts| counts.get(&key))
            .sum()
    }

    /// The requests of one client: those whose user agent is `client`, or ends with it
    /// after a space or a `/` (`wasm-ccm/0.1.0 (linux/amd64) node-controller`, or
    /// client-go's `…/node-controller`), so `node-controller` does not match
    /// `cloud-node-controller`. Its `by_user` says as whom that client called, its
    /// `unauthorized` and `forbidden` how often it was refused.
    pub fn client(&self, client: &str) -> RequestCounts {
        let named = |agent: &str| {
            agent == client
                || agent
                    .strip_suffix(client)
                    .is_some_and(|rest| rest.ends_with(' ') || rest.ends_with('/'))
        };
        let mut counts = self.filter(|agent, _| named(agent));
        counts.unauthorized = self
            .unauthorized
            .iter()
            .filter(|(agent, _)| named(agent))
            .map(|(agent, n)| (agent.clone(), *n))
            .collect();
        counts
    }

    /// The requests `user` made (`system:serviceaccount:kube-system:node-controller`,
    /// [`crate::ADMIN_USER`]). Its `by_user_agent` says which clients called as that user.
    pub fn user(&self, user: &str) -> RequestCounts {
        self.filter(|_, by| by == user)
    }

    fn filter(&self, keep: impl Fn(&str, &str) -> bool) -> RequestCounts {
        let kept = |detail: &BTreeMap<RequestKey, u64>| {
            detail
                .iter()
                .filter(|((agent, user, _, _), _)| keep(agent, user))
                .map(|(key, n)| (key.clone(), *n))
                .collect()
        };
        RequestCounts::from_detail(
            kept(&self.detail),
            kept(&self.forbidden_detail),
            BTreeMap::new(),
        )
    }
}

impl Requests {
    pub(crate) fn refuse(&self, user_agent: &str) {
        *self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(user_agent.to_owned())
            .or_default() += 1;
    }

    pub(crate) fn record(&self, user_agent: &str, user: &str, verb: &str, resource: &str) {
        tally(&self.counts, user_agent, user, verb, resource);
    }

    /// Counts a request refused with 403.
    pub(crate) fn forbid(&self, user_agent: &str, user: &str, verb: &str, resource: &str) {
        tally(&self.forbidden, user_agent, user, verb, resource);
    }

    pub fn snapshot(&self) -> RequestCounts {
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        RequestCounts::from_detail(
            locked(&self.counts).clone(),
            locked(&self.forbidden).clone(),
            refused,
        )
    }

    pub fn reset(&self) {
        locked(&self.counts).clear();
        locked(&self.forbidden).clear();
        self.refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

fn locked(tally: &Tally) -> MutexGuard<'_, BTreeMap<RequestKey, u64>> {
    tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn tally(tally: &Tally, user_agent: &str, user: &str, verb: &str, resource: &str) {
    *locked(tally)
        .entry((
            user_agent.to_owned(),
            user.to_owned(),
            verb.to_owned(),
            resource.to_owned(),
        ))
        .or_default() += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_consumed_in_order() {
        let faults = Faults::default();
        faults.fail_next(FailRule::new(2, 503).method("get").path_contains("/nodes"));
        assert!(faults.take_failure("PUT", "/api/v1/nodes/a").is_none());
        assert_eq!(
            faults
                .take_failure("GET", "/api/v1/nodes")
                .map(|e| e.code()),
            Some(503)
        );
        assert!(faults.take_failure("GET", "/api/v1/nodes").is_some());
        assert!(faults.take_failure("GET", "/api/v1/nodes").is_none());
    }

    #[test]
    fn requests_are_counted_per_user_agent_client_and_user() {
        let requests = Requests::default();
        let lifecycle_sa = "system:serviceaccount:kube-system:node-controller";
        for _ in 0..2 {
            requests.record(
                "wasm-ccm/0.1.0 (linux/amd64) node-controller",
                lifecycle_sa,
                "delete",
                "nodes",
            );
        }
        requests.record(
            "wasm-ccm/0.1.0 (linux/amd64) cloud-node-controller",
            lifecycle_sa,
            "update",
            "nodes",
        );
        requests.record(
            "kubectl/v1.33.0 (linux/amd64) kubernetes/abc/node-controller",
            "admin",
            "get",
            "nodes",
        );
        requests.record("", "", "list", "nodes");
        let counts = requests.snapshot();
        assert_eq!(counts.total(), 5);
        assert_eq!(counts.get("delete", "nodes"), 2);
        let lifecycle = counts.client("node-controller");
        assert_eq!(lifecycle.get("delete", "nodes"), 2);
        assert_eq!(lifecycle.get("get", "nodes"), 1);
        assert_eq!(
            lifecycle.get("update", "nodes"),
            0,
            "cloud-node-controller is another client"
        );
        assert_eq!(
            lifecycle.by_user.keys().collect::<Vec<_>>(),
            [&"admin".to_string(), &lifecycle_sa.to_string()]
        );
        assert_eq!(counts.client("cloud-node-controller").total(), 1);
        let account = counts.user(lifecycle_sa);
        assert_eq!(account.total(), 3);
        assert_eq!(account.by_user_agent.len(), 2);
        assert_eq!(
            account
                .client("cloud-node-controller")
                .get("update", "nodes"),
            1
        );
        assert_eq!(counts.by_user_agent[""].get("list nodes"), Some(&1));
        assert_eq!(counts.by_user[""].get("list nodes"), Some(&1));
        requests.refuse("wasm-ccm/0.1.0 (linux/amd64) node-controller");
        let refused = requests.snapshot().client("node-controller").unauthorized;
        assert_eq!(refused.values().sum::<u64>(), 1);
        requests.forbid(
            "wasm-ccm/0.1.0 (linux/amd64) node-controller",
            lifecycle_sa,
            "patch",
            "nodes/status",
        );
        let counts = requests.snapshot();
        assert_eq!(counts.denied("patch", "nodes/status"), 1);
        assert_eq!(
            counts.get("patch", "nodes/status"),
            0,
            "a refusal is no request served"
        );
        assert_eq!(
            counts.user(lifecycle_sa).forbidden[lifecycle_sa]["patch nodes/status"],
            1
        );
        assert!(counts.client("cloud-node-controller").forbidden.is_empty());
        requests.reset();
        assert_eq!(requests.snapshot(), RequestCounts::default());
    }

    #[test]
    fn delays_hold_only_the_requests_they_match() {
        let faults = Faults::default();
        let command: FaultCommand = serde_json::from_str(
            r#"{"latency":{"ms":2000,"method":"POST","pathContains":"/events"}}"#,
        )
        .unwrap();
        assert_eq!(
            command,
            FaultCommand::Latency(
                DelayRule::new(Duration::from_secs(2))
                    .method("POST")
                    .path_contains("/events")
            )
        );
        faults.apply(command);
        let events = "/apis/events.k8s.io/v1/namespaces/default/events";
        assert_eq!(faults.latency("POST", events), Duration::from_secs(2));
        assert_eq!(faults.latency("PATCH", events), Duration::ZERO);
        assert_eq!(faults.latency("POST", "/api/v1/nodes"), Duration::ZERO);
        faults.set_latency(Duration::from_millis(50));
        assert_eq!(faults.latency("POST", events), Duration::from_millis(2050));
        assert_eq!(
            faults.latency("GET", "/api/v1/nodes"),
            Duration::from_millis(50)
        );
        faults.apply(
            serde_json::from_str(
                r#"{"latency":{"ms":10,"method":"post","pathContains":"/events"}}"#,
            )
            .unwrap(),
        );
        assert_eq!(
            faults.latency("POST", events),
            Duration::from_millis(60),
            "the same filters replace the rule"
        );
        let plain: FaultCommand = serde_json::from_str(r#"{"latency":{"ms":0}}"#).unwrap();
        faults.apply(plain);
        assert_eq!(faults.latency("GET", "/api/v1/nodes"), Duration::ZERO);
        assert_eq!(
            faults.state().delays.len(),
            1,
            "a plain latency leaves the rules"
        );
        faults.clear();
        assert_eq!(faults.latency("POST", events), Duration::ZERO);
    }

    #[test]
    fn commands_parse_from_json() {
        let cmd: FaultCommand = serde_json::from_str(
            r#"{"failNext":{"count":1,"status":500,"pathContains":"leases"}}"#,
        )
        .unwrap();
        assert_eq!(
            cmd,
            FaultCommand::FailNext(FailRule::new(1, 500).path_contains("leases"))
        );
        let cmd: FaultCommand = serde_json::from_str(r#""dropWatches""#).unwrap();
        assert_eq!(cmd, FaultCommand::DropWatches);
        let faults = Faults::default();
        faults.apply(FaultCommand::ConflictNext {
            resource: "nodes".into(),
            count: 1,
        });
        assert!(faults.take_conflict("nodes"));
        assert!(!faults.take_conflict("nodes"));
    }
}

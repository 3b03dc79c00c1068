//! The simulated cloud's state and its rules: instances, load balancers
//! (with lazy provisioning), routes, plus the fault knobs and request log.
//! [`SimState`] is the shared, cloneable handle the HTTP handlers and tests
//! both use.
//!
//! Load balancers become active lazily: every access first promotes those
//! whose provisioning time has elapsed, in creation order, so addresses are
//! handed out deterministically.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::SimOptions;
use crate::error::ApiError;
use crate::faults::{FaultState, Faults};
use crate::model::{
    Instance, InstanceStatus, LoadBalancer, LoadBalancerStatus, LoadBalancerUpdate, NewInstance,
    NewLoadBalancer, NewRoute, Route, StateSnapshot, TargetCount, TargetCounts,
};
use crate::requests::{RequestList, RequestLog, RequestRecord};
use crate::rng::Rng;
use crate::validate;

/// A cheap, cloneable handle on the simulator's state.
#[derive(Clone, Debug)]
pub struct SimState {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    token: Token,
    model: Mutex<Model>,
    faults: Mutex<FaultState>,
    log: Mutex<RequestLog>,
    next_seq: AtomicU64,
}

/// The bearer token, kept out of `Debug` output.
struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Locks `mutex`, carrying on if a panicking thread poisoned it: every
/// mutation below leaves the model consistent before it can panic.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SimState {
    pub(crate) fn new(options: &SimOptions) -> SimState {
        let model = Model::new(options);
        SimState {
            shared: Arc::new(Shared {
                token: Token(options.token.clone()),
                model: Mutex::new(model),
                faults: Mutex::new(FaultState::new()),
                log: Mutex::new(RequestLog::default()),
                next_seq: AtomicU64::new(1),
            }),
        }
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        let mut model = lock(&self.shared.model);
        model.promote(Instant::now());
        model
    }

    // ---- test-facing API -------------------------------------------------

    /// Creates a running instance, as `POST /v1/instances` would.
    ///
    /// # Panics
    /// If `new` is rejected (see [`SimState::try_add_instance`]); this is a
    /// test helper, and a bad fixture should fail the test loudly.
    pub fn add_instance(&self, new: NewInstance) -> Instance {
        self.try_add_instance(new)
            .unwrap_or_else(|err| panic!("add_instance: {err}"))
    }

    /// Creates a running instance, or says why not (422 invalid field, 409
    /// duplicate name or private IP).
    pub fn try_add_instance(&self, new: NewInstance) -> Result<Instance, ApiError> {
        self.model().add_instance(new)
    }

    /// Forces an instance into `status`, bypassing the API's rules (a deleted
    /// instance can be revived). Returns false for an unknown id.
    pub fn set_instance_status(&self, id: &str, status: InstanceStatus) -> bool {
        self.model()
            .instance_mut(id)
            .map(|instance| instance.status = status)
            .is_ok()
    }

    /// Gives an instance a new public IP, as when an elastic address is attached or
    /// released out of band. Returns false for an unknown id.
    pub fn set_public_ip(&self, id: &str, public_ip: Option<String>) -> bool {
        self.model()
            .instance_mut(id)
            .map(|instance| instance.public_ip = public_ip)
            .is_ok()
    }

    /// Terminates an instance. Returns false for an unknown id.
    pub fn delete_instance(&self, id: &str) -> bool {
        self.model().delete_instance(id).is_ok()
    }

    /// Every instance ever created, deleted ones included, oldest first.
    pub fn instances(&self) -> Vec<Instance> {
        self.model().instances.clone()
    }

    /// Every load balancer, oldest first.
    pub fn load_balancers(&self) -> Vec<LoadBalancer> {
        self.model().load_balancers()
    }

    /// How many targets each load balancer has, oldest first.
    pub fn target_counts(&self) -> TargetCounts {
        let model = self.model();
        TargetCounts {
            load_balancers: model
                .load_balancers
                .iter()
                .map(|entry| TargetCount {
                    id: entry.lb.id.clone(),
                    name: entry.lb.name.clone(),
                    targets: entry.lb.targets.len(),
                })
                .collect(),
        }
    }

    /// Every route with `blackhole` computed now, oldest first.
    pub fn routes(&self) -> Vec<Route> {
        self.model().routes(None)
    }

    /// Deletes a load balancer out of band, as a user would in a console.
    /// Returns false for an unknown id.
    pub fn delete_load_balancer(&self, id: &str) -> bool {
        self.model().delete_load_balancer(id).is_ok()
    }

    /// Everything at once, as `GET /_admin/state` shows it.
    pub fn snapshot(&self) -> StateSnapshot {
        let model = self.model();
        StateSnapshot {
            instances: model.instances.clone(),
            load_balancers: model.load_balancers(),
            routes: model.routes(None),
        }
    }

    /// The request log, in arrival order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).records()
    }

    /// The requests logged at position `from` or later (in the order they completed), sorted
    /// by `seq`, with the position to read from next and how many of them the log no longer
    /// holds.
    pub fn requests_from(&self, from: u64) -> RequestList {
        lock(&self.shared.log).from(from)
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.log).clear();
    }

    /// Replaces the fault knobs (not validated; see [`Faults::validate`]).
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.shared.faults).set(faults);
    }

    /// The current knobs; `fail_next` and `throttle_next` count down as used.
    pub fn faults(&self) -> Faults {
        lock(&self.shared.faults).faults()
    }

    // ---- gateway ---------------------------------------------------------

    pub(crate) fn token_matches(&self, presented: &str) -> bool {
        presented == self.shared.token.0
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.shared.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn record(&self, record: RequestRecord) {
        lock(&self.shared.log).push(record);
    }

    pub(crate) fn fault_latency(&self) -> Duration {
        lock(&self.shared.faults).latency()
    }

    pub(crate) fn decide_fault(&self) -> Option<ApiError> {
        lock(&self.shared.faults).decide(Instant::now())
    }

    // ---- REST API --------------------------------------------------------

    pub(crate) fn list_instances(&self, name: Option<&str>) -> Vec<Instance> {
        let model = self.model();
        let live = model
            .instances
            .iter()
            .filter(|i| i.status != InstanceStatus::Deleted);
        live.filter(|i| name.is_none_or(|name| i.name == name))
            .cloned()
            .collect()
    }

    pub(crate) fn instance(&self, id: &str) -> Result<Instance, ApiError> {
        self.model().instance(id).cloned()
    }

    /// Starts or stops an instance; deleted instances cannot change.
    pub(crate) fn transition_instance(
        &self,
        id: &str,
        status: InstanceStatus,
    ) -> Result<Instance, ApiError> {
        let mut model = self.model();
        let instance = model.instance_mut(id)?;
        if instance.status == InstanceStatus::Deleted {
            return Err(ApiError::conflict(format!("instance {id:?} is deleted")));
        }
        instance.status = status;
        Ok(instance.clone())
    }

    pub(crate) fn terminate_instance(&self, id: &str) -> Result<(), ApiError> {
        self.model().delete_instance(id)
    }

    pub(crate) fn list_load_balancers(
        &self,
        name: Option<&str>,
        cluster: Option<&str>,
    ) -> Vec<LoadBalancer> {
        // Filter before cloning: a thousand load balancers with thousands of targets each
        // would otherwise be copied for every lookup by name.
        self.model()
            .load_balancers
            .iter()
            .map(|entry| &entry.lb)
            .filter(|lb| name.is_none_or(|name| lb.name == name))
            .filter(|lb| cluster.is_none_or(|cluster| lb.cluster == cluster))
            .cloned()
            .collect()
    }

    pub(crate) fn load_balancer(&self, id: &str) -> Result<LoadBalancer, ApiError> {
        let model = self.model();
        let index = model.lb_index(id)?;
        Ok(model.load_balancers[index].lb.clone())
    }

    pub(crate) fn create_load_balancer(
        &self,
        new: NewLoadBalancer,
    ) -> Result<LoadBalancer, ApiError> {
        self.model().create_load_balancer(new)
    }

    pub(crate) fn update_load_balancer(
        &self,
        id: &str,
        update: LoadBalancerUpdate,
    ) -> Result<LoadBalancer, ApiError> {
        self.model().update_load_balancer(id, update)
    }

    pub(crate) fn set_load_balancer_targets(
        &self,
        id: &str,
        targets: Vec<String>,
    ) -> Result<LoadBalancer, ApiError> {
        self.model().set_load_balancer_targets(id, targets)
    }

    pub(crate) fn remove_load_balancer(&self, id: &str) -> Result<(), ApiError> {
        self.model().delete_load_balancer(id)
    }

    pub(crate) fn list_routes(&self, cluster: Option<&str>) -> Vec<Route> {
        self.model().routes(cluster)
    }

    pub(crate) fn create_route(&self, new: NewRoute) -> Result<Route, ApiError> {
        self.model().create_route(new)
    }

    pub(crate) fn remove_route(&self, id: &str) -> Result<(), ApiError> {
        self.model().delete_route(id)
    }
}

/// A load balancer and when it finishes provisioning.
#[derive(Debug)]
struct LbEntry {
    lb: LoadBalancer,
    ready_at: Instant,
}

/// The resources, guarded by one mutex in [`Shared`].
#[derive(Debug)]
struct Model {
    region: String,
    lb_provision: Duration,
    /// Auto-assigned private addresses count up from here ([`SimOptions::private_ip_base`]).
    private_ip_base: Ipv4Addr,
    /// Load-balancer addresses count up from here ([`SimOptions::lb_ip_base`]).
    lb_ip_base: Ipv4Addr,
    instances: Vec<Instance>,
    load_balancers: Vec<LbEntry>,
    /// Stored with `blackhole: false`; computed on read.
    routes: Vec<Route>,
    private_ip_cursor: u32,
    lb_ip_cursor: u32,
    rng: Rng,
}

impl Model {
    fn new(options: &SimOptions) -> Model {
        Model {
            region: options.region.clone(),
            lb_provision: options.lb_provision,
            private_ip_base: options.private_ip_base,
            lb_ip_base: options.lb_ip_base,
            instances: Vec::new(),
            load_balancers: Vec::new(),
            routes: Vec::new(),
            private_ip_cursor: 0,
            lb_ip_cursor: 0,
            rng: Rng::from_entropy(),
        }
    }

    /// Activates every load balancer whose provisioning time has passed.
    fn promote(&mut self, now: Instant) {
        for i in 0..self.load_balancers.len() {
            let entry = &self.load_balancers[i];
            if entry.lb.status == LoadBalancerStatus::Provisioning && entry.ready_at <= now {
                let ip = next_host(self.lb_ip_base, &mut self.lb_ip_cursor).to_string();
                let lb = &mut self.load_balancers[i].lb;
                tracing::info!(id = %lb.id, name = %lb.name, %ip, "load balancer active");
                lb.status = LoadBalancerStatus::Active;
                lb.ip = Some(ip);
            }
        }
    }

    // ---- instances -------------------------------------------------------

    fn live_instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances
            .iter()
            .filter(|i| i.status != InstanceStatus::Deleted)
    }

    fn instance(&self, id: &str) -> Result<&Instance, ApiError> {
        self.instances
            .iter()
            .find(|i| i.id == id)
            .ok_or_else(|| ApiError::not_found("instance", id))
    }

    fn instance_mut(&mut self, id: &str) -> Result<&mut Instance, ApiError> {
        self.instances
            .iter_mut()
            .find(|i| i.id == id)
            .ok_or_else(|| ApiError::not_found("instance", id))
    }

    fn add_instance(&mut self, new: NewInstance) -> Result<Instance, ApiError> {
        validate_new_instance(&new)?;
        if let Some(existing) = self.live_instances().find(|i| i.name == new.name) {
            return Err(ApiError::conflict(format!(
                "instance named {:?} already exists ({})",
                new.name, existing.id
            )));
        }
        let private_ip = match new.private_ip {
            Some(ip) if self.private_ip_in_use(&ip) => {
                return Err(ApiError::conflict(format!(
                    "private_ip {ip} is already in use"
                )));
            }
            Some(ip) => ip,
            None => self.next_private_ip(),
        };
        let id = fresh_id(&mut self.rng, "i", |id| {
            self.instances.iter().any(|i| i.id == id)
        });
        let instance = Instance {
            id,
            hostname: new.hostname.unwrap_or_else(|| new.name.clone()),
            name: new.name,
            instance_type: new.instance_type,
            zone: new.zone,
            region: self.region.clone(),
            status: InstanceStatus::Running,
            private_ip,
            public_ip: new.public_ip,
            public_ipv6: new.public_ipv6,
        };
        tracing::info!(id = %instance.id, name = %instance.name, "instance created");
        self.instances.push(instance.clone());
        Ok(instance)
    }

    fn private_ip_in_use(&self, ip: &str) -> bool {
        self.live_instances().any(|i| i.private_ip == ip)
    }

    fn next_private_ip(&mut self) -> String {
        loop {
            let ip = next_host(self.private_ip_base, &mut self.private_ip_cursor).to_string();
            if !self.private_ip_in_use(&ip) {
                return ip;
            }
        }
    }

    /// Idempotent for already-deleted instances, like a cloud's terminate.
    fn delete_instance(&mut self, id: &str) -> Result<(), ApiError> {
        let instance = self.instance_mut(id)?;
        if instance.status != InstanceStatus::Deleted {
            instance.status = InstanceStatus::Deleted;
            tracing::info!(%id, "instance deleted");
        }
        Ok(())
    }

    // ---- load balancers --------------------------------------------------

    fn load_balancers(&self) -> Vec<LoadBalancer> {
        self.load_balancers
            .iter()
            .map(|entry| entry.lb.clone())
            .collect()
    }

    /// Where load balancer `id` is in `load_balancers`.
    fn lb_index(&self, id: &str) -> Result<usize, ApiError> {
        self.load_balancers
            .iter()
            .position(|entry| entry.lb.id == id)
            .ok_or_else(|| ApiError::not_found("load balancer", id))
    }

    /// The targets deduplicated, each a live instance. Indexed, so a load balancer with
    /// thousands of targets costs linear time, not quadratic.
    fn checked_targets(&self, targets: Vec<String>) -> Result<Vec<String>, ApiError> {
        let status: HashMap<&str, InstanceStatus> = self
            .instances
            .iter()
            .map(|instance| (instance.id.as_str(), instance.status))
            .collect();
        let mut seen = HashSet::with_capacity(targets.len());
        let mut checked: Vec<String> = Vec::with_capacity(targets.len());
        for (i, target) in targets.into_iter().enumerate() {
            let field = || format!("targets[{i}]");
            match status.get(target.as_str()) {
                None => {
                    return Err(ApiError::invalid(
                        &field(),
                        format!("instance {target:?} does not exist"),
                    ));
                }
                Some(InstanceStatus::Deleted) => {
                    return Err(ApiError::invalid(
                        &field(),
                        format!("instance {target:?} is deleted"),
                    ));
                }
                Some(_) => {
                    if seen.insert(target.clone()) {
                        checked.push(target);
                    }
                }
            }
        }
        Ok(checked)
    }

    fn create_load_balancer(&mut self, new: NewLoadBalancer) -> Result<LoadBalancer, ApiError> {
        validate::non_empty("name", &new.name)?;
        validate::non_empty("cluster", &new.cluster)?;
        validate::non_empty("service_uid", &new.service_uid)?;
        validate::listeners(&new.listeners)?;
        validate::source_ranges(&new.source_ranges)?;
        let targets = self.checked_targets(new.targets)?;
        if let Some(existing) = self
            .load_balancers
            .iter()
            .find(|entry| entry.lb.name == new.name)
        {
            let message = format!(
                "load balancer named {:?} already exists ({})",
                new.name, existing.lb.id
            );
            return Err(ApiError::conflict(message));
        }
        let id = fresh_id(&mut self.rng, "lb", |id| {
            self.load_balancers.iter().any(|entry| entry.lb.id == id)
        });
        let lb = LoadBalancer {
            id,
            name: new.name,
            cluster: new.cluster,
            service_uid: new.service_uid,
            status: LoadBalancerStatus::Provisioning,
            ip: None,
            hostname: None,
            proxy_protocol: new.proxy_protocol,
            listeners: new.listeners,
            targets,
            source_ranges: new.source_ranges,
            created_at_ms: unix_millis(),
        };
        tracing::info!(id = %lb.id, name = %lb.name, "load balancer provisioning");
        let ready_at = Instant::now() + self.lb_provision;
        self.load_balancers.push(LbEntry {
            lb: lb.clone(),
            ready_at,
        });
        Ok(lb)
    }

    fn update_load_balancer(
        &mut self,
        id: &str,
        update: LoadBalancerUpdate,
    ) -> Result<LoadBalancer, ApiError> {
        let index = self.lb_index(id)?;
        validate::listeners(&update.listeners)?;
        validate::source_ranges(&update.source_ranges)?;
        let targets = self.checked_targets(update.targets)?;
        let lb = &mut self.load_balancers[index].lb;
        lb.listeners = update.listeners;
        lb.targets = targets;
        lb.source_ranges = update.source_ranges;
        lb.proxy_protocol = update.proxy_protocol;
        Ok(lb.clone())
    }

    fn set_load_balancer_targets(
        &mut self,
        id: &str,
        targets: Vec<String>,
    ) -> Result<LoadBalancer, ApiError> {
        let index = self.lb_index(id)?;
        let targets = self.checked_targets(targets)?;
        let lb = &mut self.load_balancers[index].lb;
        lb.targets = targets;
        Ok(lb.clone())
    }

    fn delete_load_balancer(&mut self, id: &str) -> Result<(), ApiError> {
        let index = self.lb_index(id)?;
        self.load_balancers.remove(index);
        tracing::info!(%id, "load balancer deleted");
        Ok(())
    }

    // ---- routes ----------------------------------------------------------

    fn routes(&self, cluster: Option<&str>) -> Vec<Route> {
        let in_cluster = self
            .routes
            .iter()
            .filter(|r| cluster.is_none_or(|cluster| r.cluster == cluster));
        in_cluster
            .map(|route| Route {
                blackhole: self.is_blackhole(&route.target_instance),
                ..route.clone()
            })
            .collect()
    }

    fn is_blackhole(&self, target: &str) -> bool {
        !self.live_instances().any(|instance| instance.id == target)
    }

    fn create_route(&mut self, new: NewRoute) -> Result<Route, ApiError> {
        validate::non_empty("name", &new.name)?;
        validate::non_empty("cluster", &new.cluster)?;
        validate::non_empty("target_instance", &new.target_instance)?;
        let cidr = validate::cidr("destination_cidr", &new.destination_cidr)?;
        let clash = self.routes.iter().find(|r| {
            r.cluster == new.cluster
                && validate::cidr("destination_cidr", &r.destination_cidr).ok() == Some(cidr)
        });
        if let Some(existing) = clash {
            let message = format!(
                "cluster {:?} already routes {} ({})",
                new.cluster, existing.destination_cidr, existing.id
            );
            return Err(ApiError::conflict(message));
        }
        let id = fresh_id(&mut self.rng, "r", |id| {
            self.routes.iter().any(|r| r.id == id)
        });
        let route = Route {
            id,
            name: new.name,
            cluster: new.cluster,
            destination_cidr: new.destination_cidr,
            target_instance: new.target_instance,
            blackhole: false,
        };
        tracing::info!(id = %route.id, cidr = %route.destination_cidr, target = %route.target_instance, "route created");
        let view = Route {
            blackhole: self.is_blackhole(&route.target_instance),
            ..route.clone()
        };
        self.routes.push(route);
        Ok(view)
    }

    fn delete_route(&mut self, id: &str) -> Result<(), ApiError> {
        let before = self.routes.len();
        self.routes.retain(|route| route.id != id);
        if self.routes.len() == before {
            return Err(ApiError::not_found("route", id));
        }
        tracing::info!(%id, "route deleted");
        Ok(())
    }
}

fn validate_new_instance(new: &NewInstance) -> Result<(), ApiError> {
    validate::non_empty("name", &new.name)?;
    validate::non_empty("instance_type", &new.instance_type)?;
    validate::non_empty("zone", &new.zone)?;
    if let Some(ip) = &new.private_ip {
        validate::ipv4("private_ip", ip)?;
    }
    if let Some(ip) = &new.public_ip {
        validate::ipv4("public_ip", ip)?;
    }
    if let Some(ip) = &new.public_ipv6 {
        validate::ipv6("public_ipv6", ip)?;
    }
    if let Some(hostname) = &new.hostname {
        validate::non_empty("hostname", hostname)?;
    }
    Ok(())
}

/// A fresh `prefix-xxxxxxxx` id for which `taken` is false.
fn fresh_id(rng: &mut Rng, prefix: &str, taken: impl Fn(&str) -> bool) -> String {
    loop {
        let id = format!("{prefix}-{:08x}", rng.next_u32());
        if !taken(&id) {
            return id;
        }
    }
}

/// Advances `cursor` to the next address after `base` that does not end in
/// .0 or .255 (wrapping around the IPv4 space) and returns it.
fn next_host(base: Ipv4Addr, cursor: &mut u32) -> Ipv4Addr {
    loop {
        *cursor = cursor.wrapping_add(1);
        let ip = Ipv4Addr::from(u32::from(base).wrapping_add(*cursor));
        if !matches!(ip.octets()[3], 0 | 255) {
            return ip;
        }
    }
}

fn unix_millis() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_skip_network_and_broadcast() {
        let mut cursor = 253;
        let hosts: Vec<_> = (0..3)
            .map(|_| next_host(Ipv4Addr::new(198, 51, 100, 0), &mut cursor).to_string())
            .collect();
        assert_eq!(hosts, ["198.51.100.254", "198.51.101.1", "198.51.101.2"]);
    }
}

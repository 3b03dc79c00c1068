//! `LoadBalancer`: one simulator load balancer per Service, named with upstream's
//! `DefaultLoadBalancerName` (`"a"` + UID without dashes, ≤ 32 characters) and looked up by
//! that name within the cluster. Owns the mapping from a Service and its nodes to listeners,
//! targets (the nodes `targets` chooses) and source ranges, and from a load balancer to the
//! Service's status.

use std::collections::HashSet;
use std::time::Duration;

use wasm_ccm_sdk::{
    Error, IpMode, LbIngress, LbStatus, Nodes, PortStatus, Service, ServicePort, cache,
    default_load_balancer_name,
};

use crate::SimCloud;
use crate::api::Api;
use crate::config::Config;
use crate::model::{InstanceStatus, LbSpec, LbState, Listener, LoadBalancer, NewLoadBalancer, set};
use crate::targets::{selector_of, target_ids};

/// How long the host waits before asking again about a provisioning load balancer.
const PROVISIONING_RETRY: Duration = Duration::from_secs(2);
/// Host-cache key and lifetime of the ids of live instances.
const LIVE_IDS: &str = "live-instance-ids";
const LIVE_IDS_TTL: Duration = Duration::from_secs(10);
/// Where a stamped build names load balancers the simulator gives no hostname.
const LB_DOMAIN: &str = "lb.simcloud.test";

impl wasm_ccm_sdk::LoadBalancers for SimCloud {
    fn get_load_balancer(cluster_name: String, svc: Service) -> Result<Option<LbStatus>, Error> {
        let lb =
            Api::load()?.load_balancer_named(&default_load_balancer_name(&svc), &cluster_name)?;
        Ok(lb.map(|lb| LbStatus {
            ingress: ingress(&lb).into_iter().collect(),
        }))
    }

    fn ensure_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<LbStatus, Error> {
        let config = Config::load()?;
        let api = Api::new(&config);
        let name = default_load_balancer_name(&svc);
        let mut spec = desired(&svc, &nodes, &config)?;
        let lb = match api.load_balancer_named(&name, &cluster_name)? {
            Some(lb) if spec.matches(&lb) => lb,
            None => {
                spec.targets = live(&api, spec.targets)?;
                unless_stale(create(&api, &name, &cluster_name, &svc, spec))?
            }
            Some(lb) => {
                spec.targets = live(&api, spec.targets)?;
                if spec.matches(&lb) {
                    lb
                } else {
                    unless_stale(update(&api, &lb, &spec))?
                }
            }
        };
        ready_status(&lb)
    }

    fn update_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<(), Error> {
        let config = Config::load()?;
        let targets = target_ids(&nodes, selector_of(&svc, &config)?.as_ref(), &config.name);
        let api = Api::new(&config);
        let lb = existing(&api, &cluster_name, &svc)?;
        if set(&targets) == set(&lb.targets) {
            return Ok(());
        }
        let targets = live(&api, targets)?;
        if set(&targets) != set(&lb.targets) {
            unless_stale(api.set_targets(&lb.id, &targets).map_err(Error::from))?;
            wasm_ccm_sdk::info!(
                "load balancer {} ({}) now targets {targets:?}",
                lb.name,
                lb.id
            );
        }
        Ok(())
    }

    fn ensure_load_balancer_deleted(cluster_name: String, svc: Service) -> Result<(), Error> {
        let api = Api::load()?;
        let name = default_load_balancer_name(&svc);
        let Some(lb) = api.load_balancer_named(&name, &cluster_name)? else {
            return Ok(());
        };
        if api.delete_load_balancer(&lb.id)? {
            wasm_ccm_sdk::info!(
                "deleted load balancer {name} ({}) of service {}/{}",
                lb.id,
                svc.namespace,
                svc.name
            );
        }
        Ok(())
    }
}

/// The load balancer of `svc`; absence is a `not-found` error.
fn existing(api: &Api, cluster: &str, svc: &Service) -> Result<LoadBalancer, Error> {
    let name = default_load_balancer_name(svc);
    api.load_balancer_named(&name, cluster)?.ok_or_else(|| {
        Error::not_found(format!(
            "load balancer {name} of service {}/{} does not exist",
            svc.namespace, svc.name
        ))
    })
}

fn create(
    api: &Api,
    name: &str,
    cluster: &str,
    svc: &Service,
    spec: LbSpec,
) -> Result<LoadBalancer, Error> {
    let new = NewLoadBalancer {
        name,
        cluster,
        service_uid: &svc.uid,
        spec,
    };
    let lb = api.create_load_balancer(&new)?;
    wasm_ccm_sdk::info!(
        "created load balancer {name} ({}) for service {}/{}",
        lb.id,
        svc.namespace,
        svc.name
    );
    Ok(lb)
}

fn update(api: &Api, lb: &LoadBalancer, spec: &LbSpec) -> Result<LoadBalancer, Error> {
    let updated = api.update_load_balancer(&lb.id, spec)?;
    wasm_ccm_sdk::info!("updated load balancer {} ({})", lb.name, lb.id);
    Ok(updated)
}

/// What the load balancer of `svc` should look like for `nodes`.
fn desired(svc: &Service, nodes: &Nodes<'_>, config: &Config) -> Result<LbSpec, Error> {
    let listeners = svc.ports.iter().map(listener).collect::<Result<_, _>>()?;
    let selector = selector_of(svc, config)?;
    Ok(LbSpec {
        listeners,
        targets: target_ids(nodes, selector.as_ref(), &config.name),
        source_ranges: svc.load_balancer_source_ranges.clone(),
        proxy_protocol: config.proxy_protocol,
    })
}

fn listener(port: &ServicePort) -> Result<Listener, Error> {
    let node_port = port.node_port.ok_or_else(|| {
        let name = port.name.as_deref().unwrap_or("(unnamed)");
        Error::other(format!(
            "service port {name} ({}) has no node port",
            port.port
        ))
    })?;
    Ok(Listener {
        port: port.port,
        protocol: port.protocol.into(),
        node_port,
    })
}

/// The `targets` whose instances exist. A Node can outlive its instance until the lifecycle
/// controller deletes it, and one such node must not fail the load balancer of every Service.
/// Asked only before a write, so an unchanged load balancer costs no listing; the list of
/// live ids is kept in the host cache for a few seconds (as hcloud's server cache) and
/// fetched again only when a target is not in it, so a thousand load balancers cost one
/// listing, not a thousand.
fn live(api: &Api, targets: Vec<String>) -> Result<Vec<String>, Error> {
    let known = |ids: &HashSet<String>| targets.iter().all(|id| ids.contains(id));
    let existing = match cache::get_json::<HashSet<String>>(LIVE_IDS) {
        Some(ids) if known(&ids) => ids,
        _ => {
            let ids: HashSet<String> = api
                .instances(None)?
                .into_iter()
                .filter(|i| i.status != InstanceStatus::Deleted)
                .map(|i| i.id)
                .collect();
            cache::set_json(LIVE_IDS, &ids, LIVE_IDS_TTL);
            ids
        }
    };
    let (live, gone): (Vec<String>, Vec<String>) =
        targets.into_iter().partition(|id| existing.contains(id));
    if !gone.is_empty() {
        wasm_ccm_sdk::info!("not targeting instances that no longer exist: {gone:?}");
    }
    Ok(live)
}

/// A failed write may have named an instance the cached list still had: the next attempt
/// lists instances afresh.
fn unless_stale<T>(write: Result<T, Error>) -> Result<T, Error> {
    if write.is_err() {
        cache::delete(LIVE_IDS);
    }
    write
}

/// The status of an active load balancer; a `retry-after` while it is provisioning.
fn ready_status(lb: &LoadBalancer) -> Result<LbStatus, Error> {
    match ingress(lb) {
        Some(ingress) => Ok(LbStatus {
            ingress: vec![ingress],
        }),
        None => Err(Error::retry_after(
            PROVISIONING_RETRY,
            format!("load balancer {} is being provisioned", lb.name),
        )),
    }
}

/// The ingress point of `lb`, once it is active and has an address.
fn ingress(lb: &LoadBalancer) -> Option<LbIngress> {
    if lb.status != LbState::Active || (lb.ip.is_none() && lb.hostname.is_none()) {
        return None;
    }
    let mode = if lb.proxy_protocol {
        IpMode::Proxy
    } else {
        IpMode::Vip
    };
    Some(LbIngress {
        ip: lb.ip.clone(),
        hostname: hostname(lb),
        // Kubernetes accepts an ip-mode only next to an IP.
        ip_mode: lb.ip.as_ref().map(|_| mode),
        ports: lb.listeners.iter().map(port_status).collect(),
    })
}

/// The simulator's hostname of `lb`; in a stamped build, prefixed with the stamp (and made up
/// from the load balancer's name when the simulator gives none), so the build that answered
/// shows in the Service's status.
fn hostname(lb: &LoadBalancer) -> Option<String> {
    let Some(build) = crate::BUILD else {
        return lb.hostname.clone();
    };
    let hostname = match &lb.hostname {
        Some(hostname) => format!("{build}.{hostname}"),
        None => format!("{build}.{}.{LB_DOMAIN}", lb.name),
    };
    Some(hostname)
}

fn port_status(listener: &Listener) -> PortStatus {
    PortStatus {
        port: listener.port,
        protocol: listener.protocol.into(),
        error: None,
    }
}

//! The controllers' metrics under upstream's names, so existing dashboards and alerts work.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Controller;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ManagedLabels {
    manager: String,
    name: String,
}

/// Upstream's controller metrics (`ccm-behaviour.md` §3.3).
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    /// Seconds from a node's creation to the removal of its cloud-provider taint
    /// (`node_controller_cloud_provider_taint_removal_delay_seconds`).
    pub taint_removal_delay: Histogram,
    /// Seconds from a node's creation to the end of its first sync
    /// (`node_controller_initial_node_sync_delay_seconds`).
    pub initial_node_sync_delay: Histogram,
    /// Load balancers configured because services or nodes changed
    /// (`service_controller_loadbalancer_sync`).
    pub loadbalancer_syncs: Counter,
    /// Load balancer updates after node changes that failed
    /// (`service_controller_nodesync_error`).
    pub nodesync_errors: Counter,
    /// Seconds one node sync took to update every load balancer's hosts
    /// (`service_controller_nodesync_latency_seconds`).
    pub nodesync_latency: Histogram,
    /// Seconds one load balancer's host update took
    /// (`service_controller_update_loadbalancer_host_latency_seconds`).
    pub update_loadbalancer_host_latency: Histogram,
    /// Route syncs with the provider (`route_controller_route_sync`).
    pub route_syncs: Counter,
    running: Family<ManagedLabels, Gauge>,
}

fn node_delay_histogram() -> Histogram {
    Histogram::new([1.0, 4.0, 16.0, 64.0, 256.0, 1024.0])
}

fn service_latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            taint_removal_delay: node_delay_histogram(),
            initial_node_sync_delay: node_delay_histogram(),
            loadbalancer_syncs: Counter::default(),
            nodesync_errors: Counter::default(),
            nodesync_latency: service_latency_histogram(),
            update_loadbalancer_host_latency: service_latency_histogram(),
            route_syncs: Counter::default(),
            running: Family::default(),
        }
    }
}

impl ControllerMetrics {
    /// Mark a controller as running or not (`running_managed_controllers`).
    pub fn set_running(&self, controller: Controller, running: bool) {
        self.running
            .get_or_create(&ManagedLabels {
                manager: "cloud-controller-manager".into(),
                name: controller.name().into(),
            })
            .set(i64::from(running));
    }

    /// Add every controller metric to `registry` under upstream's name.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "node_controller_cloud_provider_taint_removal_delay_seconds",
            "Number of seconds after node creation when NodeController removed the cloud-provider taint of a single node",
            self.taint_removal_delay.clone(),
        );
        registry.register(
            "node_controller_initial_node_sync_delay_seconds",
            "Number of seconds after node creation when NodeController finished the initial synchronization of a single node",
            self.initial_node_sync_delay.clone(),
        );
        registry.register(
            "service_controller_loadbalancer_sync",
            "A metric counting the amount of times any load balancer has been configured, as an effect of service/node changes on the cluster",
            self.loadbalancer_syncs.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "A metric counting the amount of times any load balancer has been configured and errored, as an effect of node changes on the cluster",
            self.nodesync_errors.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "A metric measuring the latency for nodesync which updates loadbalancer hosts on cluster node updates",
            self.nodesync_latency.clone(),
        );
        registry.register(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "A metric measuring the latency for updating each load balancer hosts",
            self.update_loadbalancer_host_latency.clone(),
        );
        registry.register(
            "route_controller_route_sync",
            "A metric counting the amount of times routes have been synced with the cloud provider",
            self.route_syncs.clone(),
        );
        registry.register(
            "running_managed_controllers",
            "Indicates where instances of a controller are currently running",
            self.running.clone(),
        );
    }
}

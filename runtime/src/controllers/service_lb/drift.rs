//! The drift check, beyond upstream: load balancers deleted out of band are ensured again
//! instead of waiting for the next change to their Service.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;

use super::predicates::{has_finalizer, needs_cleanup, wants_load_balancer};
use super::{ServiceController, key_of};
use crate::controllers::views::service_view;

/// Every `--load-balancer-drift-period`, ask the provider whether each load balancer still
/// exists, and ensure again any that vanished out of band (upstream only notices on the
/// next Service change).
pub(super) async fn drift_check_loop(controller: &ServiceController) {
    let period = controller.context.settings.load_balancer_drift_period;
    if period.is_zero() {
        return std::future::pending().await;
    }
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let lbs = controller.context.scope.load_balancers();
        let services: Vec<Arc<Service>> = controller
            .context
            .services
            .store()
            .state()
            .into_iter()
            .filter(|service| {
                wants_load_balancer(&lbs, service)
                    && has_finalizer(&lbs, service)
                    && !needs_cleanup(&lbs, service)
            })
            .collect();
        futures::stream::iter(services)
            .for_each_concurrent(
                controller.context.settings.concurrent_service_syncs.max(1),
                |service| async move {
                    let key = key_of(&service);
                    if controller.queue.failures(&key) > 0 {
                        return; // already being retried
                    }
                    let view = service_view(&service);
                    let provider = controller.context.provider.current();
                    match super::exists(&provider, controller.cluster(), &view).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(service = %key, "load balancer missing from the cloud; ensuring it again");
                            controller.queue.add(key);
                        }
                        Err(error) => {
                            tracing::warn!(service = %key, %error, "drift check failed")
                        }
                    }
                },
            )
            .await;
    }
}

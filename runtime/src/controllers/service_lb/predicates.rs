//! Which Services want a load balancer of this provider, which are being cleaned up, and
//! which changes to a Service call for a new sync: upstream's selection and
//! change-detection helpers, with the provider's class and finalizers
//! ([`LoadBalancers`]) where upstream has no class and its one finalizer.

use k8s_openapi::api::core::v1::{Service, ServiceSpec};

use crate::controllers::fleet::LoadBalancers;

/// `type: LoadBalancer` with a `loadBalancerClass` this provider serves (none, for the
/// default provider).
pub(super) fn wants_load_balancer(lbs: &LoadBalancers, service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|spec| {
        spec.type_.as_deref() == Some("LoadBalancer")
            && lbs.serves_class(spec.load_balancer_class.as_deref())
    })
}

/// Has this provider's finalizer and is being deleted or no longer a load balancer.
pub(super) fn needs_cleanup(lbs: &LoadBalancers, service: &Service) -> bool {
    has_finalizer(lbs, service)
        && (service.metadata.deletion_timestamp.is_some()
            || service.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer"))
}

/// Upstream's `needsUpdate`: the fields a load balancer is built from.
pub(super) fn needs_update(lbs: &LoadBalancers, old: &Service, new: &Service) -> bool {
    if wants_load_balancer(lbs, old) != wants_load_balancer(lbs, new) {
        return true;
    }
    if !wants_load_balancer(lbs, old) && !wants_load_balancer(lbs, new) {
        return false;
    }
    let (Some(a), Some(b)) = (old.spec.as_ref(), new.spec.as_ref()) else {
        return true;
    };
    let ports = |spec: &ServiceSpec| {
        spec.ports.as_ref().map(|ports| {
            ports
                .iter()
                .map(|p| {
                    (
                        p.name.clone(),
                        p.protocol.clone(),
                        p.port,
                        p.node_port,
                        p.target_port.clone(),
                        p.app_protocol.clone(),
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    let families = |spec: &ServiceSpec| spec.ip_families.as_ref().map_or(0, Vec::len);
    a.load_balancer_source_ranges != b.load_balancer_source_ranges
        || ports(a) != ports(b)
        || a.session_affinity != b.session_affinity
        || a.session_affinity_config != b.session_affinity_config
        || a.load_balancer_ip != b.load_balancer_ip
        || a.external_ips != b.external_ips
        || old.metadata.annotations != new.metadata.annotations
        || old.metadata.uid != new.metadata.uid
        || a.external_traffic_policy != b.external_traffic_policy
        || a.health_check_node_port != b.health_check_node_port
        || families(a) != families(b)
}

/// Carries this provider's cleanup finalizer, added before its first cloud call for the
/// Service.
pub(super) fn has_finalizer(lbs: &LoadBalancers, service: &Service) -> bool {
    !lbs.own_finalizers(service).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::service_lb::FINALIZER;
    use k8s_openapi::api::core::v1::ServicePort;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn lbs() -> LoadBalancers {
        LoadBalancers::single()
    }

    fn service(type_: &str) -> Service {
        Service {
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_classless_load_balancer_services_want_one() {
        assert!(wants_load_balancer(&lbs(), &service("LoadBalancer")));
        assert!(!wants_load_balancer(&lbs(), &service("ClusterIP")));
        let mut classed = service("LoadBalancer");
        classed.spec.as_mut().unwrap().load_balancer_class = Some("simcloud".into());
        assert!(!wants_load_balancer(&lbs(), &classed));
    }

    #[test]
    fn cleanup_needs_the_finalizer_and_deletion_or_type_change() {
        let mut svc = service("ClusterIP");
        assert!(!needs_cleanup(&lbs(), &svc));
        svc.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(needs_cleanup(&lbs(), &svc), "type no longer LoadBalancer");
        let mut lb = service("LoadBalancer");
        lb.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert!(!needs_cleanup(&lbs(), &lb));
        lb.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        assert!(needs_cleanup(&lbs(), &lb));
    }

    #[test]
    fn labels_and_status_do_not_trigger_updates_but_annotations_and_ports_do() {
        let old = service("LoadBalancer");
        let mut labelled = old.clone();
        labelled.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert!(!needs_update(&lbs(), &old, &labelled));
        let mut annotated = old.clone();
        annotated.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert!(needs_update(&lbs(), &old, &annotated));
        let mut ported = old.clone();
        ported.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert!(needs_update(&lbs(), &old, &ported));
        let mut affinity = old.clone();
        affinity.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
        assert!(needs_update(&lbs(), &old, &affinity));
        assert!(needs_update(&lbs(), &old, &service("ClusterIP")));
    }
}

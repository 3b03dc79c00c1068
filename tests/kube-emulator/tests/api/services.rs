//! Service validation where a v1.32 kube-apiserver is stricter or more
//! lenient than one might guess: headless load balancers, external IPs,
//! the immutable health check port, `loadBalancerIP` and ingress IPs parsed
//! sloppily (with warnings), status conditions and ingress ports stored
//! unchecked, and the rest of the load balancer status checked as
//! `ValidateLoadBalancerStatus` does.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{self, Cluster, start, status};

fn lb_with(name: &str, spec: Value) -> Value {
    let mut svc = serde_json::to_value(harness::load_balancer(name)).unwrap();
    svc["metadata"]["namespace"] = json!("default");
    for (key, value) in spec.as_object().unwrap() {
        svc["spec"][key] = value.clone();
    }
    svc
}

/// Creates `svc` over plain HTTP: the status code, the warnings and the body.
async fn create(cluster: &Cluster, svc: &Value) -> (u16, Vec<String>, Value) {
    let path = "/api/v1/namespaces/default/services";
    let answer = harness::send(
        cluster,
        reqwest::Method::POST,
        path,
        "application/json",
        &svc.to_string(),
    )
    .await;
    (answer.code, answer.warnings, answer.body)
}

#[tokio::test]
async fn headless_load_balancers_and_node_ports_are_invalid() {
    let cluster = start().await;
    let (code, _, body) = create(&cluster, &lb_with("web", json!({"clusterIP": "None"}))).await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for LoadBalancer services"
    );
    let (code, _, body) = create(
        &cluster,
        &lb_with("np", json!({"type": "NodePort", "clusterIP": "None"})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Service \"np\" is invalid: spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"
    );
    let (code, _, _) = create(
        &cluster,
        &lb_with(
            "headless",
            json!({"type": "ClusterIP", "clusterIP": "None"}),
        ),
    )
    .await;
    assert_eq!(code, 201, "a headless ClusterIP service is fine");
}

#[tokio::test]
async fn external_ips_must_be_valid_and_not_special() {
    let cluster = start().await;
    let (code, _, body) = create(
        &cluster,
        &lb_with("a", json!({"externalIPs": ["not-an-ip", "127.0.0.1"]})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Service \"a\" is invalid: [spec.externalIPs[0]: Invalid value: \"not-an-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff), spec.externalIPs[1]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)]"
    );
    let (code, _, body) = create(
        &cluster,
        &lb_with("b", json!({"externalIPs": ["0.0.0.0", "169.254.1.1"]})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "Service \"b\" is invalid: [spec.externalIPs[0]: Invalid value: \"0.0.0.0\": may not be unspecified (0.0.0.0), spec.externalIPs[1]: Invalid value: \"169.254.1.1\": may not be in the link-local range (169.254.0.0/16, fe80::/10)]"
    );

    // Leading zeros parse (as decimal) but earn a warning.
    let (code, warnings, body) = create(
        &cluster,
        &lb_with("c", json!({"externalIPs": ["203.0.113.010"]})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [
            "299 - \"spec.externalIPs[0]: IP address was accepted, but will be invalid in a future Kubernetes release: ParseAddr(\\\"203.0.113.010\\\"): IPv4 field has octet with leading zero\""
        ]
    );
    assert_eq!(body["spec"]["externalIPs"], json!(["203.0.113.010"]));
}

#[tokio::test]
async fn load_balancer_ip_is_not_validated_only_warned_about() {
    let cluster = start().await;
    let (code, warnings, body) = create(
        &cluster,
        &lb_with("web", json!({"loadBalancerIP": "not-an-ip"})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["spec"]["loadBalancerIP"], "not-an-ip");
    assert_eq!(
        warnings,
        [
            "299 - \"spec.loadBalancerIP: IP address was accepted, but will be invalid in a future Kubernetes release: ParseAddr(\\\"not-an-ip\\\"): unable to parse IP\""
        ]
    );
    let (code, warnings, _) = create(
        &cluster,
        &lb_with("v6", json!({"loadBalancerIP": "2001:DB8::1"})),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        [
            "299 - \"spec.loadBalancerIP: IPv6 address \\\"2001:DB8::1\\\" is not in RFC 5952 canonical format (\\\"2001:db8::1\\\"), which may cause controller apply-loops\""
        ]
    );
    let (code, warnings, _) = create(
        &cluster,
        &lb_with("ok", json!({"loadBalancerIP": "203.0.113.7"})),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));
}

#[tokio::test]
async fn the_health_check_node_port_is_immutable() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    let (code, _, body) = create(
        &cluster,
        &lb_with("local", json!({"externalTrafficPolicy": "Local"})),
    )
    .await;
    assert_eq!(code, 201);
    let port = body["spec"]["healthCheckNodePort"].as_i64().unwrap();
    let err = status(
        services
            .patch(
                "local",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"healthCheckNodePort": port + 1}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Service \"local\" is invalid: spec.healthCheckNodePort: Forbidden: field is immutable"
    );
    // Unchanged, or dropped with the Local policy, is fine.
    services
        .patch(
            "local",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"healthCheckNodePort": port}})),
        )
        .await
        .unwrap();
    let cluster_policy = services
        .patch(
            "local",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"externalTrafficPolicy": "Cluster", "healthCheckNodePort": null}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(cluster_policy.spec.unwrap().health_check_node_port, None);
}

#[tokio::test]
async fn status_conditions_are_stored_unchecked_and_ingress_ips_parsed_sloppily() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    services
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let written = services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "conditions": [{"type": "not a qualified name!", "status": "Maybe", "reason": "",
                                "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}],
                "loadBalancer": {"ingress": [{"ip": "010.0.0.1"}]}
            }})),
        )
        .await
        .unwrap();
    let written = serde_json::to_value(written.status.unwrap()).unwrap();
    assert_eq!(written["conditions"][0]["status"], "Maybe");
    assert_eq!(
        written["loadBalancer"]["ingress"],
        json!([{"ip": "010.0.0.1", "ipMode": "VIP"}])
    );
}

#[tokio::test]
async fn load_balancer_ingress_is_validated_as_upstream_but_its_ports_are_not() {
    let cluster = start().await;
    let services = Api::<Service>::namespaced(cluster.client.clone(), "default");
    services
        .create(&PostParams::default(), &harness::load_balancer("web"))
        .await
        .unwrap();
    let ingress = json!([
        {"hostname": "lb.example.com", "ipMode": "Proxy"},
        {"ip": "203.0.113.9", "ipMode": "Direct"},
        {"ip": "not-an-ip"},
        {"hostname": "203.0.113.10"},
        {"hostname": "Bad_Host"}
    ]);
    let err = status(
        services
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": ingress}}})),
            )
            .await
            .unwrap_err(),
    );
    let at = |i: usize| format!("status.loadBalancer.ingress[{i}]");
    let expected = [
        format!(
            "{}.ipMode: Forbidden: may not be specified when `ip` is not set",
            at(0)
        ),
        format!(
            r#"{}.ipMode: Unsupported value: "Direct": supported values: "Proxy", "VIP""#,
            at(1)
        ),
        format!(
            r#"{}.ip: Invalid value: "not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#,
            at(2)
        ),
        format!(
            r#"{}.hostname: Invalid value: "203.0.113.10": must be a DNS name, not an IP address"#,
            at(3)
        ),
        format!(
            r#"{}.hostname: Invalid value: "Bad_Host": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#,
            at(4)
        ),
    ];
    assert_eq!(
        err.message,
        format!(r#"Service "web" is invalid: [{}]"#, expected.join(", "))
    );

    // `PortStatus` is not validated: any protocol, any error text.
    let ports = json!([{"port": 80, "protocol": "QUIC", "error": "not a CamelCase reason!"}]);
    let written = services
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                {"ip": "203.0.113.9", "ipMode": "Proxy", "ports": ports},
                {"hostname": "lb.example.com"}
            ]}}})),
        )
        .await
        .unwrap();
    let written = serde_json::to_value(written.status.unwrap().load_balancer).unwrap();
    assert_eq!(written["ingress"][0]["ports"], ports);
    assert_eq!(
        written["ingress"][1],
        json!({"hostname": "lb.example.com"}),
        "no ipMode without an ip"
    );
}

/// Node ports come from `--service-node-port-range`: once it is used up, a LoadBalancer
/// Service is refused as a v1.32 kube-apiserver refuses it, and a port outside it is
/// refused naming the range.
#[tokio::test]
async fn node_ports_come_from_the_configured_range_and_run_out() {
    let cluster = harness::start_with(kube_emulator::EmulatorOptions {
        service_node_port_range: 31000..=31001,
        ..Default::default()
    })
    .await;
    let api: Api<Service> = Api::namespaced(cluster.client.clone(), "default");
    let mut ports = Vec::new();
    for name in ["a", "b"] {
        let created = api
            .create(&PostParams::default(), &harness::load_balancer(name))
            .await
            .unwrap();
        ports.push(created.spec.unwrap().ports.unwrap()[0].node_port);
    }
    assert_eq!(ports, [Some(31000), Some(31001)]);
    let full = api
        .create(&PostParams::default(), &harness::load_balancer("c"))
        .await
        .unwrap_err();
    let status = status(full);
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("failed to allocate a nodePort: range is full"),
        "{}",
        status.message
    );
    let (code, _, body) = create(
        &cluster,
        &lb_with(
            "d",
            json!({"ports": [{"port": 80, "targetPort": 8080, "nodePort": 30000}]}),
        ),
    )
    .await;
    assert_eq!(code, 422);
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("The range of valid ports is 31000-31001")),
        "{body}"
    );
}

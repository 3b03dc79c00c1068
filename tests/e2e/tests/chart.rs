//! The Helm chart `charts/wasm-ccm`: `helm lint --strict`; `helm template` for the main value
//! combinations, every object checked against the Kubernetes schemas (`kubernetes-validate`)
//! and each CloudProvider created in the API emulator under the shipped CRD; the values schema
//! refusing bad values by name; and the rendered CloudProvider carrying exactly the provider
//! values, which never touch the pod template.
//!
//! Also: the pod's security, tolerations, probes and flags; leader election with several
//! replicas; the Roles naming exactly the referenced Secrets; the documented `aws.yaml`,
//! installed with the AWS page's `helm install` (IRSA's role annotation on the
//! ServiceAccount, the `CloudProvider` signing with the web identity and reaching EC2 and
//! ELBv2 only, routes on or off); `egressGrantCeiling` passed as the flag,
//! which the manager parses into a ceiling holding the rendered spec and refusing a wider one;
//! the metrics RBAC, the ServiceMonitor's token and serving CA (one that could verify nothing
//! refused) and the NetworkPolicy. helm and `kubernetes-validate` are installed, pinned, by
//! `make setup` in `target/test-tools/`.

use std::collections::BTreeMap;

use e2e::chart::{self, NAMESPACE, Operator, Rendered, all, args, container, only, render};
use e2e::docs;
use kube::Api;
use kube::api::PostParams;
use kube_emulator::{Emulator, EmulatorOptions};
use serde_json::{Value, json};
use wasm_ccm::resource::{CloudProvider, CloudProviderSpec};

/// The Kubernetes version the manifests are checked against (the emulator's).
const KUBERNETES: &str = "1.32.0";
/// The least a release needs.
const PROVIDER: &str = "
provider:
  ref: oci://registry.example.com/acme/simcloud:v1
  name: simcloud
";

/// The value combinations a release is installed with, by release name.
fn combinations() -> Vec<(&'static str, String)> {
    vec![
        ("default", PROVIDER.to_string()),
        ("replicas", format!("{PROVIDER}\nreplicas: 3\n")),
        (
            "daemonset",
            format!("{PROVIDER}\nkind: DaemonSet\nhostNetwork: true\n"),
        ),
        (
            "metrics",
            format!(
                "{PROVIDER}
metrics:
  port: 10300
  enabled: true
  tlsSecret: wasm-ccm-serving
  reader: {{subjects: [{{kind: ServiceAccount, name: prometheus-k8s, namespace: monitoring}}]}}
  serviceMonitor: {{enabled: true, interval: 15s, labels: {{release: prometheus}}}}
networkPolicy:
  metricsFrom: [{{namespaceSelector: {{matchLabels: {{team: observability}}}}}}]
"
            ),
        ),
        (
            "registry",
            format!(
                "{PROVIDER}
registry:
  insecure: [registry.local:5000, 10.0.0.5:5000]
  configSecret: registry-credentials
"
            ),
        ),
        ("credentials", CREDENTIALS.to_string()),
        ("aws", chart::aws_values()),
        (
            "shadow",
            format!(
                "{PROVIDER}
  rollout:
    strategy: Shadow
    shadow:
      agreeingCalls: 100
      methods: [{{host: https://api.simcloud.example, methods: [POST]}}]
    rollback: {{window: 10m, failureRateThreshold: 5, minimumCalls: 50}}
"
            ),
        ),
        ("signatures", SIGNATURES.to_string()),
        ("providers", several_providers_values()),
    ]
}

/// The several-providers page's values file (`# two-providers.yaml`).
fn several_providers_values() -> String {
    docs::block_starting(
        "docs/src/operators/several-providers.md",
        "yaml",
        "# two-providers.yaml",
    )
}

/// The operator's signature keys from a ConfigMap, and the CloudProvider's own from a
/// ConfigMap and a Secret in another namespace.
const SIGNATURES: &str = "
provider:
  ref: oci://registry.example.com/acme/simcloud:v1
  name: simcloud
  signature:
    keys:
      - configMapKeyRef: {name: release-keys, key: cosign.pub}
      - secretKeyRef: {name: vendor-keys, key: vendor.pub, namespace: keys-system}
signatureKeys:
  configMap: operator-keys
  keys: [cosign.pub, backup.pub]
";

/// Credentials in the release namespace and in another one (AWS signing keys among them),
/// and a cloud config from a ConfigMap.
const CREDENTIALS: &str = "
provider:
  ref: oci://registry.example.com/acme/simcloud@sha256:4f1c2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7
  name: simcloud
  cloudConfig:
    configMapKeyRef: {name: simcloud-config, key: cloud.json}
  allowedHosts: [https://api.simcloud.example, 'https://*.storage.simcloud.example:8443']
  credentials:
    - host: https://api.simcloud.example
      secretKeyRef: {name: simcloud-token, key: token}
    - host: 'https://*.storage.simcloud.example:8443'
      secretKeyRef: {name: storage, key: key, namespace: storage-system}
      type: Header
      headerName: X-Storage-Key
    - host: 'https://*.amazonaws.com'
      type: AwsSigV4
      aws:
        region: us-east-1
        accessKeyIdRef: {name: aws, key: AWS_ACCESS_KEY_ID}
        secretAccessKeyRef: {name: aws, key: AWS_SECRET_ACCESS_KEY}
        sessionTokenRef: {name: aws-session, key: token, namespace: storage-system}
    - host: http://127.0.0.1:5000
      type: AwsSigV4
      aws: {region: us-east-1, services: [ec2, sts], webIdentity: {}}
";

#[test]
fn chart_lints_strict() {
    let chart = chart::chart_dir();
    let output = chart::helm_with_values(
        &["lint", "--strict", chart.to_str().expect("UTF-8")],
        PROVIDER,
    );
    assert!(
        output.status.success(),
        "helm lint --strict failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One version for the crates (the workspace's), the chart and the image (its default tag
/// is the chart's appVersion), and the changelog's newest section is unreleased or that
/// version, in Keep a Changelog's shape.
#[test]
fn chart_and_changelog_carry_the_workspace_version() {
    let version = env!("CARGO_PKG_VERSION");
    let text = std::fs::read_to_string(chart::chart_dir().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    assert_eq!(chart["apiVersion"], "v2");
    for field in ["version", "appVersion"] {
        assert_eq!(
            chart[field], version,
            "Chart.yaml's {field} must be the workspace version in Cargo.toml"
        );
    }
    // Artifact Hub's annotations: its images (which release/pin_chart.py pins) at this version.
    let images: Value = serde_saphyr::from_str(
        chart["annotations"]["artifacthub.io/images"]
            .as_str()
            .expect("artifacthub.io/images"),
    )
    .expect("artifacthub.io/images is YAML");
    assert_eq!(images[0]["image"], format!("wasm-ccm:{version}"));
    assert_eq!(
        images[0]["platforms"],
        serde_json::json!(["linux/amd64", "linux/arm64"])
    );
    assert_eq!(chart["annotations"]["artifacthub.io/license"], "Apache-2.0");

    let changelog =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../CHANGELOG.md"))
            .expect("CHANGELOG.md");
    assert!(
        changelog.starts_with("# Changelog\n"),
        "Keep a Changelog's title"
    );
    let sections: Vec<&str> = changelog
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .collect();
    let released = |heading: &str| -> Option<String> {
        let (version, date) = heading.strip_prefix('[')?.split_once("] - ")?;
        let semver = version.split('.').count() == 3
            && version
                .split('.')
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        let dated = date.len() == 10
            && date.bytes().enumerate().all(|(i, b)| match i {
                4 | 7 => b == b'-',
                _ => b.is_ascii_digit(),
            });
        (semver && dated).then(|| version.to_string())
    };
    let newest = sections.first().expect("a section");
    assert!(
        *newest == "[Unreleased]" || released(newest).as_deref() == Some(version),
        "the newest section is [Unreleased] or [{version}] - DATE, not {newest:?}"
    );
    for heading in sections.iter().skip(usize::from(*newest == "[Unreleased]")) {
        assert!(
            released(heading).is_some(),
            "a released section is [X.Y.Z] - YYYY-MM-DD, not {heading:?}"
        );
    }
}

/// Every combination renders objects the Kubernetes schemas accept, and a CloudProvider the
/// CRD accepts as rendered (nothing pruned).
#[tokio::test]
async fn chart_renders_valid_manifests_for_each_combination() {
    let emulator = Emulator::start("127.0.0.1:0".parse().unwrap(), EmulatorOptions::default())
        .await
        .expect("emulator starts");
    let config = kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
        .await
        .expect("kubeconfig");
    let client = kube::Client::try_from(config).expect("client");
    e2e::cloud_provider::install_crd_into(&client).await;
    let cloud_providers: Api<CloudProvider> = Api::all(client);

    for (release, values) in combinations() {
        let objects = render(release, &values)
            .unwrap_or_else(|error| panic!("{release}: helm template failed:\n{error}"));
        if let Err(report) = chart::validate(&objects, KUBERNETES) {
            panic!(
                "{release}: rendered objects fail the Kubernetes {KUBERNETES} schemas:\n{report}"
            );
        }
        for object in all(&objects, "CloudProvider") {
            let rendered: CloudProvider = serde_json::from_value(object.object.clone())
                .expect("the rendered CloudProvider deserializes");
            let created = cloud_providers
                .create(&PostParams::default(), &rendered)
                .await
                .unwrap_or_else(|error| {
                    panic!("{release}: the CRD refuses the CloudProvider: {error}")
                });
            assert!(
                same(
                    &serde_json::to_value(&created.spec).unwrap(),
                    &object.object["spec"]
                ),
                "{release}: the API server changed the rendered spec (a field the CRD does not know?)"
            );
        }
        if let Some(monitor) = all(&objects, "ServiceMonitor").first() {
            check_service_monitor(&objects, monitor);
        }
    }
    emulator.shutdown().await;
}

/// Equal as JSON, numbers by value (YAML's `10` is the type's `10.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// No ServiceMonitor CRD ships here, so the fields Prometheus Operator reads are checked by
/// hand: it selects the metrics Service and scrapes its port over HTTPS.
fn check_service_monitor(objects: &[Rendered], monitor: &Rendered) {
    let service = all(objects, "Service")
        .into_iter()
        .find(|s| s.name().ends_with("-metrics"))
        .expect("a metrics Service beside the ServiceMonitor");
    assert_eq!(monitor.object["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(
        monitor.object["metadata"]["labels"]["release"],
        "prometheus"
    );
    let selector = monitor.object["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    for (key, value) in selector {
        assert_eq!(
            &service.object["metadata"]["labels"][key], value,
            "the ServiceMonitor selects the metrics Service by {key}"
        );
    }
    let endpoint = &monitor.object["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service.object["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
    // Prometheus presents its own token and verifies the manager with the serving CA.
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let tls = &endpoint["tlsConfig"];
    assert_eq!(
        tls["ca"]["secret"],
        json!({"name": "wasm-ccm-serving", "key": "ca.crt"})
    );
    assert_eq!(
        tls["serverName"],
        format!("{}.{NAMESPACE}.svc", service.name())
    );
    assert!(tls.get("insecureSkipVerify").is_none(), "{tls}");
}

#[test]
fn chart_default_pod_is_locked_down_and_schedules_on_a_fresh_control_plane() {
    let objects = render("default", PROVIDER).expect("renders");
    let deployment = only(&objects, "Deployment");
    let pod = &deployment.object["spec"]["template"]["spec"];
    assert_eq!(deployment.object["spec"]["replicas"], 1);
    assert_eq!(deployment.object["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let security = &container(&objects)["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    let tolerated: Vec<&str> = pod["tolerations"]
        .as_array()
        .expect("tolerations")
        .iter()
        .map(|t| t["key"].as_str().unwrap_or_default())
        .collect();
    for taint in [
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
        "CriticalAddonsOnly",
    ] {
        assert!(tolerated.contains(&taint), "tolerates {taint}");
    }
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["key"],
        "node-role.kubernetes.io/control-plane"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container(&objects)[probe]["httpGet"];
        assert_eq!(get["path"], path);
        assert_eq!(get["scheme"], "HTTPS");
        assert_eq!(get["port"], "https");
    }
    assert_eq!(container(&objects)["ports"][0]["containerPort"], 10258);
    let cache = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "cache")
        .expect("a cache volume");
    assert!(cache["emptyDir"].is_object());
    let args = args(&objects);
    for flag in [
        "--provider-resource=default-wasm-ccm",
        "--leader-elect=false",
        "--controllers=*",
        "--cluster-name=kubernetes",
        "--secure-port=10258",
        "--cache-dir=/var/cache/wasm-ccm",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    assert!(
        all(&objects, "Service").is_empty() && all(&objects, "ServiceMonitor").is_empty(),
        "no metrics Service unless asked"
    );
    // With one replica and no references, the namespaced Role grants nothing.
    assert_eq!(only(&objects, "Role").object["rules"], json!([]));
}

#[test]
fn chart_several_replicas_elect_a_leader_in_the_release_namespace() {
    for (release, values) in [
        ("replicas", format!("{PROVIDER}\nreplicas: 3\n")),
        ("daemonset", format!("{PROVIDER}\nkind: DaemonSet\n")),
    ] {
        let objects = render(release, &values).expect("renders");
        let args = args(&objects);
        for flag in [
            "--leader-elect=true".to_string(),
            "--leader-elect-resource-name=cloud-controller-manager".to_string(),
            format!("--leader-elect-resource-namespace={NAMESPACE}"),
        ] {
            assert!(args.contains(&flag), "{release}: {flag} in {args:?}");
        }
        let role = only(&objects, "Role");
        assert_eq!(role.namespace(), Some(NAMESPACE));
        assert_eq!(
            role.object["rules"],
            json!([
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                 "resourceNames": ["cloud-controller-manager"], "verbs": ["get", "update"]},
            ]),
            "{release}"
        );
    }
    let objects = render("replicas", &format!("{PROVIDER}\nreplicas: 3\n")).unwrap();
    let deployment = only(&objects, "Deployment");
    assert_eq!(deployment.object["spec"]["replicas"], 3);
    assert!(deployment.object["spec"]["strategy"].is_null());
    let daemonset = render("daemonset", &format!("{PROVIDER}\nkind: DaemonSet\n")).unwrap();
    assert!(all(&daemonset, "Deployment").is_empty());
    assert!(only(&daemonset, "DaemonSet").object["spec"]["replicas"].is_null());
}

#[test]
fn chart_registry_config_is_mounted_and_insecure_registries_passed() {
    let objects = render("registry", &combinations()[4].1).expect("renders");
    let args = args(&objects);
    for flag in [
        "--insecure-registry=registry.local:5000",
        "--insecure-registry=10.0.0.5:5000",
        "--registry-config=/etc/wasm-ccm/registry/config.json",
        "--tag-check-interval=5m",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    let pod = &only(&objects, "Deployment").object["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "registry-config")
        .expect("the registry Secret as a volume");
    assert_eq!(volume["secret"]["secretName"], "registry-credentials");
    assert_eq!(
        volume["secret"]["items"],
        json!([{"key": ".dockerconfigjson", "path": "config.json"}])
    );
    let mount = container(&objects)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "registry-config")
        .expect("mounted");
    assert_eq!(mount["mountPath"], "/etc/wasm-ccm/registry");
    assert_eq!(mount["readOnly"], true);
}

/// The operator's keys are mounted from their ConfigMap and passed as
/// --provider-signature-key; the CloudProvider's keys are its spec.signature, and the manager
/// may read exactly their objects.
#[test]
fn chart_signature_keys_reach_the_manager_and_the_cloud_provider() {
    let objects = render("signatures", SIGNATURES).expect("renders");
    let args = args(&objects);
    for flag in [
        "--provider-signature-key=/etc/wasm-ccm/signature-keys/cosign.pub",
        "--provider-signature-key=/etc/wasm-ccm/signature-keys/backup.pub",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    let pod = &only(&objects, "Deployment").object["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "signature-keys")
        .expect("the keys as a volume");
    assert_eq!(
        volume["configMap"],
        json!({"name": "operator-keys", "items": [
            {"key": "cosign.pub", "path": "cosign.pub"},
            {"key": "backup.pub", "path": "backup.pub"},
        ]})
    );
    let mount = container(&objects)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "signature-keys")
        .expect("mounted");
    assert_eq!(mount["mountPath"], "/etc/wasm-ccm/signature-keys");
    assert_eq!(mount["readOnly"], true);

    let spec = &only(&objects, "CloudProvider").object["spec"];
    assert_eq!(
        spec["signature"],
        json!({"keys": [
            {"configMapKeyRef": {"name": "release-keys", "key": "cosign.pub"}},
            {"secretKeyRef": {"name": "vendor-keys", "key": "vendor.pub", "namespace": "keys-system"}},
        ]})
    );
    let roles = role_rules(&objects);
    assert_eq!(
        roles["keys-system"],
        &json!([{"apiGroups": [""], "resources": ["secrets"],
                 "resourceNames": ["vendor-keys"], "verbs": ["list", "watch"]}])
    );
    assert!(
        roles[NAMESPACE].to_string().contains("release-keys"),
        "{}",
        roles[NAMESPACE]
    );

    // Without the values, no flag, no volume, no spec field.
    let plain = render("plain", PROVIDER).expect("renders");
    assert!(
        !chart::args(&plain)
            .iter()
            .any(|arg| arg.starts_with("--provider-signature-key"))
    );
    assert!(only(&plain, "CloudProvider").object["spec"]["signature"].is_null());
}

/// The manager reads exactly the Secrets and ConfigMaps the CloudProvider names, in their
/// namespaces, and nothing else there.
/// The rules of each Role the chart renders, by namespace.
fn role_rules(objects: &[Rendered]) -> BTreeMap<&str, &Value> {
    all(objects, "Role")
        .into_iter()
        .map(|r| (r.namespace().expect("namespaced"), &r.object["rules"]))
        .collect()
}

#[test]
fn chart_roles_grant_the_referenced_secrets_by_name() {
    let objects = render("credentials", CREDENTIALS).expect("renders");
    let roles = role_rules(&objects);
    assert_eq!(
        roles,
        BTreeMap::from([
            (
                NAMESPACE,
                &json!([
                    {"apiGroups": [""], "resources": ["secrets"],
                     "resourceNames": ["simcloud-token", "aws"], "verbs": ["list", "watch"]},
                    {"apiGroups": [""], "resources": ["configmaps"],
                     "resourceNames": ["simcloud-config"], "verbs": ["list", "watch"]},
                ])
            ),
            (
                "storage-system",
                &json!([
                    {"apiGroups": [""], "resources": ["secrets"],
                     "resourceNames": ["storage", "aws-session"], "verbs": ["list", "watch"]},
                ])
            ),
        ])
    );
    let bindings: Vec<(&str, &Value)> = all(&objects, "RoleBinding")
        .into_iter()
        .map(|b| (b.namespace().unwrap(), &b.object["subjects"]))
        .collect();
    assert_eq!(bindings.len(), 2);
    for (namespace, subjects) in bindings {
        assert_eq!(
            subjects,
            &json!([{"kind": "ServiceAccount", "name": "credentials-wasm-ccm", "namespace": NAMESPACE}]),
            "{namespace}"
        );
    }
}

/// The AWS page's values (IRSA), installed with the page's `helm install`, typed, into the
/// API emulator: the role annotation on the manager's ServiceAccount, named as the role's
/// trust policy says, and a CloudProvider running the aws provider with its cloud config,
/// reaching EC2 and ELBv2 only and signing with the web identity's keys (no Secret to read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_documented_aws_values_annotate_the_service_account_and_sign_with_the_web_identity() {
    let emulator = Emulator::start("127.0.0.1:0".parse().unwrap(), EmulatorOptions::default())
        .await
        .expect("emulator starts");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    emulator
        .write_kubeconfig(&kubeconfig)
        .expect("write kubeconfig");
    let operator = Operator::new(&kubeconfig);
    operator.file("aws.yaml", &chart::aws_values());
    operator.typed(&docs::block_starting(
        "docs/src/operators/aws.md",
        "sh",
        "helm install wasm-ccm charts/wasm-ccm",
    ));
    let objects = chart::parse(&operator.helm(&["get", "manifest", "wasm-ccm", "-n", NAMESPACE]));
    let account = only(&objects, "ServiceAccount");
    assert_eq!(account.name(), "wasm-ccm");
    assert_eq!(account.namespace(), Some(NAMESPACE));
    assert_eq!(
        account.object["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/wasm-ccm"
    );
    let spec = &only(&objects, "CloudProvider").object["spec"];
    assert_eq!(spec["name"], "aws");
    let cloud_config: Value = serde_json::from_str(
        spec["cloudConfig"]["inline"]
            .as_str()
            .expect("an inline cloud config"),
    )
    .expect("the cloud config is JSON");
    assert_eq!(
        cloud_config,
        json!({"region": "us-east-1", "cluster_id": "prod", "vpc_id": "vpc-0abc1234"})
    );
    assert_eq!(
        spec["egress"]["allowedHosts"],
        json!([
            "https://ec2.us-east-1.amazonaws.com",
            "https://elasticloadbalancing.us-east-1.amazonaws.com"
        ])
    );
    assert_eq!(
        spec["credentials"],
        json!([{"host": "https://*.amazonaws.com", "type": "AwsSigV4",
                "aws": {"region": "us-east-1", "webIdentity": {}}}])
    );
    assert!(all(&objects, "Role").iter().all(|role| {
        role.object["rules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|rule| rule["resources"] != json!(["secrets"]))
    }));
    assert!(args(&objects).contains(&"--cluster-cidr=10.244.0.0/16".to_string()));
    let config = kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
        .await
        .expect("kubeconfig");
    let installed = Api::<CloudProvider>::all(kube::Client::try_from(config).expect("client"))
        .get("wasm-ccm")
        .await
        .expect("the release's CloudProvider, as the API server stored it");
    assert_eq!(installed.spec.name, "aws");

    // Without pod routes, as the AWS page says for the VPC CNI or an overlay.
    let values =
        chart::aws_values().replace("clusterCIDR: 10.244.0.0/16", "controllers: ['*', '-route']");
    let args = args(&chart::render("wasm-ccm", &values).expect("renders"));
    assert!(
        args.contains(&"--controllers=*,-route".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--cluster-cidr")),
        "{args:?}"
    );
}

/// Every provider value lands in the CloudProvider's spec, as the manager reads it; none
/// lands in the pod template, so changing them restarts nothing.
#[test]
fn chart_cloud_provider_spec_is_the_provider_values() {
    let values = "
provider:
  ref: oci://registry.example.com/acme/simcloud:v2
  digest: sha256:4f1c2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7
  name: simcloud
  cloudConfig:
    inline: '{\"region\": \"eu-1\"}'
  allowedHosts: [https://api.simcloud.example]
  egress: {rate: 20.5, burst: 40, connectTimeout: 3s, firstByteTimeout: 1m, maxResponse: 4Mi,
           maxIdlePerHost: 2, maxConnections: 16, idleTimeout: 30s, auditLogRate: 10, auditLogBurst: 50}
  credentials:
    - host: https://api.simcloud.example
      secretKeyRef: {name: simcloud-token, key: token, namespace: kube-system}
      type: Bearer
  limits: {memory: 128Mi, timeout: 10s, maxConcurrentCalls: 64, maxResultSize: 4Mi, cacheSize: 8Mi,
           logLinesPerCall: 100, logBytesPerCall: 64Ki, logRate: 50, logBurst: 500}
  rollout:
    strategy: Shadow
    shadow: {agreeingCalls: 20, methods: [{host: https://api.simcloud.example, methods: [POST, DELETE]}]}
    rollback: {window: 10m, failureRateThreshold: 5, minimumCalls: 30}
    followTag: true
";
    let objects = render("spec", values).expect("renders");
    let rendered = &only(&objects, "CloudProvider").object;
    assert_eq!(rendered["metadata"]["name"], "spec-wasm-ccm");
    assert!(
        rendered["metadata"]["namespace"].is_null(),
        "CloudProvider is cluster-scoped"
    );
    let spec: CloudProviderSpec =
        serde_json::from_value(rendered["spec"].clone()).expect("the manager's type reads it");
    let expected: CloudProviderSpec = serde_json::from_value(json!({
        "provider": "oci://registry.example.com/acme/simcloud:v2",
        "digest": "sha256:4f1c2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7",
        "name": "simcloud",
        "cloudConfig": {"inline": "{\"region\": \"eu-1\"}"},
        "egress": {
            "allowedHosts": ["https://api.simcloud.example"],
            "rate": 20.5, "burst": 40, "connectTimeout": "3s", "firstByteTimeout": "1m",
            "maxResponse": "4Mi", "maxIdlePerHost": 2, "maxConnections": 16,
            "idleTimeout": "30s", "auditLogRate": 10.0, "auditLogBurst": 50,
        },
        "credentials": [{
            "host": "https://api.simcloud.example",
            "secretKeyRef": {"name": "simcloud-token", "key": "token", "namespace": "kube-system"},
            "type": "Bearer",
        }],
        "limits": {
            "memory": "128Mi", "timeout": "10s", "maxConcurrentCalls": 64, "maxResultSize": "4Mi",
            "cacheSize": "8Mi", "logLinesPerCall": 100, "logBytesPerCall": "64Ki",
            "logRate": 50.0, "logBurst": 500,
        },
        "rollout": {
            "strategy": "Shadow",
            "shadow": {"agreeingCalls": 20,
                       "methods": [{"host": "https://api.simcloud.example", "methods": ["POST", "DELETE"]}]},
            "rollback": {"window": "10m", "failureRateThreshold": 5, "minimumCalls": 30},
            "followTag": true,
        },
    }))
    .expect("the expected spec");
    assert_eq!(spec, expected);
    assert!(
        same(&serde_json::to_value(&spec).unwrap(), &rendered["spec"]),
        "the rendered spec holds a field the manager's type does not know:\n{:#}",
        rendered["spec"]
    );

    let pods = |values: &str| {
        let objects = render("spec", values).expect("renders");
        only(&objects, "Deployment").object["spec"]["template"].clone()
    };
    assert_eq!(
        pods(values),
        pods(PROVIDER),
        "provider values must not change the pod template (a change would restart the pods)"
    );
}

/// Bad values are refused before anything is applied, each error naming the value.
#[test]
fn chart_schema_refuses_bad_values_by_name() {
    let cases = [
        ("replicas: 0", "/replicas"),
        ("kind: StatefulSet", "/kind"),
        ("controllers: [nodes]", "/controllers/0"),
        ("clusterCIDR: 10.0.0.0", "/clusterCIDR"),
        ("serviceClusterIPRange: 10.96.0.0", "/serviceClusterIPRange"),
        (
            "loadBalancerIPRanges: ['203.0.113.0']",
            "/loadBalancerIPRanges/0",
        ),
        ("metrics: {port: 70000}", "/metrics/port"),
        (
            "metrics: {alwaysAllowPaths: [healthz]}",
            "/metrics/alwaysAllowPaths/0",
        ),
        (
            "metrics: {reader: {subjects: [{kind: Robot, name: r}]}}",
            "/metrics/reader/subjects/0/kind",
        ),
        ("networkPolicy: {enabled: maybe}", "/networkPolicy/enabled"),
        (
            "registry: {insecure: ['http://registry.local']}",
            "/registry/insecure/0",
        ),
        (
            "registry: {tagCheckInterval: soon}",
            "/registry/tagCheckInterval",
        ),
        (
            "signatureKeys: {keys: ['../cosign.pub']}",
            "/signatureKeys/keys/0",
        ),
        (
            "provider: {signature: {keys: [{configMapKeyRef: {name: k, key: a}, secretKeyRef: {name: k, key: a}}]}}",
            "/provider/signature/keys/0",
        ),
        ("image: {pullPolicy: Sometimes}", "/image/pullPolicy"),
        ("imageTag: v1", "imageTag"),
        ("extraArgs: [verbose]", "/extraArgs/0"),
        (
            "egressGrantCeiling: ['*.amazonaws.com']",
            "/egressGrantCeiling/0",
        ),
        (
            "provider: {ref: 'https://example.com/p.wasm'}",
            "/provider/ref",
        ),
        ("provider: {digest: 'sha256:12ab'}", "/provider/digest"),
        (
            "provider: {allowedHosts: [api.example.com]}",
            "/provider/allowedHosts/0",
        ),
        (
            "provider: {limits: {memory: lots}}",
            "/provider/limits/memory",
        ),
        (
            "provider: {limits: {timeout: soon}}",
            "/provider/limits/timeout",
        ),
        ("provider: {egress: {rate: 0}}", "/provider/egress/rate"),
        (
            "provider: {rollout: {strategy: Canary}}",
            "/provider/rollout/strategy",
        ),
        (
            "provider: {rollout: {followTag: sometimes}}",
            "/provider/rollout/followTag",
        ),
        (
            "provider: {rollout: {rollback: {failureRateThreshold: 150}}}",
            "/provider/rollout/rollback/failureRateThreshold",
        ),
        (
            "provider: {cloudConfig: {inline: x, configMapKeyRef: {name: c, key: k}}}",
            "/provider/cloudConfig",
        ),
        (
            "provider: {credentials: [{host: 'https://a.example', secretKeyRef: {name: s, key: k}, type: Header}]}",
            "/provider/credentials/0",
        ),
        (
            "provider: {credentials: [{host: 'https://a.example', secretKeyRef: {name: s}}]}",
            "/provider/credentials/0/secretKeyRef",
        ),
        (
            "provider: {credentials: [{host: 'https://a.example', secretKeyRef: {name: s, key: k}, type: Basic}]}",
            "/provider/credentials/0/type",
        ),
        (
            "provider: {credentials: [{host: 'https://ec2.us-east-1.amazonaws.com', type: AwsSigV4}]}",
            "/provider/credentials/0",
        ),
        (
            "provider: {credentials: [{host: 'https://ec2.us-east-1.amazonaws.com', type: AwsSigV4, aws: {webIdentity: {}, accessKeyIdRef: {name: s, key: k}}}]}",
            "/provider/credentials/0/aws",
        ),
        (
            "provider: {credentials: [{host: 'https://ec2.us-east-1.amazonaws.com', type: AwsSigV4, aws: {webIdentity: {}, region: Mars}}]}",
            "/provider/credentials/0/aws/region",
        ),
    ];
    for (bad, path) in cases {
        // The good values first; `bad` is merged over them.
        let error = chart::render_files("bad", &[PROVIDER, bad])
            .expect_err(&format!("{bad:?} must be refused"));
        assert!(
            error.contains("values don't meet the specifications of the schema")
                && error.contains(&format!("'{path}'")),
            "{bad:?}: the error must name {path}:\n{error}"
        );
    }

    for (missing, value) in [
        ("provider: {name: simcloud}", "provider.ref"),
        ("provider: {ref: 'oci://r.example/p:v1'}", "provider.name"),
    ] {
        let error = render("missing", missing).expect_err("refused");
        assert!(
            error.contains(&format!("{value} is required")),
            "the error must name {value}:\n{error}"
        );
    }
}

#[test]
fn chart_service_monitor_brings_the_metrics_service_it_scrapes() {
    let values = format!(
        "{PROVIDER}\nmetrics: {{serviceMonitor: {{enabled: true, insecureSkipVerify: true}}}}\n"
    );
    let objects = render("monitor", &values).expect("renders");
    let service = only(&objects, "Service");
    assert_eq!(service.name(), "monitor-wasm-ccm-metrics");
    assert_eq!(service.object["spec"]["ports"][0]["port"], 10258);
    let endpoint = &only(&objects, "ServiceMonitor").object["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "https");
    assert_eq!(endpoint["tlsConfig"], json!({"insecureSkipVerify": true}));
    assert!(endpoint["bearerTokenFile"].is_string(), "{endpoint}");
}

/// A ServiceMonitor that can verify nothing is refused: without the serving certificate's CA
/// Prometheus would send its token to whoever answers, so skipping verification is asked for
/// by name.
#[test]
fn chart_service_monitor_without_a_ca_or_an_explicit_skip_is_refused() {
    let values = format!("{PROVIDER}\nmetrics: {{serviceMonitor: {{enabled: true}}}}\n");
    let error = render("monitor", &values).expect_err("refused");
    assert!(
        error.contains("metrics.tlsSecret")
            && error.contains("metrics.serviceMonitor.insecureSkipVerify"),
        "{error}"
    );
}

/// As upstream's manager, /metrics is delegated to the API server: the ServiceAccount is bound
/// to system:auth-delegator, a ClusterRole grants get on /metrics for Prometheus (bound when
/// subjects are given), and the health paths stay open to the probes.
#[test]
fn chart_metrics_are_authorised_through_the_api_server() {
    let objects = render("auth", PROVIDER).expect("renders");
    let account = only(&objects, "ServiceAccount").name().to_string();
    let delegator = all(&objects, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b.object["roleRef"]["name"] == "system:auth-delegator")
        .expect("a binding to system:auth-delegator");
    assert_eq!(
        delegator.object["subjects"],
        json!([{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}])
    );
    let grants = chart::grants(&objects, NAMESPACE, &account);
    for (group, resource) in [
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ] {
        assert!(
            grants
                .iter()
                .any(|g| g.group == group && g.resource == resource && g.verb == "create"),
            "create {resource}: {grants:#?}"
        );
    }
    let reader = all(&objects, "ClusterRole")
        .into_iter()
        .find(|r| r.name() == "auth-wasm-ccm-metrics-reader")
        .expect("the metrics reader role");
    assert_eq!(
        reader.object["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    assert!(
        !all(&objects, "ClusterRoleBinding")
            .iter()
            .any(|b| b.object["roleRef"]["name"] == reader.name()),
        "no subjects, no binding"
    );
    assert!(
        args(&objects)
            .contains(&"--authorization-always-allow-paths=/healthz,/readyz,/livez".into())
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        let path = container(&objects)[probe]["httpGet"]["path"]
            .as_str()
            .unwrap();
        assert!(
            ["/healthz", "/readyz", "/livez"].contains(&path),
            "{probe} asks an always-allowed path"
        );
    }

    let values = format!(
        "{PROVIDER}
metrics:
  reader: {{subjects: [{{kind: ServiceAccount, name: prometheus-k8s, namespace: monitoring}}]}}
  tlsSecret: serving
"
    );
    let objects = render("auth", &values).expect("renders");
    let binding = all(&objects, "ClusterRoleBinding")
        .into_iter()
        .find(|b| b.object["roleRef"]["name"] == "auth-wasm-ccm-metrics-reader")
        .expect("the reader bound");
    assert_eq!(
        binding.object["subjects"],
        json!([{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}])
    );
    let args = args(&objects);
    for flag in [
        "--tls-cert-file=/etc/wasm-ccm/serving/tls.crt",
        "--tls-private-key-file=/etc/wasm-ccm/serving/tls.key",
    ] {
        assert!(args.contains(&flag.to_string()), "{flag}: {args:?}");
    }
    let workload = only(&objects, "Deployment");
    let volumes = &workload.object["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["secret"]["secretName"] == "serving"),
        "{volumes}"
    );
}

/// On by default: connections reach the manager's pods only on the secure port, only from the
/// monitoring namespace (or the peers a value names); off by value.
#[test]
fn chart_network_policy_admits_the_secure_port_from_the_monitoring_namespace() {
    let objects = render("net", PROVIDER).expect("renders");
    let policy = only(&objects, "NetworkPolicy");
    let workload = only(&objects, "Deployment");
    assert_eq!(
        policy.object["spec"]["podSelector"]["matchLabels"],
        workload.object["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(policy.object["spec"]["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy.object["spec"]["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
            "ports": [{"protocol": "TCP", "port": 10258}],
        }])
    );

    let values =
        format!("{PROVIDER}\nmetrics: {{port: 10300}}\nnetworkPolicy: {{metricsFrom: []}}\n");
    let objects = render("net", &values).expect("renders");
    assert_eq!(
        only(&objects, "NetworkPolicy").object["spec"]["ingress"],
        json!([]),
        "no peers: nothing admitted"
    );
    let values = format!("{PROVIDER}\nnetworkPolicy: {{enabled: false}}\n");
    let objects = render("net", &values).expect("renders");
    assert!(all(&objects, "NetworkPolicy").is_empty());
}

/// `serviceClusterIPRange`, `loadBalancerIPRanges`, `loadBalancerIPSharing` and
/// `nodeAddressDNSSuffixes` reach the manager as the flags its answer checks read; without
/// them, no flag (and no range, no sharing, only a node's own name).
#[test]
fn chart_answer_ranges_reach_the_manager() {
    let values = format!(
        "{PROVIDER}serviceClusterIPRange: 10.96.0.0/12,fd00:10:96::/112\nloadBalancerIPRanges: [203.0.113.0/24, '2001:db8:1::/48']\nloadBalancerIPSharing: true\nnodeAddressDNSSuffixes: [ec2.internal, amazonaws.com]\n"
    );
    let flags = args(&render("ranges", &values).expect("renders"));
    for flag in [
        "--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112",
        "--load-balancer-ip-ranges=203.0.113.0/24,2001:db8:1::/48",
        "--load-balancer-ip-sharing=true",
        "--node-address-dns-suffixes=ec2.internal,amazonaws.com",
    ] {
        assert!(flags.contains(&flag.to_string()), "{flag}: {flags:?}");
    }
    let cache = tempfile::tempdir().unwrap();
    let cli = manager_cli(flags, cache.path());
    let settings = cli.run.config().expect("a configuration").settings;
    let services = settings.service_cidrs.expect("the Service range");
    assert!(services.contains("10.96.0.1".parse().unwrap()));
    assert!(services.contains("fd00:10:96::1".parse().unwrap()));
    let pools = settings.load_balancer_ip_ranges.expect("the pools");
    assert_eq!(pools.to_string(), "203.0.113.0/24,2001:db8:1::/48");
    assert!(settings.load_balancer_ip_sharing);
    assert_eq!(
        settings.node_address_dns_suffixes,
        ["ec2.internal", "amazonaws.com"]
    );

    let plain = args(&render("plain", PROVIDER).expect("renders"));
    assert!(
        !plain
            .iter()
            .any(|arg| arg.starts_with("--service-cluster-ip-range")
                || arg.starts_with("--load-balancer-ip-")
                || arg.starts_with("--node-address-dns-suffixes")),
        "{plain:?}"
    );
}

/// `egressGrantCeiling` reaches the manager as --egress-grant-ceiling, and the ceiling it
/// parses to holds the chart's own CloudProvider and refuses a grant outside it.
#[test]
fn chart_grant_ceiling_reaches_the_manager_and_bounds_the_cloud_provider() {
    use wasm_ccm::manager::ProviderMode;

    let values = format!(
        "{CREDENTIALS}egressGrantCeiling: [https://api.simcloud.example, 'https://*.simcloud.example:8443', 'https://*.amazonaws.com', 'http://127.0.0.1:5000']\n"
    );
    let objects = render("ceiling", &values).expect("renders");
    let args = args(&objects);
    assert!(
        args.contains(&"--egress-grant-ceiling=https://api.simcloud.example,https://*.simcloud.example:8443,https://*.amazonaws.com,http://127.0.0.1:5000".to_string()),
        "{args:?}"
    );
    let cache = tempfile::tempdir().unwrap();
    let cli = manager_cli(args, cache.path());
    let ProviderMode::Resource {
        grant_ceiling: Some(ceiling),
        ..
    } = cli.run.config().expect("a configuration").provider
    else {
        panic!("run mode from the resource, with a ceiling");
    };
    let spec: CloudProviderSpec =
        serde_json::from_value(only(&objects, "CloudProvider").object["spec"].clone()).unwrap();
    assert_eq!(ceiling.check(&spec), Ok(()));
    let mut wider = spec.clone();
    wider
        .egress
        .as_mut()
        .unwrap()
        .allowed_hosts
        .push("http://169.254.169.254".into());
    let error = ceiling.check(&wider).unwrap_err();
    assert_eq!(error.field, "spec.egress.allowedHosts[2]");

    // Without the value, no flag.
    let plain = render("plain", PROVIDER).expect("renders");
    assert!(
        !chart::args(&plain)
            .iter()
            .any(|arg| arg.starts_with("--egress-grant-ceiling"))
    );
}

/// The alerts and the dashboard the chart ships query only metrics the manager serves, by
/// the labels those metrics carry: every name and label in their expressions is in the
/// metrics reference page, which `manager::metrics` checks against a real scrape. (`up` and
/// the target labels `job`, `namespace`, `pod` and `instance` are Prometheus's own; `le` is
/// every histogram's.)
#[test]
fn chart_alerts_and_dashboard_query_metrics_the_manager_serves() {
    let values = format!(
        "{PROVIDER}
metrics:
  serviceMonitor: {{enabled: true, insecureSkipVerify: true}}
  prometheusRule: {{enabled: true, labels: {{release: prometheus}}, failingCallRatio: 0.1}}
  grafanaDashboard: {{enabled: true, namespace: grafana}}
"
    );
    let objects = render("observed", &values).expect("renders");
    let rule = only(&objects, "PrometheusRule");
    assert_eq!(rule.object["metadata"]["labels"]["release"], "prometheus");
    let mut expressions = Vec::new();
    for rule in rule.object["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules")
    {
        let alert = rule["alert"].as_str().expect("an alert name");
        let expr = rule["expr"].as_str().expect("an expression");
        assert!(
            expr.contains(r#"job="observed-wasm-ccm-metrics""#),
            "{alert} selects the scraped Service's job: {expr}"
        );
        expressions.push((alert.to_string(), expr.to_string()));
    }
    assert!(
        expressions
            .iter()
            .any(|(alert, expr)| alert == "WasmCcmProviderCallsFailing" && expr.contains("> 0.1")),
        "{expressions:?}"
    );
    let dashboard = only(&objects, "ConfigMap");
    assert_eq!(dashboard.namespace(), Some("grafana"));
    assert_eq!(
        dashboard.object["metadata"]["labels"]["grafana_dashboard"],
        "1"
    );
    let json: Value = serde_json::from_str(
        dashboard.object["data"]["wasm-ccm.json"]
            .as_str()
            .expect("the dashboard JSON"),
    )
    .expect("the dashboard is JSON");
    for panel in json["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let title = panel["title"].as_str().unwrap_or_default();
            let expr = target["expr"].as_str().expect("an expression");
            expressions.push((title.to_string(), expr.to_string()));
        }
    }

    let reference = e2e::docs::page("docs/src/operators/metrics-reference.md");
    let served: BTreeMap<String, Vec<String>> = reference
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split(" | ").collect();
            let name = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
            let labels = cells
                .get(2)?
                .split(", ")
                .map(|label| label.trim_matches('`').to_string())
                .filter(|label| !label.is_empty())
                .collect();
            Some((name.to_string(), labels))
        })
        .collect();
    assert!(served.len() > 30, "the reference's table: {served:?}");
    let name = regex::Regex::new(r"[a-z_:][a-z0-9_:]*").expect("regex");
    let grouping = regex::Regex::new(r"by \(([^)]*)\)").expect("regex");
    let matcher = regex::Regex::new(r#"([a-z_]+)(=|!=|=~|!~)""#).expect("regex");
    for (what, expr) in &expressions {
        let metrics: Vec<&str> = name
            .find_iter(expr)
            .map(|m| m.as_str())
            .filter(|token| token.contains('_') || *token == "up")
            .filter(|token| !token.starts_with("__") && !expr.contains(&format!("${token}")))
            .filter(|token| {
                !["histogram_quantile", "label_values", "humanizePercentage"].contains(token)
            })
            .filter(|token| {
                expr.contains(&format!("{token}{{")) || expr.contains(&format!("{token}["))
            })
            .collect();
        assert!(!metrics.is_empty(), "{what}: no metric in {expr}");
        let mut labels: Vec<String> = Vec::new();
        for metric in &metrics {
            if *metric == "up" {
                continue;
            }
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    metric
                        .strip_suffix(suffix)
                        .filter(|base| served.contains_key(*base))
                })
                .unwrap_or(metric);
            let Some(metric_labels) = served.get(base) else {
                panic!("{what}: {metric} is not a metric the manager serves: {expr}");
            };
            labels.extend(metric_labels.iter().cloned());
        }
        let used = grouping
            .captures_iter(expr)
            .flat_map(|c| {
                c[1].split(',')
                    .map(|l| l.trim().to_string())
                    .collect::<Vec<_>>()
            })
            .chain(matcher.captures_iter(expr).map(|c| c[1].to_string()));
        for label in used {
            let prometheus_own = ["job", "namespace", "pod", "instance", "le"];
            assert!(
                prometheus_own.contains(&label.as_str()) || labels.contains(&label),
                "{what}: label {label} is on none of {metrics:?}: {expr}"
            );
        }
    }
}

/// The several-providers page's values: a CloudProvider per entry, named RELEASE-NAME, with
/// its routing fields; the manager following them all; Roles over every Secret and ConfigMap
/// either entry names; the rollback record patchable on these two only. `provider` beside
/// `providers`, or two entries of one name, are refused naming what is wrong.
#[test]
fn chart_providers_make_a_cloud_provider_each_and_the_manager_follows_them_all() {
    let values = several_providers_values();
    let objects = render("fleet", &values).expect("renders");
    let providers: BTreeMap<&str, &Value> = all(&objects, "CloudProvider")
        .into_iter()
        .map(|p| (p.name(), &p.object["spec"]))
        .collect();
    assert_eq!(
        providers.keys().copied().collect::<Vec<_>>(),
        ["fleet-wasm-ccm-metal", "fleet-wasm-ccm-simcloud"]
    );
    let metal = providers["fleet-wasm-ccm-metal"];
    assert_eq!(metal["name"], "metal");
    assert_eq!(metal["loadBalancerClass"], "wasm-ccm.io/metal");
    assert_eq!(metal["loadBalancerTargets"], "All");
    assert_eq!(
        metal["nodeSelector"],
        json!({"matchLabels": {"topology.example.com/site": "rack-7"}})
    );
    assert!(metal.get("default").is_none(), "{metal}");
    let simcloud = providers["fleet-wasm-ccm-simcloud"];
    assert_eq!(simcloud["default"], true);
    assert_eq!(
        simcloud["egress"]["allowedHosts"],
        json!(["https://api.simcloud.example"])
    );
    for spec in providers.values() {
        let _: CloudProviderSpec = serde_json::from_value((*spec).clone()).expect("a valid spec");
    }
    assert!(
        args(&objects)
            .contains(&"--provider-resource=fleet-wasm-ccm-simcloud,fleet-wasm-ccm-metal".into()),
        "{:?}",
        args(&objects)
    );
    let roles = role_rules(&objects);
    assert_eq!(
        roles,
        BTreeMap::from([
            (
                NAMESPACE,
                &json!([
                    {"apiGroups": [""], "resources": ["secrets"],
                     "resourceNames": ["simcloud"], "verbs": ["list", "watch"]},
                    {"apiGroups": [""], "resources": ["configmaps"],
                     "resourceNames": ["metal-config"], "verbs": ["list", "watch"]},
                ])
            ),
            (
                "metal-system",
                &json!([
                    {"apiGroups": [""], "resources": ["secrets"],
                     "resourceNames": ["metal"], "verbs": ["list", "watch"]},
                ])
            ),
        ])
    );
    let patchable: Vec<&Value> = all(&objects, "ClusterRole")
        .into_iter()
        .flat_map(|role| role.object["rules"].as_array().into_iter().flatten())
        .filter(|rule| {
            rule["resources"] == json!(["cloudproviders"]) && rule["verbs"] == json!(["patch"])
        })
        .map(|rule| &rule["resourceNames"])
        .collect();
    assert_eq!(
        patchable,
        [&json!(["fleet-wasm-ccm-simcloud", "fleet-wasm-ccm-metal"])]
    );

    let both = format!("{values}\nprovider:\n  ref: file:///p.wasm\n  name: lone\n");
    let error = render("fleet", &both).expect_err("provider and providers");
    assert!(
        error.contains("set provider (one provider) or providers (several), not both"),
        "{error}"
    );
    let twice = values.replace("- name: metal", "- name: simcloud");
    let error = render("fleet", &twice).expect_err("one name twice");
    assert!(
        error.contains("providers[1].name simcloud is the name of an earlier entry"),
        "{error}"
    );
    let one_class = values.replace("wasm-ccm.io/metal", "wasm-ccm.io/simcloud");
    let error = render("fleet", &one_class).expect_err("one class twice");
    assert!(
        error.contains("providers[1].loadBalancerClass wasm-ccm.io/simcloud is an earlier entry's"),
        "{error}"
    );
    let nameless = values.replace("- name: metal\n    ref:", "- ref:");
    let error = render("fleet", &nameless).expect_err("an entry without a name");
    assert!(
        error.contains("providers") && error.contains("name"),
        "{error}"
    );
}

/// The manager's command line from the chart's `flags`, its `--cache-dir` (the pod's
/// volume) moved to `cache`: building the configuration opens the cache, and a test opens
/// none of this machine's directories.
fn manager_cli(flags: Vec<String>, cache: &std::path::Path) -> wasm_ccm::cli::Cli {
    use clap::Parser;
    assert!(
        flags.contains(&"--cache-dir=/var/cache/wasm-ccm".to_string()),
        "{flags:?}"
    );
    let flags = flags
        .into_iter()
        .map(|flag| match flag.starts_with("--cache-dir=") {
            true => format!("--cache-dir={}", cache.display()),
            false => flag,
        });
    wasm_ccm::cli::Cli::try_parse_from(std::iter::once("wasm-ccm".to_string()).chain(flags))
        .expect("the manager takes the chart's flags")
}

//! `apps/v1` Deployments and DaemonSets: v1's defaults, a generation their
//! spec bumps, a status only the status subresource writes, upstream's
//! validation of selectors and templates, and stock `kubectl apply -f`
//! without `--validate=false`. No controller acts on them.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{kubectl, start, status};

fn deployment(name: &str, labels: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                         "env": [{"name": "A", "value": "1"}]}]},
            },
        },
    }))
    .unwrap()
}

fn generation<K: kube::Resource>(object: &K) -> i64 {
    object.meta().generation.unwrap_or_default()
}

#[tokio::test]
async fn deployments_are_defaulted_and_count_generations_of_their_spec() {
    let cluster = start().await;
    let deployments = Api::<Deployment>::namespaced(cluster.client.clone(), "default");
    let created = deployments
        .create(
            &PostParams::default(),
            &deployment("web", json!({"app": "web"})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&created), 1);
    let created = serde_json::to_value(&created).unwrap();
    assert_eq!(created["spec"]["replicas"], 1);
    assert_eq!(
        created["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(created["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(created["spec"]["progressDeadlineSeconds"], 600);
    let pod = &created["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Always");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        pod["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(created["status"], json!({}));

    // Strategic merge by container name and env name: only the image changes.
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.28"}]}}}});
    let patched = deployments
        .patch("web", &PatchParams::default(), &Patch::Strategic(&image))
        .await
        .unwrap();
    assert_eq!(generation(&patched), 2);
    let container = &patched
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container.image.as_deref(), Some("nginx:1.28"));
    assert_eq!(container.env.as_ref().unwrap()[0].name, "A");

    // Labels are not spec; annotations count for a Deployment.
    let labels = json!({"metadata": {"labels": {"team": "a"}}});
    let relabelled = deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    assert_eq!(generation(&relabelled), 2);
    let annotated = json!({"metadata": {"annotations": {"note": "x"}}});
    let annotated = deployments
        .patch("web", &PatchParams::default(), &Patch::Merge(&annotated))
        .await
        .unwrap();
    assert_eq!(generation(&annotated), 3);

    let mut replaced = annotated.clone();
    replaced.spec.as_mut().unwrap().replicas = Some(3);
    let replaced = deployments
        .replace("web", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(generation(&replaced), 4);
    assert_eq!(replaced.spec.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn a_deployment_status_is_written_only_through_its_subresource() {
    let cluster = start().await;
    let deployments = Api::<Deployment>::namespaced(cluster.client.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", json!({"app": "web"})),
        )
        .await
        .unwrap();
    let status_and_spec =
        json!({"spec": {"replicas": 5}, "status": {"replicas": 1, "readyReplicas": 1}});
    let main = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&status_and_spec),
        )
        .await
        .unwrap();
    assert_eq!(main.status.unwrap().replicas, None, "status ignored");
    assert_eq!(main.spec.unwrap().replicas, Some(5));

    let through_status = deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 7}, "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(
        generation(&through_status),
        2,
        "a status write is no spec change"
    );
    assert_eq!(
        through_status.spec.unwrap().replicas,
        Some(5),
        "spec ignored"
    );
    let written = through_status.status.unwrap();
    assert_eq!(
        (written.replicas, written.ready_replicas),
        (Some(1), Some(1))
    );

    let err = status(
        deployments
            .patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"availableReplicas": 2}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Deployment.apps \"web\" is invalid: [status.availableReplicas: Invalid value: 2: cannot be greater than status.replicas, status.availableReplicas: Invalid value: 2: cannot be greater than readyReplicas]"
    );
}

#[tokio::test]
async fn selectors_must_match_the_template_and_never_change() {
    let cluster = start().await;
    let deployments = Api::<Deployment>::namespaced(cluster.client.clone(), "default");
    let err = status(
        deployments
            .create(
                &PostParams::default(),
                &deployment("web", json!({"app": "db"})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(
        err.message,
        "Deployment.apps \"web\" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`"
    );

    let no_containers = json!({
        "metadata": {"name": "empty"},
        "spec": {"selector": {"matchLabels": {"app": "empty"}},
                 "template": {"metadata": {"labels": {"app": "empty"}},
                              "spec": {"containers": [{"name": "Bad_Name"}], "restartPolicy": "Never"}}},
    });
    let err = status(
        deployments
            .create(
                &PostParams::default(),
                &serde_json::from_value(no_containers).unwrap(),
            )
            .await
            .unwrap_err(),
    );
    let causes: Vec<String> = err
        .details
        .unwrap()
        .causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    assert_eq!(
        causes,
        [
            "spec.template.spec.containers[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.template.spec.containers[0].image: Required value",
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ]
    );

    deployments
        .create(
            &PostParams::default(),
            &deployment("web", json!({"app": "web", "v": "2"})),
        )
        .await
        .unwrap();
    let selector = json!({"spec": {"selector": {"matchLabels": {"v": "2"}}}});
    let err = status(
        deployments
            .patch("web", &PatchParams::default(), &Patch::Merge(&selector))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "Deployment.apps \"web\" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"v\":\"2\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
    );
}

#[tokio::test]
async fn daemon_sets_count_template_generations_in_an_annotation() {
    let cluster = start().await;
    let daemon_sets = Api::<DaemonSet>::namespaced(cluster.client.clone(), "kube-system");
    let agent: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"containers": [{"name": "agent", "image": "agent"}]}},
        },
    }))
    .unwrap();
    let created = daemon_sets
        .create(&PostParams::default(), &agent)
        .await
        .unwrap();
    let template_generation = |ds: &DaemonSet| {
        ds.metadata.annotations.as_ref().unwrap()["deprecated.daemonset.template.generation"]
            .clone()
    };
    assert_eq!(template_generation(&created), "1");
    assert_eq!(generation(&created), 1);
    let value = serde_json::to_value(&created).unwrap();
    assert_eq!(
        value["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );
    assert_eq!(
        value["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always",
        "an image without a tag is :latest"
    );
    assert_eq!(value["status"]["desiredNumberScheduled"], 0);

    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}}});
    let updated = daemon_sets
        .patch("agent", &PatchParams::default(), &Patch::Strategic(&image))
        .await
        .unwrap();
    assert_eq!(
        (template_generation(&updated), generation(&updated)),
        ("2".to_owned(), 2)
    );
    let history = json!({"spec": {"revisionHistoryLimit": 3}});
    let updated = daemon_sets
        .patch("agent", &PatchParams::default(), &Patch::Merge(&history))
        .await
        .unwrap();
    assert_eq!(
        (template_generation(&updated), generation(&updated)),
        ("2".to_owned(), 3)
    );

    let surge = json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}}});
    let err = status(
        daemon_sets
            .patch("agent", &PatchParams::default(), &Patch::Merge(&surge))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.message,
        "DaemonSet.apps \"agent\" is invalid: spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:0, IntVal:1, StrVal:\"\"}: may not be set when maxUnavailable is non-zero"
    );
}

#[tokio::test]
async fn kubectl_applies_a_deployment_with_validation_on() {
    let cluster = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.emulator.write_kubeconfig(&kubeconfig).unwrap();
    let cache = dir.path().join("cache");
    let manifest = dir.path().join("web.yaml");
    let write = |replicas: u8| {
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\nspec:\n  replicas: {replicas}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n"
            ),
        )
        .unwrap();
    };
    let kubeconfig = kubeconfig.to_str().unwrap();
    let file = manifest.to_str().unwrap();
    write(2);
    let created = kubectl(&cache, &["--kubeconfig", kubeconfig, "create", "-f", file]).await;
    assert_eq!(created.trim(), "deployment.apps/web created");
    write(3);
    let applied = kubectl(&cache, &["--kubeconfig", kubeconfig, "apply", "-f", file]).await;
    assert_eq!(applied.trim(), "deployment.apps/web configured");
    let applied = kubectl(&cache, &["--kubeconfig", kubeconfig, "apply", "-f", file]).await;
    assert_eq!(applied.trim(), "deployment.apps/web unchanged");

    let table = kubectl(&cache, &["--kubeconfig", kubeconfig, "get", "deploy"]).await;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    assert_eq!(lines[1][..4], ["web", "0/3", "0", "0"]);
    let deployment = Api::<Deployment>::namespaced(cluster.client.clone(), "default")
        .get("web")
        .await
        .unwrap();
    assert_eq!(generation(&deployment), 2);
}

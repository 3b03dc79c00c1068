//! RBAC: the `rbac.authorization.k8s.io/v1` kinds served and validated as
//! upstream, and under `Authorization::Rbac` every request of a service
//! account checked against the Roles and ClusterRoles bound to it, refused
//! with kube-apiserver's own 403; in both modes, each decision recorded.

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret, Service};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::Discovery;
use kube::runtime::watcher;
use kube::{Client, Resource};
use kube_emulator::{ADMIN_USER, Attributes, Authorization, EmulatorOptions, service_account_user};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::harness::{
    Cluster, client_with_token, create_namespace, create_node, load_balancer, send, send_as,
    service_account_token, spawn_binary_with, start, start_with, status, within,
};

const CCM: &str = "system:serviceaccount:kube-system:ccm";

async fn rbac_cluster() -> Cluster {
    start_with(EmulatorOptions {
        authorization: Authorization::Rbac,
        ..EmulatorOptions::default()
    })
    .await
}

/// A client of the service account `kube-system/ccm`.
async fn ccm(cluster: &Cluster) -> Client {
    let token = service_account_token(cluster, "kube-system", "ccm").await;
    client_with_token(&cluster.emulator, &token).await
}

fn object<K: DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("an object literal")
}

/// Creates `value` as the admin.
async fn create<K>(api: Api<K>, value: Value) -> K
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &object(value))
        .await
        .expect("created as the admin")
}

/// A ClusterRole `name` with `rules`.
async fn cluster_role(cluster: &Cluster, name: &str, rules: Value) {
    create(
        Api::<ClusterRole>::all(cluster.client.clone()),
        json!({"metadata": {"name": name}, "rules": rules}),
    )
    .await;
}

/// A ClusterRoleBinding `name` of the ClusterRole `role` to `subjects`.
async fn cluster_role_binding(cluster: &Cluster, name: &str, role: &str, subjects: Value) {
    create(
        Api::<ClusterRoleBinding>::all(cluster.client.clone()),
        json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects,
        }),
    )
    .await;
}

/// A RoleBinding `namespace/name` of the role `kind/role` to `subjects`.
async fn role_binding(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    role: (&str, &str),
    subjects: Value,
) {
    create(
        Api::<RoleBinding>::namespaced(cluster.client.clone(), namespace),
        json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
            "subjects": subjects,
        }),
    )
    .await;
}

/// A ClusterRole `name` with `rules`, bound to `kube-system/ccm` by a
/// ClusterRoleBinding of the same name.
async fn grant_everywhere(cluster: &Cluster, name: &str, rules: Value) {
    cluster_role(cluster, name, rules).await;
    cluster_role_binding(cluster, name, name, ccm_subject()).await;
}

/// One rule on `resources` of `group`, for `verbs`.
fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Value {
    json!([{"apiGroups": [group], "resources": resources, "verbs": verbs}])
}

fn ccm_subject() -> Value {
    json!([{"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}])
}

/// The 403 of a refused call: its message, after checking code, reason and details.
fn forbidden<T: std::fmt::Debug>(
    result: kube::Result<T>,
    name: &str,
    group: &str,
    kind: &str,
) -> String {
    let refused = status(result.expect_err("refused"));
    assert_eq!(
        (refused.code, refused.reason.as_str()),
        (403, "Forbidden"),
        "{refused:?}"
    );
    let details = refused.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.group.as_str(),
            details.kind.as_str()
        ),
        (name, group, kind)
    );
    refused.message
}

#[tokio::test]
async fn a_service_account_without_bindings_is_refused_as_upstream_refuses_it() {
    let cluster = rbac_cluster().await;
    create_node(&cluster.client, "n1").await;
    Api::<Service>::namespaced(cluster.client.clone(), "default")
        .create(&PostParams::default(), &load_balancer("s"))
        .await
        .expect("created");
    let client = ccm(&cluster).await;
    cluster.emulator.reset_requests();

    let message = forbidden(
        Api::<Node>::all(client.clone()).get("n1").await,
        "n1",
        "",
        "nodes",
    );
    assert_eq!(
        message,
        format!(
            r#"nodes "n1" is forbidden: User "{CCM}" cannot get resource "nodes" in API group "" at the cluster scope"#
        )
    );
    let message = forbidden(
        Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await,
        "",
        "",
        "nodes",
    );
    assert_eq!(
        message,
        format!(
            r#"nodes is forbidden: User "{CCM}" cannot list resource "nodes" in API group "" at the cluster scope"#
        )
    );
    let services = Api::<Service>::namespaced(client.clone(), "default");
    let message = forbidden(
        services.list(&ListParams::default()).await,
        "",
        "",
        "services",
    );
    assert_eq!(
        message,
        format!(
            r#"services is forbidden: User "{CCM}" cannot list resource "services" in API group "" in the namespace "default""#
        )
    );
    let status_patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.1"}]}}});
    let message = forbidden(
        services
            .patch_status("s", &PatchParams::default(), &Patch::Merge(&status_patch))
            .await,
        "s",
        "",
        "services",
    );
    assert_eq!(
        message,
        format!(
            r#"services "s" is forbidden: User "{CCM}" cannot patch resource "services/status" in API group "" in the namespace "default""#
        )
    );
    // Refused before the handler: whether the lease exists does not matter.
    let leases = Api::<Lease>::namespaced(client, "kube-system");
    let message = forbidden(
        leases.get("cloud-controller-manager").await,
        "cloud-controller-manager",
        "coordination.k8s.io",
        "leases",
    );
    assert_eq!(
        message,
        format!(
            r#"leases.coordination.k8s.io "cloud-controller-manager" is forbidden: User "{CCM}" cannot get resource "leases" in API group "coordination.k8s.io" in the namespace "kube-system""#
        )
    );

    let counts = cluster.emulator.requests();
    assert_eq!(counts.denied("patch", "services/status"), 1);
    assert_eq!(counts.denied("get", "leases.coordination.k8s.io"), 1);
    assert_eq!(counts.forbidden[CCM].values().sum::<u64>(), 5);
    assert_eq!(
        counts.user(CCM).total(),
        0,
        "refused requests are not served"
    );
}

#[tokio::test]
async fn a_cluster_role_binding_grants_everywhere() {
    let cluster = rbac_cluster().await;
    create_node(&cluster.client, "n1").await;
    let client = ccm(&cluster).await;
    grant_everywhere(
        &cluster,
        "ccm",
        rule("", &["nodes", "services"], &["get", "list", "watch"]),
    )
    .await;

    let nodes = Api::<Node>::all(client.clone());
    assert_eq!(
        nodes
            .get("n1")
            .await
            .expect("granted")
            .metadata
            .name
            .as_deref(),
        Some("n1")
    );
    Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("across all namespaces");
    Api::<Service>::namespaced(client.clone(), "kube-public")
        .list(&ListParams::default())
        .await
        .expect("in any namespace");
    let message = forbidden(
        nodes
            .create(&PostParams::default(), &crate::harness::node("n2"))
            .await,
        "",
        "",
        "nodes",
    );
    assert!(
        message.ends_with(r#"cannot create resource "nodes" in API group "" at the cluster scope"#),
        "{message}"
    );
}

#[tokio::test]
async fn a_role_binding_grants_only_in_its_namespace() {
    let cluster = rbac_cluster().await;
    let client = ccm(&cluster).await;
    cluster_role(
        &cluster,
        "service-reader",
        rule("", &["services"], &["list"]),
    )
    .await;
    // A ServiceAccount subject without a namespace is one of the binding's.
    role_binding(
        &cluster,
        "kube-system",
        "read-services",
        ("ClusterRole", "service-reader"),
        json!([{"kind": "ServiceAccount", "name": "ccm"}]),
    )
    .await;
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .expect("in the binding's namespace");
    let message = forbidden(
        Api::<Service>::namespaced(client.clone(), "default")
            .list(&ListParams::default())
            .await,
        "",
        "",
        "services",
    );
    assert!(
        message.ends_with(r#"in the namespace "default""#),
        "{message}"
    );
    let message = forbidden(
        Api::<Service>::all(client.clone())
            .list(&ListParams::default())
            .await,
        "",
        "",
        "services",
    );
    assert!(
        message.ends_with("at the cluster scope"),
        "a list across namespaces: {message}"
    );

    // A Role is found in the binding's namespace.
    create(
        Api::<Role>::namespaced(cluster.client.clone(), "kube-system"),
        json!({"metadata": {"name": "leader"}, "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]}),
    )
    .await;
    role_binding(
        &cluster,
        "kube-system",
        "leader",
        ("Role", "leader"),
        ccm_subject(),
    )
    .await;
    let lease: Lease =
        object(json!({"metadata": {"name": "ccm"}, "spec": {"holderIdentity": "a"}}));
    Api::<Lease>::namespaced(client.clone(), "kube-system")
        .create(&PostParams::default(), &lease)
        .await
        .expect("granted by the Role");
    forbidden(
        Api::<Lease>::namespaced(client, "default")
            .create(&PostParams::default(), &lease)
            .await,
        "",
        "coordination.k8s.io",
        "leases",
    );
}

#[tokio::test]
async fn resource_names_allow_a_get_and_a_watch_of_that_name_only() {
    let cluster = rbac_cluster().await;
    let secrets = Api::<Secret>::namespaced(cluster.client.clone(), "kube-system");
    for name in ["cloud-credentials", "other"] {
        create(
            secrets.clone(),
            json!({"metadata": {"name": name}, "stringData": {"key": "v"}}),
        )
        .await;
    }
    let client = ccm(&cluster).await;
    create(
        Api::<Role>::namespaced(cluster.client.clone(), "kube-system"),
        json!({"metadata": {"name": "credentials"}, "rules": [{
            "apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["cloud-credentials"], "verbs": ["get", "list", "watch", "create"],
        }]}),
    )
    .await;
    role_binding(
        &cluster,
        "kube-system",
        "credentials",
        ("Role", "credentials"),
        ccm_subject(),
    )
    .await;
    cluster.emulator.reset_requests();

    let secrets = Api::<Secret>::namespaced(client, "kube-system");
    secrets
        .get("cloud-credentials")
        .await
        .expect("the named secret");
    forbidden(secrets.get("other").await, "other", "", "secrets");
    // kube-runtime lists and watches with `fieldSelector=metadata.name=…`,
    // which names the request.
    let mut watch = std::pin::pin!(watcher::watch_object(secrets.clone(), "cloud-credentials"));
    let listed = within(10, watch.next())
        .await
        .expect("an event")
        .expect("the list is allowed")
        .expect("the secret exists");
    assert_eq!(listed.metadata.name.as_deref(), Some("cloud-credentials"));
    let labels = json!({"metadata": {"labels": {"rotated": "yes"}}});
    Api::<Secret>::namespaced(cluster.client.clone(), "kube-system")
        .patch(
            "cloud-credentials",
            &PatchParams::default(),
            &Patch::Merge(&labels),
        )
        .await
        .expect("patched as the admin");
    let watched = within(10, watch.next())
        .await
        .expect("an event")
        .expect("the watch is allowed")
        .expect("the secret exists");
    assert_eq!(watched.metadata.labels.expect("labels")["rotated"], "yes");
    forbidden(
        secrets.list(&ListParams::default()).await,
        "",
        "",
        "secrets",
    );
    let copy: Secret = object(json!({"metadata": {"name": "cloud-credentials-copy"}}));
    forbidden(
        secrets.create(&PostParams::default(), &copy).await,
        "",
        "",
        "secrets",
    );

    let decisions = cluster.emulator.authorizations();
    let decided = |verb: &str, name: &str| {
        decisions
            .iter()
            .find(|d| {
                d.attributes.user == CCM && d.attributes.verb == verb && d.attributes.name == name
            })
            .map(|d| {
                (
                    d.allowed,
                    d.attributes.namespace.as_str(),
                    d.attributes.resource.as_str(),
                )
            })
    };
    assert_eq!(
        decided("list", "cloud-credentials"),
        Some((true, "kube-system", "secrets"))
    );
    assert_eq!(
        decided("watch", "cloud-credentials"),
        Some((true, "kube-system", "secrets"))
    );
    assert_eq!(decided("list", ""), Some((false, "kube-system", "secrets")));
    assert_eq!(
        decided("create", ""),
        Some((false, "kube-system", "secrets"))
    );
    assert_eq!(
        decided("get", "other"),
        Some((false, "kube-system", "secrets"))
    );
}

#[tokio::test]
async fn a_wildcard_subresource_grants_every_status_and_nothing_else() {
    let cluster = rbac_cluster().await;
    create_node(&cluster.client, "n1").await;
    let client = ccm(&cluster).await;
    grant_everywhere(&cluster, "statuses", rule("", &["*/status"], &["patch"])).await;
    let nodes = Api::<Node>::all(client);
    let condition = json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Down", "message": "down",
        "lastHeartbeatTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}]}});
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(&condition))
        .await
        .expect("nodes/status");
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    let message = forbidden(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Merge(&labels))
            .await,
        "n1",
        "",
        "nodes",
    );
    assert!(
        message.contains(r#"cannot patch resource "nodes" in API group"#),
        "{message}"
    );
}

#[tokio::test]
async fn a_group_subject_grants_its_members() {
    let cluster = rbac_cluster().await;
    create_namespace(&cluster.client, "other").await;
    let member = ccm(&cluster).await;
    let stranger = client_with_token(
        &cluster.emulator,
        &service_account_token(&cluster, "other", "ccm").await,
    )
    .await;
    cluster_role(
        &cluster,
        "namespace-reader",
        rule("", &["namespaces"], &["get"]),
    )
    .await;
    cluster_role_binding(
        &cluster,
        "kube-system-accounts",
        "namespace-reader",
        json!([{"kind": "Group", "name": "system:serviceaccounts:kube-system"}]),
    )
    .await;
    Api::<Namespace>::all(member)
        .get("default")
        .await
        .expect("a member of the group");
    let message = forbidden(
        Api::<Namespace>::all(stranger).get("default").await,
        "default",
        "",
        "namespaces",
    );
    // A namespace is a request in that namespace.
    assert_eq!(
        message,
        r#"namespaces "default" is forbidden: User "system:serviceaccount:other:ccm" cannot get resource "namespaces" in API group "" in the namespace "default""#
    );
}

#[tokio::test]
async fn a_binding_to_a_missing_role_grants_nothing_until_the_role_exists() {
    let cluster = rbac_cluster().await;
    let client = ccm(&cluster).await;
    cluster_role_binding(&cluster, "ccm", "ccm", ccm_subject()).await;
    let nodes = Api::<Node>::all(client);
    let message = forbidden(nodes.list(&ListParams::default()).await, "", "", "nodes");
    assert_eq!(
        message,
        format!(
            r#"nodes is forbidden: User "{CCM}" cannot list resource "nodes" in API group "" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io "ccm" not found"#
        )
    );
    cluster_role(&cluster, "ccm", rule("", &["nodes"], &["list"])).await;
    nodes
        .list(&ListParams::default())
        .await
        .expect("granted once the role exists");
}

#[tokio::test]
async fn roles_and_bindings_are_validated_as_upstream_validates_them() {
    let cluster = start().await;
    let post = |path: &'static str, body: Value| {
        let cluster = &cluster;
        async move {
            send(
                cluster,
                reqwest::Method::POST,
                path,
                "application/json",
                &body.to_string(),
            )
            .await
        }
    };
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
    let answer = post(
        roles,
        json!({"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["nodes"]}]}),
    )
    .await;
    assert_eq!(answer.code, 422, "{}", answer.body);
    assert_eq!(
        answer.body["message"],
        r#"Role.rbac.authorization.k8s.io "r" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"#
    );
    let bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let answer = post(
        bindings,
        json!({"metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "ccm"}]}),
    )
    .await;
    assert_eq!(
        answer.body["message"],
        r#"ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole", subjects[0].namespace: Required value]"#
    );
    let answer = post(bindings, json!({"metadata": {"name": "b"}})).await;
    assert_eq!(
        answer.body["message"],
        r#"ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported value: "": supported values: "ClusterRole", roleRef.name: Required value]"#,
        "a missing roleRef is Go's zero value, its apiGroup defaulted"
    );

    // The API group of a reference defaults; the reference never changes.
    let answer = post(
        bindings,
        json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [{"kind": "User", "name": "alice"}]}),
    )
    .await;
    assert_eq!(answer.code, 201, "{}", answer.body);
    assert_eq!(
        answer.body["roleRef"]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    assert_eq!(
        answer.body["subjects"][0]["apiGroup"],
        "rbac.authorization.k8s.io"
    );
    let api = Api::<ClusterRoleBinding>::all(cluster.client.clone());
    let mut binding = api.get("b").await.expect("stored");
    binding.role_ref.name = "edit".to_owned();
    let changed = status(
        api.replace("b", &PostParams::default(), &binding)
            .await
            .expect_err("immutable"),
    );
    assert_eq!(changed.code, 422);
    assert_eq!(
        changed.message,
        r#"ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef"#
    );
    binding.role_ref.name = "view".to_owned();
    binding.subjects = None;
    api.replace("b", &PostParams::default(), &binding)
        .await
        .expect("the subjects may change");
}

#[tokio::test]
async fn discovery_serves_the_rbac_kinds_to_any_authenticated_user() {
    let cluster = rbac_cluster().await;
    let token = service_account_token(&cluster, "kube-system", "ccm").await;
    let client = client_with_token(&cluster.emulator, &token).await;
    let discovery = Discovery::new(client)
        .run()
        .await
        .expect("discovery is allowed");
    let rbac = discovery
        .get("rbac.authorization.k8s.io")
        .expect("the RBAC group");
    let mut plurals: Vec<String> = rbac
        .recommended_resources()
        .into_iter()
        .map(|(r, _)| r.plural)
        .collect();
    plurals.sort();
    assert_eq!(
        plurals,
        [
            "clusterrolebindings",
            "clusterroles",
            "rolebindings",
            "roles"
        ]
    );
    for path in [
        "/api",
        "/apis",
        "/api/v1",
        "/apis/rbac.authorization.k8s.io/v1",
    ] {
        let answer = send_as(
            &cluster,
            &token,
            reqwest::Method::GET,
            path,
            "application/json",
            "",
        )
        .await;
        assert_eq!(answer.code, 200, "{path}: {}", answer.body);
    }
    let post = send_as(
        &cluster,
        &token,
        reqwest::Method::POST,
        "/api",
        "application/json",
        "{}",
    )
    .await;
    assert_eq!(post.code, 403);
    assert_eq!(
        post.body["message"],
        format!(r#"forbidden: User "{CCM}" cannot post path "/api""#)
    );
    assert_eq!(post.body["details"], json!({}));
}

#[tokio::test]
async fn the_admin_may_do_anything() {
    let cluster = rbac_cluster().await;
    create_node(&cluster.client, "n1").await;
    let roles = Api::<ClusterRole>::all(cluster.client.clone());
    // Helm charts name roles like the bootstrap ones, with colons.
    let name = "system:cloud-controller-manager";
    create(roles.clone(), json!({"metadata": {"name": name}})).await;
    roles
        .get(name)
        .await
        .expect("the admin reads cluster roles");
    let decisions = cluster.emulator.authorizations();
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    assert!(
        decisions
            .iter()
            .all(|d| d.allowed && d.attributes.user == ADMIN_USER),
        "{decisions:?}"
    );
    assert!(
        decisions[0]
            .attributes
            .groups
            .contains(&"system:masters".to_owned())
    );
}

#[tokio::test]
async fn under_always_allow_a_service_account_may_do_anything_and_is_recorded() {
    let cluster = start().await;
    let client = ccm(&cluster).await;
    cluster.emulator.reset_requests();
    create_node(&client, "n1").await;
    let nodes = Api::<Node>::all(client);
    nodes.get("n1").await.expect("allowed");
    let labels = json!({"metadata": {"labels": {"a": "b"}}});
    nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("allowed");
    let decisions = cluster.emulator.authorizations();
    let attributes: Vec<(&str, &str, &str, &str)> = decisions
        .iter()
        .map(|d| {
            assert!(d.allowed);
            assert_eq!(d.count, 1);
            let a: &Attributes = &d.attributes;
            assert_eq!(a.user, service_account_user("kube-system", "ccm"));
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.subresource.as_str(),
                a.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        attributes,
        [
            ("create", "nodes", "", ""),
            ("get", "nodes", "", "n1"),
            ("patch", "nodes", "status", "n1")
        ]
    );
    assert!(decisions.iter().all(|d| d.attributes.groups
        == [
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated"
        ]));
    cluster.emulator.reset_requests();
    assert!(cluster.emulator.authorizations().is_empty());
}

#[tokio::test]
async fn bindings_print_their_role_and_subjects_as_kubectl_shows_them() {
    let cluster = start().await;
    role_binding(
        &cluster,
        "default",
        "b",
        ("ClusterRole", "view"),
        json!([
            {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "name": "ccm", "namespace": "kube-system"}, {"kind": "User", "name": "bob"},
        ]),
    )
    .await;
    let table = crate::harness::http_client(&cluster.emulator)
        .get(format!(
            "{}/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            cluster.emulator.url()
        ))
        .bearer_auth("kube-emulator")
        .header("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .send()
        .await
        .expect("answered")
        .json::<Value>()
        .await
        .expect("a table");
    let columns: Vec<(&str, u64)> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or(""),
                c["priority"].as_u64().unwrap_or(9),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Name", 0),
            ("Role", 0),
            ("Age", 0),
            ("Users", 1),
            ("Groups", 1),
            ("ServiceAccounts", 1)
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "b");
    assert_eq!(cells[1], "ClusterRole/view");
    assert_eq!(
        &cells.as_array().expect("cells")[3..],
        [json!("alice, bob"), json!("devs"), json!("kube-system/ccm")]
    );
}

#[tokio::test]
async fn the_binary_takes_the_authorization_mode() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let kubeconfig = dir.path().join("kubeconfig");
    let binary = spawn_binary_with(&kubeconfig, &["--authorization-mode", "RBAC"]).await;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("a kubeconfig"),
        &Default::default(),
    )
    .await
    .expect("usable");
    let admin = Client::try_from(config.clone()).expect("a client");
    let accounts =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(admin.clone(), "kube-system");
    accounts
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "ccm"}})),
        )
        .await
        .expect("the admin may");
    let token = accounts
        .create_token_request("ccm", &PostParams::default(), &Default::default())
        .await
        .expect("a token")
        .status
        .expect("a status")
        .token;
    let mut robot = config;
    robot.auth_info.token = Some(token.into());
    let refused = Api::<Node>::all(Client::try_from(robot).expect("a client"))
        .list(&ListParams::default())
        .await;
    assert_eq!(status(refused.expect_err("refused")).code, 403);
    drop(binary);
}

/// What a delegating server (a cloud-controller-manager's secure port) asks: a TokenReview of
/// its caller's token and a SubjectAccessReview of the caller's access, each allowed by the
/// bootstrap `system:auth-delegator` role and answered by the emulator's own authenticator
/// and RBAC.
#[tokio::test]
async fn a_delegating_server_reviews_tokens_and_access_through_system_auth_delegator() {
    use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
    use k8s_openapi::api::authorization::v1::{
        NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };

    let cluster = rbac_cluster().await;
    let server = ccm(&cluster).await;
    create_namespace(&cluster.client, "monitoring").await;
    let caller = service_account_token(&cluster, "monitoring", "prometheus").await;
    let token_review = |token: &str| TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviews = Api::<TokenReview>::all(server.clone());
    let message = forbidden(
        reviews
            .create(&PostParams::default(), &token_review(&caller))
            .await,
        "",
        "authentication.k8s.io",
        "tokenreviews",
    );
    assert!(
        message.contains(r#"cannot create resource "tokenreviews""#),
        "{message}"
    );

    cluster_role_binding(
        &cluster,
        "ccm-delegator",
        "system:auth-delegator",
        ccm_subject(),
    )
    .await;
    let reviewed = reviews
        .create(&PostParams::default(), &token_review(&caller))
        .await
        .expect("a review");
    let status = reviewed.status.expect("a status");
    assert_eq!(status.authenticated, Some(true));
    let user = status.user.expect("a user");
    let prometheus = service_account_user("monitoring", "prometheus");
    assert_eq!(user.username.as_deref(), Some(prometheus.as_str()));
    assert!(
        user.groups
            .unwrap_or_default()
            .contains(&"system:authenticated".to_owned())
    );
    let unknown = reviews
        .create(&PostParams::default(), &token_review("not-a-token"))
        .await
        .expect("a review");
    assert_eq!(unknown.status.expect("a status").authenticated, Some(false));

    let access = |user: &str| SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:authenticated".to_owned()]),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".to_owned()),
                verb: Some("get".to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let decisions = Api::<SubjectAccessReview>::all(server);
    let denied = decisions
        .create(&PostParams::default(), &access(&prometheus))
        .await
        .expect("a review");
    assert!(!denied.status.expect("a status").allowed);
    cluster_role(
        &cluster,
        "metrics-reader",
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
    )
    .await;
    cluster_role_binding(
        &cluster,
        "prometheus-metrics",
        "metrics-reader",
        json!([{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]),
    )
    .await;
    let allowed = decisions
        .create(&PostParams::default(), &access(&prometheus))
        .await
        .expect("a review");
    assert!(allowed.status.expect("a status").allowed);
    let invalid = decisions
        .create(&PostParams::default(), &SubjectAccessReview::default())
        .await
        .expect_err("neither attributes nor a user");
    assert_eq!(crate::harness::status(invalid).code, 422);
    let counts = cluster.emulator.requests().counts;
    assert_eq!(
        counts.get("create tokenreviews.authentication.k8s.io"),
        Some(&2),
        "{counts:?}"
    );
}

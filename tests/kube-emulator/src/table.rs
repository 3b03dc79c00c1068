//! Table output, what `kubectl get` asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`): the columns and cells of
//! upstream's printers (`pkg/printers/internalversion`), so `kubectl get
//! nodes` shows STATUS and VERSION, `kubectl get services` the load
//! balancer's EXTERNAL-IP and `kubectl get deploy` READY and UP-TO-DATE. As the API server does, every column is sent,
//! the `-o wide` ones with priority 1; kubectl picks. Custom resources show
//! Name and their CRD version's `additionalPrinterColumns`
//! ([`crate::printer_columns`]), or Name and Age when it declares none.

use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::kinds::{self, array_at, str_at};
use crate::printer_columns::PrinterColumn;
use crate::resources::{ResourceType, Rules};
use crate::selectors::LabelSelector;
use crate::watch;

/// What each row carries besides its cells (`includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowObject {
    None,
    /// `PartialObjectMetadata`, the default: kubectl reads the namespace
    /// and labels (`-A`, `--show-labels`, `-L`) from it.
    #[default]
    Metadata,
    Object,
}

impl RowObject {
    /// Parses `includeObject`; `None` for a value upstream rejects.
    pub fn parse(value: Option<&str>) -> Option<RowObject> {
        match value.unwrap_or("") {
            "" | "Metadata" => Some(RowObject::Metadata),
            "None" => Some(RowObject::None),
            "Object" => Some(RowObject::Object),
            _ => None,
        }
    }
}

/// A negotiated Table response: the `meta.k8s.io` version asked for and
/// what rows carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub api_version: &'static str,
    pub rows: RowObject,
}

/// One object (as its endpoint presents it) as a Table.
pub fn object(rt: &ResourceType, view: &Value, format: Format) -> Value {
    render(rt, std::slice::from_ref(view), json!({}), format)
}

/// A list response (as its endpoint presents it) as a Table; the list's
/// resourceVersion and continue token carry over.
pub fn list(rt: &ResourceType, list: &Value, format: Format) -> Value {
    let items = list
        .get("items")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let metadata = list.get("metadata").cloned().unwrap_or_else(|| json!({}));
    render(rt, items, metadata, format)
}

fn render(rt: &ResourceType, views: &[Value], metadata: Value, format: Format) -> Value {
    let now = Timestamp::now();
    let rows: Vec<Value> = views
        .iter()
        .map(|view| {
            let object = match format.rows {
                RowObject::None => Value::Null,
                RowObject::Metadata => {
                    let mut partial = watch::present_metadata(view.clone());
                    partial["apiVersion"] = json!(format.api_version);
                    partial
                }
                RowObject::Object => view.clone(),
            };
            json!({"cells": cells(rt, view, now), "object": object})
        })
        .collect();
    let definition = |name: &str, kind: &str, format: &str, description: &str, priority: i64| {
        json!({
            "name": name, "type": kind, "format": format,
            "description": description, "priority": priority,
        })
    };
    let mut columns: Vec<Value> = columns(rt)
        .iter()
        .map(|c| definition(c.name, c.kind, c.format, c.description, c.priority.into()))
        .collect();
    columns.extend(
        printer_columns(rt)
            .iter()
            .map(|c| definition(&c.name, &c.kind, &c.format, &c.description, c.priority)),
    );
    json!({
        "kind": "Table",
        "apiVersion": format.api_version,
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    priority: u8,
    description: &'static str,
}

const fn column(name: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format: "",
        priority: 0,
        description,
    }
}

/// A column `kubectl get` shows only with `-o wide`.
const fn wide(name: &'static str, description: &'static str) -> Column {
    Column {
        priority: 1,
        ..column(name, description)
    }
}

const NAME: Column = Column {
    format: "name",
    ..column("Name", "Name must be unique within a namespace.")
};
const AGE: Column = column("Age", "When the object was created.");

const NODE: &[Column] = &[
    NAME,
    column("Status", "The status of the node"),
    column("Roles", "The roles of the node"),
    AGE,
    column("Version", "Kubelet Version reported by the node."),
    wide("Internal-IP", "The node's first InternalIP address."),
    wide("External-IP", "The node's first ExternalIP address."),
    wide("OS-Image", "OS Image reported by the node."),
    wide("Kernel-Version", "Kernel Version reported by the node."),
    wide(
        "Container-Runtime",
        "ContainerRuntime Version reported by the node.",
    ),
];
const SERVICE: &[Column] = &[
    NAME,
    column("Type", "How the Service is exposed."),
    column("Cluster-IP", "The IP address of the service."),
    column(
        "External-IP",
        "External IPs, or the load balancer's ingress IPs and hostnames.",
    ),
    column("Port(s)", "The ports that are exposed by this service."),
    AGE,
    wide(
        "Selector",
        "Route service traffic to pods with these labels.",
    ),
];
const NAMESPACE: &[Column] = &[NAME, column("Status", "The status of the namespace"), AGE];
const CONFIG_MAP: &[Column] = &[NAME, column("Data", "Number of entries."), AGE];
const SECRET: &[Column] = &[
    NAME,
    column(
        "Type",
        "Used to facilitate programmatic handling of secret data.",
    ),
    column("Data", "Number of entries."),
    AGE,
];
const SERVICE_ACCOUNT: &[Column] = &[
    NAME,
    column(
        "Secrets",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];
const LEASE: &[Column] = &[
    NAME,
    column("Holder", "Name of the current holder of the lease."),
    AGE,
];
const NETWORK_POLICY: &[Column] = &[
    NAME,
    column(
        "Pod-Selector",
        "Selects the pods to which this NetworkPolicy object applies.",
    ),
    AGE,
];
const EVENT: &[Column] = &[
    column(
        "Last Seen",
        "The time at which the most recent occurrence was recorded.",
    ),
    column("Type", "Type of this event (Normal, Warning)."),
    column("Reason", "Why the action was taken."),
    column("Object", "The object this Event is about."),
    wide("Subobject", "The part of the object this Event is about."),
    wide("Source", "The component reporting this event."),
    column("Message", "A human-readable description of the status."),
    wide(
        "First Seen",
        "The time at which the event was first recorded.",
    ),
    wide("Count", "The number of times this event has occurred."),
    Column {
        format: "name",
        ..wide("Name", "Name must be unique within a namespace.")
    },
];
const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide(
    "Images",
    "Images referenced by each container in the template.",
);
/// `deploymentColumnDefinitions`.
const DEPLOYMENT: &[Column] = &[
    NAME,
    column("Ready", "Number of the pod with ready state"),
    column(
        "Up-to-date",
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    column(
        "Available",
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    ),
];
/// A DaemonSet's counters are integer columns.
const fn integer(name: &'static str, description: &'static str) -> Column {
    Column {
        kind: "integer",
        ..column(name, description)
    }
}
/// `daemonSetColumnDefinitions`.
const DAEMON_SET: &[Column] = &[
    NAME,
    integer(
        "Desired",
        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    ),
    integer(
        "Current",
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    ),
    integer(
        "Ready",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    integer(
        "Up-to-date",
        "The total number of nodes that are running updated daemon pod",
    ),
    integer(
        "Available",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    ),
    column(
        "Node Selector",
        "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        "A label query over pods that are managed by the daemon set. Must match in order to be controlled. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    ),
];
/// `roleBindingsColumnDefinitions` and `clusterRoleBindingsColumnDefinitions`.
const ROLE_BINDING: &[Column] = &[
    NAME,
    column(
        "Role",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
    ),
    AGE,
    wide("Users", "Users in the roleBinding"),
    wide("Groups", "Groups in the roleBinding"),
    wide("ServiceAccounts", "ServiceAccounts in the roleBinding"),
];
const CLUSTER_ROLE_BINDING: &[Column] = &[
    NAME,
    column(
        "Role",
        "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
    ),
    AGE,
    wide("Users", "Users in the clusterRoleBinding"),
    wide("Groups", "Groups in the clusterRoleBinding"),
    wide(
        "ServiceAccounts",
        "ServiceAccounts in the clusterRoleBinding",
    ),
];
/// What kinds without a printer show (`DefaultTableConvertor`): CRDs,
/// Roles and ClusterRoles.
const CRD: &[Column] = &[
    NAME,
    Column {
        kind: "date",
        ..column("Created At", "When the object was created.")
    },
];
const CUSTOM: &[Column] = &[
    NAME,
    Column {
        kind: "date",
        ..AGE
    },
];

/// A CRD version's `additionalPrinterColumns`; when it declares any, they
/// follow Name in place of the default Age.
fn printer_columns(rt: &ResourceType) -> &[PrinterColumn] {
    rt.custom
        .as_ref()
        .map(|c| c.printer_columns.as_slice())
        .unwrap_or_default()
}

fn columns(rt: &ResourceType) -> &'static [Column] {
    match rt.rules {
        Rules::Custom if !printer_columns(rt).is_empty() => &CUSTOM[..1],
        Rules::Node => NODE,
        Rules::Service => SERVICE,
        Rules::Namespace => NAMESPACE,
        Rules::ConfigMap => CONFIG_MAP,
        Rules::Secret => SECRET,
        Rules::ServiceAccount => SERVICE_ACCOUNT,
        Rules::Lease => LEASE,
        Rules::NetworkPolicy => NETWORK_POLICY,
        Rules::Deployment => DEPLOYMENT,
        Rules::DaemonSet => DAEMON_SET,
        Rules::Event => EVENT,
        Rules::CustomResourceDefinition | Rules::Role | Rules::ClusterRole => CRD,
        Rules::RoleBinding => ROLE_BINDING,
        Rules::ClusterRoleBinding => CLUSTER_ROLE_BINDING,
        Rules::Custom => CUSTOM,
    }
}

fn cells(rt: &ResourceType, view: &Value, now: Timestamp) -> Vec<Value> {
    let name = json!(str_at(view, "/metadata/name"));
    let age = json!(since(str_at(view, "/metadata/creationTimestamp"), now));
    match rt.rules {
        Rules::Node => node(view, name, age),
        Rules::Service => service(view, name, age),
        Rules::Namespace => vec![name, json!(str_at(view, "/status/phase")), age],
        Rules::ConfigMap => vec![name, json!(entries(view, &["data", "binaryData"])), age],
        Rules::Secret => vec![
            name,
            json!(str_at(view, "/type")),
            json!(entries(view, &["data"])),
            age,
        ],
        Rules::ServiceAccount => vec![name, json!(array_at(view, "/secrets").len()), age],
        Rules::Lease => vec![name, json!(str_at(view, "/spec/holderIdentity")), age],
        Rules::NetworkPolicy => vec![name, json!(pod_selector(view)), age],
        Rules::Deployment => deployment(view, name, age),
        Rules::DaemonSet => daemon_set(view, name, age),
        // Both event endpoints print the core form, as upstream prints the
        // internal type.
        Rules::Event => event(&kinds::to_storage(rt, view.clone()), now),
        Rules::CustomResourceDefinition | Rules::Role | Rules::ClusterRole => {
            vec![name, json!(str_at(view, "/metadata/creationTimestamp"))]
        }
        Rules::RoleBinding | Rules::ClusterRoleBinding => role_binding(view, name, age),
        Rules::Custom if !printer_columns(rt).is_empty() => std::iter::once(name)
            .chain(printer_columns(rt).iter().map(|c| c.cell(view, now)))
            .collect(),
        Rules::Custom => vec![name, age],
    }
}

/// `printNode`.
fn node(node: &Value, name: Value, age: Value) -> Vec<Value> {
    let ready = array_at(node, "/status/conditions")
        .iter()
        .find(|c| str_at(c, "/type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, "/status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<&str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) => Some(role),
                None if key == "kubernetes.io/role" => value.as_str(),
                None => None,
            },
        )
        .filter(|role| !role.is_empty())
        .collect();
    roles.sort_unstable();
    roles.dedup();
    let address = |kind: &str| {
        array_at(node, "/status/addresses")
            .iter()
            .find(|a| str_at(a, "/type") == kind)
            .map_or("<none>", |a| str_at(a, "/address"))
            .to_owned()
    };
    let info = |field: &str| {
        or(
            str_at(node, &format!("/status/nodeInfo/{field}")),
            "<unknown>",
        )
    };
    vec![
        name,
        json!(status.join(",")),
        json!(or(&roles.join(","), "<none>")),
        age,
        json!(str_at(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// `printService`.
fn service(service: &Value, name: Value, age: Value) -> Vec<Value> {
    let kind = str_at(service, "/spec/type");
    let cluster_ip = array_at(service, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let ports: Vec<String> = array_at(service, "/spec/ports")
        .iter()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let protocol = or(str_at(p, "/protocol"), "TCP");
            match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                Some(node_port) => format!("{port}:{node_port}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect();
    let mut selector: Vec<String> = service
        .pointer("/spec/selector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    selector.sort();
    vec![
        name,
        json!(kind),
        json!(cluster_ip),
        json!(external_ip(service, kind)),
        json!(or(&ports.join(","), "<none>")),
        age,
        json!(or(&selector.join(","), "<none>")),
    ]
}

/// A status counter, 0 when unset.
fn count(obj: &Value, field: &str) -> i64 {
    obj.pointer(&format!("/status/{field}"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// The wide columns of a workload: its template's container names and
/// images, and its selector as `labels.Selector` prints it.
fn workload_wide(workload: &Value) -> [Value; 3] {
    let containers = array_at(workload, "/spec/template/spec/containers");
    let joined = |field: &str| {
        containers
            .iter()
            .map(|c| str_at(c, field))
            .collect::<Vec<_>>()
            .join(",")
    };
    let selector = workload
        .pointer("/spec/selector")
        .map(LabelSelector::from_api)
        .and_then(Result::ok)
        .map(|s| s.to_string())
        .unwrap_or_default();
    [
        json!(joined("/name")),
        json!(joined("/image")),
        json!(selector),
    ]
}

/// `printDeployment`.
fn deployment(deployment: &Value, name: Value, age: Value) -> Vec<Value> {
    let desired = deployment
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut cells = vec![
        name,
        json!(format!("{}/{desired}", count(deployment, "readyReplicas"))),
        json!(count(deployment, "updatedReplicas")),
        json!(count(deployment, "availableReplicas")),
        age,
    ];
    cells.extend(workload_wide(deployment));
    cells
}

/// `printDaemonSet`.
fn daemon_set(daemon_set: &Value, name: Value, age: Value) -> Vec<Value> {
    let mut node_selector: Vec<String> = daemon_set
        .pointer("/spec/template/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    node_selector.sort();
    let mut cells = vec![name];
    cells.extend(
        [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
        ]
        .map(|field| json!(count(daemon_set, field))),
    );
    cells.push(json!(or(&node_selector.join(","), "<none>")));
    cells.push(age);
    cells.extend(workload_wide(daemon_set));
    cells
}

/// `printRoleBinding` and `printClusterRoleBinding`: the role as
/// `Kind/name`, and the subjects by kind (`SubjectsStrings`).
fn role_binding(binding: &Value, name: Value, age: Value) -> Vec<Value> {
    let role = format!(
        "{}/{}",
        str_at(binding, "/roleRef/kind"),
        str_at(binding, "/roleRef/name")
    );
    let subjects = array_at(binding, "/subjects");
    let of_kind = |kind: &str| {
        subjects
            .iter()
            .filter(|s| str_at(s, "/kind") == kind)
            .map(|s| match kind {
                "ServiceAccount" => format!("{}/{}", str_at(s, "/namespace"), str_at(s, "/name")),
                _ => str_at(s, "/name").to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        name,
        json!(role),
        age,
        json!(of_kind("User")),
        json!(of_kind("Group")),
        json!(of_kind("ServiceAccount")),
    ]
}

/// `getServiceExternalIP`, wide (never clipped).
fn external_ip(service: &Value, kind: &str) -> String {
    let external: Vec<&str> = array_at(service, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    match kind {
        "ClusterIP" | "NodePort" => or(&external.join(","), "<none>"),
        "LoadBalancer" => {
            let mut ingress: Vec<String> = array_at(service, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| or(str_at(i, "/ip"), str_at(i, "/hostname")))
                .filter(|i| !i.is_empty())
                .collect();
            ingress.sort_unstable();
            ingress.dedup();
            ingress.extend(external.into_iter().map(str::to_owned));
            or(&ingress.join(","), "<pending>")
        }
        "ExternalName" => str_at(service, "/spec/externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

/// `printEvent`, on the core form, wide.
fn event(event: &Value, now: Timestamp) -> Vec<Value> {
    let first = match str_at(event, "/firstTimestamp") {
        "" => since(str_at(event, "/eventTime"), now),
        first => since(first, now),
    };
    let mut last = match str_at(event, "/lastTimestamp") {
        "" => first.clone(),
        last => since(last, now),
    };
    let mut count = event.get("count").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = event.get("series").filter(|s| s.is_object()) {
        last = since(str_at(series, "/lastObservedTime"), now);
        count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        // Singleton events have no count in the events.k8s.io API.
        count = 1;
    }
    let kind = str_at(event, "/involvedObject/kind").to_lowercase();
    let target = match str_at(event, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = or(
        str_at(event, "/source/component"),
        str_at(event, "/reportingComponent"),
    );
    let instance = or(
        str_at(event, "/source/host"),
        str_at(event, "/reportingInstance"),
    );
    let source = match (component.as_str(), instance.as_str()) {
        ("", _) => "<unknown>".to_owned(),
        (component, "") => component.to_owned(),
        (component, instance) => format!("{component}, {instance}"),
    };
    vec![
        json!(last),
        json!(str_at(event, "/type")),
        json!(str_at(event, "/reason")),
        json!(target),
        json!(str_at(event, "/involvedObject/fieldPath")),
        json!(source),
        json!(str_at(event, "/message").trim()),
        json!(first),
        json!(count),
        json!(str_at(event, "/metadata/name")),
    ]
}

/// How many keys the maps at `fields` hold together.
fn entries(obj: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
        .map(Map::len)
        .sum()
}

/// `value`, or `fallback` when it is empty.
fn or(value: &str, fallback: &str) -> String {
    if value.is_empty() { fallback } else { value }.to_owned()
}

/// `translateTimestampSince`: the age of an RFC 3339 timestamp, as kubectl
/// prints it; `<unknown>` when absent.
pub fn since(timestamp: &str, now: Timestamp) -> String {
    match timestamp.parse::<Timestamp>() {
        Ok(then) => human_duration(now.as_second() - then.as_second()),
        Err(_) => "<unknown>".to_owned(),
    }
}

/// `duration.HumanDuration` from apimachinery: coarser the older it is.
fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        };
    }
    format!("{years}y")
}

/// A NetworkPolicy's pod selector as `kubectl get netpol` prints it: `k=v,…` of its
/// `matchLabels` (`<none>` when it selects every pod).
fn pod_selector(view: &Value) -> String {
    let labels = view
        .pointer("/spec/podSelector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    if labels.is_empty() {
        "<none>".to_owned()
    } else {
        labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (185, "3m5s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, printed) in cases {
            assert_eq!(human_duration(seconds), printed, "{seconds}s");
        }
    }

    #[test]
    fn a_timestamp_that_is_absent_has_an_unknown_age() {
        assert_eq!(since("", Timestamp::now()), "<unknown>");
        let now: Timestamp = "2025-01-01T01:00:00Z".parse().unwrap();
        assert_eq!(since("2025-01-01T00:00:00Z", now), "60m");
    }

    #[test]
    fn load_balancer_services_show_their_ingress_or_pending() {
        let mut service = json!({"spec": {"type": "LoadBalancer"}});
        assert_eq!(external_ip(&service, "LoadBalancer"), "<pending>");
        service["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example"}]}});
        assert_eq!(
            external_ip(&service, "LoadBalancer"),
            "203.0.113.9,lb.example"
        );
    }
}

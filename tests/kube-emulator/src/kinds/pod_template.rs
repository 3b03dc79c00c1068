//! The pod template of a workload (`spec.template` of Deployments and
//! DaemonSets): core/v1's defaulting of it (`SetDefaults_PodSpec`,
//! `SetDefaults_Container`, probes, ports, volumes and field references),
//! the part of `ValidatePodTemplateSpec` a workload's author meets first
//! (labels, volume and container names, images, ports, policies), and the
//! strategic merge keys of its lists.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::meta;
use crate::patch::ListStrategy;
use crate::status::FieldError;
use crate::validation;

/// The container lists of a pod spec that share the container rules.
const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// Sets `map[key]` to `value` where it is absent, null or Go's zero value
/// (`""`, `0`), as the generated defaulters test for.
fn default(map: &mut Map<String, Value>, key: &str, value: Value) {
    let zero = match map.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_i64() == Some(0),
        Some(_) => false,
    };
    if zero {
        map.insert(key.to_owned(), value);
    }
}

/// The objects of the list `map[key]`, mutably.
fn items_mut<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// The objects of the list at `pointer`.
fn items<'a>(obj: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// v1's defaults of a `PodTemplateSpec`. Its metadata drops empty maps
/// and lists as the object's does, and Go encodes its zero
/// `creationTimestamp` as `null`, so a real server answers that too.
pub fn apply_defaults(template: &mut Value) {
    meta::omit_empty(template);
    let Some(template) = template.as_object_mut() else {
        return;
    };
    let metadata = template.entry("metadata").or_insert_with(|| json!({}));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.entry("creationTimestamp").or_insert(Value::Null);
    }
    let Some(spec) = template
        .entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    else {
        return;
    };
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "schedulerName", json!("default-scheduler"));
    spec.entry("securityContext").or_insert_with(|| json!({}));
    for list in CONTAINER_LISTS {
        for container in items_mut(spec, list) {
            default_container(container);
        }
    }
    for volume in items_mut(spec, "volumes") {
        default_volume(volume);
    }
}

/// `SetDefaults_Container` and the defaults of what a container holds.
fn default_container(container: &mut Map<String, Value>) {
    let image = container.get("image").and_then(Value::as_str).unwrap_or("");
    let pull = if image_tag(image) == Some("latest") {
        "Always"
    } else {
        "IfNotPresent"
    };
    default(container, "imagePullPolicy", json!(pull));
    default(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default(container, "terminationMessagePolicy", json!("File"));
    // `ResourceRequirements` is a struct, not a pointer: always encoded.
    container.entry("resources").or_insert_with(|| json!({}));
    for port in items_mut(container, "ports") {
        default(port, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe).and_then(Value::as_object_mut) {
            default(probe, "timeoutSeconds", json!(1));
            default(probe, "periodSeconds", json!(10));
            default(probe, "successThreshold", json!(1));
            default(probe, "failureThreshold", json!(3));
            if let Some(get) = probe.get_mut("httpGet").and_then(Value::as_object_mut) {
                default(get, "path", json!("/"));
                default(get, "scheme", json!("HTTP"));
            }
        }
    }
    for env in items_mut(container, "env") {
        if let Some(field_ref) = env
            .get_mut("valueFrom")
            .and_then(|from| from.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            default(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// The tag `ParseImageName` finds: the image's own, `latest` when it has
/// neither a tag nor a digest, none when it has only a digest or cannot be
/// parsed (an empty image).
fn image_tag(image: &str) -> Option<&str> {
    if image.is_empty() {
        return None;
    }
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    match last_segment.split_once(':') {
        Some((_, tag)) => Some(tag),
        None if digest.is_none() => Some("latest"),
        None => None,
    }
}

/// `SetDefaults_Volume` and its sources' defaults: a volume with no source
/// is an `emptyDir`, projected files are mode 0644.
fn default_volume(volume: &mut Map<String, Value>) {
    if volume.keys().all(|key| key == "name") {
        volume.insert("emptyDir".to_owned(), json!({}));
    }
    for source in ["secret", "configMap", "projected", "downwardAPI"] {
        if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
            default(source, "defaultMode", json!(0o644));
        }
    }
    if let Some(host_path) = volume.get_mut("hostPath").and_then(Value::as_object_mut) {
        host_path.entry("type").or_insert_with(|| json!(""));
    }
}

/// `ValidatePodTemplateSpec` of the template at `path`, for the fields
/// listed in the module doc; upstream's `labels` path lacks `metadata`.
pub fn validate(template: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(labels) = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        errs.extend(meta::validate_labels(labels, &format!("{path}.labels")));
    }
    let spec_path = format!("{path}.spec");
    let mut volumes = BTreeSet::new();
    for (i, volume) in items(template, "/spec/volumes").enumerate() {
        let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
        errs.extend(unique_name(
            name,
            &format!("{spec_path}.volumes[{i}].name"),
            &mut volumes,
        ));
    }
    if items(template, "/spec/containers").next().is_none() {
        errs.push(FieldError::required(format!("{spec_path}.containers"), ""));
    }
    let mut containers = BTreeSet::new();
    for list in CONTAINER_LISTS {
        for (i, container) in items(template, &format!("/spec/{list}")).enumerate() {
            errs.extend(validate_container(
                container,
                &format!("{spec_path}.{list}[{i}]"),
                &mut containers,
            ));
        }
    }
    let spec = template.get("spec").unwrap_or(&Value::Null);
    errs.extend(one_of(
        spec,
        "restartPolicy",
        &spec_path,
        &["Always", "OnFailure", "Never"],
    ));
    errs.extend(one_of(
        spec,
        "dnsPolicy",
        &spec_path,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    ));
    errs
}

/// `obj[key]` (at `path.key`) must be one of `supported`.
fn one_of(obj: &Value, key: &str, path: &str, supported: &[&str]) -> Option<FieldError> {
    let value = obj.get(key).and_then(Value::as_str).unwrap_or("");
    (!supported.contains(&value))
        .then(|| FieldError::not_supported(format!("{path}.{key}"), value, supported))
}

/// A required DNS-1123 label that no earlier item of `seen` used.
fn unique_name(name: &str, path: &str, seen: &mut BTreeSet<String>) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let mut errs: Vec<FieldError> = validation::dns1123_label(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, msg))
        .collect();
    if !seen.insert(name.to_owned()) {
        errs.push(FieldError::duplicate(path, name));
    }
    errs
}

/// `validateContainers`' common checks of one container: its name, image,
/// ports and pull and termination message policies.
fn validate_container(
    container: &Value,
    path: &str,
    names: &mut BTreeSet<String>,
) -> Vec<FieldError> {
    let text = |key: &str| container.get(key).and_then(Value::as_str).unwrap_or("");
    let mut errs = unique_name(text("name"), &format!("{path}.name"), names);
    if text("image").is_empty() {
        errs.push(FieldError::required(format!("{path}.image"), ""));
    }
    let mut port_names = BTreeSet::new();
    for (i, port) in items(container, "/ports").enumerate() {
        errs.extend(validate_port(
            port,
            &format!("{path}.ports[{i}]"),
            &mut port_names,
        ));
    }
    errs.extend(one_of(
        container,
        "imagePullPolicy",
        path,
        &["Always", "IfNotPresent", "Never"],
    ));
    errs.extend(one_of(
        container,
        "terminationMessagePolicy",
        path,
        &["File", "FallbackToLogsOnError"],
    ));
    errs
}

/// `validateContainerPorts` of one port.
fn validate_port(port: &Value, path: &str, names: &mut BTreeSet<String>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let number = |key: &str| port.get(key).and_then(Value::as_i64).unwrap_or(0);
    match number("containerPort") {
        0 => errs.push(FieldError::required(format!("{path}.containerPort"), "")),
        n => errs.extend(
            validation::port_number(n)
                .into_iter()
                .map(|msg| FieldError::invalid(format!("{path}.containerPort"), n, msg)),
        ),
    }
    let host = number("hostPort");
    if host != 0 {
        errs.extend(
            validation::port_number(host)
                .into_iter()
                .map(|msg| FieldError::invalid(format!("{path}.hostPort"), host, msg)),
        );
    }
    let name = port.get("name").and_then(Value::as_str).unwrap_or("");
    if !name.is_empty() {
        errs.extend(
            validation::port_name(name)
                .into_iter()
                .map(|msg| FieldError::invalid(format!("{path}.name"), name, msg)),
        );
        if !names.insert(name.to_owned()) {
            errs.push(FieldError::duplicate(format!("{path}.name"), name));
        }
    }
    let protocol = port.get("protocol").and_then(Value::as_str).unwrap_or("");
    if protocol.is_empty() {
        errs.push(FieldError::required(format!("{path}.protocol"), ""));
    } else if !["SCTP", "TCP", "UDP"].contains(&protocol) {
        errs.push(FieldError::not_supported(
            format!("{path}.protocol"),
            protocol,
            &["SCTP", "TCP", "UDP"],
        ));
    }
    errs
}

/// The strategic merge keys of a pod template's lists (`path` below
/// `spec.template`), as `k8s.io/api/core/v1` tags them.
pub fn list_strategy(path: &[&str]) -> ListStrategy {
    let key = match path {
        [
            "spec",
            "containers" | "initContainers" | "ephemeralContainers",
        ] => "name",
        ["spec", "containers" | "initContainers", "ports"] => "containerPort",
        ["spec", "containers" | "initContainers", "env"] => "name",
        ["spec", "containers" | "initContainers", "volumeMounts"] => "mountPath",
        ["spec", "containers" | "initContainers", "volumeDevices"] => "devicePath",
        [
            "spec",
            "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates",
        ] => "name",
        ["spec", "hostAliases"] => "ip",
        _ => return ListStrategy::Atomic,
    };
    ListStrategy::Map(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_pull_always_only_for_latest() {
        assert_eq!(image_tag("nginx"), Some("latest"));
        assert_eq!(image_tag("nginx:latest"), Some("latest"));
        assert_eq!(image_tag("registry:5000/team/app:1.2"), Some("1.2"));
        assert_eq!(image_tag("registry:5000/team/app"), Some("latest"));
        assert_eq!(image_tag("app@sha256:abc"), None);
        assert_eq!(image_tag("app:v1@sha256:abc"), Some("v1"));
        assert_eq!(image_tag(""), None);
    }

    #[test]
    fn templates_get_v1_defaults() {
        let mut template = json!({"spec": {
            "containers": [{"name": "c", "image": "app:1",
                            "ports": [{"containerPort": 80}],
                            "readinessProbe": {"httpGet": {"port": 80}}}],
            "volumes": [{"name": "scratch"}, {"name": "cfg", "configMap": {"name": "x"}}],
        }});
        apply_defaults(&mut template);
        assert_eq!(
            template,
            json!({
                "metadata": {"creationTimestamp": null},
                "spec": {
                    "containers": [{
                        "name": "c", "image": "app:1", "imagePullPolicy": "IfNotPresent",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "readinessProbe": {
                            "httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                            "timeoutSeconds": 1, "periodSeconds": 10,
                            "successThreshold": 1, "failureThreshold": 3,
                        },
                        "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                    }],
                    "volumes": [
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "x", "defaultMode": 420}},
                    ],
                    "dnsPolicy": "ClusterFirst",
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "terminationGracePeriodSeconds": 30,
                },
            })
        );
    }

    #[test]
    fn containers_need_names_images_and_valid_ports() {
        let mut template = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [
            {"name": "a", "image": "i", "ports": [{"containerPort": 70000, "name": "web"},
                                                  {"containerPort": 81, "name": "web", "protocol": "HTTP"}]},
            {"name": "a"},
        ]}});
        apply_defaults(&mut template);
        let messages: Vec<String> = validate(&template, "spec.template")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            messages,
            [
                "spec.template.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
                "spec.template.spec.containers[0].ports[1].name: Duplicate value: \"web\"",
                "spec.template.spec.containers[0].ports[1].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
                "spec.template.spec.containers[1].name: Duplicate value: \"a\"",
                "spec.template.spec.containers[1].image: Required value",
            ]
        );
    }
}

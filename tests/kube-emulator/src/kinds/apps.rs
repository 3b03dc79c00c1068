//! Workloads of `apps/v1` (`pkg/registry/apps/deployment` and
//! `daemonset`, `pkg/apis/apps/validation`): Deployments and DaemonSets
//! with v1's defaults, a `metadata.generation` their spec changes bump (a
//! Deployment's annotations too), a DaemonSet's template generation in its
//! `deprecated.daemonset.template.generation` annotation, a status only
//! the status subresource writes, and a selector that must select the pod
//! template and never changes. No controller acts on them.

use serde_json::{Value, json};

use super::pod_template;
use crate::meta::{self, NameRule};
use crate::patch::ListStrategy;
use crate::selectors::LabelSelector;
use crate::status::{BadValue, FieldError, quote};
use crate::validation;

use super::{Subresource, set_field};

/// The annotation v1 carries a DaemonSet's internal `templateGeneration` in.
const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// Which workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Deployment,
    DaemonSet,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Deployment => "deployment",
            Workload::DaemonSet => "daemonset",
        }
    }
}

/// `SetDefaults_Deployment` or `SetDefaults_DaemonSet`, and the pod
/// template's defaults.
fn apply_defaults(kind: Workload, obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let (strategy_key, max_unavailable, max_surge) = match kind {
        Workload::Deployment => {
            spec.entry("replicas").or_insert(json!(1));
            spec.entry("progressDeadlineSeconds").or_insert(json!(600));
            ("strategy", json!("25%"), json!("25%"))
        }
        Workload::DaemonSet => ("updateStrategy", json!(1), json!(0)),
    };
    spec.entry("revisionHistoryLimit").or_insert(json!(10));
    if let Some(strategy) = spec
        .entry(strategy_key)
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        if strategy
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            strategy.insert("type".to_owned(), json!("RollingUpdate"));
        }
        if strategy.get("type") == Some(&json!("RollingUpdate"))
            && let Some(rolling) = strategy
                .entry("rollingUpdate")
                .or_insert_with(|| json!({}))
                .as_object_mut()
        {
            rolling.entry("maxUnavailable").or_insert(max_unavailable);
            rolling.entry("maxSurge").or_insert(max_surge);
        }
    }
    if let Some(template) = spec.get_mut("template") {
        pod_template::apply_defaults(template);
    }
}

/// `PrepareForCreate`: defaults, an empty status (a DaemonSet's has four
/// counters Go always encodes), generation 1 and, for a DaemonSet, a
/// template generation of at least 1.
pub fn prepare_create(kind: Workload, obj: &mut Value) {
    apply_defaults(kind, obj);
    let status = match kind {
        Workload::Deployment => json!({}),
        Workload::DaemonSet => json!({
            "currentNumberScheduled": 0, "numberMisscheduled": 0,
            "desiredNumberScheduled": 0, "numberReady": 0,
        }),
    };
    set_field(obj, "status", status);
    meta::set(obj, "generation", json!(1));
    if kind == Workload::DaemonSet {
        let generation = template_generation(obj).max(1);
        set_template_generation(obj, generation);
    }
}

/// `PrepareForUpdate` of the main resource (the stored status kept, the
/// generation bumped by what changed) or of `status` (the stored spec
/// kept, and a Deployment's labels).
pub fn prepare_update(kind: Workload, sub: Subresource, new: &mut Value, old: &Value) {
    match sub {
        Subresource::Main => {
            apply_defaults(kind, new);
            set_field(
                new,
                "status",
                old.get("status").cloned().unwrap_or(json!({})),
            );
            let generation = meta::generation(old);
            let spec_changed = new.get("spec") != old.get("spec");
            let bumped = match kind {
                // Annotations are copied to the ReplicaSets, so they count.
                Workload::Deployment => spec_changed || annotations(new) != annotations(old),
                Workload::DaemonSet => {
                    // Clients may not set the template generation.
                    let mut templates = template_generation(old);
                    let template = |obj: &Value| obj.pointer("/spec/template").cloned();
                    if template(new) != template(old) {
                        templates += 1;
                    }
                    set_template_generation(new, templates);
                    spec_changed
                }
            };
            if bumped {
                meta::set(new, "generation", json!(generation + 1));
            }
        }
        Subresource::Status => {
            set_field(new, "spec", old.get("spec").cloned().unwrap_or(json!({})));
            match kind {
                Workload::Deployment => {
                    meta::set(
                        new,
                        "labels",
                        old.pointer("/metadata/labels")
                            .cloned()
                            .unwrap_or(Value::Null),
                    );
                }
                Workload::DaemonSet => set_template_generation(new, template_generation(old)),
            }
        }
    }
}

fn annotations(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/annotations")
        .filter(|a| a.as_object().is_some_and(|m| !m.is_empty()))
}

fn template_generation(obj: &Value) -> i64 {
    obj.pointer(&format!("/metadata/annotations/{TEMPLATE_GENERATION}"))
        .and_then(Value::as_str)
        .and_then(|g| g.parse().ok())
        .unwrap_or(0)
}

fn set_template_generation(obj: &mut Value, generation: i64) {
    let metadata = meta::of_mut(obj);
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    set_field(
        annotations,
        TEMPLATE_GENERATION,
        json!(generation.to_string()),
    );
}

/// `ValidateDeployment` or `ValidateDaemonSet`.
pub fn validate(kind: Workload, obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, true, NameRule::Dns1123Subdomain);
    errs.extend(validate_spec(kind, obj));
    errs
}

/// `ValidateUpdate` of the main resource (the spec, and a selector that
/// never changes) or of `status`.
pub fn validate_update(
    kind: Workload,
    sub: Subresource,
    new: &Value,
    old: &Value,
) -> Vec<FieldError> {
    if sub == Subresource::Status {
        return validate_status(kind, new, old);
    }
    let mut errs = validate_spec(kind, new);
    let selector = |obj: &Value| {
        obj.pointer("/spec/selector")
            .cloned()
            .unwrap_or(Value::Null)
    };
    if selector(new) != selector(old) {
        errs.push(FieldError::immutable(
            "spec.selector",
            BadValue::Raw(go_label_selector(&selector(new))),
        ));
    }
    errs
}

fn int_at(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer).and_then(Value::as_i64)
}

/// `ValidateNonnegativeField`, for a field that is set.
fn nonnegative(obj: &Value, pointer: &str, errs: &mut Vec<FieldError>) {
    if let Some(value) = int_at(obj, pointer).filter(|v| *v < 0) {
        let path = pointer.trim_start_matches('/').replace('/', ".");
        errs.push(FieldError::invalid(
            path,
            value,
            "must be greater than or equal to 0",
        ));
    }
}

/// `ValidateDeploymentSpec` or `ValidateDaemonSetSpec`, in upstream's order.
fn validate_spec(kind: Workload, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if kind == Workload::Deployment {
        nonnegative(obj, "/spec/replicas", &mut errs);
    }
    let raw = obj.pointer("/spec/selector").cloned().unwrap_or(json!({}));
    errs.extend(validate_label_selector(&raw, "spec.selector"));
    let empty = ["matchLabels", "matchExpressions"].iter().all(|key| {
        raw.get(*key).is_none_or(|v| {
            v.as_object().is_some_and(|m| m.is_empty())
                || v.as_array().is_some_and(|a| a.is_empty())
        })
    });
    // Reported before the template is checked for a Deployment, after it
    // for a DaemonSet.
    let empty_error = empty.then(|| {
        FieldError::invalid(
            "spec.selector",
            BadValue::Raw(go_label_selector(&raw)),
            format!("empty selector is invalid for {}", kind.name()),
        )
    });
    if kind == Workload::Deployment {
        errs.extend(empty_error.clone());
    }
    let template = obj.pointer("/spec/template").unwrap_or(&Value::Null);
    let labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object);
    let selector = LabelSelector::from_api(&raw);
    match &selector {
        Err(_) if kind == Workload::Deployment => errs.push(FieldError::invalid(
            "spec.selector",
            BadValue::Raw(go_label_selector(&raw)),
            "invalid label selector",
        )),
        Ok(selector) => {
            // A Deployment skips the check for an empty selector (already
            // refused); a DaemonSet's selects everything.
            let checked = kind == Workload::DaemonSet || !selector.is_empty();
            if checked && !selector.matches(&labels.cloned().unwrap_or_default()) {
                errs.push(FieldError::invalid(
                    "spec.template.metadata.labels",
                    BadValue::Raw(go_string_map(labels)),
                    "`selector` does not match template `labels`",
                ));
            }
        }
        Err(_) => {}
    }
    if kind == Workload::DaemonSet {
        errs.extend(empty_error);
    }
    if kind == Workload::DaemonSet || selector.is_ok() {
        errs.extend(pod_template::validate(template, "spec.template"));
        let restart = template
            .pointer("/spec/restartPolicy")
            .and_then(Value::as_str)
            .unwrap_or("");
        if restart != "Always" {
            errs.push(FieldError::not_supported(
                "spec.template.spec.restartPolicy",
                restart,
                &["Always"],
            ));
        }
        if let Some(deadline) = int_at(template, "/spec/activeDeadlineSeconds") {
            errs.push(match kind {
                Workload::Deployment => FieldError::forbidden(
                    "spec.template.spec.activeDeadlineSeconds",
                    "activeDeadlineSeconds in ReplicaSet is not Supported",
                ),
                Workload::DaemonSet => FieldError::invalid(
                    "spec.template.spec.activeDeadlineSeconds",
                    deadline,
                    "activeDeadlineSeconds in DaemonSet is not Supported",
                ),
            });
        }
    }
    match kind {
        Workload::Deployment => {
            errs.extend(validate_deployment_strategy(obj));
            nonnegative(obj, "/spec/minReadySeconds", &mut errs);
            nonnegative(obj, "/spec/revisionHistoryLimit", &mut errs);
            if let Some(deadline) = int_at(obj, "/spec/progressDeadlineSeconds") {
                nonnegative(obj, "/spec/progressDeadlineSeconds", &mut errs);
                if deadline <= int_at(obj, "/spec/minReadySeconds").unwrap_or(0) {
                    errs.push(FieldError::invalid(
                        "spec.progressDeadlineSeconds",
                        deadline,
                        "must be greater than minReadySeconds",
                    ));
                }
            }
        }
        Workload::DaemonSet => {
            nonnegative(obj, "/spec/minReadySeconds", &mut errs);
            errs.extend(validate_daemon_set_strategy(obj));
            nonnegative(obj, "/spec/revisionHistoryLimit", &mut errs);
        }
    }
    errs
}

/// `ValidateLabelSelector` (label values checked strictly).
fn validate_label_selector(selector: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        errs.extend(meta::validate_labels(
            labels,
            &format!("{path}.matchLabels"),
        ));
    }
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, expression) in expressions.iter().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = meta::string_list(expression.get("values"));
        let operator = expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or("");
        match operator {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(FieldError::invalid(
                format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        let key = expression.get("key").and_then(Value::as_str).unwrap_or("");
        for msg in validation::qualified_name(key) {
            errs.push(FieldError::invalid(format!("{at}.key"), key, msg));
        }
        for (j, value) in values.iter().enumerate() {
            for msg in validation::label_value(value) {
                errs.push(FieldError::invalid(
                    format!("{at}.values[{j}]"),
                    value.as_str(),
                    msg,
                ));
            }
        }
    }
    errs
}

/// An `intstr.IntOrString` as the rolling update validation reads it.
#[derive(Debug, Clone, PartialEq)]
enum IntOrPercent {
    Int(i64),
    Str(String),
}

impl IntOrPercent {
    fn at(obj: &Value, pointer: &str) -> IntOrPercent {
        match obj.pointer(pointer) {
            Some(Value::String(s)) => IntOrPercent::Str(s.clone()),
            other => IntOrPercent::Int(other.and_then(Value::as_i64).unwrap_or(0)),
        }
    }

    /// Go's `%#v` of the value (`IntOrString` has no value `String()`).
    fn go_syntax(&self) -> BadValue {
        let (kind, int, text) = match self {
            IntOrPercent::Int(i) => (0, *i, ""),
            IntOrPercent::Str(s) => (1, 0, s.as_str()),
        };
        BadValue::Raw(format!(
            "intstr.IntOrString{{Type:{kind}, IntVal:{int}, StrVal:{}}}",
            quote(text)
        ))
    }

    /// `getIntOrPercentValue`: the number, with or without its `%`.
    fn value(&self) -> i64 {
        match self {
            IntOrPercent::Int(i) => *i,
            IntOrPercent::Str(s) => s.trim_end_matches('%').parse().unwrap_or(0),
        }
    }

    fn is_percent(&self) -> bool {
        matches!(self, IntOrPercent::Str(s) if s.len() > 1 && s.ends_with('%') && s[..s.len() - 1].bytes().all(|b| b.is_ascii_digit()))
    }

    /// `ValidatePositiveIntOrPercent`.
    fn validate(&self, path: &str, errs: &mut Vec<FieldError>) {
        match self {
            IntOrPercent::Str(_) if !self.is_percent() => errs.push(FieldError::invalid(
                path,
                self.go_syntax(),
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            )),
            IntOrPercent::Int(i) if *i < 0 => errs.push(FieldError::invalid(
                path,
                *i,
                "must be greater than or equal to 0",
            )),
            _ => {}
        }
    }

    /// `IsNotMoreThan100Percent`.
    fn at_most_100_percent(&self, path: &str, errs: &mut Vec<FieldError>) {
        if self.is_percent() && self.value() > 100 {
            errs.push(FieldError::invalid(
                path,
                self.go_syntax(),
                "must not be greater than 100%",
            ));
        }
    }
}

/// `ValidateDeploymentStrategy`.
fn validate_deployment_strategy(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let rolling = obj.pointer("/spec/strategy/rollingUpdate");
    match obj
        .pointer("/spec/strategy/type")
        .and_then(Value::as_str)
        .unwrap_or("")
    {
        "Recreate" if rolling.is_some() => errs.push(FieldError::forbidden(
            "spec.strategy.rollingUpdate",
            "may not be specified when strategy `type` is 'Recreate'",
        )),
        "Recreate" => {}
        "RollingUpdate" => {
            let path = "spec.strategy.rollingUpdate";
            let unavailable = IntOrPercent::at(obj, "/spec/strategy/rollingUpdate/maxUnavailable");
            let surge = IntOrPercent::at(obj, "/spec/strategy/rollingUpdate/maxSurge");
            unavailable.validate(&format!("{path}.maxUnavailable"), &mut errs);
            surge.validate(&format!("{path}.maxSurge"), &mut errs);
            if unavailable.value() == 0 && surge.value() == 0 {
                errs.push(FieldError::invalid(
                    format!("{path}.maxUnavailable"),
                    unavailable.go_syntax(),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
            unavailable.at_most_100_percent(&format!("{path}.maxUnavailable"), &mut errs);
        }
        other => errs.push(FieldError::not_supported(
            "spec.strategy",
            go_strategy("DeploymentStrategy", other, rolling.is_some()),
            &["Recreate", "RollingUpdate"],
        )),
    }
    errs
}

/// `ValidateDaemonSetUpdateStrategy`.
fn validate_daemon_set_strategy(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match obj
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        .unwrap_or("")
    {
        "OnDelete" => {}
        "RollingUpdate" => {
            let path = "spec.updateStrategy.rollingUpdate";
            let unavailable =
                IntOrPercent::at(obj, "/spec/updateStrategy/rollingUpdate/maxUnavailable");
            let surge = IntOrPercent::at(obj, "/spec/updateStrategy/rollingUpdate/maxSurge");
            unavailable.validate(&format!("{path}.maxUnavailable"), &mut errs);
            surge.validate(&format!("{path}.maxSurge"), &mut errs);
            unavailable.at_most_100_percent(&format!("{path}.maxUnavailable"), &mut errs);
            surge.at_most_100_percent(&format!("{path}.maxSurge"), &mut errs);
            match (unavailable.value() != 0, surge.value() != 0) {
                (true, true) => errs.push(FieldError::invalid(
                    format!("{path}.maxSurge"),
                    surge.go_syntax(),
                    "may not be set when maxUnavailable is non-zero",
                )),
                (false, false) => errs.push(FieldError::required(
                    format!("{path}.maxUnavailable"),
                    "cannot be 0 when maxSurge is 0",
                )),
                _ => {}
            }
        }
        other => errs.push(FieldError::not_supported(
            "spec.updateStrategy",
            go_strategy(
                "DaemonSetUpdateStrategy",
                other,
                obj.pointer("/spec/updateStrategy/rollingUpdate").is_some(),
            ),
            &["RollingUpdate", "OnDelete"],
        )),
    }
    errs
}

/// `ValidateDeploymentStatusUpdate` or `ValidateDaemonSetStatusUpdate`:
/// counters never negative (a Deployment's not above its replicas), the
/// collision count never decremented.
fn validate_status(kind: Workload, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let counters: &[&str] = match kind {
        Workload::Deployment => &[
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
            "collisionCount",
        ],
        Workload::DaemonSet => &[
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
            "observedGeneration",
            "updatedNumberScheduled",
            "numberAvailable",
            "numberUnavailable",
            "collisionCount",
        ],
    };
    for counter in counters {
        nonnegative(new, &format!("/status/{counter}"), &mut errs);
    }
    if kind == Workload::Deployment {
        let count = |field: &str| int_at(new, &format!("/status/{field}")).unwrap_or(0);
        for field in ["updatedReplicas", "readyReplicas", "availableReplicas"] {
            if count(field) > count("replicas") {
                errs.push(FieldError::invalid(
                    format!("status.{field}"),
                    count(field),
                    "cannot be greater than status.replicas",
                ));
            }
        }
        if count("availableReplicas") > count("readyReplicas") {
            errs.push(FieldError::invalid(
                "status.availableReplicas",
                count("availableReplicas"),
                "cannot be greater than readyReplicas",
            ));
        }
    }
    let collisions = |obj: &Value| int_at(obj, "/status/collisionCount");
    if let Some(before) = collisions(old)
        && collisions(new).is_none_or(|now| now < before)
    {
        errs.push(FieldError::invalid(
            "status.collisionCount",
            collisions(new).unwrap_or(0),
            "cannot be decremented",
        ));
    }
    errs
}

/// Go's `%#v` of an internal `apps.DeploymentStrategy` or
/// `apps.DaemonSetUpdateStrategy` with an unknown type. Go prints a set
/// rolling update's address, which is not reproduced (`…`).
fn go_strategy(kind: &str, strategy_type: &str, rolling: bool) -> BadValue {
    let rolling_kind = kind.replace("UpdateStrategy", "").replace("Strategy", "");
    let address = if rolling { "…" } else { "nil" };
    BadValue::Raw(format!(
        "apps.{kind}{{Type:{}, RollingUpdate:(*apps.RollingUpdate{rolling_kind})({address})}}",
        quote(strategy_type)
    ))
}

/// Go's `%#v` of a `map[string]string` (keys sorted, nil when absent).
fn go_string_map(map: Option<&serde_json::Map<String, Value>>) -> String {
    match map {
        None => "map[string]string(nil)".to_owned(),
        Some(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}:{}", quote(k), quote(v.as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", entries.join(", "))
        }
    }
}

/// Go's `%#v` of a `metav1.LabelSelector`.
fn go_label_selector(selector: &Value) -> String {
    let labels = go_string_map(selector.get("matchLabels").and_then(Value::as_object));
    let expressions = match selector.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|e| {
                    let text = |key: &str| quote(e.get(key).and_then(Value::as_str).unwrap_or(""));
                    let values = match e.get("values").and_then(Value::as_array) {
                        None => "[]string(nil)".to_owned(),
                        Some(_) => {
                            let values: Vec<String> = meta::string_list(e.get("values"))
                                .iter()
                                .map(|v| quote(v))
                                .collect();
                            format!("[]string{{{}}}", values.join(", "))
                        }
                    };
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                        text("key"),
                        text("operator")
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}

/// The strategic merge keys of a workload's lists.
pub fn list_strategy(path: &[&str]) -> ListStrategy {
    match path {
        ["status", "conditions"] => ListStrategy::Map("type".to_owned()),
        ["spec", "template", rest @ ..] => pod_template::list_strategy(rest),
        _ => ListStrategy::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn deployment(selector: Value, labels: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {
            "selector": selector,
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}},
        }});
        prepare_create(Workload::Deployment, &mut obj);
        obj
    }

    #[test]
    fn deployments_get_v1_defaults_and_an_empty_status() {
        let obj = deployment(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "web"}),
        );
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(
            obj["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(obj["spec"]["revisionHistoryLimit"], 10);
        assert_eq!(obj["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(obj["status"], json!({}));
        assert_eq!(obj["metadata"]["generation"], 1);
        assert!(validate(Workload::Deployment, &obj).is_empty());
    }

    #[test]
    fn a_selector_must_select_the_template() {
        let obj = deployment(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "db", "tier": "x"}),
        );
        assert_eq!(
            messages(&validate(Workload::Deployment, &obj)),
            [
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\", \"tier\":\"x\"}: `selector` does not match template `labels`"
            ]
        );
        let obj = deployment(json!({}), json!({"app": "web"}));
        assert_eq!(
            messages(&validate(Workload::Deployment, &obj)),
            [
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for deployment"
            ]
        );
    }

    #[test]
    fn a_selector_never_changes_and_spec_changes_bump_the_generation() {
        let old = deployment(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "web", "v": "1"}),
        );
        let mut new = deployment(
            json!({"matchLabels": {"app": "web", "v": "2"}}),
            json!({"app": "web", "v": "2"}),
        );
        meta::set(&mut new, "generation", json!(1));
        prepare_update(Workload::Deployment, Subresource::Main, &mut new, &old);
        assert_eq!(new["metadata"]["generation"], 2);
        assert_eq!(
            messages(&validate_update(
                Workload::Deployment,
                Subresource::Main,
                &new,
                &old
            )),
            [
                "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web\", \"v\":\"2\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"
            ]
        );
    }

    #[test]
    fn daemon_sets_count_template_generations() {
        let mut old = json!({"metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"containers": [{"name": "a", "image": "agent:1"}]}},
        }});
        prepare_create(Workload::DaemonSet, &mut old);
        assert_eq!(old["metadata"]["annotations"][TEMPLATE_GENERATION], "1");
        assert_eq!(
            old["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("agent:2");
        new["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("7");
        prepare_update(Workload::DaemonSet, Subresource::Main, &mut new, &old);
        assert_eq!(new["metadata"]["annotations"][TEMPLATE_GENERATION], "2");
        assert_eq!(new["metadata"]["generation"], 2);
    }

    #[test]
    fn rolling_updates_need_room_to_roll() {
        let mut obj = deployment(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "web"}),
        );
        obj["spec"]["strategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": "0%"});
        assert_eq!(
            messages(&validate(Workload::Deployment, &obj)),
            [
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0"
            ]
        );
        obj["spec"]["strategy"] = json!({"type": "Blue"});
        assert_eq!(
            messages(&validate(Workload::Deployment, &obj)),
            [
                "spec.strategy: Unsupported value: apps.DeploymentStrategy{Type:\"Blue\", RollingUpdate:(*apps.RollingUpdateDeployment)(nil)}: supported values: \"Recreate\", \"RollingUpdate\""
            ]
        );
        obj["spec"]["strategy"] = json!({"type": "Recreate", "rollingUpdate": {}});
        assert_eq!(
            messages(&validate(Workload::Deployment, &obj)),
            [
                "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is 'Recreate'"
            ]
        );
    }
}

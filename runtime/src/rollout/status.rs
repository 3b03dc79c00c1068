//! The status the rollout reports on its `CloudProvider`: conditions in the
//! `metav1.Condition` shape (a transition time that moves only when the status does), and
//! the merge patch that writes it, with explicit nulls so cleared fields are removed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::resource::{CloudProvider, CloudProviderStatus, Condition, ConditionStatus};

/// Now, as the API stores times.
pub fn now() -> Time {
    Time(Timestamp::now())
}

/// `after` from now, as the API stores times (the latest time if it overflows).
pub fn later(after: std::time::Duration) -> Time {
    let now = Timestamp::now();
    Time(
        k8s_openapi::jiff::SignedDuration::try_from(after)
            .ok()
            .and_then(|after| now.checked_add(after).ok())
            .unwrap_or(Timestamp::MAX),
    )
}

/// The most bytes of a condition's message: it quotes provider and registry text (an
/// `init` error, a load error, a refusal), and the API takes 32 KiB at most, refusing the
/// whole status beyond.
pub const MAX_CONDITION_MESSAGE: usize = 4096;

/// Set condition `type_` in `status`, keeping its transition time unless its status
/// changes; conditions stay in the order of [`crate::resource::condition::ALL`]. The
/// message is escaped onto one line and cut to [`MAX_CONDITION_MESSAGE`] bytes.
pub fn set_condition(
    status: &mut CloudProviderStatus,
    type_: &str,
    value: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) {
    let message = wasm_ccm_host::text::ellipsized(
        wasm_ccm_host::text::escaped(&message.into()).into_owned(),
        MAX_CONDITION_MESSAGE,
    );
    let conditions = &mut status.conditions;
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(condition) => {
            if condition.status != value {
                condition.last_transition_time = now();
            }
            condition.status = value;
            condition.reason = reason.to_string();
            condition.message = message;
            condition.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: value,
            reason: reason.to_string(),
            message,
            last_transition_time: now(),
            observed_generation: generation,
        }),
    }
    let order = |type_: &str| {
        crate::resource::condition::ALL
            .iter()
            .position(|t| *t == type_)
            .unwrap_or(usize::MAX)
    };
    conditions.sort_by_key(|c| order(&c.type_));
}

/// The condition `type_`, if set.
pub fn condition<'a>(status: &'a CloudProviderStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Write `status` to the status subresource of `name`.
pub async fn write(
    api: &Api<CloudProvider>,
    name: &str,
    status: &CloudProviderStatus,
) -> Result<(), kube::Error> {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        for field in [
            "observedGeneration",
            "active",
            "previous",
            "rollbackWindowEnd",
            "candidate",
            "conditions",
            "versionCalls",
            "shadow",
        ] {
            fields.entry(field).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": value });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_message_is_one_line_and_bounded() {
        let mut status = CloudProviderStatus::default();
        let quoted = format!("init failed: line\nforged {}", "x".repeat(1 << 20));
        set_condition(
            &mut status,
            crate::resource::condition::READY,
            ConditionStatus::False,
            "InitFailed",
            quoted,
            None,
        );
        let message = &status.conditions[0].message;
        assert!(message.len() <= MAX_CONDITION_MESSAGE, "{}", message.len());
        assert!(
            message.starts_with("init failed: line\\nforged x"),
            "{message:.40}"
        );
    }
}

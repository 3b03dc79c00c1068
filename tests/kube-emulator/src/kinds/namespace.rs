//! Namespaces (`pkg/registry/core/namespace`): created `Active` with the
//! `kubernetes` spec finalizer and the `kubernetes.io/metadata.name` label;
//! spec finalizers only change through deletion. Termination itself (the
//! namespace controller's job) is emulated by the store.

use serde_json::{Value, json};

use super::{Subresource, set_field};
use crate::meta::{self, NameRule};
use crate::status::FieldError;
use crate::validation;

const NAME_LABEL: &str = "kubernetes.io/metadata.name";
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

fn label_name(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    let meta = meta::of_mut(obj);
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    set_field(labels, NAME_LABEL, json!(name));
}

pub fn prepare_create(obj: &mut Value) {
    set_field(obj, "status", json!({"phase": "Active"}));
    let mut finalizers = meta::string_list(obj.pointer("/spec/finalizers"));
    if !finalizers.iter().any(|f| f == "kubernetes") {
        finalizers.push("kubernetes".to_owned());
    }
    let mut spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    set_field(&mut spec, "finalizers", json!(finalizers));
    set_field(obj, "spec", spec);
    label_name(obj);
}

pub fn prepare_update(sub: Subresource, new: &mut Value, old: &Value) {
    match sub {
        Subresource::Main => {
            set_field(
                new,
                "status",
                old.get("status").cloned().unwrap_or_else(|| json!({})),
            );
            let finalizers = old
                .pointer("/spec/finalizers")
                .cloned()
                .unwrap_or_else(|| json!([]));
            let mut spec = new.get("spec").cloned().unwrap_or_else(|| json!({}));
            set_field(&mut spec, "finalizers", finalizers);
            set_field(new, "spec", spec);
        }
        Subresource::Status => set_field(
            new,
            "spec",
            old.get("spec").cloned().unwrap_or_else(|| json!({})),
        ),
    }
    label_name(new);
}

pub fn validate(obj: &Value) -> Vec<FieldError> {
    let mut errs = meta::validate(obj, false, NameRule::Dns1123Label);
    errs.extend(validate_finalizers(obj));
    errs
}

/// Spec finalizers: standard names or fully qualified ones.
pub fn validate_finalizers(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for finalizer in meta::string_list(obj.pointer("/spec/finalizers")) {
        for msg in validation::qualified_name(&finalizer) {
            errs.push(FieldError::invalid(
                "spec.finalizers",
                finalizer.as_str(),
                msg,
            ));
        }
        if !finalizer.contains('/') && !STANDARD_FINALIZERS.contains(&finalizer.as_str()) {
            errs.push(FieldError::invalid(
                "spec.finalizers",
                finalizer.as_str(),
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errs
}

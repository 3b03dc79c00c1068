//! The Helm chart `charts/wasm-ccm` as tests see it: `helm template` run with given values,
//! its output split into objects (each with the template it came from), and
//! `kubernetes-validate` over them. helm and kubernetes-validate are installed into
//! `target/test-tools/` by `make setup` (`tests/install-chart-tools.sh`).
//!
//! ```no_run
//! let objects = e2e::chart::render("ccm", "provider: {ref: 'oci://r.example/p:v1', name: p}")
//!     .expect("renders");
//! let role = e2e::chart::only(&objects, "ClusterRole");
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The namespace charts are rendered into.
pub const NAMESPACE: &str = "kube-system";

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    repo().join("charts/wasm-ccm")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Keep in step with `HELM_DIR` in tests/install-chart-tools.sh.
pub fn helm() -> PathBuf {
    installed("target/test-tools/helm/helm", "helm")
}

/// Keep in step with `VALIDATE_VENV` in tests/install-chart-tools.sh.
fn kubernetes_validate() -> PathBuf {
    installed(
        "target/test-tools/kubernetes-validate-venv/bin/kubernetes-validate",
        "kubernetes-validate",
    )
}

fn installed(path: &str, what: &str) -> PathBuf {
    let path = repo().join(path);
    assert!(
        path.is_file(),
        "{what} is not installed at {}: run `make setup` (tests/install-chart-tools.sh installs it)",
        path.display()
    );
    path
}

/// One object `helm template` rendered.
#[derive(Clone, Debug)]
pub struct Rendered {
    /// The template it came from, e.g. `templates/role.yaml`.
    pub source: String,
    pub object: Value,
}

impl Rendered {
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }

    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.object["metadata"]["namespace"].as_str()
    }
}

/// Run helm in the repository with `args`, `values` (YAML) given as a values file.
pub fn helm_with_values(args: &[&str], values: &str) -> Output {
    let mut file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("a values file");
    file.write_all(values.as_bytes()).expect("write values");
    Command::new(helm())
        .args(args)
        .arg("--values")
        .arg(file.path())
        .current_dir(repo())
        .output()
        .expect("run helm")
}

/// `helm template RELEASE charts/wasm-ccm` in [`NAMESPACE`] with `values` (YAML): the objects,
/// or helm's error output.
pub fn render(release: &str, values: &str) -> Result<Vec<Rendered>, String> {
    let chart = chart_dir();
    let output = helm_with_values(
        &[
            "template",
            release,
            chart.to_str().expect("a UTF-8 path"),
            "--namespace",
            NAMESPACE,
        ],
        values,
    );
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(parse(
        &String::from_utf8(output.stdout).expect("helm prints UTF-8"),
    ))
}

/// Split `helm template` output into objects.
pub fn parse(text: &str) -> Vec<Rendered> {
    let mut objects = Vec::new();
    for document in text.split("\n---\n") {
        let source = document
            .lines()
            .find_map(|line| line.strip_prefix("# Source: wasm-ccm/"))
            .unwrap_or("?")
            .to_string();
        let object: Value = match serde_saphyr::from_str(document) {
            Ok(object) => object,
            Err(error) => panic!("{source} renders YAML that does not parse: {error}\n{document}"),
        };
        if !object.is_null() {
            objects.push(Rendered { source, object });
        }
    }
    objects
}

/// The objects of `kind`.
pub fn all<'a>(objects: &'a [Rendered], kind: &str) -> Vec<&'a Rendered> {
    objects.iter().filter(|o| o.kind() == kind).collect()
}

/// The one object of `kind`.
pub fn only<'a>(objects: &'a [Rendered], kind: &str) -> &'a Rendered {
    match all(objects, kind).as_slice() {
        [one] => one,
        many => panic!("expected one {kind}, rendered {}", many.len()),
    }
}

/// The manager's container in the rendered Deployment or DaemonSet.
pub fn container(objects: &[Rendered]) -> &Value {
    let workload = objects
        .iter()
        .find(|o| matches!(o.kind(), "Deployment" | "DaemonSet"))
        .expect("a Deployment or DaemonSet");
    &workload.object["spec"]["template"]["spec"]["containers"][0]
}

/// The manager's arguments.
pub fn args(objects: &[Rendered]) -> Vec<String> {
    container(objects)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

/// Check every object of a built-in kind against the Kubernetes `version` schemas with
/// `kubernetes-validate --strict` (unknown fields refused); the custom kinds are skipped.
/// Err holds its report.
pub fn validate(objects: &[Rendered], version: &str) -> Result<(), String> {
    let builtin: Vec<&Rendered> = objects
        .iter()
        .filter(|o| {
            let api = o.object["apiVersion"].as_str().unwrap_or_default();
            api.starts_with("v1") || api.contains(".k8s.io/") || api.starts_with("apps/")
        })
        .collect();
    let mut file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("a manifest file");
    for object in &builtin {
        let yaml = serde_saphyr::to_string(&object.object).expect("YAML");
        write!(file, "---\n{yaml}").expect("write manifests");
    }
    let output = Command::new(kubernetes_validate())
        .args(["--strict", "--quiet", "--kubernetes-version", version])
        .arg(file.path())
        .output()
        .expect("run kubernetes-validate");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() && !report.contains("ERROR") {
        Ok(())
    } else {
        Err(report)
    }
}

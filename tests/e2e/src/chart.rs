//! The Helm chart `charts/wasm-ccm` as tests see it: `helm template` run with given values,
//! its output split into objects (each with the template it came from), `kubernetes-validate`
//! over them, what its RBAC grants ([`grants`]), and an [`Operator`] typing helm and kubectl
//! commands (a page's among them) against a cluster. helm and kubernetes-validate are
//! installed into `target/test-tools/` by `make setup` (`tests/install-chart-tools.sh`).
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

use crate::docs::Shell;

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

fn kubernetes_validate() -> PathBuf {
    crate::python_tool("kubernetes-validate")
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
    render_files(release, &[values])
}

/// As [`render`], with several values files, each merged over the ones before (as
/// `-f a.yaml -f b.yaml`).
pub fn render_files(release: &str, values: &[&str]) -> Result<Vec<Rendered>, String> {
    let dir = tempfile::tempdir().expect("a values dir");
    let mut command = Command::new(helm());
    command
        .args(["template", release])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE])
        .current_dir(repo());
    for (index, text) in values.iter().enumerate() {
        let file = dir.path().join(format!("values-{index}.yaml"));
        std::fs::write(&file, text).expect("write values");
        command.arg("--values").arg(file);
    }
    let output = command.output().expect("run helm");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(parse(
        &String::from_utf8(output.stdout).expect("helm prints UTF-8"),
    ))
}

/// The values file the install page shows (the YAML block that starts with
/// `# simcloud.yaml`), so that a test installs what a reader is told to.
pub fn install_values() -> String {
    crate::docs::block_starting("docs/src/operators/install.md", "yaml", "# simcloud.yaml")
}

/// The values file for AWS the AWS page shows (`# aws.yaml`).
pub fn aws_values() -> String {
    crate::docs::block_starting("docs/src/operators/aws.md", "yaml", "# aws.yaml")
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

/// One thing the rendered RBAC lets a ServiceAccount do: a verb on a resource (`nodes`,
/// `services/status`) of an API group, in one namespace or everywhere, on any object or only
/// on those named.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    /// `None`: everywhere (a ClusterRoleBinding).
    pub namespace: Option<String>,
    pub group: String,
    pub resource: String,
    pub verb: String,
    /// Empty: any object.
    pub names: Vec<String>,
    /// The role it comes from, e.g. `ClusterRole wasm-ccm`.
    pub role: String,
}

/// A ClusterRole every cluster has (the API server's bootstrap policy) that the chart binds
/// without rendering it, with its rules.
fn bootstrap_role(name: &Value) -> Option<Rendered> {
    let rules = match name.as_str()? {
        "system:auth-delegator" => serde_json::json!([
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
        ]),
        _ => return None,
    };
    Some(Rendered {
        source: "(the cluster's bootstrap policy)".to_owned(),
        object: serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules,
        }),
    })
}

/// Everything the rendered roles grant, through the rendered bindings (and to the bootstrap
/// ClusterRoles a cluster has, see `bootstrap_role`), to the ServiceAccount
/// `namespace`/`account`, one [`Grant`] per verb, group and resource of each rule.
pub fn grants(objects: &[Rendered], namespace: &str, account: &str) -> Vec<Grant> {
    let binds = |binding: &Rendered| {
        binding.object["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == namespace
            })
    };
    let mut grants = Vec::new();
    for binding in objects
        .iter()
        .filter(|o| matches!(o.kind(), "ClusterRoleBinding" | "RoleBinding"))
        .filter(|b| binds(b))
    {
        let scope = binding.namespace().map(str::to_string);
        let role_ref = &binding.object["roleRef"];
        let bootstrap;
        let role = match objects.iter().find(|o| {
            o.kind() == role_ref["kind"]
                && o.name() == role_ref["name"]
                && (o.kind() == "ClusterRole" || o.namespace() == scope.as_deref())
        }) {
            Some(role) => role,
            None => {
                bootstrap = bootstrap_role(&role_ref["name"]).unwrap_or_else(|| {
                    panic!(
                        "{} binds a role the chart does not render nor a cluster has",
                        binding.name()
                    )
                });
                &bootstrap
            }
        };
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().expect("a string").to_string())
                .collect()
        };
        for rule in role.object["rules"].as_array().into_iter().flatten() {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        grants.push(Grant {
                            namespace: scope.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                            names: strings(&rule["resourceNames"]),
                            role: format!("{} {}", role.kind(), role.name()),
                        });
                    }
                }
            }
        }
    }
    grants.sort();
    grants
}

/// helm and kubectl against one cluster, as an operator types them: in a [`Shell`] whose
/// directory holds `charts/` (the repository's), with that cluster's kubeconfig, and helm's
/// and kubectl's caches in that directory (not `~/.cache`).
pub struct Operator {
    shell: Shell,
}

impl Operator {
    pub fn new(kubeconfig: &Path) -> Operator {
        let mut shell = Shell::new();
        shell.link("helm", &helm());
        if let Some(kubectl) = std::env::var_os("KUBECTL") {
            shell.link("kubectl", Path::new(&kubectl));
        }
        std::os::unix::fs::symlink(repo().join("charts"), shell.path("charts"))
            .expect("link charts/");
        let home = shell.dir().to_path_buf();
        shell
            .env("KUBECONFIG", kubeconfig)
            .env("HELM_CACHE_HOME", home.join("helm-cache"))
            .env("HELM_CONFIG_HOME", home.join("helm-config"))
            .env("HELM_DATA_HOME", home.join("helm-data"))
            .env("KUBECACHEDIR", home.join("kube-cache"));
        Operator { shell }
    }

    /// A file in this operator's directory holding `text`, to pass as `-f`.
    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.shell.path(name);
        std::fs::write(&path, text).expect("write a file");
        path
    }

    /// Run `helm ARGS`: what it printed, or a panic with its output.
    pub fn helm(&self, args: &[&str]) -> String {
        self.run("helm", args)
    }

    /// Run `kubectl ARGS` (`$KUBECTL`, else `kubectl` on the `PATH`).
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.run("kubectl", args)
    }

    /// Type `command` (a page's, helm and kubectl on the `PATH`): what it printed, or a panic
    /// with its output.
    pub fn typed(&self, command: &str) -> String {
        self.shell.typed(command)
    }

    fn run(&self, program: &str, args: &[&str]) -> String {
        let output = self
            .shell
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|error| panic!("cannot run {program}: {error}"));
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{program} {} failed ({}):\n{}{stdout}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

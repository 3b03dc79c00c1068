//! `wasm-ccm provider inspect|call` through the real binary, as a provider author or an
//! operator runs it: exit codes, what goes to stdout and stderr, and what reached the cloud.
//!
//! Also through the binary: `provider call` signing for moto with keys from the environment
//! and from a web identity (its loopback STS refused until `--sts-endpoint-allow` lists it),
//! and bad `aws-sigv4` rules refused naming the problem; the AWS provider's `provider call` as
//! the AWS docs type it, against moto with the keys of a user holding the documented IAM
//! policy (a node's metadata, a Service's NLB made and deleted, the same policy without
//! `CreateLoadBalancer` refused), and that policy naming exactly the actions the provider's
//! code sends; `provider conformance` against the Rust, TypeScript and Python simclouds,
//! against the AWS provider and moto within the IAM policy, and as the docs type it (every
//! rule passes, nothing left in the cloud), against simcloud refusing its config (one failed
//! `init` row, text and JSON), against the hostile guest (its bad answers fail their rules,
//! exit 1) and with a misspelt fixture (refused naming the field); and `wasm-ccm crd`
//! printing the committed CRD; output to a reader that has gone ending quietly (exit 141).
//!
//! The simulator runs in this process; the CLI runs as a child process.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cloud_sim::{Instance, NewInstance};
use e2e::aws::{
    ZONE, all_target_groups, config, ec2, fields, nlb, public_network, route_table, run_node,
    zone_id,
};
use e2e::moto::Moto;
use e2e::{Cloud, TOKEN, docs, wasm_ccm_binary};
use sha2::{Digest, Sha256};

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

impl Run {
    fn succeeded(&self) -> bool {
        self.code == Some(0)
    }

    /// The run ended by an error of its own making: an exit code, never a panic or a signal.
    fn assert_failed_cleanly(&self) {
        assert!(
            matches!(self.code, Some(code) if code != 0),
            "expected a non-zero exit: {self:#?}"
        );
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        assert!(!self.stderr.contains("RUST_BACKTRACE"), "{}", self.stderr);
    }

    /// Refused as bad input: exit code 2 and every one of `needles` in the message.
    fn assert_usage_error(&self, needles: &[&str]) {
        self.assert_failed_cleanly();
        assert_eq!(self.code, Some(2), "bad input exits 2: {self:#?}");
        assert!(self.stdout.is_empty(), "nothing on stdout: {self:#?}");
        for needle in needles {
            assert!(
                self.stderr.contains(needle),
                "stderr should contain {needle:?}:\n{}",
                self.stderr
            );
        }
    }

    /// Neither output stream holds the simulator's token.
    fn assert_no_token(&self) {
        assert!(!self.stdout.contains(TOKEN), "token on stdout");
        assert!(!self.stderr.contains(TOKEN), "token on stderr");
    }
}

/// Run `wasm-ccm ARGS` with `env` added to a clean credential environment. Blocking.
fn wasm_ccm<I, S>(args: I, env: &[(&str, &str)]) -> Run
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let mut command = e2e::wasm_ccm_command(&wasm_ccm_binary());
    command
        .args(args.into_iter().map(Into::into))
        .env_remove("RUST_LOG")
        .env_remove("SIM_TOKEN")
        .env_remove("WASM_CCM_TEST_UNSET_TOKEN");
    for aws in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_SESSION_NAME",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    ] {
        command.env_remove(aws);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let started = Instant::now();
    let output = command.output().expect("wasm-ccm runs");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        elapsed: started.elapsed(),
    }
}

/// [`wasm_ccm`] off the async threads, so the in-process simulator keeps serving.
async fn wasm_ccm_async(args: Vec<String>, env: Vec<(&'static str, String)>) -> Run {
    tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        wasm_ccm(args, &env)
    })
    .await
    .expect("the child process runs")
}

/// `provider call FILE FUNCTION --args ARGS` and `extra`.
fn call_args(file: &str, function: &str, args: &str, extra: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = ["provider", "call", file, function, "--args", args]
        .map(String::from)
        .to_vec();
    all.extend(extra.iter().map(|s| s.to_string()));
    all
}

fn node1_args() -> &'static str {
    r#"{"node":{"name":"node-1"}}"#
}

/// The simulator with a `node-1` instance, and simcloud's config for it in a file.
async fn cloud_with_node() -> (Cloud, Instance, tempfile::NamedTempFile) {
    let cloud = Cloud::start().await;
    let instance = cloud.sim.state().add_instance(NewInstance {
        name: "node-1".into(),
        instance_type: "sim.large".into(),
        zone: "sim-central-1c".into(),
        private_ip: Some("10.0.3.7".into()),
        public_ip: Some("203.0.113.7".into()),
        ..NewInstance::default()
    });
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(config.path(), cloud.simcloud_config()).expect("write config");
    (cloud, instance, config)
}

/// Flags that grant the simulator and inject its token from `SIM_TOKEN`.
fn granted_with_env_token(cloud: &Cloud, config: &tempfile::NamedTempFile) -> Vec<String> {
    let url = cloud.sim.url();
    let credential = format!("{url}=bearer:env:SIM_TOKEN");
    [
        "--config",
        &path(config),
        "--allow",
        &url,
        "--credential",
        &credential,
    ]
    .map(String::from)
    .to_vec()
}

fn path(file: &tempfile::NamedTempFile) -> String {
    file.path().display().to_string()
}

fn sha256_of(file: &str) -> String {
    hex::encode(Sha256::digest(std::fs::read(file).expect("read component")))
}

// ---- provider inspect -----------------------------------------------------------------------

/// A reader that goes before the output is written (`wasm-ccm crd | head -1`, `provider
/// inspect … | head`) ends the command quietly, exit 141 as a writer killed by SIGPIPE, not
/// with a panic.
#[test]
fn output_to_a_reader_that_has_gone_ends_quietly_not_in_a_panic() {
    for args in [
        vec!["crd".to_string()],
        vec![
            "provider".into(),
            "inspect".into(),
            guest_builds::SIMCLOUD.into(),
        ],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let output = Command::new(wasm_ccm_binary())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .expect("run wasm-ccm");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn inspect_describes_simcloud_and_says_it_satisfies_the_contract() {
    let run = wasm_ccm(["provider", "inspect", guest_builds::SIMCLOUD], &[]);
    assert!(run.succeeded(), "{run:#?}");
    let out = &run.stdout;
    let size = std::fs::metadata(guest_builds::SIMCLOUD).unwrap().len();
    assert!(
        out.contains(&format!("sha256:{}", sha256_of(guest_builds::SIMCLOUD))),
        "{out}"
    );
    assert!(out.contains(&format!("{size} bytes")), "{out}");
    assert!(out.contains(guest_builds::SIMCLOUD), "{out}");
    assert!(out.contains("wasm-ccm:provider@0.1.0"), "{out}");
    let imports = out
        .split("imports:")
        .nth(1)
        .and_then(|rest| rest.split("exports:").next())
        .expect("an imports section");
    assert!(imports.contains("wasi:http/outgoing-handler"), "{imports}");
    assert!(imports.contains("wasm-ccm:provider/host"), "{imports}");
    let exports = out.split("exports:").nth(1).expect("an exports section");
    for interface in ["provider", "instances", "load-balancer", "routes"] {
        assert!(
            exports.contains(&format!("wasm-ccm:provider/{interface}@0.1.0")),
            "{exports}"
        );
    }
    assert!(out.contains("satisfies the host contract: yes"), "{out}");
}

/// Every simcloud (Rust, TypeScript, Python) is built for node sets: it imports `node-sets`
/// and exports `load-balancer-node-sets`, so the host lends it load-balancer nodes to read a
/// field at a time instead of copying every node in (each SDK's `Nodes`).
#[test]
fn inspect_shows_every_simcloud_reads_nodes_from_node_sets() {
    for component in [
        guest_builds::SIMCLOUD,
        guest_builds::SIMCLOUD_TS,
        guest_builds::SIMCLOUD_PY,
    ] {
        let run = wasm_ccm(["provider", "inspect", component], &[]);
        assert!(run.succeeded(), "{run:#?}");
        let (imports, exports) = run
            .stdout
            .split_once("exports:")
            .expect("an exports section");
        assert!(
            imports.contains("wasm-ccm:provider/node-sets@0.1.0"),
            "{component}: {imports}"
        );
        assert!(
            exports.contains("wasm-ccm:provider/load-balancer-node-sets@0.1.0"),
            "{component}: {exports}"
        );
        assert!(run.stdout.contains("satisfies the host contract: yes"));
    }
}

/// A CLI command keeps compiled code in `$HOME/.cache/wasm-ccm` when `XDG_CACHE_HOME` is
/// unset or empty; one that cannot have that directory warns, naming it and the flags, and
/// runs without a cache.
#[test]
fn inspect_caches_in_the_users_cache_directory_or_warns_and_runs_without() {
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().display().to_string();
    let inspect = ["provider", "inspect", guest_builds::SIMCLOUD];
    let run = wasm_ccm(inspect, &[("XDG_CACHE_HOME", ""), ("HOME", &home_path)]);
    assert!(run.succeeded(), "{run:#?}");
    assert!(run.stderr.is_empty(), "{run:#?}");
    let compiled = home.path().join(".cache/wasm-ccm/compiled");
    let entries: Vec<_> = std::fs::read_dir(&compiled)
        .unwrap_or_else(|error| panic!("{}: {error}", compiled.display()))
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".cwasm"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");

    let file = tempfile::NamedTempFile::new().unwrap();
    let unusable = file.path().display().to_string();
    let run = wasm_ccm(inspect, &[("XDG_CACHE_HOME", &unusable)]);
    assert!(run.succeeded(), "{run:#?}");
    for part in [
        format!("{unusable}/wasm-ccm"),
        "running without a cache".to_string(),
        "--cache-dir".to_string(),
        "--no-cache".to_string(),
    ] {
        assert!(run.stderr.contains(&part), "{part} not in {}", run.stderr);
    }
}

#[test]
fn inspect_json_has_the_same_facts() {
    let run = wasm_ccm(
        ["provider", "inspect", "--json", guest_builds::SIMCLOUD],
        &[],
    );
    assert!(run.succeeded(), "{run:#?}");
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    let size = std::fs::metadata(guest_builds::SIMCLOUD).unwrap().len();
    assert_eq!(
        json["digest"],
        format!("sha256:{}", sha256_of(guest_builds::SIMCLOUD))
    );
    assert_eq!(json["size"], size);
    assert_eq!(json["contract_version"], "0.1.0");
    let imports: Vec<&str> = json["imports"]
        .as_array()
        .expect("imports list")
        .iter()
        .map(|i| i.as_str().unwrap())
        .collect();
    assert!(
        imports
            .iter()
            .any(|i| i.contains("wasi:http/outgoing-handler")),
        "{imports:?}"
    );
    assert!(
        imports.iter().any(|i| i.contains("wasm-ccm:provider/host")),
        "{imports:?}"
    );
    let exports = json["exports"].as_array().expect("exports list");
    assert!(
        exports
            .iter()
            .any(|e| e.as_str().unwrap().contains("wasm-ccm:provider/instances"))
    );
    assert!(json["problem"].is_null(), "{json}");
}

/// The run failed cleanly with a message naming `file` as not a component.
fn assert_refused_as_not_a_component(run: &Run, file: &std::path::Path) {
    run.assert_failed_cleanly();
    for expected in [
        file.display().to_string(),
        "not a valid WebAssembly component".into(),
    ] {
        assert!(run.stderr.contains(&expected), "{}", run.stderr);
    }
}

#[test]
fn inspect_of_a_text_file_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("provider.wasm");
    std::fs::write(&file, "this is not WebAssembly\n").unwrap();
    let run = wasm_ccm(
        ["provider".as_ref(), "inspect".as_ref(), file.as_os_str()],
        &[],
    );
    assert_refused_as_not_a_component(&run, &file);
}

#[test]
fn inspect_of_a_truncated_component_fails_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("simcloud-truncated.wasm");
    let bytes = std::fs::read(guest_builds::SIMCLOUD).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    for args in [
        vec!["provider", "inspect"],
        vec!["provider", "inspect", "--json"],
    ] {
        let mut args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
        args.push(file.clone().into_os_string());
        let run = wasm_ccm(args, &[]);
        assert_refused_as_not_a_component(&run, &file);
    }
}

#[test]
fn inspect_of_a_missing_file_fails_naming_it() {
    let run = wasm_ccm(["provider", "inspect", "/nonexistent/provider.wasm"], &[]);
    run.assert_usage_error(&["/nonexistent/provider.wasm"]);
}

/// An error is one line with no terminal control, whatever the name it quotes holds (a
/// file's, a registry's words, a provider's).
#[test]
fn an_error_quoting_control_characters_is_one_escaped_line() {
    let run = wasm_ccm(
        [
            "provider",
            "inspect",
            "/nonexistent/\u{1b}[2Jbad\nname.wasm",
        ],
        &[],
    );
    run.assert_usage_error(&["/nonexistent/\\u{1b}[2Jbad\\nname.wasm"]);
    assert!(
        !run.stderr.contains('\u{1b}') && run.stderr.trim_end().lines().count() == 1,
        "{:?}",
        run.stderr
    );
}

// ---- provider call: success -----------------------------------------------------------------

/// `provider call simcloud instance-metadata` for node-1 with the simulator granted and its
/// token injected by `credential` (given `env`).
async fn call_metadata_with_credential(
    cloud: &Cloud,
    config: &tempfile::NamedTempFile,
    credential: &str,
    env: Vec<(&'static str, String)>,
) -> Run {
    let url = cloud.sim.url();
    let args = call_args(
        guest_builds::SIMCLOUD,
        "instance-metadata",
        node1_args(),
        &[
            "--config",
            &path(config),
            "--allow",
            &url,
            "--credential",
            &format!("{url}={credential}"),
            "--audit",
        ],
    );
    let run = wasm_ccm_async(args, env).await;
    assert!(run.succeeded(), "{run:#?}");
    run.assert_no_token();
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_instance_metadata_with_an_env_credential_prints_the_metadata() {
    let (cloud, instance, config) = cloud_with_node().await;
    let env = vec![("SIM_TOKEN", TOKEN.to_string())];
    let run = call_metadata_with_credential(&cloud, &config, "bearer:env:SIM_TOKEN", env).await;
    let md: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    assert_eq!(md["providerID"], format!("simcloud://{}", instance.id));
    assert_eq!(md["instanceType"], "sim.large");
    assert_eq!(md["zone"], "sim-central-1c");
    assert_eq!(md["region"], "sim-central-1");
    assert_eq!(
        md["nodeAddresses"][0],
        serde_json::json!({"type": "InternalIP", "address": "10.0.3.7"})
    );
    assert_eq!(
        md["nodeAddresses"][1],
        serde_json::json!({"type": "ExternalIP", "address": "203.0.113.7"})
    );
    assert_eq!(
        md["additionalLabels"],
        serde_json::json!([["simcloud.example/instance-id", instance.id]])
    );

    // --audit: one JSON line per request, on stderr.
    let audit: Vec<serde_json::Value> = run
        .stderr
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    assert_eq!(audit.len(), 1, "{}", run.stderr);
    assert_eq!(audit[0]["host"], cloud.sim.url());
    assert_eq!(audit[0]["path"], "/v1/instances");
    assert_eq!(audit[0]["status"], 200);

    let log = cloud.sim.state().requests();
    assert_eq!(log.len(), 1);
    assert!(log[0].authorized, "the token was injected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_instance_metadata_with_a_file_credential_prints_the_metadata() {
    let (cloud, instance, config) = cloud_with_node().await;
    let credential = format!("bearer:file:{}", path(&cloud.token_file));
    let run = call_metadata_with_credential(&cloud, &config, &credential, vec![]).await;
    let md: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    assert_eq!(md["providerID"], format!("simcloud://{}", instance.id));
    assert!(cloud.sim.state().requests().iter().all(|r| r.authorized));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_init_prints_the_capabilities() {
    let (cloud, _, config) = cloud_with_node().await;
    let args = call_args(
        guest_builds::SIMCLOUD,
        "init",
        "{}",
        &["--config", &path(&config)],
    );
    let run = wasm_ccm_async(args, vec![]).await;
    assert!(run.succeeded(), "{run:#?}");
    let caps: serde_json::Value = serde_json::from_str(&run.stdout).expect("stdout is JSON");
    assert_eq!(
        caps,
        serde_json::json!({
            "name": "simcloud", "instances": true, "loadBalancer": true,
            "routes": true, "hasClusterId": true,
            "nodeMetadata": {"labels": [], "annotations": []}
        })
    );
    assert!(cloud.sim.state().requests().is_empty());
}

// ---- provider call: provider errors ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_without_allow_is_egress_denied_and_reaches_nothing() {
    let (cloud, _, config) = cloud_with_node().await;
    let url = cloud.sim.url();
    let args = call_args(
        guest_builds::SIMCLOUD,
        "instance-metadata",
        node1_args(),
        &[
            "--config",
            &path(&config),
            "--credential",
            &format!("{url}=bearer:env:SIM_TOKEN"),
        ],
    );
    let run = wasm_ccm_async(args, vec![("SIM_TOKEN", TOKEN.to_string())]).await;
    run.assert_failed_cleanly();
    assert_eq!(run.code, Some(1), "a provider error exits 1: {run:#?}");
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(run.stderr.contains("egress-denied"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&cloud.sim.addr().to_string()),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("no --allow entry matches"),
        "{}",
        run.stderr
    );
    assert!(
        cloud.sim.state().requests().is_empty(),
        "nothing reached the cloud"
    );
    run.assert_no_token();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_granted_without_a_credential_says_which_flag_adds_one() {
    let (cloud, _, config) = cloud_with_node().await;
    let url = cloud.sim.url();
    let args = call_args(
        guest_builds::SIMCLOUD,
        "instance-metadata",
        node1_args(),
        &["--config", &path(&config), "--allow", &url],
    );
    let run = wasm_ccm_async(args, Vec::new()).await;
    run.assert_failed_cleanly();
    assert_eq!(run.code, Some(1), "a provider error exits 1: {run:#?}");
    let requests = cloud.sim.state().requests();
    assert_eq!(requests.len(), 1, "one request, refused by the cloud");
    assert_eq!(requests[0].status, 401);
    assert!(
        run.stderr.contains(&format!(
            "hint: {url} answered 401 and no --credential rule covers it"
        )),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_for_an_unknown_node_reports_not_found() {
    let (cloud, _, config) = cloud_with_node().await;
    let mut args = call_args(
        guest_builds::SIMCLOUD,
        "instance-metadata",
        r#"{"node":{"name":"ghost"}}"#,
        &[],
    );
    args.extend(granted_with_env_token(&cloud, &config));
    let run = wasm_ccm_async(args, vec![("SIM_TOKEN", TOKEN.to_string())]).await;
    run.assert_failed_cleanly();
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert!(run.stderr.contains("(not-found)"), "{}", run.stderr);
    assert!(run.stderr.contains("ghost"), "{}", run.stderr);
    run.assert_no_token();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_ensure_load_balancer_while_provisioning_reports_retry_after() {
    let (cloud, instance, config) = cloud_with_node().await;
    let svc = serde_json::json!({
        "name": "web", "uid": "11112222-3333-4444-5555-666677778888",
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]
    });
    let nodes = serde_json::json!([{"name": "node-1", "providerID": format!("simcloud://{}", instance.id)}]);
    let args = serde_json::json!({"cluster-name": "kubernetes", "svc": svc, "nodes": nodes});
    let mut args = call_args(
        guest_builds::SIMCLOUD,
        "ensure-load-balancer",
        &args.to_string(),
        &[],
    );
    args.extend(granted_with_env_token(&cloud, &config));
    let run = wasm_ccm_async(args, vec![("SIM_TOKEN", TOKEN.to_string())]).await;
    run.assert_failed_cleanly();
    assert!(run.stderr.contains("(retry-after)"), "{}", run.stderr);
    let lbs = cloud.sim.state().load_balancers();
    assert_eq!(lbs.len(), 1);
    assert_eq!(lbs[0].name, "a1111222233334444555566667777888");
    assert_eq!(lbs[0].targets, vec![instance.id]);
}

#[test]
fn a_runaway_provider_is_stopped_at_the_timeout() {
    let args = call_args(
        guest_builds::HOSTILE,
        "instance-metadata",
        r#"{"node":{"name":"loop"}}"#,
        &["--timeout", "1s"],
    );
    let run = wasm_ccm(args, &[]);
    run.assert_failed_cleanly();
    assert_eq!(run.code, Some(1), "{run:#?}");
    assert!(run.stderr.contains("(deadline)"), "{}", run.stderr);
    assert!(run.stderr.contains("1000 ms"), "{}", run.stderr);
    // Compiling the guest takes a moment; the loop itself is cut at one second.
    assert!(
        run.elapsed < Duration::from_secs(15),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn guest_logs_stdout_and_stderr_reach_the_log_tagged_with_provider_and_version() {
    let message = "hello from inside the sandbox";
    let args = call_args(
        guest_builds::HOSTILE,
        "instance-metadata",
        &format!(r#"{{"node":{{"name":"log:{message}"}}}}"#),
        &[],
    );
    let run = wasm_ccm(args, &[("RUST_LOG", "wasm_ccm=info")]);
    assert_eq!(run.code, Some(0), "{run:#?}");
    // The report rides in a label value that is no label value: the warning that the
    // manager would refuse it quotes the report, and so the message, once more.
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(message) && !l.starts_with("warning: the manager would refuse"))
        .collect();
    assert_eq!(lines.len(), 3, "host log, stdout, stderr: {}", run.stderr);
    for line in &lines {
        assert!(line.contains("provider=\"hostile\""), "{line}");
        assert!(line.contains("version=\"sha256:"), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("stream=\"stdout\"")));
    assert!(lines.iter().any(|l| l.contains("stream=\"stderr\"")));
    assert!(
        !run.stdout.contains(message),
        "guest output never reaches our stdout"
    );
}

/// `provider call` of the hostile guest's `ensure-load-balancer` for a Service `web` (port 80)
/// annotated `key: value`.
fn hostile_ensure(key: &str, value: &str) -> Run {
    let svc = serde_json::json!({
        "name": "web",
        "ports": [{"port": 80}],
        "annotations": [[key, value]],
    });
    let args = serde_json::json!({"cluster-name": "kubernetes", "svc": svc, "nodes": []});
    wasm_ccm(
        call_args(
            guest_builds::HOSTILE,
            "ensure-load-balancer",
            &args.to_string(),
            &[],
        ),
        &[],
    )
}

/// An answer the manager would refuse is printed, with a warning naming each refused field,
/// its value and why; the exit code stays that of the call.
#[test]
fn call_warns_of_an_answer_the_manager_would_refuse() {
    let run = hostile_ensure(
        "hostile.wasm-ccm.io/ingress",
        r#"[{"ip": "169.254.169.254"}, {"hostname": "10.96.0.1"}, {"ip": "198.51.100.7"}]"#,
    );
    assert_eq!(run.code, Some(0), "{run:#?}");
    let printed: serde_json::Value = serde_json::from_str(&run.stdout).expect("the answer");
    assert_eq!(printed["ingress"][0]["ip"], "169.254.169.254");
    let warning = run
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: the manager would refuse this answer"))
        .unwrap_or_else(|| panic!("a warning: {}", run.stderr));
    assert!(
        warning.contains(r#"ingress[0].ip "169.254.169.254": a link-local"#)
            && warning.contains(
                r#"ingress[1].hostname "10.96.0.1": an IP address where a DNS name is required"#
            )
            && !warning.contains("198.51.100.7"),
        "{warning}"
    );

    let metadata = r#"{"providerID": "hostile://i-1", "addresses": [["InternalIP", "10.0.0.5"]]}"#;
    let node = serde_json::json!({"node": {"name": "n1",
        "annotations": [["hostile.wasm-ccm.io/metadata", metadata]]}});
    let run = wasm_ccm(
        call_args(
            guest_builds::HOSTILE,
            "instance-metadata",
            &node.to_string(),
            &[],
        ),
        &[],
    );
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert!(
        !run.stderr.contains("warning: the manager would refuse"),
        "a valid answer passes: {}",
        run.stderr
    );
}

/// A provider's error text is escaped onto one line and cut to 1 KiB, and its `retry-after`
/// clamped to 5 minutes, before anything (here `provider call`) prints it: a MiB of text
/// with a forged log line and a delay of `u64::MAX` ms.
#[test]
fn call_prints_a_providers_error_cut_to_a_kib_and_its_delay_clamped() {
    let error = serde_json::json!({"kind": "retry-after", "delayMs": u64::MAX, "bytes": 1 << 20});
    let run = hostile_ensure("hostile.wasm-ccm.io/error", &error.to_string());
    assert_eq!(run.code, Some(1), "{run:#?}");
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error (retry-after): "))
        .unwrap_or_else(|| panic!("the error: {:.2000}", run.stderr));
    assert!(line.len() <= 1400, "{} bytes", line.len());
    assert!(line.contains("retry after 300000 ms"), "{line:.300}");
    assert!(
        line.contains("\\n2026-01-01T00:00:00Z  INFO wasm_ccm: forged"),
        "{line:.300}"
    );
    assert!(line.ends_with("..."), "cut");
    assert!(
        !run.stderr.lines().any(|l| l.starts_with("2026-01-01")),
        "no forged line: {:.2000}",
        run.stderr
    );
}

// ---- provider call: bad input ---------------------------------------------------------------

/// `provider call simcloud instance-metadata` with `extra` flags; the input is refused before
/// anything is loaded.
fn call_simcloud(args: &str, extra: &[&str]) -> Run {
    wasm_ccm(
        call_args(guest_builds::SIMCLOUD, "instance-metadata", args, extra),
        &[],
    )
}

#[test]
fn an_unknown_function_is_refused_listing_the_known_ones() {
    let run = wasm_ccm(
        call_args(
            guest_builds::SIMCLOUD,
            "instance-metadat",
            node1_args(),
            &[],
        ),
        &[],
    );
    run.assert_usage_error(&[
        "unknown function \"instance-metadat\"",
        "instance-metadata",
        "ensure-load-balancer",
        "delete-route",
    ]);
}

#[test]
fn args_that_are_not_json_are_refused() {
    call_simcloud(r#"{"node": {"name": "node-1""#, &[])
        .assert_usage_error(&["--args is not valid JSON"]);
    call_simcloud("[]", &[]).assert_usage_error(&["JSON object"]);
}

#[test]
fn args_missing_a_parameter_are_refused_naming_it() {
    call_simcloud("{}", &[]).assert_usage_error(&["needs parameter \"node\""]);
    let run = wasm_ccm(
        call_args(
            guest_builds::SIMCLOUD,
            "create-route",
            r#"{"cluster-name": "k", "route": {}}"#,
            &[],
        ),
        &[],
    );
    run.assert_usage_error(&[
        "needs parameter \"name-hint\"",
        "cluster-name, name-hint, route",
    ]);
}

#[test]
fn args_of_the_wrong_type_are_refused_naming_the_parameter() {
    call_simcloud(r#"{"node": {"name": 5}}"#, &[])
        .assert_usage_error(&["parameter \"node\"", "invalid type"]);
    call_simcloud(r#"{"node": "node-1"}"#, &[]).assert_usage_error(&["parameter \"node\""]);
    call_simcloud(r#"{"node": {}, "svc": {}}"#, &[]).assert_usage_error(&["no parameter \"svc\""]);
}

#[test]
fn a_bad_allow_pattern_is_refused() {
    call_simcloud(node1_args(), &["--allow", "ftp://x"])
        .assert_usage_error(&["ftp://x", "scheme must be http or https"]);
    call_simcloud(node1_args(), &["--allow", "https://x.example.com/path"])
        .assert_usage_error(&["no path"]);
}

#[test]
fn a_bad_credential_rule_is_refused() {
    call_simcloud(node1_args(), &["--credential", "https://x=basic:env:T"])
        .assert_usage_error(&["https://x=basic:env:T", "bearer:, header: or aws-sigv4:"]);
    call_simcloud(node1_args(), &["--credential", "https://x"])
        .assert_usage_error(&["missing '='"]);
}

#[test]
fn a_bad_aws_sigv4_rule_is_refused_naming_the_problem() {
    for (rule, problem) in [
        (
            "http://127.0.0.1:5000=aws-sigv4:env",
            "http://127.0.0.1:5000 is not an AWS endpoint name (SERVICE.REGION.amazonaws.com), so the rule must state the region and the services to sign for",
        ),
        (
            "https://*.amazonaws.com=aws-sigv4:env,region=us-east-1,services=EC2",
            "\"EC2\" is not an AWS service signing name",
        ),
        (
            "https://*.amazonaws.com=aws-sigv4:env,sts=https://sts.example.com",
            "sts= goes with web-identity only",
        ),
        (
            "https://*.amazonaws.com=aws-sigv4:web-identity",
            "web identity needs AWS_ROLE_ARN set in the environment",
        ),
    ] {
        call_simcloud(node1_args(), &["--credential", rule]).assert_usage_error(&[
            "--credential",
            rule,
            problem,
        ]);
    }
    let token = tempfile::NamedTempFile::new().expect("token file");
    let web_identity = [
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ccm"),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &path(&token)),
    ];
    let with_identity = |rule: &str| {
        let args = call_args(
            guest_builds::SIMCLOUD,
            "instance-metadata",
            node1_args(),
            &["--credential", rule],
        );
        wasm_ccm(args, &web_identity)
    };
    with_identity("https://*.amazonaws.com=aws-sigv4:web-identity").assert_usage_error(&[
        "--credential",
        "web identity needs the STS region: state the region, the STS endpoint, or set AWS_REGION",
    ]);
    std::fs::remove_file(token.path()).expect("remove the token file");
    let rule = "https://*.amazonaws.com=aws-sigv4:web-identity,region=us-east-1";
    with_identity(rule).assert_usage_error(&[
        &format!("--credential {rule}: cannot read the web identity token file"),
        &path(&token),
    ]);
}

/// `provider call hostile instance-metadata` making a signed `DescribeVpcs` to moto through
/// the `--credential` rule `rule` (after `URL=`), with `env`; the guest's report.
async fn call_moto_signed(
    moto_url: &str,
    rule: &str,
    more: &[&str],
    env: Vec<(&'static str, String)>,
) -> Run {
    let request = serde_json::json!({
        "method": "POST",
        "url": format!("{moto_url}/"),
        "headers": [["content-type", "application/x-www-form-urlencoded"]],
        "body": "Action=DescribeVpcs&Version=2016-11-15",
    });
    let args = serde_json::json!({"node": {"name": format!("request:{request}")}}).to_string();
    let credential = format!("{moto_url}={rule}");
    let mut extra = vec!["--allow", moto_url, "--credential", &credential, "--audit"];
    extra.extend_from_slice(more);
    wasm_ccm_async(
        call_args(guest_builds::HOSTILE, "instance-metadata", &args, &extra),
        env,
    )
    .await
}

/// The status of the guest's request, from the metadata `provider call` printed.
fn reported_status(run: &Run) -> u64 {
    assert!(run.succeeded(), "{run:#?}");
    let metadata: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON metadata");
    let labels = metadata["additionalLabels"].as_array().expect("labels");
    let report = labels
        .iter()
        .find(|pair| pair[0] == "report")
        .and_then(|pair| pair[1].as_str())
        .expect("a report");
    let report: serde_json::Value = serde_json::from_str(report).expect("JSON report");
    report["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_signs_for_moto_with_keys_from_the_environment_or_a_web_identity() {
    let moto = e2e::moto::Moto::start().await;
    let keys = vec![
        ("AWS_ACCESS_KEY_ID", moto.access_key_id.clone()),
        ("AWS_SECRET_ACCESS_KEY", moto.secret_access_key.clone()),
    ];
    let rule = "aws-sigv4:env,region=us-east-1,services=ec2";
    let run = call_moto_signed(moto.url(), rule, &[], keys).await;
    assert_eq!(reported_status(&run), 200, "{run:#?}\n{}", moto.log());
    assert!(!run.stdout.contains(&moto.secret_access_key));
    assert!(!run.stderr.contains(&moto.secret_access_key));

    let sts = moto.unsigned_sts().await;
    let token = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(token.path(), "a-projected-token").expect("write the token");
    let identity = vec![
        ("AWS_ROLE_ARN", e2e::moto::ROLE_ARN.to_string()),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", path(&token)),
    ];
    let rule = format!(
        "aws-sigv4:web-identity,region=us-east-1,services=ec2,sts={}",
        sts.url()
    );
    // A loopback STS over HTTP only once the operator lists it.
    let refused = call_moto_signed(moto.url(), &rule, &[], identity.clone()).await;
    assert!(!refused.succeeded(), "{refused:#?}");
    assert!(
        refused.stderr.contains(&format!(
            "--credential {}={rule}: STS endpoint {} is not an AWS STS endpoint",
            moto.url(),
            sts.url()
        )),
        "{refused:#?}"
    );
    assert!(sts.seen().is_empty());
    let allow = ["--sts-endpoint-allow", sts.url()];
    let run = call_moto_signed(moto.url(), &rule, &allow, identity).await;
    assert_eq!(reported_status(&run), 200, "{run:#?}\n{}", moto.log());
    assert_eq!(sts.seen().len(), 1, "one exchange");
    assert!(!run.stderr.contains("a-projected-token"));
}

// ---- provider call: the AWS provider ---------------------------------------------------------

/// The IAM policy the AWS page gives the provider's role.
fn documented_iam_policy() -> serde_json::Value {
    let page = docs::page("docs/src/operators/aws.md");
    let block = docs::first_block(docs::section(&page, "## IAM policy"), "json");
    serde_json::from_str(&block).expect("the AWS page's IAM policy is JSON")
}

/// The actions the AWS provider's code sends: each `Query::new("Action")`, and the two
/// actions of each `Query::new(action)` (`let action = if … { "A" } else { "B" };`). Test
/// modules are left out.
fn actions_the_aws_provider_sends() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guests/aws/src");
    let mut actions = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("guests/aws/src") {
        let text = std::fs::read_to_string(entry.expect("a file").path()).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for call in code.split("Query::new(").skip(1) {
            if let Some(rest) = call.strip_prefix('"') {
                actions.insert(rest.split('"').next().unwrap_or_default().to_string());
            } else {
                assert!(
                    call.starts_with("action)"),
                    "an action named otherwise: {call:.60}"
                );
                let choice = code
                    .split_once("let action = if")
                    .and_then(|(_, rest)| rest.split_once(';'))
                    .map(|(choice, _)| choice)
                    .expect("the choice of action");
                actions.extend(choice.split('"').skip(1).step_by(2).map(str::to_string));
            }
        }
    }
    actions
}

/// The AWS page's IAM policy allows every action the provider sends and no other (the test
/// below runs `provider call` under it), and `AddTags` only as AWS checks it for a resource
/// created with tags.
#[test]
fn the_documented_iam_policy_allows_exactly_the_actions_the_aws_provider_sends() {
    let policy = documented_iam_policy();
    let allowed: BTreeSet<String> = policy["Statement"][0]["Action"]
        .as_array()
        .expect("the first statement lists actions")
        .iter()
        .map(|action| {
            let action = action.as_str().expect("an action");
            let (service, name) = action.split_once(':').expect("service:Action");
            assert!(
                ["ec2", "elasticloadbalancing"].contains(&service),
                "{action}"
            );
            name.to_string()
        })
        .collect();
    assert_eq!(allowed, actions_the_aws_provider_sends());
    let tagging = &policy["Statement"][1];
    assert_eq!(tagging["Action"], "elasticloadbalancing:AddTags");
    assert_eq!(
        tagging["Condition"]["StringEquals"]["elasticloadbalancing:CreateAction"],
        serde_json::json!(["CreateLoadBalancer", "CreateTargetGroup", "CreateListener"])
    );
    assert_eq!(policy["Statement"].as_array().map(Vec::len), Some(2));
}

/// `policy` without `action` in its first statement.
fn without(policy: &serde_json::Value, action: &str) -> serde_json::Value {
    let mut policy = policy.clone();
    let actions = policy["Statement"][0]["Action"]
        .as_array_mut()
        .expect("a list of actions");
    let before = actions.len();
    actions.retain(|a| a != action);
    assert_eq!(actions.len(), before - 1, "{action} is in the policy");
    policy
}

/// `wasm-ccm provider call aws.wasm FUNCTION --args ARGS --config cloud.json --allow MOTO
/// --credential MOTO=aws-sigv4:env,…`, the AWS page's command with moto as the endpoint, signed
/// with `keys` (access key id, secret key) from the environment.
async fn call_aws(
    moto: &Moto,
    config: &tempfile::NamedTempFile,
    keys: &(String, String),
    function: &str,
    args: serde_json::Value,
) -> Run {
    let url = moto.url();
    let credential =
        format!("{url}=aws-sigv4:env,region=us-east-1,services=ec2+elasticloadbalancing");
    let extra = [
        "--config",
        &path(config),
        "--allow",
        url,
        "--credential",
        &credential,
    ];
    let args = call_args(guest_builds::AWS, function, &args.to_string(), &extra);
    let env = vec![
        ("AWS_ACCESS_KEY_ID", keys.0.clone()),
        ("AWS_SECRET_ACCESS_KEY", keys.1.clone()),
    ];
    let run = wasm_ccm_async(args, env).await;
    assert!(!run.stdout.contains(&keys.1), "secret on stdout");
    assert!(!run.stderr.contains(&keys.1), "secret on stderr");
    run
}

/// What `provider call` printed, as JSON.
fn printed(run: &Run) -> serde_json::Value {
    assert!(run.succeeded(), "{run:#?}");
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|err| panic!("stdout is JSON: {err}: {run:#?}"))
}

/// The AWS page's `provider call` of the AWS provider, against moto with signature checking on
/// and the provider's keys limited to the AWS page's IAM policy: a node's metadata from its EC2
/// instance (found by private DNS name; the page's block, typed), a Service's NLB made and
/// deleted. The same policy
/// without `CreateLoadBalancer` is refused by moto, so the policy moto checked is the one
/// that let the calls through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_runs_the_aws_provider_against_moto_within_the_documented_iam_policy() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let instance = run_node(&moto, &net).await;
    let zone_id = zone_id(&moto).await;
    let policy = documented_iam_policy();
    let keys = moto.user("ccm", &policy.to_string()).await;
    let cloud_json = tempfile::NamedTempFile::new().expect("cloud.json");
    std::fs::write(
        cloud_json.path(),
        config(moto.url(), &net.network).to_string(),
    )
    .expect("write cloud.json");

    // The page's call, typed: moto in place of AWS's endpoints as the page says (its URL in
    // cloud.json's `endpoints`, allowed, and the region and services in the rule).
    let shell = e2e::docs::Shell::new();
    std::fs::copy(guest_builds::AWS, shell.path("aws.wasm")).expect("copy aws.wasm");
    let url = moto.url();
    let rule = format!("{url}=aws-sigv4:env,region=us-east-1,services=ec2+elasticloadbalancing");
    let typed = docs::substitute(
        &docs::block_starting("docs/src/operators/aws.md", "sh", "echo '{"),
        &[
            (
                r#"{"region": "us-east-1", "cluster_id": "prod", "vpc_id": "vpc-0abc1234"}"#,
                &config(url, &net.network).to_string(),
            ),
            (
                "AWS_ACCESS_KEY_ID=…",
                &format!("AWS_ACCESS_KEY_ID={}", keys.0),
            ),
            (
                "AWS_SECRET_ACCESS_KEY=…",
                &format!("AWS_SECRET_ACCESS_KEY={}", keys.1),
            ),
            ("ip-10-0-1-5.ec2.internal", &instance.private_dns),
            ("https://ec2.us-east-1.amazonaws.com", url),
            ("https://elasticloadbalancing.us-east-1.amazonaws.com", url),
            (
                "https://*.amazonaws.com=aws-sigv4:env,region=us-east-1",
                &rule,
            ),
        ],
    );
    let output = tokio::process::Command::from(shell.sh(&typed))
        .output()
        .await
        .expect("run sh");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(output.status.success(), "{typed}\n{stdout}{stderr}");
    assert!(
        !stdout.contains(&keys.1) && !stderr.contains(&keys.1),
        "the secret key printed"
    );
    let metadata: serde_json::Value = serde_json::from_str(&stdout).expect("JSON metadata");
    let provider_id = format!("aws:///{ZONE}/{}", instance.id);
    assert_eq!(metadata["providerID"], provider_id);
    assert_eq!(metadata["instanceType"], "m5.large");
    assert_eq!(metadata["zone"], ZONE);
    assert_eq!(metadata["region"], "us-east-1");
    assert_eq!(
        metadata["nodeAddresses"][0],
        serde_json::json!({"type": "InternalIP", "address": instance.private_ip})
    );
    assert_eq!(
        metadata["additionalLabels"],
        serde_json::json!([["topology.k8s.aws/zone-id", zone_id]])
    );

    let svc = serde_json::json!({
        "name": "web", "namespace": "shop", "uid": "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b",
        "annotations": [["service.beta.kubernetes.io/aws-load-balancer-type", "nlb"]],
        "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}]
    });
    let nodes = serde_json::json!([{"name": instance.private_dns, "providerID": provider_id}]);
    let ensure = serde_json::json!({"cluster-name": "kubernetes", "svc": svc, "nodes": nodes});
    let status = printed(
        &call_aws(
            &moto,
            &cloud_json,
            &keys,
            "ensure-load-balancer",
            ensure.clone(),
        )
        .await,
    );
    let made = nlb(&moto).await.expect("moto holds the NLB");
    assert_eq!(
        status["ingress"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    assert_eq!(status["ingress"][0]["hostname"], made.dns_name);
    assert_eq!(made.listeners.len(), 1, "{made:?}");
    assert_eq!(
        made.groups[0].2,
        [(instance.id.clone(), "30080".to_string())]
    );

    let delete = serde_json::json!({"cluster-name": "kubernetes", "svc": svc});
    let deleted = call_aws(
        &moto,
        &cloud_json,
        &keys,
        "ensure-load-balancer-deleted",
        delete,
    )
    .await;
    assert!(deleted.succeeded(), "{deleted:#?}");
    assert_eq!(nlb(&moto).await, None);
    assert!(all_target_groups(&moto).await.is_empty());

    let narrower = without(&policy, "elasticloadbalancing:CreateLoadBalancer");
    let keys = moto.user("ccm-narrower", &narrower.to_string()).await;
    let refused = call_aws(&moto, &cloud_json, &keys, "ensure-load-balancer", ensure).await;
    refused.assert_failed_cleanly();
    assert!(
        refused
            .stderr
            .contains("must allow elasticloadbalancing:CreateLoadBalancer"),
        "{}",
        refused.stderr
    );
    assert_eq!(nlb(&moto).await, None);
}

#[test]
fn a_credential_from_an_unset_env_var_is_refused_before_loading() {
    let run = call_simcloud(
        node1_args(),
        &[
            "--allow",
            "https://api.example.com",
            "--credential",
            "https://api.example.com=bearer:env:WASM_CCM_TEST_UNSET_TOKEN",
        ],
    );
    run.assert_usage_error(&["--credential", "WASM_CCM_TEST_UNSET_TOKEN"]);
}

#[test]
fn a_credential_from_a_missing_file_is_refused_before_loading() {
    let run = call_simcloud(
        node1_args(),
        &[
            "--credential",
            "https://api.example.com=bearer:file:/nonexistent/token",
        ],
    );
    run.assert_usage_error(&["--credential", "/nonexistent/token"]);
}

#[test]
fn a_bad_memory_limit_is_refused() {
    call_simcloud(node1_args(), &["--memory-limit", "12XB"])
        .assert_usage_error(&["12XB", "unknown unit"]);
    call_simcloud(node1_args(), &["--memory-limit", "0"]).assert_usage_error(&["more than zero"]);
    // simcloud's memory starts larger than 64 KiB: the message names the flag to raise.
    call_simcloud(node1_args(), &["--memory-limit", "64Ki"]).assert_usage_error(&[
        "needs a memory larger than the memory limit of 65536 bytes (--memory-limit",
    ]);
}

#[test]
fn a_bad_timeout_is_refused() {
    call_simcloud(node1_args(), &["--timeout", "soon"])
        .assert_usage_error(&["soon", "not a duration"]);
    call_simcloud(node1_args(), &["--timeout", "0s"]).assert_usage_error(&["more than zero"]);
}

#[test]
fn a_missing_provider_file_is_refused_naming_it() {
    let run = wasm_ccm(
        call_args(
            "/nonexistent/simcloud.wasm",
            "instance-metadata",
            node1_args(),
            &[],
        ),
        &[],
    );
    run.assert_usage_error(&["/nonexistent/simcloud.wasm"]);
}

#[test]
fn a_missing_config_file_is_refused_naming_it() {
    let run = call_simcloud(node1_args(), &["--config", "/nonexistent/cloud.json"]);
    run.assert_usage_error(&["--config", "/nonexistent/cloud.json"]);
}

#[test]
fn a_config_rejected_by_init_is_reported_as_a_provider_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloud.json");
    std::fs::write(&config, r#"{"api_url": "ftp://nowhere"}"#).unwrap();
    let run = call_simcloud(node1_args(), &["--config", &config.display().to_string()]);
    run.assert_failed_cleanly();
    assert!(run.stderr.contains("api_url"), "{}", run.stderr);
}

// ---- crd ------------------------------------------------------------------------------------

/// The CloudProvider page's regeneration command, `wasm-ccm crd > charts/…/cloudproviders…yaml`, writes
/// exactly the committed file the chart ships.
#[test]
fn crd_prints_the_committed_cloudprovider_crd() {
    let run = wasm_ccm(["crd"], &[]);
    assert!(run.succeeded(), "{run:#?}");
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/wasm-ccm/crds/cloudproviders.wasm-ccm.io.yaml"
    ))
    .expect("the committed CRD");
    assert!(
        run.stdout == committed,
        "wasm-ccm crd differs from the committed CRD"
    );
    assert!(run.stdout.contains("kind: CustomResourceDefinition"));
}

/// `provider conformance FILE --fixture FIXTURE` and `extra`.
fn conformance_args(
    file: &str,
    fixture: &tempfile::NamedTempFile,
    extra: &[String],
) -> Vec<String> {
    let mut all: Vec<String> = ["provider", "conformance", file, "--fixture", &path(fixture)]
        .map(String::from)
        .to_vec();
    all.extend(extra.iter().cloned());
    all
}

fn fixture_file(yaml: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), yaml).expect("write fixture");
    file
}

/// Whoever can write `--cache-dir` cannot have the manager run other code under a
/// component's digest: the hostile guest's compiled entry copied over simcloud's fails its
/// seal, and simcloud is compiled again and run (it asks the cloud, which is not granted),
/// never the hostile guest (which would answer a report).
#[test]
fn another_components_compiled_code_under_a_components_name_is_never_run() {
    let cache = tempfile::tempdir().unwrap();
    let cache_flag = format!("--cache-dir={}", cache.path().display());
    let node = r#"{"node":{"name":"log:swapped"}}"#;
    let call = |file: &str| {
        wasm_ccm(
            call_args(file, "instance-metadata", node, &[&cache_flag]),
            &[("RUST_LOG", "warn")],
        )
    };
    let entries = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(cache.path().join("compiled"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .collect()
    };
    let hostile = call(guest_builds::HOSTILE);
    assert_eq!(hostile.code, Some(0), "{hostile:#?}");
    assert!(hostile.stdout.contains("report"), "{}", hostile.stdout);
    let [hostile_entry] = entries().try_into().expect("hostile's compiled entry");
    assert_eq!(
        call(guest_builds::SIMCLOUD).code,
        Some(1),
        "simcloud reaches no cloud"
    );
    let simcloud_entry = entries()
        .into_iter()
        .find(|entry| *entry != hostile_entry)
        .expect("simcloud's compiled entry");
    std::fs::copy(&hostile_entry, &simcloud_entry).unwrap();

    let swapped = call(guest_builds::SIMCLOUD);
    assert_eq!(swapped.code, Some(1), "{swapped:#?}");
    assert!(
        !swapped.stdout.contains("report"),
        "hostile code ran: {}",
        swapped.stdout
    );
    assert!(
        swapped
            .stderr
            .contains("compile cache entry fails its seal"),
        "{}",
        swapped.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_of_the_rust_simcloud_passes_every_rule_and_leaves_nothing_in_the_cloud() {
    conformance_passes_every_rule_and_leaves_nothing_in_the_cloud(guest_builds::SIMCLOUD).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_of_the_typescript_simcloud_passes_every_rule_and_leaves_nothing_in_the_cloud()
{
    conformance_passes_every_rule_and_leaves_nothing_in_the_cloud(guest_builds::SIMCLOUD_TS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_of_the_python_simcloud_passes_every_rule_and_leaves_nothing_in_the_cloud() {
    conformance_passes_every_rule_and_leaves_nothing_in_the_cloud(guest_builds::SIMCLOUD_PY).await;
}

/// The conformance kit on `component`, a simcloud, against the cloud simulator: every rule
/// passes, in text and in JSON, and the cloud is left as it was.
async fn conformance_passes_every_rule_and_leaves_nothing_in_the_cloud(component: &str) {
    let (cloud, first, config) = cloud_with_node().await;
    let second = cloud.sim.state().add_instance(NewInstance {
        name: "node-2".into(),
        instance_type: "sim.large".into(),
        zone: "sim-central-1c".into(),
        private_ip: Some("10.0.3.8".into()),
        ..NewInstance::default()
    });
    let fixture = fixture_file(&format!(
        r#"
clusterName: kubernetes
instances:
  existing: {{name: node-1}}
  missing: {{name: gone, providerID: "simcloud://i-0000000000000gone"}}
loadBalancer:
  service:
    name: web
    namespace: default
    uid: 11112222-3333-4444-5555-666677778888
    type: LoadBalancer
    ports: [{{name: http, protocol: TCP, port: 80, nodePort: 30080}}]
  nodes: [{{name: node-1, providerID: "simcloud://{first}"}}]
  updatedNodes:
    - {{name: node-1, providerID: "simcloud://{first}"}}
    - {{name: node-2, providerID: "simcloud://{second}"}}
  cloudList: {{url: "{url}/v1/load-balancers?cluster=kubernetes", items: /load_balancers}}
routes:
  route: {{targetNode: node-1, destinationCidr: 10.244.1.0/24}}
  nameHint: 5f1e9a2c-node-1
"#,
        first = first.id,
        second = second.id,
        url = cloud.sim.url(),
    ));
    let granted = granted_with_env_token(&cloud, &config);
    let token = vec![("SIM_TOKEN", TOKEN.to_string())];
    let run = wasm_ccm_async(
        conformance_args(component, &fixture, &granted),
        token.clone(),
    )
    .await;
    assert!(run.succeeded(), "{run:#?}");
    for rule in [
        "instances/exists",
        "instances/missing-does-not-exist",
        "instances/metadata-valid",
        "instances/metadata-by-name-and-by-provider-id-agree",
        "errors/missing-instance-is-not-found",
        "load-balancers/absent-before-ensure",
        "load-balancers/ensure-answers-a-valid-status",
        "load-balancers/ensure-again-is-idempotent",
        "load-balancers/ensure-again-makes-no-second-one",
        "load-balancers/update-with-other-nodes",
        "load-balancers/delete-again-succeeds",
        "routes/listed-after-create",
        "routes/create-again-is-idempotent",
        "routes/delete-again-succeeds",
    ] {
        assert!(
            run.stdout.contains(&format!("PASS  {rule} ")),
            "{rule}:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains("0 failed, 0 skipped"), "{}", run.stdout);
    assert!(
        run.stdout.contains("retry-after"),
        "simcloud's provisioning load balancer was waited for as the controller would: {}",
        run.stdout
    );
    run.assert_no_token();
    assert!(
        cloud.sim.state().load_balancers().is_empty(),
        "no load balancer left"
    );
    assert!(cloud.sim.state().routes().is_empty(), "no route left");

    let mut json = granted.clone();
    json.extend(["--output".to_string(), "json".to_string()]);
    let run = wasm_ccm_async(conformance_args(component, &fixture, &json), token).await;
    assert!(run.succeeded(), "{run:#?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON report");
    let rules = report["rules"].as_array().expect("rules");
    assert!(rules.len() >= 20, "{report:#}");
    assert!(
        rules.iter().all(|rule| rule["verdict"] == "pass"),
        "{report:#}"
    );
    assert!(
        report["provider"]
            .as_str()
            .unwrap_or_default()
            .starts_with("simcloud@sha256:"),
        "{report:#}"
    );
}

/// The conformance kit on the AWS provider against moto with signature checking on, with
/// the keys of a user holding the AWS page's IAM policy: every rule passes (instances by
/// private DNS name and by provider ID, an NLB made, updated and deleted, a pod route in the
/// cluster's route table), and nothing it made is left in moto.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_of_the_aws_provider_against_moto_passes_every_rule() {
    let moto = Moto::start().await;
    let net = public_network(&moto).await;
    let first = run_node(&moto, &net).await;
    let second = run_node(&moto, &net).await;
    let table = route_table(&moto, &net.network, true).await;
    let keys = moto.user("ccm", &documented_iam_policy().to_string()).await;
    let cloud_json = tempfile::NamedTempFile::new().expect("cloud.json");
    std::fs::write(
        cloud_json.path(),
        config(moto.url(), &net.network).to_string(),
    )
    .expect("write cloud.json");
    let node = |instance: &e2e::aws::Instance| {
        serde_json::json!({"name": instance.private_dns,
                           "providerID": format!("aws:///{ZONE}/{}", instance.id)})
    };
    let fixture = fixture_file(
        &serde_json::json!({
            "clusterName": "kubernetes",
            "instances": {
                "existing": {"name": first.private_dns},
                "missing": {"name": "ip-10-0-1-250.ec2.internal",
                            "providerID": format!("aws:///{ZONE}/i-0123456789abcdef0")},
            },
            "loadBalancer": {
                "service": {
                    "name": "web", "namespace": "shop",
                    "uid": "6c1f3e2a-5b7d-4e8f-9a0b-1c2d3e4f5a6b", "type": "LoadBalancer",
                    "annotations": [["service.beta.kubernetes.io/aws-load-balancer-type", "nlb"]],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 80, "nodePort": 30080}],
                },
                "nodes": [node(&first)],
                "updatedNodes": [node(&first), node(&second)],
                // ELBv2's Query API, POSTed as AWS's SDKs do, answers XML: one
                // `<LoadBalancerArn>` a load balancer.
                "cloudList": {
                    "url": moto.url(),
                    "form": "Action=DescribeLoadBalancers&Version=2015-12-01",
                    "each": "<LoadBalancerArn>",
                },
            },
            "routes": {
                "route": {"targetNode": first.private_dns, "destinationCidr": "10.244.1.0/24"},
                "nameHint": "5f1e9a2c-node-1",
            },
        })
        .to_string(),
    );
    let url = moto.url();
    let extra = [
        "--config".to_string(),
        path(&cloud_json),
        "--allow".to_string(),
        url.to_string(),
        "--credential".to_string(),
        format!("{url}=aws-sigv4:env,region=us-east-1,services=ec2+elasticloadbalancing"),
    ];
    let env = vec![
        ("AWS_ACCESS_KEY_ID", keys.0.clone()),
        ("AWS_SECRET_ACCESS_KEY", keys.1.clone()),
    ];
    let run = wasm_ccm_async(conformance_args(guest_builds::AWS, &fixture, &extra), env).await;
    assert!(run.succeeded(), "{run:#?}");
    assert!(run.stdout.contains("0 failed, 0 skipped"), "{}", run.stdout);
    assert!(!run.stdout.contains(&keys.1) && !run.stderr.contains(&keys.1));
    assert_eq!(nlb(&moto).await, None, "the NLB was deleted");
    assert!(
        all_target_groups(&moto).await.is_empty(),
        "and its target groups"
    );
    let routes = ec2(&moto, "DescribeRouteTables", &[("RouteTableId.1", &table)]).await;
    assert!(
        !fields(&routes, "destinationCidrBlock").contains(&"10.244.1.0/24".to_string()),
        "the pod route was deleted: {routes}"
    );
}

/// The conformance page's example as a user types it: its fixture saved as
/// `conformance.yaml` beside `simcloud.wasm` and `cloud.json`, its command run by `sh` there
/// with `wasm-ccm` on `PATH`, against the cloud simulator in place of the page's
/// `http://127.0.0.1:8080` (and its token in place of `s3cret`): every rule passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_conformance_example_passes_as_typed() {
    let (cloud, _node, config) = cloud_with_node().await;
    let page = docs::page("docs/src/authors/conformance.md");
    let section = docs::section(&page, "# Checking a provider: `provider conformance`");
    let fixture =
        docs::first_block(section, "yaml").replace("http://127.0.0.1:8080", &cloud.sim.url());
    let typed = docs::block_starting(
        "docs/src/authors/conformance.md",
        "sh",
        "SIM_TOKEN=s3cret wasm-ccm provider conformance",
    );
    let command = typed
        .replace("http://127.0.0.1:8080", &cloud.sim.url())
        .replace("s3cret", TOKEN);
    assert!(
        !command.contains("8080") && command.contains(TOKEN),
        "the page's command names the simulator and its token as the test expects: {typed}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("conformance.yaml"), fixture).expect("write fixture");
    std::fs::copy(config.path(), dir.path().join("cloud.json")).expect("copy config");
    std::fs::copy(guest_builds::SIMCLOUD, dir.path().join("simcloud.wasm")).expect("copy");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    std::os::unix::fs::symlink(e2e::wasm_ccm_binary(), bin.join("wasm-ccm")).expect("symlink");
    let search_path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(dir.path())
        .env("PATH", search_path)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{command}\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("0 failed, 0 skipped"), "{stdout}");
    assert!(
        cloud.sim.state().load_balancers().is_empty() && cloud.sim.state().routes().is_empty(),
        "nothing left in the cloud"
    );
}

/// `provider conformance` of the hostile guest with `fixture`: it must fail (exit 1) without
/// a crash; its report.
fn hostile_conformance(fixture: &tempfile::NamedTempFile) -> String {
    let run = wasm_ccm(conformance_args(guest_builds::HOSTILE, fixture, &[]), &[]);
    run.assert_failed_cleanly();
    assert_eq!(run.code, Some(1), "{run:#?}");
    run.stdout
}

/// The row of `report` with `verdict` for `rule`.
fn report_row(report: &str, verdict: &str, rule: &str) -> String {
    report
        .lines()
        .find(|line| line.starts_with(&format!("{verdict}  {rule} ")))
        .unwrap_or_else(|| panic!("no {verdict} row for {rule}:\n{report}"))
        .to_string()
}

#[test]
fn conformance_fails_a_provider_whose_answers_the_manager_would_refuse_and_exits_1() {
    let metadata = r#"{"providerID": "othercloud://i-1", "instanceType": "x", "addresses": [["InternalIP", "127.0.0.1"]]}"#;
    let fixture = fixture_file(&format!(
        "instances:\n  existing: {{name: node-1, annotations: [[\"hostile.wasm-ccm.io/metadata\", {}]]}}\n  missing: {{name: gone}}\n",
        serde_json::to_string(metadata).unwrap()
    ));
    let report = hostile_conformance(&fixture);
    let row = |verdict: &str, rule: &str| report_row(&report, verdict, rule);
    let invalid = row("FAIL", "instances/metadata-valid");
    assert!(invalid.contains("would refuse"), "{invalid}");
    assert!(invalid.contains("127.0.0.1"), "{invalid}");
    assert!(row("FAIL", "instances/provider-id-stable").contains("othercloud://i-1"));
    assert!(
        row("FAIL", "instances/missing-does-not-exist").contains("= true"),
        "hostile says every instance exists"
    );
    assert!(row("FAIL", "instances/shutdown").contains("not-implemented"));
    assert!(
        row("FAIL", "errors/missing-instance-is-not-found").contains("answered other"),
        "a missing instance must be not-found, never other"
    );
    assert!(
        row("SKIP", "load-balancers/ensure-answers-a-valid-status")
            .contains("no loadBalancer section")
    );
    assert!(report.contains("failed"), "{report}");
}

/// The load-balancer and route rules fail a provider that breaks them: the hostile guest
/// answers a loopback ingress (one the manager refuses) whether or not it made a load
/// balancer, keeps answering it after the delete, has no `update-load-balancer` for the
/// Service, and declares routes but implements none.
#[test]
fn conformance_fails_the_load_balancer_and_route_rules_a_provider_breaks() {
    let ingress = serde_json::to_string(r#"[{"ip": "127.0.0.1"}]"#).unwrap();
    let fixture = fixture_file(&format!(
        "loadBalancer:
  service: {{name: web, namespace: default, uid: 1111-2222, type: LoadBalancer,
            ports: [{{name: http, protocol: TCP, port: 80, nodePort: 30080}}],
            annotations: [[\"hostile.wasm-ccm.io/ingress\", {ingress}]]}}
  nodes: [{{name: node-1, providerID: \"hostile://i-1\"}}]
  updatedNodes: [{{name: node-2, providerID: \"hostile://i-2\"}}]
routes:
  route: {{targetNode: node-1, destinationCidr: 10.244.1.0/24}}
  nameHint: 5f1e9a2c-node-1
"
    ));
    let report = hostile_conformance(&fixture);
    let row = |verdict: &str, rule: &str| report_row(&report, verdict, rule);
    assert!(row("FAIL", "load-balancers/absent-before-ensure").contains("before any ensure"));
    let refused = row("FAIL", "load-balancers/ensure-answers-a-valid-status");
    assert!(
        refused.contains("would refuse") && refused.contains("127.0.0.1"),
        "{refused}"
    );
    assert!(row("FAIL", "load-balancers/update-with-other-nodes").contains("not-implemented"));
    assert!(row("FAIL", "load-balancers/delete-then-absent").contains("deleted, yet"));
    for rule in [
        "routes/create",
        "routes/delete",
        "routes/delete-again-succeeds",
    ] {
        assert!(row("FAIL", rule).contains("not-implemented"), "{rule}");
    }
    assert!(row("FAIL", "routes/absent-after-delete").contains("list-routes failed"));
    assert!(row("SKIP", "routes/listed-after-create").contains("create-route failed"));
}

/// The rules that compare one answer with another fail a provider whose answers drift from
/// call to call (the hostile guest's `drifting` cluster and node): an instance said not to
/// exist and a provider ID that changes, a load-balancer name, status and route listing that
/// change, a second delete that fails, a route listed late and twice.
#[test]
fn conformance_fails_the_rules_a_drifting_cloud_breaks() {
    let fixture = fixture_file(
        "clusterName: drifting
instances:
  existing: {name: node-1, annotations: [[hostile.wasm-ccm.io/drifting, \"yes\"]]}
  missing: {name: gone}
loadBalancer:
  service: {name: web, namespace: default, uid: 1111-2222, type: LoadBalancer,
            ports: [{name: http, protocol: TCP, port: 80, nodePort: 30080}]}
  nodes: [{name: node-1, providerID: \"hostile://i-1\"}]
  updatedNodes: [{name: node-2, providerID: \"hostile://i-2\"}]
routes:
  route: {targetNode: node-1, destinationCidr: 10.244.1.0/24}
  nameHint: 5f1e9a2c-node-1
",
    );
    let report = hostile_conformance(&fixture);
    let row = |verdict: &str, rule: &str| report_row(&report, verdict, rule);
    assert!(row("FAIL", "instances/exists").contains("= false"));
    assert!(row("FAIL", "instances/provider-id-stable").contains("hostile://i-"));
    assert!(
        row(
            "FAIL",
            "instances/metadata-by-name-and-by-provider-id-agree"
        )
        .contains("by name:")
    );
    assert!(row("FAIL", "load-balancers/name-is-stable").contains("drifting-"));
    assert!(row("FAIL", "load-balancers/get-after-ensure-agrees").contains("ensure answered"));
    assert!(row("FAIL", "load-balancers/ensure-again-is-idempotent").contains("the first"));
    assert!(row("FAIL", "load-balancers/delete-again-succeeds").contains("other"));
    assert!(row("PASS", "load-balancers/update-with-other-nodes").contains("succeeded"));
    assert!(row("PASS", "routes/create").contains("succeeded"));
    assert!(row("FAIL", "routes/listed-after-create").contains("none 10.244.1.0/24"));
    assert!(row("FAIL", "routes/create-again-is-idempotent").contains("listed 2 times"));
}

/// A provider that makes a new load balancer in the cloud at every ensure (the hostile
/// guest's drifting cloud, told to create them in the simulator) fails the rule that lists
/// the cloud's load balancers around a second ensure, though each ensure answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_fails_a_provider_that_makes_a_second_load_balancer() {
    let cloud = Cloud::start().await;
    let url = cloud.sim.url();
    let fixture = fixture_file(&format!(
        r#"clusterName: drifting
loadBalancer:
  service: {{name: web, namespace: default, uid: 1111-2222, type: LoadBalancer,
            annotations: [[hostile.wasm-ccm.io/drifting-create-at, "{url}/v1/load-balancers"]],
            ports: [{{name: http, protocol: TCP, port: 80, nodePort: 30080}}]}}
  nodes: [{{name: node-1, providerID: "hostile://i-1"}}]
  updatedNodes: [{{name: node-2, providerID: "hostile://i-2"}}]
  cloudList: {{url: "{url}/v1/load-balancers?cluster=drifting", items: /load_balancers}}
"#
    ));
    let granted = [
        "--allow".to_string(),
        url.clone(),
        "--credential".to_string(),
        format!("{url}=bearer:env:SIM_TOKEN"),
    ];
    let run = wasm_ccm_async(
        conformance_args(guest_builds::HOSTILE, &fixture, &granted),
        vec![("SIM_TOKEN", TOKEN.to_string())],
    )
    .await;
    run.assert_failed_cleanly();
    let row = report_row(
        &run.stdout,
        "FAIL",
        "load-balancers/ensure-again-makes-no-second-one",
    );
    assert!(
        row.contains("0 before the first ensure, 1 after it and 2 after the second"),
        "{row}"
    );
    assert_eq!(
        cloud.sim.state().load_balancers().len(),
        2,
        "the two it made"
    );
}

/// Interrupted (SIGINT, as Ctrl-C sends it) while the cloud still provisions the load
/// balancer it made, the kit deletes it, says so and exits 130: nothing is left in the cloud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_interrupted_deletes_the_load_balancer_it_made() {
    let cloud = Cloud::provisioning_for(Duration::from_secs(600)).await;
    let node = cloud.sim.state().add_instance(NewInstance {
        name: "node-1".into(),
        instance_type: "sim.large".into(),
        zone: "sim-central-1c".into(),
        private_ip: Some("10.0.3.7".into()),
        ..NewInstance::default()
    });
    let config = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(config.path(), cloud.simcloud_config()).expect("write config");
    let fixture = fixture_file(&format!(
        r#"
clusterName: kubernetes
loadBalancer:
  service:
    name: web
    namespace: default
    uid: 11112222-3333-4444-5555-666677778888
    type: LoadBalancer
    ports: [{{name: http, protocol: TCP, port: 80, nodePort: 30080}}]
  nodes: [{{name: node-1, providerID: "simcloud://{id}"}}]
  updatedNodes: [{{name: node-1, providerID: "simcloud://{id}"}}]
  retryFor: 10m
"#,
        id = node.id
    ));
    let mut command = Command::new(wasm_ccm_binary());
    command
        .args(conformance_args(
            guest_builds::SIMCLOUD,
            &fixture,
            &granted_with_env_token(&cloud, &config),
        ))
        .env("SIM_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("wasm-ccm runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while cloud.sim.state().load_balancers().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the kit made no load balancer within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("the kit exits within 60 s of Ctrl-C")
    .expect("the waiting task")
    .expect("its output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted: deleting what the kit made")
            && stderr.contains("deleted the load balancer of Service default/web"),
        "{stderr}"
    );
    assert_eq!(
        cloud.sim.state().load_balancers(),
        vec![],
        "the load balancer it made was deleted"
    );
}

/// A provider whose `init` refuses its configuration fails conformance with one `init` row,
/// in the text report and in the JSON one (where a script reads it), exit 1.
#[test]
fn conformance_of_a_provider_whose_init_fails_reports_a_failed_init_row() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cloud.json");
    std::fs::write(&config, r#"{"api_url": "ftp://nowhere"}"#).unwrap();
    let fixture = fixture_file("instances:\n  existing: {name: node-1}\n  missing: {name: gone}\n");
    let config_args = ["--config".to_string(), config.display().to_string()];

    let run = wasm_ccm(
        conformance_args(guest_builds::SIMCLOUD, &fixture, &config_args),
        &[],
    );
    assert_eq!(run.code, Some(1), "{run:#?}");
    let init = run
        .stdout
        .lines()
        .find(|line| line.starts_with("FAIL  init "))
        .unwrap_or_else(|| panic!("no failed init row:\n{}", run.stdout));
    assert!(init.contains("api_url"), "{init}");
    assert!(
        run.stdout.contains("0 passed, 1 failed, 0 skipped"),
        "{}",
        run.stdout
    );

    let mut json = config_args.to_vec();
    json.extend(["--output".to_string(), "json".to_string()]);
    let run = wasm_ccm(
        conformance_args(guest_builds::SIMCLOUD, &fixture, &json),
        &[],
    );
    assert_eq!(run.code, Some(1), "{run:#?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    assert_eq!(report["rules"][0]["rule"], "init", "{report:#}");
    assert_eq!(report["rules"][0]["verdict"], "fail", "{report:#}");
    assert_eq!(
        report["rules"].as_array().map(Vec::len),
        Some(1),
        "{report:#}"
    );
}

#[test]
fn conformance_with_a_bad_fixture_is_refused_naming_the_field() {
    let fixture =
        fixture_file("routes: {route: {targetNode: node-1, destinationCIDR: 10.0.0.0/24}}\n");
    let run = wasm_ccm(conformance_args(guest_builds::SIMCLOUD, &fixture, &[]), &[]);
    run.assert_usage_error(&["--fixture", "routes.route.destinationCidr is missing"]);
    let fixture = fixture_file("instance: {}\n");
    let run = wasm_ccm(conformance_args(guest_builds::SIMCLOUD, &fixture, &[]), &[]);
    run.assert_usage_error(&["--fixture", "instance"]);
}

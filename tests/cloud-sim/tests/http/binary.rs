//! The `cloud-sim` binary: flags, readiness line, SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use reqwest::StatusCode;

#[tokio::test]
async fn binary_serves_until_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cloud-sim"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--token",
            "bin-token",
            "--lb-provision-ms",
            "50",
            "--latency-ms",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn cloud-sim");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("readiness line");
    let url = line
        .trim()
        .strip_prefix("cloud-sim listening on ")
        .expect("readiness line format")
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let http = crate::harness::http_client();
    let listed = http
        .get(format!("{url}/v1/instances"))
        .bearer_auth("bin-token")
        .send()
        .await
        .expect("list");
    assert_eq!(listed.status(), StatusCode::OK);
    let faults: serde_json::Value = http
        .get(format!("{url}/_admin/faults"))
        .send()
        .await
        .expect("faults")
        .json()
        .await
        .expect("json");
    assert_eq!(faults["latency_ms"], 5);

    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "graceful exit on SIGTERM: {status}");
}

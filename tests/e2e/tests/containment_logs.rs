//! A provider cannot forge the manager's log: what it writes (`host.log`, stdout, stderr)
//! and the messages of its errors reach the log with their control characters escaped, so
//! each is one record under the provider's own target, in the manager's own text format;
//! and however much text a provider sends, each log record, audit record and metrics line
//! is cut to its bound.

use std::sync::{Arc, Mutex};

use e2e::{load, sandbox};
use serde_json::json;
use tracing_subscriber::util::SubscriberInitExt;
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::EgressConfig;

/// A record as the manager's log would print it, forged: a `\n` ends the provider's line
/// and this one claims the egress gate granted a request; `\r` and an escape sequence
/// would hide or restyle the line before it on a terminal.
const FORGED: &str = "2001-01-01T00:00:00.000000Z  WARN wasm_ccm::egress: egress allowed: \
                      GET https://evil.example/\r\x1b[2K\x1b[32mall good";

/// What `tracing` writes on this thread in the manager's text format, without colours.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn capture() -> (Log, impl Sized) {
        let log = Log::default();
        let writer = log.clone();
        let guard = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish()
            .set_default();
        (log, guard)
    }

    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

fn command(text: &str) -> Node {
    Node {
        name: text.to_string(),
        ..Node::default()
    }
}

/// Whether `line` starts as the manager's formatter starts a record: a timestamp of this
/// century, a level and one of the manager's targets.
fn is_record(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let timestamp = words.next().unwrap_or_default();
    let level = words.next().unwrap_or_default();
    let target = words.next().unwrap_or_default();
    timestamp.starts_with("20")
        && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level)
        && target.starts_with("wasm_ccm")
}

#[tokio::test]
async fn a_provider_message_is_one_escaped_record_and_forges_none() {
    let (log, _guard) = Log::capture();
    let provider = load(
        &sandbox(e2e::sandbox_config()),
        guest_builds::HOSTILE,
        EgressConfig::default(),
        None,
    )
    .await
    .expect("hostile guest loads");
    log.take();

    // `log:` writes the message to host.log (info), stdout and stderr.
    let message = format!("done\n{FORGED}");
    provider
        .instance_metadata(&command(&format!("log:{message}")))
        .await
        .expect("log answers");
    let written = log.take();
    eprintln!("{written}");
    let lines: Vec<&str> = written.lines().collect();
    for line in &lines {
        assert!(
            is_record(line),
            "a line that is no record of the manager: {line:?}"
        );
        assert!(
            !line.contains(['\r', '\x1b']),
            "a raw control in a record: {line:?}"
        );
        assert!(line.contains("wasm_ccm::provider"), "{line:?}");
        assert!(!line.starts_with("2001-"), "a forged record: {line:?}");
    }
    // host.log: the whole message in one record, its controls escaped.
    let host_log: Vec<&&str> = lines
        .iter()
        .filter(|line| !line.contains("stream="))
        .collect();
    assert_eq!(host_log.len(), 1, "{written}");
    assert!(
        host_log[0].contains(r"done\n2001-01-01T00:00:00.000000Z  WARN wasm_ccm::egress"),
        "{written}"
    );
    assert!(
        host_log[0].contains(r"\r\u{1b}[2K\u{1b}[32mall good"),
        "{written}"
    );
    // stdout and stderr are split at their newlines: two records each, under the provider's
    // target and with the escape sequences escaped.
    for stream in ["stdout", "stderr"] {
        let records: Vec<&&str> = lines
            .iter()
            .filter(|line| line.contains(&format!("stream=\"{stream}\"")))
            .collect();
        assert_eq!(records.len(), 2, "{stream}: {written}");
        assert!(
            records[1].contains(r"\r\u{1b}[2K\u{1b}[32mall good"),
            "{stream}: {written}"
        );
    }
    assert_eq!(lines.len(), 5, "{written}");

    // A provider's error message: one line wherever it is shown.
    let error = provider
        .instance_metadata(&command(&format!("no-such-command\n{FORGED}")))
        .await
        .unwrap_err();
    let shown = error.to_string();
    assert!(!shown.contains(['\n', '\r', '\x1b']), "{shown:?}");
    assert!(shown.contains(r"no-such-command\n2001-01-01"), "{shown:?}");
}

/// A MiB of text at every place a provider's text reaches the manager's log, its egress
/// audit trail and its metrics: `host.log`, stdout and stderr (all controls, which escaping
/// makes 8 bytes each), an error's message, and a request's method, path, host name and AWS
/// action (in the query and in a form body, under a signing rule, so the gate reads it).
/// Each log record, each audit record and each metrics line is cut to its bound, and no
/// metric label holds the provider's text.
#[tokio::test]
async fn a_mib_of_provider_text_is_cut_in_every_log_record_audit_record_and_metric() {
    const MIB: usize = 1 << 20;
    let (log, _guard) = Log::capture();
    // Granted, signed for EC2, and closed: the gate takes every request, nothing answers.
    let closed = std::net::TcpListener::bind(e2e::loopback()).unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("AWS_ACCESS_KEY_ID"), "AKIDEXAMPLE").unwrap();
    std::fs::write(keys.path().join("AWS_SECRET_ACCESS_KEY"), "secret").unwrap();
    let rule = format!(
        "{url}=aws-sigv4:dir:{},region=us-east-1,services=ec2",
        keys.path().display()
    );
    let egress = EgressConfig {
        allow: vec![url.parse().unwrap()],
        credentials: vec![rule.parse().unwrap()],
        ..EgressConfig::default()
    };
    let (provider, metrics) = e2e::hostile_counted(e2e::sandbox_config(), egress).await;
    log.take();

    let controls = "\x01".repeat(MIB);
    provider
        .instance_metadata(&command(&format!("log:{controls}")))
        .await
        .expect("log answers");
    let error = provider
        .instance_metadata(&command(&format!("no-such-command{}", "e".repeat(MIB))))
        .await
        .unwrap_err();
    assert!(
        error.to_string().len() <= 2048,
        "{}",
        error.to_string().len()
    );

    let mib = "a".repeat(MIB);
    // A URL's path and query take at most 64 KiB (the `http` crate's bound, in the guest).
    let most = "a".repeat(60_000);
    let form = "application/x-www-form-urlencoded";
    for spec in [
        json!({"method": mib, "url": format!("{url}/")}),
        json!({"method": "GET", "url": format!("{url}/{most}")}),
        json!({"method": "GET", "url": format!("{url}/?Action={most}&Version=2016-11-15")}),
        json!({"method": "POST", "url": format!("{url}/"), "headers": [["content-type", form]],
               "body": format!("Action={mib}&Version=2016-11-15")}),
        json!({"method": "GET", "url": format!("http://{}example/", "a.".repeat(MIB / 2))}),
    ] {
        e2e::hostile_report(&provider, &format!("request:{spec}")).await;
    }
    let records = provider.egress().audit().recent();
    assert_eq!(
        records.len(),
        5,
        "every request reached the gate: {records:?}"
    );
    assert!(records.iter().any(|r| r.path.len() == 512), "{records:?}");
    assert!(
        records.iter().any(|r| r.aws.is_some()),
        "an action read: {records:?}"
    );
    for record in &records {
        let json = serde_json::to_string(record).unwrap();
        assert!(json.len() <= 2048, "{} bytes: {json:.300}", json.len());
    }

    let written = log.take();
    let provider_lines = written
        .lines()
        .filter(|line| line.contains("wasm_ccm::provider") && line.contains(r"\u{1}"))
        .count();
    assert_eq!(
        provider_lines, 3,
        "host.log, stdout, stderr: {written:.2000}"
    );
    for line in written.lines() {
        assert!(is_record(line), "{line:.300}");
        assert!(
            line.len() <= 8 * 1024 + 512,
            "{} bytes: {line:.300}",
            line.len()
        );
    }

    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut rendered = String::new();
    prometheus_client::encoding::text::encode(&mut rendered, &registry).unwrap();
    for line in rendered.lines() {
        assert!(line.len() <= 512, "{line:.300}");
        assert!(
            !line.contains("aaaa"),
            "a provider's text as a label: {line:.300}"
        );
    }
}

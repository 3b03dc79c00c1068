//! SigV4 signing in the egress gate, against moto with signature checking on: requests a
//! guest (tests/guests/hostile) makes are signed by the host with keys the guest never sees;
//! moto recomputes every signature, so a request it accepts was signed as sent. Keys from a
//! directory and from STS web identity (refreshed once when AWS refuses them, however many
//! requests were refused); what a guest may not do (set the signing headers, reach a service
//! or region the rule does not name, send a body over the bound) is refused from the guest.
//! What is signed is judged by its API action: credential actions and those that answer a
//! secret or run commands (SSM, Secrets Manager, KMS, EC2's) never, a rule's allow-list,
//! a shadow's reads only whatever the method; an answer carrying AWS keys is withheld; and
//! a web identity's token goes only to an STS endpoint the manager allows.
//!
//! Among them: eight requests refused with `ExpiredToken` together share one refresh (the
//! token file read again, each refused request sent once more: nine audit records and nine
//! rate tokens for up to 17 requests sent); STS `GetSessionToken` (a form POST) and `AssumeRole` (a
//! GET's query) are never signed and are counted under their own action label, while
//! `GetCallerIdentity` goes out; a body changed after signing is refused by moto. The same
//! signing through `provider call` is tested in `cli.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use e2e::moto::{Front, Moto, REGION, ROLE_ARN, Seen, form_body};
use e2e::{load, sandbox};
use serde_json::{Value, json};
use wasm_ccm_host::egress::{
    AwsKeys, CredentialRule, EgressConfig, EgressGate, HostPattern, MAX_SIGNED_BODY, MethodPolicy,
    SigV4, WebIdentityConfig,
};
use wasm_ccm_host::metrics::{EgressSignedLabels, Metrics};
use wasm_ccm_host::provider::{Provider, ProviderSource};
use wasm_ccm_host::rate::RateBudget;
use wasm_ccm_host::source::Artifact;

const DESCRIBE_VPCS: &str = "Action=DescribeVpcs&Version=2016-11-15";
const DESCRIBE_LOAD_BALANCERS: &str = "Action=DescribeLoadBalancers&Version=2015-12-01";

async fn hostile(egress: EgressConfig) -> Provider {
    load(
        &sandbox(e2e::sandbox_config()),
        guest_builds::HOSTILE,
        egress,
        None,
    )
    .await
    .expect("hostile guest loads")
}

/// The report of hostile's `request:` command for `spec`.
async fn request(provider: &Provider, spec: &Value) -> Value {
    e2e::hostile_report(provider, &format!("request:{spec}")).await
}

/// A Query API form POST to `url`.
fn form(url: &str, body: &str) -> Value {
    json!({
        "method": "POST",
        "url": format!("{url}/"),
        "headers": [["content-type", "application/x-www-form-urlencoded; charset=utf-8"]],
        "body": body,
    })
}

/// A directory holding `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, as a mounted Secret.
fn keys_dir(access_key_id: &str, secret_access_key: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AWS_ACCESS_KEY_ID"), access_key_id).unwrap();
    std::fs::write(dir.path().join("AWS_SECRET_ACCESS_KEY"), secret_access_key).unwrap();
    dir
}

/// Egress reaching `url` only, signed by the `--credential` rule `rule` (after `URL=`).
fn flag_egress(url: &str, rule: &str) -> EgressConfig {
    EgressConfig {
        allow: vec![url.parse().unwrap()],
        credentials: vec![format!("{url}={rule}").parse().unwrap()],
        ..EgressConfig::default()
    }
}

/// Egress reaching `url` only, signed for EC2 and ELBv2 with `keys`.
fn egress(url: &str, keys: AwsKeys) -> EgressConfig {
    let services = vec!["ec2".into(), "elasticloadbalancing".into()];
    let sigv4 = SigV4::new(Some(REGION.into()), services, keys).unwrap();
    let target: HostPattern = url.parse().unwrap();
    EgressConfig {
        allow: vec![target.clone()],
        credentials: vec![CredentialRule::aws_sigv4(target, sigv4).unwrap()],
        ..EgressConfig::default()
    }
}

/// A front that forwards everything to moto as it came.
async fn passing(moto: &Moto) -> Front {
    moto.front(Arc::new(|_| None)).await
}

/// The body of the answer the guest got.
fn body(report: &Value) -> &str {
    report["body"]
        .as_str()
        .unwrap_or_else(|| panic!("no answer: {report}"))
}

fn status(report: &Value) -> u64 {
    report["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("no answer: {report}"))
}

#[tokio::test]
async fn signed_ec2_and_elbv2_queries_pass_motos_signature_check_and_the_guest_sees_no_key() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let rule = format!(
        "aws-sigv4:dir:{},region={REGION},services=ec2+elasticloadbalancing",
        dir.path().display()
    );
    let provider = hostile(flag_egress(front.url(), &rule)).await;

    let vpcs = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&vpcs), 200, "{vpcs}\n{}", moto.log());
    assert!(body(&vpcs).contains("<vpcSet>"), "{vpcs}");
    let balancers = request(&provider, &form(front.url(), DESCRIBE_LOAD_BALANCERS)).await;
    assert_eq!(status(&balancers), 200, "{balancers}");
    assert!(
        body(&balancers).contains("DescribeLoadBalancersResponse"),
        "{balancers}"
    );

    let seen = front.seen();
    assert_eq!(seen.len(), 2);
    let authorization = seen[0].headers["authorization"].to_str().unwrap();
    assert!(
        authorization.contains(&format!("/{REGION}/ec2/aws4_request")),
        "{authorization}"
    );
    assert!(
        seen[1].headers["authorization"]
            .to_str()
            .unwrap()
            .contains(&format!("/{REGION}/elasticloadbalancing/aws4_request"))
    );
    assert!(authorization.contains("SignedHeaders=content-type;host;x-amz-date,"));
    // The guest got moto's answers; neither the key, the secret nor the signature is in
    // them, nor in the audit trail or the gate's Debug output.
    let signature = authorization.split("Signature=").nth(1).unwrap();
    let everything = format!(
        "{vpcs}{balancers}{:?}{:?}",
        provider.egress().audit().recent(),
        provider.egress()
    );
    for secret in [moto.secret_access_key.as_str(), signature] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
    assert!(!vpcs.to_string().contains(&moto.access_key_id));
}

#[tokio::test]
async fn moto_refuses_a_body_changed_after_signing_so_the_signed_body_is_the_one_sent() {
    let moto = Moto::start().await;
    let tamper = Arc::new(AtomicBool::new(false));
    let tampering = tamper.clone();
    let front = moto
        .front(Arc::new(move |seen: &mut Seen| {
            if tampering.load(Ordering::SeqCst) {
                seen.body = String::from_utf8_lossy(&seen.body)
                    .replace("vpc-", "vpc-0")
                    .into_bytes()
                    .into();
            }
            None
        }))
        .await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let provider = hostile(egress(front.url(), AwsKeys::from_dir(dir.path()))).await;
    let filtered = form_body(&[
        ("Action", "DescribeVpcs"),
        ("Version", "2016-11-15"),
        ("Filter.1.Name", "vpc-id"),
        ("Filter.1.Value.1", "vpc-12345678"),
    ]);
    let sent = request(&provider, &form(front.url(), &filtered)).await;
    assert_eq!(status(&sent), 200, "{sent}");
    assert!(body(&sent).contains("<vpcSet/>"), "{sent}");

    tamper.store(true, Ordering::SeqCst);
    let tampered = request(&provider, &form(front.url(), &filtered)).await;
    assert_eq!(status(&tampered), 401, "{tampered}");
    assert!(body(&tampered).contains("AuthFailure"), "{tampered}");
}

#[tokio::test]
async fn a_wrong_secret_is_refused_by_moto_and_its_answer_reaches_the_guest_plainly() {
    let moto = Moto::start().await;
    let dir = keys_dir(&moto.access_key_id, "not-the-secret");
    let provider = hostile(egress(moto.url(), AwsKeys::from_dir(dir.path()))).await;
    let ec2 = request(&provider, &form(moto.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&ec2), 401, "{ec2}");
    assert!(body(&ec2).contains("<Code>AuthFailure</Code>"));
    let elb = request(&provider, &form(moto.url(), DESCRIBE_LOAD_BALANCERS)).await;
    assert_eq!(status(&elb), 403, "{elb}");
    assert!(body(&elb).contains("<Code>SignatureDoesNotMatch</Code>"));
    // Static keys are not refreshed: each request went out once, audited with its answer.
    let statuses: Vec<Option<u16>> = provider
        .egress()
        .audit()
        .recent()
        .iter()
        .map(|record| record.status)
        .collect();
    assert_eq!(statuses, [Some(401), Some(403)]);
}

/// A web identity whose token is in `token_file`, exchanged at `sts`.
fn web_identity(sts: &Front, token_file: &std::path::Path) -> AwsKeys {
    let config = WebIdentityConfig::new(
        ROLE_ARN.into(),
        token_file.into(),
        "wasm-ccm-test".into(),
        sts.url().into(),
    )
    .unwrap();
    AwsKeys::web_identity(config)
}

/// `config` allowing the STS front `sts` (`--sts-endpoint-allow`): a loopback endpoint over
/// plain HTTP, which no web identity may send its token to otherwise.
fn allowing(mut config: EgressConfig, sts: &Front) -> EgressConfig {
    config.sts_endpoints = vec![sts.url().parse().unwrap()];
    config
}

/// The exchanges an STS front saw, by the web identity token each carried.
fn exchanged_tokens(sts: &Front) -> Vec<String> {
    sts.seen()
        .iter()
        .map(|seen| {
            let form = String::from_utf8_lossy(&seen.body).to_string();
            assert!(form.contains("Action=AssumeRoleWithWebIdentity"), "{form}");
            form.split('&')
                .find_map(|pair| pair.strip_prefix("WebIdentityToken="))
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn web_identity_keys_from_motos_sts_sign_requests_with_their_session_token() {
    let moto = Moto::start().await;
    let sts = moto.unsigned_sts().await;
    let front = passing(&moto).await;
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "token-one\n").unwrap();
    let config = egress(front.url(), web_identity(&sts, token.path()));
    let provider = hostile(allowing(config, &sts)).await;
    for body in [DESCRIBE_VPCS, DESCRIBE_LOAD_BALANCERS] {
        let answer = request(&provider, &form(front.url(), body)).await;
        assert_eq!(status(&answer), 200, "{answer}\n{}", moto.log());
    }
    assert_eq!(exchanged_tokens(&sts), ["token-one"], "one exchange");
    for seen in front.seen() {
        assert!(
            seen.access_key_id().unwrap().starts_with("ASIA"),
            "{seen:?}"
        );
        assert!(seen.headers.contains_key("x-amz-security-token"));
        let authorization = seen.headers["authorization"].to_str().unwrap();
        assert!(
            authorization.contains(";x-amz-security-token,"),
            "{authorization}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_keys_are_refreshed_once_for_all_requests_refused_and_each_is_sent_again_once() {
    let moto = Moto::start().await;
    let sts = moto.unsigned_sts().await;
    // Once told to, the front answers for AWS that the first keys it saw have expired.
    let expire = Arc::new(AtomicBool::new(false));
    let first_key = Arc::new(std::sync::Mutex::new(None::<String>));
    let (expiring, first) = (expire.clone(), first_key.clone());
    let front = moto
        .front(Arc::new(move |seen: &mut Seen| {
            let key = seen.access_key_id().map(String::from);
            let first = first.lock().unwrap().get_or_insert(key.clone()?).clone();
            (expiring.load(Ordering::SeqCst) && key == Some(first)).then(|| {
                (400, "<ErrorResponse><Error><Type>Sender</Type><Code>ExpiredToken</Code><Message>The security token included in the request is expired</Message></Error></ErrorResponse>".to_string())
            })
        }))
        .await;
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "token-one").unwrap();
    let mut config = allowing(egress(front.url(), web_identity(&sts, token.path())), &sts);
    // Nine requests take the nine tokens of the budget; sending again takes none.
    config.budget = RateBudget {
        per_second: 0.001,
        burst: 9,
    };
    let provider = Arc::new(hostile(config).await);
    let ok = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&ok), 200, "{ok}");

    // The kubelet rotated the token; then AWS refuses the keys of the first.
    std::fs::write(token.path(), "token-two").unwrap();
    expire.store(true, Ordering::SeqCst);
    let concurrent: Vec<_> = (0..8)
        .map(|_| {
            let (provider, url) = (provider.clone(), front.url().to_string());
            tokio::spawn(async move { request(&provider, &form(&url, DESCRIBE_VPCS)).await })
        })
        .collect();
    for answer in concurrent {
        let answer = answer.await.unwrap();
        assert_eq!(status(&answer), 200, "{answer}\n{}", moto.log());
    }
    assert_eq!(
        exchanged_tokens(&sts),
        ["token-one", "token-two"],
        "one refresh for eight refused requests, with the token file read again"
    );
    let keys: Vec<String> = front
        .seen()
        .iter()
        .map(|seen| seen.access_key_id().unwrap().to_string())
        .collect();
    let first = first_key.lock().unwrap().clone().unwrap();
    // The first request with the first keys, and of the eight those that went out before a
    // refusal had refreshed them: all eight, unless the machine was slow to start one.
    let with_first = keys.iter().filter(|key| **key == first).count();
    assert!(with_first >= 2, "{keys:?}");
    assert_eq!(
        keys.len(),
        with_first + 8,
        "each refused request was sent once more: {keys:?}"
    );
    let records = provider.egress().audit().recent();
    assert_eq!(records.len(), 9, "one audit record per request");
    assert!(records.iter().all(|record| record.status == Some(200)));
    let limited = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&limited), 429, "{limited}");
}

#[tokio::test]
async fn a_guest_cannot_set_the_signing_headers() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let provider = hostile(egress(front.url(), AwsKeys::from_dir(dir.path()))).await;
    for header in [
        "authorization",
        "X-Amz-Date",
        "x-amz-security-token",
        "x-amz-content-sha256",
    ] {
        let mut spec = form(front.url(), DESCRIBE_VPCS);
        spec["headers"] = json!([[header, "chosen-by-the-guest"]]);
        let report = request(&provider, &spec).await;
        assert_eq!(report["kind"], "forbidden-header", "{header}: {report}");
        let raw = report["raw"].as_array().unwrap();
        assert_eq!(raw.len(), 3);
        for attempt in raw {
            assert_eq!(attempt["result"], "forbidden", "{attempt}");
        }
    }
    assert!(front.seen().is_empty(), "nothing went out");
}

#[tokio::test]
async fn a_service_or_region_the_rule_does_not_name_is_refused_by_name() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let aws: HostPattern = "https://*.amazonaws.com".parse().unwrap();
    let ec2_only = SigV4::new(
        Some(REGION.into()),
        vec!["ec2".into()],
        AwsKeys::from_dir(dir.path()),
    )
    .unwrap();
    let config = EgressConfig {
        allow: vec![front.url().parse().unwrap(), aws.clone()],
        credentials: vec![
            CredentialRule::aws_sigv4(front.url().parse().unwrap(), ec2_only.clone()).unwrap(),
            CredentialRule::aws_sigv4(aws, ec2_only).unwrap(),
        ],
        ..EgressConfig::default()
    };
    let provider = hostile(config).await;
    let granted = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&granted), 200, "{granted}");
    for (url, body, reason) in [
        (
            front.url().to_string(),
            DESCRIBE_LOAD_BALANCERS,
            format!(
                "not signed: service elasticloadbalancing (from the request's Version) is not granted for {} (granted: ec2)",
                front.url()
            ),
        ),
        (
            front.url().to_string(),
            "Action=GetCallerIdentity&Version=2011-06-15",
            "not signed: service sts (from the request's Version) is not granted".to_string(),
        ),
        (
            "https://ec2.eu-west-1.amazonaws.com".to_string(),
            DESCRIBE_VPCS,
            "not signed: region eu-west-1 of ec2.eu-west-1.amazonaws.com is not granted: the rule signs for us-east-1 only".to_string(),
        ),
        (
            "https://elasticloadbalancing.us-east-1.amazonaws.com".to_string(),
            DESCRIBE_LOAD_BALANCERS,
            "not signed: service elasticloadbalancing of elasticloadbalancing.us-east-1.amazonaws.com is not granted (granted: ec2)".to_string(),
        ),
    ] {
        let refused = request(&provider, &form(&url, body)).await;
        assert_eq!(refused["kind"], "denied", "{url} {body}: {refused}");
        let record = provider.egress().audit().recent().pop().unwrap();
        let denied = record.denied.unwrap();
        assert!(denied.starts_with(&reason), "{denied}");
    }
    assert_eq!(front.seen().len(), 1, "only the granted request went out");
}

#[tokio::test]
async fn a_body_over_the_signing_bound_is_refused_and_the_guest_carries_on() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let provider = hostile(egress(front.url(), AwsKeys::from_dir(dir.path()))).await;
    let spec = json!({
        "method": "POST",
        "url": format!("{}/", front.url()),
        "body_bytes": MAX_SIGNED_BODY + 1,
    });
    let refused = request(&provider, &spec).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    let record = provider.egress().audit().recent().pop().unwrap();
    assert_eq!(
        record.denied.as_deref(),
        Some(
            "the request body is over the 1048576-byte bound of signed requests (it is buffered to be signed)"
        )
    );
    assert!(front.seen().is_empty());
    let next = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&next), 200, "{next}");
}

/// The last audit record's denial, and the service and action it names.
fn last_denial(provider: &Provider) -> (String, Option<(String, Option<String>)>) {
    let record = provider.egress().audit().recent().pop().unwrap();
    let aws = record.aws.map(|aws| (aws.service, aws.action));
    (record.denied.unwrap_or_default(), aws)
}

fn call(service: &str, action: &str) -> Option<(String, Option<String>)> {
    Some((service.to_string(), Some(action.to_string())))
}

#[tokio::test]
async fn an_action_that_issues_credentials_is_never_signed_whatever_the_rule() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let rule = format!(
        "aws-sigv4:dir:{},region={REGION},services=ec2+sts",
        dir.path().display()
    );
    let metrics = Arc::new(Metrics::default());
    let source = ProviderSource {
        artifact: Artifact::from_bytes(
            guest_builds::HOSTILE,
            guest_builds::read(guest_builds::HOSTILE).into(),
        ),
        cloud_config: None,
    };
    let gate = EgressGate::new(flag_egress(front.url(), &rule), metrics.clone());
    let provider = Provider::load(
        &sandbox(e2e::sandbox_config()),
        gate,
        source,
        metrics.clone(),
    )
    .await
    .expect("hostile guest loads")
    .with_checks(std::sync::Arc::new(
        wasm_ccm_host::answers::AnswerChecks::unenforced(),
    ));
    let caller = request(
        &provider,
        &form(front.url(), "Action=GetCallerIdentity&Version=2011-06-15"),
    )
    .await;
    assert_eq!(status(&caller), 200, "{caller}\n{}", moto.log());
    let session = "Action=GetSessionToken&Version=2011-06-15&DurationSeconds=900";
    let refused = request(&provider, &form(front.url(), session)).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    let (denied, aws) = last_denial(&provider);
    assert!(
        denied.starts_with("not signed: sts GetSessionToken issues or manages credentials, which the gate never signs, whatever the rule"),
        "{denied}"
    );
    assert_eq!(aws, call("sts", "GetSessionToken"));
    // The same action in a GET's query string.
    let get = json!({
        "method": "GET",
        "url": format!("{}/?Action=AssumeRole&Version=2011-06-15&RoleArn={ROLE_ARN}&RoleSessionName=x", front.url()),
    });
    let refused = request(&provider, &get).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    assert_eq!(last_denial(&provider).1, call("sts", "AssumeRole"));
    assert_eq!(front.seen().len(), 1, "only GetCallerIdentity went out");
    // Counted under the service and action: a credential action is a label of its own.
    let record = provider.egress().audit().recent().pop().unwrap();
    let counted = |action: &str, outcome: &str| {
        metrics
            .egress_signed_requests
            .get_or_create(&EgressSignedLabels {
                provider: record.provider.clone(),
                version: record.version.clone(),
                grant: front.url().to_string(),
                service: "sts".into(),
                action: action.into(),
                outcome: outcome.into(),
            })
            .get()
    };
    assert_eq!(counted("GetSessionToken", "denied"), 1);
    assert_eq!(counted("AssumeRole", "denied"), 1);
    assert_eq!(counted("other", "2xx"), 1, "GetCallerIdentity, not listed");
}

/// A JSON-protocol call (SSM, Secrets Manager, KMS) of `target` (`AmazonSSM.SendCommand`)
/// to `url`.
fn json_call(url: &str, target: &str, body: Value) -> Value {
    json!({
        "method": "POST",
        "url": format!("{url}/"),
        "headers": [
            ["content-type", "application/x-amz-json-1.1"],
            ["x-amz-target", target],
        ],
        "body": body.to_string(),
    })
}

#[tokio::test]
async fn an_action_that_answers_a_secret_or_runs_commands_is_never_signed_whatever_the_rule() {
    let moto = Moto::start().await;
    // A user AWS would let do all of it: only the gate stands in the way.
    let everything = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ssm:*","secretsmanager:*","kms:*","ec2:*"],"Resource":"*"}]}"#;
    let (key_id, secret) = moto.user("operator", everything).await;
    let dir = keys_dir(&key_id, &secret);
    // One front (and rule) a service: a JSON-protocol call names no `Version` to tell its
    // service by, so a rule for a custom endpoint names one.
    let mut fronts = Vec::new();
    for service in ["ssm", "secretsmanager", "kms", "ec2"] {
        fronts.push((service, passing(&moto).await));
    }
    let egress = EgressConfig {
        allow: fronts
            .iter()
            .map(|(_, f)| f.url().parse().unwrap())
            .collect(),
        credentials: fronts
            .iter()
            .map(|(service, front)| {
                let rule = format!(
                    "{}=aws-sigv4:dir:{},region={REGION},services={service}",
                    front.url(),
                    dir.path().display()
                );
                rule.parse().unwrap()
            })
            .collect(),
        ..EgressConfig::default()
    };
    let provider = hostile(egress).await;
    let url = |service: &str| fronts.iter().find(|(s, _)| *s == service).unwrap().1.url();
    for (service, refused, allowed) in [
        (
            "ssm",
            vec![
                json_call(
                    url("ssm"),
                    "AmazonSSM.SendCommand",
                    json!({"DocumentName": "AWS-RunShellScript", "InstanceIds": ["i-1"], "Parameters": {"commands": ["id"]}}),
                ),
                json_call(
                    url("ssm"),
                    "AmazonSSM.GetParameter",
                    json!({"Name": "/db/password", "WithDecryption": true}),
                ),
                json_call(
                    url("ssm"),
                    "AmazonSSM.StartSession",
                    json!({"Target": "i-1"}),
                ),
            ],
            json_call(url("ssm"), "AmazonSSM.DescribeParameters", json!({})),
        ),
        (
            "secretsmanager",
            vec![
                json_call(
                    url("secretsmanager"),
                    "secretsmanager.GetSecretValue",
                    json!({"SecretId": "db"}),
                ),
                json_call(
                    url("secretsmanager"),
                    "secretsmanager.BatchGetSecretValue",
                    json!({"SecretIdList": ["db"]}),
                ),
            ],
            json_call(
                url("secretsmanager"),
                "secretsmanager.ListSecrets",
                json!({}),
            ),
        ),
        (
            "kms",
            vec![
                json_call(
                    url("kms"),
                    "TrentService.Decrypt",
                    json!({"CiphertextBlob": "AAAA"}),
                ),
                json_call(
                    url("kms"),
                    "TrentService.GenerateDataKey",
                    json!({"KeyId": "alias/x", "KeySpec": "AES_256"}),
                ),
            ],
            json_call(url("kms"), "TrentService.ListKeys", json!({})),
        ),
        (
            "ec2",
            vec![
                form(
                    url("ec2"),
                    "Action=GetPasswordData&Version=2016-11-15&InstanceId=i-1",
                ),
                form(
                    url("ec2"),
                    "Action=GetConsoleOutput&Version=2016-11-15&InstanceId=i-1",
                ),
            ],
            form(url("ec2"), DESCRIBE_VPCS),
        ),
    ] {
        for spec in &refused {
            // The action as the request names it: its `X-Amz-Target`'s last part, or the
            // form's `Action`.
            let target = spec["headers"][1][1]
                .as_str()
                .map(|t| t.rsplit('.').next().unwrap());
            let form = spec["body"].as_str().and_then(|body| {
                body.strip_prefix("Action=")
                    .and_then(|rest| rest.split('&').next())
            });
            let action = target.or(form).unwrap();
            let answer = request(&provider, spec).await;
            assert_eq!(answer["kind"], "denied", "{service} {action}: {answer}");
            let (denied, aws) = last_denial(&provider);
            assert_eq!(
                denied,
                format!(
                    "not signed: {service} {action} answers a secret or runs commands on instances, which the gate never signs, whatever the rule"
                )
            );
            assert_eq!(aws, call(service, action));
        }
        let answer = request(&provider, &allowed).await;
        assert_eq!(status(&answer), 200, "{service}: {answer}\n{}", moto.log());
    }
    for (service, front) in &fronts {
        assert_eq!(
            front.seen().len(),
            1,
            "{service}: only the call that reveals nothing went out"
        );
    }
}

#[tokio::test]
async fn a_rule_listing_actions_signs_those_and_refuses_others_by_name() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let rule = format!(
        "aws-sigv4:dir:{},region={REGION},services=ec2,actions=DescribeVpcs+DescribeInstances",
        dir.path().display()
    );
    let provider = hostile(flag_egress(front.url(), &rule)).await;
    let vpcs = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&vpcs), 200, "{vpcs}");
    let tags = "Action=CreateTags&Version=2016-11-15&ResourceId.1=vpc-1&Tag.1.Key=k&Tag.1.Value=v";
    let refused = request(&provider, &form(front.url(), tags)).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    let (denied, aws) = last_denial(&provider);
    assert_eq!(
        denied,
        format!(
            "not signed: ec2 CreateTags is not among the actions the aws-sigv4 rule for {} signs (DescribeVpcs, DescribeInstances)",
            front.url()
        )
    );
    assert_eq!(aws, call("ec2", "CreateTags"));
    assert_eq!(front.seen().len(), 1);
}

#[tokio::test]
async fn an_answer_carrying_aws_keys_is_withheld_from_the_provider() {
    let moto = Moto::start().await;
    // A permitted action whose answer (here a stand-in's) carries keys, as GetSessionToken's
    // or CreateAccessKey's would.
    let front = moto
        .front(Arc::new(|seen: &mut Seen| {
            let body = String::from_utf8_lossy(&seen.body).to_string();
            body.contains("Action=DescribeVpcs").then(|| {
                (200, "<DescribeVpcsResponse><Credentials><AccessKeyId>ASIALEAKED</AccessKeyId><SecretAccessKey>the-leaked-secret</SecretAccessKey><SessionToken>the-leaked-token</SessionToken></Credentials></DescribeVpcsResponse>".to_string())
            })
        }))
        .await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let provider = hostile(egress(front.url(), AwsKeys::from_dir(dir.path()))).await;
    let answer = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&answer), 502, "{answer}");
    let text = body(&answer);
    assert!(text.contains("<Code>CredentialsWithheld</Code>"), "{text}");
    assert!(
        text.contains(
            "the 200 answer to ec2 DescribeVpcs carries AWS credentials (SecretAccessKey)"
        ),
        "{text}"
    );
    for leaked in ["the-leaked-secret", "the-leaked-token"] {
        assert!(!answer.to_string().contains(leaked), "{answer}");
    }
    let record = provider.egress().audit().recent().pop().unwrap();
    assert_eq!(record.status, Some(502));
    assert!(record.denied.unwrap().starts_with("withheld: "));
    // Other answers pass as they came.
    let elb = request(&provider, &form(front.url(), DESCRIBE_LOAD_BALANCERS)).await;
    assert_eq!(status(&elb), 200, "{elb}");
}

#[tokio::test]
async fn a_shadow_signs_reads_whatever_the_method_and_no_write_even_as_a_get() {
    let moto = Moto::start().await;
    let front = passing(&moto).await;
    let dir = keys_dir(&moto.access_key_id, &moto.secret_access_key);
    let mut config = egress(front.url(), AwsKeys::from_dir(dir.path()));
    config.methods = MethodPolicy::SafeOnly {
        methods: Vec::new(),
        actions: Vec::new(),
    };
    let provider = hostile(config).await;
    // A form POST reading goes out: the action, not the method, says it reads.
    let describe = "Action=DescribeInstances&Version=2016-11-15";
    let read = request(&provider, &form(front.url(), describe)).await;
    assert_eq!(status(&read), 200, "{read}\n{}", moto.log());
    let tags = "Action=CreateTags&Version=2016-11-15&ResourceId.1=vpc-1&Tag.1.Key=k&Tag.1.Value=v";
    let refused = request(&provider, &form(front.url(), tags)).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    let (denied, aws) = last_denial(&provider);
    assert!(
        denied.starts_with("not signed: ec2 CreateTags is not a read: a shadow version may only sign Describe*, Get* and List* actions"),
        "{denied}"
    );
    assert_eq!(aws, call("ec2", "CreateTags"));
    let terminate = json!({
        "method": "GET",
        "url": format!("{}/?Action=TerminateInstances&Version=2016-11-15&InstanceId.1=i-1", front.url()),
    });
    let refused = request(&provider, &terminate).await;
    assert_eq!(refused["kind"], "denied", "{refused}");
    assert_eq!(last_denial(&provider).1, call("ec2", "TerminateInstances"));
    let seen: Vec<String> = front
        .seen()
        .iter()
        .map(|seen| String::from_utf8_lossy(&seen.body).to_string())
        .collect();
    assert_eq!(seen, [describe], "only the read went out");
}

#[tokio::test]
async fn a_web_identity_sends_its_token_only_to_an_sts_endpoint_the_manager_allows() {
    let moto = Moto::start().await;
    let sts = moto.unsigned_sts().await;
    let front = passing(&moto).await;
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "the-projected-token").unwrap();
    // A loopback STS over HTTP, not listed: refused at start, and never sent the token.
    let config = egress(front.url(), web_identity(&sts, token.path()));
    let refused = config.check_sts_endpoints().unwrap_err();
    assert!(
        refused.problem.starts_with(&format!(
            "STS endpoint {} is not an AWS STS endpoint",
            sts.url()
        )),
        "{refused}"
    );
    let provider = hostile(config).await;
    let answer = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(answer["kind"], "denied", "{answer}");
    let (denied, _) = last_denial(&provider);
    assert!(
        denied.contains("the endpoint is not one the manager sends its web identity token to"),
        "{denied}"
    );
    assert!(sts.seen().is_empty(), "the token went nowhere");
    assert!(front.seen().is_empty());

    // Listed by --sts-endpoint-allow: the token goes there, once, and nowhere else.
    let config = allowing(egress(front.url(), web_identity(&sts, token.path())), &sts);
    assert!(config.check_sts_endpoints().is_ok());
    let provider = hostile(config).await;
    let answer = request(&provider, &form(front.url(), DESCRIBE_VPCS)).await;
    assert_eq!(status(&answer), 200, "{answer}\n{}", moto.log());
    assert_eq!(exchanged_tokens(&sts), ["the-projected-token"]);
    for seen in front.seen() {
        assert!(!String::from_utf8_lossy(&seen.body).contains("the-projected-token"));
    }
}

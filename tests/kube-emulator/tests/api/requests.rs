//! Request edge cases, answered as a real kube-apiserver v1.32 answers
//! them: JSON patches that cannot be applied, unparsable resourceVersions,
//! `limit` and `continue`, write options, repeated keys under strict
//! decoding, and the protobuf bodies of typed clients. Sent over plain
//! HTTP, since a typed client would not send most of them.

use serde_json::json;

use crate::harness::{Cluster, get, send, start};

const MAPS: &str = "/api/v1/namespaces/default/configmaps";

async fn create_map(cluster: &Cluster, name: &str) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let answer = send(
        cluster,
        reqwest::Method::POST,
        MAPS,
        "application/json",
        &body.to_string(),
    )
    .await;
    assert_eq!(answer.code, 201, "{}", answer.body);
}

#[tokio::test]
async fn a_json_patch_that_cannot_be_applied_is_a_422_without_its_cause() {
    // Upstream applies JSON patches with evanphx/json-patch and answers any
    // failure to apply (an unknown `op`, a missing `path`, a failing `test`)
    // with NewGenericServerResponse(422): reason Invalid, a fixed message,
    // empty details. Only a body that is not a list of objects is a 400.
    let cluster = start().await;
    create_map(&cluster, "a").await;
    let path = format!("{MAPS}/a");
    for ops in [
        r#"[{"op": "bogus", "path": "/data", "value": {}}]"#,
        r#"[{"op": "add", "value": {}}]"#,
        r#"[{"op": "test", "path": "/metadata/name", "value": "b"}]"#,
    ] {
        let answer = send(
            &cluster,
            reqwest::Method::PATCH,
            &path,
            "application/json-patch+json",
            ops,
        )
        .await;
        assert_eq!(answer.code, 422, "{ops}");
        assert_eq!(answer.body["reason"], "Invalid");
        assert_eq!(
            answer.body["message"],
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(answer.body["details"], json!({}));
    }
    let answer = send(
        &cluster,
        reqwest::Method::PATCH,
        &path,
        "application/json-patch+json",
        r#"{"op": "add"}"#,
    )
    .await;
    assert_eq!(
        (answer.code, &answer.body["reason"]),
        (400, &json!("BadRequest"))
    );
}

#[tokio::test]
async fn an_unparsable_resource_version_is_a_500_from_the_watch_cache_and_a_400_from_etcd() {
    // The watch cache returns ParseResourceVersion's InvalidError as a
    // plain error, which the handler answers with 500 and no reason; lists
    // it hands to etcd (paginated, exact, continued) get the etcd store's
    // 400 "invalid resource version".
    let cluster = start().await;
    create_map(&cluster, "a").await;
    let invalid = r#"resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax"#;
    for path in [
        format!("{MAPS}?resourceVersion=abc"),
        format!("{MAPS}?watch=true&resourceVersion=abc"),
        format!("{MAPS}/a?resourceVersion=abc"),
    ] {
        let answer = get(&cluster, &path).await;
        assert_eq!(answer.code, 500, "{path}");
        assert_eq!(answer.body["message"], invalid, "{path}");
        assert!(answer.body.get("reason").is_none(), "{}", answer.body);
    }
    let answer = get(&cluster, &format!("{MAPS}?resourceVersion=abc&limit=1")).await;
    assert_eq!(
        (answer.code, &answer.body["reason"]),
        (400, &json!("BadRequest"))
    );
    assert_eq!(
        answer.body["message"],
        format!("invalid resource version: {invalid}")
    );
    let too_big = get(
        &cluster,
        &format!("{MAPS}?resourceVersion=99999999999999999999"),
    )
    .await;
    assert_eq!(too_big.code, 500);
    assert!(
        too_big.body["message"]
            .as_str()
            .unwrap()
            .ends_with(r#"parsing "99999999999999999999": value out of range"#),
        "{}",
        too_big.body
    );
}

#[tokio::test]
async fn a_negative_limit_lists_everything_and_continue_takes_no_resource_version() {
    let cluster = start().await;
    for name in ["a", "b", "c"] {
        create_map(&cluster, name).await;
    }
    // limit is an int64 that pages only when positive.
    let all = get(&cluster, &format!("{MAPS}?limit=-1")).await;
    assert_eq!(all.code, 200);
    assert_eq!(all.body["items"].as_array().unwrap().len(), 3);
    assert!(all.body["metadata"].get("continue").is_none());

    let first = get(&cluster, &format!("{MAPS}?limit=1")).await;
    let token = first.body["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_owned();
    let rv = first.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    // The etcd store refuses the combination with a 400, not a 422 on
    // ListOptions; "0" is no resourceVersion there.
    let answer = get(
        &cluster,
        &format!("{MAPS}?limit=1&continue={token}&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(
        (answer.code, &answer.body["reason"]),
        (400, &json!("BadRequest"))
    );
    assert_eq!(
        answer.body["message"],
        "specifying resource version is not allowed when using continue"
    );
    let answer = get(
        &cluster,
        &format!("{MAPS}?limit=1&continue={token}&resourceVersion=0"),
    )
    .await;
    assert_eq!(answer.code, 200);
    assert_eq!(answer.body["items"][0]["metadata"]["name"], "b");
}

/// client-go's reflector (and kube-runtime's watcher with `any_semantic`) lists with
/// `resourceVersion=0` and a limit: the watch cache answers the whole list at once, so
/// 5,000 nodes are one request, not ten pages read from etcd.
#[tokio::test]
async fn a_list_at_resource_version_0_is_whole_whatever_the_limit() {
    let cluster = start().await;
    for name in ["a", "b", "c"] {
        create_map(&cluster, name).await;
    }
    let cached = get(&cluster, &format!("{MAPS}?limit=1&resourceVersion=0")).await;
    assert_eq!(cached.code, 200);
    assert_eq!(cached.body["items"].as_array().unwrap().len(), 3);
    assert!(cached.body["metadata"].get("continue").is_none());
    let cached = get(
        &cluster,
        &format!("{MAPS}?limit=1&resourceVersion=0&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(cached.body["items"].as_array().unwrap().len(), 3);
    // Without it the list is read from etcd, a page at a time.
    let paged = get(&cluster, &format!("{MAPS}?limit=1")).await;
    assert_eq!(paged.body["items"].as_array().unwrap().len(), 1);
    assert!(paged.body["metadata"]["continue"].is_string());
}

#[tokio::test]
async fn write_options_are_validated_together_as_a_422_on_their_kind() {
    // ValidateCreateOptions, ValidateUpdateOptions, ValidatePatchOptions and
    // ValidateDeleteOptions: one Invalid status on `<Kind>Options` in
    // meta.k8s.io, with no name, listing every bad option.
    let cluster = start().await;
    create_map(&cluster, "a").await;
    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}).to_string();
    let created = send(
        &cluster,
        reqwest::Method::POST,
        &format!("{MAPS}?fieldValidation=Bogus"),
        "application/json",
        &body,
    )
    .await;
    assert_eq!(created.code, 422);
    assert_eq!(
        created.body["message"],
        r#"CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Bogus": supported values: "Ignore", "Strict", "Warn""#
    );
    assert_eq!(
        created.body["details"],
        json!({"group": "meta.k8s.io", "kind": "CreateOptions", "causes": [{
            "reason": "FieldValueNotSupported",
            "message": r#"Unsupported value: "Bogus": supported values: "Ignore", "Strict", "Warn""#,
            "field": "fieldValidation"
        }]})
    );

    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}).to_string();
    let updated = send(
        &cluster,
        reqwest::Method::PUT,
        &format!("{MAPS}/a?fieldValidation=Bogus"),
        "application/json",
        &body,
    )
    .await;
    assert_eq!(updated.code, 422);
    assert_eq!(updated.body["details"]["kind"], "UpdateOptions");

    let patched = send(
        &cluster,
        reqwest::Method::PATCH,
        &format!("{MAPS}/a?force=true&dryRun=Bogus"),
        "application/merge-patch+json",
        "{}",
    )
    .await;
    assert_eq!(patched.code, 422);
    assert_eq!(
        patched.body["message"],
        r#"PatchOptions.meta.k8s.io "" is invalid: [force: Forbidden: may not be specified for non-apply patch, dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"]"#
    );

    let deleted = send(
        &cluster,
        reqwest::Method::DELETE,
        &format!("{MAPS}/a?dryRun=Bogus&propagationPolicy=Sometimes"),
        "application/json",
        "",
    )
    .await;
    assert_eq!(deleted.code, 422);
    assert_eq!(
        deleted.body["message"],
        r#"DeleteOptions.meta.k8s.io "" is invalid: [propagationPolicy: Unsupported value: "Sometimes": supported values: "Foreground", "Background", "Orphan", "nil", dryRun: Unsupported value: []string{"Bogus"}: supported values: "All"]"#
    );
    assert_eq!(
        get(&cluster, &format!("{MAPS}/a")).await.code,
        200,
        "nothing was deleted"
    );
}

#[tokio::test]
async fn repeated_keys_are_warnings_and_strictly_a_decoding_error() {
    // sigs.k8s.io/json reports a repeated key as `duplicate field "<path>"`,
    // a strict decoding error: a warning by default, a 400 from the decoder
    // under fieldValidation=Strict, and for a patch the patcher's 422 on
    // `patch`. Go keeps the last value.
    let cluster = start().await;
    let body = r#"{"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "a", "name": "a"}, "data": {"k": "1", "k": "2"}}"#;
    let strict = send(
        &cluster,
        reqwest::Method::POST,
        &format!("{MAPS}?fieldValidation=Strict"),
        "application/json",
        body,
    )
    .await;
    assert_eq!(
        (strict.code, &strict.body["reason"]),
        (400, &json!("BadRequest"))
    );
    assert_eq!(
        strict.body["message"],
        r#"ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: duplicate field "metadata.name", duplicate field "data.k""#
    );

    let warned = send(
        &cluster,
        reqwest::Method::POST,
        MAPS,
        "application/json",
        body,
    )
    .await;
    assert_eq!(warned.code, 201);
    assert_eq!(
        warned.warnings,
        [
            r#"299 - "duplicate field \"metadata.name\"""#,
            r#"299 - "duplicate field \"data.k\"""#
        ]
    );
    assert_eq!(warned.body["data"]["k"], "2");

    let patched = send(
        &cluster,
        reqwest::Method::PATCH,
        &format!("{MAPS}/a?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"data": {"k": "3", "k": "4"}}"#,
    )
    .await;
    assert_eq!(
        (patched.code, &patched.body["reason"]),
        (422, &json!("Invalid"))
    );
    let message = patched.body["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#" "" is invalid: patch: Invalid value: "{"#)
            && message.ends_with(r#"": strict decoding error: duplicate field "data.k""#),
        "{message}"
    );
    assert_eq!(patched.body["details"]["causes"][0]["field"], "patch");
    assert_eq!(
        get(&cluster, &format!("{MAPS}/a")).await.body["data"]["k"],
        "2"
    );
}

/// A protobuf length-delimited field, for bodies short enough that every
/// byte is ASCII.
fn proto_field(number: u8, bytes: &str) -> String {
    let len = u8::try_from(bytes.len()).expect("a short field");
    let mut out = String::from(char::from(number << 3 | 2));
    out.push(char::from(len));
    out.push_str(bytes);
    out
}

/// `runtime.Unknown` in the `k8s\0` envelope, as client-go sends it.
fn proto_envelope(api_version: &str, kind: &str, raw: &str) -> String {
    let type_meta = proto_field(1, api_version) + &proto_field(2, kind);
    format!("k8s\0{}{}", proto_field(1, &type_meta), proto_field(2, raw))
}

#[tokio::test]
async fn protobuf_bodies_of_what_typed_clients_write_are_read() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
    let cluster = start().await;
    let metadata = proto_field(1, "pb");
    let entry = proto_field(1, "greeting") + &proto_field(2, "hello");
    let config_map = proto_field(1, &metadata) + &proto_field(2, &entry);
    let created = send(
        &cluster,
        reqwest::Method::POST,
        MAPS,
        PROTOBUF,
        &proto_envelope("v1", "ConfigMap", &config_map),
    )
    .await;
    assert_eq!(created.code, 201, "{}", created.body);
    assert_eq!(created.body["data"], json!({"greeting": "hello"}));
    assert_eq!(created.body["metadata"]["name"], "pb");

    let preconditions = proto_field(2, "1");
    let options = proto_field(2, &preconditions);
    let refused = send(
        &cluster,
        reqwest::Method::DELETE,
        &format!("{MAPS}/pb"),
        PROTOBUF,
        &proto_envelope("v1", "DeleteOptions", &options),
    )
    .await;
    assert_eq!(
        refused.code, 409,
        "the precondition is read: {}",
        refused.body
    );

    // A field the emulator does not read is refused, not dropped.
    let unread = proto_field(1, &metadata) + &proto_field(9, "");
    let refused = send(
        &cluster,
        reqwest::Method::POST,
        MAPS,
        PROTOBUF,
        &proto_envelope("v1", "ConfigMap", &unread),
    )
    .await;
    assert_eq!(refused.code, 400, "{}", refused.body);
    assert_eq!(
        refused.body["message"],
        "proto: field 9 of ConfigMap is not read by kube-emulator; send the object as JSON"
    );

    let daemon_set = send(
        &cluster,
        reqwest::Method::POST,
        "/apis/apps/v1/namespaces/default/daemonsets",
        PROTOBUF,
        &proto_envelope("apps/v1", "DaemonSet", &metadata),
    )
    .await;
    assert_eq!(daemon_set.code, 415, "{}", daemon_set.body);
}

//! The gateway: authentication, fault injection, the request log, admin.

use std::time::{Duration, Instant};

use cloud_sim::{Faults, RequestRecord};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::{Harness, TOKEN, reply};

#[tokio::test]
async fn v1_requires_the_bearer_token() {
    let h = Harness::start().await;
    let url = format!("{}/v1/instances", h.sim.url());

    let missing = reply(h.http.get(&url)).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.code(), "unauthorized");
    assert!(missing.headers.contains_key("www-authenticate"));

    let wrong = reply(h.http.get(&url).bearer_auth("nope")).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    let unknown_path = reply(h.http.get(format!("{}/v1/nothing", h.sim.url()))).await;
    assert_eq!(
        unknown_path.status,
        StatusCode::UNAUTHORIZED,
        "auth is checked before routing"
    );

    let scheme_case = reply(
        h.http
            .get(&url)
            .header("authorization", format!("bearer {TOKEN}")),
    )
    .await;
    assert_eq!(scheme_case.status, StatusCode::OK);
}

#[tokio::test]
async fn health_and_admin_need_no_token_and_are_not_logged() {
    let h = Harness::start().await;
    let health = h
        .http
        .get(format!("{}/healthz", h.sim.url()))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(health.text().await.expect("body"), "ok");

    let state = reply(h.http.get(format!("{}/_admin/state", h.sim.url()))).await;
    assert_eq!(state.status, StatusCode::OK);
    assert_eq!(
        state.json,
        json!({"instances": [], "load_balancers": [], "routes": []})
    );
    assert!(h.sim.state().requests().is_empty());
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let h = Harness::start().await;
    let unknown = reply(h.http.get(format!("{}/nowhere", h.sim.url()))).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.code(), "not_found");

    let not_allowed = h.call(Method::PATCH, "/v1/instances", None).await;
    assert_eq!(not_allowed.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(not_allowed.code(), "invalid");

    let paths: Vec<_> = h
        .sim
        .state()
        .requests()
        .into_iter()
        .map(|r| (r.path, r.status))
        .collect();
    assert_eq!(
        paths,
        [
            ("/nowhere".to_owned(), 404),
            ("/v1/instances".to_owned(), 405)
        ]
    );
}

#[tokio::test]
async fn request_log_redacts_authorization() {
    let h = Harness::start().await;
    let body = json!({"name": "node-1", "instance_type": "t", "zone": "z"});
    h.post("/v1/instances", body.clone()).await;
    h.get("/v1/instances?name=node-1").await;
    reply(h.http.get(format!("{}/v1/instances", h.sim.url()))).await;

    let log = reply(h.http.get(format!("{}/_admin/requests", h.sim.url()))).await;
    let records: Vec<RequestRecord> =
        serde_json::from_value(log.json["requests"].clone()).expect("records");
    assert_eq!(records.len(), 3);
    let [create, list, anonymous] = &records[..] else {
        unreachable!()
    };

    assert_eq!((create.method.as_str(), create.status), ("POST", 201));
    assert!(create.authorized);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&create.body).expect("body"),
        body
    );
    let auth: Vec<_> = create
        .headers
        .iter()
        .filter(|(name, _)| name == "authorization")
        .collect();
    assert_eq!(
        auth,
        [&("authorization".to_owned(), "<redacted>".to_owned())]
    );
    assert!(
        !serde_json::to_string(&records)
            .expect("json")
            .contains(TOKEN)
    );

    assert_eq!(list.query.as_deref(), Some("name=node-1"));
    assert!(list.seq > create.seq);
    assert_eq!((anonymous.authorized, anonymous.status), (false, 401));

    let cleared = reply(h.http.delete(format!("{}/_admin/requests", h.sim.url()))).await;
    assert_eq!(cleared.status, StatusCode::NO_CONTENT);
    assert!(h.sim.state().requests().is_empty());
}

#[tokio::test]
async fn fail_next_fails_exactly_n_authorised_requests() {
    let h = Harness::start().await;
    let set = reply(
        h.http
            .put(format!("{}/_admin/faults", h.sim.url()))
            .json(&json!({"fail_next": 2, "fail_status": 503})),
    )
    .await;
    assert_eq!(set.status, StatusCode::OK, "{:?}", set.json);
    assert_eq!(
        set.json["retry_after_secs"], 1,
        "omitted fields take defaults"
    );

    let anonymous = reply(h.http.get(format!("{}/v1/instances", h.sim.url()))).await;
    assert_eq!(
        anonymous.status,
        StatusCode::UNAUTHORIZED,
        "401 wins and consumes nothing"
    );
    for _ in 0..2 {
        let failed = h.get("/v1/instances").await;
        assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(failed.code(), "internal");
    }
    assert_eq!(h.get("/v1/instances").await.status, StatusCode::OK);
    assert_eq!(h.sim.state().faults().fail_next, 0);
}

#[tokio::test]
async fn throttle_next_sends_retry_after() {
    let h = Harness::start().await;
    h.sim.state().set_faults(Faults {
        throttle_next: 1,
        retry_after_secs: 7,
        ..Faults::default()
    });
    let throttled = h.get("/v1/instances").await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(throttled.code(), "rate_limited");
    assert_eq!(
        throttled
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("7")
    );
    assert_eq!(h.get("/v1/instances").await.status, StatusCode::OK);
}

#[tokio::test]
async fn rate_limit_throttles_excess_requests() {
    let h = Harness::start().await;
    h.sim.state().set_faults(Faults {
        rate_limit_per_sec: Some(3),
        ..Faults::default()
    });
    let mut replies = Vec::new();
    for _ in 0..5 {
        replies.push(h.get("/v1/instances").await);
    }
    let statuses: Vec<_> = replies.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(&statuses[..3], [200, 200, 200], "the bucket starts full");
    let limited = replies
        .iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS);
    let limited = limited.unwrap_or_else(|| panic!("no request was limited: {statuses:?}"));
    assert_eq!(limited.code(), "rate_limited");
    assert_eq!(
        limited
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
}

#[tokio::test]
async fn latency_is_injected_and_recorded() {
    let h = Harness::start().await;
    h.sim.state().set_faults(Faults {
        latency_ms: 150,
        ..Faults::default()
    });
    let started = Instant::now();
    assert_eq!(h.get("/v1/instances").await.status, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert!(h.sim.state().requests()[0].latency_ms >= 150);

    let health_started = Instant::now();
    h.http
        .get(format!("{}/healthz", h.sim.url()))
        .send()
        .await
        .expect("healthz");
    assert!(
        health_started.elapsed() < Duration::from_millis(150),
        "faults spare non-/v1 paths"
    );
}

#[tokio::test]
async fn error_rate_one_fails_everything() {
    let h = Harness::start().await;
    h.sim.state().set_faults(Faults {
        error_rate: 1.0,
        ..Faults::default()
    });
    let failed = h.get("/v1/instances").await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(failed.code(), "internal");
}

#[tokio::test]
async fn bad_faults_are_rejected() {
    let h = Harness::start().await;
    let url = format!("{}/_admin/faults", h.sim.url());
    let bad_rate = reply(h.http.put(&url).json(&json!({"error_rate": 2.0}))).await;
    assert_eq!(bad_rate.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad_rate.message().starts_with("error_rate:"),
        "{}",
        bad_rate.message()
    );
    let typo = reply(h.http.put(&url).json(&json!({"fail_nxt": 1}))).await;
    assert_eq!(typo.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        reply(h.http.get(&url)).await.json,
        serde_json::to_value(Faults::default()).expect("json")
    );
}

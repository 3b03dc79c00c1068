//! Shared harness: an in-process simulator on 127.0.0.1:0 and a client.

use std::time::Duration;

use cloud_sim::{CloudSim, Instance, NewInstance, SimOptions};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub const TOKEN: &str = "test-token";
pub const LB_PROVISION: Duration = Duration::from_millis(100);

pub struct Harness {
    pub sim: CloudSim,
    pub http: reqwest::Client,
}

/// A response reduced to what tests look at.
pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub json: Value,
}

impl Reply {
    /// The error code of an error body.
    pub fn code(&self) -> &str {
        self.json["error"]["code"]
            .as_str()
            .unwrap_or("<no error code>")
    }

    pub fn message(&self) -> &str {
        self.json["error"]["message"]
            .as_str()
            .unwrap_or("<no error message>")
    }
}

impl Harness {
    pub async fn start() -> Harness {
        let options = SimOptions {
            lb_provision: LB_PROVISION,
            ..SimOptions::new(TOKEN)
        };
        let sim = CloudSim::start("127.0.0.1:0".parse().expect("addr"), options)
            .await
            .expect("start cloud-sim");
        Harness {
            sim,
            http: http_client(),
        }
    }

    /// An authorised request with an optional JSON body.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let request = self
            .http
            .request(method, format!("{}{path}", self.sim.url()))
            .bearer_auth(TOKEN);
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        reply(request).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.call(Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call(Method::DELETE, path, None).await
    }

    /// A running instance created through the state handle.
    pub fn instance(&self, name: &str) -> Instance {
        self.sim.state().add_instance(NewInstance {
            name: name.into(),
            instance_type: "sim.small".into(),
            zone: "sim-central-1a".into(),
            ..NewInstance::default()
        })
    }
}

/// A plain-HTTP client. The workspace builds reqwest with rustls but no bundled crypto
/// provider, so even a client that never speaks TLS needs one installed: ring.
pub fn http_client() -> reqwest::Client {
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub async fn reply(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("send request");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("read body");
    let json = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Reply {
        status,
        headers,
        json,
    }
}

//! The simulator's REST API as typed calls. This module owns URLs, query encoding and the one
//! judgement about responses that only a provider can make: a 404 carrying the simulator's
//! `not_found` error body is definite absence (`None` / `false`); every other failure is an
//! [`HttpError`] for the caller to propagate.

use wasm_ccm_sdk::http::{self, HttpError, Response};

use crate::config::Config;
use crate::model::{
    ErrorBody, Instance, InstanceList, LbSpec, LoadBalancer, LoadBalancerList, NewLoadBalancer,
    NewRoute, Route, RouteList, TargetsUpdate,
};

/// A client for one simulator.
pub struct Api {
    base: String,
}

impl Api {
    /// A client for the simulator `config` names.
    pub fn new(config: &Config) -> Api {
        Api {
            base: config.api_url.clone(),
        }
    }

    /// A client for the simulator of this provider version's configuration.
    pub fn load() -> Result<Api, wasm_ccm_sdk::Error> {
        Config::load().map(|config| Api::new(&config))
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.base)
    }

    /// `GET /v1/instances/{id}`; `None` if the id is unknown (deleted instances are returned).
    pub fn instance(&self, id: &str) -> Result<Option<Instance>, HttpError> {
        found(http::get(&self.url(&format!("instances/{}", encode(id))))?)
    }

    /// `GET /v1/instances[?name=NAME]`: the live instances, all or those named `name`.
    pub fn instances(&self, name: Option<&str>) -> Result<Vec<Instance>, HttpError> {
        let query = name.map_or_else(String::new, |name| format!("?name={}", encode(name)));
        let list: InstanceList = http::get(&self.url(&format!("instances{query}")))?.json()?;
        Ok(list.instances)
    }

    /// The load balancer named `name` in `cluster`, if any.
    pub fn load_balancer_named(
        &self,
        name: &str,
        cluster: &str,
    ) -> Result<Option<LoadBalancer>, HttpError> {
        let path = format!(
            "load-balancers?name={}&cluster={}",
            encode(name),
            encode(cluster)
        );
        let list: LoadBalancerList = http::get(&self.url(&path))?.json()?;
        Ok(list.load_balancers.into_iter().find(|lb| lb.name == name))
    }

    /// `POST /v1/load-balancers`: the new load balancer, still provisioning.
    pub fn create_load_balancer(&self, new: &NewLoadBalancer) -> Result<LoadBalancer, HttpError> {
        http::post_json(&self.url("load-balancers"), new)?.json()
    }

    /// `PUT /v1/load-balancers/{id}`: replace listeners, targets, source ranges and protocol.
    pub fn update_load_balancer(&self, id: &str, spec: &LbSpec) -> Result<LoadBalancer, HttpError> {
        http::put_json(&self.url(&format!("load-balancers/{}", encode(id))), spec)?.json()
    }

    /// `PUT /v1/load-balancers/{id}/targets`.
    pub fn set_targets(&self, id: &str, targets: &[String]) -> Result<LoadBalancer, HttpError> {
        let url = self.url(&format!("load-balancers/{}/targets", encode(id)));
        http::put_json(&url, &TargetsUpdate { targets })?.json()
    }

    /// `DELETE /v1/load-balancers/{id}`: `true` if deleted now, `false` if already gone.
    pub fn delete_load_balancer(&self, id: &str) -> Result<bool, HttpError> {
        deleted(http::delete(
            &self.url(&format!("load-balancers/{}", encode(id))),
        )?)
    }

    /// `GET /v1/routes?cluster=C`: the routes of `cluster`.
    pub fn routes(&self, cluster: &str) -> Result<Vec<Route>, HttpError> {
        let list: RouteList =
            http::get(&self.url(&format!("routes?cluster={}", encode(cluster))))?.json()?;
        Ok(list.routes)
    }

    /// `POST /v1/routes`; a 409 means the cluster already routes the CIDR.
    pub fn create_route(&self, new: &NewRoute) -> Result<Route, HttpError> {
        http::post_json(&self.url("routes"), new)?.json()
    }

    /// `DELETE /v1/routes/{id}`: `true` if deleted now, `false` if already gone.
    pub fn delete_route(&self, id: &str) -> Result<bool, HttpError> {
        deleted(http::delete(&self.url(&format!("routes/{}", encode(id))))?)
    }
}

/// The JSON body of a 2xx response; `None` for the simulator's "not found".
fn found<T: serde::de::DeserializeOwned>(response: Response) -> Result<Option<T>, HttpError> {
    if is_not_found(&response) {
        return Ok(None);
    }
    response.json().map(Some)
}

/// `true` for a 2xx answer to a DELETE, `false` for the simulator's "not found".
fn deleted(response: Response) -> Result<bool, HttpError> {
    if is_not_found(&response) {
        return Ok(false);
    }
    response.success().map(|_| true)
}

/// A 404 with the simulator's own `not_found` error body. A bare 404 (a proxy, a wrong
/// `api_url`) is not proof that a resource is gone.
fn is_not_found(response: &Response) -> bool {
    response.status == 404
        && serde_json::from_slice::<ErrorBody>(&response.body)
            .is_ok_and(|body| body.error.code == "not_found")
}

/// Percent-encode `value` for a path segment or query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

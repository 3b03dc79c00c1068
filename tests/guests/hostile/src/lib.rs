//! `hostile`: a provider that misbehaves on purpose, so tests can prove the sandbox contains
//! bad providers. This file owns the provider surface and the command dispatch; the
//! behaviours live in the modules.
//!
//! `instance-metadata(node)` runs the command named by the node's label
//! `hostile.wasm-ccm.io/command`, or else by `node.name` (`COMMAND` or `COMMAND:ARG`, split
//! at the first `:`). Non-fatal commands answer
//! `Ok(InstanceMetadata { provider_id: "hostile://report", instance_type: "report", .. })`
//! whose only additional label is `("report", <JSON>)`:
//!
//! | command | behaviour | report |
//! |---|---|---|
//! | `loop` | spins forever on pure CPU, never yields | — |
//! | `alloc` | keeps 1 MiB buffers, touching every page, until allocation fails (trap) | — |
//! | `trap` | `panic!("hostile guest panics on purpose")` | — |
//! | `orphan-pollable` | drops stdout's stream before the pollable made from it (the host refuses) | — |
//! | `fetch:URL` | `GET URL` with the SDK | `{"status","headers":[[name,value]…],"body"}` or `{"error","kind"}` |
//! | `request:JSON` | the request `{"method","url","headers":[[name,value]…],"body"}` (or `"body_bytes": N`) with the SDK | the fetch report; with a forbidden header also `"raw"`, as `set-auth`'s, for each header named |
//! | `set-auth:URL` | `GET URL` setting `Authorization: Bearer stolen` with the SDK, then raw `wasi:http` header attempts | `{"sdk": <fetch report>, "raw": [{"header","via","result"}…]}` |
//! | `snoop:URL` | reads everything a guest might see | `{"env","args","fs","config","cache_secret","fetch"}` |
//! | `huge:URL` | `GET URL` with the SDK (expects a huge body) | `{"status","bytes"}` or `{"error","kind"}` |
//! | `cache-set:KEY=VALUE` | stores VALUE for 60 s | `{"key","value": <read back>}` |
//! | `cache-get:KEY` | reads KEY | `{"key","value": string or null}` |
//! | `cache-fill:COUNTxSIZE` | stores COUNT values of SIZE bytes (`fill-0`…, 60 s each, in order), then reads them all | `{"count","size","present","first_present": index or null,"last_present": bool}` |
//! | `cache-key:LEN` | stores `v` under a key of LEN bytes, reads it back | `{"len","stored": bool}` |
//! | `log:MESSAGE` | host log (info), stdout and stderr | `{"ok":true,"stdout","stderr"}` |
//! | `log-flood:COUNTxSIZE` | COUNT host log lines (info) of SIZE bytes | `{"lines","size"}` |
//! | `fields-flood:COUNTxSIZE` | makes COUNT raw `wasi:http` fields of one SIZE-byte header each, keeping them all | `{"count","size"}` |
//! | `bodies-flood:COUNT` | opens COUNT raw requests, fills each body as far as the host buffers unsent, keeping them all | `{"count","buffered"}` |
//! | `fetch-many:N:URL` | `GET URL` N times, then fails with `other("fetched N times")` | — (an error) |
//! | `fetch-names:N:PATTERN` | `GET` N distinct URLs: PATTERN with `{}` replaced by `n0`…`n(N-1)` | `{"requests","outcomes":{OUTCOME: count}}`, OUTCOME `ok`, a status (`429`) or an error kind |
//! | `answer:N` | answers with a report of N bytes (to push the host's result cap) | `"aaa…"` |
//! | `metadata` | the node's labels and annotations as the guest received them | `{"labels","annotations"}` |
//!
//! `update-load-balancer(svc, nodes)` runs the node-set command named by `svc.name`:
//!
//! | command | behaviour | answer |
//! |---|---|---|
//! | `read-nodes:FIELD` | reads `names`, `provider-ids` or `all` (whole nodes) of the set once | `other({"read", "provider_ids"?, "labels"?})` |
//! | `reread-nodes` | reads every node whole, again and again, forever | — |
//! | `hoard-nodes` | reads every node whole again and again, keeping each copy | — |
//!
//! Any other Service name answers `not-implemented`.
//!
//! Answers a test dictates ([`answers`]), returned as they are for the host to check:
//!
//! | function | answers |
//! |---|---|
//! | `instance-metadata(node)` | with the node's annotation `hostile.wasm-ccm.io/metadata` (JSON `{"providerID","instanceType","zone","region","addresses":[[KIND,ADDRESS]…],"labels":[[KEY,VALUE]…]}`), that metadata, before any command runs |
//! | `ensure-load-balancer(svc)`, `get-load-balancer(svc)` | with the Service's annotation `hostile.wasm-ccm.io/ingress` (JSON `[{"ip","hostname","ipMode","ports":[{"port","protocol","error"}]}…]`), that status; without it `not-implemented` |
//! | `ensure-load-balancer-deleted(svc)` | with that annotation `Ok`; without it `not-implemented` |
//! | `ensure-load-balancer(svc)`, `get-load-balancer(svc)`, `ensure-load-balancer-deleted(svc)` | with the Service's annotation `hostile.wasm-ccm.io/error` (JSON `{"kind": "retry-after"\|"other"\|"not-found", "delayMs", "bytes", "fetch"}`), that error, its message `bytes` long and new on every call, after a `GET` of `fetch` |
//!
//! With a cloud config `{"labels": [KEY…], "annotations": [KEY…]}`, `init` declares those
//! node metadata keys; without one it declares none (and so sees every label).
//!
//! With the cluster name `drifting`, the load-balancer and route functions answer from a
//! cloud whose answers drift from call to call instead, and so do the instance functions for
//! a node annotated `hostile.wasm-ccm.io/drifting` (see [`drifting`]).
//!
//! `kind` is one of `invalid-url`, `denied`, `forbidden-header`, `transport`, `status`,
//! `decode`. An unknown command is `Err(other("unknown hostile command <node.name>"))`.
//! `instance-exists` answers `Ok(true)` (`false` for a drifting node); every other function
//! is `not-implemented`.

mod answers;
mod drifting;
mod exhaust;
mod host;
mod http_flood;
mod misuse;
mod names;
mod net;
mod nodes;
mod snoop;

use serde_json::Value;
use wasm_ccm_sdk::{
    Capabilities, Error, InstanceMetadata, LbStatus, Node, NodeMetadataKeys, Nodes, Route, Service,
    export_provider,
};

/// A node label that names the command instead of the node's name, so nodes of a real
/// cluster (whose names cannot hold `:`) can run one: `hostile.wasm-ccm.io/command=loop`.
const COMMAND_LABEL: &str = "hostile.wasm-ccm.io/command";

/// The provider.
struct Hostile;

impl wasm_ccm_sdk::Provider for Hostile {
    fn init(config: Option<Vec<u8>>) -> Result<Capabilities, Error> {
        Ok(Capabilities {
            name: "hostile".into(),
            instances: true,
            load_balancer: true,
            routes: true,
            has_cluster_id: true,
            node_metadata: config.map(|bytes| declared_keys(&bytes)).transpose()?,
        })
    }
}

impl wasm_ccm_sdk::Instances for Hostile {
    fn instance_exists(node: Node) -> Result<bool, Error> {
        Ok(!drifts(&node))
    }

    fn instance_metadata(node: Node) -> Result<InstanceMetadata, Error> {
        if drifts(&node) {
            return Ok(drifting::instance_metadata());
        }
        if let Some(answer) = answers::instance_metadata(&node) {
            return answer;
        }
        if node.name == "metadata" {
            return Ok(report(serde_json::json!({
                "labels": node.labels,
                "annotations": node.annotations,
            })));
        }
        let command = node
            .labels
            .iter()
            .find(|(key, _)| key == COMMAND_LABEL)
            .map_or(node.name.as_str(), |(_, command)| command.as_str());
        run(command).map(report)
    }
}

/// Whether `node` is one of the drifting cloud's ([`drifting::NODE_ANNOTATION`]).
fn drifts(node: &Node) -> bool {
    node.annotations
        .iter()
        .any(|(key, _)| key == drifting::NODE_ANNOTATION)
}

impl wasm_ccm_sdk::LoadBalancers for Hostile {
    fn get_load_balancer_name(cluster_name: String, svc: Service) -> String {
        if cluster_name == drifting::CLUSTER {
            return drifting::load_balancer_name();
        }
        wasm_ccm_sdk::default_load_balancer_name(&svc)
    }

    fn get_load_balancer(cluster_name: String, svc: Service) -> Result<Option<LbStatus>, Error> {
        if cluster_name == drifting::CLUSTER {
            return Ok(Some(drifting::load_balancer()));
        }
        answers::load_balancer(&svc)
            .ok_or(Error::NotImplemented)?
            .map(Some)
    }

    fn ensure_load_balancer(
        cluster_name: String,
        svc: Service,
        _nodes: Nodes<'_>,
    ) -> Result<LbStatus, Error> {
        if cluster_name == drifting::CLUSTER {
            return drifting::ensure_load_balancer(&svc);
        }
        answers::load_balancer(&svc).ok_or(Error::NotImplemented)?
    }

    fn ensure_load_balancer_deleted(cluster_name: String, svc: Service) -> Result<(), Error> {
        if cluster_name == drifting::CLUSTER {
            return drifting::delete_load_balancer();
        }
        answers::load_balancer(&svc)
            .ok_or(Error::NotImplemented)?
            .map(|_| ())
    }

    fn update_load_balancer(
        cluster_name: String,
        svc: Service,
        nodes: Nodes<'_>,
    ) -> Result<(), Error> {
        if cluster_name == drifting::CLUSTER {
            return Ok(());
        }
        nodes::run(&svc.name, &nodes)
    }
}

/// Routes exist only in the drifting cloud; elsewhere the defaults answer `not-implemented`.
impl wasm_ccm_sdk::Routes for Hostile {
    fn list_routes(cluster_name: String) -> Result<Vec<Route>, Error> {
        if cluster_name != drifting::CLUSTER {
            return Err(Error::NotImplemented);
        }
        Ok(drifting::list_routes())
    }

    fn create_route(cluster_name: String, _name_hint: String, route: Route) -> Result<(), Error> {
        if cluster_name != drifting::CLUSTER {
            return Err(Error::NotImplemented);
        }
        drifting::create_route(&route);
        Ok(())
    }

    fn delete_route(cluster_name: String, _route: Route) -> Result<(), Error> {
        if cluster_name != drifting::CLUSTER {
            return Err(Error::NotImplemented);
        }
        Ok(())
    }
}

export_provider!(Hostile);

/// Run `command` (`COMMAND` or `COMMAND:ARG`).
fn run(command: &str) -> Result<Value, Error> {
    let (name, arg) = command.split_once(':').unwrap_or((command, ""));
    match name {
        "loop" => exhaust::spin(),
        "alloc" => exhaust::hoard(),
        "trap" => panic!("hostile guest panics on purpose"),
        "orphan-pollable" => misuse::orphan_pollable(),
        "fetch" => Ok(net::fetch(arg)),
        "request" => Ok(net::request(arg)),
        "set-auth" => Ok(net::set_auth(arg)),
        "snoop" => Ok(snoop::snoop(arg)),
        "huge" => Ok(net::huge(arg)),
        "connect" => Ok(net::connect(arg)),
        "cache-set" => host::cache_set(arg),
        "cache-get" => Ok(host::cache_get(arg)),
        "cache-fill" => host::cache_fill(arg),
        "cache-key" => host::cache_key(arg),
        "log" => Ok(host::log(arg)),
        "log-flood" => host::log_flood(arg),
        "answer" => Ok(Value::String("a".repeat(arg.parse().unwrap_or(0)))),
        "fetch-many" => Err(net::fetch_many(arg)),
        "fetch-names" => Ok(names::fetch_names(arg)),
        "fields-flood" => http_flood::fields_flood(arg),
        "bodies-flood" => http_flood::bodies_flood(arg),
        _ => Err(Error::other(format!("unknown hostile command {command}"))),
    }
}

/// The node metadata keys a cloud config names.
fn declared_keys(config: &[u8]) -> Result<NodeMetadataKeys, Error> {
    let config: Value = serde_json::from_slice(config)
        .map_err(|e| Error::other(format!("cloud config is not JSON: {e}")))?;
    let keys = |field: &str| -> Vec<String> {
        config[field]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(NodeMetadataKeys {
        labels: keys("labels"),
        annotations: keys("annotations"),
    })
}

/// The metadata that carries a command's report.
fn report(value: Value) -> InstanceMetadata {
    InstanceMetadata {
        provider_id: "hostile://report".into(),
        instance_type: "report".into(),
        node_addresses: Vec::new(),
        zone: String::new(),
        region: String::new(),
        additional_labels: vec![("report".into(), value.to_string())],
    }
}

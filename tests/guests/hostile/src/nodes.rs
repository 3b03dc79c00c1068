//! What a provider can make the host do with a load-balancer call's `node-set`: read it
//! once (for benchmarks and tests), read it without end, or keep every read.

use serde_json::Value;
use wasm_ccm_sdk::{Error, Nodes};

/// Run the node-set command `command` (`COMMAND` or `COMMAND:ARG`) on `nodes`.
pub fn run(command: &str, nodes: &Nodes<'_>) -> Result<(), Error> {
    let (name, arg) = command.split_once(':').unwrap_or((command, ""));
    match name {
        "read-nodes" => Err(Error::other(read(arg, nodes)?.to_string())),
        "reread-nodes" => loop {
            std::hint::black_box(nodes.all());
        },
        "hoard-nodes" => {
            let mut kept = Vec::new();
            loop {
                kept.push(nodes.all());
                std::hint::black_box(&kept);
            }
        }
        _ => Err(Error::NotImplemented),
    }
}

/// Read one field of every node (`names`, `provider-ids`) or every node whole (`all`).
fn read(field: &str, nodes: &Nodes<'_>) -> Result<Value, Error> {
    let report = match field {
        "names" => serde_json::json!({"read": nodes.names().len()}),
        "provider-ids" => {
            let ids = nodes.provider_ids();
            let with_one = ids.iter().filter(|id| id.is_some()).count();
            serde_json::json!({"read": ids.len(), "provider_ids": with_one})
        }
        "all" => {
            let all = nodes.all();
            let labels: usize = all.iter().map(|node| node.labels.len()).sum();
            let provider_ids = all.iter().filter(|node| node.provider_id.is_some()).count();
            serde_json::json!({"read": all.len(), "labels": labels, "provider_ids": provider_ids})
        }
        _ => return Err(Error::other(format!("unknown node field {field}"))),
    };
    Ok(report)
}

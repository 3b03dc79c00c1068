//! Many destinations in one call: `fetch-names:N:PATTERN` sends `GET` to N distinct names,
//! PATTERN with `{}` replaced by `n0`, `n1`, …, to push what the host keeps per name it is
//! asked for (metric series, rate budgets).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use wasm_ccm_sdk::http::{self, HttpError};

use crate::net;

/// `GET` each of the `N` URLs `arg` (`N:PATTERN`) names; how many ended how: `ok`, the
/// status of a non-success answer (`429`), or the error kind (`denied`, `transport`…).
pub fn fetch_names(arg: &str) -> Value {
    let (count, pattern) = arg.split_once(':').unwrap_or(("0", arg));
    let count: u32 = count.parse().unwrap_or(0);
    let mut outcomes: BTreeMap<String, u32> = BTreeMap::new();
    for index in 0..count {
        let url = pattern.replace("{}", &format!("n{index}"));
        let outcome = match http::get(&url) {
            Ok(response) if (200..300).contains(&response.status) => "ok".to_string(),
            Ok(response) => response.status.to_string(),
            Err(HttpError::Status { status, .. }) => status.to_string(),
            Err(error) => net::kind(&error).to_string(),
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    json!({"requests": count, "outcomes": outcomes})
}

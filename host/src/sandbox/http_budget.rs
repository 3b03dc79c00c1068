//! What a call's `wasi:http` resources may make the host hold: how many resources at once
//! ([`HttpLimits::max_resources`]) and how many bytes ([`HttpLimits::max_memory`]).
//!
//! The memory cap counts a guest's linear memory only. Fields, requests, request bodies,
//! responses and response futures live in host memory, and wasmtime-wasi-http bounds each
//! `fields` (128 KiB) and each request body's buffer (two chunks of 1 MiB) but not how many
//! of them a call keeps: 20,000 fields of one 60 KB header took the host to 1.24 GB in one
//! call. So each call has two budgets:
//! - **resources**: its resource table holds at most `max_resources` entries at once. Every
//!   resource counts: `wasi:http` ones, their streams and pollables, a node set. A push past
//!   it fails in wasmtime-wasi-http, which traps.
//! - **memory**: before each operation that makes the host hold more (writing headers,
//!   cloning fields, setting a request's method, scheme, authority or path, opening a body,
//!   sending), the bytes the call's resources hold are added up: header names and values
//!   (with `HeaderMap`'s per-entry size, as wasmtime counts it), request lines, the buffer a
//!   request or response body may fill for every body not yet sent, every request not yet
//!   answered, response headers, and [`RESOURCE_OVERHEAD`] per resource. If that plus the
//!   operation's own bytes is over `max_memory`, the call traps with [`HttpBudgetExceeded`].
//!
//! Why a sum of what is held rather than a count of what was written: a resource the guest
//! drops gives its bytes back, so a call making thousands of requests one after another
//! never runs out, while one that keeps what it made meets the limit however it keeps it.
//! The sum walks the table, which `max_resources` keeps short, and requests in flight are
//! remembered by their future. The operations are wasmtime-wasi-http's own, redefined in
//! the linker ([`shadow`]) to check first and then call its implementation.

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable, ResourceTableError};
use wasmtime_wasi_http::p2::HeaderError;
use wasmtime_wasi_http::p2::bindings::http::{outgoing_handler, types as wit};
use wasmtime_wasi_http::p2::body::HostOutgoingBody;
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest, HostOutgoingResponse,
};
use wasmtime_wasi_http::{FieldMap, RequestOptions, WasiHttpCtxView, WasiHttpView};

use super::CallState;

/// Bytes charged for each resource besides what it holds: its table slot and the struct
/// behind it (a request is about 200 bytes, a response future a task handle).
const RESOURCE_OVERHEAD: usize = 256;

/// The `wasi:http` interfaces wasmtime-wasi-http 48 defines, whose functions are redefined.
const TYPES: &str = "wasi:http/types@0.2.12";
const OUTGOING_HANDLER: &str = "wasi:http/outgoing-handler@0.2.12";

/// How much a call's `wasi:http` resources may make the host hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Most bytes its resources may hold at once (`--http-memory-limit`).
    pub max_memory: u64,
    /// Most resources it may hold at once (`--max-http-resources`).
    pub max_resources: u32,
}

impl Default for HttpLimits {
    /// A request the SDK builds holds its headers (well under 1 KiB), its body buffer (up
    /// to 2 MiB) and a handful of resources, and goes before the next one is made: 16 MiB
    /// and 1,000 resources leave room for several requests in flight at once and a provider
    /// that keeps response headers, while 128 calls at once hold at most 2 GiB however they
    /// misbehave, a quarter of what their linear memories may (64 MiB each).
    fn default() -> Self {
        HttpLimits {
            max_memory: 16 * 1024 * 1024,
            max_resources: 1000,
        }
    }
}

/// One of a call's `wasi:http` budgets that the provider went past.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpBudget {
    /// Its resources would have held more than `--http-memory-limit`.
    #[error(
        "its wasi:http resources would hold {bytes} bytes of host memory, more than the \
         {limit_bytes} bytes one call may hold (--http-memory-limit)"
    )]
    Memory {
        /// What the resources held, plus what the refused operation would have added.
        bytes: u64,
        /// `--http-memory-limit`, in bytes.
        limit_bytes: u64,
    },
    /// It held `--max-http-resources` resources and asked for one more.
    #[error(
        "it held {limit} resources at once (wasi:http fields, requests, responses, bodies, \
         futures, their streams and pollables), the most one call may hold \
         (--max-http-resources)"
    )]
    Resources {
        /// `--max-http-resources`.
        limit: u32,
    },
}

/// The trap that ends a call whose `wasi:http` resources would go over `--http-memory-limit`.
#[derive(Debug, thiserror::Error)]
#[error("wasi:http budget exceeded: {0}")]
pub struct HttpBudgetExceeded(HttpBudget);

/// What one call's budget keeps: the bytes of each request in flight, by the
/// representation of its response future.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    requests: BTreeMap<u32, usize>,
}

/// The budget a trap of `error` says the call went past, if it says so.
pub(crate) fn exceeded(error: &wasmtime::Error, limits: &HttpLimits) -> Option<HttpBudget> {
    if let Some(HttpBudgetExceeded(budget)) = error.downcast_ref::<HttpBudgetExceeded>() {
        return Some(budget.clone());
    }
    match error.downcast_ref::<ResourceTableError>() {
        Some(ResourceTableError::Full) => Some(HttpBudget::Resources {
            limit: limits.max_resources,
        }),
        _ => None,
    }
}

/// A fresh call's resource table, holding at most `limits.max_resources` entries.
pub(crate) fn table(limits: &HttpLimits) -> ResourceTable {
    let mut table = ResourceTable::new();
    table.set_max_capacity(limits.max_resources as usize);
    table
}

/// Redefine the `wasi:http` functions that make the host hold more so that each checks the
/// call's memory budget first; `linker` already holds wasmtime-wasi-http's definitions.
pub(crate) fn shadow(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(TYPES)?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: Call<'_>, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let adding = entries
                .iter()
                .map(|(name, value)| entry_bytes(name.len(), value.len()))
                .sum();
            charge(store.data_mut(), adding)?;
            let mut http = store.data_mut().http();
            let made = wit::HostFields::from_list(&mut http, entries);
            Ok((header_result(&mut http, made)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.append",
        |mut store: Call<'_>, (fields, name, value): (Resource<FieldMap>, String, Vec<u8>)| {
            charge(store.data_mut(), entry_bytes(name.len(), value.len()))?;
            let mut http = store.data_mut().http();
            let appended = wit::HostFields::append(&mut http, fields, name, value);
            Ok((header_result(&mut http, appended)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.set",
        |mut store: Call<'_>,
         (fields, name, values): (Resource<FieldMap>, String, Vec<Vec<u8>>)| {
            let adding = values
                .iter()
                .map(|value| entry_bytes(name.len(), value.len()))
                .sum();
            charge(store.data_mut(), adding)?;
            let mut http = store.data_mut().http();
            let set = wit::HostFields::set(&mut http, fields, name, values);
            Ok((header_result(&mut http, set)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store: Call<'_>, (fields,): (Resource<FieldMap>,)| {
            // A clone shares its map until its first change copies it: charged whole.
            let adding = header_map_bytes(store.data().table.get(&fields)?);
            charge(store.data_mut(), adding)?;
            Ok((wit::HostFields::clone(
                &mut store.data_mut().http(),
                fields,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-method",
        |mut store: Call<'_>, (request, method): (Resource<HostOutgoingRequest>, wit::Method)| {
            let adding = match &method {
                wit::Method::Other(text) => text.len(),
                _ => 0,
            };
            charge(store.data_mut(), adding)?;
            let mut http = store.data_mut().http();
            Ok((wit::HostOutgoingRequest::set_method(
                &mut http, request, method,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-scheme",
        |mut store: Call<'_>,
         (request, scheme): (Resource<HostOutgoingRequest>, Option<wit::Scheme>)| {
            let adding = match &scheme {
                Some(wit::Scheme::Other(text)) => text.len(),
                _ => 0,
            };
            charge(store.data_mut(), adding)?;
            let mut http = store.data_mut().http();
            Ok((wit::HostOutgoingRequest::set_scheme(
                &mut http, request, scheme,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-authority",
        |mut store: Call<'_>,
         (request, authority): (Resource<HostOutgoingRequest>, Option<String>)| {
            charge(store.data_mut(), authority.as_ref().map_or(0, String::len))?;
            let mut http = store.data_mut().http();
            Ok((wit::HostOutgoingRequest::set_authority(
                &mut http, request, authority,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        |mut store: Call<'_>, (request, path): (Resource<HostOutgoingRequest>, Option<String>)| {
            charge(store.data_mut(), path.as_ref().map_or(0, String::len))?;
            let mut http = store.data_mut().http();
            Ok((wit::HostOutgoingRequest::set_path_with_query(
                &mut http, request, path,
            )?,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-request.body",
        |mut store: Call<'_>, (request,): (Resource<HostOutgoingRequest>,)| {
            charge(store.data_mut(), body_bytes())?;
            let opened: Result<Resource<HostOutgoingBody>, ()> =
                wit::HostOutgoingRequest::body(&mut store.data_mut().http(), request)?;
            Ok((opened,))
        },
    )?;
    types.func_wrap(
        "[method]outgoing-response.body",
        |mut store: Call<'_>, (response,): (Resource<HostOutgoingResponse>,)| {
            charge(store.data_mut(), body_bytes())?;
            let opened: Result<Resource<HostOutgoingBody>, ()> =
                wit::HostOutgoingResponse::body(&mut store.data_mut().http(), response)?;
            Ok((opened,))
        },
    )?;
    let mut handler = linker.instance(OUTGOING_HANDLER)?;
    handler.func_wrap(
        "handle",
        |mut store: Call<'_>,
         (request, options): (
            Resource<HostOutgoingRequest>,
            Option<Resource<RequestOptions>>,
        )| {
            // The request leaves the table for the response future: its bytes stay held
            // until the response arrives or the future is dropped.
            let state = store.data_mut();
            let bytes = state.table.get(&request).map_or(0, request_bytes);
            let mut http = state.http();
            let handled = outgoing_handler::Host::handle(&mut http, request, options);
            let handled = match handled {
                Ok(future) => Ok(future),
                Err(error) => Err(wit::Host::convert_error_code(&mut http, error)?),
            };
            if let Ok(future) = &handled {
                state.http_in_flight.requests.insert(future.rep(), bytes);
            }
            Ok((handled,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

type Call<'a> = StoreContextMut<'a, CallState>;

/// `result` as the guest sees it: its header error, or the trap it carries.
fn header_result<T>(
    http: &mut WasiHttpCtxView<'_>,
    result: Result<T, HeaderError>,
) -> wasmtime::Result<Result<T, wit::HeaderError>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => Ok(Err(wit::Host::convert_header_error(http, error)?)),
    }
}

/// Trap unless the call's resources, plus `adding` bytes, fit its memory budget.
fn charge(state: &mut CallState, adding: usize) -> wasmtime::Result<()> {
    let limit = state.env.limits.http.max_memory;
    let held = held_bytes(&mut state.table, &mut state.http_in_flight);
    let bytes = u64::try_from(held.saturating_add(adding)).unwrap_or(u64::MAX);
    if bytes > limit {
        return Err(HttpBudgetExceeded(HttpBudget::Memory {
            bytes,
            limit_bytes: limit,
        })
        .into());
    }
    Ok(())
}

/// What every resource of the call holds, and every request it has in flight.
fn held_bytes(table: &mut ResourceTable, in_flight: &mut InFlight) -> usize {
    let mut held: usize = table
        .iter_mut()
        .map(|entry| RESOURCE_OVERHEAD + resource_bytes(entry))
        .sum();
    in_flight.requests.retain(|rep, bytes| {
        let pending = table
            .get_any_mut(*rep)
            .ok()
            .and_then(|entry| entry.downcast_ref::<HostFutureIncomingResponse>())
            .is_some_and(|future| matches!(future, HostFutureIncomingResponse::Pending(_)));
        if pending {
            held = held.saturating_add(*bytes);
        }
        pending
    });
    held
}

/// The bytes one resource holds beyond its overhead.
fn resource_bytes(entry: &(dyn std::any::Any + Send)) -> usize {
    if let Some(fields) = entry.downcast_ref::<FieldMap>() {
        header_map_bytes(fields)
    } else if let Some(request) = entry.downcast_ref::<HostOutgoingRequest>() {
        request_bytes(request)
    } else if let Some(response) = entry.downcast_ref::<HostOutgoingResponse>() {
        header_map_bytes(&response.headers) + response.body.as_ref().map_or(0, |_| body_bytes())
    } else if let Some(response) = entry.downcast_ref::<HostIncomingResponse>() {
        header_map_bytes(&response.headers)
    } else if let Some(HostFutureIncomingResponse::Ready(Ok((response, _)))) =
        entry.downcast_ref::<HostFutureIncomingResponse>()
    {
        header_map_bytes(response.headers())
    } else {
        0
    }
}

/// Headers, request line and unsent body buffer of `request`.
fn request_bytes(request: &HostOutgoingRequest) -> usize {
    let method = match &request.method {
        wit::Method::Other(text) => text.len(),
        _ => 0,
    };
    let scheme = match &request.scheme {
        Some(wit::Scheme::Other(text)) => text.len(),
        _ => 0,
    };
    let authority = request.authority.as_ref().map_or(0, String::len);
    let path = request.path_with_query.as_ref().map_or(0, String::len);
    let body = request.body.as_ref().map_or(0, |_| body_bytes());
    header_map_bytes(&request.headers) + method + scheme + authority + path + body
}

/// The bytes one header entry takes, as wasmtime-wasi-http counts a `fields`' size.
fn entry_bytes(name: usize, value: usize) -> usize {
    name + size_of::<HeaderName>() + value + size_of::<HeaderValue>()
}

fn header_map_bytes(map: &HeaderMap) -> usize {
    let names: usize = map
        .keys()
        .map(|name| name.as_str().len() + size_of::<HeaderName>())
        .sum();
    let values: usize = map
        .values()
        .map(|value| value.len() + size_of::<HeaderValue>())
        .sum();
    names + values
}

/// The most a body not yet sent buffers: wasmtime-wasi-http's channel of
/// `buffer_chunks + 1` writes of at most `chunk_size` bytes, at its default sizes, which
/// the egress gate's hooks keep (2 MiB).
fn body_bytes() -> usize {
    (wasmtime_wasi_http::p2::DEFAULT_OUTGOING_BODY_BUFFER_CHUNKS + 1)
        * wasmtime_wasi_http::p2::DEFAULT_OUTGOING_BODY_CHUNK_SIZE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_are_counted_as_wasmtime_counts_a_fields_size() {
        let mut map = HeaderMap::new();
        map.append("x-a", HeaderValue::from_static("1234"));
        map.append("x-a", HeaderValue::from_static("56"));
        assert_eq!(
            header_map_bytes(&map),
            entry_bytes(3, 4) + 2 + size_of::<HeaderValue>()
        );
    }

    #[test]
    fn a_full_table_and_an_over_budget_trap_name_their_budget() {
        let limits = HttpLimits::default();
        let full = wasmtime::Error::from(ResourceTableError::Full).context("[new_fields]");
        assert_eq!(
            exceeded(&full, &limits),
            Some(HttpBudget::Resources { limit: 1000 })
        );
        let over = HttpBudget::Memory {
            bytes: 20,
            limit_bytes: 10,
        };
        let trap = wasmtime::Error::from(HttpBudgetExceeded(over.clone()));
        assert_eq!(exceeded(&trap, &limits), Some(over));
        let other = wasmtime::Error::msg("wasm trap: unreachable");
        assert_eq!(exceeded(&other, &limits), None);
    }

    #[test]
    fn a_table_holds_at_most_its_limit() {
        let mut table = table(&HttpLimits {
            max_memory: 1,
            max_resources: 2,
        });
        assert!(table.push(1u8).is_ok() && table.push(2u8).is_ok());
        assert!(matches!(table.push(3u8), Err(ResourceTableError::Full)));
    }
}

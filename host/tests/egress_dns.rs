//! The egress gate's DNS cache, against a name server of the test's own: an answer is kept
//! for its TTL and the cache within its bound, the address check runs on every new
//! connection on the answer as cached (a changed answer is refused by its cached address
//! until the TTL ends), a new gate (a swap) starts with an empty cache, and a name that does
//! not exist (`NXDOMAIN`) fails naming it.
//!
//! Every name here resolves to an internal address, so each request is refused by the
//! address check; its message names the address the check saw, and the name server counts
//! the queries that reached it.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_resolver::proto::op::{Message, OpCode, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, SOA};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use tokio::net::UdpSocket;
use wasm_ccm_host::egress::{
    Caller, DNS_CACHE_ANSWERS, EgressConfig, EgressGate, PoolLimits, SendError,
};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::rate::RateBudget;

/// A UDP name server on loopback: A records from a map it lets the test change, with one
/// TTL for every answer; no AAAA record and `NXDOMAIN` for unknown names, both with an SOA
/// so the negative answer is cached for the same TTL, as a real zone's would be.
struct NameServer {
    addr: SocketAddr,
    answers: Arc<Mutex<HashMap<String, Ipv4Addr>>>,
    ttl: Arc<AtomicU32>,
    /// Every query received: name (without the final dot) and type.
    queries: Arc<Mutex<Vec<(String, RecordType)>>>,
}

impl NameServer {
    async fn start(ttl_seconds: u32) -> NameServer {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let server = NameServer {
            addr: socket.local_addr().unwrap(),
            answers: Arc::default(),
            ttl: Arc::new(AtomicU32::new(ttl_seconds)),
            queries: Arc::default(),
        };
        let (answers, ttl, queries) = (
            server.answers.clone(),
            server.ttl.clone(),
            server.queries.clone(),
        );
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
                let Ok(request) = Message::from_vec(&buffer[..len]) else {
                    continue;
                };
                let Some(query) = request.queries.first().cloned() else {
                    continue;
                };
                let name = query.name().to_ascii().trim_end_matches('.').to_lowercase();
                queries
                    .lock()
                    .unwrap()
                    .push((name.clone(), query.query_type()));
                let ttl = ttl.load(Ordering::SeqCst);
                let address = answers.lock().unwrap().get(&name).copied();
                let mut response = Message::response(request.metadata.id, OpCode::Query);
                response.metadata.recursion_desired = request.metadata.recursion_desired;
                response.metadata.recursion_available = true;
                response.add_query(query.clone());
                match (address, query.query_type()) {
                    (Some(ip), RecordType::A) => {
                        let record = Record::from_rdata(query.name().clone(), ttl, RData::A(A(ip)));
                        response.add_answer(record);
                    }
                    (found, _) => {
                        if found.is_none() {
                            response.metadata.response_code = ResponseCode::NXDomain;
                        }
                        response.add_authority(soa(ttl));
                    }
                }
                let _ = socket.send_to(&response.to_vec().unwrap(), from).await;
            }
        });
        server
    }

    fn answer(&self, name: &str, ip: [u8; 4]) {
        self.answers
            .lock()
            .unwrap()
            .insert(name.to_string(), Ipv4Addr::from(ip));
    }

    /// How many A queries for `name` reached this server.
    fn a_queries(&self, name: &str) -> usize {
        let queries = self.queries.lock().unwrap();
        let asked = |(n, t): &&(String, RecordType)| n == name && *t == RecordType::A;
        queries.iter().filter(asked).count()
    }

    /// How many queries of any name and type reached this server.
    fn all_queries(&self) -> usize {
        self.queries.lock().unwrap().len()
    }
}

/// The zone's SOA, whose TTL and minimum make a negative answer live `ttl` seconds.
fn soa(ttl: u32) -> Record {
    let zone = Name::from_ascii("test.").unwrap();
    let data = SOA::new(
        Name::from_ascii("ns.test.").unwrap(),
        Name::from_ascii("admin.test.").unwrap(),
        1,
        3600,
        600,
        86400,
        ttl,
    );
    Record::from_rdata(zone, ttl, RData::SOA(data))
}

/// A gate granting `grants`, resolving through `server`, with no connection kept idle (each
/// request would open its own connection, so each one runs the address check).
fn gate(server: &NameServer, grants: &[&str]) -> Arc<EgressGate> {
    let config = EgressConfig {
        allow: grants.iter().map(|grant| grant.parse().unwrap()).collect(),
        pool: PoolLimits {
            max_idle_per_host: 0,
            ..PoolLimits::default()
        },
        budget: RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        name_server: Some(server.addr),
        ..EgressConfig::default()
    };
    EgressGate::new(config, Arc::new(Metrics::default()))
}

/// A name server answering `name` with `ip` for `ttl_seconds`, a gate granting
/// `http://{name}:9`, and the URL of a request to it.
async fn one_name(
    name: &str,
    ip: [u8; 4],
    ttl_seconds: u32,
) -> (NameServer, Arc<EgressGate>, String) {
    let server = NameServer::start(ttl_seconds).await;
    server.answer(name, ip);
    let gate = gate(&server, &[&format!("http://{name}:9")]);
    (server, gate, format!("http://{name}:9/"))
}

/// Send a request to `url` through `gate` from the host side; the error if it fails.
async fn send(gate: &Arc<EgressGate>, url: &str) -> Result<(), SendError> {
    let caller = Arc::new(Caller {
        provider: "resolving".into(),
        version: "sha256:0123456789ab".into(),
    });
    let request = http::Request::get(url).body(bytes::Bytes::new()).unwrap();
    gate.send(caller, request).await.map(drop)
}

/// Why the gate refused a request to `url`, which it must refuse (from its audit record).
async fn refusal(gate: &Arc<EgressGate>, url: &str) -> String {
    assert!(send(gate, url).await.is_err(), "{url} was not refused");
    gate.audit().recent().pop().unwrap().denied.unwrap()
}

#[tokio::test]
async fn an_answer_is_asked_once_per_ttl_and_again_after_it() {
    let (server, gate, url) = one_name("api.cache.test", [127, 0, 0, 1], 1).await;
    let inward = "http://api.cache.test:9 resolves to 127.0.0.1, a loopback address";

    for _ in 0..2 {
        let refused = refusal(&gate, &url).await;
        assert!(refused.starts_with(inward), "{refused}");
    }
    assert_eq!(
        server.a_queries("api.cache.test"),
        1,
        "the second connection used the cache"
    );
    assert_eq!(
        server.all_queries(),
        2,
        "A, and AAAA whose empty answer is cached too"
    );

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refused = refusal(&gate, &url).await;
    assert!(refused.starts_with(inward), "{refused}");
    assert_eq!(
        server.a_queries("api.cache.test"),
        2,
        "asked again after the TTL"
    );
}

#[tokio::test]
async fn a_cached_answer_is_checked_again_on_every_new_connection() {
    let (server, gate, url) = one_name("moving.cache.test", [127, 0, 0, 1], 2).await;

    let refused = refusal(&gate, &url).await;
    assert!(
        refused.contains("resolves to 127.0.0.1, a loopback address"),
        "{refused}"
    );
    // The zone now points elsewhere inside; until the TTL ends the gate checks (and refuses)
    // the address it cached, on each new connection.
    server.answer("moving.cache.test", [10, 0, 0, 7]);
    for _ in 0..3 {
        let refused = refusal(&gate, &url).await;
        assert!(
            refused.contains("resolves to 127.0.0.1, a loopback address"),
            "{refused}"
        );
    }
    assert_eq!(server.a_queries("moving.cache.test"), 1);

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let refused = refusal(&gate, &url).await;
    assert!(
        refused.contains("resolves to 10.0.0.7, a private address"),
        "{refused}"
    );
    assert_eq!(server.a_queries("moving.cache.test"), 2);
}

#[tokio::test]
async fn the_cache_holds_no_more_answers_than_its_bound() {
    let server = NameServer::start(300).await;
    // Each name leaves two answers (A, and an empty AAAA): this is 400 answers over the bound.
    let names: Vec<String> = (0..DNS_CACHE_ANSWERS / 2 + 200)
        .map(|i| format!("n{i}.many.test"))
        .collect();
    for name in &names {
        server.answer(name, [127, 0, 0, 1]);
    }
    let gate = gate(&server, &["http://*.many.test:9"]);
    let refuse_all = async || {
        for name in &names {
            let refused = refusal(&gate, &format!("http://{name}:9/")).await;
            assert!(refused.contains("resolves to 127.0.0.1"), "{refused}");
        }
    };

    refuse_all().await;
    let first = server.all_queries();
    assert_eq!(first, names.len() * 2);
    refuse_all().await;
    // Within their TTL, only answers the bound pushed out are asked again: at least the 400
    // over it, less the few the cache may hold before it applies its evictions (it batches
    // up to 64 writes).
    let asked_again = server.all_queries() - first;
    let over_bound = names.len() * 2 - DNS_CACHE_ANSWERS as usize - 64;
    assert!(
        asked_again >= over_bound,
        "{asked_again} of {first} asked again"
    );
}

#[tokio::test]
async fn a_new_gate_starts_with_an_empty_cache() {
    let (server, old, url) = one_name("api.cache.test", [127, 0, 0, 1], 300).await;
    for _ in 0..2 {
        refusal(&old, &url).await;
    }
    assert_eq!(server.a_queries("api.cache.test"), 1);

    // A swap to a new provider version builds a new gate.
    let new = gate(&server, &["http://api.cache.test:9"]);
    refusal(&new, &url).await;
    assert_eq!(server.a_queries("api.cache.test"), 2);
}

#[tokio::test]
async fn a_name_that_does_not_exist_fails_as_a_dns_error_naming_it() {
    let server = NameServer::start(300).await;
    let gate = gate(&server, &["http://missing.cache.test:9"]);
    let error = send(&gate, "http://missing.cache.test:9/")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.starts_with("DNS error: rcode NXDOMAIN"), "{error}");
    let record = gate.audit().recent().pop().unwrap();
    assert_eq!(
        record.denied.as_deref(),
        Some("failed: missing.cache.test does not exist (the name server answered NXDOMAIN)")
    );
}

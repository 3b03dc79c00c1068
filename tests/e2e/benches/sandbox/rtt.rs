//! Egress at a 10 ms round trip: a TLS server on loopback behind a relay that holds every
//! chunk 5 ms in each direction, so each round trip costs what it costs to a nearby cloud
//! region, and handshakes and connection reuse show as they would there. And what SigV4
//! signing costs: the same form POST to that server on loopback, without the relay, signed
//! and not, in wall time and in CPU time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, HandshakeKind};
use wasm_ccm_host::contract::Node;
use wasm_ccm_host::egress::{
    AwsKeys, Caller, CredentialRule, EgressConfig, EgressGate, HostPattern, PoolLimits, RateBudget,
    SecretSource, SharedSecret, SigV4,
};
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::sandbox::SandboxConfig;

use super::{Stats, stats};
use e2e::{load, sandbox};

/// Requests in one measured run.
const REQUESTS: usize = 100;
/// Measured runs of each way of making them.
const ROUNDS: usize = 7;
/// Delay of every chunk in each direction.
const ONE_WAY: Duration = Duration::from_millis(5);
/// Requests of each way in the signing comparison.
const SIGNING_REQUESTS: usize = 5_000;
/// The form the signing comparison posts: an EC2 query's size.
const FORM: &str = "Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-0123456789abcdef0";

/// One row of the table: requests made one way (at 10 ms RTT, with the handshakes the server
/// saw; or on loopback, signed or not).
pub struct Row {
    pub name: String,
    pub stats: Stats,
}

/// Handshakes the TLS server completed, by kind.
#[derive(Default)]
struct Handshakes {
    full: AtomicUsize,
    resumed: AtomicUsize,
}

impl Handshakes {
    fn take(&self) -> (usize, usize) {
        (
            self.full.swap(0, Ordering::SeqCst),
            self.resumed.swap(0, Ordering::SeqCst),
        )
    }
}

/// A keep-alive HTTP/1.1 server over TLS for 127.0.0.1 answering a small JSON body; its
/// address, certificate and handshake counts.
async fn tls_server() -> (
    std::net::SocketAddr,
    CertificateDer<'static>,
    Arc<Handshakes>,
) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])
        .expect("self-signed certificate");
    let cert = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server certificate");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let handshakes = Arc::new(Handshakes::default());
    let counted = handshakes.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(socket).await else {
                    return;
                };
                match tls.get_ref().1.handshake_kind() {
                    Some(HandshakeKind::Resumed) => counted.resumed.fetch_add(1, Ordering::SeqCst),
                    _ => counted.full.fetch_add(1, Ordering::SeqCst),
                };
                let answer = hyper::service::service_fn(|_request| async {
                    let body = Full::new(Bytes::from_static(br#"{"id":"i-1","zone":"a"}"#));
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), answer)
                    .await;
            });
        }
    });
    (addr, cert, handshakes)
}

/// A TCP relay to `upstream` that delivers every chunk [`ONE_WAY`] after it arrived, in
/// both directions; its address.
async fn slow_relay(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(upstream).await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(delayed_copy(client_read, server_write));
            tokio::spawn(delayed_copy(server_read, client_write));
        }
    });
    addr
}

/// Copy `from` to `to`, each chunk [`ONE_WAY`] after it was read, in order.
async fn delayed_copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
) {
    let (chunks, mut pending) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = pending.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0
            || chunks
                .send((Instant::now() + ONE_WAY, buffer[..n].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(chunks);
    let _ = writer.await;
}

/// The native client: hyper over rustls (which resumes TLS sessions by default) that keeps
/// its connection for the next request when `reuse` is set, as a pooled client does with
/// sequential requests.
struct Native {
    tls: Arc<rustls::ClientConfig>,
    reuse: bool,
    kept: tokio::sync::Mutex<Option<SendRequest<Empty<Bytes>>>>,
}

impl Native {
    async fn get(&self, url: &hyper::Uri) {
        let mut kept = self.kept.lock().await;
        let mut sender = match kept.take() {
            Some(sender) => sender,
            None => self.connect(url).await,
        };
        if sender.ready().await.is_err() {
            sender = self.connect(url).await;
        }
        let request = hyper::Request::get(url.path())
            .header(
                hyper::header::HOST,
                url.authority().expect("authority").as_str(),
            )
            .body(Empty::new())
            .expect("request");
        let response = sender.send_request(request).await.expect("response");
        assert_eq!(response.status(), 200);
        response.into_body().collect().await.expect("body");
        if self.reuse {
            *kept = Some(sender);
        }
    }

    async fn connect(&self, url: &hyper::Uri) -> SendRequest<Empty<Bytes>> {
        let authority = url.authority().expect("authority").to_string();
        let tcp = TcpStream::connect(&authority).await.expect("connect");
        let ip: std::net::IpAddr = url.host().expect("host").parse().expect("IP");
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(ServerName::from(ip), tcp)
            .await
            .expect("TLS");
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        sender
    }
}

/// One way of making [`REQUESTS`] sequential requests.
type Run = Box<dyn Fn() -> std::pin::Pin<Box<dyn Future<Output = ()>>>>;

/// Measure each way of making 100 sequential requests to the TLS server at 10 ms RTT (when
/// `at_rtt`), then a form POST to it on loopback signed and not; the rows, and what they say
/// against the goals.
pub async fn measure(at_rtt: bool) -> (Vec<Row>, String) {
    let (server, cert, handshakes) = tls_server().await;
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    if at_rtt {
        let measured = at_round_trip(server, &cert, &handshakes).await;
        let median = |i: usize| measured[i].stats.median.as_secs_f64();
        summary.push(format!(
            "at 10 ms RTT (medians of 100 requests): pooled sandboxed provider {:+.1}% over the pooled native client; {:.1}x faster than a new connection each",
            (median(0) / median(2) - 1.0) * 100.0,
            median(1) / median(0),
        ));
        rows.extend(measured);
    }
    let measured = signing(server, &cert).await;
    let median = |i: usize| measured[i].stats.median.as_secs_f64();
    let more = |signed: usize, unsigned: usize| (median(signed) / median(unsigned) - 1.0) * 100.0;
    summary.push(format!(
        "SigV4 signing on loopback (medians): {:+.1}% on a request through the gate, host side; {:+.1}% on a sandboxed provider's call making it\n\
         in process CPU time per request (medians): {:+.1}% host side ({:+.1} µs); {:+.1}% on a provider's call ({:+.1} µs)",
        more(1, 0),
        more(3, 2),
        more(5, 4),
        (median(5) - median(4)) * 1e6,
        more(7, 6),
        (median(7) - median(6)) * 1e6,
    ));
    rows.extend(measured);
    (rows, summary.join("\n"))
}

async fn at_round_trip(
    server: std::net::SocketAddr,
    cert: &CertificateDer<'static>,
    handshakes: &Handshakes,
) -> Vec<Row> {
    let relay = slow_relay(server).await;
    let url = format!("https://{relay}/v1/instances/i-1");

    let egress = |pool: PoolLimits| EgressConfig {
        allow: vec![format!("https://{relay}").parse().expect("grant")],
        budget: RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        pool,
        extra_roots: vec![cert.clone()],
        ..EgressConfig::default()
    };
    let no_reuse = PoolLimits {
        max_idle_per_host: 0,
        ..PoolLimits::default()
    };
    let pooled = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::HOSTILE,
        egress(PoolLimits::default()),
        None,
    )
    .await
    .expect("hostile loads");
    let unpooled = load(
        &sandbox(SandboxConfig::default()),
        guest_builds::HOSTILE,
        egress(no_reuse),
        None,
    )
    .await
    .expect("hostile loads");
    let fetch = Node {
        name: format!("fetch-many:{REQUESTS}:{url}"),
        ..Node::default()
    };

    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).expect("root");
    let tls = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
    let native = |reuse: bool| Native {
        tls: tls.clone(),
        reuse,
        kept: tokio::sync::Mutex::new(None),
    };
    let (native_pooled, native_unpooled) = (native(true), native(false));

    let sandboxed = |provider: wasm_ccm_host::provider::Provider| -> Run {
        let (provider, fetch) = (Arc::new(provider), fetch.clone());
        Box::new(move || {
            let (provider, fetch) = (provider.clone(), fetch.clone());
            Box::pin(async move {
                let error = provider.instance_metadata(&fetch).await.expect_err("fails");
                assert!(
                    error
                        .to_string()
                        .contains(&format!("fetched {REQUESTS} times")),
                    "{error}"
                );
                let records = provider.egress().audit().recent();
                let last = &records[records.len() - REQUESTS..];
                assert!(last.iter().all(|r| r.status == Some(200)), "{last:?}");
            })
        })
    };
    let natively = |client: Native| -> Run {
        let (client, url) = (Arc::new(client), url.parse::<hyper::Uri>().expect("url"));
        Box::new(move || {
            let (client, url) = (client.clone(), url.clone());
            Box::pin(async move {
                for _ in 0..REQUESTS {
                    client.get(&url).await;
                }
            })
        })
    };
    let ways: Vec<(&str, Run)> = vec![
        ("sandboxed provider, pooled connections", sandboxed(pooled)),
        (
            "sandboxed provider, a new connection each",
            sandboxed(unpooled),
        ),
        ("native hyper client, pooled", natively(native_pooled)),
        (
            "native hyper client, a new connection each",
            natively(native_unpooled),
        ),
    ];

    // One unmeasured run each, then rounds in rotating order; handshakes are counted over
    // all runs of each way.
    let mut samples: Vec<Vec<Duration>> = ways.iter().map(|_| Vec::new()).collect();
    let mut counted = vec![(0, 0); ways.len()];
    for round in 0..=ROUNDS {
        for step in 0..ways.len() {
            let index = (round + step) % ways.len();
            handshakes.take();
            let started = Instant::now();
            (ways[index].1)().await;
            let elapsed = started.elapsed();
            let (full, resumed) = handshakes.take();
            counted[index].0 += full;
            counted[index].1 += resumed;
            if round > 0 {
                samples[index].push(elapsed);
            }
        }
    }
    ways.iter()
        .zip(samples)
        .zip(counted)
        .map(|(((name, _), samples), (full, resumed))| Row {
            name: format!(
                "{REQUESTS} requests at 10 ms RTT over TLS: {name} (TLS handshakes in {} requests: {full} full, {resumed} resumed)",
                (ROUNDS + 1) * REQUESTS
            ),
            stats: stats(samples),
        })
        .collect()
}

/// A form POST to the TLS server on loopback over pooled connections, unsigned and signed
/// (SigV4, keys in memory as a watched Secret's are): through the egress gate from the host
/// side, and made by a sandboxed provider. Rows of wall time per request, then rows of the
/// process's CPU time per request (client, gate and server: all in this process).
async fn signing(server: std::net::SocketAddr, cert: &CertificateDer<'static>) -> Vec<Row> {
    let url = format!("https://{server}");
    let target: HostPattern = url.parse().expect("grant");
    let unsigned = EgressConfig {
        allow: vec![target.clone()],
        budget: RateBudget {
            per_second: 1e6,
            burst: 1_000_000,
        },
        extra_roots: vec![cert.clone()],
        ..EgressConfig::default()
    };
    let secret = |name: &str, value: &str| {
        let secret = SharedSecret::new(format!("Secret bench/aws key {name}"), String::new());
        secret.set(Ok(value.to_string()));
        SecretSource::Shared(secret)
    };
    let keys = AwsKeys::from_sources(
        secret("AWS_ACCESS_KEY_ID", "AKIDBENCHMARK"),
        secret(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        ),
        None,
    );
    let sigv4 = SigV4::new(Some("us-east-1".into()), vec!["ec2".into()], keys).expect("rule");
    let signed = EgressConfig {
        credentials: vec![CredentialRule::aws_sigv4(target, sigv4).expect("rule")],
        ..unsigned.clone()
    };
    let caller = Arc::new(Caller {
        provider: "bench".into(),
        version: "host".into(),
    });
    let host_side = |config: EgressConfig| -> Run {
        let (gate, caller, url) = (
            EgressGate::new(config, Arc::new(Metrics::default())),
            caller.clone(),
            url.clone(),
        );
        Box::new(move || {
            let request = http::Request::post(format!("{url}/"))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(Bytes::from_static(FORM.as_bytes()))
                .expect("request");
            let (gate, caller) = (gate.clone(), caller.clone());
            Box::pin(async move {
                let (status, _) = gate.send(caller, request).await.expect("gate sends");
                assert_eq!(status, 200);
            })
        })
    };
    let provider = |config: EgressConfig| async {
        let provider = load(
            &sandbox(SandboxConfig::default()),
            guest_builds::HOSTILE,
            config,
            None,
        )
        .await
        .expect("hostile loads");
        let spec = serde_json::json!({
            "method": "POST",
            "url": format!("{url}/"),
            "headers": [["content-type", "application/x-www-form-urlencoded"]],
            "body": FORM,
        });
        let node = Node {
            name: format!("request:{spec}"),
            ..Node::default()
        };
        let provider = Arc::new(provider);
        Box::new(move || {
            let (provider, node) = (provider.clone(), node.clone());
            Box::pin(async move {
                let metadata = provider.instance_metadata(&node).await.expect("reports");
                let report = &metadata.additional_labels[0].1;
                assert!(report.contains(r#""status":200"#), "{report}");
            }) as std::pin::Pin<Box<dyn Future<Output = ()>>>
        }) as Run
    };
    let ways: Vec<(&str, Run)> = vec![
        (
            "a form POST through the egress gate, host side, unsigned",
            host_side(unsigned.clone()),
        ),
        (
            "the same POST signed (SigV4) by the gate",
            host_side(signed.clone()),
        ),
        (
            "a sandboxed provider's form POST (hostile request:), unsigned",
            provider(unsigned).await,
        ),
        (
            "the same provider's POST signed (SigV4) by the gate",
            provider(signed).await,
        ),
    ];
    let mut wall: Vec<Vec<Duration>> = ways.iter().map(|_| Vec::new()).collect();
    let mut cpu = wall.clone();
    for round in 0..SIGNING_REQUESTS + 100 {
        for step in 0..ways.len() {
            let index = (round + step) % ways.len();
            let (started, cpu_before) = (Instant::now(), cpu_time());
            (ways[index].1)().await;
            if round >= 100 {
                wall[index].push(started.elapsed());
                cpu[index].push(cpu_time().saturating_sub(cpu_before));
            }
        }
    }
    let rows = |samples: Vec<Vec<Duration>>, what: &str| -> Vec<Row> {
        ways.iter()
            .zip(samples)
            .map(|((name, _), samples)| Row {
                name: format!("loopback, pooled TLS{what}: {name}"),
                stats: stats(samples),
            })
            .collect()
    };
    let mut measured = rows(wall, "");
    measured.extend(rows(cpu, ", process CPU time"));
    measured
}

/// The process's CPU time so far: every thread's, the TLS server's included. Unlike wall
/// time, it does not grow while other processes hold the cores.
fn cpu_time() -> Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

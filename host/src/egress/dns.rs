//! Name resolution for the gate's new connections: one resolver per gate, so per provider
//! version (a swap starts with an empty cache), that keeps answers for their TTL within
//! bounds.
//!
//! The cache only saves round trips to the name server: the address check runs on every new
//! connection, on the answer as cached ([`super::transport::resolve_allowed`]), so a name
//! whose cached answer points inward is refused when the next connection is made.
//!
//! Answers are cached per query name and record type ([`DNS_CACHE_ANSWERS`] at most), a
//! positive one for its TTL but never longer than [`DNS_MAX_POSITIVE_TTL`]; a negative one
//! (`NXDOMAIN`, or no record of the type) for the zone's SOA negative TTL but never longer
//! than [`DNS_MAX_NEGATIVE_TTL`], and not at all without an SOA. Name servers are asked over
//! UDP only, with EDNS's 1232-byte payload, which is also the most of an answer read: the
//! name server of a granted domain cannot make one answer hold thousands of records (TCP
//! would take 64 KiB), so the cache is bounded in bytes too ([`DNS_MAX_ANSWER_BYTES`] an
//! answer). The name servers come from `/etc/resolv.conf` (its search domains are not used:
//! names are asked as absolute names), names in the hosts file (read when the gate is
//! built) are answered from it, and `localhost` always resolves to loopback.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolverConfig,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use wasmtime_wasi_http::Error;

use super::transport::ConnectRefusal;

/// Most DNS answers one gate keeps: one per query name and record type, so a name's A and
/// AAAA answers take two and 2048 hold at least 1024 names; the least used go first.
pub const DNS_CACHE_ANSWERS: u64 = 2048;

/// The most bytes of one DNS answer read: EDNS's payload size, over UDP alone.
pub const DNS_MAX_ANSWER_BYTES: u16 = 1232;

/// Longest a positive answer is kept, whatever its TTL: a cloud endpoint that moves is
/// followed within this time even when its records say a day.
pub const DNS_MAX_POSITIVE_TTL: Duration = Duration::from_secs(5 * 60);

/// Longest a negative answer is kept, whatever the zone's SOA says (up to a day is common):
/// a cloud endpoint created just after a failed lookup is reachable within this time.
pub const DNS_MAX_NEGATIVE_TTL: Duration = Duration::from_secs(60);

/// The DNS resolver of one gate, with its answer cache.
pub struct Resolver {
    inner: TokioResolver,
    /// Why the system configuration could not be read, for the message of every failed
    /// lookup (the resolver then knows no name server; the hosts file still answers).
    config_problem: Option<String>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("config_problem", &self.config_problem)
            .finish_non_exhaustive()
    }
}

/// A name server at `ip`:`port`, asked over UDP alone.
fn udp_only(ip: IpAddr, trust_negative_responses: bool, port: u16) -> NameServerConfig {
    let mut udp = ConnectionConfig::udp();
    udp.port = port;
    NameServerConfig::new(ip, trust_negative_responses, vec![udp])
}

impl Resolver {
    /// A resolver with an empty cache asking `name_server` over UDP, or the name servers of
    /// `/etc/resolv.conf` when it is `None`.
    pub fn new(name_server: Option<SocketAddr>) -> Self {
        let provider = TokioRuntimeProvider::default();
        let (mut builder, config_problem) = match name_server {
            Some(address) => {
                let config = ResolverConfig::from_name_servers(vec![udp_only(
                    address.ip(),
                    true,
                    address.port(),
                )]);
                (TokioResolver::builder_with_config(config, provider), None)
            }
            None => match hickory_resolver::system_conf::read_system_conf() {
                Ok((system, _)) => {
                    let servers = system
                        .name_servers()
                        .iter()
                        .map(|server| {
                            let port = server.connections.first().map_or(53, |c| c.port);
                            udp_only(server.ip, server.trust_negative_responses, port)
                        })
                        .collect();
                    let config = ResolverConfig::from_name_servers(servers);
                    (TokioResolver::builder_with_config(config, provider), None)
                }
                Err(err) => {
                    let problem = format!("/etc/resolv.conf could not be used: {err}");
                    tracing::warn!("egress DNS: {problem}; only the hosts file answers");
                    let config = ResolverConfig::from_name_servers(Vec::new());
                    let builder = TokioResolver::builder_with_config(config, provider);
                    (builder, Some(problem))
                }
            },
        };
        let options = builder.options_mut();
        options.edns0 = true;
        options.edns_payload_len = DNS_MAX_ANSWER_BYTES;
        options.cache_size = DNS_CACHE_ANSWERS;
        options.positive_max_ttl = Some(DNS_MAX_POSITIVE_TTL);
        options.negative_max_ttl = Some(DNS_MAX_NEGATIVE_TTL);
        // Both families are asked; IPv4 first, because connections are tried in order
        // without happy eyeballs, and most clusters reach clouds over IPv4.
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        let inner = match builder.build() {
            Ok(inner) => inner,
            // Without TLS or DNSSEC features, building only assembles parts; never panic.
            Err(err) => unreachable!("a plain UDP/TCP resolver failed to build: {err}"),
        };
        Resolver {
            inner,
            config_problem,
        }
    }

    /// The addresses of `host`, from the cache while its answer is fresh, asked as the
    /// absolute name it is (no search domain). An IP literal, or a name the system resolver
    /// reads as an IPv4 address (`2852039166`, `0xa9fea9fe`), is that address, without a
    /// query.
    pub async fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, ConnectRefusal> {
        if let Some(ip) = host
            .parse()
            .ok()
            .or_else(|| numeric_ipv4(host).map(IpAddr::V4))
        {
            return Ok(vec![ip]);
        }
        // The name granted is the name asked: absolute, so no search domain of the pod's
        // resolv.conf (`ndots:5`, `*.svc.cluster.local`) is tried first.
        let absolute = if host.ends_with('.') {
            host.to_string()
        } else {
            format!("{host}.")
        };
        match self.inner.lookup_ip(absolute.as_str()).await {
            Ok(found) => Ok(found.iter().collect()),
            Err(err) => Err(self.failed(host, err)),
        }
    }

    /// The refusal of a failed lookup of `host`, with the guest-visible code a failed
    /// system lookup had: a DNS error (its `rcode` the name server's answer, e.g.
    /// `NXDOMAIN`, where there is one), or a DNS timeout.
    fn failed(&self, host: &str, err: NetError) -> ConnectRefusal {
        let dns_error = |rcode: String| Error::DnsError {
            rcode: Some(rcode),
            info_code: None,
        };
        // The IANA mnemonic: `NXDOMAIN`, `SERVFAIL`, `NOERROR`.
        let mnemonic = |code: ResponseCode| format!("{code:?}").to_uppercase();
        let (code, message) = match &err {
            NetError::Timeout => (Error::DnsTimeout, format!("DNS lookup of {host} timed out")),
            NetError::Dns(DnsError::NoRecordsFound(none))
                if none.response_code == ResponseCode::NXDomain =>
            {
                let message = format!("{host} does not exist (the name server answered NXDOMAIN)");
                (dns_error(mnemonic(none.response_code)), message)
            }
            NetError::Dns(DnsError::NoRecordsFound(none)) => {
                let message = format!("{host} has no A or AAAA record");
                (dns_error(mnemonic(none.response_code)), message)
            }
            NetError::Dns(DnsError::ResponseCode(code)) => {
                let rcode = mnemonic(*code);
                let message =
                    format!("DNS lookup of {host} failed: the name server answered {rcode}");
                (dns_error(rcode), message)
            }
            other => {
                let message = format!("DNS lookup of {host} failed: {other}");
                (dns_error(other.to_string()), message)
            }
        };
        match &self.config_problem {
            Some(problem) => ConnectRefusal::Failed(code, format!("{message} ({problem})")),
            None => ConnectRefusal::Failed(code, message),
        }
    }
}

/// `host` as the system resolver's `inet_aton` reads it: one to four dot-separated numbers,
/// each decimal, octal (leading `0`) or hex (`0x`), the last filling the remaining bytes.
/// Such a name never reached DNS before the gate cached answers, and must not now.
fn numeric_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u32> = host
        .split('.')
        .map(|part| {
            let (digits, radix) = match part.strip_prefix("0x").or(part.strip_prefix("0X")) {
                Some(hex) => (hex, 16),
                None if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
                None => (part, 10),
            };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return None;
            }
            u32::from_str_radix(digits, radix).ok()
        })
        .collect::<Option<_>>()?;
    let (last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|&part| part > 255) {
        return None;
    }
    let last_bits = 32 - 8 * leading.len() as u32;
    if last_bits < 32 && *last >> last_bits != 0 {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |address, (index, &part)| {
            address | part << (24 - 8 * index as u32)
        });
    Some(Ipv4Addr::from(high | last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::proto::op::{Message, OpCode};

    /// A name server whose every answer is truncated (the TC bit: "ask again over TCP"), on
    /// UDP and TCP at one port: the resolver never asks over TCP, where one answer could
    /// hold 64 KiB of records for the cache to keep.
    #[tokio::test]
    async fn a_truncated_answer_is_never_asked_again_over_tcp() {
        // A free UDP port whose TCP twin is free too (another test may hold it).
        let mut tries = 0;
        let (udp, tcp) = loop {
            let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            match tokio::net::TcpListener::bind(udp.local_addr().unwrap()).await {
                Ok(tcp) => break (udp, tcp),
                Err(_) if tries < 20 => tries += 1,
                Err(error) => panic!("no port free for UDP and TCP both: {error}"),
            }
        };
        let address = udp.local_addr().unwrap();
        let tcp_connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = tcp_connections.clone();
        tokio::spawn(async move {
            while tcp.accept().await.is_ok() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        tokio::spawn(async move {
            let mut buffer = [0u8; 4096];
            while let Ok((length, from)) = udp.recv_from(&mut buffer).await {
                let Ok(request) = Message::from_vec(&buffer[..length]) else {
                    continue;
                };
                let mut response = Message::response(request.metadata.id, OpCode::Query);
                response.metadata.truncation = true;
                if let Some(query) = request.queries.first() {
                    response.add_query(query.clone());
                }
                let _ = udp.send_to(&response.to_vec().unwrap(), from).await;
            }
        });
        let resolver = Resolver::new(Some(address));
        let answer = resolver.lookup("many-records.example").await;
        assert!(
            answer.as_ref().map_or(true, Vec::is_empty),
            "a truncated answer carries nothing: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            tcp_connections.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "never asked over TCP"
        );
    }

    #[test]
    fn names_the_system_resolver_reads_as_ipv4_addresses_are_addresses() {
        let metadata = Some(Ipv4Addr::new(169, 254, 169, 254));
        for name in [
            "2852039166",
            "0xa9fea9fe",
            "0XA9FEA9FE",
            "169.254.43518",
            "169.16689662",
            "0251.0376.0251.0376",
            "169.254.169.254",
        ] {
            assert_eq!(numeric_ipv4(name), metadata, "{name}");
        }
        assert_eq!(numeric_ipv4("127.1"), Some(Ipv4Addr::new(127, 0, 0, 1)));
        assert_eq!(numeric_ipv4("0"), Some(Ipv4Addr::UNSPECIFIED));
        for name in [
            "api.example.com",
            "1.2.3.4.5",
            "256.1.1.1",
            "1.2.3.256",
            "1.2.65536",
            "4294967296",
            "08",
            "0x",
            "1..2",
            "",
            "1e3",
            "+1",
        ] {
            assert_eq!(numeric_ipv4(name), None, "{name}");
        }
    }
}

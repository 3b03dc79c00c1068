//! Which addresses are inside the cluster's or the cloud's own network, and so never reached
//! through a name: private, loopback, link-local, shared (carrier-grade NAT) and reserved
//! ranges; the fixed addresses where cloud platforms serve instance metadata (and with it
//! the node's credentials) and run their own infrastructure; and IPv6 addresses that carry
//! an IPv4 address (IPv4-mapped and -compatible, NAT64, 6to4, Teredo, ISATAP), whose IPv4
//! address is checked by the same rules: a NAT64 gateway turns `64:ff9b::a9fe:a9fe` into
//! a connection to 169.254.169.254.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A cloud metadata service: where a cloud answers an instance's (or a pod's) requests for
/// its identity and credentials.
const METADATA: &str = "cloud metadata address";
/// A cloud platform's own infrastructure service on a fixed address.
const PLATFORM: &str = "cloud platform address";

/// The fixed IPv4 addresses of cloud metadata and platform services, and what serves there.
const PLATFORM_V4: [(Ipv4Addr, &str, &str); 8] = [
    (
        Ipv4Addr::new(169, 254, 169, 254),
        METADATA,
        "instance metadata of AWS, GCP (metadata.google.internal), Azure, Oracle Cloud, OpenStack and DigitalOcean",
    ),
    (
        Ipv4Addr::new(169, 254, 170, 2),
        METADATA,
        "AWS ECS task metadata and credentials",
    ),
    (
        Ipv4Addr::new(169, 254, 170, 23),
        METADATA,
        "AWS EKS Pod Identity credentials",
    ),
    (
        Ipv4Addr::new(100, 100, 100, 200),
        METADATA,
        "Alibaba Cloud instance metadata",
    ),
    (
        Ipv4Addr::new(192, 0, 0, 192),
        METADATA,
        "Oracle Cloud legacy instance metadata",
    ),
    (
        Ipv4Addr::new(168, 63, 129, 16),
        PLATFORM,
        "Azure WireServer and DNS",
    ),
    (Ipv4Addr::new(169, 254, 169, 123), PLATFORM, "AWS Time Sync"),
    (
        Ipv4Addr::new(169, 254, 169, 253),
        PLATFORM,
        "AWS DNS resolver",
    ),
];

/// The fixed IPv6 addresses of cloud metadata and platform services.
const PLATFORM_V6: [(Ipv6Addr, &str, &str); 5] = [
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
        METADATA,
        "AWS instance metadata over IPv6",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
        METADATA,
        "AWS EKS Pod Identity credentials over IPv6",
    ),
    (
        Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
        METADATA,
        "GCP metadata server over IPv6",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123),
        PLATFORM,
        "AWS Time Sync over IPv6",
    ),
    (
        Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253),
        PLATFORM,
        "AWS DNS resolver over IPv6",
    ),
];

/// Host names that only ever name a cloud metadata service.
const METADATA_NAMES: [(&str, &str); 1] = [("metadata.google.internal", "GCP metadata server")];

/// Why an address is internal: what it is, or what the IPv4 address it carries is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Internal {
    /// What the address (or the IPv4 address it carries) is, e.g. `loopback address`; shown
    /// after `a`.
    pub kind: &'static str,
    /// For a cloud service address: which one, e.g. `Azure WireServer and DNS`.
    pub service: Option<&'static str>,
    /// The IPv4 address an IPv6 address carries, and how, when that is what is internal.
    pub carried: Option<(Carrier, Ipv4Addr)>,
}

impl fmt::Display for Internal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((carrier, v4)) = self.carried {
            write!(f, "{carrier} address carrying {v4}, ")?;
        }
        write!(f, "a {}", self.kind)?;
        if let Some(service) = self.service {
            write!(f, " ({service})")?;
        }
        Ok(())
    }
}

/// How an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// `::ffff:a.b.c.d`.
    Mapped,
    /// `::a.b.c.d` (deprecated, still routed by some stacks).
    Compatible,
    /// The NAT64 well-known prefix `64:ff9b::/96` (RFC 6052).
    Nat64,
    /// A local-use NAT64 prefix inside `64:ff9b:1::/48` (RFC 8215).
    LocalNat64,
    /// `2002::/16`: the 6to4 relay's IPv4 address in bits 16 to 48 (RFC 3056).
    SixToFour,
    /// `2001::/32`: the Teredo server's IPv4 address in bits 32 to 64 (RFC 4380).
    TeredoServer,
    /// `2001::/32`: the Teredo client's IPv4 address, inverted, in the last 32 bits.
    TeredoClient,
    /// An ISATAP interface identifier (`…:0:5efe:a.b.c.d`, RFC 5214).
    Isatap,
}

impl fmt::Display for Carrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Carrier::Mapped => "an IPv4-mapped",
            Carrier::Compatible => "an IPv4-compatible",
            Carrier::Nat64 => "a NAT64 (64:ff9b::/96)",
            Carrier::LocalNat64 => "a local-use NAT64 (64:ff9b:1::/48)",
            Carrier::SixToFour => "a 6to4 (2002::/16)",
            Carrier::TeredoServer => "a Teredo (2001::/32) server",
            Carrier::TeredoClient => "a Teredo (2001::/32) client",
            Carrier::Isatap => "an ISATAP",
        })
    }
}

/// Why `ip` is inside a network no provider may reach by name, or `None` if it is public.
pub fn internal(ip: IpAddr) -> Option<Internal> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4).map(|(kind, service)| Internal {
            kind,
            service,
            carried: None,
        }),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

/// The cloud metadata or platform service at `ip` (or at the IPv4 address it carries):
/// what it is and which one. A grant naming one is refused unless the operator allows it.
pub fn platform_service(ip: IpAddr) -> Option<Internal> {
    internal(ip).filter(|internal| internal.service.is_some())
}

/// The metadata service a host name always names, e.g. `metadata.google.internal`.
pub fn metadata_name(name: &str) -> Option<&'static str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    METADATA_NAMES
        .iter()
        .find(|(known, _)| name.eq_ignore_ascii_case(known))
        .map(|(_, service)| *service)
}

fn internal_v4(ip: Ipv4Addr) -> Option<(&'static str, Option<&'static str>)> {
    if let Some((_, kind, service)) = PLATFORM_V4.iter().find(|(known, ..)| *known == ip) {
        return Some((kind, Some(service)));
    }
    let [a, b, c, _] = ip.octets();
    let kind = if ip.is_loopback() {
        "loopback address"
    } else if ip.is_private() {
        "private address"
    } else if ip.is_link_local() {
        "link-local address"
    } else if ip.is_unspecified() || a == 0 {
        "unspecified address"
    } else if a == 100 && (64..128).contains(&b) {
        "shared (carrier-grade NAT) address"
    } else if a == 192 && b == 0 && c == 0 {
        "reserved IETF protocol assignment address"
    } else if ip.is_broadcast() || ip.is_multicast() || a >= 240 {
        "broadcast, multicast or reserved address"
    } else {
        return None;
    };
    Some((kind, None))
}

fn internal_v6(ip: Ipv6Addr) -> Option<Internal> {
    let own = |kind, service| {
        Some(Internal {
            kind,
            service,
            carried: None,
        })
    };
    if let Some((_, kind, service)) = PLATFORM_V6.iter().find(|(known, ..)| *known == ip) {
        return own(kind, Some(service));
    }
    let first = ip.segments()[0];
    if ip.is_loopback() {
        return own("loopback address", None);
    }
    if ip.is_unspecified() {
        return own("unspecified address", None);
    }
    if first & 0xfe00 == 0xfc00 {
        return own("unique-local (private) address", None);
    }
    if first & 0xffc0 == 0xfe80 {
        return own("link-local address", None);
    }
    if first & 0xffc0 == 0xfec0 {
        return own("site-local (private) address", None);
    }
    if ip.is_multicast() {
        return own("multicast address", None);
    }
    carried_v4(ip).into_iter().find_map(|(carrier, v4)| {
        internal_v4(v4).map(|(kind, service)| Internal {
            kind,
            service,
            carried: Some((carrier, v4)),
        })
    })
}

/// The IPv4 addresses `ip` carries, each with how; more than one for Teredo (server and
/// client) and for a local-use NAT64 prefix, whose length (and so where the IPv4 address
/// sits, RFC 6052 section 2.2) the address alone does not tell. The answer checks hold such
/// an address's IPv4 addresses to their own rules.
pub fn carried_v4(ip: Ipv6Addr) -> Vec<(Carrier, Ipv4Addr)> {
    let b = ip.octets();
    let v4 = |o: [u8; 4]| Ipv4Addr::from(o);
    let last = v4([b[12], b[13], b[14], b[15]]);
    let s = ip.segments();
    if s[..5] == [0; 5] && s[5] == 0xffff {
        return vec![(Carrier::Mapped, last)];
    }
    if s[..6] == [0; 6] {
        return vec![(Carrier::Compatible, last)];
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return vec![(Carrier::Nat64, last)];
    }
    if s[..3] == [0x64, 0xff9b, 1] {
        // The positions of prefixes /48, /56, /64 and /96 (bits 64 to 72 are skipped). A
        // position the prefix does not use holds zeros, read as 0.0.0.0/8, which no NAT64
        // translates to: those candidates are left out, so a public address is not refused
        // for the zeros beside it.
        return [
            [b[6], b[7], b[9], b[10]],
            [b[7], b[9], b[10], b[11]],
            [b[9], b[10], b[11], b[12]],
            [b[12], b[13], b[14], b[15]],
        ]
        .into_iter()
        .filter(|candidate| candidate[0] != 0)
        .map(|candidate| (Carrier::LocalNat64, v4(candidate)))
        .collect();
    }
    if s[0] == 0x2002 {
        return vec![(Carrier::SixToFour, v4([b[2], b[3], b[4], b[5]]))];
    }
    if s[..2] == [0x2001, 0] {
        let client = v4([!b[12], !b[13], !b[14], !b[15]]);
        return vec![
            (Carrier::TeredoServer, v4([b[4], b[5], b[6], b[7]])),
            (Carrier::TeredoClient, client),
        ];
    }
    if (b[8] | 0x02) == 0x02 && b[9..12] == [0, 0x5e, 0xfe] {
        return vec![(Carrier::Isatap, last)];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(ip: &str) -> Option<String> {
        internal(ip.parse().unwrap()).map(|internal| internal.to_string())
    }

    #[test]
    fn private_loopback_link_local_and_reserved_addresses_are_internal() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "192.0.0.8",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(reason(ip).is_some(), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "198.51.100.7",
            "2606:4700::1111",
            "8.8.8.8",
        ] {
            assert_eq!(reason(ip), None, "{ip}");
        }
    }

    /// Each cloud's metadata and platform addresses, and what the refusal calls them.
    #[test]
    fn every_clouds_metadata_and_platform_addresses_are_internal() {
        for (cloud, ip, said) in [
            (
                "AWS",
                "169.254.169.254",
                "cloud metadata address (instance metadata of AWS",
            ),
            (
                "AWS IPv6",
                "fd00:ec2::254",
                "cloud metadata address (AWS instance metadata over IPv6)",
            ),
            (
                "AWS ECS",
                "169.254.170.2",
                "cloud metadata address (AWS ECS task metadata",
            ),
            (
                "AWS EKS Pod Identity",
                "169.254.170.23",
                "cloud metadata address (AWS EKS Pod Identity",
            ),
            (
                "AWS EKS Pod Identity IPv6",
                "fd00:ec2::23",
                "cloud metadata address (AWS EKS Pod Identity credentials over IPv6)",
            ),
            (
                "AWS time sync",
                "169.254.169.123",
                "cloud platform address (AWS Time Sync)",
            ),
            (
                "AWS time sync IPv6",
                "fd00:ec2::123",
                "cloud platform address (AWS Time Sync over IPv6)",
            ),
            (
                "AWS DNS",
                "169.254.169.253",
                "cloud platform address (AWS DNS resolver)",
            ),
            (
                "AWS DNS IPv6",
                "fd00:ec2::253",
                "cloud platform address (AWS DNS resolver over IPv6)",
            ),
            ("GCP", "169.254.169.254", "GCP (metadata.google.internal)"),
            (
                "GCP IPv6",
                "fd20:ce::254",
                "cloud metadata address (GCP metadata server over IPv6)",
            ),
            ("Azure", "169.254.169.254", "Azure"),
            (
                "Azure WireServer",
                "168.63.129.16",
                "cloud platform address (Azure WireServer and DNS)",
            ),
            (
                "Alibaba",
                "100.100.100.200",
                "cloud metadata address (Alibaba Cloud instance metadata)",
            ),
            ("Oracle", "169.254.169.254", "Oracle Cloud"),
            (
                "Oracle legacy",
                "192.0.0.192",
                "cloud metadata address (Oracle Cloud legacy instance metadata)",
            ),
            ("OpenStack", "169.254.169.254", "OpenStack"),
            ("DigitalOcean", "169.254.169.254", "DigitalOcean"),
        ] {
            let said_here = reason(ip).unwrap_or_else(|| panic!("{cloud}: {ip} is not internal"));
            assert!(said_here.contains(said), "{cloud}: {ip}: {said_here}");
            assert!(
                platform_service(ip.parse().unwrap()).is_some(),
                "{cloud}: {ip} is a platform service"
            );
        }
        assert_eq!(
            metadata_name("metadata.google.internal"),
            Some("GCP metadata server")
        );
        assert_eq!(
            metadata_name("Metadata.Google.Internal."),
            Some("GCP metadata server")
        );
        assert_eq!(metadata_name("compute.googleapis.com"), None);
        assert_eq!(
            platform_service("10.0.0.1".parse().unwrap()),
            None,
            "private, no service"
        );
    }

    #[test]
    fn ipv4_carried_in_ipv6_is_checked_by_the_ipv4_rules() {
        for (ip, said) in [
            (
                "::ffff:169.254.169.254",
                "an IPv4-mapped address carrying 169.254.169.254, a cloud metadata address",
            ),
            (
                "::ffff:10.0.0.1",
                "an IPv4-mapped address carrying 10.0.0.1, a private address",
            ),
            (
                "::10.0.0.1",
                "an IPv4-compatible address carrying 10.0.0.1, a private address",
            ),
            (
                "64:ff9b::a9fe:a9fe",
                "a NAT64 (64:ff9b::/96) address carrying 169.254.169.254, a cloud metadata address",
            ),
            (
                "64:ff9b::a83f:8110",
                "a NAT64 (64:ff9b::/96) address carrying 168.63.129.16, a cloud platform address (Azure WireServer and DNS)",
            ),
            ("64:ff9b::7f00:1", "carrying 127.0.0.1, a loopback address"),
            (
                "64:ff9b::6464:64c8",
                "carrying 100.100.100.200, a cloud metadata address (Alibaba",
            ),
            // Local-use NAT64 with a /96, /64, /56 and /48 prefix (RFC 6052 positions).
            (
                "64:ff9b:1::a9fe:a9fe",
                "a local-use NAT64 (64:ff9b:1::/48) address carrying 169.254.169.254",
            ),
            ("64:ff9b:1:0:00a9:fea9:fe00::", "carrying 169.254.169.254"),
            ("64:ff9b:1:00a9:00fe:a9fe::", "carrying 169.254.169.254"),
            ("64:ff9b:1:a9fe:a9:fe00::", "carrying 169.254.169.254"),
            (
                "2002:a9fe:a9fe::1",
                "a 6to4 (2002::/16) address carrying 169.254.169.254",
            ),
            (
                "2002:c0a8:101::",
                "a 6to4 (2002::/16) address carrying 192.168.1.1, a private address",
            ),
            (
                "2001:0:a9fe:a9fe::1",
                "a Teredo (2001::/32) server address carrying 169.254.169.254",
            ),
            // The client's IPv4 address is stored inverted: !10.0.0.1 = f5ff:fffe.
            (
                "2001:0:5db8:d822:0:0:f5ff:fffe",
                "a Teredo (2001::/32) client address carrying 10.0.0.1, a private address",
            ),
            (
                "2001:db8:1:2:0:5efe:a9fe:a9fe",
                "an ISATAP address carrying 169.254.169.254",
            ),
            (
                "2001:db8:1:2:200:5efe:7f00:1",
                "an ISATAP address carrying 127.0.0.1",
            ),
        ] {
            let said_here = reason(ip).unwrap_or_else(|| panic!("{ip} is not internal"));
            assert!(said_here.contains(said), "{ip}: {said_here}");
        }
        assert!(platform_service("64:ff9b::a9fe:a9fe".parse().unwrap()).is_some());
        for public in [
            "::ffff:93.184.216.34",
            "64:ff9b::5db8:d822",
            "64:ff9b:1::5db8:d822",
            "64:ff9b:1:5db8:d8:2200::",
            "2002:5db8:d822::1",
            // Teredo server 93.184.216.34, client 8.8.8.8 (inverted f7f7:f7f7).
            "2001:0:5db8:d822::f7f7:f7f7",
            "2001:db8:1:2:0:5efe:5db8:d822",
        ] {
            assert_eq!(reason(public), None, "{public}");
        }
    }
}

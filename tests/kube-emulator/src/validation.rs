//! The syntax checks of apimachinery's `util/validation`: DNS names,
//! qualified names, label values, IPs and CIDRs. Each returns the list of
//! messages Go would return, so callers build identical field errors.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

pub const DNS1123_LABEL_MAX: usize = 63;
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = msg.to_owned();
    if !examples.is_empty() {
        let quoted: Vec<String> = examples.iter().map(|e| format!("'{e}'")).collect();
        out.push_str(&format!(" (e.g. {}, ", quoted.join(",  or ")));
    } else {
        out.push_str(" (");
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn dns1123_label_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

/// `IsDNS1123Label`: a lowercase RFC 1123 label, at most 63 characters.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !dns1123_label_ok(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`: dot-separated RFC 1123 labels, at most 253 characters.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !s.split('.').all(dns1123_label_ok) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`: like a 1123 label but starting with a letter.
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    let ok = dns1123_label_ok(s) && s.as_bytes()[0].is_ascii_lowercase();
    if !ok {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

fn qualified_name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.')
}

/// `IsQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name
/// of at most 63 characters.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                for msg in dns1123_subdomain(prefix) {
                    errs.push(format!("prefix part {msg}"));
                }
            }
            *name
        }
        _ => {
            errs.push(regex_error(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            ) + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > DNS1123_LABEL_MAX {
        errs.push(format!("name part {}", max_len_error(DNS1123_LABEL_MAX)));
    }
    if !qualified_name_part_ok(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"],
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or a qualified-name part of at most 63 characters.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !value.is_empty() && !qualified_name_part_ok(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsConfigMapKey`: the keys of ConfigMap and Secret data.
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.');
    if !ok {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errs.push("must not be '.'".to_owned());
    } else if value == ".." {
        errs.push("must not be '..'".to_owned());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_owned());
    }
    errs
}

/// `ValidatePathSegmentName`: what every object name must satisfy to be
/// usable in a URL.
pub fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    let mut errs = Vec::new();
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// `netutils.ParseIPSloppy`, which every IP field of the v1.32 API is
/// validated with: Go's `net.ParseIP` from before Go 1.17, so IPv4 octets
/// may have leading zeros (`010.0.0.1` is 10.0.0.1).
pub fn parse_ip_sloppy(value: &str) -> Option<IpAddr> {
    match value.bytes().find(|c| *c == b'.' || *c == b':')? {
        b'.' => parse_ipv4_sloppy(value).map(IpAddr::V4),
        _ => {
            if let Ok(v6) = value.parse::<Ipv6Addr>() {
                return Some(IpAddr::V6(v6));
            }
            // An embedded IPv4 tail (`::ffff:010.0.0.1`) is parsed sloppily too.
            let (head, tail) = value.rsplit_once(':')?;
            let v4 = parse_ipv4_sloppy(tail)?;
            format!("{head}:{v4}")
                .parse::<Ipv6Addr>()
                .ok()
                .map(IpAddr::V6)
        }
    }
}

fn parse_ipv4_sloppy(value: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = value.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 10 || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        *octet = u8::try_from(part.parse::<u64>().ok()?).ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// `IsValidIP`: anything `ParseIPSloppy` accepts.
pub fn ip(value: &str) -> Vec<String> {
    match parse_ip_sloppy(value) {
        Some(_) => Vec::new(),
        None => vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_owned()],
    }
}

/// `IsValidCIDR`: a CIDR such as `10.0.0.0/8`, parsed as `ParseCIDRSloppy` does.
pub fn cidr(value: &str) -> Vec<String> {
    let bad = || vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".to_owned()];
    let Some((addr, bits)) = value.split_once('/') else {
        return bad();
    };
    let Some(addr) = parse_ip_sloppy(addr) else {
        return bad();
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match bits.parse::<u8>() {
        Ok(b) if b <= max && !bits.starts_with('+') => Vec::new(),
        _ => bad(),
    }
}

/// The address family of a CIDR `cidr` accepts, if it does.
pub fn cidr_is_ipv6(value: &str) -> Option<bool> {
    if !cidr(value).is_empty() {
        return None;
    }
    let (addr, _) = value.split_once('/')?;
    parse_ip_sloppy(addr).map(|ip| ip.is_ipv6())
}

/// `ValidateNonSpecialIP` (external IPs): no unspecified, loopback or
/// link-local address.
pub fn non_special_ip(value: &str) -> Vec<String> {
    let Some(ip) = parse_ip_sloppy(value) else {
        return vec!["must be a valid IP address".to_owned()];
    };
    // Go's net.IP treats an IPv4-mapped IPv6 address as IPv4.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (
                v4.is_unspecified(),
                v4.is_loopback(),
                v4.is_link_local(),
                o[0] == 224 && o[1] == 0 && o[2] == 0,
            )
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            (
                v6.is_unspecified(),
                v6.is_loopback(),
                s[0] & 0xffc0 == 0xfe80,
                s[0] & 0xff0f == 0xff02,
            )
        }
    };
    let mut errs = Vec::new();
    if unspecified {
        errs.push(format!("may not be unspecified ({value})"));
    }
    if loopback {
        errs.push("may not be in the loopback range (127.0.0.0/8, ::1/128)".to_owned());
    }
    if link_local {
        errs.push("may not be in the link-local range (169.254.0.0/16, fe80::/10)".to_owned());
    }
    if link_local_multicast {
        errs.push(
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".to_owned(),
        );
    }
    errs
}

/// Why Go's strict `netip.ParseAddr` refuses `value` (its error text), if
/// it does: the addresses the sloppy parser still accepts but a future
/// Kubernetes release will not. IPv6 errors are reported generically.
fn netip_parse_addr_error(value: &str) -> Option<String> {
    let quoted = crate::status::quote(value);
    let fail = |msg: &str| Some(format!("ParseAddr({quoted}): {msg}"));
    match value.bytes().find(|c| matches!(c, b'.' | b':' | b'%')) {
        Some(b'.') => ipv4_fields_error(value).and_then(|msg| fail(&msg)),
        Some(b':') => {
            if value.parse::<Ipv6Addr>().is_ok() {
                return None;
            }
            if let Some((_, tail)) = value.rsplit_once(':')
                && tail.contains('.')
                && let Some(msg) = ipv4_fields_error(tail)
            {
                return fail(&msg);
            }
            fail("unable to parse IP")
        }
        Some(_) => fail("missing IPv6 address"),
        None => fail("unable to parse IP"),
    }
}

/// `netip.parseIPv4Fields`: the first thing wrong with a dotted quad.
fn ipv4_fields_error(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let (mut val, mut digits, mut dots) = (0u32, 0, 0);
    for (i, &c) in b.iter().enumerate() {
        if c.is_ascii_digit() {
            if digits == 1 && val == 0 {
                return Some("IPv4 field has octet with leading zero".to_owned());
            }
            val = val * 10 + u32::from(c - b'0');
            digits += 1;
            if val > 255 {
                return Some("IPv4 field has value >255".to_owned());
            }
        } else if c == b'.' {
            if i == 0 || i == b.len() - 1 || b[i - 1] == b'.' {
                return Some(format!(
                    "IPv4 field must have at least one digit (at {})",
                    crate::status::quote(&s[i..])
                ));
            }
            if dots == 3 {
                return Some("IPv4 address too long".to_owned());
            }
            dots += 1;
            val = 0;
            digits = 0;
        } else {
            return Some(format!(
                "unexpected character (at {})",
                crate::status::quote(&s[i..])
            ));
        }
    }
    (dots < 3).then(|| "IPv4 address too short".to_owned())
}

/// The warning a v1.32 server attaches to an IP field it accepted but that
/// is not in canonical form (`getWarningsForIP`, `pkg/api/service`).
pub fn ip_warning(path: &str, value: &str) -> Option<String> {
    if let Some(err) = netip_parse_addr_error(value) {
        return Some(format!(
            "{path}: IP address was accepted, but will be invalid in a future Kubernetes release: {err}"
        ));
    }
    let canonical = value.parse::<Ipv6Addr>().ok()?.to_string();
    (canonical != value).then(|| {
        format!(
            "{path}: IPv6 address {} is not in RFC 5952 canonical format ({}), which may cause controller apply-loops",
            crate::status::quote(value),
            crate::status::quote(&canonical)
        )
    })
}

/// The warning for a CIDR field (`getWarningsForCIDR`), as for IPs with
/// `netip.ParsePrefix`'s errors.
pub fn cidr_warning(path: &str, value: &str) -> Option<String> {
    let quoted = crate::status::quote(value);
    let accepted = |msg: String| {
        Some(format!(
            "{path}: IP prefix was accepted, but will be invalid in a future Kubernetes release: netip.ParsePrefix({quoted}): {msg}"
        ))
    };
    let Some((addr, bits)) = value.rsplit_once('/') else {
        return accepted("no '/'".to_owned());
    };
    if let Some(err) = netip_parse_addr_error(addr) {
        return accepted(err);
    }
    let leading = bits.len() > 1 && !bits.starts_with(|c: char| ('1'..='9').contains(&c));
    let Ok(n) = bits.parse::<u32>() else {
        return accepted(format!(
            "bad bits after slash: {}",
            crate::status::quote(bits)
        ));
    };
    if leading || bits.starts_with('+') {
        return accepted(format!(
            "bad bits after slash: {}",
            crate::status::quote(bits)
        ));
    }
    let v6 = addr.parse::<Ipv6Addr>().ok();
    if n > if v6.is_some() { 128 } else { 32 } {
        return accepted("prefix length out of range".to_owned());
    }
    let canonical = format!("{}/{n}", v6?);
    (canonical != value).then(|| {
        format!(
            "{path}: IPv6 prefix {quoted} is not in RFC 5952 canonical format ({}), which may cause controller apply-loops",
            crate::status::quote(&canonical)
        )
    })
}

/// `IsValidPortNum`.
pub fn port_number(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_owned()]
    }
}

/// `IsValidPortName`: an IANA service name.
pub fn port_name(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters".to_owned());
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".to_owned());
    }
    if !name.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_owned());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_owned());
    }
    errs
}

/// Whether `value` is a resource quantity such as `4`, `1.5Gi`, `100m` or `1e3`.
pub fn quantity(value: &str) -> bool {
    let unsigned = value.strip_prefix(['+', '-']).unwrap_or(value);
    let split = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(split);
    let number_ok = number.bytes().any(|c| c.is_ascii_digit()) && number.matches('.').count() <= 1;
    let suffix_ok = match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        s => s
            .strip_prefix(['e', 'E'])
            .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit())),
    };
    number_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(dns1123_subdomain("node-1.example.com").is_empty());
        assert!(!dns1123_subdomain("Node_1").is_empty());
        assert!(dns1035_label("svc-1").is_empty());
        assert!(!dns1035_label("1svc").is_empty());
        assert!(dns1123_label("1svc").is_empty());
        assert!(!dns1123_subdomain("").is_empty());
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name("node.kubernetes.io/instance-type").is_empty());
        assert!(qualified_name("kubernetes").is_empty());
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert!(!qualified_name("Example.com/x").is_empty());
        assert!(!qualified_name("example.com/").is_empty());
        assert!(!qualified_name("bad value!").is_empty());
    }

    #[test]
    fn label_values_and_addresses() {
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_3").is_empty());
        assert!(!label_value("-x").is_empty());
        assert!(ip("10.0.0.1").is_empty());
        assert!(!ip("10.0.0").is_empty());
        assert!(cidr("10.244.0.0/24").is_empty());
        assert!(!cidr("10.244.0.0/33").is_empty());
        assert!(port_name("http").is_empty());
        assert!(!port_name("80").is_empty());
        for q in ["4", "1.5Gi", "100m", "1e3", "+2", "0.5"] {
            assert!(quantity(q), "{q}");
        }
        for q in ["", "abc", "1.2.3", "4Gb", "1e"] {
            assert!(!quantity(q), "{q}");
        }
    }

    #[test]
    fn ips_parse_as_sloppily_as_go_did() {
        assert_eq!(parse_ip_sloppy("010.0.0.1"), "10.0.0.1".parse().ok());
        assert_eq!(
            parse_ip_sloppy("::ffff:010.0.0.1"),
            "::ffff:10.0.0.1".parse().ok()
        );
        for bad in ["256.0.0.1", "1.2.3", "1.2.3.4.5", "1..2.3", "not-an-ip", ""] {
            assert!(!ip(bad).is_empty(), "{bad}");
        }
        assert!(cidr("010.0.0.0/8").is_empty());
        assert_eq!(cidr_is_ipv6("fd00::/64"), Some(true));
        assert_eq!(
            non_special_ip("::ffff:127.0.0.1"),
            ["may not be in the loopback range (127.0.0.0/8, ::1/128)"]
        );
        assert!(non_special_ip("203.0.113.1").is_empty());
    }

    #[test]
    fn warnings_name_what_strict_parsing_refuses() {
        let warn = |value: &str| ip_warning("f", value);
        assert_eq!(warn("10.0.0.1"), None);
        assert_eq!(warn("2001:db8::1"), None);
        assert_eq!(
            warn("10.0.0.01").as_deref(),
            Some(
                "f: IP address was accepted, but will be invalid in a future Kubernetes release: ParseAddr(\"10.0.0.01\"): IPv4 field has octet with leading zero"
            )
        );
        assert!(
            warn("1..2.3")
                .unwrap()
                .ends_with("IPv4 field must have at least one digit (at \".2.3\")")
        );
        assert!(
            warn("300.1.1.1")
                .unwrap()
                .ends_with("IPv4 field has value >255")
        );
        assert!(
            warn("2001:0db8::1")
                .unwrap()
                .contains("not in RFC 5952 canonical format (\"2001:db8::1\")")
        );
        assert_eq!(cidr_warning("f", "10.0.0.0/8"), None);
        assert!(
            cidr_warning("f", "10.0.0.0/08")
                .unwrap()
                .ends_with("netip.ParsePrefix(\"10.0.0.0/08\"): bad bits after slash: \"08\"")
        );
        assert!(
            cidr_warning("f", "010.0.0.0/8")
                .unwrap()
                .ends_with("ParseAddr(\"010.0.0.0\"): IPv4 field has octet with leading zero")
        );
    }
}

//! The syntax checks of apimachinery's `util/validation`: DNS names,
//! qualified names, label values, IPs and CIDRs. Each returns the list of
//! messages Go would return, so callers build identical field errors.

use std::net::IpAddr;

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

/// An IP address in canonical form (`IsValidIP`).
pub fn ip(value: &str) -> Vec<String> {
    match value.parse::<IpAddr>() {
        Ok(_) => Vec::new(),
        Err(_) => vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_owned()],
    }
}

/// A CIDR such as `10.0.0.0/8` (`IsValidCIDR`).
pub fn cidr(value: &str) -> Vec<String> {
    let bad = || vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".to_owned()];
    let Some((addr, bits)) = value.split_once('/') else {
        return bad();
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return bad();
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match bits.parse::<u8>() {
        Ok(b) if b <= max && !bits.starts_with('+') => Vec::new(),
        _ => bad(),
    }
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
}

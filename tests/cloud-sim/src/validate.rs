//! Field-level validation of request bodies. Every failure is a 422 whose
//! message starts with the offending field, e.g. `listeners[0].port: …`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::ApiError;
use crate::model::Listener;

/// A parsed CIDR block, normalised to its network address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    network: IpAddr,
    prefix: u8,
}

pub(crate) fn non_empty(field: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    Ok(())
}

pub(crate) fn ipv4(field: &str, value: &str) -> Result<Ipv4Addr, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::invalid(field, format!("{value:?} is not an IPv4 address")))
}

pub(crate) fn ipv6(field: &str, value: &str) -> Result<Ipv6Addr, ApiError> {
    value
        .parse()
        .map_err(|_| ApiError::invalid(field, format!("{value:?} is not an IPv6 address")))
}

/// Parses `addr/prefix` (IPv4 or IPv6).
pub(crate) fn cidr(field: &str, value: &str) -> Result<Cidr, ApiError> {
    let bad = |why: &str| ApiError::invalid(field, format!("{value:?} is not a CIDR block: {why}"));
    let (addr, prefix) = value
        .split_once('/')
        .ok_or_else(|| bad("missing '/prefix'"))?;
    let addr: IpAddr = addr.parse().map_err(|_| bad("bad address"))?;
    let prefix: u8 = prefix.parse().map_err(|_| bad("bad prefix length"))?;
    let network = mask(addr, prefix).ok_or_else(|| bad("prefix length too long"))?;
    Ok(Cidr { network, prefix })
}

fn mask(addr: IpAddr, prefix: u8) -> Option<IpAddr> {
    match addr {
        IpAddr::V4(v4) if prefix <= 32 => {
            let bits = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            Some(IpAddr::V4(Ipv4Addr::from(u32::from(v4) & bits)))
        }
        IpAddr::V6(v6) if prefix <= 128 => {
            let bits = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            Some(IpAddr::V6(Ipv6Addr::from(u128::from(v6) & bits)))
        }
        _ => None,
    }
}

/// At least one listener, ports in range, no two on the same port and protocol.
pub(crate) fn listeners(listeners: &[Listener]) -> Result<(), ApiError> {
    if listeners.is_empty() {
        return Err(ApiError::invalid(
            "listeners",
            "at least one listener is required",
        ));
    }
    for (i, listener) in listeners.iter().enumerate() {
        port(&format!("listeners[{i}].port"), listener.port)?;
        port(&format!("listeners[{i}].node_port"), listener.node_port)?;
        let clash = listeners[..i]
            .iter()
            .any(|other| other.port == listener.port && other.protocol == listener.protocol);
        if clash {
            let message = format!(
                "duplicate listener for port {} {:?}",
                listener.port, listener.protocol
            );
            return Err(ApiError::invalid(&format!("listeners[{i}]"), message));
        }
    }
    Ok(())
}

fn port(field: &str, value: i32) -> Result<(), ApiError> {
    if !(1..=65535).contains(&value) {
        return Err(ApiError::invalid(
            field,
            format!("must be between 1 and 65535, got {value}"),
        ));
    }
    Ok(())
}

/// Every entry must be a CIDR block.
pub(crate) fn source_ranges(ranges: &[String]) -> Result<(), ApiError> {
    for (i, range) in ranges.iter().enumerate() {
        cidr(&format!("source_ranges[{i}]"), range)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_normalises_host_bits() {
        assert_eq!(cidr("f", "10.1.2.3/16").ok(), cidr("f", "10.1.0.0/16").ok());
        assert_ne!(cidr("f", "10.1.0.0/16").ok(), cidr("f", "10.1.0.0/24").ok());
        assert!(cidr("f", "0.0.0.0/0").is_ok());
        assert!(cidr("f", "fd00::/8").is_ok());
    }

    #[test]
    fn cidr_rejects_garbage() {
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/-1",
            "::/129",
            "",
        ] {
            let err = cidr("destination_cidr", bad).expect_err(bad);
            assert!(
                err.message.starts_with("destination_cidr: "),
                "{}",
                err.message
            );
        }
    }
}

//! CIDRs as the manager's flags name them: one block of addresses ([`Cidr`]), the one or
//! dual-stack pair of `--cluster-cidr` and `--service-cluster-ip-range`
//! ([`DualStackCidrs`]), and any number of them ([`CidrList`], `--load-balancer-ip-ranges`).
//!
//! ```
//! use wasm_ccm_host::cidr::DualStackCidrs;
//! let services: DualStackCidrs = "10.96.0.0/12,fd00:10:96::/112".parse().unwrap();
//! assert!(services.contains("10.96.0.1".parse().unwrap()));
//! ```

use std::net::IpAddr;
use std::str::FromStr;

/// One CIDR: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    address: IpAddr,
    prefix: u8,
}

/// Why a CIDR, or a list of them, is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// A part is not `ADDRESS/PREFIX`, or the prefix is longer than the address.
    #[error("{0:?} is not a CIDR like 10.244.0.0/16 or fd00:10:244::/56")]
    Syntax(String),
    /// A dual-stack value lists more than two CIDRs.
    #[error("at most two CIDRs (one IPv4, one IPv6) are allowed, got {0}")]
    TooMany(usize),
    /// A dual-stack value lists two CIDRs of the same family.
    #[error("two CIDRs must be dual-stack (one IPv4, one IPv6): {0} and {1}")]
    NotDualStack(String, String),
    /// The value is empty or only commas.
    #[error("no CIDR given")]
    Empty,
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || CidrError::Syntax(text.to_string());
        let (address, prefix) = text.trim().split_once('/').ok_or_else(syntax)?;
        let address: IpAddr = address.parse().map_err(|_| syntax())?;
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(syntax());
        }
        Ok(Cidr { address, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix)
    }
}

impl Cidr {
    fn bits(ip: IpAddr) -> (u128, u32) {
        match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32),
            IpAddr::V6(v6) => (u128::from(v6), 128),
        }
    }

    fn all_ones(&self) -> u128 {
        if self.address.is_ipv4() {
            u128::from(u32::MAX)
        } else {
            u128::MAX
        }
    }

    fn mask(&self) -> u128 {
        let (_, width) = Self::bits(self.address);
        let host_bits = width - u32::from(self.prefix);
        self.all_ones().checked_shl(host_bits).unwrap_or(0) & self.all_ones()
    }

    /// Whether `ip` is inside this block (an address of the other family never is).
    pub fn contains(&self, ip: IpAddr) -> bool {
        if ip.is_ipv4() != self.address.is_ipv4() {
            return false;
        }
        let mask = self.mask();
        (Self::bits(ip).0 & mask) == (Self::bits(self.address).0 & mask)
    }

    /// The block's first and last address.
    pub fn first_and_last(&self) -> (IpAddr, IpAddr) {
        let mask = self.mask();
        let first = Self::bits(self.address).0 & mask;
        let last = first | (!mask & self.all_ones());
        let ip = |bits: u128| match self.address {
            IpAddr::V4(_) => IpAddr::V4((bits as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(bits.into()),
        };
        (ip(first), ip(last))
    }
}

/// One CIDR, or a dual-stack pair (one IPv4, one IPv6): the value of `--cluster-cidr` and
/// of `--service-cluster-ip-range`, as kube-apiserver and kube-controller-manager take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DualStackCidrs(Vec<Cidr>);

impl FromStr for DualStackCidrs {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let CidrList(cidrs) = text.parse()?;
        match cidrs.as_slice() {
            [_] => Ok(DualStackCidrs(cidrs)),
            [a, b] if a.address.is_ipv4() != b.address.is_ipv4() => Ok(DualStackCidrs(cidrs)),
            [a, b] => Err(CidrError::NotDualStack(a.to_string(), b.to_string())),
            _ => Err(CidrError::TooMany(cidrs.len())),
        }
    }
}

impl DualStackCidrs {
    /// The CIDRs, as given.
    pub fn cidrs(&self) -> &[Cidr] {
        &self.0
    }

    /// The CIDR that holds `ip`, if one does.
    pub fn holding(&self, ip: IpAddr) -> Option<&Cidr> {
        self.0.iter().find(|cidr| cidr.contains(ip))
    }

    /// Whether one of the CIDRs holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.holding(ip).is_some()
    }
}

/// Comma-separated CIDRs of either family, at least one: `--load-balancer-ip-ranges`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CidrList(Vec<Cidr>);

impl FromStr for CidrList {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let cidrs = text
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .map(Cidr::from_str)
            .collect::<Result<Vec<_>, _>>()?;
        if cidrs.is_empty() {
            return Err(CidrError::Empty);
        }
        Ok(CidrList(cidrs))
    }
}

impl CidrList {
    /// The CIDRs, as given.
    pub fn cidrs(&self) -> &[Cidr] {
        &self.0
    }

    /// Whether one of the CIDRs holds `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|cidr| cidr.contains(ip))
    }
}

impl std::fmt::Display for CidrList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.iter().map(Cidr::to_string).collect();
        f.write_str(&all.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dual_stack_cidrs_are_one_or_a_pair_of_families() {
        assert!("10.244.0.0/16".parse::<DualStackCidrs>().is_ok());
        assert!(
            "10.244.0.0/16,fd00:10:244::/56"
                .parse::<DualStackCidrs>()
                .is_ok()
        );
        assert_eq!(
            "10.0.0.0/8,10.1.0.0/16".parse::<DualStackCidrs>(),
            Err(CidrError::NotDualStack(
                "10.0.0.0/8".into(),
                "10.1.0.0/16".into()
            ))
        );
        assert_eq!(
            "10.0.0.0/8,fd00::/8,fd01::/16".parse::<DualStackCidrs>(),
            Err(CidrError::TooMany(3))
        );
        assert!(matches!(
            "10.0.0.0".parse::<DualStackCidrs>(),
            Err(CidrError::Syntax(_))
        ));
        assert!(matches!(
            "10.0.0.0/33".parse::<DualStackCidrs>(),
            Err(CidrError::Syntax(_))
        ));
        assert_eq!("".parse::<DualStackCidrs>(), Err(CidrError::Empty));
    }

    #[test]
    fn a_cidr_list_takes_any_number_of_either_family() {
        let list: CidrList = "203.0.113.0/24, 198.51.100.0/24,2001:db8::/32"
            .parse()
            .unwrap();
        assert_eq!(list.cidrs().len(), 3);
        assert_eq!(
            list.to_string(),
            "203.0.113.0/24,198.51.100.0/24,2001:db8::/32"
        );
        assert!(list.contains("198.51.100.7".parse().unwrap()));
        assert!(list.contains("2001:db8::1".parse().unwrap()));
        assert!(!list.contains("192.0.2.1".parse().unwrap()));
        assert_eq!(",".parse::<CidrList>(), Err(CidrError::Empty));
        assert!(matches!(
            "203.0.113.0/24,nope".parse::<CidrList>(),
            Err(CidrError::Syntax(text)) if text == "nope"
        ));
    }

    #[test]
    fn containment_is_by_prefix_and_family() {
        let cidr: Cidr = "10.96.0.0/12".parse().unwrap();
        assert!(cidr.contains("10.96.0.1".parse().unwrap()));
        assert!(cidr.contains("10.111.255.255".parse().unwrap()));
        assert!(!cidr.contains("10.112.0.0".parse().unwrap()));
        assert!(!cidr.contains("::ffff:10.96.0.1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("255.255.255.255".parse().unwrap()));
        assert_eq!(
            cidr.first_and_last(),
            (
                "10.96.0.0".parse().unwrap(),
                "10.111.255.255".parse().unwrap()
            )
        );
    }
}

//! Network values in the configuration: portal addresses (`IP:PORT`,
//! `[v6]:PORT`, or a bare IP meaning port 3260) and the address rules of a
//! target's `allow.addresses` list (`ALL`, an IP, or a CIDR network), with the
//! matching the daemon applies to a connecting initiator's address.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The iSCSI well-known port (RFC 7143 §13.1).
pub const ISCSI_PORT: u16 = 3260;

/// One entry of a target's `allow.addresses` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressRule {
    /// `ALL`: any address.
    All,
    /// A network `addr/prefix`; a single host is a /32 (IPv4) or /128 (IPv6).
    /// `addr` has its host bits cleared.
    Net {
        /// The network address.
        addr: IpAddr,
        /// The prefix length in bits.
        prefix: u8,
    },
}

impl AddressRule {
    /// Parses `ALL` (any case), `10.1.2.3`, `10.0.0.0/8`, `::1`, `fd00::/8`
    /// (IPv6 may be written in brackets, `[::1]`). Host bits set in a CIDR
    /// network (`10.1.0.0/8`) are an error, since they usually mean a typo.
    pub fn parse(text: &str) -> Result<AddressRule, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("all") {
            return Ok(AddressRule::All);
        }
        let (ip_text, prefix_text) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let ip_text = ip_text
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .unwrap_or(ip_text);
        let addr: IpAddr = ip_text.parse().map_err(|_| {
            format!("{text:?} is not an IP address, a CIDR network (10.0.0.0/8, fd00::/8) or ALL")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "{text:?}: the prefix length must be 0..={max} for an IPv{} network",
                        if addr.is_ipv4() { 4 } else { 6 }
                    ));
                }
            },
        };
        if mask(addr, prefix) != addr {
            return Err(format!(
                "{text:?}: host bits are set; did you mean {}/{prefix}?",
                mask(addr, prefix)
            ));
        }
        Ok(AddressRule::Net { addr, prefix })
    }

    /// True when `ip` falls inside this rule. IPv4-mapped IPv6 addresses
    /// (`::ffff:10.1.2.3`, as seen on a dual-stack socket) match IPv4 rules,
    /// and IPv4 addresses match rules written as IPv4-mapped IPv6 networks.
    pub fn matches(&self, ip: IpAddr) -> bool {
        let (addr, prefix) = match *self {
            AddressRule::All => return true,
            AddressRule::Net { addr, prefix } => (addr, prefix),
        };
        let ip = canonical(ip);
        match (addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, prefix) == addr
            }
            (IpAddr::V6(net6), IpAddr::V4(v4)) => {
                // Rule written as ::ffff:a.b.c.d/p (p >= 96).
                match net6.to_ipv4_mapped() {
                    Some(_) if prefix >= 96 => {
                        let mapped = IpAddr::V6(v4.to_ipv6_mapped());
                        mask(mapped, prefix) == addr
                    }
                    _ => prefix == 0,
                }
            }
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

impl fmt::Display for AddressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AddressRule::All => f.write_str("ALL"),
            AddressRule::Net {
                addr: IpAddr::V4(a),
                prefix: 32,
            } => write!(f, "{a}"),
            AddressRule::Net {
                addr: IpAddr::V6(a),
                prefix: 128,
            } => write!(f, "{a}"),
            AddressRule::Net { addr, prefix } => write!(f, "{addr}/{prefix}"),
        }
    }
}

/// IPv4-mapped IPv6 addresses become plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// `ip` with all but the first `prefix` bits cleared.
fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// Parses a portal address: `IP:PORT`, `[IPv6]:PORT`, or a bare `IP` /
/// `[IPv6]` / `IPv6` meaning port 3260.
pub fn parse_portal_addr(text: &str) -> Result<SocketAddr, String> {
    let t = text.trim();
    if let Ok(sa) = t.parse::<SocketAddr>() {
        return Ok(sa);
    }
    let bare = t
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(t);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, ISCSI_PORT));
    }
    Err(format!(
        "{text:?} is not a portal address (IP:PORT, [IPv6]:PORT, or an IP for port {ISCSI_PORT})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parse_rules() {
        assert_eq!(AddressRule::parse("ALL"), Ok(AddressRule::All));
        assert_eq!(AddressRule::parse("all"), Ok(AddressRule::All));
        assert_eq!(
            AddressRule::parse("10.0.0.0/8"),
            Ok(AddressRule::Net {
                addr: ip("10.0.0.0"),
                prefix: 8
            })
        );
        assert_eq!(
            AddressRule::parse("127.0.0.1"),
            Ok(AddressRule::Net {
                addr: ip("127.0.0.1"),
                prefix: 32
            })
        );
        assert_eq!(
            AddressRule::parse("[::1]"),
            Ok(AddressRule::Net {
                addr: ip("::1"),
                prefix: 128
            })
        );
        assert_eq!(
            AddressRule::parse("fd00::/8"),
            Ok(AddressRule::Net {
                addr: ip("fd00::"),
                prefix: 8
            })
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/-1",
            "10.0.0.0/x",
            "host.example",
            "10.1.0.0/8",
            "1.2.3",
        ] {
            assert!(AddressRule::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn matching() {
        let r = AddressRule::parse("10.0.0.0/8").unwrap();
        assert!(r.matches(ip("10.1.2.3")));
        assert!(!r.matches(ip("11.1.2.3")));
        assert!(r.matches(ip("::ffff:10.9.9.9")));
        assert!(!r.matches(ip("::1")));
        let host = AddressRule::parse("127.0.0.1").unwrap();
        assert!(host.matches(ip("127.0.0.1")));
        assert!(!host.matches(ip("127.0.0.2")));
        let v6 = AddressRule::parse("fd00::/8").unwrap();
        assert!(v6.matches(ip("fd12::1")));
        assert!(!v6.matches(ip("fe80::1")));
        assert!(!v6.matches(ip("10.0.0.1")));
        let mapped = AddressRule::parse("::ffff:192.168.0.0/112").unwrap();
        assert!(mapped.matches(ip("192.168.3.4")));
        assert!(!mapped.matches(ip("192.169.3.4")));
        let any4 = AddressRule::parse("0.0.0.0/0").unwrap();
        assert!(any4.matches(ip("1.2.3.4")));
        assert!(any4.matches(ip("::ffff:1.2.3.4")));
        assert!(!any4.matches(ip("2001:db8::1")));
        assert!(AddressRule::parse("::/0").unwrap().matches(ip("1.2.3.4")));
        assert!(AddressRule::All.matches(ip("2001:db8::1")));
    }

    #[test]
    fn display_round_trips() {
        for s in ["ALL", "10.0.0.0/8", "127.0.0.1", "::1", "fd00::/8"] {
            let r = AddressRule::parse(s).unwrap();
            assert_eq!(r.to_string(), s);
            assert_eq!(AddressRule::parse(&r.to_string()), Ok(r));
        }
    }

    #[test]
    fn portals() {
        assert_eq!(
            parse_portal_addr("127.0.0.1:3261"),
            Ok("127.0.0.1:3261".parse().unwrap())
        );
        assert_eq!(
            parse_portal_addr("[::1]:3261"),
            Ok("[::1]:3261".parse().unwrap())
        );
        assert_eq!(
            parse_portal_addr("10.0.0.1"),
            Ok("10.0.0.1:3260".parse().unwrap())
        );
        assert_eq!(parse_portal_addr("::1"), Ok("[::1]:3260".parse().unwrap()));
        assert_eq!(
            parse_portal_addr("[::1]"),
            Ok("[::1]:3260".parse().unwrap())
        );
        for bad in ["", "localhost:3260", "1.2.3.4:99999", "::1:3260x"] {
            assert!(parse_portal_addr(bad).is_err(), "{bad:?} accepted");
        }
    }
}

//! IP sets: CIDR prefix tables (a longest-prefix-match trie), never lists scanned per request.

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use prefix_trie::joint::JointPrefixMap;

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) becomes plain IPv4, so rules and databases see one form.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// A set of IPv4 and IPv6 networks mapping to a value (e.g. the index of the rule that listed it).
#[derive(Clone, Debug)]
pub(crate) struct IpTable<T> {
    map: JointPrefixMap<IpNet, T>,
}

impl<T> Default for IpTable<T> {
    fn default() -> Self {
        IpTable {
            map: JointPrefixMap::new(),
        }
    }
}

impl<T> IpTable<T> {
    /// Adds a network; an existing entry for the same network keeps its first value, so that
    /// the earliest rule in the file owns a network listed twice.
    pub(crate) fn insert(&mut self, net: IpNet, value: T) {
        let net = canonical_net(net);
        if self.map.get(&net).is_none() {
            self.map.insert(net, value);
        }
    }

    /// The value of the most specific network containing `ip`.
    pub(crate) fn lookup(&self, ip: IpAddr) -> Option<&T> {
        self.map
            .get_lpm(&IpNet::from(canonical(ip)))
            .map(|(_, v)| v)
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.lookup(ip).is_some()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// IPv4-mapped IPv6 networks (`::ffff:10.0.0.0/104`) become their IPv4 network, matching how
/// client addresses are canonicalised.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) => {
            let mapped_prefix = 96;
            match v6.network().to_ipv4_mapped() {
                Some(v4) if v6.prefix_len() >= mapped_prefix => {
                    Ipv4Net::new(v4, v6.prefix_len() - mapped_prefix)
                        .map(IpNet::V4)
                        .unwrap_or(IpNet::V6(v6))
                }
                _ => IpNet::V6(v6),
            }
        }
        v4 => v4,
    }
}

/// Parses an address or CIDR; host bits are cleared (`10.1.2.3/8` means `10.0.0.0/8`).
pub(crate) fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) => Ok(IpNet::V4(Ipv4Net::from(v4))),
        Ok(IpAddr::V6(v6)) => Ok(IpNet::V6(Ipv6Net::from(v6))),
        Err(_) => Err(format!("`{s}` is not an IP address or CIDR")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(nets: &[&str]) -> IpTable<usize> {
        let mut t = IpTable::default();
        for (i, n) in nets.iter().enumerate() {
            t.insert(parse_net(n).unwrap(), i);
        }
        t
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn edges() {
        let t = table(&["0.0.0.0/0"]);
        assert!(t.contains(ip("255.255.255.255")));
        assert!(!t.contains(ip("::1")), "v4 /0 does not cover IPv6");
        assert!(t.contains(ip("::ffff:1.2.3.4")), "v4-mapped v6 is v4");

        let t = table(&["::/0"]);
        assert!(t.contains(ip("2001:db8::1")));
        assert!(!t.contains(ip("1.2.3.4")));

        let t = table(&["192.0.2.1/32", "2001:db8::1/128"]);
        assert!(t.contains(ip("192.0.2.1")));
        assert!(!t.contains(ip("192.0.2.2")));
        assert!(t.contains(ip("2001:db8::1")));
        assert!(!t.contains(ip("2001:db8::2")));

        let t = table(&["::ffff:10.0.0.0/104"]);
        assert!(
            t.contains(ip("10.9.9.9")),
            "mapped network is stored as 10.0.0.0/8"
        );
    }

    #[test]
    fn most_specific_wins_and_first_listing_owns() {
        let t = table(&["10.0.0.0/8", "10.1.0.0/16", "10.0.0.0/8"]);
        assert_eq!(t.lookup(ip("10.1.2.3")), Some(&1));
        assert_eq!(t.lookup(ip("10.2.2.3")), Some(&0));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn parse_forms() {
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("1.2.3.4").unwrap().to_string(), "1.2.3.4/32");
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        assert!(parse_net("10.0.0.0/33").is_err());
        assert!(parse_net("nope").is_err());
    }

    #[test]
    fn hundred_thousand_entries() {
        let mut t = IpTable::default();
        for i in 0..100_000u32 {
            let a = 0x0a00_0000u32 + (i << 8);
            t.insert(IpNet::V4(Ipv4Net::new(a.into(), 24).unwrap()), i);
        }
        assert_eq!(t.len(), 100_000);
        assert_eq!(t.lookup(ip("10.0.1.7")), Some(&1));
    }
}

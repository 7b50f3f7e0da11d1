//! The client address: the TCP peer, or what a trusted proxy in front of the edge reports.

use std::net::IpAddr;

use http::HeaderMap;
use http::header::HeaderName;

use crate::ipset::IpTable;
use crate::ipset::canonical;

/// Where trusted proxies put the client address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ClientHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: walked from the right past trusted hops.
    ForwardedFor,
    /// A header holding one address (`X-Real-IP`, `CF-Connecting-IP`).
    Single(HeaderName),
}

/// How to find the client address.
#[derive(Debug, Default)]
pub(crate) struct ClientIp {
    trusted: IpTable<()>,
    header: Option<ClientHeader>,
}

impl ClientIp {
    pub(crate) fn new(trusted: IpTable<()>, header: ClientHeader) -> Self {
        ClientIp {
            trusted,
            header: Some(header),
        }
    }

    /// The client address for a request from `peer`. Headers count only when the peer is a
    /// trusted proxy; anything malformed falls back to the last address we could trust.
    /// Whether `peer` is one of the trusted proxies.
    pub(crate) fn is_trusted(&self, peer: IpAddr) -> bool {
        self.trusted.contains(peer)
    }

    pub(crate) fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        let Some(header) = &self.header else {
            return peer;
        };
        if self.trusted.is_empty() || !self.trusted.contains(peer) {
            return peer;
        }
        match header {
            ClientHeader::Single(name) => {
                let mut values = headers.get_all(name).iter();
                match (values.next(), values.next()) {
                    // Two copies of a single-address header cannot both be right: ignore both.
                    (Some(v), None) => v.to_str().ok().and_then(parse_hop).map_or(peer, canonical),
                    _ => peer,
                }
            }
            ClientHeader::ForwardedFor => {
                let mut client = peer;
                // Several header lines form one list, in order; walk it from the right.
                for value in headers.get_all("x-forwarded-for").iter().rev() {
                    let Ok(line) = value.to_str() else {
                        return client;
                    };
                    for hop in line.rsplit(',') {
                        match parse_hop(hop) {
                            Some(ip) => {
                                client = canonical(ip);
                                if !self.trusted.contains(client) {
                                    return client;
                                }
                            }
                            None => return client,
                        }
                    }
                }
                client
            }
        }
    }
}

/// Parses one hop: `1.2.3.4`, `1.2.3.4:567`, `2001:db8::1` or `[2001:db8::1]:567`.
fn parse_hop(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    let (host, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The key a client is counted under where one client must not pass for many (its connections,
/// requests in flight, failed signature checks): the IPv4 address, or the /64 of an IPv6 address
/// (one subscriber's usual allocation, so that rotating addresses inside it gains nothing).
/// IPv4-mapped IPv6 is IPv4.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipset::parse_net;

    fn resolver(trusted: &[&str], header: ClientHeader) -> ClientIp {
        let mut t = IpTable::default();
        for n in trusted {
            t.insert(parse_net(n).unwrap(), ());
        }
        ClientIp::new(t, header)
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_spoofing_changes_nothing() {
        let r = resolver(&["10.0.0.0/8"], ClientHeader::ForwardedFor);
        let h = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(r.resolve(ip("203.0.113.5"), &h), ip("203.0.113.5"));
    }

    #[test]
    fn walks_past_trusted_hops_only() {
        let r = resolver(&["10.0.0.0/8"], ClientHeader::ForwardedFor);
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
        // 6.6.6.6 was added by the client itself; 198.51.100.7 is where the trusted hop got it.
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("198.51.100.7"));
        let h = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.7, 10.0.0.2"),
        ]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("198.51.100.7"));
        let h = headers(&[("x-forwarded-for", "10.0.0.3, 10.0.0.2")]);
        assert_eq!(
            r.resolve(ip("10.0.0.1"), &h),
            ip("10.0.0.3"),
            "all trusted: leftmost"
        );
    }

    #[test]
    fn malformed_is_ignored_safely() {
        let r = resolver(&["10.0.0.0/8"], ClientHeader::ForwardedFor);
        let h = headers(&[("x-forwarded-for", "198.51.100.7, garbage")]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        let h = headers(&[("x-forwarded-for", "")]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        assert_eq!(r.resolve(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
    }

    #[test]
    fn mapped_and_ported_forms() {
        let r = resolver(&["::1/128"], ClientHeader::ForwardedFor);
        let h = headers(&[("x-forwarded-for", "[::ffff:198.51.100.7]:4000")]);
        assert_eq!(r.resolve(ip("::1"), &h), ip("198.51.100.7"));
        let h = headers(&[("x-forwarded-for", "198.51.100.8:4000")]);
        assert_eq!(r.resolve(ip("::1"), &h), ip("198.51.100.8"));
    }

    #[test]
    fn single_address_headers() {
        let r = resolver(
            &["10.0.0.0/8"],
            ClientHeader::Single(HeaderName::from_static("cf-connecting-ip")),
        );
        let h = headers(&[("cf-connecting-ip", "2001:db8::7")]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("2001:db8::7"));
        let h = headers(&[
            ("cf-connecting-ip", "1.1.1.1"),
            ("cf-connecting-ip", "2.2.2.2"),
        ]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        let h = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(r.resolve(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }
}

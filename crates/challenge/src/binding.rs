//! What a clearance or a challenge is bound to: the zone and the client.

use std::fmt;
use std::net::IpAddr;

use hmac::Mac;

use crate::keys::HmacSha256;

/// The client as the edge sees it, and the zone it asked.
#[derive(Clone, Copy, Debug)]
pub struct Visitor<'a> {
    /// The zone's name, as configured (not the `Host` header as sent).
    pub zone: &'a str,
    /// The client's address (the peer, or the address the edge's trusted proxies named).
    pub addr: IpAddr,
    /// The `User-Agent` header's bytes, empty when absent.
    pub user_agent: &'a [u8],
}

/// How tightly a clearance is tied to its client: the part of the address that must stay the
/// same, and whether the `User-Agent` must.
///
/// Defaults: **/24 for IPv4 and /64 for IPv6**, and the User-Agent bound. A /64 is what one
/// subscriber is given on a LAN or a mobile connection, and IPv6 privacy addresses rotate inside
/// it, so a visitor keeps the clearance; a /48 is a whole site's allocation, which hosting and
/// tunnel providers hand out by the thousand, so one solved challenge would open 65,536 subnets
/// to a scraper. A /24 keeps a visitor behind carrier-grade NAT or a roaming Wi-Fi inside one
/// clearance (full-address binding re-challenges them: anubis #1146, #1555). An address family
/// switch (challenged over IPv4, back over IPv6) is a new client and is challenged again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    user_agent: bool,
}

impl Default for Binding {
    fn default() -> Self {
        Binding {
            ipv4_prefix: 24,
            ipv6_prefix: 64,
            user_agent: true,
        }
    }
}

impl Binding {
    /// A binding: prefix lengths up to 32 and 128; 0 binds no address at all (any address of
    /// the family passes), which an operator chooses only with the User-Agent bound.
    pub fn new(
        ipv4_prefix: u8,
        ipv6_prefix: u8,
        user_agent: bool,
    ) -> Result<Binding, BindingError> {
        if ipv4_prefix > 32 || ipv6_prefix > 128 {
            return Err(BindingError);
        }
        Ok(Binding {
            ipv4_prefix,
            ipv6_prefix,
            user_agent,
        })
    }

    /// The IPv4 prefix length.
    pub fn ipv4_prefix(&self) -> u8 {
        self.ipv4_prefix
    }

    /// The IPv6 prefix length.
    pub fn ipv6_prefix(&self) -> u8 {
        self.ipv6_prefix
    }

    /// Whether the User-Agent is bound.
    pub fn user_agent(&self) -> bool {
        self.user_agent
    }

    /// Feeds the zone and the client's bound parts to a MAC, each length-prefixed or
    /// fixed-size so that no two visitors feed the same bytes. The settings themselves are fed
    /// too: a changed binding invalidates what the old one signed (visitors are challenged once
    /// more, never in a loop, since the new cookie is signed under the new settings).
    pub(crate) fn feed(&self, mac: &mut HmacSha256, visitor: &Visitor<'_>) {
        mac.update(&(visitor.zone.len() as u64).to_be_bytes());
        mac.update(visitor.zone.as_bytes());
        // An IPv4-mapped IPv6 address is the IPv4 client it maps.
        match visitor.addr.to_canonical() {
            IpAddr::V4(addr) => {
                let bits = u32::from(addr);
                let masked = match self.ipv4_prefix {
                    0 => 0,
                    p => bits & (u32::MAX << (32 - u32::from(p))),
                };
                mac.update(&[4, self.ipv4_prefix]);
                mac.update(&masked.to_be_bytes());
            }
            IpAddr::V6(addr) => {
                let bits = u128::from(addr);
                let masked = match self.ipv6_prefix {
                    0 => 0,
                    p => bits & (u128::MAX << (128 - u32::from(p))),
                };
                mac.update(&[6, self.ipv6_prefix]);
                mac.update(&masked.to_be_bytes());
            }
        }
        // The User-Agent enters the MAC itself, length-prefixed: its hash is bound without a
        // separate digest.
        if self.user_agent {
            mac.update(&[1]);
            mac.update(&(visitor.user_agent.len() as u64).to_be_bytes());
            mac.update(visitor.user_agent);
        } else {
            mac.update(&[0]);
        }
    }
}

/// A prefix length beyond the family's address size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindingError;

impl fmt::Display for BindingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a clearance binds at most a /32 IPv4 and a /128 IPv6 prefix")
    }
}

impl std::error::Error for BindingError {}

//! One bounded HTTPS fetch for everything identification fetches from outside (Web Bot Auth key
//! directories, published IP lists).
//!
//! What the URL comes from is often a request (a `Signature-Agent` names any host), so every
//! fetch is bounded: `https` only; no redirects (a 3xx is an error: the draft forbids following
//! them, and a redirect is the usual way around an address check); one total deadline covering
//! DNS, connect, TLS and the whole body; the body read as a stream and refused (not cut) past
//! `max_bytes`; and no private, loopback, link-local, unique-local, CGNAT, multicast, reserved or
//! unspecified address (v4, v6, v4 in v6), checked both on what DNS answers (the connection goes
//! to exactly the checked addresses, so a rebinding DNS cannot swap them) and on literal-IP URLs,
//! unless the operator allows private addresses. Environment proxies are ignored, since one
//! would make the address check meaningless.

use std::error::Error as _;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rustls::pki_types::CertificateDer;
use url::{Host, Url};

pub struct OutsideConfig {
    /// Allow private, loopback and link-local destinations (a directory on the operator's own
    /// network; tests). `https` is required either way.
    pub allow_private: bool,
    /// Roots trusted beyond the system's (a private CA; tests).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// The whole fetch: resolution, connection, TLS, headers and body.
    pub timeout: Duration,
    /// The largest body accepted.
    pub max_bytes: usize,
}

/// What a fetch brought back. Only non-redirect answers arrive here; the caller judges the status.
pub struct Fetched {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// Not an `https` URL, or no host.
    NotHttps,
    /// The destination is a private, loopback, link-local (...) address.
    PrivateAddress,
    /// The name did not resolve (or resolved only to refused addresses is [`Self::PrivateAddress`]).
    Dns,
    /// The answer was a 3xx; not followed.
    Redirect(u16),
    /// The body is larger than `max_bytes`.
    TooLarge,
    /// The total deadline passed.
    Timeout,
    /// Connection, TLS or HTTP failure.
    Network,
}

impl FetchError {
    /// A short stable name, for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            FetchError::NotHttps => "not_https",
            FetchError::PrivateAddress => "private_address",
            FetchError::Dns => "dns",
            FetchError::Redirect(_) => "redirect",
            FetchError::TooLarge => "too_large",
            FetchError::Timeout => "timeout",
            FetchError::Network => "network",
        }
    }
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Redirect(status) => write!(f, "redirect ({status}), not followed"),
            other => f.write_str(other.name()),
        }
    }
}

impl std::error::Error for FetchError {}

pub struct Outside {
    client: reqwest::Client,
    allow_private: bool,
    timeout: Duration,
    max_bytes: usize,
}

impl Outside {
    pub fn new(config: OutsideConfig) -> anyhow::Result<Outside> {
        let roots = config
            .extra_roots
            .iter()
            .map(|der| reqwest::Certificate::from_der(der))
            .collect::<Result<Vec<_>, _>>()?;
        let client = reqwest::Client::builder()
            .https_only(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .dns_resolver(Arc::new(CheckedResolver {
                allow_private: config.allow_private,
            }))
            .tls_certs_merge(roots)
            .user_agent(concat!("signpost/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Outside {
            client,
            allow_private: config.allow_private,
            timeout: config.timeout,
            max_bytes: config.max_bytes,
        })
    }

    /// One GET, bounded as the module says.
    pub async fn get(&self, url: &Url) -> Result<Fetched, FetchError> {
        self.get_accepting(url, "*/*").await
    }

    /// [`Outside::get`] with an `Accept` header naming the media type wanted.
    pub async fn get_accepting(&self, url: &Url, accept: &str) -> Result<Fetched, FetchError> {
        if url.scheme() != "https" {
            return Err(FetchError::NotHttps);
        }
        match url.host() {
            None => return Err(FetchError::NotHttps),
            Some(Host::Ipv4(ip)) if !self.allowed(IpAddr::V4(ip)) => {
                return Err(FetchError::PrivateAddress);
            }
            Some(Host::Ipv6(ip)) if !self.allowed(IpAddr::V6(ip)) => {
                return Err(FetchError::PrivateAddress);
            }
            Some(_) => {}
        }
        tokio::time::timeout(self.timeout, self.fetch(url.clone(), accept))
            .await
            .unwrap_or(Err(FetchError::Timeout))
    }

    fn allowed(&self, ip: IpAddr) -> bool {
        self.allow_private || is_public(ip)
    }

    async fn fetch(&self, url: Url, accept: &str) -> Result<Fetched, FetchError> {
        let mut response = self
            .client
            .get(url)
            .header(http::header::ACCEPT, accept)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status();
        if status.is_redirection() {
            return Err(FetchError::Redirect(status.as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|length| length > self.max_bytes as u64)
        {
            return Err(FetchError::TooLarge);
        }
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(classify)? {
            if body.len() + chunk.len() > self.max_bytes {
                return Err(FetchError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            status,
            headers: response.headers().clone(),
            body: body.freeze(),
        })
    }
}

/// Names the cause of a reqwest error: the resolver's refusal is found in the error's sources.
fn classify(error: reqwest::Error) -> FetchError {
    if error.is_timeout() {
        return FetchError::Timeout;
    }
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<FetchError>() {
            return refused.clone();
        }
        source = cause.source();
    }
    FetchError::Network
}

/// The system resolver, with the answers checked: refused addresses are dropped, and a name with
/// none left fails as [`FetchError::PrivateAddress`].
struct CheckedResolver {
    allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await
                .map_err(|_| Box::new(FetchError::Dns) as Box<dyn std::error::Error + Send + Sync>)?
                .collect();
            if addresses.is_empty() {
                return Err(Box::new(FetchError::Dns) as _);
            }
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| allow_private || is_public(address.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(FetchError::PrivateAddress) as _);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Whether `ip` is a public unicast address: not private (RFC 1918), loopback, link-local,
/// unique-local (fc00::/7), CGNAT (100.64/10), multicast, broadcast, reserved, documentation,
/// benchmarking or unspecified; v4 addresses inside v6 (mapped, compatible, NAT64) are judged as v4.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0 // "this network", 0.0.0.0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b)) // CGNAT
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224) // multicast, reserved, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    // v4-mapped ::ffff:a.b.c.d, v4-compatible ::a.b.c.d, NAT64 64:ff9b::a.b.c.d.
    let embedded_v4 = match segments {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0x64, 0xff9b, 0, 0, 0, 0, _, _] => true,
        [0, 0, 0, 0, 0, 0, hi, _] => hi != 0,
        _ => false,
    };
    if embedded_v4 {
        let [.., a, b, c, d] = ip.octets();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    let first = segments[0];
    !(ip.is_unspecified()
        || ip.is_loopback()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (first & 0xff00) == 0xff00 // multicast
        || (first == 0x2001 && segments[1] == 0x0db8)) // documentation
}

/// Published address lists are fetched with the same bounds as everything else from outside;
/// only a 200 carries a list.
#[async_trait::async_trait]
impl crate::iplists::Fetch for Outside {
    async fn get(&self, url: &Url) -> Result<Bytes, String> {
        let fetched = Outside::get(self, url)
            .await
            .map_err(|e| e.name().to_owned())?;
        if fetched.status != http::StatusCode::OK {
            return Err(format!("status {}", fetched.status.as_u16()));
        }
        Ok(fetched.body)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn addresses_refused_and_allowed() {
        for refused in [
            "0.0.0.0",
            "10.1.2.3",
            "127.0.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "::",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "::127.0.0.1",
            "2001:db8::1",
        ] {
            assert!(!is_public(refused.parse().unwrap()), "{refused}");
        }
        for allowed in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(allowed.parse().unwrap()), "{allowed}");
        }
    }
}

//! Client facts: what a request says about where it comes from and what it asks for.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};

use http::HeaderValue;
use pingora::proxy::Session;
use signpost_policy::RequestFacts;

/// What the connection and the request head say about a request, worked out once by
/// `request_filter` and read by every later hook.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// The TCP peer.
    pub peer: IpAddr,
    /// Whether the client's connection is TLS.
    pub tls: bool,
}

impl Facts {
    /// Facts for a request that has not been looked at yet.
    pub fn unknown() -> Facts {
        Facts {
            peer: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            tls: false,
        }
    }

    /// The facts of `session`'s request. The host is not kept: the policy and the problem
    /// renderer each read it from the request as [`request_host`], without allocating.
    pub fn new(session: &Session) -> Facts {
        Facts {
            peer: peer_ip(session),
            tls: session.digest().is_some_and(|d| d.ssl_digest.is_some()),
        }
    }
}

/// The host the client asked for, as sent: the URI authority (HTTP/2, absolute-form) or the Host
/// header. Bytes that are not UTF-8 are replaced, never rejected: the renderers escape what
/// remains. Borrowed unless such bytes had to be replaced.
pub fn request_host(session: &Session) -> Cow<'_, str> {
    let req = session.req_header();
    if let Some(authority) = req.uri.authority() {
        return Cow::Borrowed(authority.as_str());
    }
    req.headers
        .get(http::header::HOST)
        .map_or(Cow::Borrowed(""), |v| {
            signpost_policy::lossy_utf8(v.as_bytes())
        })
}

/// What the policy reads of a live request: `facts` and `host` (from [`request_host`]) worked out
/// once by the caller, the rest borrowed from the session.
pub fn request_facts<'a>(session: &'a Session, facts: &Facts, host: &'a str) -> RequestFacts<'a> {
    let req = session.req_header();
    RequestFacts {
        peer: facts.peer,
        host,
        method: req.method.as_str(),
        uri: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
        tls: facts.tls,
        sni: crate::connection::tls::client_sni(session.digest()),
        headers: &req.headers,
    }
}

/// The request's `Accept`, every field line of it: RFC 9110 reads repeated lines as one list.
/// Borrowed in the usual case of a single line.
pub fn accept(session: &Session) -> Option<Cow<'_, [u8]>> {
    accept_of(&session.req_header().headers)
}

/// [`accept`] of a header map (a synthetic request's, for a trace).
pub fn accept_of(headers: &http::HeaderMap) -> Option<Cow<'_, [u8]>> {
    header_list(headers, http::header::ACCEPT)
}

/// Every field line of the list header `name` as one list (`Accept`, `Accept-Language`).
/// Borrowed in the usual case of a single line.
pub fn header_list(
    headers: &http::HeaderMap,
    name: http::header::HeaderName,
) -> Option<Cow<'_, [u8]>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let mut rest = lines.peekable();
    if rest.peek().is_none() {
        return Some(Cow::Borrowed(first.as_bytes()));
    }
    let mut joined = first.as_bytes().to_vec();
    for line in rest {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// An IP address written out as text, on the stack.
pub struct IpText {
    buf: [u8; 45],
    len: usize,
}

impl IpText {
    pub fn new(ip: IpAddr) -> IpText {
        let mut text = IpText {
            buf: [0u8; 45],
            len: 0,
        };
        match ip {
            // The common case, written digit by digit: the formatting machinery costs more than
            // the rest of the header.
            IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        text.push(b'.');
                    }
                    if octet >= 100 {
                        text.push(b'0' + octet / 100);
                    }
                    if octet >= 10 {
                        text.push(b'0' + octet / 10 % 10);
                    }
                    text.push(b'0' + octet % 10);
                }
            }
            IpAddr::V6(v6) => {
                use std::io::Write;
                let mut cursor = std::io::Cursor::new(&mut text.buf[..]);
                // 45 bytes hold the longest IPv6 text (an IPv4-mapped address in full).
                let _ = write!(cursor, "{v6}");
                text.len = usize::try_from(cursor.position()).unwrap_or(0);
            }
        }
        text
    }

    fn push(&mut self, byte: u8) {
        self.buf[self.len] = byte;
        self.len += 1;
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl AsRef<[u8]> for IpText {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<IpText> for HeaderValue {
    /// The text moves into one shared allocation, so cloning the value (the peer usually goes
    /// into two headers) copies nothing and allocates nothing.
    fn from(ip: IpText) -> HeaderValue {
        // Digits, dots, colons and hex letters are valid in a header value.
        HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(ip))
            .unwrap_or(HeaderValue::from_static("0.0.0.0"))
    }
}

fn peer_ip(session: &Session) -> IpAddr {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::IpText;

    #[test]
    fn ip_text_matches_display() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "255.255.255.255",
            "::",
            "2001:db8::1",
            "::ffff:198.51.100.4",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "0:0:0:0:0:ffff:255.255.255.255",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(IpText::new(ip).as_bytes(), ip.to_string().as_bytes());
        }
    }

    proptest::proptest! {
        #[test]
        fn ip_text_of_any_address_matches_display(v4: u32, v6: u128) {
            for ip in [std::net::IpAddr::from(v4.to_be_bytes()), std::net::IpAddr::from(v6.to_be_bytes())] {
                let text = IpText::new(ip);
                let display = ip.to_string();
                proptest::prop_assert_eq!(text.as_bytes(), display.as_bytes());
            }
        }
    }
}

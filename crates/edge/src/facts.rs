//! Client facts: what a request says about where it comes from and what it asks for.

use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use pingora::proxy::Session;

/// The host the client asked for: the URI authority (HTTP/2, absolute-form) or the Host header.
/// Bytes that are not UTF-8 are replaced, never rejected: the renderers escape what remains.
pub fn request_host(session: &Session) -> String {
    let req = session.req_header();
    if let Some(authority) = req.uri.authority() {
        return authority.as_str().to_string();
    }
    req.headers
        .get(http::header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// The zone name shown in problems: the host without its port (`[::1]:8080` → `[::1]`).
pub fn host_without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && !name.ends_with(':') =>
        {
            name
        }
        _ => host,
    }
}

/// The request's `Accept`, every field line of it: RFC 9110 reads repeated lines as one list.
/// Borrowed in the usual case of a single line.
pub fn accept(session: &Session) -> Option<Cow<'_, [u8]>> {
    let mut lines = session
        .req_header()
        .headers
        .get_all(http::header::ACCEPT)
        .iter();
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

/// The `X-Forwarded-For` to send to the origin: the chain the request arrived with (every
/// line of it, in order) followed by the address of the peer that sent it to us.
///
/// The peer, not the client address the policy derived: a trusted proxy's hop must stay in the
/// chain, and the client it names is already there.
pub fn forwarded_for(session: &Session, peer: IpAddr) -> String {
    let mut chain = String::new();
    for line in session.req_header().headers.get_all("x-forwarded-for") {
        let line = String::from_utf8_lossy(line.as_bytes());
        let line = line.trim();
        if !line.is_empty() {
            chain.push_str(line);
            chain.push_str(", ");
        }
    }
    chain.push_str(&peer.to_string());
    chain
}

/// Text from the request, made safe for a log line: whitespace, quotes, `=`, `%`, control and
/// non-ASCII bytes are percent-encoded, so that a Host like `x status=200` cannot forge fields
/// in the text log format.
pub struct LogSafe<'a>(pub &'a str);

const LOG_ESCAPED: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'=').add(b'%').add(b'\\');

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&utf8_percent_encode(self.0, LOG_ESCAPED), f)
    }
}

pub fn peer_ip(session: &Session) -> IpAddr {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::{LogSafe, host_without_port};

    #[test]
    fn zone_name_drops_only_a_numeric_port() {
        assert_eq!(host_without_port("example.com:8080"), "example.com");
        assert_eq!(host_without_port("example.com"), "example.com");
        assert_eq!(host_without_port("[::1]:8080"), "[::1]");
        assert_eq!(host_without_port("a: b"), "a: b");
        assert_eq!(host_without_port("::1"), "::1");
    }

    #[test]
    fn log_text_cannot_forge_fields() {
        assert_eq!(LogSafe("example.com:8080").to_string(), "example.com:8080");
        assert_eq!(
            LogSafe("x status=200 rule=evil").to_string(),
            "x%20status%3D200%20rule%3Devil"
        );
        assert_eq!(LogSafe("a\nb\"c\\").to_string(), "a%0Ab%22c%5C");
        assert_eq!(LogSafe("ü").to_string(), "%C3%BC");
    }
}

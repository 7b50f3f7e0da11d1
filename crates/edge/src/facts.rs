//! Client facts: what a request says about where it comes from and what it asks for.

use std::net::{IpAddr, Ipv4Addr};

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

pub fn peer_ip(session: &Session) -> IpAddr {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::host_without_port;

    #[test]
    fn zone_name_drops_only_a_numeric_port() {
        assert_eq!(host_without_port("example.com:8080"), "example.com");
        assert_eq!(host_without_port("example.com"), "example.com");
        assert_eq!(host_without_port("[::1]:8080"), "[::1]");
        assert_eq!(host_without_port("a: b"), "a: b");
        assert_eq!(host_without_port("::1"), "::1");
    }
}

//! A zone's `[zone.tls]` on the request path: plain-HTTP requests redirected to HTTPS (but ACME's
//! HTTP-01 path, which a CA fetches over plain HTTP), and `Strict-Transport-Security` on HTTPS
//! answers.

use pingora::http::ResponseHeader;
use signpost_policy::Zone;

/// Where ACME's HTTP-01 challenge answers live (RFC 8555 §8.3): never redirected, since the CA
/// asks for them on port 80 before the host has a certificate.
pub const ACME_CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// A redirect to HTTPS: its status and `Location`.
pub struct Redirect {
    pub status: u16,
    pub location: String,
}

/// The redirect a plain-HTTP request gets, when its zone sends plain HTTP to HTTPS.
///
/// 301 for GET and HEAD, as every client and cache has understood since HTTP/1.0; 308 for any
/// other method, which a client must repeat with the same method and body (RFC 9110 §15.4.9),
/// where a 301 lets it turn a POST into a GET.
///
/// `host` is the request's Host (or absolute-form authority). A Host that is not a plain DNS
/// name or IP literal (a catch-all zone takes any) is not written into a `Location`: such a
/// request is not redirected.
pub fn redirect(
    zone: &Zone,
    tls: bool,
    req: &pingora::http::RequestHeader,
    host: &str,
) -> Option<Redirect> {
    let to = zone.tls.redirect?;
    if tls {
        return None;
    }
    let path = req.uri.path_and_query().map_or("/", |p| p.as_str());
    if path.starts_with(ACME_CHALLENGE_PREFIX) {
        return None;
    }
    let host = signpost_policy::normalize_host(host);
    if !is_clean_host(&host) {
        return None;
    }
    let location = if to.port == 443 {
        format!("https://{host}{path}")
    } else {
        format!("https://{host}:{}{path}", to.port)
    };
    let status = if req.method == http::Method::GET || req.method == http::Method::HEAD {
        301
    } else {
        308
    };
    Some(Redirect { status, location })
}

/// A lower-cased DNS name or IPv4 literal, or a bracketed IPv6 literal: what a `Location`'s
/// authority may take from the request.
fn is_clean_host(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
        })
}

/// Writes `redirect` as the whole response, with no body.
pub async fn write(
    session: &mut pingora::proxy::Session,
    ray: http::HeaderValue,
    redirect: &Redirect,
) -> pingora::Result<()> {
    let mut head = ResponseHeader::build(redirect.status, Some(3))?;
    head.insert_header(http::header::LOCATION, redirect.location.as_str())?;
    head.insert_header(http::header::CONTENT_LENGTH, "0")?;
    head.insert_header(&crate::request::ray::CF_RAY, ray)?;
    session.write_response_header(Box::new(head), true).await
}

/// The `Strict-Transport-Security` value for an answer of `zone`, when it came over TLS: RFC
/// 6797 §7.2 forbids it on plain HTTP.
pub fn hsts(zone: Option<&Zone>, tls: bool) -> Option<&str> {
    if !tls {
        return None;
    }
    zone?.tls.hsts.as_ref().map(|h| h.value.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone() -> Zone {
        let text = "[[zone]]\nname = \"a\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:1\"\n[zone.tls]\nredirect_https = true\nhttps_port = 8443\n";
        let policy = signpost_policy::CompiledPolicy::from_toml(
            text,
            "p.toml",
            std::path::Path::new("."),
            None,
        )
        .unwrap();
        policy.zones()[0].clone()
    }

    fn request(method: &str, target: &str) -> pingora::http::RequestHeader {
        pingora::http::RequestHeader::build(method, target.as_bytes(), None).unwrap()
    }

    #[test]
    fn get_is_301_other_methods_308_acme_and_tls_not_redirected() {
        let zone = zone();
        let r = redirect(&zone, false, &request("GET", "/a?b=1"), "Example.COM:80").unwrap();
        assert_eq!(
            (r.status, r.location.as_str()),
            (301, "https://example.com:8443/a?b=1")
        );
        let r = redirect(&zone, false, &request("POST", "/form"), "example.com").unwrap();
        assert_eq!(r.status, 308);
        assert!(
            redirect(
                &zone,
                false,
                &request("GET", "/.well-known/acme-challenge/t"),
                "example.com"
            )
            .is_none()
        );
        assert!(redirect(&zone, true, &request("GET", "/"), "example.com").is_none());
    }

    proptest::proptest! {
        /// Whatever the Host, a Location holds only a clean authority after `https://`.
        #[test]
        fn a_location_never_carries_what_a_host_smuggles(host in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let zone = zone();
            let host = String::from_utf8_lossy(&host);
            if let Some(r) = redirect(&zone, false, &request("GET", "/"), &host) {
                let authority = r.location.strip_prefix("https://").unwrap().strip_suffix(":8443/").unwrap();
                proptest::prop_assert!(is_clean_host(authority), "{}", authority);
            }
        }
    }
}

//! The one way to the origin: the peer a zone's request goes to (its address resolved, with the
//! zone's timeouts) and the headers the edge adds to what it forwards. Pingora's proxy hooks and
//! the Markdown path both take it from here.

pub(crate) mod divert;
pub(crate) mod errors;
pub(crate) mod rescue;
pub(crate) mod route;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderValue;
use pingora::http::{RequestHeader, StaticHeaderName};
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;
use pingora::{Error, Result};
use signpost_policy::{Origin, Zone};

use crate::origin::rescue::ORIGIN_DNS_ERROR;
use crate::request::facts::{Facts, IpText};
use crate::request::ray::CF_RAY;

/// A request's trip to the origin, for the access line, the metrics and the hooks after it.
#[derive(Debug, Default)]
pub struct OriginTrip {
    /// Set once the request is on its way to the origin: from then on Pingora will not reuse
    /// the client's connection after a failure, whatever we answer.
    pub proxying: bool,
    /// The origin's address, once chosen.
    pub addr: Option<std::net::SocketAddr>,
    /// When the request left for the origin.
    pub started: Option<Instant>,
    /// Set once the origin's response header arrived: a client that leaves after it no longer
    /// holds the origin's work.
    pub answered: bool,
}

/// The headers the edge adds to every proxied request, parsed once: inserted through these, a
/// header's name is neither parsed nor copied per request (the `&'static str` names Pingora also
/// takes are parsed, and so allocated, on each insert). They are written to the wire exactly as
/// the same text would be.
static X_FORWARDED_FOR: StaticHeaderName = StaticHeaderName::new("x-forwarded-for");
static X_FORWARDED_PROTO: StaticHeaderName = StaticHeaderName::new("x-forwarded-proto");
static CF_CONNECTING_IP: StaticHeaderName = StaticHeaderName::new("cf-connecting-ip");

/// The peer for a request of `zone`, and its address: its origin (or `--origin`'s), resolved now
/// (a name that does not resolve is 1016), with the zone's timeouts. Pingora pools connections per peer, so
/// repeated requests reuse them.
pub async fn peer(
    resolver: &OriginResolver,
    zone: &Zone,
    origin_override: Option<&Origin>,
) -> Result<(Box<HttpPeer>, SocketAddr)> {
    let origin = origin_override.unwrap_or(&zone.origin);
    let addr = match origin.ip {
        Some(ip) => SocketAddr::new(ip, origin.port),
        None => {
            resolver
                .resolve(&origin.host, origin.port, zone.connect_timeout)
                .await?
        }
    };
    // Without TLS the SNI is never sent: an empty name saves copying it per request.
    let sni = if origin.tls {
        origin.sni.clone()
    } else {
        String::new()
    };
    // Boxed at once: Pingora takes the peer boxed, and the struct is large enough that moving it
    // between functions showed in the instructions per request.
    let mut peer = Box::new(HttpPeer::new(addr, origin.tls, sni));
    peer.options.connection_timeout = Some(zone.connect_timeout);
    peer.options.read_timeout = Some(zone.read_timeout);
    peer.options.write_timeout = Some(zone.write_timeout);
    peer.options.verify_cert = origin.verify_cert;
    peer.options.verify_hostname = origin.verify_cert;
    Ok((peer, addr))
}

/// Adds what an origin behind an edge expects: the client's address, the scheme the client used,
/// and the ray id to match logs on both sides. `client` is the address the policy derived (behind
/// a trusted proxy, the one it names).
pub fn add_forwarding_headers(
    upstream: &mut RequestHeader,
    session: &Session,
    facts: &Facts,
    client: IpAddr,
    ray: HeaderValue,
) {
    let Facts { peer, tls, .. } = *facts;
    // The peer's address is written once and shared by both headers that usually carry it.
    let peer_text = HeaderValue::from(IpText::new(peer));
    let client = if client != peer {
        HeaderValue::from(IpText::new(client))
    } else {
        peer_text.clone()
    };
    // Sent after the client's headers, replacing any of the same names, and kept out of the
    // header maps: the edge never reads them back, and each map insert (value and case maps) cost
    // more than the rest of this step.
    upstream.insert_wire_header(&X_FORWARDED_FOR, forwarded_for(session, peer_text));
    upstream.insert_wire_header(
        &X_FORWARDED_PROTO,
        HeaderValue::from_static(if tls { "https" } else { "http" }),
    );
    upstream.insert_wire_header(&CF_CONNECTING_IP, client);
    upstream.insert_wire_header(&CF_RAY, ray);
}

/// The `X-Forwarded-For` to send to the origin: the chain the request arrived with (every line of
/// it, in order) followed by `peer`, the address of the peer that sent it to us.
///
/// The peer, not the client address the policy derived: a trusted proxy's hop must stay in the
/// chain, and the client it names is already there. Without a chain, `peer` itself.
fn forwarded_for(session: &Session, peer: HeaderValue) -> HeaderValue {
    let mut chain = Vec::new();
    for line in session.req_header().headers.get_all(X_FORWARDED_FOR.name()) {
        let line = line.as_bytes().trim_ascii();
        if !line.is_empty() {
            chain.extend_from_slice(line);
            chain.extend_from_slice(b", ");
        }
    }
    if chain.is_empty() {
        return peer;
    }
    chain.extend_from_slice(peer.as_bytes());
    HeaderValue::from_maybe_shared(bytes::Bytes::from(chain)).unwrap_or(peer)
}

/// How long a resolved origin address is reused before the name is looked up again.
///
/// The system resolver (`getaddrinfo`) does not say how long an answer is valid, so a fixed,
/// short lifetime stands in for the record's TTL: long enough that a busy zone resolves its
/// origin a few times a minute instead of on every request, short enough that an origin moved
/// by DNS is followed within seconds.
const ADDRESS_LIFETIME: Duration = Duration::from_secs(30);

/// How long a name that did not resolve is answered with 1016 without asking again: a zone whose
/// origin name is broken would otherwise send every request to the resolver's thread pool.
const FAILURE_LIFETIME: Duration = Duration::from_secs(5);

/// An address (or `None`: the name did not resolve), and until when it may be used.
type Answer = (Option<SocketAddr>, Instant);

/// Resolves origin names, keeping each answer for [`ADDRESS_LIFETIME`].
///
/// Keys are the origins of the policy (and `--origin`), never anything from a request, so the
/// map stays as small as the policy.
#[derive(Default)]
pub struct OriginResolver {
    answers: Mutex<HashMap<(String, u16), Answer>>,
}

impl OriginResolver {
    /// The address to connect to for `host:port`; a name that does not resolve (or not within
    /// `timeout`) is the origin's DNS error, 1016.
    pub async fn resolve(&self, host: &str, port: u16, timeout: Duration) -> Result<SocketAddr> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, port));
        }
        let key = (host.to_string(), port);
        match self.cached(&key) {
            Some(Some(addr)) => return Ok(addr),
            Some(None) => {
                return Err(Error::explain(
                    ORIGIN_DNS_ERROR,
                    format!("{host} did not resolve moments ago"),
                ));
            }
            None => {}
        }
        let result = lookup(host, port, timeout).await;
        let (answer, lifetime) = match &result {
            Ok(addr) => (Some(*addr), ADDRESS_LIFETIME),
            Err(_) => (None, FAILURE_LIFETIME),
        };
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(key, (answer, Instant::now() + lifetime));
        }
        result
    }

    /// A fresh answer for `key`: `Some(Some(addr))`, `Some(None)` for a recent failure, or `None`
    /// when the name must be looked up.
    fn cached(&self, key: &(String, u16)) -> Option<Option<SocketAddr>> {
        let answers = self.answers.lock().ok()?;
        let (answer, expires) = answers.get(key)?;
        (Instant::now() < *expires).then_some(*answer)
    }
}

async fn lookup(host: &str, port: u16, timeout: Duration) -> Result<SocketAddr> {
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(mut addrs)) => addrs
            .next()
            .ok_or_else(|| Error::explain(ORIGIN_DNS_ERROR, format!("{host} has no addresses"))),
        Ok(Err(err)) => Err(Error::because(
            ORIGIN_DNS_ERROR,
            format!("resolving {host}"),
            err,
        )),
        Err(_) => Err(Error::explain(
            ORIGIN_DNS_ERROR,
            format!("resolving {host} timed out"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn literals_need_no_lookup() {
        let resolver = OriginResolver::default();
        let addr = runtime()
            .block_on(resolver.resolve("[::1]", 8080, Duration::from_secs(1)))
            .unwrap();
        assert_eq!(addr, "[::1]:8080".parse().unwrap());
        assert!(resolver.answers.lock().unwrap().is_empty());
    }

    #[test]
    fn names_are_resolved_once_and_kept() {
        let resolver = OriginResolver::default();
        let rt = runtime();
        let first = rt
            .block_on(resolver.resolve("localhost", 80, Duration::from_secs(5)))
            .unwrap();
        assert!(first.ip().is_loopback());
        assert_eq!(
            resolver.cached(&("localhost".to_string(), 80)),
            Some(Some(first))
        );
        // A stale answer is not used.
        resolver
            .answers
            .lock()
            .unwrap()
            .insert(("localhost".to_string(), 80), (Some(first), Instant::now()));
        assert_eq!(resolver.cached(&("localhost".to_string(), 80)), None);
    }

    #[test]
    fn a_name_that_does_not_resolve_is_1016_for_a_few_seconds() {
        let resolver = OriginResolver::default();
        let rt = runtime();
        let err = rt
            .block_on(resolver.resolve("origin.invalid", 80, Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(*err.etype(), ORIGIN_DNS_ERROR);
        assert_eq!(
            resolver.cached(&("origin.invalid".to_string(), 80)),
            Some(None)
        );
        let again = rt
            .block_on(resolver.resolve("origin.invalid", 80, Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(
            *again.etype(),
            ORIGIN_DNS_ERROR,
            "the kept failure is still 1016"
        );
    }
}

//! The origin side: turning a zone's origin into an address to connect to.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pingora::{Error, Result};

use crate::rescue::ORIGIN_DNS_ERROR;

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

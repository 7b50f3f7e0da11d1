//! The origin side: turning a zone's origin into an address to connect to.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pingora::{Error, Result};

use crate::rescue::ORIGIN_DNS_ERROR;

/// Resolves the origin's name; a failure or a timeout is the origin's DNS error (1016).
pub async fn resolve(host: &str, port: u16, timeout: Duration) -> Result<SocketAddr> {
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
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

//! What the edge refuses before any zone looks at a request, the per-client key its caps count
//! under, and the deadlines it sets on each request's connection.

use std::sync::{Arc, Mutex};

use pingora::http::RequestHeader;
use pingora::proxy::Session;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use signpost_policy::RateLimitState;
use signpost_problem::Code;

/// A request body as it streams to the origin: counted against the zone's limit and timed
/// against `body_min_rate`.
#[derive(Debug, Default)]
pub struct BodyProgress {
    /// Body bytes received so far.
    pub bytes: u64,
    /// When the first body chunk was awaited.
    pub started: Option<std::time::Instant>,
}

/// The longest request target (path and query) the edge accepts: 16 KiB, Cloudflare's URL limit.
/// Longer is 414.
pub const MAX_URI_LEN: usize = 16 * 1024;
/// The largest header section the edge accepts, names and values summed: 32 KiB, Cloudflare's
/// limit. Larger is 431 (Pingora itself stops reading at 1 MiB or 256 header lines).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The largest head (target plus header lines) whose chunked body is pre-read; see
/// `Edge::preread_chunked_body`.
const PREREAD_MAX_HEAD: usize = 16 * 1024;

/// The rate limiters' state by rule, as the admin listener reads it from the loaded policy
/// before each scrape: the keys each rule tracks (a gauge), and the keys it evicted and the
/// requests it counted in its sketch (counters, from when the rule's counters were created: a
/// reload keeps an unchanged rule's and starts a changed one's at zero, which Prometheus reads
/// as a counter reset). The label set is the loaded policy's rate-limit rules.
#[derive(Clone, Debug, Default)]
pub struct RateLimitMetrics {
    rules: Arc<Mutex<Vec<RateLimitState>>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    rule: Arc<str>,
}

impl RateLimitMetrics {
    pub fn register(registry: &mut Registry) -> RateLimitMetrics {
        let metrics = RateLimitMetrics::default();
        registry.register_collector(Box::new(metrics.clone()));
        metrics
    }

    /// The state of each rate-limit rule of the loaded policy, now.
    pub fn set(&self, rules: Vec<RateLimitState>) {
        *self.rules.lock().unwrap_or_else(|e| e.into_inner()) = rules;
    }
}

impl Collector for RateLimitMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut keys = encoder.encode_descriptor(
            "rate_limit_keys",
            "Keys currently tracked by each rate-limit rule.",
            None,
            MetricType::Gauge,
        )?;
        for r in &rules {
            let label = RuleLabel {
                rule: r.rule.clone(),
            };
            ConstGauge::new(i64::try_from(r.keys).unwrap_or(i64::MAX))
                .encode(keys.encode_family(&label)?)?;
        }
        encode_counters(
            &mut encoder,
            "rate_limit_evicted_keys",
            "Keys not being limited that a rate-limit rule evicted, least recently seen first, \
             to count new keys (since the rule's counters were created).",
            rules.iter().map(|r| (&r.rule, r.evicted)),
        )?;
        encode_counters(
            &mut encoder,
            "rate_limit_sketched_requests",
            "Requests of new keys a rate-limit rule counted in its fixed-size sketch because \
             every slot held a key being limited (since the rule's counters were created).",
            rules.iter().map(|r| (&r.rule, r.sketched)),
        )?;
        Ok(())
    }
}

/// A counter family by rule, of the values given.
fn encode_counters<'r>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl Iterator<Item = (&'r Arc<str>, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (rule, value) in values {
        let label = RuleLabel { rule: rule.clone() };
        ConstCounter::new(value).encode(family.encode_family(&label)?)?;
    }
    Ok(())
}

/// The key a client's connections and requests in flight are counted under.
pub use signpost_policy::client_key;

/// What the request head says about its size and body, read once for every step that asks.
pub struct Head {
    /// The header section's size: names, values and 4 bytes of framing per line.
    header_bytes: usize,
    /// Whether the request has a Transfer-Encoding, and whether it is chunked.
    has_transfer_encoding: bool,
    pub chunked: bool,
}

impl Head {
    pub fn read(req: &RequestHeader) -> Head {
        let header_bytes = req
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
        let transfer_encoding = req.headers.get(http::header::TRANSFER_ENCODING);
        Head {
            header_bytes,
            has_transfer_encoding: transfer_encoding.is_some(),
            chunked: transfer_encoding
                .is_some_and(|te| te.as_bytes().eq_ignore_ascii_case(b"chunked")),
        }
    }

    /// The code for a request head the edge refuses whatever the zone: CONNECT (405), a target
    /// over [`MAX_URI_LEN`] (414), a header section over [`MAX_HEADER_BYTES`] (431).
    pub fn unacceptable(&self, req: &RequestHeader) -> Option<Code> {
        if req.method == http::Method::CONNECT {
            return Some(Code::METHOD_NOT_ALLOWED);
        }
        if req.raw_path().len() > MAX_URI_LEN {
            return Some(Code::URI_TOO_LONG);
        }
        (self.header_bytes > MAX_HEADER_BYTES).then_some(Code::HEADERS_TOO_LARGE)
    }

    /// The code for a request `zone` does not accept: TRACE and TRACK unless the zone allows
    /// them (405), a declared body over its `max_body_size` (413).
    pub fn zone_refuses(&self, req: &RequestHeader, zone: &signpost_policy::Zone) -> Option<Code> {
        let method = req.method.as_str();
        if !zone.allow_trace
            && (method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK"))
        {
            return Some(Code::METHOD_NOT_ALLOWED);
        }
        self.declared_body_len(req)
            .filter(|n| *n > zone.max_body_size)
            .map(|_| Code::PAYLOAD_TOO_LARGE)
    }

    /// The body length the request declares with Content-Length, when it uses one: not with a
    /// Transfer-Encoding (chunked bodies are counted as they arrive instead).
    pub fn declared_body_len(&self, req: &RequestHeader) -> Option<u64> {
        if self.has_transfer_encoding {
            return None;
        }
        req.headers
            .get(http::header::CONTENT_LENGTH)?
            .to_str()
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Whether the start of a chunked request body is read before the origin is contacted: its
    /// head is small enough that what arrived with it fits Pingora's retry buffer, and there is
    /// no `Expect` (the client waits for an answer before it sends the body).
    pub fn wants_preread(&self, session: &mut Session) -> bool {
        let req = session.req_header();
        self.chunked
            && !req.headers.contains_key(http::header::EXPECT)
            && req.raw_path().len() + self.header_bytes <= PREREAD_MAX_HEAD
            && !session.is_body_done()
    }
}

/// Sets the policy's deadlines on this request's connection: the idle keep-alive timeout for
/// the wait before the next request (unless the client asked to close), the body read timeout,
/// the send deadline, and pipelining, so that requests sent back to back are each answered in
/// order.
pub fn apply_connection_limits(session: &mut Session, limits: &signpost_policy::Connections) {
    // Not for an upgrade request: the bytes after it belong to the tunnel, and Pingora's idle read
    // would take early ones for a pipelined request.
    let upgrade = session
        .req_header()
        .headers
        .contains_key(http::header::UPGRADE);
    session.as_downstream_mut().set_pipelining_enabled(!upgrade);
    if session.get_keepalive().is_some() {
        // Whole seconds: Pingora's keep-alive takes seconds, and 0 would mean "forever".
        session.set_keepalive(Some(limits.idle_timeout.as_secs().max(1)));
    }
    session.set_read_timeout(Some(limits.body_timeout));
    // The send deadline: a response none of whose bytes the client takes for this long is ended
    // (HTTP/1: per write; HTTP/2: per wait for flow-control window).
    session.set_write_timeout(Some(limits.send_timeout));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn ipv6_clients_are_grouped_by_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let mapped: IpAddr = "::ffff:198.51.100.7".parse().unwrap();
        assert_eq!(
            client_key(mapped),
            "198.51.100.7".parse::<IpAddr>().unwrap()
        );
    }
}

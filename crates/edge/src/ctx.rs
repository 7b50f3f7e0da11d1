//! What one request learns on its way through the pipeline: each fact worked out once, read by
//! the later hooks, reported by `logging`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use signpost_policy::{Zone, ZoneId};
use signpost_problem::{Code, Format};

use crate::connection::inflight;
use crate::markdown::Outcome;
use crate::reload::Loaded;
use crate::request::facts::Facts;
use crate::request::ray::RayId;

pub struct RequestCtx {
    pub ray_id: RayId,
    /// `ray_id` as the `cf-ray` header value, made at its first use.
    ray_header: Option<http::HeaderValue>,
    pub started: Instant,
    /// Peer and TLS, worked out once at the start of `request_filter`.
    pub facts: Facts,
    /// The policy the request started with; a reload does not change it mid-request.
    pub policy: Option<Arc<Loaded>>,
    pub zone: Option<ZoneId>,
    /// The client address the policy derived (behind a trusted proxy, the one it names).
    pub client_ip: Option<IpAddr>,
    /// The catalog code of an edge-generated answer, if the edge answered.
    pub error_code: Option<Code>,
    pub format: Option<Format>,
    pub rule_id: Option<Arc<str>>,
    pub upstream: Option<SocketAddr>,
    pub upstream_started: Option<Instant>,
    /// Request body bytes received so far, and when the first body chunk was awaited.
    pub body_bytes: u64,
    pub body_started: Option<Instant>,
    /// Set once the request is on its way to the origin: from then on Pingora will not reuse
    /// the client's connection after a failure, whatever we answer.
    pub proxying: bool,
    /// What happened to a request for Markdown on a converting zone, for the access log.
    pub markdown: Option<Outcome>,
    /// What the zone's converted-page cache did for it, for the access log.
    pub markdown_cache: Option<crate::markdown::cache::Status>,
    /// The request's place among its client's requests in flight to origins.
    pub in_flight: Option<inflight::Slot>,
    /// Set once the origin's response header arrived: a client that leaves after it no longer
    /// holds the origin's work.
    pub origin_answered: bool,
    /// The id of the error rule that dressed the edge's answer, for the access log.
    pub error_rule: Option<Box<str>>,
    /// An origin error whose body the edge is replacing with a problem (`origin/errors.rs`).
    pub replacing: Option<crate::origin::errors::Replacing>,
    /// An origin error with an empty body, answered by `fail_to_proxy`: its head and body.
    /// Boxed: rare, and a proxied request's context stays as small as it was.
    pub origin_error_answer: Option<Box<(pingora::http::ResponseHeader, bytes::Bytes)>>,
    /// Who the request is, when the policy identified it as anyone in particular (a signature
    /// or a known bot): for the origin's header and the access log. Boxed: most requests are
    /// nobody in particular.
    pub identity: Option<Box<signpost_policy::Identity>>,
    /// What crawl control made of a known crawler's request (boxed as the decision has it).
    pub crawl: Option<Box<signpost_policy::CrawlStep>>,
    /// What the crawler was charged, once the ledger recorded it.
    pub charged: Option<signpost_policy::Price>,
    /// `/robots.txt` on its way from the origin: the managed block to put before it, and the
    /// copy kept to parse it (`crawl/robots.rs`).
    pub robots: Option<Box<crate::crawl::robots::RobotsBody>>,
    /// The robots.txt rule a known crawler's request broke, for the access log.
    pub robots_violation: Option<Box<crate::crawl::robots::Violation>>,
}

impl RequestCtx {
    pub fn new() -> RequestCtx {
        RequestCtx {
            ray_id: RayId::next(),
            ray_header: None,
            started: Instant::now(),
            facts: Facts::unknown(),
            policy: None,
            zone: None,
            client_ip: None,
            error_code: None,
            format: None,
            rule_id: None,
            upstream: None,
            upstream_started: None,
            body_bytes: 0,
            body_started: None,
            proxying: false,
            markdown: None,
            markdown_cache: None,
            in_flight: None,
            origin_answered: false,
            error_rule: None,
            replacing: None,
            origin_error_answer: None,
            identity: None,
            crawl: None,
            charged: None,
            robots: None,
            robots_violation: None,
        }
    }

    /// The `cf-ray` header value.
    pub fn ray_header(&mut self) -> http::HeaderValue {
        let ray_id = self.ray_id;
        self.ray_header
            .get_or_insert_with(|| ray_id.header_value())
            .clone()
    }

    /// The zone serving the request, once the policy chose one.
    pub fn zone(&self) -> Option<&Zone> {
        let loaded = self.policy.as_ref()?;
        Some(loaded.policy.zone(self.zone?))
    }

    /// The request as the operator's error rules read it, for an answer about to be made.
    pub fn asked<'a>(
        &self,
        session: &'a pingora::proxy::Session,
        host: &'a str,
    ) -> crate::answer::error_rules::Asked<'a> {
        crate::answer::error_rules::Asked::live(
            session,
            &self.facts,
            self.zone,
            self.client_ip,
            host,
        )
    }

    /// The client's address as the policy derived it, or the peer's before the policy ran.
    pub fn client(&self) -> IpAddr {
        self.client_ip.unwrap_or(self.facts.peer)
    }
}

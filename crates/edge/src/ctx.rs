//! What one request learns on its way through the pipeline: each fact worked out once, read by
//! the later hooks, reported by `logging`.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use signpost_policy::{Zone, ZoneId};
use signpost_problem::{Code, Format};

use crate::connection::inflight;
use crate::crawl::robots::RobotsState;
use crate::markdown::MarkdownState;
use crate::origin::OriginTrip;
use crate::origin::errors::OriginErrorState;
use crate::reload::Loaded;
use crate::request::facts::Facts;
use crate::request::limits::BodyProgress;
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
    /// The request's trip to the origin, once it is on its way (`origin`).
    pub origin: OriginTrip,
    /// The request body as it streams to the origin (`request::limits`).
    pub body: BodyProgress,
    /// What the Markdown route and its cache did for a request for Markdown (`markdown`).
    pub markdown: MarkdownState,
    /// The request's place among its client's requests in flight to origins.
    pub in_flight: Option<inflight::Slot>,
    /// The id of the error rule that dressed the edge's answer, for the access log.
    pub error_rule: Option<Box<str>>,
    /// An origin error the edge answers in place of the origin's (`origin/errors.rs`).
    pub origin_error: OriginErrorState,
    /// Who the request is, when the policy identified it as anyone in particular (a signature
    /// or a known bot): for the origin's header and the access log. Boxed: most requests are
    /// nobody in particular.
    pub identity: Option<Box<signpost_policy::Identity>>,
    /// What crawl control made of a known crawler's request (boxed as the decision has it).
    pub crawl: Option<Box<signpost_policy::CrawlStep>>,
    /// What the crawler was charged, once the ledger recorded it.
    pub charged: Option<signpost_policy::Price>,
    /// Set when a custom rule diverted the request: the index of the origin, in its zone's
    /// `diverts`, that it goes to instead of the zone's (`origin::divert`).
    pub divert: Option<usize>,
    /// Rate limits that count this request's answer (`counting_expression`), counted by
    /// `logging` once the answer went out. Empty (no allocation) for most requests.
    pub answers: Vec<signpost_policy::AnswerCount>,
    /// robots.txt's part of the request: the origin's file on its way, a rule broken
    /// (`crawl/robots.rs`).
    pub robots: RobotsState,
    /// The challenge's part: a challenge pending its clearance check, what became of it.
    pub challenge: crate::challenge::ChallengeState,
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
            origin: OriginTrip::default(),
            body: BodyProgress::default(),
            markdown: MarkdownState::default(),
            in_flight: None,
            error_rule: None,
            origin_error: OriginErrorState::default(),
            identity: None,
            crawl: None,
            charged: None,
            divert: None,
            answers: Vec::new(),
            robots: RobotsState::default(),
            challenge: Default::default(),
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

    /// The divert the request goes to, when a custom rule diverted it.
    pub fn divert(&self) -> Option<&signpost_policy::Divert> {
        self.zone()?.diverts.get(self.divert?)
    }

    /// The client's address as the policy derived it, or the peer's before the policy ran.
    pub fn client(&self) -> IpAddr {
        self.client_ip.unwrap_or(self.facts.peer)
    }
}

//! The request pipeline: client facts → policy decision → origin, or a problem in the asked format.
//!
//! Pingora calls the hooks below in this order; each is short, and the words they use live in the
//! modules under this one (`limits`, `answer`, `origin`, `markdown`, `rescue`, `log`, `ctx`).
//!
//! ```text
//! request_filter, its steps in order (`steps::STEPS`, which a trace follows too; the first that
//! answers ends the request; every answer is dressed by `error_rules::dress`):
//!   1 head_limits      CONNECT, a target over 16 KiB, headers over 32 KiB ─────────► 405 414 431
//!   2 error_page       /cdn-cgi/error/<code>, on every host ─────────────────────────► that code
//!   2b challenge_endpoint /cdn-cgi/challenge/verify|wait on a zone's host ─► 303 + clearance, page
//!   3 decide           the policy's phases (TLS SNI, hosts, identify, access rules, ...,
//!                      crawl control, rate limits, challenge), then fleet rate limits with
//!                      Redis's answers; a known crawler's robots.txt violation noted ──► refusal
//!                      (1xxx, or crawl control's 402/400/403 with crawler-error, crawl/mod.rs);
//!                      a signed request challenged while its key directory is first fetched
//!                      waits for it (challenge::DIRECTORY_WAIT) and is decided again
//!   3b challenge_clearance a challenged request: a valid clearance passes ─► page or problem 403
//!   4 zone_limits      TRACE/TRACK, a declared body over max_body_size ─────────────► 405 413
//!   5 preread_body     the start of a chunked body, parsed before the origin sees it ──► 400 408
//!   6 take_in_flight   the client's share of origin work (max_in_flight_per_client) ─► 429 (1015)
//!   6b robots_txt      /robots.txt on a zone that manages it: `replace` answered here ─► 200
//!   7 serve_markdown   Markdown on a converting zone: forwarded and converted here ─► page
//!      │               (its failures go to fail_to_proxy, as the proxy route's do)
//!      └─ else proxied by Pingora:
//!         request_body_filter (body limits: 413, 408)
//!         upstream_peer (origin::peer; 1016) ─► upstream_request_filter (origin's headers)
//!         response_filter (cf-ray, Vary; converted pages an unsafe request changed dropped; a
//!           paid crawl settled and recorded in the ledger before crawler-charged goes out,
//!           the origin's own receipts removed (crawl/mod.rs); robots.txt's managed block
//!           (crawl/robots.rs); an origin 4xx/5xx reshaped by origin_errors)
//!         response_body_filter (the reshaped error's body in place of the origin's; the
//!           managed block before the origin's robots.txt, which is read)
//!         ─► the origin's answer
//!         fail_to_connect / fail_to_proxy (rescue: 52x, or nothing for a client that left)
//!   Both routes prepare the origin's request and filter its answer's head with the same two
//!   functions (origin/route.rs: prepare_request, filter_response).
//! logging: one access line per request, whatever happened; cancellations counted as such.
//! ```
//!
//! Before any of it, for requests Pingora cannot read: `request_error_filter` (request/malformed.rs).

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::FailToProxy;
use signpost_policy::{MarkdownConfig, Origin, Verdict};
use signpost_problem::{CatalogEntry, Code};

use crate::connection::inflight::InFlight;
use crate::ctx::RequestCtx;
use crate::log::{LogBudget, LogSafe, OrDash};
use crate::metrics::Metrics;
use crate::origin::OriginResolver;
use crate::origin::rescue::{BODY_TOO_LARGE, BODY_TOO_SLOW, Rescue, rescue};
use crate::origin::route::ToOrigin;
use crate::reload::Loaded;
use crate::request::facts::{Facts, request_host};
use crate::request::limits::{Head, apply_connection_limits, client_key};
use crate::steps::{STEPS, Step};

/// The edge service: shared, read-mostly state behind every request.
pub struct Edge {
    /// The compiled policy, swapped whole on reload; each request holds the one it started with.
    policy: Arc<ArcSwap<Loaded>>,
    /// `--origin` from the command line: replaces every zone's origin.
    origin_override: Option<Origin>,
    metrics: Arc<Metrics>,
    /// Origin names resolved recently, so that a request does not wait for DNS.
    resolver: OriginResolver,
    /// Bounds the log lines of unreadable requests, so that a flood does not flood the log.
    unreadable_log: LogBudget,
    /// The same for keep-alive connections closed idle.
    idle_log: LogBudget,
    /// Origin HTML converted to Markdown: connector, conversion slots, memory budget.
    markdown: crate::markdown::Converter,
    /// Requests each client has on their way to origins (`max_in_flight_per_client`).
    in_flight: Arc<InFlight>,
    /// Bounds the log lines of clients refused for too many requests in flight.
    in_flight_log: LogBudget,
}

/// What the challenge endpoint step did.
enum EndpointAnswer {
    /// Answered (303 with a clearance, or the page again).
    Answered,
    /// A method the endpoint does not take: 405.
    Refused(Refusal),
    /// Not an endpoint here (no zone serves the host, or the policy has no challenge keys): an
    /// ordinary path.
    NotServed,
}

/// What a step of `request_filter` decided instead of proxying: the edge answers this.
struct Refusal {
    entry: &'static CatalogEntry,
    retry_after: Option<u32>,
    /// The connection cannot carry another request (a CONNECT, or a body left unread).
    close: bool,
}

impl Refusal {
    fn entry(entry: &'static CatalogEntry) -> Refusal {
        Refusal {
            entry,
            retry_after: None,
            close: false,
        }
    }

    fn code(code: Code) -> Refusal {
        Refusal::entry(crate::answer::entry(code))
    }

    fn closing(self) -> Refusal {
        Refusal {
            close: true,
            ..self
        }
    }
}

#[async_trait]
impl ProxyHttp for Edge {
    /// Boxed: Pingora keeps the context in the request's future and moves that future while it
    /// runs; a pointer moves cheaper than the whole context.
    type CTX = Box<RequestCtx>;

    /// The policy's whole-header deadline (`[connections] header_timeout`), read per request so
    /// that a reload changes it.
    fn request_header_timeout(&self) -> Option<std::time::Duration> {
        Some(self.policy.load().policy.connections().header_timeout)
    }

    /// A request header Pingora could not read (malformed, over its limits, past the header
    /// deadline): answered with the contract's problem (400, 414, 431 or 408), or closed
    /// silently when nothing of a request arrived.
    async fn request_error_filter(
        &self,
        session: &mut pingora::protocols::http::ServerSession,
        error: &Error,
    ) -> Result<bool> {
        let loaded = self.policy.load_full();
        crate::request::malformed::answer_unreadable(
            session,
            error,
            loaded.policy.problem_branding(),
            &self.metrics.connections,
            &self.unreadable_log,
        )
        .await;
        Ok(true)
    }

    /// A kept-alive connection whose next request did not begin within `idle_timeout`: Pingora
    /// closes it; the edge counts it. Logged at debug level only (idle closes are how every
    /// browser's connection ends), within a budget so that a flood cannot flood the log.
    fn idle_timeout_closed(&self, session: &pingora::protocols::http::ServerSession) {
        self.metrics.connections.event("idle_timeout");
        if tracing::enabled!(tracing::Level::DEBUG) && self.idle_log.allow() {
            let client = session
                .client_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::debug!(
                client = %LogSafe(&client),
                suppressed = self.idle_log.take_suppressed(),
                "idle keep-alive connection closed"
            );
        }
    }

    fn new_ctx(&self) -> Box<RequestCtx> {
        Box::new(RequestCtx::new())
    }

    /// The edge's whole decision, as the steps of the module's drawing. Returns `Ok(true)` when
    /// the edge answered the request itself, `Ok(false)` to let Pingora proxy it.
    ///
    /// The error test endpoint comes before the policy: it is served on every host and must work
    /// even where the policy would refuse, so that people can see what a refusal looks like. Its
    /// answer is dressed with the error rules of the zone the Host selects, as a real refusal on
    /// that host is (`error_rules::Asked`).
    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let loaded = self.policy.load_full();
        ctx.policy = Some(loaded.clone());
        apply_connection_limits(session, loaded.policy.connections());
        ctx.facts = Facts::new(session);
        let head = Head::read(session.req_header());

        // The steps in the one order `steps::STEPS` declares, which a trace follows too.
        for step in STEPS {
            let refusal = match step {
                Step::HeadLimits => Self::head_limits(session, &head),
                Step::ErrorPage => {
                    crate::answer::error_page(session.req_header().uri.path()).map(Refusal::entry)
                }
                Step::ChallengeEndpoint => {
                    match crate::challenge::Endpoint::of(session.req_header().uri.path()) {
                        Some(endpoint) => {
                            match Box::pin(self.challenge_endpoint(session, ctx, &loaded, endpoint))
                                .await?
                            {
                                EndpointAnswer::Answered => return Ok(true),
                                EndpointAnswer::Refused(refusal) => Some(refusal),
                                EndpointAnswer::NotServed => None,
                            }
                        }
                        None => None,
                    }
                }
                Step::Decide => self.decide(session, ctx, &loaded).await,
                Step::Challenge => match ctx.challenge.pending.take() {
                    Some(pending) => {
                        if Box::pin(self.challenge(session, ctx, &loaded, pending)).await? {
                            return Ok(true);
                        }
                        None
                    }
                    None => None,
                },
                Step::ZoneLimits => Self::zone_limits(session, ctx, &head),
                Step::HttpsRedirect => {
                    let host = request_host(session);
                    let redirect = ctx.zone().and_then(|zone| {
                        let req = session.req_header();
                        crate::request::https::redirect(zone, ctx.facts.tls, req, &host)
                    });
                    if let Some(redirect) = redirect {
                        if redirect.status == 308 {
                            // The body a client repeats at the new address is not read here:
                            // the connection ends with the redirect.
                            session.set_keepalive(None);
                        }
                        let ray = ctx.ray_header();
                        crate::request::https::write(session, ray, &redirect).await?;
                        return Ok(true);
                    }
                    None
                }
                Step::PrereadBody => self.preread_body(session, ctx, &head).await?,
                Step::TakeInFlight => self.take_in_flight(ctx, &loaded),
                Step::RobotsTxt => {
                    if let Some(managed) = Self::robots_txt(session, ctx, &loaded) {
                        let ray = ctx.ray_header();
                        Box::pin(crate::crawl::robots::write_managed(session, ray, managed))
                            .await?;
                        return Ok(true);
                    }
                    None
                }
                // Boxed only when used: the conversion's future is large, and building it for
                // every proxied request would copy it for nothing.
                Step::ServeMarkdown => match self.markdown_wanted(session, ctx) {
                    Some(config) => {
                        return Box::pin(self.serve_markdown(session, ctx, config)).await;
                    }
                    None => None,
                },
            };
            if let Some(refusal) = refusal {
                if refusal.close {
                    session.set_keepalive(None);
                }
                Box::pin(self.answer(session, ctx, refusal.entry, refusal.retry_after)).await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Counts the request body as it streams to the origin: over the zone's limit is 413, a body
    /// slower on average than `body_min_rate` once `body_timeout` has passed is 408 (a body that
    /// stops altogether is cut by the read timeout, also 408).
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<bytes::Bytes>,
        _end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let len = body.as_ref().map_or(0, |b| b.len() as u64);
        if len == 0 && ctx.body.started.is_none() {
            // No body bytes yet (a request without a body gets exactly this call): nothing to
            // count or time, so no clock is read.
            return Ok(());
        }
        let started = *ctx.body.started.get_or_insert_with(Instant::now);
        ctx.body.bytes = ctx.body.bytes.saturating_add(len);
        let (max_body, limits) = match (ctx.zone(), ctx.policy.as_ref()) {
            (Some(zone), Some(loaded)) => (zone.max_body_size, *loaded.policy.connections()),
            _ => return Ok(()),
        };
        if ctx.body.bytes > max_body {
            return Error::e_explain(BODY_TOO_LARGE, "request body over the zone's max_body_size");
        }
        let elapsed = started.elapsed();
        if elapsed > limits.body_timeout {
            let floor = limits.body_min_rate as f64 * elapsed.as_secs_f64();
            if (ctx.body.bytes as f64) < floor {
                self.metrics.connections.event("body_timeout");
                return Error::e_explain(BODY_TOO_SLOW, "request body slower than body_min_rate");
            }
        }
        Ok(())
    }

    /// The zone's origin, as `origin::peer` prepares it for every way to the origin.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        self.peer(ctx).await
    }

    /// One origin per zone: there is nothing to fail over to, and retrying a connect that timed
    /// out would multiply the client's wait. Stale pooled connections are still retried by
    /// Pingora's `error_while_proxy`.
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        _ctx: &mut Self::CTX,
        mut e: Box<Error>,
    ) -> Box<Error> {
        e.set_retry(false);
        e
    }

    /// The request the origin receives, as every route prepares it
    /// (`origin_route::prepare_request`).
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let ray = ctx.ray_header();
        crate::origin::route::prepare_request(upstream, session, ToOrigin::of(ctx, ray));
        Ok(())
    }

    /// The origin's answer, filtered as on every route (`origin_route::filter_response`); an
    /// answer the edge gives in its place goes out instead (`origin_errors::replace`: its head
    /// now, its body in place of the origin's, or whole from `fail_to_proxy` when the origin
    /// declared an empty body).
    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        use crate::origin::errors::{ANSWERED_IN_PLACE, InPlace};
        if !ctx.answers.is_empty() {
            // Before the head goes out: the client's next request sees the count.
            Box::pin(self.count_answer(session, ctx, response.status.as_u16())).await;
        }
        let Some(answer) = crate::origin::route::filter_response(session, response, ctx).await?
        else {
            // The proxy route's HTML of a converting zone tells agents of its Markdown (the
            // Markdown route's own answers never point at themselves).
            if ctx
                .zone()
                .is_some_and(|z| z.markdown.enabled && z.markdown.link)
            {
                let host = request_host(session);
                let req = session.req_header();
                crate::markdown::add_discovery_link(response, req, ctx.facts.tls, &host)?;
            }
            return Ok(());
        };
        let head_only = session.req_header().method == http::Method::HEAD;
        match crate::origin::errors::replace(head_only, response, answer) {
            InPlace::HeadOnly => Ok(()),
            InPlace::Body(replacing) => {
                ctx.origin_error.replacing = Some(replacing);
                Ok(())
            }
            InPlace::Whole(answer) => {
                ctx.origin_error.answer = Some(answer);
                Error::e_explain(ANSWERED_IN_PLACE, "origin error with an empty body")
            }
        }
    }

    /// The origin's body passes through, but for an origin error the edge answers: its problem
    /// goes in place of the origin's bytes, which are dropped.
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<bytes::Bytes>,
        end_of_stream: bool,
        ctx: &mut Self::CTX,
    ) -> Result<Option<std::time::Duration>> {
        if let Some(replacing) = ctx.origin_error.replacing.as_mut() {
            crate::origin::errors::body_filter(body, replacing)?;
        } else if let Some(robots) = ctx.robots.body.as_mut() {
            *body = robots.chunk(body.take());
            if end_of_stream
                && let Some(robots) = ctx.robots.body.take()
                && let (Some(loaded), Some(zone)) = (ctx.policy.as_ref(), ctx.zone())
            {
                crate::crawl::robots::keep_origin_file(*robots, &loaded.robots, &zone.name);
            }
        }
        Ok(None)
    }

    /// A failure after the policy let the request through: the origin refused, timed out, sent
    /// garbage, or its name did not resolve. Renders the matching 52x (or 1016) problem.
    ///
    /// Returns the status written, for Pingora's log, or 0 when nothing could be written.
    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut Self::CTX,
    ) -> FailToProxy {
        if let Some(answer) = ctx.origin_error.answer.take() {
            let (head, body) = *answer;
            let status = crate::origin::errors::write_in_place(session, head, body)
                .await
                .ok();
            return FailToProxy {
                error_code: status.unwrap_or(0),
                can_reuse_downstream: false,
            };
        }
        let status = self.answer_failure(session, e, ctx).await;
        FailToProxy {
            error_code: status.unwrap_or(0),
            can_reuse_downstream: status.is_some(),
        }
    }

    /// Errors are reported once, by the access line in `logging`.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, _error: &Error) -> bool {
        true
    }

    /// One access line per request, and the request metrics.
    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut Self::CTX) {
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let now = Instant::now();
        // A client that stopped taking the response, or left before it ended, is not an error of
        // its request: it is counted and logged as what it is.
        let client_event = e.and_then(crate::origin::rescue::client_event);
        if let Some(event) = client_event {
            self.metrics.connections.event(event);
            self.hold_cancelled(ctx, now);
        }
        // A body that stopped arriving (408) is counted as the too-slow one is (`body_filter`).
        if e.is_some_and(crate::origin::rescue::is_stalled_body) {
            self.metrics.connections.event("body_timeout");
        }
        // Answers the edge made itself after the decision (no origin head went through
        // `response_filter`), or none at all (0: the client left).
        if !ctx.answers.is_empty() {
            Box::pin(self.count_answer(session, ctx, status)).await;
        }
        let duration = now.saturating_duration_since(ctx.started);
        let zone = ctx
            .policy
            .as_ref()
            .zip(ctx.zone)
            .and_then(|(loaded, zone)| loaded.zone_metrics(zone));
        let req = session.req_header();
        let format = ctx.format.map_or("-", |f| f.as_str());
        let upstream_latency = ctx.origin.started.map(|t| now.saturating_duration_since(t));
        self.metrics.observe_request(
            zone,
            status,
            ctx.error_code,
            format,
            upstream_latency.filter(|_| ctx.origin.addr.is_some()),
        );
        let zone = zone.map(|z| z.name());
        self.metrics.referrals.observe(
            zone,
            req.headers.get(http::header::REFERER).map(|v| v.as_bytes()),
            req.uri.query(),
        );
        tracing::info!(
            target: "access",
            ray_id = %ctx.ray_id,
            client = %ctx.client(),
            method = %req.method,
            // As the client sent it, port and case included: what an operator greps for.
            host = %LogSafe(&request_host(session)),
            path = %LogSafe(req.uri.path()),
            status,
            error_code = ctx.error_code.map_or(0, Code::get),
            format,
            zone = zone.map_or("-", |z| &**z),
            rule = ctx.rule_id.as_deref().unwrap_or("-"),
            error_rule = ctx.error_rule.as_deref().unwrap_or("-"),
            upstream = %OrDash(ctx.origin.addr),
            duration_ms = duration.as_secs_f64() * 1000.0,
            error = client_event.or(e.map(|e| e.etype().as_str())).unwrap_or(""),
            markdown = ctx.markdown.outcome.map_or("-", |m| m.as_str()),
            bot = ctx.identity.as_ref().and_then(|i| i.bot.as_ref()).map_or("-", |b| &*b.name),
            bot_status = ctx.identity.as_ref().map_or("-", |i| i.status.as_str()),
            signature = ctx.identity.as_ref().map_or("-", |i| i.signature.outcome.as_str()),
            markdown_cache = ctx.markdown.cache.map_or("-", |s| s.as_str()),
            crawl = ctx.crawl.as_ref().map_or("-", |c| c.action.as_str()),
            crawl_outcome = ctx.crawl.as_ref().map_or("-", |c| c.outcome.as_str()),
            charged_cents = ctx.charged.map_or(0, |p| p.cents()),
            robots = %LogSafe(ctx.robots.violation.as_ref().map_or("-", |v| &v.directive)),
            divert = ctx.divert().map_or("-", |d| &*d.name),
            challenge = ctx.challenge.outcome.unwrap_or("-"),
        );
    }
}

/// The steps of `request_filter`, in its order.
impl Edge {
    /// Step 1: what no zone may accept (the codes of [`Head::unacceptable`]). A CONNECT's framing
    /// is not a normal request's: the connection is never read past it.
    fn head_limits(session: &Session, head: &Head) -> Option<Refusal> {
        let code = head.unacceptable(session.req_header())?;
        let refusal = Refusal::code(code);
        Some(if code == Code::METHOD_NOT_ALLOWED {
            refusal.closing()
        } else {
            refusal
        })
    }

    /// Step 3: the policy's decision, then its fleet rate limits, driven with Redis's answers.
    async fn decide(
        &self,
        session: &Session,
        ctx: &mut RequestCtx,
        loaded: &Loaded,
    ) -> Option<Refusal> {
        let host = request_host(session);
        let facts = crate::request::facts::request_facts(session, &ctx.facts, &host);
        // The request's arrival is the rate limiters' "now": one clock read serves both. The fleet
        // step is the policy's (which rules, in which order, the first refusal deciding); the
        // edge only asks Redis.
        let decide = || match &loaded.identifier {
            Some(identifier) => {
                let req = session.req_header();
                let evidence = identifier.evidence(req, &host, ctx.facts.tls);
                loaded.policy.decide_with(&facts, &evidence, ctx.started)
            }
            None => loaded.policy.decide(&facts, ctx.started),
        };
        let mut decision = decide();
        // A signed request challenged while its agent's key directory is fetched for the first
        // time would read unverified, and a client that signs on `Accept-Signature` would fail
        // the challenge it answered: it waits for the fetch, within DIRECTORY_WAIT, and is
        // decided again (its rate limits count it once more: rare, once per new directory).
        if let (Verdict::Challenge { .. }, Some(identifier)) =
            (decision.verdict, &loaded.identifier)
            && decision.identity.signature.reason == "directory_pending"
            && Box::pin(identifier.await_pending_directory(
                session.req_header(),
                &host,
                ctx.facts.tls,
                crate::challenge::DIRECTORY_WAIT,
            ))
            .await
        {
            decision = decide();
        }
        if !decision.fleet.is_empty() {
            Box::pin(loaded.count_in_fleet(&mut decision, &self.metrics)).await;
        }
        ctx.client_ip = Some(decision.client_ip);
        ctx.zone = decision.zone;
        ctx.rule_id = decision.rule_id.clone();
        // Emptied by the policy when it refuses: only answers to requests let through count.
        ctx.answers = std::mem::take(&mut decision.answers);
        ctx.divert = decision.divert;
        if let (Some(divert), Some(zone), Some(rule)) = (ctx.divert(), ctx.zone(), &ctx.rule_id) {
            self.metrics.divert.request(&zone.name, rule, &divert.name);
        }
        loaded.rules.observe(&decision);
        if !decision.identity.is_nobody() {
            self.metrics.identity.observe(&decision.identity);
            ctx.identity = Some(Box::new(std::mem::take(&mut decision.identity)));
            if let (Some(bot), Some(zone)) = (
                ctx.identity.as_ref().and_then(|i| i.bot.as_ref()),
                ctx.zone(),
            ) {
                let path = session.req_header().uri.path();
                ctx.robots.violation = crate::crawl::robots::violation(
                    &loaded.robots,
                    &self.metrics.crawl,
                    &zone.name,
                    bot,
                    path,
                );
            }
        }
        if let Some(step) = decision.crawl.take() {
            if let Some(zone) = ctx.zone() {
                self.metrics.crawl.request(&zone.name, &step);
            }
            ctx.crawl = Some(step);
        }
        if let (Some(note), Some(zone)) = (&decision.challenge, ctx.zone())
            && let Some(bypass) = note.bypass
        {
            let rule: Arc<str> = note.label().into();
            self.metrics
                .challenge
                .bypassed(&zone.name, &rule, bypass.as_str());
            ctx.challenge.outcome = Some(bypass.as_str());
        }
        for rule in &decision.logged {
            tracing::info!(ray_id = %ctx.ray_id, rule = %rule, client = %decision.client_ip, "log rule matched");
        }
        match decision.verdict {
            Verdict::Refuse { code, retry_after } => Some(Refusal {
                retry_after,
                ..Refusal::code(code)
            }),
            Verdict::Challenge { difficulty } => {
                ctx.challenge.pending = Some(crate::challenge::Pending::of(
                    difficulty,
                    decision.challenge.as_ref(),
                ));
                None
            }
            Verdict::Proxy => None,
        }
    }

    /// Step 2b: a challenge endpoint on a zone's host, when the policy has challenge keys. The
    /// answer (a form body for `verify`, read up to `MAX_FORM_LEN` bytes, or the query for
    /// `wait`) is redeemed for a clearance, or the page is shown again.
    async fn challenge_endpoint(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        loaded: &Loaded,
        endpoint: crate::challenge::Endpoint,
    ) -> Result<EndpointAnswer> {
        use signpost_challenge::MAX_FORM_LEN;
        let Some(ring) = loaded.policy.challenge_keys() else {
            return Ok(EndpointAnswer::NotServed);
        };
        let (zone, client) = {
            let host = request_host(session);
            let facts = crate::request::facts::request_facts(session, &ctx.facts, &host);
            loaded.policy.answering(&facts)
        };
        let Some(zone) = zone else {
            return Ok(EndpointAnswer::NotServed);
        };
        ctx.zone = Some(zone);
        ctx.client_ip = Some(client);
        if !endpoint.allows(session.req_header().method.as_str()) {
            return Ok(EndpointAnswer::Refused(
                Refusal::code(Code::METHOD_NOT_ALLOWED).closing(),
            ));
        }
        let form = match endpoint {
            crate::challenge::Endpoint::Verify => {
                let mut form = Vec::new();
                loop {
                    match session.read_request_body().await.map_err(|mut e| {
                        e.as_down();
                        e
                    })? {
                        Some(chunk) if form.len() + chunk.len() <= MAX_FORM_LEN => {
                            form.extend_from_slice(&chunk);
                        }
                        Some(_) => {
                            // Over the bound: refused as malformed, the rest left unread.
                            session.set_keepalive(None);
                            form.clear();
                            break;
                        }
                        None => break,
                    }
                }
                form
            }
            crate::challenge::Endpoint::Wait => session
                .req_header()
                .uri
                .query()
                .unwrap_or("")
                .as_bytes()
                .to_vec(),
        };
        let zone = loaded.policy.zone(zone);
        let reply = {
            let req = session.req_header();
            let host = signpost_policy::normalize_host(&request_host(session)).into_owned();
            let asking = crate::challenge::Asking {
                zone,
                ring,
                client,
                headers: &req.headers,
                method: req.method.as_str(),
                target: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
                host: &host,
                tls: ctx.facts.tls,
                ray: ctx.ray_id,
                footer: &loaded.policy.problem_branding().footer,
            };
            let now = crate::challenge::unix_now();
            let (reply, redeemed) = crate::challenge::at_endpoint(&asking, endpoint, &form, now)?;
            match redeemed {
                Ok(method) => self.metrics.challenge.solved(&zone.name, method),
                Err(reason) => self.metrics.challenge.failed(&zone.name, reason.as_str()),
            }
            reply
        };
        ctx.challenge.outcome = Some(reply.outcome);
        ctx.error_code = reply.code;
        ctx.format = reply.code.map(|_| reply.format);
        reply.write(session).await?;
        Ok(EndpointAnswer::Answered)
    }

    /// Step 3b: a request the policy challenges. A valid clearance lets it on (counted
    /// `cleared`); otherwise the page or the problem is the answer. Returns whether it answered.
    async fn challenge(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        loaded: &Loaded,
        pending: crate::challenge::Pending,
    ) -> Result<bool> {
        let (Some(zone), Some(ring)) = (ctx.zone(), loaded.policy.challenge_keys()) else {
            return Error::e_explain(InternalError, "a challenge without a zone or keys");
        };
        let now = crate::challenge::unix_now();
        let reply = {
            let req = session.req_header();
            let host = request_host(session);
            let shown = signpost_policy::normalize_host(&host);
            let asking = crate::challenge::Asking {
                zone,
                ring,
                client: ctx.client(),
                headers: &req.headers,
                method: req.method.as_str(),
                target: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
                host: &shown,
                tls: ctx.facts.tls,
                ray: ctx.ray_id,
                footer: &loaded.policy.problem_branding().footer,
            };
            if crate::challenge::cleared(&asking, pending.difficulty, now).is_ok() {
                self.metrics
                    .challenge
                    .bypassed(&zone.name, &pending.rule, "cleared");
                None
            } else {
                let asked = ctx.asked(session, &host);
                let reply = crate::challenge::challenge(
                    &loaded.policy,
                    &asked,
                    &asking,
                    pending.difficulty,
                    ctx.rule_id.as_deref(),
                    now,
                )?;
                self.metrics
                    .challenge
                    .issued(&zone.name, &pending.rule, reply.outcome);
                Some(reply)
            }
        };
        let Some(reply) = reply else {
            ctx.challenge.outcome = Some("cleared");
            return Ok(false);
        };
        ctx.challenge.outcome = Some("issued");
        ctx.error_code = reply.code;
        ctx.format = Some(reply.format);
        reply.write(session).await?;
        Ok(true)
    }

    /// Step 4: what the zone does not accept: TRACE and TRACK (they echo the request, Cookie
    /// included, back to whoever can read the response), and a declared body over its limit
    /// (left unread, so the connection cannot carry another request).
    fn zone_limits(session: &Session, ctx: &RequestCtx, head: &Head) -> Option<Refusal> {
        let zone = ctx.zone()?;
        let code = head.zone_refuses(session.req_header(), zone)?;
        let refusal = Refusal::code(code);
        // A declared body over the limit is left unread: the connection cannot go on.
        Some(if code == Code::PAYLOAD_TOO_LARGE {
            refusal.closing()
        } else {
            refusal
        })
    }

    /// Step 5: a chunked body is parsed as far as it arrived before the origin is contacted, so
    /// that a body that cannot be parsed is answered 400 without the origin seeing it.
    async fn preread_body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        head: &Head,
    ) -> Result<Option<Refusal>> {
        if !head.wants_preread(session) {
            return Ok(None);
        }
        match Box::pin(self.preread_chunked_body(session, ctx)).await {
            Ok(()) => Ok(None),
            Err(e) => match rescue(&e) {
                Rescue::Answer(code) => Ok(Some(Refusal::code(code).closing())),
                Rescue::ClientGone => Err(e),
            },
        }
    }

    /// Reads the first part of a chunked request body (one read: what arrived with the head, or
    /// the next packet) into Pingora's retry buffer, from which the proxy replays it to the
    /// origin before streaming the rest.
    ///
    /// One read is at most 64 KiB, the retry buffer's capacity, once the head is under 16 KiB
    /// (the header buffer, and so the body bytes read with the head, stays under 32 KiB): the
    /// buffer cannot overflow, so nothing read here can be lost. Larger heads, and requests
    /// that wait for `100 Continue`, are streamed unchanged ([`Head::wants_preread`]).
    async fn preread_chunked_body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        session.enable_retry_buffering();
        ctx.body.started = Some(Instant::now());
        let first = session.read_request_body().await.map_err(|mut e| {
            // The client's body: its errors are the client's (Pingora leaves the source unset).
            e.as_down();
            e
        })?;
        // Not added to `ctx.body.bytes`: the proxy replays these bytes through
        // `request_body_filter`, which counts them then.
        let read = first.as_ref().map_or(0, |b| b.len() as u64);
        if session.retry_buffer_truncated() {
            // Not reachable under the bound above; if it were, the bytes read could no longer
            // be forwarded, and the request must not reach the origin without them.
            return Error::e_explain(InternalError, "request body pre-read overflowed");
        }
        if ctx.zone().is_some_and(|zone| read > zone.max_body_size) {
            return Error::e_explain(BODY_TOO_LARGE, "request body over the zone's max_body_size");
        }
        Ok(())
    }

    /// Step 6: the client's share of origin work: at most `max_in_flight_per_client` requests on
    /// their way to origins, over every protocol. Past it, 429 (1015): the request is fine, the
    /// client has too many at once, and one of its own requests ending frees a place, so a
    /// second's wait is the advice.
    fn take_in_flight(&self, ctx: &mut RequestCtx, loaded: &Loaded) -> Option<Refusal> {
        let client = client_key(ctx.client());
        let max = loaded.policy.connections().max_in_flight_per_client;
        match self.in_flight.try_start(client, max, ctx.started) {
            Some(slot) => {
                ctx.in_flight = Some(slot);
                None
            }
            None => {
                self.metrics.connections.event("too_many_in_flight");
                if self.in_flight_log.allow() {
                    tracing::warn!(
                        ray_id = %ctx.ray_id,
                        client = %client,
                        max_in_flight_per_client = max,
                        suppressed = self.in_flight_log.take_suppressed(),
                        "request refused: the client has max_in_flight_per_client requests in flight"
                    );
                }
                Some(Refusal {
                    retry_after: Some(1),
                    ..Refusal::code(Code::RATE_LIMITED)
                })
            }
        }
    }

    /// Step 6b: `/robots.txt` on a zone that manages it or reads it (`robots::request`): the
    /// managed block when the edge answers it alone (`replace`); otherwise, when the origin's
    /// file is read, the reading state is kept in the context for the response's hooks.
    fn robots_txt(session: &Session, ctx: &mut RequestCtx, loaded: &Loaded) -> Option<String> {
        use crate::crawl::robots::RobotsRequest;
        let zone = ctx.zone()?;
        match crate::crawl::robots::request(session.req_header(), zone, &loaded.policy)? {
            RobotsRequest::Answer(managed) => Some(managed),
            RobotsRequest::Read(reading) => {
                ctx.robots.body = Some(reading);
                None
            }
        }
    }

    /// Step 7, first half: whether the request negotiates Markdown on a zone that converts, and
    /// can have it (else it is counted as skipped); the zone's conversion settings when it does.
    fn markdown_wanted(&self, session: &Session, ctx: &mut RequestCtx) -> Option<MarkdownConfig> {
        use crate::markdown::{self, Outcome};
        let config = ctx.zone().filter(|z| z.markdown.enabled)?;
        if ctx.robots.body.is_some() || ctx.crawl.as_ref().is_some_and(|c| c.charges()) {
            // robots.txt is never converted; a charged page goes down the proxy path, where
            // the charge is settled (conversion does not settle charges yet).
            return None;
        }
        let accept = crate::request::facts::accept(session);
        match markdown::wanted(session.req_header(), accept.as_deref())? {
            true => Some(config.markdown.clone()),
            false => {
                ctx.markdown.outcome = Some(Outcome::Skipped);
                self.metrics.markdown.outcome(Outcome::Skipped);
                None
            }
        }
    }

    /// Step 7: a request that negotiates Markdown on a zone that converts is answered from the
    /// zone's converted-page cache when a fresh entry is there, or once another request
    /// converting the same page has stored it (markdown/cache.rs), else forwarded by
    /// [`Edge::convert_from_origin`] (the why is in markdown/mod.rs). Every other request goes down
    /// Pingora's proxy path.
    ///
    /// A failure is returned, not answered here: Pingora hands it to `fail_to_proxy`, which
    /// answers it as it answers the proxy route's (the 52x of `origin/rescue.rs`, nothing for a client
    /// that left), and to `logging`, which logs and counts it the same way.
    async fn serve_markdown(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        config: MarkdownConfig,
    ) -> Result<bool> {
        use crate::markdown::Outcome;
        let req = session.req_header();
        let target = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
        let url = crate::markdown::cache::page_key(ctx.facts.tls, &request_host(session), target);
        let head_only = req.method == http::Method::HEAD;
        let cache = ctx
            .policy
            .as_ref()
            .zip(ctx.zone)
            .and_then(|(loaded, zone)| loaded.markdown_cache(zone))
            .cloned();
        let mut cached = match cache {
            Some(cache) => {
                // Waiting for another request converting the page: no longer than this request
                // would wait for the origin.
                let wait = ctx
                    .zone()
                    .map_or(crate::markdown::cache::MAX_COALESCE_WAIT, |z| {
                        z.read_timeout
                    });
                Some(cache.lookup_coalesced(req, &url, wait).await)
            }
            None => None,
        };
        if let Some(reply) = cached
            .as_ref()
            .and_then(|c| c.fresh_reply(ctx.ray_header(), Instant::now()))
        {
            ctx.markdown.outcome = Some(Outcome::Cached);
            ctx.markdown.cache = cached.map(|c| c.finish(true));
            reply?.write(session, head_only).await?;
            return Ok(true);
        }
        let forwarded = self
            .convert_from_origin(session, ctx, &config, url, cached.as_mut())
            .await;
        let sent_markdown = matches!(forwarded, Ok(Outcome::Converted | Outcome::Cached));
        ctx.markdown.cache = cached.map(|c| c.finish(sent_markdown));
        ctx.markdown.outcome = Some(*forwarded.as_ref().unwrap_or(&Outcome::Failed));
        forwarded.map(|_| true)
    }

    /// The Markdown route's way to the origin, the proxy route's in every step that concerns
    /// the origin: the zone's peer, the request prepared and the answer's head filtered by
    /// `origin_route`; then converted, or passed through, by `markdown::respond`.
    async fn convert_from_origin(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        config: &MarkdownConfig,
        url: String,
        cache: Option<&mut crate::markdown::cache::Use>,
    ) -> Result<crate::markdown::Outcome> {
        use crate::markdown;
        let peer = self.peer(ctx).await?;
        let mut request = markdown::upstream_request(session.req_header())?;
        let ray = ctx.ray_header();
        crate::origin::route::prepare_request(
            &mut request,
            session,
            ToOrigin::of(ctx, ray.clone()),
        );
        if let Some(cache) = cache.as_deref() {
            cache.ask_conditionally(&mut request)?;
        }
        let (up, mut resp) = markdown::ask_origin(&self.markdown, &peer, request).await?;
        let instead = crate::origin::route::filter_response(session, &mut resp, ctx)
            .await?
            .map(|answer| (answer.head, answer.body));
        let job = markdown::Job {
            converter: &self.markdown,
            metrics: &self.metrics.markdown,
            config,
            peer: &peer,
            url,
            head_only: session.req_header().method == http::Method::HEAD,
            ray,
            cache,
        };
        markdown::respond(session, job, up, resp, instead).await
    }
}

/// The answers and the way to the origin, shared by the steps and the hooks.
impl Edge {
    pub fn new(
        policy: Arc<ArcSwap<Loaded>>,
        origin_override: Option<Origin>,
        metrics: Arc<Metrics>,
    ) -> Edge {
        let in_flight_gauge = metrics.connections.requests_in_flight();
        Edge {
            policy,
            origin_override,
            metrics,
            resolver: OriginResolver::default(),
            unreadable_log: Default::default(),
            idle_log: Default::default(),
            markdown: crate::markdown::Converter::default(),
            in_flight: Arc::new(InFlight::new(in_flight_gauge)),
            in_flight_log: Default::default(),
        }
    }

    /// Counts the answer with status `status` for the rate limits that count this request's
    /// answers (`counting_expression`), once: the origin's answer in `response_filter`, before its
    /// head goes to the client, so that the client's next request sees the count; an answer the
    /// edge made itself in `logging`. A fleet rule's Redis call is bounded by the policy's timeout.
    async fn count_answer(&self, session: &Session, ctx: &mut RequestCtx, status: u16) {
        let answers = std::mem::take(&mut ctx.answers);
        let Some(loaded) = ctx.policy.clone() else {
            return;
        };
        let host = request_host(session);
        let facts = crate::request::facts::request_facts(session, &ctx.facts, &host);
        let response = signpost_policy::ResponseFacts {
            code: status,
            edge_code: ctx.error_code.map_or(0, Code::get),
        };
        loaded
            .count_answers(
                &answers,
                &facts,
                ctx.client(),
                ctx.identity.as_deref(),
                response,
                &self.metrics,
            )
            .await;
    }

    /// The zone's origin peer, recorded in the context for the access log and the metrics.
    async fn peer(&self, ctx: &mut RequestCtx) -> Result<Box<HttpPeer>> {
        ctx.origin.proxying = true;
        let zone = ctx
            .zone()
            .ok_or_else(|| Error::explain(InternalError, "proxying without a zone"))?;
        // A diverted request goes to the divert's origin, whatever `--origin` says of the zone's.
        let origin = match ctx.divert() {
            Some(divert) => Some(&divert.origin),
            None => self.origin_override.as_ref(),
        };
        let (peer, addr) = crate::origin::peer(&self.resolver, zone, origin).await?;
        ctx.origin.addr = Some(addr);
        ctx.origin.started = Some(Instant::now());
        Ok(peer)
    }

    /// Renders `entry` as the client's `Accept` asks and writes it as the whole response.
    ///
    /// Callers on the proxied path box this future, so that its state (the rendered page, the
    /// response head) is not carried, and moved, by every request that is not refused.
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        entry: &'static CatalogEntry,
        retry_after: Option<u32>,
    ) -> Result<()> {
        let loaded = ctx
            .policy
            .clone()
            .unwrap_or_else(|| self.policy.load_full());
        let answer = {
            // The operator's error rule, if one matches this answer: asked here, where an error
            // is answered, and never on the way to the origin. Kept inside this block, so that
            // none of it is held across the write below.
            let host = request_host(session);
            let asked = ctx.asked(session, &host);
            let refused = crate::answer::error_rules::Refused {
                entry,
                retry_after,
                by: ctx.rule_id.as_deref(),
                // Crawl control's own answer speaks before any error rule, as a rule's own
                // response does.
                crawl: crate::crawl::refusal(ctx.crawl.as_deref())
                    .filter(|r| r.code() == entry.code),
            };
            let (answer, rule) =
                crate::answer::error_rules::dress(&loaded.policy, &asked, ctx.ray_id, &refused)?;
            ctx.error_rule = rule.map(|r| r.id.into());
            answer
        };
        let mut answer = answer;
        if let Some(hsts) = crate::request::https::hsts(ctx.zone(), ctx.facts.tls) {
            answer
                .head
                .insert_header(http::header::STRICT_TRANSPORT_SECURITY, hsts)?;
        }
        ctx.error_code = Some(answer.code);
        ctx.format = Some(answer.format);
        let head_only = session.req_header().method == http::Method::HEAD;
        answer.write(session, head_only).await
    }

    /// Answers a failure on the way to the origin (the proxy route's or the Markdown route's, both
    /// through `fail_to_proxy`) with its
    /// 52x (or 1016) problem. The status written, or `None` when nothing could be: the client is
    /// gone, or the origin failed midway through a response already begun.
    async fn answer_failure(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> Option<u16> {
        let code = match rescue(e) {
            Rescue::Answer(code) => code,
            Rescue::ClientGone => return None,
        };
        if ctx.origin.proxying {
            // Pingora drops the client's connection after a failure on the way to the origin
            // (its `proxy_to_upstream` reports the session as not reusable): announce it with
            // `Connection: close` so that the client does not send its next request into a
            // connection that is about to be reset.
            session.set_keepalive(None);
        }
        if session.response_written().is_some() {
            // The origin failed mid-response: the status line is already out, so the only honest
            // signal left is to cut the connection. (An answer of the edge's own keeps its code.)
            ctx.error_code.get_or_insert(code);
            return None;
        }
        let entry = crate::answer::entry(code);
        self.answer(session, ctx, entry, None)
            .await
            .ok()
            .map(|()| entry.status)
    }

    /// A request its client cancelled before the origin answered keeps its place among the
    /// client's requests in flight: the origin may still be working on it.
    fn hold_cancelled(&self, ctx: &mut RequestCtx, now: Instant) {
        if ctx.origin.answered {
            return;
        }
        let hold = ctx
            .zone()
            .map_or(crate::connection::inflight::CANCELLED_HOLD_MAX, |z| {
                z.read_timeout
            })
            .min(crate::connection::inflight::CANCELLED_HOLD_MAX);
        if let Some(slot) = ctx.in_flight.as_mut() {
            slot.hold_until(now + hold);
        }
    }
}

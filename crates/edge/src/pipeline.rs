//! The request pipeline: client facts → policy decision → origin, or a problem in the asked format.
//!
//! Every request flows one way through the hooks below, in the order Pingora calls them:
//!
//! ```text
//! request_filter ── /cdn-cgi/error/<code> ─────────────────────────────► problem (never forwarded)
//!      │
//!      ├─ policy.decide(facts), then fleet rate limits (Redis) ── Refuse ─► problem (1xxx, 1013 too)
//!      │
//!      └─ Proxy ─► upstream_peer (resolve origin; 1016) ─► upstream_request_filter (X-Forwarded-*)
//!                     │                                         │
//!                     └─ connect/read failure ─► fail_to_proxy ─┴─► problem (52x)
//!                                                 response_filter (ray id) ─► origin's answer
//! logging: one access line per request, whatever happened.
//! ```

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::http::{ResponseHeader, StaticHeaderName};
use pingora::prelude::*;
use pingora::proxy::FailToProxy;
use signpost_policy::{Origin, RequestFacts, Verdict, Zone};
use signpost_problem::{Code, Format, Problem};

use crate::facts::{Facts, IpText, LogSafe, forwarded_for, request_host};
use crate::metrics::Metrics;
use crate::origin::OriginResolver;
use crate::ray::RayId;
use crate::reload::Loaded;
use crate::rescue::{Rescue, rescue};

/// Where the edge answers `/cdn-cgi/error/<code>` itself, on every host.
const ERROR_PAGE_PREFIX: &str = "/cdn-cgi/error";

/// The longest request target (path and query) the edge accepts: 16 KiB, Cloudflare's URL limit.
/// Longer is 414.
pub const MAX_URI_LEN: usize = 16 * 1024;
/// The largest header section the edge accepts, names and values summed: 32 KiB, Cloudflare's
/// limit. Larger is 431 (Pingora itself stops reading at 1 MiB or 256 header lines).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The headers the edge adds to every proxied request (and `cf-ray` to every response), parsed
/// once: inserted through these, a header's name is neither parsed nor copied per request (the
/// `&'static str` names Pingora also takes are parsed, and so allocated, on each insert). They
/// are written to the wire exactly as the same text would be.
pub(crate) static X_FORWARDED_FOR: StaticHeaderName = StaticHeaderName::new("x-forwarded-for");
static X_FORWARDED_PROTO: StaticHeaderName = StaticHeaderName::new("x-forwarded-proto");
static CF_CONNECTING_IP: StaticHeaderName = StaticHeaderName::new("cf-connecting-ip");
static CF_RAY: StaticHeaderName = StaticHeaderName::new(signpost_problem::RAY_ID_HEADER);

/// The ray id as a header value, in one shared allocation: the origin's request and the
/// client's response carry the same value, and cloning it copies nothing.
fn ray_value(ray: RayId) -> http::HeaderValue {
    // Sixteen hex digits are a valid header value.
    http::HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(ray.to_hex()))
        .unwrap_or(http::HeaderValue::from_static("0000000000000000"))
}

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
    unreadable_log: crate::malformed::LogBudget,
    /// The same for keep-alive connections closed idle.
    idle_log: crate::malformed::LogBudget,
    /// Origin HTML converted to Markdown: connector, conversion slots, memory budget.
    markdown: crate::markdown::Converter,
    /// Requests each client has on their way to origins (`max_in_flight_per_client`).
    in_flight: Arc<crate::inflight::InFlight>,
    /// Bounds the log lines of clients refused for too many requests in flight.
    in_flight_log: crate::malformed::LogBudget,
}

/// What one request learned on its way through the pipeline; `logging` reports it.
pub struct RequestCtx {
    pub ray_id: RayId,
    /// `ray_id` as the `cf-ray` header value, made at its first use.
    ray_header: Option<http::HeaderValue>,
    started: Instant,
    /// Peer, TLS and host, worked out once at the start of `request_filter`.
    facts: Facts,
    policy: Option<Arc<Loaded>>,
    zone: Option<signpost_policy::ZoneId>,
    client_ip: Option<IpAddr>,
    /// The catalog code of an edge-generated answer, if the edge answered.
    error_code: Option<Code>,
    format: Option<Format>,
    rule_id: Option<Arc<str>>,
    upstream: Option<SocketAddr>,
    upstream_started: Option<Instant>,
    /// Request body bytes received so far, and when the first body chunk was awaited.
    body_bytes: u64,
    body_started: Option<Instant>,
    /// Set once the request is on its way to the origin: from then on Pingora will not reuse
    /// the client's connection after a failure, whatever we answer.
    proxying: bool,
    /// What happened to a request for Markdown on a converting zone, for the access log.
    markdown: Option<crate::markdown::Outcome>,
    /// The request's place among its client's requests in flight to origins.
    in_flight: Option<crate::inflight::Slot>,
    /// Set once the origin's response header arrived: a client that leaves after it no longer
    /// holds the origin's work.
    origin_answered: bool,
}

impl RequestCtx {
    /// The `cf-ray` header value.
    fn ray_header(&mut self) -> http::HeaderValue {
        let ray_id = self.ray_id;
        self.ray_header
            .get_or_insert_with(|| ray_value(ray_id))
            .clone()
    }
}

impl Edge {
    /// Reads the first part of a chunked request body (one read: what arrived with the head, or
    /// the next packet) into Pingora's retry buffer, from which the proxy replays it to the
    /// origin before streaming the rest.
    ///
    /// One read is at most 64 KiB, the retry buffer's capacity, once the head is under 16 KiB
    /// (the header buffer, and so the body bytes read with the head, stays under 32 KiB): the
    /// buffer cannot overflow, so nothing read here can be lost. Larger heads, and requests
    /// that wait for `100 Continue`, are streamed unchanged: the caller asks [`wants_preread`].
    async fn preread_chunked_body(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        session.enable_retry_buffering();
        ctx.body_started = Some(Instant::now());
        let first = session.read_request_body().await.map_err(|mut e| {
            // The client's body: its errors are the client's (Pingora leaves the source unset).
            e.as_down();
            e
        })?;
        // Not added to `ctx.body_bytes`: the proxy replays these bytes through
        // `request_body_filter`, which counts them then.
        let read = first.as_ref().map_or(0, |b| b.len() as u64);
        if session.retry_buffer_truncated() {
            // Not reachable under the bound above; if it were, the bytes read could no longer
            // be forwarded, and the request must not reach the origin without them.
            return Error::e_explain(InternalError, "request body pre-read overflowed");
        }
        if self.zone(ctx).is_some_and(|zone| read > zone.max_body_size) {
            return Error::e_explain(BODY_TOO_LARGE, "request body over the zone's max_body_size");
        }
        Ok(())
    }

    pub fn new(
        policy: Arc<ArcSwap<Loaded>>,
        origin_override: Option<Origin>,
        metrics: Arc<Metrics>,
    ) -> Edge {
        let in_flight_gauge = metrics.client_requests_in_flight();
        Edge {
            policy,
            origin_override,
            metrics,
            resolver: OriginResolver::default(),
            unreadable_log: Default::default(),
            idle_log: Default::default(),
            markdown: crate::markdown::Converter::default(),
            in_flight: Arc::new(crate::inflight::InFlight::new(in_flight_gauge)),
            in_flight_log: Default::default(),
        }
    }

    fn zone<'a>(&self, ctx: &'a RequestCtx) -> Option<&'a Zone> {
        let loaded = ctx.policy.as_ref()?;
        Some(loaded.policy.zone(ctx.zone?))
    }

    /// Renders `code` as the client's `Accept` asks and writes it as the whole response.
    ///
    /// Callers on the proxied path box this future, so that its state (the rendered page, the
    /// response head) is not carried, and moved, by every request that is not refused.
    ///
    /// The response carries a body and a Content-Length, so the client's connection can carry its
    /// next request (Pingora's own `respond_error` closes it).
    async fn answer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        code: Code,
        retry_after: Option<u32>,
    ) -> Result<()> {
        // Every code the edge raises is in the catalog (a test checks each `Code` constant); a
        // code that were not would still get a well-formed answer, the edge's own 500.
        let entry = signpost_problem::lookup(code)
            .or_else(|| signpost_problem::lookup(Code::INTERNAL_ERROR))
            .unwrap_or_else(signpost_problem::not_found);
        self.answer_entry(session, ctx, entry, retry_after).await
    }

    async fn answer_entry(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        entry: &'static signpost_problem::CatalogEntry,
        retry_after: Option<u32>,
    ) -> Result<()> {
        let format = signpost_problem::negotiate(crate::facts::accept(session).as_deref());
        let ray = ctx.ray_id.to_hex();
        let loaded = ctx
            .policy
            .clone()
            .unwrap_or_else(|| self.policy.load_full());
        let rendered = {
            // The normalised host is only shown here, so it is worked out here rather than kept
            // (as an allocated copy) by every proxied request.
            let host = request_host(session);
            let problem = Problem {
                entry,
                ray_id: ray.as_str(),
                timestamp: SystemTime::now(),
                zone: &signpost_policy::normalize_host(&host),
                retry_after,
            };
            signpost_problem::render(&problem, format, loaded.policy.problem_branding())
        };
        ctx.error_code = Some(entry.code);
        ctx.format = Some(format);

        let mut header = ResponseHeader::build(rendered.status, Some(8))?;
        if header.status.canonical_reason().is_none() {
            // 52x and 530 have no standard reason phrase: say what they mean on the status line.
            header.set_reason_phrase(Some(&entry.title))?;
        }
        for (name, value) in rendered.headers(ray.as_str()) {
            header.insert_header(name, value)?;
        }
        let head_only = session.req_header().method == http::Method::HEAD;
        session
            .write_response_header(Box::new(header), head_only)
            .await?;
        if !head_only {
            session
                .write_response_body(Some(rendered.body), true)
                .await?;
        }
        Ok(())
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
        crate::malformed::answer_unreadable(
            session,
            error,
            &loaded,
            &self.metrics,
            &self.unreadable_log,
        )
        .await;
        Ok(true)
    }

    /// A kept-alive connection whose next request did not begin within `idle_timeout`: Pingora
    /// closes it; the edge counts it. Logged at debug level only (idle closes are how every
    /// browser's connection ends), within a budget so that a flood cannot flood the log.
    fn idle_timeout_closed(&self, session: &pingora::protocols::http::ServerSession) {
        self.metrics.observe_connection_event("idle_timeout");
        if tracing::enabled!(tracing::Level::DEBUG) && self.idle_log.allow() {
            let client = session
                .client_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::debug!(
                client = %crate::facts::LogSafe(&client),
                suppressed = self.idle_log.take_suppressed(),
                "idle keep-alive connection closed"
            );
        }
    }

    fn new_ctx(&self) -> Box<RequestCtx> {
        Box::new(RequestCtx {
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
            in_flight: None,
            origin_answered: false,
        })
    }

    /// The edge's whole decision. Returns `Ok(true)` when the edge answered the request itself
    /// (an error page, or a refusal by the policy), `Ok(false)` to proxy it.
    ///
    /// Order: the error test endpoint first (it is served on every host and must work even where
    /// the policy would refuse, so that people can see what a refusal looks like), then the
    /// policy, which owns host routing (1001, 1003) and every access rule.
    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let loaded = self.policy.load_full();
        ctx.policy = Some(loaded.clone());
        apply_connection_limits(session, loaded.policy.connections());
        ctx.facts = Facts::new(session);
        let host = request_host(session);

        // 0. What no zone may accept: CONNECT (never tunnelled; Pingora is told to let it through
        //    to here so that it gets a problem, not a bare 405), and request heads over the edge's
        //    limits.
        if let Some(code) = unacceptable_head(session.req_header()) {
            if code == Code::METHOD_NOT_ALLOWED {
                // A CONNECT's framing is not a normal request's: never read past it.
                session.set_keepalive(None);
            }
            Box::pin(self.answer(session, ctx, code, None)).await?;
            return Ok(true);
        }

        // 1. The error test endpoint: `/cdn-cgi/error/<code>`.
        if let Some(entry) = error_page(session.req_header().uri.path()) {
            Box::pin(self.answer_entry(session, ctx, entry, None)).await?;
            return Ok(true);
        }

        // 2. Client facts, then the policy's decision (its phases start with the TLS Host/SNI
        //    check, 1013, and host routing).
        let req = session.req_header();
        let facts = RequestFacts {
            peer: ctx.facts.peer,
            host: &host,
            method: req.method.as_str(),
            uri: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
            tls: ctx.facts.tls,
            sni: crate::tls::client_sni(session.digest()),
            headers: &req.headers,
        };
        // The request's arrival is the rate limiters' "now": one clock read serves both.
        let mut decision = loaded.policy.decide(&facts, ctx.started);
        if !decision.fleet.is_empty() {
            Box::pin(loaded.count_in_fleet(&mut decision, &self.metrics)).await;
        }
        ctx.client_ip = Some(decision.client_ip);
        ctx.zone = decision.zone;
        ctx.rule_id = decision.rule_id.clone();
        for rule in &decision.logged {
            tracing::info!(ray_id = %ctx.ray_id, rule = %rule, client = %decision.client_ip, "log rule matched");
        }

        // 3. Refused: answer with the code the policy chose.
        if let Verdict::Refuse { code, retry_after } = decision.verdict {
            Box::pin(self.answer(session, ctx, code, retry_after)).await?;
            return Ok(true);
        }

        // The request's body framing, read once for the two steps below.
        let transfer_encoding = session
            .req_header()
            .headers
            .get(http::header::TRANSFER_ENCODING);
        let has_transfer_encoding = transfer_encoding.is_some();
        let chunked =
            transfer_encoding.is_some_and(|te| te.as_bytes().eq_ignore_ascii_case(b"chunked"));

        // 4. What the zone does not accept: TRACE and TRACK (they echo the request, Cookie
        //    included, back to whoever can read the response), and a declared body over its limit.
        if let Some(zone) = self.zone(ctx) {
            let method = session.req_header().method.as_str();
            let refused = if !zone.allow_trace
                && (method.eq_ignore_ascii_case("TRACE") || method.eq_ignore_ascii_case("TRACK"))
            {
                Some(Code::METHOD_NOT_ALLOWED)
            } else if declared_body_len(session.req_header(), has_transfer_encoding)
                .is_some_and(|n| n > zone.max_body_size)
            {
                // The body is left unread: the connection cannot carry another request.
                session.set_keepalive(None);
                Some(Code::PAYLOAD_TOO_LARGE)
            } else {
                None
            };
            if let Some(code) = refused {
                Box::pin(self.answer(session, ctx, code, None)).await?;
                return Ok(true);
            }
        }

        // 5. A chunked body is parsed as far as it arrived before the origin is contacted, so
        //    that a body that cannot be parsed is answered 400 without the origin seeing it.
        if chunked
            && wants_preread(session)
            && let Err(e) = Box::pin(self.preread_chunked_body(session, ctx)).await
        {
            let code = match rescue(&e) {
                Rescue::Answer(code) => code,
                Rescue::ClientGone => return Err(e),
            };
            session.set_keepalive(None);
            Box::pin(self.answer(session, ctx, code, None)).await?;
            return Ok(true);
        }

        // 6. The client's share of origin work: at most `max_in_flight_per_client` requests on
        //    their way to origins, over every protocol.
        let client = crate::conncap::client_key(ctx.client_ip.unwrap_or(ctx.facts.peer));
        let max = loaded.policy.connections().max_in_flight_per_client;
        match self.in_flight.try_start(client, max, ctx.started) {
            Some(slot) => ctx.in_flight = Some(slot),
            None => {
                self.metrics.observe_connection_event("too_many_in_flight");
                if self.in_flight_log.allow() {
                    tracing::warn!(
                        ray_id = %ctx.ray_id,
                        client = %client,
                        max_in_flight_per_client = max,
                        suppressed = self.in_flight_log.take_suppressed(),
                        "request refused: the client has max_in_flight_per_client requests in flight"
                    );
                }
                // 429 (1015): the request is fine, the client has too many of them at once; one
                // of its own requests ending frees a place, so a second's wait is the advice.
                Box::pin(self.answer(session, ctx, Code::RATE_LIMITED, Some(1))).await?;
                return Ok(true);
            }
        }

        // 7. Markdown asked for on a zone that converts: the edge forwards it itself.
        if self.zone(ctx).is_some_and(|z| z.markdown.enabled) {
            Box::pin(self.serve_markdown(session, ctx)).await
        } else {
            Ok(false)
        }
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
        if len == 0 && ctx.body_started.is_none() {
            // No body bytes yet (a request without a body gets exactly this call): nothing to
            // count or time, so no clock is read.
            return Ok(());
        }
        let started = *ctx.body_started.get_or_insert_with(Instant::now);
        ctx.body_bytes = ctx.body_bytes.saturating_add(len);
        let (max_body, limits) = match (self.zone(ctx), ctx.policy.as_ref()) {
            (Some(zone), Some(loaded)) => (zone.max_body_size, *loaded.policy.connections()),
            _ => return Ok(()),
        };
        if ctx.body_bytes > max_body {
            return Error::e_explain(BODY_TOO_LARGE, "request body over the zone's max_body_size");
        }
        let elapsed = started.elapsed();
        if elapsed > limits.body_timeout {
            let floor = limits.body_min_rate as f64 * elapsed.as_secs_f64();
            if (ctx.body_bytes as f64) < floor {
                self.metrics.observe_connection_event("body_timeout");
                return Error::e_explain(BODY_TOO_SLOW, "request body slower than body_min_rate");
            }
        }
        Ok(())
    }

    /// The zone's origin, resolved now (a name that does not resolve is 1016), with the zone's
    /// timeouts. Pingora pools connections per peer, so repeated requests reuse them.
    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut Self::CTX,
    ) -> Result<Box<HttpPeer>> {
        ctx.proxying = true;
        let zone = self
            .zone(ctx)
            .ok_or_else(|| Error::explain(InternalError, "proxying without a zone"))?;
        let origin = self.origin_override.as_ref().unwrap_or(&zone.origin);
        let addr = match origin.ip {
            Some(ip) => SocketAddr::new(ip, origin.port),
            None => {
                self.resolver
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
        let mut peer = HttpPeer::new(addr, origin.tls, sni);
        peer.options.connection_timeout = Some(zone.connect_timeout);
        peer.options.read_timeout = Some(zone.read_timeout);
        peer.options.write_timeout = Some(zone.write_timeout);
        peer.options.verify_cert = origin.verify_cert;
        peer.options.verify_hostname = origin.verify_cert;
        ctx.upstream = Some(addr);
        ctx.upstream_started = Some(Instant::now());
        Ok(Box::new(peer))
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

    /// Adds what an origin behind an edge expects: the client's address, the scheme the client
    /// used, the host it asked for, and the ray id to match logs on both sides.
    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        let Facts { peer, tls, .. } = ctx.facts;
        // The peer's address is written once and shared by both headers that usually carry it.
        let peer_text = http::HeaderValue::from(IpText::new(peer));
        let client = match ctx.client_ip {
            Some(client) if client != peer => http::HeaderValue::from(IpText::new(client)),
            _ => peer_text.clone(),
        };
        // Sent after the client's headers, replacing any of the same names, and kept out of the
        // header maps: the edge never reads them back, and each map insert (value and case
        // maps) cost more than the rest of this hook.
        upstream.insert_wire_header(&X_FORWARDED_FOR, forwarded_for(session, peer_text));
        upstream.insert_wire_header(
            &X_FORWARDED_PROTO,
            http::HeaderValue::from_static(if tls { "https" } else { "http" }),
        );
        upstream.insert_wire_header(&CF_CONNECTING_IP, client);
        upstream.insert_wire_header(&CF_RAY, ctx.ray_header());
        Ok(())
    }

    /// The origin's answer passes through unchanged but for the ray id header (and
    /// `Vary: Accept` on zones that convert to Markdown, so caches keep the variants apart).
    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Self::CTX,
    ) -> Result<()> {
        ctx.origin_answered = true;
        response.insert_header(&CF_RAY, ctx.ray_header())?;
        if self.zone(ctx).is_some_and(|z| z.markdown.enabled) {
            crate::markdown::add_vary_accept(response)?;
        }
        Ok(())
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
        let code = match rescue(e) {
            Rescue::Answer(code) => code,
            Rescue::ClientGone => {
                return FailToProxy {
                    error_code: 0,
                    can_reuse_downstream: false,
                };
            }
        };
        if ctx.proxying {
            // Pingora drops the client's connection after a failure on the way to the origin
            // (its `proxy_to_upstream` reports the session as not reusable): announce it with
            // `Connection: close` so that the client does not send its next request into a
            // connection that is about to be reset.
            session.set_keepalive(None);
        }
        if session.response_written().is_some() {
            // The origin failed mid-response: the status line is already out, so the only honest
            // signal left is to cut the connection.
            ctx.error_code = Some(code);
            return FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            };
        }
        match self.answer(session, ctx, code, None).await {
            Ok(()) => FailToProxy {
                error_code: signpost_problem::lookup(code).map_or(500, |entry| entry.status),
                can_reuse_downstream: true,
            },
            Err(_) => FailToProxy {
                error_code: 0,
                can_reuse_downstream: false,
            },
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
        let client_event = e.and_then(crate::rescue::client_event);
        if let Some(event) = client_event {
            self.metrics.observe_connection_event(event);
            if !ctx.origin_answered {
                // The origin may still be working on it: its place stays taken for a while.
                let hold = self
                    .zone(ctx)
                    .map_or(crate::inflight::CANCELLED_HOLD_MAX, |z| z.read_timeout)
                    .min(crate::inflight::CANCELLED_HOLD_MAX);
                if let Some(slot) = ctx.in_flight.as_mut() {
                    slot.hold_until(now + hold);
                }
            }
        }
        let duration = now.saturating_duration_since(ctx.started);
        let zone = ctx
            .policy
            .as_ref()
            .zip(ctx.zone)
            .and_then(|(loaded, zone)| loaded.zone_metrics(zone));
        let req = session.req_header();
        let format = ctx.format.map_or("-", |f| f.as_str());
        let upstream_latency = ctx
            .upstream_started
            .map(|t| now.saturating_duration_since(t));
        self.metrics.observe_request(
            zone,
            status,
            ctx.error_code,
            format,
            upstream_latency.filter(|_| ctx.upstream.is_some()),
        );
        let zone = zone.map(|z| z.name());
        tracing::info!(
            target: "access",
            ray_id = %ctx.ray_id,
            client = %ctx.client_ip.unwrap_or(ctx.facts.peer),
            method = %req.method,
            // As the client sent it, port and case included: what an operator greps for.
            host = %LogSafe(&request_host(session)),
            path = %LogSafe(req.uri.path()),
            status,
            error_code = ctx.error_code.map_or(0, Code::get),
            format,
            zone = zone.map_or("-", |z| &**z),
            rule = ctx.rule_id.as_deref().unwrap_or("-"),
            upstream = %OrDash(ctx.upstream),
            duration_ms = duration.as_secs_f64() * 1000.0,
            error = client_event.or(e.map(|e| e.etype().as_str())).unwrap_or(""),
            markdown = ctx.markdown.map_or("-", |m| m.as_str()),
        );
    }
}

impl Edge {
    /// A request that negotiates Markdown on a zone that converts is forwarded and converted
    /// by `markdown::fetch_and_convert` (the why is in markdown.rs); `Ok(false)` sends every
    /// other request down Pingora's proxy path. Failures are answered as `fail_to_proxy`
    /// answers them.
    async fn serve_markdown(
        &self,
        session: &mut Session,
        ctx: &mut Box<RequestCtx>,
    ) -> Result<bool> {
        use crate::markdown::{self, Outcome};
        let Some(config) = self
            .zone(ctx)
            .filter(|z| z.markdown.enabled)
            .map(|z| z.markdown.clone())
        else {
            return Ok(false);
        };
        let accept = crate::facts::accept(session);
        match markdown::wanted(session.req_header(), accept.as_deref()) {
            None => return Ok(false),
            Some(false) => {
                ctx.markdown = Some(Outcome::Skipped);
                self.metrics.markdown.outcome(Outcome::Skipped);
                return Ok(false);
            }
            Some(true) => {}
        }
        let prepared = async {
            let peer = self.upstream_peer(session, ctx).await?;
            let mut request = markdown::upstream_request(session.req_header())?;
            self.upstream_request_filter(session, &mut request, ctx)
                .await?;
            Ok::<_, Box<Error>>((peer, request))
        }
        .await;
        let result = match prepared {
            Ok((peer, request)) => {
                let req = session.req_header();
                let url = format!(
                    "{}://{}{}",
                    if ctx.facts.tls { "https" } else { "http" },
                    request_host(session),
                    req.uri.path_and_query().map_or("/", |pq| pq.as_str())
                );
                let job = markdown::Job {
                    converter: &self.markdown,
                    metrics: &self.metrics.markdown,
                    config: &config,
                    peer: &peer,
                    request,
                    url,
                    head_only: req.method == http::Method::HEAD,
                };
                let ray = ctx.ray_id.to_hex();
                markdown::fetch_and_convert(session, job, ray.as_str()).await
            }
            Err(e) => Err((e, false)),
        };
        match result {
            Ok(outcome) => {
                ctx.markdown = Some(outcome);
                Ok(true)
            }
            Err((e, _)) => {
                ctx.markdown = Some(Outcome::Failed);
                let answered = self.fail_to_proxy(session, &e, ctx).await;
                if answered.error_code == 0 {
                    return Err(e);
                }
                Ok(true)
            }
        }
    }
}

/// Whether the start of a chunked request body is read before the origin is contacted: its
/// head is small enough that what arrived with it fits Pingora's retry buffer, and there is no
/// `Expect` (the client waits for an answer before it sends the body).
fn wants_preread(session: &mut Session) -> bool {
    let req = session.req_header();
    if req.headers.contains_key(http::header::EXPECT) {
        return false;
    }
    let head_len = req.raw_path().len()
        + req
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 4)
            .sum::<usize>();
    head_len <= PREREAD_MAX_HEAD && !session.is_body_done()
}

/// The catalog entry `/cdn-cgi/error/<code>` asks for (the 404 entry for a bad code), or `None`
/// when the path is not the error test endpoint.
fn error_page(path: &str) -> Option<&'static signpost_problem::CatalogEntry> {
    let rest = path.strip_prefix(ERROR_PAGE_PREFIX)?;
    match rest.strip_prefix('/') {
        Some(code) => Some(signpost_problem::lookup_path_code(code)),
        None if rest.is_empty() => Some(signpost_problem::not_found()),
        // `/cdn-cgi/errors` and the like are ordinary paths.
        None => None,
    }
}

/// The largest head (target plus header lines) whose chunked body is pre-read; see
/// `Edge::preread_chunked_body`.
const PREREAD_MAX_HEAD: usize = 16 * 1024;

/// A request body over the zone's `max_body_size` (413).
pub const BODY_TOO_LARGE: ErrorType = ErrorType::Custom("RequestBodyTooLarge");
/// A request body slower than `body_min_rate` (408).
pub const BODY_TOO_SLOW: ErrorType = ErrorType::Custom("RequestBodyTooSlow");

/// Sets the policy's deadlines on this request's connection: the idle keep-alive timeout for
/// the wait before the next request (unless the client asked to close), the body read timeout,
/// and pipelining, so that requests sent back to back are each answered in order.
fn apply_connection_limits(session: &mut Session, limits: &signpost_policy::Connections) {
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

/// The code for a request head the edge refuses whatever the zone: CONNECT (405), a target
/// over [`MAX_URI_LEN`] (414), a header section over [`MAX_HEADER_BYTES`] (431).
fn unacceptable_head(req: &RequestHeader) -> Option<Code> {
    if req.method == http::Method::CONNECT {
        return Some(Code::METHOD_NOT_ALLOWED);
    }
    if req.raw_path().len() > MAX_URI_LEN {
        return Some(Code::URI_TOO_LONG);
    }
    let header_bytes: usize = req
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    (header_bytes > MAX_HEADER_BYTES).then_some(Code::HEADERS_TOO_LARGE)
}

/// The body length a request declares with Content-Length, when it uses one: not with a
/// Transfer-Encoding (chunked bodies are counted as they arrive instead).
fn declared_body_len(req: &RequestHeader, has_transfer_encoding: bool) -> Option<u64> {
    if has_transfer_encoding {
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

/// An optional value in a log line: the value, or `-`.
struct OrDash<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for OrDash<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

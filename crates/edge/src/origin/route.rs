//! One way to the origin, whatever the route: the request the origin receives is prepared by
//! [`prepare_request`], and the head of its answer filtered by [`filter_response`]. Pingora's
//! proxy route (`upstream_request_filter`, `response_filter`) and the Markdown route
//! (`serve_markdown`) both call them, and so must any later route, so that every origin-facing
//! feature applies once, the same way on each:
//!
//! - to the origin: the forwarding headers (`origin/mod.rs`), the identity header (any copy the
//!   client sent removed, `identify.rs`), crawl control's `cf-pay-per-crawl` (`crawl/mod.rs`), and
//!   the conditionals robots.txt must not carry (`crawl/robots.rs`);
//! - from the origin: `cf-ray`, `Vary: Accept` on converting zones, the converted pages an
//!   unsafe request changed dropped (`markdown/cache.rs`), pay per crawl settled and the
//!   origin's own receipts removed (`crawl/mod.rs`), robots.txt's managed block (`crawl/robots.rs`), the
//!   origin's errors reshaped for agents (`origin/errors.rs`).
//!
//! A failure on the way is classified once, by `origin/rescue.rs`, for every route: the Markdown route
//! hands its errors to `fail_to_proxy` as Pingora's proxy loop does.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderValue;
use http::header::HeaderName;
use pingora::Result;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;

use crate::crawl::OriginPricing;
use crate::ctx::RequestCtx;
use crate::origin::errors::Reshaped;
use crate::request::facts::{Facts, request_host};
use crate::request::ray::CF_RAY;

/// The header telling the origin who is asking when the policy names no other.
static IDENTITY_HEADER: HeaderName =
    HeaderName::from_static(signpost_policy::DEFAULT_ORIGIN_HEADER);

/// What the origin is told about a request, beyond the client's own headers.
pub struct ToOrigin<'a> {
    /// The connection's peer and TLS.
    pub facts: &'a Facts,
    /// The client's address as the policy derived it.
    pub client: IpAddr,
    /// The request's `cf-ray` value.
    pub ray: HeaderValue,
    /// Who is asking, when the policy identified anyone in particular.
    pub identity: Option<&'a signpost_policy::Identity>,
    /// The header that tells the origin who is asking (`None`: the policy turned it off).
    pub identity_header: Option<&'a HeaderName>,
    /// On a zone with crawl control, what the origin is told of pay per crawl.
    pub pricing: Option<OriginPricing>,
    /// The edge reads the origin's robots.txt: it must come whole and as it is.
    pub reads_robots: bool,
}

impl<'a> ToOrigin<'a> {
    /// What the origin is told about the request of `ctx` (`ray`: its `cf-ray` value).
    pub fn of(ctx: &'a RequestCtx, ray: HeaderValue) -> ToOrigin<'a> {
        let loaded = ctx.policy.as_deref();
        let identity_header = match loaded.and_then(|l| l.policy.bots()) {
            Some(bots) => bots.origin_header.as_ref(),
            None => Some(&IDENTITY_HEADER),
        };
        let controls = ctx.zone().is_some_and(|z| z.crawl.is_some());
        ToOrigin {
            facts: &ctx.facts,
            client: ctx.client(),
            ray,
            identity: ctx.identity.as_deref(),
            identity_header,
            pricing: OriginPricing::of(controls, ctx.crawl.as_deref()),
            reads_robots: ctx.robots.body.is_some(),
        }
    }
}

/// Prepares `upstream`, the request the origin receives (the client's, as the route shaped it).
pub fn prepare_request(upstream: &mut RequestHeader, session: &Session, to: ToOrigin<'_>) {
    crate::origin::add_forwarding_headers(upstream, session, to.facts, to.client, to.ray);
    crate::identify::add_origin_header(upstream, to.identity, to.identity_header);
    crate::crawl::add_origin_header(upstream, to.pricing);
    if to.reads_robots {
        // The edge reads robots.txt (and may put its block before it): ask for all of it, as
        // it is.
        for name in &crate::crawl::robots::UNWANTED_REQUEST_HEADERS {
            upstream.remove_header(name);
        }
    }
}

/// Filters the head of the origin's answer, `response`, for the client. Returns the answer the
/// edge gives in its place, if any (crawl control's refusal of a paid crawl, robots.txt's
/// managed block alone, the origin's error reshaped): each route puts it in place of the
/// origin's answer its own way.
pub async fn filter_response(
    session: &Session,
    response: &mut ResponseHeader,
    ctx: &mut RequestCtx,
) -> Result<Option<Reshaped>> {
    ctx.origin.answered = true;
    response.insert_header(&CF_RAY, ctx.ray_header())?;
    let Some(zone) = ctx.zone() else {
        return Ok(None);
    };
    if let Some(hsts) = crate::request::https::hsts(Some(zone), ctx.facts.tls) {
        // The zone's setting, not the origin's, is what its HTTPS answers carry.
        response.insert_header(http::header::STRICT_TRANSPORT_SECURITY, hsts)?;
    }
    let (converts, controls_crawl) = (zone.markdown.enabled, zone.crawl.is_some());
    let status = response.status.as_u16();
    if converts {
        crate::markdown::add_vary_accept(response)?;
        let method = &session.req_header().method;
        if status < 400 && crate::markdown::cache::is_unsafe(method) {
            drop_changed_pages(session, response, ctx);
        }
    }
    if let Some(step) = ctx.crawl.as_deref() {
        use crate::crawl::{Payer, Settled};
        let ledger = ctx.policy.as_ref().and_then(|l| l.ledger.as_ref());
        let req = session.req_header();
        let payer = Payer {
            ray_id: ctx.ray_id,
            zone: ctx
                .zone()
                .map_or_else(|| Arc::from("-"), |z| Arc::clone(&z.name)),
            signature: ctx.identity.as_ref().map(|i| &i.signature),
            path: req.uri.path_and_query().map_or("/", |pq| pq.as_str()),
        };
        match crate::crawl::settle(step, response, ledger, payer).await? {
            Settled::Nothing => {}
            Settled::Charged(price) => ctx.charged = Some(price),
            Settled::Refused(refusal) => return refuse_crawl(session, ctx, &refusal).map(Some),
        }
    }
    if controls_crawl {
        crate::crawl::strip_origin_receipts(response, ctx.charged.is_some());
    }
    if ctx.robots.body.is_some() {
        let ray = ctx.ray_header();
        if let Some(managed) =
            crate::crawl::robots::response_filter(response, &mut ctx.robots.body, ray)?
        {
            return Ok(Some(managed));
        }
    }
    if status >= 400 {
        return reshape_origin_error(session, response, ctx);
    }
    Ok(None)
}

/// Crawl control's refusal of a paid crawl, in place of the origin's answer: its problem in the
/// negotiated format, with its status, detail and `crawler-error`.
fn refuse_crawl(
    session: &Session,
    ctx: &mut RequestCtx,
    refusal: &signpost_policy::CrawlRefusal,
) -> Result<Reshaped> {
    let loaded = ctx
        .policy
        .clone()
        .ok_or_else(|| pingora::Error::explain(pingora::InternalError, "no policy"))?;
    let entry = crate::answer::entry(refusal.code());
    let custom = crate::crawl::custom(refusal);
    let host = crate::request::facts::request_host(session);
    let answer = crate::answer::error_rules::render_for(
        &loaded.policy,
        &ctx.asked(session, &host),
        ctx.ray_id,
        entry,
        Some(&custom),
        None,
    )?;
    ctx.error_code = Some(answer.code);
    ctx.format = Some(answer.format);
    let crate::answer::Answer { mut head, body, .. } = answer;
    crate::crawl::add_headers(&mut head, refusal)?;
    Ok(Reshaped { head, body })
}

/// What the edge answers in place of the origin's error `response`, or `None` when the origin's
/// answer goes to the client (`origin_errors::wanted`): an error rule matching the origin's
/// status answers in any format, a zone that asks for structured origin errors answers agents.
fn reshape_origin_error(
    session: &Session,
    response: &ResponseHeader,
    ctx: &mut RequestCtx,
) -> Result<Option<Reshaped>> {
    let Some(loaded) = ctx.policy.clone() else {
        return Ok(None);
    };
    let structured = ctx.zone().is_some_and(|z| z.origin_errors_structured);
    if !structured && !loaded.policy.has_error_rules() {
        return Ok(None);
    }
    let status = response.status.as_u16();
    let Some(entry) = signpost_problem::origin_entry(status) else {
        return Ok(None);
    };
    let host = crate::request::facts::request_host(session);
    let asked = ctx.asked(session, &host);
    let rule = crate::answer::error_rules::rule_for(
        &loaded.policy,
        &asked,
        status,
        0,
        ctx.rule_id.as_deref(),
    );
    let accept = crate::request::facts::accept(session);
    if rule.is_none() && !crate::origin::errors::wanted(structured, accept.as_deref(), response) {
        return Ok(None);
    }
    let custom = crate::origin::errors::custom(response, rule.as_ref().map(|r| r.custom));
    let answer = crate::answer::error_rules::render_for(
        &loaded.policy,
        &asked,
        ctx.ray_id,
        entry,
        Some(&custom),
        None,
    )?;
    ctx.format = Some(answer.format);
    if let Some(rule) = &rule {
        ctx.error_rule = Some(rule.id.into());
    }
    crate::origin::errors::reshaped(response, answer).map(Some)
}

/// A successful unsafe request on a converting zone: the converted pages it changed are dropped
/// from the zone's cache, when it caches.
fn drop_changed_pages(session: &Session, response: &ResponseHeader, ctx: &RequestCtx) {
    let Some(cache) = ctx
        .policy
        .as_ref()
        .zip(ctx.zone)
        .and_then(|(loaded, zone)| loaded.markdown_cache(zone))
    else {
        return;
    };
    let req = session.req_header();
    let target = req.uri.path_and_query().map_or("/", |pq| pq.as_str());
    cache.unsafe_request_succeeded(&request_host(session), target, &response.headers);
}

//! Crawl control at the edge: the policy's `crawl_control` phase decides (`signpost_policy::
//! crawl`); here its answers get their wire form, and a charged response is settled and recorded.
//!
//! - A refusal is the catalog problem of [`CrawlRefusal::code`] in the negotiated format, with
//!   the refusal's status and detail (the operator's licensing message for a block), and
//!   Cloudflare's `crawler-error` and `crawler-price` headers. It takes precedence over the
//!   operator's error rules, as the response a rule carries itself does.
//! - A forwarded payment intent is settled when the origin's response head arrives
//!   ([`settle`]): a charge is recorded in the ledger, and only once the record is durable does
//!   the response go out with `crawler-charged`; a refusal (the page's price above the intent,
//!   the origin's own bad price) or a ledger that cannot write replaces the origin's response.

use std::sync::Arc;

use pingora::Result;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use signpost_policy::{CrawlOutcome, CrawlRefusal, Settlement};
use signpost_problem::Custom;

use crate::answer::Answer;
use crate::ctx::RequestCtx;
use crate::ledger::{Ledger, LedgerRecord};
use crate::log::LogBudget;

/// The price a crawler is charged, on the response it paid for.
pub const CRAWLER_CHARGED: &str = "crawler-charged";
/// The price of a page: on a 402 from the edge, or from the origin for its own page.
pub const CRAWLER_PRICE: &str = "crawler-price";
/// Why the exchange failed, one of Cloudflare's codes.
pub const CRAWLER_ERROR: &str = "crawler-error";
/// What the origin is told of pay per crawl, as Cloudflare tells it.
pub const PAY_PER_CRAWL: &str = "cf-pay-per-crawl";

/// On a zone with crawl control, tells the origin whether this request is one it may price
/// (`pricing=in-band`: a crawler's payment intent goes with it, and the origin's own
/// `crawler-price` sets the page's price) or one pay per crawl does not concern
/// (`pricing=bypass`), in Cloudflare's `cf-pay-per-crawl` header; a client's copy never reaches
/// the origin.
pub fn add_origin_header(upstream: &mut pingora::http::RequestHeader, ctx: &RequestCtx) {
    if ctx.zone().is_none_or(|z| z.crawl.is_none()) {
        return;
    }
    upstream.remove_header(PAY_PER_CRAWL);
    let pricing = if ctx.crawl.as_ref().is_some_and(|c| c.charges()) {
        "protocol=cloudflare, pricing=in-band"
    } else {
        "protocol=cloudflare, pricing=bypass"
    };
    let _ = upstream.insert_header(PAY_PER_CRAWL, pricing);
}

/// On a zone with crawl control, the origin's `crawler-price` is an instruction to the edge:
/// it reaches the client only on the edge's own 402s, as on Cloudflare.
pub fn strip_origin_price(response: &mut ResponseHeader, ctx: &RequestCtx) {
    if ctx.zone().is_some_and(|z| z.crawl.is_some()) {
        response.remove_header(CRAWLER_PRICE);
    }
}

/// What crawl control changes in the problem answering `refusal`: its status and detail.
pub fn custom(refusal: &CrawlRefusal) -> Custom {
    Custom {
        status: Some(refusal.status),
        detail: Some(refusal.detail.clone()),
        ..Custom::default()
    }
}

/// The refusal crawl control made of the request, if it refused it.
pub fn refusal(ctx: &RequestCtx) -> Option<&CrawlRefusal> {
    match &ctx.crawl.as_deref()?.outcome {
        CrawlOutcome::Refused(refusal) => Some(refusal),
        _ => None,
    }
}

/// Adds `crawler-error` and `crawler-price` to an answer's head.
pub fn add_headers(head: &mut ResponseHeader, refusal: &CrawlRefusal) -> Result<()> {
    if let Some(error) = refusal.error {
        head.insert_header(CRAWLER_ERROR, error.as_str())?;
    }
    if let Some(price) = refusal.advertise {
        head.insert_header(CRAWLER_PRICE, price.to_string())?;
    }
    Ok(())
}

/// Bounds the log lines of charges the ledger could not record.
pub static LEDGER_LOG: LogBudget = LogBudget::new();

/// The response half of pay per crawl, on the origin's response head: for a request that
/// forwarded a payment intent, charges (recorded first), lets the response go uncharged, or
/// replaces it with the exchange's refusal. Does nothing for any other request.
pub async fn settle(
    session: &Session,
    response: &mut ResponseHeader,
    ctx: &mut RequestCtx,
    ledger: Option<&Arc<Ledger>>,
) -> Result<()> {
    let Some(step) = ctx.crawl.as_deref() else {
        return Ok(());
    };
    let CrawlOutcome::Forward { intent, price } = step.outcome else {
        return Ok(());
    };
    let origin_price = response.headers.get(CRAWLER_PRICE).map(|v| v.as_bytes());
    let refusal =
        match signpost_policy::settle(intent, price, response.status.as_u16(), origin_price) {
            Settlement::NoCharge => return Ok(()),
            Settlement::Refuse(refusal) => CrawlRefusal::exchange(refusal),
            Settlement::Charge(price) => {
                let crawler = Arc::clone(&step.crawler.name);
                match record(session, ctx, ledger, price, &crawler).await {
                    Ok(()) => {
                        ctx.charged = Some(price);
                        response.insert_header(CRAWLER_CHARGED, price.to_string())?;
                        return Ok(());
                    }
                    Err(why) => {
                        if LEDGER_LOG.allow() {
                            tracing::error!(
                                ray_id = %ctx.ray_id,
                                crawler = %crawler,
                                suppressed = LEDGER_LOG.take_suppressed(),
                                "charge refused, the ledger could not record it: {why}"
                            );
                        }
                        CrawlRefusal::exchange(signpost_policy::Refusal::internal_error())
                    }
                }
            }
        };
    let answer = render(session, ctx, &refusal)?;
    ctx.error_code = Some(answer.code);
    ctx.format = Some(answer.format);
    let Answer { mut head, body, .. } = answer;
    add_headers(&mut head, &refusal)?;
    crate::origin_errors::replace(
        session,
        response,
        ctx,
        crate::origin_errors::Reshaped { head, body },
    )
}

/// The charge's record, written to the ledger; resolves once it is durable.
async fn record(
    session: &Session,
    ctx: &RequestCtx,
    ledger: Option<&Arc<Ledger>>,
    price: signpost_policy::Price,
    crawler: &Arc<str>,
) -> std::result::Result<(), String> {
    let ledger = ledger.ok_or("the policy has no [ledger]")?;
    let zone = ctx
        .zone()
        .map_or_else(|| Arc::from("-"), |z| Arc::clone(&z.name));
    let signature = ctx.identity.as_ref().map(|i| &i.signature);
    let record = LedgerRecord {
        time: std::time::SystemTime::now(),
        ray_id: ctx.ray_id.to_hex().as_str().to_owned(),
        zone,
        crawler: crawler.to_string(),
        directory: signature
            .and_then(|s| s.agent.as_deref())
            .unwrap_or("")
            .to_owned(),
        key_id: signature
            .and_then(|s| s.keyid.as_deref())
            .unwrap_or("")
            .to_owned(),
        path: session
            .req_header()
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_owned(),
        price,
    };
    ledger
        .record(&record, crawler)
        .await
        .map_err(|e| e.to_string())
}

/// The problem answering `refusal`, in the format the client negotiated.
fn render(session: &Session, ctx: &RequestCtx, refusal: &CrawlRefusal) -> Result<Answer> {
    let loaded = ctx
        .policy
        .clone()
        .ok_or_else(|| pingora::Error::explain(pingora::InternalError, "no policy"))?;
    let entry = crate::answer::entry(refusal.code());
    crate::error_rules::render(&loaded, session, ctx, entry, Some(&custom(refusal)), None)
}

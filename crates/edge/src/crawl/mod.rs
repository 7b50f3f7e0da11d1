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

pub(crate) mod ledger;
pub(crate) mod metrics;
pub(crate) mod robots;

use std::sync::Arc;

use pingora::Result;
use pingora::http::ResponseHeader;
use signpost_policy::{CrawlOutcome, CrawlRefusal, CrawlStep, Price, Settlement, Signature};
use signpost_problem::Custom;

use crate::crawl::ledger::{Ledger, LedgerRecord};
use crate::log::LogBudget;
use crate::request::ray::RayId;

/// The price a crawler is charged, on the response it paid for.
pub const CRAWLER_CHARGED: &str = "crawler-charged";
/// The price of a page: on a 402 from the edge, or from the origin for its own page.
pub const CRAWLER_PRICE: &str = "crawler-price";
/// Why the exchange failed, one of Cloudflare's codes.
pub const CRAWLER_ERROR: &str = "crawler-error";
/// What the origin is told of pay per crawl, as Cloudflare tells it.
pub const PAY_PER_CRAWL: &str = "cf-pay-per-crawl";

/// What the origin is told of pay per crawl on a zone with crawl control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginPricing {
    /// A crawler's payment intent goes with the request, and the origin's own `crawler-price`
    /// sets the page's price.
    InBand,
    /// Pay per crawl does not concern this request.
    Bypass,
}

impl OriginPricing {
    /// On a zone with crawl control (`controls`), what the origin is told of the request crawl
    /// control made `step` of; `None` on a zone without it.
    pub fn of(controls: bool, step: Option<&CrawlStep>) -> Option<OriginPricing> {
        controls.then(|| match step {
            Some(step) if step.charges() => OriginPricing::InBand,
            _ => OriginPricing::Bypass,
        })
    }
}

/// On a zone with crawl control, tells the origin whether this request is one it may price
/// (`pricing=in-band`) or one pay per crawl does not concern (`pricing=bypass`), in
/// Cloudflare's `cf-pay-per-crawl` header; a client's copy never reaches the origin.
pub fn add_origin_header(
    upstream: &mut pingora::http::RequestHeader,
    pricing: Option<OriginPricing>,
) {
    let Some(pricing) = pricing else { return };
    upstream.remove_header(PAY_PER_CRAWL);
    let value = match pricing {
        OriginPricing::InBand => "protocol=cloudflare, pricing=in-band",
        OriginPricing::Bypass => "protocol=cloudflare, pricing=bypass",
    };
    let _ = upstream.insert_header(PAY_PER_CRAWL, value);
}

/// On a zone with crawl control, the origin's pay-per-crawl headers never reach the client as
/// the origin sent them: its `crawler-price` is an instruction to the edge (a client sees a
/// price only on the edge's own 402s, as on Cloudflare), and a `crawler-charged` or
/// `crawler-error` the edge did not write would be a receipt, or a refusal, that is not in the
/// ledger. `charged`: the edge charged this response (its own `crawler-charged` stays).
pub fn strip_origin_receipts(response: &mut ResponseHeader, charged: bool) {
    response.remove_header(CRAWLER_PRICE);
    response.remove_header(CRAWLER_ERROR);
    if !charged {
        response.remove_header(CRAWLER_CHARGED);
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

/// The refusal crawl control made of the request (`step`: what it made of it), if it refused it.
pub fn refusal(step: Option<&CrawlStep>) -> Option<&CrawlRefusal> {
    match &step?.outcome {
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

/// What settling a paid crawl came to.
pub enum Settled {
    /// Not a paid crawl, or one the origin's answer does not charge.
    Nothing,
    /// Charged: recorded in the ledger, `crawler-charged` on the response.
    Charged(Price),
    /// The exchange's refusal, which the route answers in place of the origin's response.
    Refused(CrawlRefusal),
}

/// The request a charge is recorded for, as the ledger names it.
pub struct Payer<'a> {
    pub ray_id: RayId,
    pub zone: Arc<str>,
    /// The Web Bot Auth signature that verified the crawler (its directory and key).
    pub signature: Option<&'a Signature>,
    /// The path and query charged for.
    pub path: &'a str,
}

/// The response half of pay per crawl, on the origin's response head: for a request crawl
/// control forwarded with a payment intent (`step`), charges (recorded first, and only then
/// `crawler-charged` put on the response), lets the response go uncharged, or refuses it. Does
/// nothing for any other request.
pub async fn settle(
    step: &CrawlStep,
    response: &mut ResponseHeader,
    ledger: Option<&Arc<Ledger>>,
    payer: Payer<'_>,
) -> Result<Settled> {
    let CrawlOutcome::Forward { intent, price } = step.outcome else {
        return Ok(Settled::Nothing);
    };
    let origin_price = response.headers.get(CRAWLER_PRICE).map(|v| v.as_bytes());
    let refusal =
        match signpost_policy::settle(intent, price, response.status.as_u16(), origin_price) {
            Settlement::NoCharge => return Ok(Settled::Nothing),
            Settlement::Refuse(refusal) => CrawlRefusal::exchange(refusal),
            Settlement::Charge(price) => {
                let crawler = &step.crawler.name;
                let ray_id = payer.ray_id;
                match record(ledger, payer, price, crawler).await {
                    Ok(()) => {
                        response.insert_header(CRAWLER_CHARGED, price.to_string())?;
                        return Ok(Settled::Charged(price));
                    }
                    Err(why) => {
                        if LEDGER_LOG.allow() {
                            tracing::error!(
                                ray_id = %ray_id,
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
    Ok(Settled::Refused(refusal))
}

/// The charge's record, written to the ledger; resolves once it is durable.
async fn record(
    ledger: Option<&Arc<Ledger>>,
    payer: Payer<'_>,
    price: Price,
    crawler: &Arc<str>,
) -> std::result::Result<(), String> {
    let ledger = ledger.ok_or("the policy has no [ledger]")?;
    let Payer {
        ray_id,
        zone,
        signature,
        path,
    } = payer;
    let record = LedgerRecord {
        time: std::time::SystemTime::now(),
        ray_id: ray_id.to_hex().as_str().to_owned(),
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
        path: path.to_owned(),
        price,
    };
    ledger
        .record(&record, crawler)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> ResponseHeader {
        let mut h = ResponseHeader::build(200, None).unwrap();
        for (n, v) in headers {
            h.insert_header(n.to_string(), *v).unwrap();
        }
        h
    }

    #[test]
    fn the_origins_receipts_never_reach_a_client_the_edge_did_not_charge() {
        let origin = [
            (CRAWLER_PRICE, "USD 5.00"),
            (CRAWLER_CHARGED, "USD 100.00"),
            (CRAWLER_ERROR, "ForgedByOrigin"),
            ("x-kept", "1"),
        ];
        let mut uncharged = head(&origin);
        strip_origin_receipts(&mut uncharged, false);
        let names: Vec<&str> = uncharged.headers.keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["x-kept"]);
        // Charged: the edge's own crawler-charged (written over the origin's) stays.
        let mut charged = head(&origin);
        charged.insert_header(CRAWLER_CHARGED, "USD 0.01").unwrap();
        strip_origin_receipts(&mut charged, true);
        assert_eq!(charged.headers[CRAWLER_CHARGED], "USD 0.01");
        assert!(!charged.headers.contains_key(CRAWLER_PRICE));
        assert!(!charged.headers.contains_key(CRAWLER_ERROR));
    }

    #[test]
    fn the_origin_is_told_of_pricing_only_on_zones_with_crawl_control() {
        assert_eq!(OriginPricing::of(false, None), None);
        assert_eq!(OriginPricing::of(true, None), Some(OriginPricing::Bypass));
        let mut up = pingora::http::RequestHeader::build("GET", b"/", None).unwrap();
        up.insert_header(PAY_PER_CRAWL, "protocol=cloudflare, pricing=in-band")
            .unwrap();
        add_origin_header(&mut up, Some(OriginPricing::Bypass));
        let told: Vec<_> = up.headers.get_all(PAY_PER_CRAWL).iter().collect();
        assert_eq!(told, ["protocol=cloudflare, pricing=bypass"]);
    }
}

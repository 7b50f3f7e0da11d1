//! The pay-per-crawl exchange, two pure functions: [`charge_request`] before the origin is
//! asked (is there a signed, well-formed payment intent?), and [`settle`] once the origin's
//! response header is in (the page's price, whether the intent covers it, what to charge).

use super::config::CrawlConfig;
use super::error::{CrawlerError, Refusal};
use super::intent::{Intent, PaymentHeaders};
use super::price::Price;
use super::signature::PaymentAuth;

/// The request half's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// The path is free: proxy, charge nothing.
    Free,
    /// Ask the origin; [`settle`] decides the charge from its response.
    Forward(Intent),
    /// Answer the refusal without asking the origin.
    Refuse(Refusal),
}

/// The request half of pay per crawl, for a crawler whose action is [`CrawlAction::Charge`].
///
/// In order: a free path is free; both price headers is `ConflictingPriceHeaders`; none is the
/// first 402 (`MissingCrawlerPrice` with the zone's price); an intent without a verified
/// signature covering it is `StrongAuthRequired` (`InvalidSignature` when a signature was sent
/// and failed); then the value must parse (`InvalidCrawlerPriceValue`). The intent is compared
/// with the page's price only in [`settle`], because the origin may price the page itself.
pub fn charge_request(
    zone_price: Price,
    headers: PaymentHeaders<'_>,
    signature: PaymentAuth,
    free_path: bool,
) -> RequestOutcome {
    if free_path {
        return RequestOutcome::Free;
    }
    let (value, exact) = match (headers.exact, headers.max) {
        (Some(_), Some(_)) => {
            return RequestOutcome::Refuse(Refusal::new(CrawlerError::ConflictingPriceHeaders));
        }
        (None, None) => {
            return RequestOutcome::Refuse(Refusal::with_price(
                CrawlerError::MissingCrawlerPrice,
                zone_price,
            ));
        }
        (Some(v), None) => (v, true),
        (None, Some(v)) => (v, false),
    };
    match signature {
        PaymentAuth::Absent
        | PaymentAuth::Verified {
            covers_price_header: false,
        } => return RequestOutcome::Refuse(Refusal::new(CrawlerError::StrongAuthRequired)),
        PaymentAuth::Invalid => {
            return RequestOutcome::Refuse(Refusal::new(CrawlerError::InvalidSignature));
        }
        PaymentAuth::Verified {
            covers_price_header: true,
        } => {}
    }
    match Price::parse(value) {
        Some(p) if exact => RequestOutcome::Forward(Intent::Exact(p)),
        Some(p) => RequestOutcome::Forward(Intent::Max(p)),
        None => RequestOutcome::Refuse(Refusal::new(CrawlerError::InvalidCrawlerPriceValue)),
    }
}

/// The answer to a crawler whose action is [`CrawlAction::Block`]: the zone's `block_status`
/// with the licensing message, and no `crawler-error`; or, when it offers to pay,
/// `CrawlerForbidden` (403): a blocked crawler cannot pay its way in.
pub fn block_answer(
    config: &CrawlConfig,
    headers: PaymentHeaders<'_>,
) -> (u16, Option<CrawlerError>) {
    if headers.offers_payment() {
        (
            CrawlerError::CrawlerForbidden.status(),
            Some(CrawlerError::CrawlerForbidden),
        )
    } else {
        (config.block_status, None)
    }
}

/// The response half's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Record the charge, then send the origin's response with `crawler-charged: <price>`.
    Charge(Price),
    /// Send the origin's response and charge nothing: it is not a success, or the page is free
    /// (`crawler-price: USD 0.00` from the origin).
    NoCharge,
    /// Replace the origin's response with this refusal; charge nothing.
    Refuse(Refusal),
}

/// The response half: what to charge for the origin's answer to a forwarded intent.
///
/// The page's price is the origin's `crawler-price` response header when it sent one (it must
/// parse, else `InvalidContentPrice` 502), else the zone's. Only a 2xx is charged. An exact
/// intent must equal the price, a max intent must reach it; otherwise the crawler gets another
/// 402 advertising the page's price and is not charged. Never charges more than the intent.
pub fn settle(
    intent: Intent,
    zone_price: Price,
    origin_status: u16,
    origin_price: Option<&[u8]>,
) -> Settlement {
    let price = match origin_price {
        None => zone_price,
        Some(value) => match Price::parse(value) {
            Some(p) => p,
            None => return Settlement::Refuse(Refusal::new(CrawlerError::InvalidContentPrice)),
        },
    };
    if !(200..300).contains(&origin_status) || price.cents == 0 {
        return Settlement::NoCharge;
    }
    match intent {
        Intent::Exact(offer) if offer == price => Settlement::Charge(price),
        Intent::Exact(_) => Settlement::Refuse(Refusal::with_price(
            CrawlerError::InvalidCrawlerExactPrice,
            price,
        )),
        Intent::Max(ceiling) if price <= ceiling => Settlement::Charge(price),
        Intent::Max(_) => Settlement::Refuse(Refusal::with_price(
            CrawlerError::InvalidCrawlerMaxPrice,
            price,
        )),
    }
}

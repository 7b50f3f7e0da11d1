//! The `crawler-error` codes of pay per crawl, wire-compatible with Cloudflare's: the status
//! each is answered with, the catalog code whose problem page carries it, and what it tells the
//! crawler to do next.

use std::fmt;

use signpost_problem::Code;

use super::price::Price;

/// The `crawler-error` codes of pay per crawl, each with the status Cloudflare answers it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrawlerError {
    /// 403: the owner blocks this crawler; paying does not help.
    CrawlerForbidden,
    /// 400: a payment intent without Web Bot Auth, or with a signature that does not cover it.
    StrongAuthRequired,
    /// 400: a Web Bot Auth signature that does not verify.
    InvalidSignature,
    /// 400: a price header that is not `USD <amount>`.
    InvalidCrawlerPriceValue,
    /// 402: no payment intent: the answer carries `crawler-price`.
    MissingCrawlerPrice,
    /// 403: the payment could not be made.
    PaymentFailed,
    /// 402: `crawler-exact-price` differs from the price.
    InvalidCrawlerExactPrice,
    /// 402: `crawler-max-price` is below the price.
    InvalidCrawlerMaxPrice,
    /// 400: both price headers at once.
    ConflictingPriceHeaders,
    /// 502: the origin's own `crawler-price` is not a price.
    InvalidContentPrice,
    /// 500: the edge could not record the charge; retry with backoff.
    InternalError,
}

impl CrawlerError {
    /// The code as the `crawler-error` header carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            CrawlerError::CrawlerForbidden => "CrawlerForbidden",
            CrawlerError::StrongAuthRequired => "StrongAuthRequired",
            CrawlerError::InvalidSignature => "InvalidSignature",
            CrawlerError::InvalidCrawlerPriceValue => "InvalidCrawlerPriceValue",
            CrawlerError::MissingCrawlerPrice => "MissingCrawlerPrice",
            CrawlerError::PaymentFailed => "PaymentFailed",
            CrawlerError::InvalidCrawlerExactPrice => "InvalidCrawlerExactPrice",
            CrawlerError::InvalidCrawlerMaxPrice => "InvalidCrawlerMaxPrice",
            CrawlerError::ConflictingPriceHeaders => "ConflictingPriceHeaders",
            CrawlerError::InvalidContentPrice => "InvalidContentPrice",
            CrawlerError::InternalError => "InternalError",
        }
    }

    /// The HTTP status Cloudflare answers this code with.
    pub fn status(self) -> u16 {
        match self {
            CrawlerError::CrawlerForbidden | CrawlerError::PaymentFailed => 403,
            CrawlerError::StrongAuthRequired
            | CrawlerError::InvalidSignature
            | CrawlerError::InvalidCrawlerPriceValue
            | CrawlerError::ConflictingPriceHeaders => 400,
            CrawlerError::MissingCrawlerPrice
            | CrawlerError::InvalidCrawlerExactPrice
            | CrawlerError::InvalidCrawlerMaxPrice => 402,
            CrawlerError::InvalidContentPrice => 502,
            CrawlerError::InternalError => 500,
        }
    }

    /// The catalog code whose problem page answers it (the `crawler-error` header carries the
    /// precise reason): a refusal by the owner is 1020, as a block; a 402 is signpost's own
    /// `payment_required` entry (402); a malformed exchange is signpost's 400; the origin's bad
    /// price is 502 (the origin answered something invalid); a failure to record is 500.
    pub fn code(self) -> Code {
        match self.status() {
            403 => BLOCK_CODE,
            402 => PAYMENT_REQUIRED_CODE,
            400 => Code::new(400),
            502 => Code::new(502),
            _ => Code::new(500),
        }
    }
}

impl fmt::Display for CrawlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The catalog code of a crawl block: 1020, what a Cloudflare zone answers, because AI Crawl
/// Control blocks through a WAF custom rule of the zone. Its category (`access_denied`, not
/// retryable) tells an agent to stop, which is what a block means; the operator's licensing
/// message becomes the problem's detail and the status is the zone's `block_status`.
pub const BLOCK_CODE: Code = Code::new(1020);

/// The catalog code of a pay-per-crawl 402: signpost's own `payment_required` entry, because
/// the agent's next step (pay, or stop) is neither a block's nor a client mistake's.
pub const PAYMENT_REQUIRED_CODE: Code = Code::new(402);

impl CrawlerError {
    /// What the code means for the crawler, and what to do next: the detail of its problem.
    /// `price` is the page's price, on the 402s.
    pub fn explain(self, price: Option<Price>) -> String {
        let price = price.map_or_else(|| "the price".to_owned(), |p| p.to_string());
        match self {
            CrawlerError::CrawlerForbidden => "The owner of this site does not allow this crawler; paying does not change that.".to_owned(),
            CrawlerError::StrongAuthRequired => "Paying for a page needs a Web Bot Auth signature that verifies and covers the crawler-exact-price or crawler-max-price header.".to_owned(),
            CrawlerError::InvalidSignature => "The Web Bot Auth signature of this request does not verify.".to_owned(),
            CrawlerError::InvalidCrawlerPriceValue => "The price header is not a price: write `USD` and an amount with at most two decimals, e.g. `USD 0.01`.".to_owned(),
            CrawlerError::MissingCrawlerPrice => format!("This page costs {price} per crawl. Retry with a `crawler-exact-price: {price}` or a `crawler-max-price` header, covered by your Web Bot Auth signature."),
            CrawlerError::PaymentFailed => "The payment could not be made.".to_owned(),
            CrawlerError::InvalidCrawlerExactPrice => format!("This page costs {price}, not the price offered in crawler-exact-price. Retry with `crawler-exact-price: {price}`."),
            CrawlerError::InvalidCrawlerMaxPrice => format!("This page costs {price}, more than crawler-max-price. Retry with a higher maximum, or leave the page."),
            CrawlerError::ConflictingPriceHeaders => "Send crawler-exact-price or crawler-max-price, not both.".to_owned(),
            CrawlerError::InvalidContentPrice => "The origin priced this page with a crawler-price that is not a price; nothing was charged.".to_owned(),
            CrawlerError::InternalError => "The edge could not record the charge; nothing was charged. Retry later.".to_owned(),
        }
    }
}

/// A refusal of the exchange: the status, the `crawler-error` code, and the price to advertise
/// in `crawler-price` (on the 402s, so the crawler can retry with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The `crawler-error` code; [`CrawlerError::status`] is the response status.
    pub error: CrawlerError,
    /// `crawler-price` for the answer, set exactly when the status is 402.
    pub advertise: Option<Price>,
}

impl Refusal {
    pub(super) fn new(error: CrawlerError) -> Refusal {
        Refusal {
            error,
            advertise: None,
        }
    }

    pub(super) fn with_price(error: CrawlerError, price: Price) -> Refusal {
        Refusal {
            error,
            advertise: Some(price),
        }
    }

    /// The response status.
    pub fn status(&self) -> u16 {
        self.error.status()
    }

    /// `InternalError` (500): the edge could not record a charge, so it charges nothing and
    /// sends nothing the crawler would have paid for.
    pub fn internal_error() -> Refusal {
        Refusal::new(CrawlerError::InternalError)
    }
}

//! `[zone.crawl]`: what the edge does with each crawler (allow, block, charge), and the
//! pay-per-crawl exchange, wire-compatible with Cloudflare's headers and `crawler-error` codes.
//!
//! Nothing here does I/O or knows who the crawler is: the caller says which known bot a request
//! comes from, its behaviors, whether Web Bot Auth verified it and whether the signature covers
//! the price header it sent. The exchange has two halves, both pure functions:
//!
//! - [`charge_request`], before the origin is asked: is there a payment intent, is it signed and
//!   well formed? It forwards the intent or refuses with a `crawler-error`.
//! - [`settle`], once the origin's response header is in: the page's price (the origin's own
//!   `crawler-price`, else the zone's), whether the intent covers it, and what to charge. A
//!   response is charged only when the origin answered with a success.
//!
//! Prices are whole cents (`u64`), never floats; [`Price::parse`] accepts exactly
//! `USD <digits>[.<one or two digits>]`.
//!
//! This file is the phase's decision, [`control`]: which action applies to a known crawler's
//! request and what follows from it. The rest, by role: `price` (prices), `config` (a zone's
//! settings) and `file` (the same as the policy file writes them), `paths` (free paths and path
//! patterns), `intent` (what a crawler offers to pay), `signature` (what Web Bot Auth made of
//! it), `exchange` (the two halves), `error` (the `crawler-error` codes), `ledger` (the
//! ledger's settings).

use signpost_problem::Code;

mod config;
mod error;
mod exchange;
mod file;
mod intent;
mod ledger;
mod paths;
mod price;
mod signature;

pub use config::{CrawlAction, CrawlConfig};
pub use error::{BLOCK_CODE, CrawlerError, PAYMENT_REQUIRED_CODE, Refusal};
pub use exchange::{RequestOutcome, Settlement, block_answer, charge_request, settle};
pub(crate) use file::{CrawlFile, check_bot_names, compile, first_charge};
pub use intent::{Intent, PaymentHeaders, payment_header};
pub use ledger::{DEFAULT_LEDGER_ROTATE_BYTES, DEFAULT_LEDGER_ROTATE_EVERY, LedgerConfig};
pub(crate) use ledger::{LedgerFile, compile_ledger};
pub use paths::{ALWAYS_FREE_PATHS, PathGlob, glob_matches, is_always_free};
pub use price::{CURRENCY, MAX_PRICE_CENTS, Price};
pub use signature::PaymentAuth;

/// What crawl control made of a request from a known crawler (the decision's `crawl`): who,
/// which action applied, and what follows from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlStep {
    /// The known bot the request is, or claims to be.
    pub crawler: std::sync::Arc<crate::Bot>,
    /// The action that applied: the bot's, or the zone's `impostors` for a failed claim.
    pub action: CrawlAction,
    /// Whether the request claimed the bot and failed every check of it.
    pub impostor: bool,
    /// What the edge does with the request.
    pub outcome: CrawlOutcome,
}

/// What the edge does with a known crawler's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrawlOutcome {
    /// Proxied as any request.
    Allowed,
    /// A crawler set to charge, on a path that is free: proxied, not charged.
    Free,
    /// A crawler set to charge, with a signed payment intent: proxied, and the origin's answer
    /// settled by [`settle`] against `price` (the zone's; the origin may set its own).
    Forward {
        /// What the crawler agreed to pay.
        intent: Intent,
        /// The zone's price.
        price: Price,
    },
    /// Refused: the verdict carries [`CrawlRefusal::code`].
    Refused(CrawlRefusal),
    /// Challenged: the phase notes a challenge at the zone's difficulty.
    Challenged,
}

/// A crawl control answer: the catalog code whose problem it is, with the status, the
/// `crawler-error` and `crawler-price` headers and the detail that make it a crawl answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlRefusal {
    /// The HTTP status.
    pub status: u16,
    /// The `crawler-error` header; `None` for a plain block (the licensing message says why).
    pub error: Option<CrawlerError>,
    /// The `crawler-price` header, on the 402s.
    pub advertise: Option<Price>,
    /// The problem's detail: the operator's licensing message for a block, else what the
    /// `crawler-error` means and how to go on.
    pub detail: String,
}

impl CrawlRefusal {
    /// A block: the zone's status and licensing message, or `CrawlerForbidden` for a blocked
    /// crawler that offers to pay.
    pub fn block(config: &CrawlConfig, headers: PaymentHeaders<'_>) -> CrawlRefusal {
        let (status, error) = block_answer(config, headers);
        let detail = match (&config.message, error) {
            (Some(message), _) => message.clone(),
            (None, Some(error)) => error.explain(None).to_owned(),
            (None, None) => "The owner of this site does not allow this crawler.".to_owned(),
        };
        CrawlRefusal {
            status,
            error,
            advertise: None,
            detail,
        }
    }

    /// A refusal of the pay-per-crawl exchange.
    pub fn exchange(refusal: Refusal) -> CrawlRefusal {
        CrawlRefusal {
            status: refusal.status(),
            error: Some(refusal.error),
            advertise: refusal.advertise,
            detail: refusal.error.explain(refusal.advertise),
        }
    }

    /// With the reason the request's signature failed (`expired`, ...) in the detail, when the
    /// refusal is `InvalidSignature`: what the crawler has to fix.
    fn with_reason(mut self, signature: &crate::Signature) -> CrawlRefusal {
        if self.error == Some(CrawlerError::InvalidSignature) && !signature.reason.is_empty() {
            self.detail = format!(
                "{} ({}).",
                self.detail.trim_end_matches('.'),
                signature.reason
            );
        }
        self
    }

    /// The catalog code whose problem answers it: [`BLOCK_CODE`] for a block, else the
    /// `crawler-error`'s ([`CrawlerError::code`]).
    pub fn code(&self) -> Code {
        self.error.map_or(BLOCK_CODE, CrawlerError::code)
    }
}

/// Crawl control for one request of the zone `config` governs: `None` when it has nothing to
/// say (a path always free, or not a known crawler), else the step.
///
/// Which requests it concerns: those of a known bot, verified or only claimed. A block or a
/// charge applies to a claim that could not be verified yet (or cannot be verified at all):
/// claiming a crawler the owner refuses buys nothing, and a charge can only be paid with a Web
/// Bot Auth signature anyway. A claim that failed every check gets the zone's `impostors`,
/// unless it offers to pay where its crawler is charged: see [`failed_claim_offer`].
/// `path` is the request's path without its query.
pub fn control(
    config: &CrawlConfig,
    identity: &crate::Identity,
    path: &str,
    headers: PaymentHeaders<'_>,
) -> Option<CrawlStep> {
    let crawler = identity.bot.as_ref()?;
    if is_always_free(path) {
        return None;
    }
    let impostor = identity.claim_failed();
    if impostor && let Some(refusal) = failed_claim_offer(config, identity, crawler, path, headers)
    {
        return Some(CrawlStep {
            crawler: std::sync::Arc::clone(crawler),
            action: CrawlAction::Charge,
            impostor,
            outcome: CrawlOutcome::Refused(refusal),
        });
    }
    let action = if impostor {
        config.impostors
    } else {
        config.action_for(&crawler.name, crawler.behaviors)
    };
    let outcome = match action {
        CrawlAction::Allow => CrawlOutcome::Allowed,
        CrawlAction::Challenge => CrawlOutcome::Challenged,
        CrawlAction::Block => CrawlOutcome::Refused(CrawlRefusal::block(config, headers)),
        CrawlAction::Charge => {
            let auth = PaymentAuth::of(&identity.signature, headers);
            match charge_request(config.price, headers, auth, config.is_free_path(path)) {
                RequestOutcome::Free => CrawlOutcome::Free,
                RequestOutcome::Forward(intent) => CrawlOutcome::Forward {
                    intent,
                    price: config.price,
                },
                RequestOutcome::Refuse(refusal) => CrawlOutcome::Refused(
                    CrawlRefusal::exchange(refusal).with_reason(&identity.signature),
                ),
            }
        }
    };
    Some(CrawlStep {
        crawler: std::sync::Arc::clone(crawler),
        action,
        impostor,
        outcome,
    })
}

/// The answer to a claim that failed every check (an impostor) and yet offers to pay (sends
/// `crawler-exact-price` or `crawler-max-price`) on a path where the crawler it claims is
/// charged: the exchange's answer to its signature, `InvalidSignature` (400, with the reason in
/// the detail, e.g. `expired`) for one that does not verify, `StrongAuthRequired` (400) for none
/// (or one that could not be checked). A legitimate crawler with a signing bug is told to fix
/// its signature rather than to stop; it is not let in either way. `None`, and the impostor's
/// answer, when the request does not offer to pay, its crawler is not charged there, or its
/// signature verified (as another agent than the one it claims).
fn failed_claim_offer(
    config: &CrawlConfig,
    identity: &crate::Identity,
    crawler: &crate::Bot,
    path: &str,
    headers: PaymentHeaders<'_>,
) -> Option<CrawlRefusal> {
    if !headers.offers_payment()
        || config.action_for(&crawler.name, crawler.behaviors) != CrawlAction::Charge
        || config.is_free_path(path)
    {
        return None;
    }
    let auth = PaymentAuth::of(&identity.signature, headers);
    if matches!(auth, PaymentAuth::Verified { .. }) {
        return None;
    }
    match charge_request(config.price, headers, auth, false) {
        RequestOutcome::Refuse(refusal) => {
            Some(CrawlRefusal::exchange(refusal).with_reason(&identity.signature))
        }
        // Unreachable without a verified signature; the impostor's answer then.
        RequestOutcome::Free | RequestOutcome::Forward(_) => None,
    }
}

impl CrawlStep {
    /// Whether the request forwarded a payment intent, to be settled on the origin's answer.
    pub fn charges(&self) -> bool {
        matches!(self.outcome, CrawlOutcome::Forward { .. })
    }
}

impl CrawlOutcome {
    /// A word for the access log and the metrics: `allowed`, `free`, `forwarded`, `refused`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CrawlOutcome::Allowed => "allowed",
            CrawlOutcome::Free => "free",
            CrawlOutcome::Forward { .. } => "forwarded",
            CrawlOutcome::Refused(_) => "refused",
            CrawlOutcome::Challenged => "challenged",
        }
    }
}

#[cfg(test)]
mod tests;

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

use std::fmt;

use serde::Deserialize;
use serde_spanned::Spanned;
use signpost_problem::Code;

use crate::bots::Behaviors;
use crate::error::{Diagnostics, ProblemKind};

// === Prices ===

/// A price in US cents. The only currency pay per crawl speaks is USD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Price {
    cents: u64,
}

/// The most a price may be: USD 1,000,000.00. Far above any page's price, and it keeps sums of
/// many prices far from `u64::MAX`.
pub const MAX_PRICE_CENTS: u64 = 100_000_000;

/// The smallest price a zone may set (Cloudflare's minimum, USD 0.01).
pub const MIN_ZONE_PRICE_CENTS: u64 = 1;

/// The currency every price is in.
pub const CURRENCY: &str = "USD";

impl Price {
    /// A price of `cents` US cents, `None` above [`MAX_PRICE_CENTS`].
    pub fn from_cents(cents: u64) -> Option<Price> {
        (cents <= MAX_PRICE_CENTS).then_some(Price { cents })
    }

    /// The price in cents.
    pub fn cents(self) -> u64 {
        self.cents
    }

    /// Parses a header or policy value: `USD`, one space, 1 to 9 digits, and optionally a dot
    /// with one or two digits (`USD 0.01`, `USD 3.14`, `USD 2`, `USD 2.5`). Optional whitespace
    /// around the whole value is ignored, as HTTP does for field values. Anything else (another
    /// currency, a sign, an exponent, a third decimal, more than [`MAX_PRICE_CENTS`]) is `None`.
    pub fn parse(value: &[u8]) -> Option<Price> {
        let value = value.trim_ascii();
        let amount = value.strip_prefix(b"USD ")?;
        let (whole, fraction) = match amount.iter().position(|&b| b == b'.') {
            Some(dot) => (&amount[..dot], Some(&amount[dot + 1..])),
            None => (amount, None),
        };
        if whole.is_empty() || whole.len() > 9 || !whole.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut cents: u64 = 0;
        for &digit in whole {
            cents = cents * 10 + u64::from(digit - b'0');
        }
        cents *= 100;
        match fraction {
            None => {}
            Some(f) if (1..=2).contains(&f.len()) && f.iter().all(u8::is_ascii_digit) => {
                let tenths = u64::from(f[0] - b'0') * 10;
                let hundredths = f.get(1).map_or(0, |d| u64::from(d - b'0'));
                cents += tenths + hundredths;
            }
            Some(_) => return None,
        }
        Price::from_cents(cents)
    }
}

impl fmt::Display for Price {
    /// `USD 0.01`: always two decimals, as Cloudflare writes `crawler-price` and
    /// `crawler-charged`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CURRENCY} {}.{:02}", self.cents / 100, self.cents % 100)
    }
}

// === The policy ===

/// What the edge does with a crawler. Ordered from the least to the most restrictive, so that a
/// bot with several behaviors gets the `max` of their actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrawlAction {
    /// Proxy as any request.
    Allow,
    /// Pay per crawl: proxy only with a signed payment intent, and charge the response.
    Charge,
    /// Refuse with the zone's `block_status` and licensing message.
    Block,
}

impl CrawlAction {
    /// The policy's word for it: `allow`, `charge` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrawlAction::Allow => "allow",
            CrawlAction::Charge => "charge",
            CrawlAction::Block => "block",
        }
    }
}

/// The paths pay per crawl never charges and crawl control never refuses, as Cloudflare lists
/// them: a blocked crawler must still be able to read why and where.
pub const ALWAYS_FREE_PATHS: [&str; 5] = [
    "/robots.txt",
    "/sitemap.xml",
    "/security.txt",
    "/.well-known/security.txt",
    "/crawlers.json",
];

/// At most this many `free_paths` patterns per zone.
pub const MAX_FREE_PATHS: usize = 64;
/// At most this many per-bot overrides per zone.
pub const MAX_BOT_OVERRIDES: usize = 256;
/// A `message` may be at most this long (bytes): Cloudflare's inline limit for a custom rule's
/// response body, 2 KB.
pub const MAX_MESSAGE_LEN: usize = 2048;
const MAX_PATTERN_LEN: usize = 256;
const MAX_BOT_NAME_LEN: usize = 64;

/// A zone's `[zone.crawl]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlConfig {
    /// The action for crawlers that build a search index.
    pub search: CrawlAction,
    /// The action for crawlers that fetch for a person at query time.
    pub agent: CrawlAction,
    /// The action for crawlers that collect training data.
    pub training: CrawlAction,
    /// The action for a request whose User-Agent claims a known bot that fails verification:
    /// allow or block (an impostor cannot pay).
    pub impostors: CrawlAction,
    /// The zone's price per charged response (the origin may set its own per page).
    pub price: Price,
    /// 402 or 403: the status of a block.
    pub block_status: u16,
    /// The operator's licensing text, the detail of a block.
    pub message: Option<String>,
    /// Paths (beyond [`ALWAYS_FREE_PATHS`]) that are never charged: a crawler set to charge is
    /// allowed there. A block still applies.
    pub free_paths: Vec<PathGlob>,
    /// Per-bot overrides by catalog name, compared without regard to ASCII case.
    pub bots: Vec<(String, CrawlAction)>,
}

impl Default for CrawlConfig {
    fn default() -> Self {
        CrawlConfig {
            search: CrawlAction::Allow,
            agent: CrawlAction::Allow,
            training: CrawlAction::Allow,
            impostors: CrawlAction::Block,
            price: Price {
                cents: MIN_ZONE_PRICE_CENTS,
            },
            block_status: 403,
            message: None,
            free_paths: Vec::new(),
            bots: Vec::new(),
        }
    }
}

impl CrawlConfig {
    /// The action for the known bot `name` with `behaviors`: the override that names it, else
    /// the most restrictive action of its behaviors (so blocking training also blocks a crawler
    /// that does search and training, such as Googlebot, as Cloudflare does). A bot with no
    /// known behavior is allowed.
    pub fn action_for(&self, name: &str, behaviors: Behaviors) -> CrawlAction {
        if let Some((_, action)) = self.bots.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return *action;
        }
        let mut action = CrawlAction::Allow;
        for (behavior, behavior_action) in [
            (Behaviors::SEARCH, self.search),
            (Behaviors::AGENT, self.agent),
            (Behaviors::TRAINING, self.training),
        ] {
            if behaviors.contains(behavior) {
                action = action.max(behavior_action);
            }
        }
        action
    }

    /// Whether `path` (the request's path, without query) is never charged in this zone: one of
    /// [`ALWAYS_FREE_PATHS`] or a `free_paths` pattern. The path is normalised first, as rules
    /// read it, so `/%70ublic/x` is `/public/x`.
    pub fn is_free_path(&self, path: &str) -> bool {
        let path = crate::path::normalized_path(path);
        is_always_free(&path) || self.free_paths.iter().any(|g| g.matches(&path))
    }
}

/// Whether crawl control leaves `path` alone whatever the crawler: the paths of
/// [`ALWAYS_FREE_PATHS`] (`/robots.txt` among them), compared after normalisation.
pub fn is_always_free(path: &str) -> bool {
    let path = crate::path::normalized_path(path);
    ALWAYS_FREE_PATHS.contains(&path.as_ref())
}

/// A path pattern: `*` stands for any run of characters, everything else for itself, and the
/// pattern covers the whole path (`/public/*` matches `/public/` and `/public/a/b`, not
/// `/publication`). Matching is linear in the path: the literal pieces between stars are found
/// left to right, first occurrence first, which finds a match whenever one exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathGlob {
    pattern: String,
}

impl PathGlob {
    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern covers all of `path`.
    pub fn matches(&self, path: &str) -> bool {
        glob_matches(&self.pattern, path, true)
    }
}

/// Whether `pattern` (with `*` for any run) matches `text` from its start; with `to_end`, the
/// match must also cover the end of `text`. The pieces between stars are matched greedily, left
/// to right at their first occurrence: any match can be moved to that one, so this finds a match
/// iff one exists, in time linear in `text` per piece. robots.txt rules match this way too
/// (RFC 9309 §2.2.3: `*` for any run, `$` at the end for the end of the path).
pub fn glob_matches(pattern: &str, text: &str, to_end: bool) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = pieces.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No star: the pattern is a literal.
        return !to_end || rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    if to_end {
        rest.ends_with(last)
    } else {
        rest.contains(last)
    }
}

// === Policy file ===

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CrawlFile {
    pub search: Option<Spanned<String>>,
    pub agent: Option<Spanned<String>>,
    pub training: Option<Spanned<String>>,
    pub impostors: Option<Spanned<String>>,
    pub price: Option<Spanned<String>>,
    pub block_status: Option<Spanned<i64>>,
    pub message: Option<Spanned<String>>,
    pub free_paths: Option<Spanned<Vec<Spanned<String>>>>,
    pub bots: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

fn action(
    d: &mut Diagnostics<'_>,
    value: Option<&Spanned<String>>,
    default: CrawlAction,
) -> CrawlAction {
    let Some(value) = value else { return default };
    match value.get_ref().as_str() {
        "allow" => CrawlAction::Allow,
        "charge" => CrawlAction::Charge,
        "block" => CrawlAction::Block,
        other => {
            d.at(
                ProblemKind::Invalid,
                value.span(),
                format!(
                    "`{other}` is not a crawl action; write \"allow\", \"block\" or \"charge\""
                ),
            );
            default
        }
    }
}

/// Checks `[zone.crawl]`; `None` when the zone has none (crawl control off).
pub(crate) fn compile(d: &mut Diagnostics<'_>, file: Option<&CrawlFile>) -> Option<CrawlConfig> {
    let file = file?;
    let defaults = CrawlConfig::default();
    let mut config = CrawlConfig {
        search: action(d, file.search.as_ref(), defaults.search),
        agent: action(d, file.agent.as_ref(), defaults.agent),
        training: action(d, file.training.as_ref(), defaults.training),
        impostors: action(d, file.impostors.as_ref(), defaults.impostors),
        ..defaults
    };
    if let Some(impostors) = &file.impostors
        && config.impostors == CrawlAction::Charge
    {
        d.at(
            ProblemKind::Invalid,
            impostors.span(),
            "impostors cannot be charged (a request that fails verification cannot pay); write \"allow\" or \"block\"",
        );
    }
    if let Some(price) = &file.price {
        match Price::parse(price.get_ref().as_bytes()) {
            Some(p) if p.cents >= MIN_ZONE_PRICE_CENTS => config.price = p,
            Some(_) => d.at(ProblemKind::Invalid, price.span(), "the price must be at least USD 0.01"),
            None => d.at(
                ProblemKind::Invalid,
                price.span(),
                format!(
                    "`{}` is not a price; write e.g. \"USD 0.01\" (USD, a space, at most two decimals, at most USD 1000000.00)",
                    price.get_ref()
                ),
            ),
        }
    }
    if let Some(status) = &file.block_status {
        match *status.get_ref() {
            402 => config.block_status = 402,
            403 => config.block_status = 403,
            _ => d.at(
                ProblemKind::Invalid,
                status.span(),
                "block_status must be 402 or 403",
            ),
        }
    }
    if let Some(message) = &file.message {
        let text = message.get_ref();
        if text.trim().is_empty() || text.len() > MAX_MESSAGE_LEN {
            d.at(
                ProblemKind::Invalid,
                message.span(),
                format!("message must be 1 to {MAX_MESSAGE_LEN} bytes of text"),
            );
        } else {
            config.message = Some(text.clone());
        }
    }
    if let Some(paths) = &file.free_paths {
        if paths.get_ref().len() > MAX_FREE_PATHS {
            d.at(
                ProblemKind::Invalid,
                paths.span(),
                format!("at most {MAX_FREE_PATHS} free_paths"),
            );
        }
        for p in paths.get_ref().iter().take(MAX_FREE_PATHS) {
            let pattern = p.get_ref();
            let printable = pattern.bytes().all(|b| b.is_ascii_graphic());
            if !pattern.starts_with('/') || pattern.len() > MAX_PATTERN_LEN || !printable {
                d.at(
                    ProblemKind::Invalid,
                    p.span(),
                    format!(
                        "a free path is a path pattern starting with `/`, at most {MAX_PATTERN_LEN} printable ASCII characters, `*` for any run (e.g. \"/public/*\")"
                    ),
                );
            } else {
                config.free_paths.push(PathGlob {
                    pattern: pattern.clone(),
                });
            }
        }
    }
    if let Some(bots) = &file.bots {
        if bots.get_ref().len() > MAX_BOT_OVERRIDES {
            d.at(
                ProblemKind::Invalid,
                bots.span(),
                format!("at most {MAX_BOT_OVERRIDES} bot overrides"),
            );
        }
        for (name, value) in bots.get_ref().iter().take(MAX_BOT_OVERRIDES) {
            let valid_name = !name.is_empty()
                && name.len() <= MAX_BOT_NAME_LEN
                && name.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
            if !valid_name {
                d.at(
                    ProblemKind::Invalid,
                    value.span(),
                    format!("a bot name is 1 to {MAX_BOT_NAME_LEN} printable ASCII characters"),
                );
                continue;
            }
            if config
                .bots
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                d.at(
                    ProblemKind::Invalid,
                    value.span(),
                    format!("bot `{name}` is listed twice (names ignore case)"),
                );
                continue;
            }
            let a = action(d, Some(value), CrawlAction::Allow);
            config.bots.push((name.clone(), a));
        }
    }
    Some(config)
}

// === The exchange ===

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
    fn new(error: CrawlerError) -> Refusal {
        Refusal {
            error,
            advertise: None,
        }
    }

    fn with_price(error: CrawlerError, price: Price) -> Refusal {
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

/// What Web Bot Auth made of the request's payment intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaymentAuth {
    /// No `Signature` / `Signature-Input`.
    Absent,
    /// A signature that is malformed or does not verify.
    Invalid,
    /// A verified signature; `covers_price_header` when its covered components include the
    /// price header the request sent.
    Verified {
        /// Whether `crawler-exact-price` or `crawler-max-price` (the one sent) is covered.
        covers_price_header: bool,
    },
}

impl PaymentAuth {
    /// From the identify phase's [`Signature`](crate::Signature): verified, and covering every
    /// price header the request sent ([`crate::COVERED_HEADERS`]: bit 0 `crawler-exact-price`,
    /// bit 1 `crawler-max-price`). A signature that could not be checked (its directory unknown
    /// or unreachable) is no strong authentication either: `Absent`.
    pub fn of(signature: &crate::Signature, headers: PaymentHeaders<'_>) -> PaymentAuth {
        use crate::SignatureOutcome;
        match signature.outcome {
            SignatureOutcome::Verified => {
                let mut wanted = 0u8;
                if headers.exact.is_some() {
                    wanted |= 1;
                }
                if headers.max.is_some() {
                    wanted |= 2;
                }
                PaymentAuth::Verified {
                    covers_price_header: signature.covered_headers & wanted == wanted,
                }
            }
            SignatureOutcome::Invalid => PaymentAuth::Invalid,
            SignatureOutcome::Absent | SignatureOutcome::Unverified => PaymentAuth::Absent,
        }
    }
}

/// The request's payment headers, raw. A header sent twice should be given as its values
/// joined with `, `, which no price parses as: it is refused as an invalid value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaymentHeaders<'a> {
    /// `crawler-exact-price`.
    pub exact: Option<&'a [u8]>,
    /// `crawler-max-price`.
    pub max: Option<&'a [u8]>,
}

impl PaymentHeaders<'_> {
    /// Whether the request offers to pay at all.
    pub fn offers_payment(&self) -> bool {
        self.exact.is_some() || self.max.is_some()
    }
}

/// What the crawler agreed to pay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// `crawler-exact-price`: exactly this.
    Exact(Price),
    /// `crawler-max-price`: anything up to this.
    Max(Price),
}

impl Intent {
    /// The most this intent may be charged.
    pub fn ceiling(self) -> Price {
        match self {
            Intent::Exact(p) | Intent::Max(p) => p,
        }
    }
}

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

// === The phase ===

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

    /// The catalog code whose problem answers it: [`BLOCK_CODE`] for a block, else the
    /// `crawler-error`'s ([`CrawlerError::code`]).
    pub fn code(&self) -> Code {
        self.error.map_or(BLOCK_CODE, CrawlerError::code)
    }
}

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

/// The request's payment header `name` as crawl control reads it: its value; its lines joined
/// with `, ` when it was sent more than once (no price parses so, and the exchange refuses it);
/// `None` when it was not sent.
pub fn payment_header<'h>(
    headers: &'h http::HeaderMap,
    name: &str,
) -> Option<std::borrow::Cow<'h, [u8]>> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut rest = values.peekable();
    if rest.peek().is_none() {
        return Some(std::borrow::Cow::Borrowed(first.as_bytes()));
    }
    let mut joined = first.as_bytes().to_vec();
    for v in rest {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(v.as_bytes());
    }
    Some(std::borrow::Cow::Owned(joined))
}

/// Crawl control for one request of the zone `config` governs: `None` when it has nothing to
/// say (a path always free, or not a known crawler), else the step.
///
/// Which requests it concerns: those of a known bot, verified or only claimed. A block or a
/// charge applies to a claim that could not be verified yet (or cannot be verified at all):
/// claiming a crawler the owner refuses buys nothing, and a charge can only be paid with a Web
/// Bot Auth signature anyway. A claim that failed every check gets the zone's `impostors`.
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
    let action = if impostor {
        config.impostors
    } else {
        config.action_for(&crawler.name, crawler.behaviors)
    };
    let outcome = match action {
        CrawlAction::Allow => CrawlOutcome::Allowed,
        CrawlAction::Block => CrawlOutcome::Refused(CrawlRefusal::block(config, headers)),
        CrawlAction::Charge => {
            let auth = PaymentAuth::of(&identity.signature, headers);
            match charge_request(config.price, headers, auth, config.is_free_path(path)) {
                RequestOutcome::Free => CrawlOutcome::Free,
                RequestOutcome::Forward(intent) => CrawlOutcome::Forward {
                    intent,
                    price: config.price,
                },
                RequestOutcome::Refuse(refusal) => {
                    CrawlOutcome::Refused(CrawlRefusal::exchange(refusal))
                }
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
        }
    }
}

impl CrawlConfig {
    /// Whether any crawler may be charged in this zone (so the policy needs a `[ledger]`).
    pub fn may_charge(&self) -> bool {
        [self.search, self.agent, self.training].contains(&CrawlAction::Charge)
            || self.bots.iter().any(|(_, a)| *a == CrawlAction::Charge)
    }
}

// === The ledger's settings ===

/// `[ledger]`: where the edge keeps the record of charged responses.
#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// The directory (relative paths resolve against the policy file's directory).
    pub dir: std::path::PathBuf,
    /// Rotate the live file once it holds this many bytes.
    pub rotate_bytes: u64,
    /// Rotate the live file once it is this old.
    pub rotate_every: std::time::Duration,
    /// Where `dir` is written: the place of a problem opening it that only the running edge
    /// meets (another process holding the ledger's lock).
    dir_key: crate::error::Problem,
}

/// Two ledgers are the same settings wherever the file writes them.
impl PartialEq for LedgerConfig {
    fn eq(&self, other: &LedgerConfig) -> bool {
        (&self.dir, self.rotate_bytes, self.rotate_every)
            == (&other.dir, other.rotate_bytes, other.rotate_every)
    }
}

impl Eq for LedgerConfig {}

impl LedgerConfig {
    /// The edge cannot open the ledger in `dir`, for the reason `message` gives: a problem of
    /// the policy at its `dir` key, as `signpost check` reports the ones it can see.
    pub fn cannot_open(&self, message: String) -> crate::PolicyError {
        crate::PolicyError::single(crate::error::Problem {
            message,
            ..self.dir_key.clone()
        })
    }
}

/// The ledger's live file is rotated at this size unless the policy says otherwise (64 MiB).
pub const DEFAULT_LEDGER_ROTATE_BYTES: u64 = 64 * 1024 * 1024;
/// ... or at this age (a day).
pub const DEFAULT_LEDGER_ROTATE_EVERY: std::time::Duration =
    std::time::Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LedgerFile {
    pub dir: Spanned<String>,
    pub rotate_bytes: Option<Spanned<String>>,
    pub rotate_every: Option<Spanned<String>>,
}

/// Checks `[ledger]`; relative `dir` resolves against `base_dir`.
pub(crate) fn compile_ledger(
    d: &mut Diagnostics<'_>,
    file: &LedgerFile,
    base_dir: &std::path::Path,
) -> LedgerConfig {
    let dir = file.dir.get_ref();
    if dir.trim().is_empty() {
        d.at(
            ProblemKind::Invalid,
            file.dir.span(),
            "the ledger's dir must name a directory",
        );
    }
    let path = base_dir.join(dir);
    if !dir.trim().is_empty() {
        check_ledger_dir(d, &file.dir, &path);
    }
    LedgerConfig {
        dir_key: d.problem_at(ProblemKind::Read, file.dir.span(), ""),
        dir: path,
        rotate_bytes: file
            .rotate_bytes
            .as_ref()
            .map_or(DEFAULT_LEDGER_ROTATE_BYTES, |v| {
                crate::policy::size(d, v, DEFAULT_LEDGER_ROTATE_BYTES)
            }),
        rotate_every: crate::policy::duration(
            d,
            file.rotate_every.as_ref(),
            DEFAULT_LEDGER_ROTATE_EVERY,
        ),
    }
}

/// Checks that the ledger's `dir` is one the edge can open (`path`, resolved): an existing
/// directory, or one it can create because the nearest existing path above it is a directory.
/// `signpost check` and `signpost run` both refuse the policy here, at the key, so that `check`
/// passes no policy that `run` refuses. Nothing is created or locked: `check` on the machine
/// where the edge runs changes nothing. (Permissions are left to the edge's open, which reports
/// at the same key.)
fn check_ledger_dir(d: &mut Diagnostics<'_>, value: &Spanned<String>, path: &std::path::Path) {
    let shown = value.get_ref();
    let problem = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return,
        Ok(_) => format!("the ledger's dir `{shown}` is not a directory"),
        Err(e) => {
            // The edge creates the directory, and every missing one above it.
            let existing = path
                .ancestors()
                .skip(1)
                // A relative path's last ancestor is the empty path: the working directory.
                .map(|a| match a.as_os_str().is_empty() {
                    true => std::path::Path::new("."),
                    false => a,
                })
                .find_map(|a| std::fs::metadata(a).ok().map(|meta| (a, meta)));
            match existing {
                Some((_, meta)) if meta.is_dir() && e.kind() == std::io::ErrorKind::NotFound => {
                    return;
                }
                Some((above, meta)) if !meta.is_dir() => format!(
                    "cannot create the ledger's dir `{shown}`: `{}` is not a directory",
                    above.display()
                ),
                _ => format!("cannot open the ledger's dir `{shown}`: {e}"),
            }
        }
    };
    let hint = std::path::Path::new(shown)
        .is_relative()
        .then(|| "relative paths are resolved against the policy file's directory".to_owned());
    d.at_with_hint(ProblemKind::Read, value.span(), problem, hint);
}

/// Reports the `[zone.crawl] bots` overrides that name no bot of the catalog (the shipped one
/// with the policy's `[[bot]]` changes): a typo would otherwise silently never apply.
pub(crate) fn check_bot_names(
    d: &mut Diagnostics<'_>,
    file: &CrawlFile,
    catalog: &crate::BotCatalog,
) {
    let Some(bots) = &file.bots else { return };
    for (name, value) in bots.get_ref() {
        if !catalog
            .bots()
            .iter()
            .any(|b| b.name.eq_ignore_ascii_case(name))
        {
            d.at(
                ProblemKind::Invalid,
                value.span(),
                format!("no known bot is named `{name}`; the names are those of the shipped bot catalog and of the policy's [[bot]] entries"),
            );
        }
    }
}

/// The first `"charge"` of a zone's `[zone.crawl]`, where a missing `[ledger]` is reported.
pub(crate) fn first_charge(file: &CrawlFile) -> Option<std::ops::Range<usize>> {
    let is_charge = |v: &&Spanned<String>| v.get_ref() == "charge";
    [&file.search, &file.agent, &file.training]
        .into_iter()
        .flatten()
        .find(is_charge)
        .or_else(|| file.bots.as_ref()?.get_ref().values().find(is_charge))
        .map(|v| v.span())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use proptest::prelude::*;

    use super::*;
    use crate::CompiledPolicy;

    fn usd(cents: u64) -> Price {
        Price::from_cents(cents).unwrap()
    }

    fn zone_crawl(table: &str) -> Result<Option<CrawlConfig>, String> {
        let text = format!(
            "[ledger]\ndir = \"ledger\"\n[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n{table}"
        );
        CompiledPolicy::from_toml(&text, "t.toml", Path::new("."), None)
            .map(|p| p.zones()[0].crawl.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn prices_parse_exactly() {
        for (text, cents) in [
            ("USD 0.01", 1),
            ("USD 3.14", 314),
            ("USD 2", 200),
            ("USD 2.5", 250),
            ("  USD 0.10\t", 10),
            ("USD 000.01", 1),
            ("USD 1000000.00", MAX_PRICE_CENTS),
            ("USD 0", 0),
        ] {
            assert_eq!(Price::parse(text.as_bytes()), Some(usd(cents)), "{text}");
        }
        for bad in [
            "",
            "USD",
            "USD ",
            "USD  0.01",
            "usd 0.01",
            "EUR 0.01",
            "USD -0.01",
            "USD +1",
            "USD 0.001",
            "USD 1e2",
            "USD 0.",
            "USD .5",
            "USD 1,00",
            "USD 1000000.01",
            "USD 999999999999",
            "USD 0.01, USD 0.02",
            "USD 0x10",
            "USD ٣",
            "0.01",
        ] {
            assert_eq!(Price::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(usd(1).to_string(), "USD 0.01");
        assert_eq!(usd(314).to_string(), "USD 3.14");
        assert_eq!(usd(12_300).to_string(), "USD 123.00");
    }

    #[test]
    fn the_most_restrictive_behavior_decides_unless_the_bot_is_named() {
        let config = zone_crawl(
            "[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\nagent = \"block\"\n[zone.crawl.bots]\n\"GPTBot\" = \"block\"\n\"Googlebot\" = \"allow\"\n",
        )
        .unwrap()
        .unwrap();
        let search = Behaviors::SEARCH;
        let search_training = Behaviors::SEARCH | Behaviors::TRAINING;
        let agent_training = Behaviors::AGENT | Behaviors::TRAINING;
        assert_eq!(config.action_for("Bingbot", search), CrawlAction::Allow);
        assert_eq!(
            config.action_for("Applebot", search_training),
            CrawlAction::Charge
        );
        assert_eq!(
            config.action_for("Other", agent_training),
            CrawlAction::Block
        );
        // An override wins over the behaviors, whichever way, and ignores case.
        assert_eq!(
            config.action_for("googlebot", search_training),
            CrawlAction::Allow
        );
        assert_eq!(config.action_for("GPTBot", search), CrawlAction::Block);
        assert_eq!(
            config.action_for("NoBehavior", Behaviors::default()),
            CrawlAction::Allow
        );
    }

    #[test]
    fn schema_defaults_and_errors() {
        assert_eq!(zone_crawl("").unwrap(), None);
        assert_eq!(
            zone_crawl("[zone.crawl]\n").unwrap(),
            Some(CrawlConfig::default())
        );
        let c = zone_crawl(
            "[zone.crawl]\nprice = \"USD 0.05\"\nblock_status = 402\nmessage = \"License at https://example.com/licensing\"\nfree_paths = [\"/public/*\"]\nimpostors = \"allow\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.price, usd(5));
        assert_eq!(c.block_status, 402);
        assert_eq!(c.impostors, CrawlAction::Allow);
        assert!(c.message.unwrap().contains("licensing"));
        for (table, needle) in [
            ("search = \"deny\"", "`deny` is not a crawl action"),
            ("price = \"USD 0.00\"", "at least USD 0.01"),
            ("price = \"EUR 1\"", "is not a price"),
            ("block_status = 401", "402 or 403"),
            ("impostors = \"charge\"", "impostors cannot be charged"),
            ("free_paths = [\"public\"]", "free path"),
            ("message = \"\"", "message must be"),
            ("trainng = \"block\"", "unknown key `trainng`"),
        ] {
            let e = zone_crawl(&format!("[zone.crawl]\n{table}\n")).unwrap_err();
            assert!(
                e.contains("t.toml:8:") && e.contains(needle),
                "{table}: {e}"
            );
        }
        let e = zone_crawl("[zone.crawl.bots]\n\"GPTBot\" = \"block\"\n\"gptbot\" = \"allow\"\n")
            .unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = zone_crawl("[zone.crawl.bots]\n\"GPTBot\" = \"maybe\"\n").unwrap_err();
        assert!(e.contains("t.toml:8:") && e.contains("`maybe`"), "{e}");
    }

    #[test]
    fn free_paths() {
        let c = zone_crawl("[zone.crawl]\nfree_paths = [\"/public/*\", \"/*.css\", \"/exact\"]\n")
            .unwrap()
            .unwrap();
        for free in [
            "/robots.txt",
            "/sitemap.xml",
            "/security.txt",
            "/.well-known/security.txt",
            "/crawlers.json",
            "/%72obots.txt",
            "/public/",
            "/public/a/b",
            "/x/y.css",
            "/exact",
        ] {
            assert!(c.is_free_path(free), "{free}");
        }
        for charged in [
            "/",
            "/robots.txt.bak",
            "/publication",
            "/exact/",
            "/a.css.map",
            "/public",
        ] {
            assert!(!c.is_free_path(charged), "{charged}");
        }
        assert!(is_always_free("/robots.txt") && !is_always_free("/index.html"));
    }

    const SIGNED: PaymentAuth = PaymentAuth::Verified {
        covers_price_header: true,
    };

    fn request(exact: Option<&str>, max: Option<&str>, signature: PaymentAuth) -> RequestOutcome {
        let headers = PaymentHeaders {
            exact: exact.map(str::as_bytes),
            max: max.map(str::as_bytes),
        };
        charge_request(usd(1), headers, signature, false)
    }

    fn refused(outcome: RequestOutcome) -> (u16, &'static str, Option<String>) {
        match outcome {
            RequestOutcome::Refuse(r) => (
                r.status(),
                r.error.as_str(),
                r.advertise.map(|p| p.to_string()),
            ),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn request_half_every_error() {
        // The first request: 402 with the price.
        assert_eq!(
            refused(request(None, None, PaymentAuth::Absent)),
            (402, "MissingCrawlerPrice", Some("USD 0.01".into()))
        );
        assert_eq!(
            refused(request(Some("USD 0.01"), Some("USD 1"), SIGNED)),
            (400, "ConflictingPriceHeaders", None)
        );
        assert_eq!(
            refused(request(Some("USD 0.01"), None, PaymentAuth::Absent)),
            (400, "StrongAuthRequired", None)
        );
        assert_eq!(
            refused(request(
                None,
                Some("USD 0.01"),
                PaymentAuth::Verified {
                    covers_price_header: false
                }
            )),
            (400, "StrongAuthRequired", None)
        );
        assert_eq!(
            refused(request(Some("USD 0.01"), None, PaymentAuth::Invalid)),
            (400, "InvalidSignature", None)
        );
        assert_eq!(
            refused(request(Some("0.01 USD"), None, SIGNED)),
            (400, "InvalidCrawlerPriceValue", None)
        );
        assert_eq!(
            refused(request(None, Some("USD 0.01, USD 0.02"), SIGNED)),
            (400, "InvalidCrawlerPriceValue", None)
        );
        assert_eq!(
            request(Some("USD 0.01"), None, SIGNED),
            RequestOutcome::Forward(Intent::Exact(usd(1)))
        );
        assert_eq!(
            request(None, Some("USD 5"), SIGNED),
            RequestOutcome::Forward(Intent::Max(usd(500)))
        );
        // A free path costs nothing, whatever was sent.
        let any = PaymentHeaders {
            exact: Some(b"junk"),
            max: Some(b"junk"),
        };
        assert_eq!(
            charge_request(usd(1), any, PaymentAuth::Invalid, true),
            RequestOutcome::Free
        );
    }

    #[test]
    fn response_half_every_case() {
        let zone = usd(1);
        // Exact price equal to the zone's: charged the price.
        assert_eq!(
            settle(Intent::Exact(usd(1)), zone, 200, None),
            Settlement::Charge(usd(1))
        );
        // Max above: charged the price, not the max.
        assert_eq!(
            settle(Intent::Max(usd(100)), zone, 200, None),
            Settlement::Charge(usd(1))
        );
        // Exact that differs: another 402 with the price.
        let Settlement::Refuse(r) = settle(Intent::Exact(usd(2)), zone, 200, None) else {
            panic!()
        };
        assert_eq!(
            (r.status(), r.error.as_str(), r.advertise),
            (402, "InvalidCrawlerExactPrice", Some(zone))
        );
        // The origin's price decides: a max below it is refused with the origin's price.
        let Settlement::Refuse(r) = settle(Intent::Max(usd(100)), zone, 200, Some(b"USD 3.14"))
        else {
            panic!()
        };
        assert_eq!(
            (r.status(), r.error.as_str(), r.advertise),
            (402, "InvalidCrawlerMaxPrice", Some(usd(314)))
        );
        assert_eq!(
            settle(Intent::Max(usd(400)), zone, 200, Some(b"USD 3.14")),
            Settlement::Charge(usd(314))
        );
        assert_eq!(
            settle(Intent::Exact(usd(314)), zone, 200, Some(b"USD 3.14")),
            Settlement::Charge(usd(314))
        );
        // A bad origin price is the origin's fault.
        let Settlement::Refuse(r) =
            settle(Intent::Max(usd(100)), zone, 200, Some(b"three dollars"))
        else {
            panic!()
        };
        assert_eq!(
            (r.status(), r.error.as_str(), r.advertise),
            (502, "InvalidContentPrice", None)
        );
        // Only successes are charged; an origin's free page is free.
        for status in [301, 304, 404, 500, 503] {
            assert_eq!(
                settle(Intent::Max(usd(100)), zone, status, None),
                Settlement::NoCharge,
                "{status}"
            );
        }
        assert_eq!(
            settle(Intent::Max(usd(100)), zone, 200, Some(b"USD 0.00")),
            Settlement::NoCharge
        );
    }

    #[test]
    fn payment_auth_from_the_identify_phase() {
        use crate::{Signature as Sig, SignatureOutcome};
        let exact = PaymentHeaders {
            exact: Some(b"USD 0.01"),
            max: None,
        };
        let max = PaymentHeaders {
            exact: None,
            max: Some(b"USD 1"),
        };
        let verified = |covered_headers| Sig {
            outcome: SignatureOutcome::Verified,
            covered_headers,
            ..Sig::default()
        };
        assert_eq!(PaymentAuth::of(&verified(1), exact), SIGNED);
        assert_eq!(PaymentAuth::of(&verified(2), max), SIGNED);
        let uncovered = PaymentAuth::Verified {
            covers_price_header: false,
        };
        assert_eq!(PaymentAuth::of(&verified(2), exact), uncovered);
        assert_eq!(PaymentAuth::of(&verified(0), max), uncovered);
        for (outcome, auth) in [
            (SignatureOutcome::Absent, PaymentAuth::Absent),
            (SignatureOutcome::Unverified, PaymentAuth::Absent),
            (SignatureOutcome::Invalid, PaymentAuth::Invalid),
        ] {
            let sig = Sig {
                outcome,
                covered_headers: 3,
                ..Sig::default()
            };
            assert_eq!(PaymentAuth::of(&sig, exact), auth, "{outcome:?}");
        }
    }

    #[test]
    fn blocked_crawlers_cannot_pay() {
        let config = CrawlConfig {
            block_status: 402,
            ..CrawlConfig::default()
        };
        assert_eq!(
            block_answer(&config, PaymentHeaders::default()),
            (402, None)
        );
        let pay = PaymentHeaders {
            exact: Some(b"USD 100"),
            max: None,
        };
        assert_eq!(
            block_answer(&config, pay),
            (403, Some(CrawlerError::CrawlerForbidden))
        );
    }

    #[test]
    fn codes_and_statuses_are_cloudflares() {
        use CrawlerError::*;
        for (e, status, code) in [
            (CrawlerForbidden, 403, 1020),
            (StrongAuthRequired, 400, 400),
            (InvalidSignature, 400, 400),
            (InvalidCrawlerPriceValue, 400, 400),
            (MissingCrawlerPrice, 402, 402),
            (PaymentFailed, 403, 1020),
            (InvalidCrawlerExactPrice, 402, 402),
            (InvalidCrawlerMaxPrice, 402, 402),
            (ConflictingPriceHeaders, 400, 400),
            (InvalidContentPrice, 502, 502),
            (InternalError, 500, 500),
        ] {
            assert_eq!((e.status(), e.code().get()), (status, code), "{e}");
            assert!(
                signpost_problem::lookup(e.code()).is_some(),
                "{e}: no catalog entry"
            );
        }
    }

    /// A reference matcher: tries every split, exponential but exact, for small inputs.
    fn glob_reference(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some((b'*', rest)) => (0..=text.len()).any(|i| glob_reference(rest, &text[i..])),
            Some((c, rest)) => text.first() == Some(c) && glob_reference(rest, &text[1..]),
        }
    }

    proptest! {
        #[test]
        fn price_parsing_never_panics_and_round_trips(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            if let Some(p) = Price::parse(&bytes) {
                prop_assert!(p.cents() <= MAX_PRICE_CENTS);
                prop_assert_eq!(Price::parse(p.to_string().as_bytes()), Some(p));
            }
        }

        #[test]
        fn prices_written_in_the_format_parse(cents in 0..=MAX_PRICE_CENTS) {
            let p = usd(cents);
            prop_assert_eq!(Price::parse(p.to_string().as_bytes()), Some(p));
        }

        #[test]
        fn never_charges_more_than_agreed(
            exact in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
            max in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
            origin in proptest::option::of("(USD )?[0-9.]{0,6}|\\PC{0,8}"),
            zone_cents in 1..1000u64,
            status in 100..600u16,
            signed in any::<bool>(),
        ) {
            let headers = PaymentHeaders { exact: exact.as_deref().map(str::as_bytes), max: max.as_deref().map(str::as_bytes) };
            let signature = if signed { SIGNED } else { PaymentAuth::Absent };
            match charge_request(usd(zone_cents), headers, signature, false) {
                RequestOutcome::Forward(intent) => {
                    prop_assert!(signed);
                    match settle(intent, usd(zone_cents), status, origin.as_deref().map(str::as_bytes)) {
                        Settlement::Charge(p) => {
                            prop_assert!(p <= intent.ceiling());
                            prop_assert!((200..300).contains(&status) && p.cents() > 0);
                            if let Intent::Exact(e) = intent { prop_assert_eq!(p, e); }
                        }
                        Settlement::Refuse(r) => prop_assert_eq!(r.advertise.is_some(), r.status() == 402),
                        Settlement::NoCharge => {}
                    }
                }
                RequestOutcome::Refuse(r) => prop_assert_eq!(r.advertise.is_some(), r.status() == 402),
                RequestOutcome::Free => prop_assert!(false, "not a free path"),
            }
        }

        #[test]
        fn glob_matches_as_the_reference(pattern in "[ab*/]{0,8}", text in "[ab/]{0,10}") {
            prop_assert_eq!(glob_matches(&pattern, &text, true), glob_reference(pattern.as_bytes(), text.as_bytes()));
            let open = format!("{pattern}*");
            prop_assert_eq!(glob_matches(&pattern, &text, false), glob_reference(open.as_bytes(), text.as_bytes()));
        }
    }

    fn policy_error(text: &str) -> String {
        CompiledPolicy::from_toml(text, "t.toml", Path::new("."), None)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn a_ledger_dir_is_checked_where_it_is_written_and_nothing_is_created() {
        // A policy read from the working directory (`signpost check policy.toml`): its base
        // directory is the empty path.
        let ledger = |dir: &str| {
            CompiledPolicy::from_toml(
                &format!("[ledger]\ndir = \"{dir}\"\n"),
                "t.toml",
                Path::new(""),
                None,
            )
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(ledger("not-made-by-a-check/ledger"), "");
        assert!(!Path::new("not-made-by-a-check").exists());
        // The crate's manifest, a regular file (tests run in the crate's directory).
        let e = ledger("Cargo.toml");
        assert!(
            e.contains("t.toml:2:7: the ledger's dir `Cargo.toml` is not a directory"),
            "{e}"
        );
        let e = ledger("Cargo.toml/ledger");
        assert!(
            e.contains("t.toml:2:7: cannot create the ledger's dir"),
            "{e}"
        );
    }

    #[test]
    fn a_zone_that_charges_needs_a_ledger_and_overrides_name_known_bots() {
        let zone = "[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n";
        let e = policy_error(&format!(
            "{zone}[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\n"
        ));
        assert!(e.contains("t.toml:7:12:") && e.contains("[ledger]"), "{e}");
        let e = policy_error(&format!(
            "{zone}[zone.crawl]\n[zone.crawl.bots]\n\"GPTBot\" = \"charge\"\n"
        ));
        assert!(e.contains("t.toml:7:12:") && e.contains("[ledger]"), "{e}");
        // Without a charge, no ledger is needed.
        assert_eq!(
            policy_error(&format!("{zone}[zone.crawl]\ntraining = \"block\"\n")),
            ""
        );
        // An override must name a known bot (ignoring case), shipped or added.
        let e = policy_error(&format!(
            "{zone}[zone.crawl.bots]\n\"gptbot\" = \"block\"\n\"GTPBot\" = \"block\"\n"
        ));
        assert!(e.contains("t.toml:7:12:") && e.contains("`GTPBot`"), "{e}");
        assert!(!e.contains("`gptbot`"), "{e}");
        let added = "[[bot]]\nname = \"MyBot\"\noperator = \"Me\"\ncategory = \"AI Crawler\"\nbehaviors = [\"training\"]\nuser_agent = \"MyBot\"\n";
        assert_eq!(
            policy_error(&format!(
                "{added}{zone}[zone.crawl.bots]\n\"MyBot\" = \"block\"\n"
            )),
            ""
        );
    }

    fn identity(name: &str, status: crate::BotStatus, signed: bool) -> crate::Identity {
        let catalog = crate::bots::shipped_catalog();
        let bot = catalog.named(name).unwrap().clone();
        let signature = if signed {
            crate::Signature {
                outcome: crate::SignatureOutcome::Verified,
                covered_headers: 1,
                ..Default::default()
            }
        } else {
            crate::Signature::default()
        };
        crate::Identity {
            signature,
            bot: Some(bot),
            status,
        }
    }

    #[test]
    fn control_acts_on_known_crawlers_only_and_never_on_always_free_paths() {
        use crate::{BotStatus, Method};
        let config = zone_crawl(
            "[zone.crawl]\nsearch = \"allow\"\ntraining = \"charge\"\nagent = \"block\"\nblock_status = 402\nmessage = \"Licensing: ask.\"\nfree_paths = [\"/free/*\"]\n",
        )
        .unwrap()
        .unwrap();
        let none = PaymentHeaders::default();
        let verified = BotStatus::Verified(Method::IpRange);
        // Nobody in particular: nothing to say.
        assert_eq!(
            control(&config, &crate::Identity::default(), "/", none),
            None
        );
        // Allowed.
        let step = control(&config, &identity("Bingbot", verified, false), "/", none).unwrap();
        assert_eq!(
            (step.action, &step.outcome),
            (CrawlAction::Allow, &CrawlOutcome::Allowed)
        );
        // Blocked, with the zone's status and message, also when only claimed.
        for status in [verified, BotStatus::Pending, BotStatus::Unverifiable] {
            let step = control(
                &config,
                &identity("ChatGPT-User", status, false),
                "/a",
                none,
            )
            .unwrap();
            let CrawlOutcome::Refused(r) = &step.outcome else {
                panic!("{step:?}")
            };
            assert_eq!((r.status, r.error, r.code()), (402, None, BLOCK_CODE));
            assert_eq!(r.detail, "Licensing: ask.");
        }
        // An impostor gets the zone's `impostors` (block by default).
        let step = control(
            &config,
            &identity("Bingbot", BotStatus::Failed, false),
            "/",
            none,
        )
        .unwrap();
        assert!(step.impostor);
        assert_eq!(step.action, CrawlAction::Block);
        // robots.txt and the other always-free paths: never refused, never charged.
        for path in ALWAYS_FREE_PATHS {
            assert_eq!(
                control(
                    &config,
                    &identity("ChatGPT-User", verified, false),
                    path,
                    none
                ),
                None
            );
            assert_eq!(
                control(&config, &identity("GPTBot", verified, true), path, none),
                None
            );
        }
        assert_eq!(
            control(
                &config,
                &identity("ChatGPT-User", verified, false),
                "/%72obots.txt",
                none
            ),
            None,
            "the path is compared normalised"
        );
        // A free path of the zone: not charged, but a block still applies.
        let step = control(
            &config,
            &identity("GPTBot", verified, true),
            "/free/x",
            none,
        )
        .unwrap();
        assert_eq!(step.outcome, CrawlOutcome::Free);
        assert!(matches!(
            control(
                &config,
                &identity("ChatGPT-User", verified, false),
                "/free/x",
                none
            )
            .unwrap()
            .outcome,
            CrawlOutcome::Refused(_)
        ));
        // Charged: the first 402 advertises the price; a signed exact price goes forward.
        let step = control(&config, &identity("GPTBot", verified, true), "/p", none).unwrap();
        let CrawlOutcome::Refused(r) = &step.outcome else {
            panic!("{step:?}")
        };
        assert_eq!(r.error, Some(CrawlerError::MissingCrawlerPrice));
        assert_eq!(r.advertise, Some(usd(1)));
        assert_eq!(r.code(), PAYMENT_REQUIRED_CODE);
        assert!(r.detail.contains("USD 0.01"));
        let exact = PaymentHeaders {
            exact: Some(b"USD 0.01"),
            max: None,
        };
        let step = control(&config, &identity("GPTBot", verified, true), "/p", exact).unwrap();
        assert!(step.charges());
        assert_eq!(
            step.outcome,
            CrawlOutcome::Forward {
                intent: Intent::Exact(usd(1)),
                price: usd(1)
            }
        );
    }

    #[test]
    fn repeated_price_headers_are_joined_and_refused() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(payment_header(&headers, "crawler-max-price"), None);
        headers.append("crawler-max-price", "USD 1".parse().unwrap());
        assert_eq!(
            payment_header(&headers, "crawler-max-price").as_deref(),
            Some(&b"USD 1"[..])
        );
        headers.append("crawler-max-price", "USD 2".parse().unwrap());
        let joined = payment_header(&headers, "crawler-max-price").unwrap();
        assert_eq!(&*joined, b"USD 1, USD 2");
        assert_eq!(Price::parse(&joined), None);
    }
}

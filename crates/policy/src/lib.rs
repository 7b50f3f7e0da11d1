//! signpost's policy: the site owner's TOML file, checked, compiled, and asked about requests.
//!
//! The pipeline has three stages, each a type: `PolicyFile` (the TOML as written, kept private)
//! → `Policy` (every value checked, all problems collected with `file:line:col`) →
//! [`CompiledPolicy`] (tables, expressions and limiters built once). A key design decision is
//! that nothing is interpreted per request: host patterns, IP sets and expressions are compiled
//! at load time so that [`CompiledPolicy::decide`] is a few table lookups.
//!
//! This crate does no network I/O and knows nothing of Pingora; it reads only the policy file
//! and the geo databases it names.
//!
//! # Example
//!
//! ```
//! use std::path::Path;
//! use std::time::Instant;
//! use signpost_policy::{Code, CompiledPolicy, RequestFacts, Verdict};
//!
//! let policy = CompiledPolicy::from_toml(
//!     r#"
//!     listen = ["0.0.0.0:8080"]
//!
//!     [[zone]]
//!     name = "example"
//!     hosts = ["example.com", "*.example.com"]
//!     origin = "127.0.0.1:8000"
//!     "#,
//!     "policy.toml",
//!     Path::new("."),
//!     None,
//! )?;
//!
//! let headers = http::HeaderMap::new();
//! let facts = RequestFacts {
//!     peer: "192.0.2.7".parse()?,
//!     host: "www.example.com",
//!     method: "GET",
//!     uri: "/",
//!     tls: false,
//!     sni: None,
//!     headers: &headers,
//! };
//! let decision = policy.decide(&facts, Instant::now());
//! assert_eq!(decision.verdict, Verdict::Proxy);
//! assert_eq!(policy.zone(decision.zone.unwrap()).origin.port, 8000);
//!
//! let unknown = RequestFacts { host: "other.org", ..facts };
//! assert_eq!(
//!     policy.decide(&unknown, Instant::now()).verdict,
//!     Verdict::Refuse { code: Code::DNS_RESOLUTION_ERROR, retry_after: None },
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod answer_file;
mod bots;
mod challenge;
mod client;
mod compiled;
mod crawl;
mod decision;
mod error;
mod expr;
mod file;
mod fleet;
mod geo;
mod host;
mod identity;
mod ipset;
mod iso;
mod markdown;
mod path;
mod policy;
mod ratelimit;
mod robots;
mod rules;
mod tls;
mod trace;
mod units;
mod verdict;

pub use bots::settings::{
    BotsConfig, DEFAULT_CLOCK_SKEW, DEFAULT_FAILED_VERIFICATIONS_PER_MINUTE, DEFAULT_MAX_VALIDITY,
    DEFAULT_ORIGIN_HEADER,
};
pub use bots::{Behaviors, Bot, BotCatalog, CATEGORIES, MAX_BOTS, normalize_agent};
pub use challenge::{
    ChallengeBypass, ChallengeConfig, ChallengeNote, DEFAULT_EXEMPT_PATHS, MAX_EXEMPT_PATHS,
    is_verified,
};
pub use client::client_key;
pub use compiled::CompiledPolicy;
pub use crawl::{
    ALWAYS_FREE_PATHS, BLOCK_CODE, CURRENCY, CrawlAction, CrawlConfig, CrawlOutcome, CrawlRefusal,
    CrawlStep, CrawlerError, DEFAULT_LEDGER_ROTATE_BYTES, DEFAULT_LEDGER_ROTATE_EVERY, Intent,
    LedgerConfig, MAX_PRICE_CENTS, PAYMENT_REQUIRED_CODE, PathGlob, PaymentAuth, PaymentHeaders,
    Price, Refusal, RequestOutcome, Settlement, block_answer, charge_request, glob_matches,
    is_always_free, settle,
};
pub use decision::{AnswerCount, Decision, FleetCount, RequestFacts};
pub use error::{Location, PolicyError, Problem, ProblemKind};
pub use expr::{
    Expression, ExpressionError, MAX_EXPRESSION_LEN, MAX_NESTING, MAX_REGEX_SIZE, ParsedExpression,
    ResponseFacts,
};
pub use fleet::{
    DEFAULT_KEY_PREFIX, DEFAULT_REDIS_TIMEOUT, FleetCheck, OnError, RedisConfig, redact_url,
};
pub use host::normalize_host;
pub use identity::{
    BotStatus, COVERED_HEADERS, Evidence, Identity, Method, NoEvidence, ReverseDnsName, Signature,
    SignatureOutcome, host_in_suffixes,
};
pub use markdown::{DEFAULT_MARKDOWN_MAX_BYTES, MAX_MARKDOWN_MAX_BYTES, MarkdownConfig};
pub use policy::{
    BrandingConfig, Connections, DEFAULT_ADMIN, DEFAULT_BODY_MIN_RATE, DEFAULT_BODY_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN,
    DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_PER_CLIENT, DEFAULT_READ_TIMEOUT, DEFAULT_WRITE_TIMEOUT,
    Divert, Listener, MAX_DIVERTS, Origin, TlsFiles, Zone, ZoneId,
};
pub use ratelimit::DEFAULT_MAX_KEYS;
pub use robots::{KnownCrawler, RobotsConfig, RobotsMode, content_signal, managed_block};
pub use rules::{RateLimitState, RuleInfo};
pub use signpost_challenge::{Difficulty, KeyRing};
pub use signpost_problem::Code;
pub use tls::{Hsts, HttpsRedirect, ZoneTls};
pub use trace::{PHASES, StepKind, Trace, TraceStep};
pub use verdict::Verdict;

/// Request text as a `str`, as `String::from_utf8_lossy` reads it (each byte that is not UTF-8
/// reads as U+FFFD), through the standard validator first: valid text, the usual case, is
/// borrowed after one quick pass instead of being walked chunk by chunk.
pub fn lossy_utf8(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

#[cfg(test)]
mod lossy_tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn lossy_utf8_reads_as_from_utf8_lossy(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(super::lossy_utf8(&bytes), String::from_utf8_lossy(&bytes));
        }
    }
}

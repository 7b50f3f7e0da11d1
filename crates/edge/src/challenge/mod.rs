//! The challenge action at the edge: the policy decides who is challenged
//! (`signpost_policy::Verdict::Challenge`); here a clearance is checked, the challenge is
//! answered (a page for browsers, a problem for agents), and the two endpoints redeem answers.
//! The work itself (tokens, clearances, the page) is `signpost_challenge`'s; this room does what
//! only the edge can: read the request, the clock and the operating system's random bytes.
//!
//! - A request whose verdict is a challenge passes with a valid clearance cookie
//!   ([`cleared`]: bound to the zone, the client's address prefix and User-Agent, at the
//!   difficulty the rule asks or above), counted `bypassed{reason="cleared"}`. The check runs
//!   only for such a request: a zone without a challenge rule never reads a cookie.
//! - Otherwise [`challenge`] answers: a browser (the negotiated format is HTML) gets the page,
//!   403 with its Content-Security-Policy, `Content-Language`, `Vary: Accept, Accept-Language`,
//!   `cf-mitigated: challenge` and the ray id; an agent (JSON, problem+json, Markdown) gets the
//!   `challenge_required` problem with `cf-mitigated: challenge` and `Accept-Signature`, the
//!   RFC 9421 request for the Web Bot Auth signature the edge verifies.
//! - A challenged request with a body (a form post, an upload) is not replayed: the page says
//!   so, and once cleared the browser goes back to the same URL with a GET.
//! - [`at_endpoint`] serves `/cdn-cgi/challenge/verify` (the page's proof of work, POSTed) and
//!   `/cdn-cgi/challenge/wait` (the no-JavaScript fallback): 303 back with the clearance, or the
//!   page again. The edge keeps nothing per challenge, so neither costs memory.

pub(crate) mod metrics;

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::HeaderMap;
use pingora::http::ResponseHeader;
use pingora::prelude::*;
use pingora::proxy::Session;
pub use signpost_challenge::Endpoint;
use signpost_challenge::{
    ACCEPT_SIGNATURE, CF_MITIGATED, Clearance, Lang, PageInput, Redeemed, Rejected, Visitor,
    find_clearance,
};
use signpost_policy::{ChallengeNote, Difficulty, KeyRing, Zone};
use signpost_problem::{Code, Format};

use crate::request::ray::RayId;

pub use metrics::ChallengeMetrics;

/// The longest a signed request on a challenged path waits for its agent's key directory, when
/// the edge sees that directory for the first time (its fetch is under way): long enough for a
/// directory on a nearby host (a fetch here takes milliseconds), short enough that a client
/// retrying once on `Accept-Signature` (as REDbot does) is not left hanging. Past it, the
/// signature reads unverified and the request is challenged; its next one finds the directory.
pub const DIRECTORY_WAIT: Duration = Duration::from_secs(2);

/// A request's part in the challenge.
#[derive(Debug, Default)]
pub struct ChallengeState {
    /// The challenge the verdict asks, until the clearance is checked.
    pub pending: Option<Pending>,
    /// What happened, for the access line: `issued`, `cleared`, `verified`, `exempt`, `solved`,
    /// `failed`.
    pub outcome: Option<&'static str>,
}

/// A challenge the verdict asks for.
#[derive(Debug, Clone)]
pub struct Pending {
    pub difficulty: Difficulty,
    /// The rule that asked (its id, or its phase's name), for the metrics.
    pub rule: std::sync::Arc<str>,
}

impl Pending {
    pub fn of(difficulty: Difficulty, note: Option<&ChallengeNote>) -> Pending {
        Pending {
            difficulty,
            rule: note.map_or_else(|| "-".into(), |n| n.label().into()),
        }
    }
}

/// What the challenge reads of a request.
pub struct Asking<'a> {
    pub zone: &'a Zone,
    pub ring: &'a KeyRing,
    /// The client's address as the policy derived it.
    pub client: IpAddr,
    pub headers: &'a HeaderMap,
    pub method: &'a str,
    /// The request target, `path?query`.
    pub target: &'a str,
    /// The host the client asked for, normalised.
    pub host: &'a str,
    /// Whether the client's connection is TLS (the cookie's `Secure`).
    pub tls: bool,
    pub ray: RayId,
    /// The policy's footer line.
    pub footer: &'a str,
}

impl Asking<'_> {
    fn visitor(&self) -> Visitor<'_> {
        Visitor {
            zone: &self.zone.name,
            addr: self.client,
            user_agent: self
                .headers
                .get(http::header::USER_AGENT)
                .map_or(&b""[..], |v| v.as_bytes()),
        }
    }

    fn lang(&self) -> Lang {
        self.zone.challenge.language.unwrap_or_else(|| {
            Lang::from_accept_language(
                self.headers
                    .get(http::header::ACCEPT_LANGUAGE)
                    .map(|v| v.as_bytes()),
            )
        })
    }
}

/// The time, in Unix seconds, as tokens and clearances count it.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The request's clearance, checked against a rule asking `difficulty`: the first
/// `signpost_clearance` cookie of any `Cookie` field (HTTP/2 may split them), or why there is
/// none that passes.
pub fn cleared(a: &Asking<'_>, difficulty: Difficulty, now: u64) -> Result<Clearance, Rejected> {
    let value = a
        .headers
        .get_all(http::header::COOKIE)
        .iter()
        .find_map(|v| find_clearance(v.as_bytes()))
        .ok_or(Rejected::Malformed)?;
    a.ring.verify_clearance(
        value,
        &a.visitor(),
        &a.zone.challenge.settings,
        difficulty,
        now,
    )
}

/// An answer of the challenge's: its head and body, and what it was.
pub struct Reply {
    pub head: ResponseHeader,
    pub body: Bytes,
    /// The catalog code answered (`challenge_required`), `None` for a redirect.
    pub code: Option<Code>,
    pub format: Format,
    /// For the access line and the metrics: `page`, `problem`, `solved`, `failed`.
    pub outcome: &'static str,
}

impl Reply {
    /// Writes the reply as the whole response (the head alone for HEAD); a failed write is the
    /// client's leaving.
    pub async fn write(self, session: &mut Session) -> Result<()> {
        let head_only = session.req_header().method == http::Method::HEAD;
        crate::answer::write_whole(session, self.head, self.body, head_only).await
    }
}

/// Sixteen random bytes from the operating system, for a challenge token.
fn random() -> Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::explain(InternalError, format!("no random bytes: {e}")))?;
    Ok(bytes)
}

/// The challenge page for `a` at `difficulty`: a new token, or `retry` (the fallback asked too
/// early keeps its token, so its wait does not start over) with `wait_secs` left; the answer
/// returns to `return_to`.
fn page(
    a: &Asking<'_>,
    difficulty: Difficulty,
    now: u64,
    retry: Option<(String, u64)>,
    return_to: &str,
) -> Result<Reply> {
    let settings = &a.zone.challenge.settings;
    let (token, wait) = match retry {
        Some(kept) => kept,
        None => (
            a.ring
                .issue_challenge(&a.visitor(), settings, difficulty, now, random()?),
            settings.fallback_delay.as_secs(),
        ),
    };
    let ray = a.ray.to_hex();
    let rendered = signpost_challenge::render(&PageInput {
        lang: a.lang(),
        host: a.host,
        branding: &a.zone.name,
        footer: a.footer,
        ray_id: ray.as_str(),
        token: &token,
        difficulty,
        return_to,
        body_not_resent: !matches!(a.method, "GET" | "HEAD"),
        fallback_delay_secs: wait,
    });
    let mut head = ResponseHeader::build(signpost_challenge::STATUS, Some(10))?;
    let body = Bytes::from(rendered.html);
    for (name, value) in [
        ("content-type", "text/html; charset=utf-8"),
        ("content-security-policy", rendered.content_security_policy),
        ("content-language", rendered.content_language),
        ("cache-control", signpost_problem::CACHE_CONTROL),
        ("vary", "Accept, Accept-Language"),
        ("x-content-type-options", "nosniff"),
        ("cf-mitigated", CF_MITIGATED),
        (signpost_problem::RAY_ID_HEADER, ray.as_str()),
    ] {
        head.insert_header(name, value)?;
    }
    head.insert_header("content-length", body.len().to_string())?;
    Ok(Reply {
        head,
        body,
        code: Some(Code::CHALLENGE_REQUIRED),
        format: Format::Html,
        outcome: "page",
    })
}

/// The answer to a request challenged at `difficulty`: the page for a browser, the
/// `challenge_required` problem for an agent (with the zone's error rules, as any refusal), both
/// marked `cf-mitigated: challenge`. `asked` is the request as the error rules read it, `rule`
/// the rule that challenged.
pub fn challenge(
    policy: &signpost_policy::CompiledPolicy,
    asked: &crate::answer::error_rules::Asked<'_>,
    a: &Asking<'_>,
    difficulty: Difficulty,
    rule: Option<&str>,
    now: u64,
) -> Result<Reply> {
    let accept = crate::request::facts::accept_of(a.headers);
    if signpost_problem::negotiate(accept.as_deref()) == Format::Html {
        return page(a, difficulty, now, None, a.target);
    }
    let refused = crate::answer::error_rules::Refused {
        entry: crate::answer::entry(Code::CHALLENGE_REQUIRED),
        retry_after: None,
        by: rule,
        crawl: None,
    };
    let (mut answer, _) = crate::answer::error_rules::dress(policy, asked, a.ray, &refused)?;
    answer.head.insert_header("cf-mitigated", CF_MITIGATED)?;
    answer
        .head
        .insert_header("accept-signature", ACCEPT_SIGNATURE)?;
    Ok(Reply {
        head: answer.head,
        body: answer.body,
        code: Some(answer.code),
        format: answer.format,
        outcome: "problem",
    })
}

/// The answer at a challenge endpoint: `form` is the POSTed body for [`Endpoint::Verify`]
/// (at most [`signpost_challenge::MAX_FORM_LEN`] bytes read), the query for
/// [`Endpoint::Wait`]. A redeemed answer is a 303 back with the clearance; a refused one, the
/// page again at the zone's difficulty (a token's own difficulty is not trusted before it is
/// checked). With the refusal's kind, for the metrics.
pub fn at_endpoint(
    a: &Asking<'_>,
    endpoint: Endpoint,
    form: &[u8],
    now: u64,
) -> Result<(Reply, Result<&'static str, Rejected>)> {
    let settings = &a.zone.challenge.settings;
    match a
        .ring
        .redeem(endpoint, form, &a.visitor(), settings, now, a.tls)
    {
        Redeemed::Cleared {
            location,
            set_cookie,
            solved,
        } => {
            let mut head = ResponseHeader::build(303, Some(6))?;
            head.insert_header("location", location)?;
            head.insert_header("set-cookie", set_cookie)?;
            head.insert_header("cache-control", signpost_problem::CACHE_CONTROL)?;
            head.insert_header("content-length", "0")?;
            head.insert_header(signpost_problem::RAY_ID_HEADER, a.ray.to_hex().as_str())?;
            let reply = Reply {
                head,
                body: Bytes::new(),
                code: None,
                format: Format::Html,
                outcome: "solved",
            };
            Ok((reply, Ok(solved.method.as_str())))
        }
        Redeemed::Refused {
            reason,
            return_to,
            retry_token,
        } => {
            let retry = match (retry_token, reason) {
                (Some(token), Rejected::TooEarly { wait }) => Some((token, wait)),
                _ => None,
            };
            let mut reply = page(a, a.zone.challenge.difficulty, now, retry, &return_to)?;
            reply.outcome = "failed";
            Ok((reply, Err(reason)))
        }
    }
}

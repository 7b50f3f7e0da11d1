//! The operator's error rule for an answer the edge is about to make, and the request's values of
//! its tokens. Asked only when an error is being answered, and only when the policy has error
//! rules: a request no error concerns never comes here.
//!
//! [`dress`] is the one way an answer of the edge's own is dressed with the rule that speaks for
//! it: the live edge's refusals and failures (`pipeline.rs`), a trace's answer (`operator/trace.rs`) and
//! `signpost render` all call it, with the request as the policy reads it ([`Asked`]).

use std::borrow::Cow;
use std::net::IpAddr;

use pingora::proxy::Session;
use signpost_policy::{CompiledPolicy, CrawlRefusal, RequestFacts, ResponseFacts, ZoneId};
use signpost_problem::{CatalogEntry, Code, Custom, Format, Reason, TokenValues, Visitor};

use crate::answer::{Answer, Dressing};
use crate::request::facts::Facts;
use crate::request::ray::RayId;

/// A matched rule: its id (for the access log) and what it changes.
pub struct Matched<'a> {
    pub id: &'a str,
    pub custom: &'a Custom,
}

/// The request an answer is for, as the policy reads it, and what the phases settled about it.
pub struct Asked<'a> {
    pub facts: RequestFacts<'a>,
    /// The zone the phases settled; `None` when they settled none or did not run: then the zone
    /// the Host selects ([`CompiledPolicy::answering`]), so that an answer made before the phases
    /// (the error test endpoint) is dressed as a refusal on the same host is.
    pub zone: Option<ZoneId>,
    /// The client the phases settled; `None` when they did not run: then `[client_ip]`'s reading.
    pub client_ip: Option<IpAddr>,
    /// The client's country for `::GEO::` when it is given (a trace's `--country`); otherwise the
    /// country database's answer.
    pub country: Option<String>,
}

impl<'a> Asked<'a> {
    /// A real request: its facts, and the zone and client the phases settled (`None` before
    /// they ran).
    pub fn live(
        session: &'a Session,
        facts: &Facts,
        zone: Option<ZoneId>,
        client_ip: Option<IpAddr>,
        host: &'a str,
    ) -> Asked<'a> {
        Asked {
            facts: crate::request::facts::request_facts(session, facts, host),
            zone,
            client_ip,
            country: None,
        }
    }

    /// The zone and client the answer is for.
    fn who(&self, policy: &CompiledPolicy) -> (Option<ZoneId>, IpAddr) {
        match (self.zone, self.client_ip) {
            (Some(zone), Some(client_ip)) => (Some(zone), client_ip),
            (zone, client_ip) => {
                let (routed, resolved) = policy.answering(&self.facts);
                (zone.or(routed), client_ip.unwrap_or(resolved))
            }
        }
    }
}

/// An answer the edge makes of its own: the catalog entry, the wait, the rule that refused (its
/// own `response` speaks first) and crawl control's refusal, when it is crawl control's answer.
pub struct Refused<'a> {
    pub entry: &'static CatalogEntry,
    pub retry_after: Option<u32>,
    pub by: Option<&'a str>,
    pub crawl: Option<&'a CrawlRefusal>,
}

/// The answer for `refused`, dressed with what speaks for it: crawl control's own answer (with
/// its `crawler-*` headers), else the rule that refused's `response` or the first error rule
/// (the zone's, then the global ones) matching the request and the answer. With the rule that
/// spoke, for the access log and a trace.
pub fn dress<'p>(
    policy: &'p CompiledPolicy,
    asked: &Asked<'_>,
    ray: RayId,
    refused: &Refused<'_>,
) -> pingora::Result<(Answer, Option<Matched<'p>>)> {
    let entry = refused.entry;
    let rule = match refused.crawl {
        Some(_) => None,
        None => rule_for(policy, asked, entry.status, entry.code.get(), refused.by),
    };
    let crawl_custom = refused.crawl.map(crate::crawl::custom);
    let custom = rule.as_ref().map(|r| r.custom).or(crawl_custom.as_ref());
    let mut answer = answer_for(
        policy,
        asked,
        ray,
        entry,
        custom,
        refused.retry_after,
        Some(refused),
    )?;
    if let Some(refusal) = refused.crawl {
        crate::crawl::add_headers(&mut answer.head, refusal)?;
    }
    Ok((answer, rule))
}

/// Why the edge refused, as far as its page tells a person: the class of a 1010 (no User-Agent,
/// or a listed one) and of a 1020 (a site rule, or crawl control); for a 1009 the client's
/// country, returned apart (the reason borrows it). Nothing for an answer no refusal made (the
/// error test endpoint: no rule refused).
fn reason<'r>(
    policy: &CompiledPolicy,
    asked: &Asked<'_>,
    client: IpAddr,
    code: Code,
    refused: &Refused<'_>,
) -> (Option<Reason<'r>>, Option<String>) {
    match code {
        Code::COUNTRY_BANNED if refused.by.is_some() => (None, policy.country(client)),
        Code::BROWSER_SIGNATURE_BANNED if refused.by.is_some() => {
            // As the browser check reads it: an absent or blank User-Agent is empty.
            let empty = asked
                .facts
                .headers
                .get(http::header::USER_AGENT)
                .is_none_or(|ua| ua.as_bytes().trim_ascii().is_empty());
            let reason = if empty {
                Reason::NoUserAgent
            } else {
                Reason::ListedUserAgent
            };
            (Some(reason), None)
        }
        Code::FIREWALL_RULE_BLOCKED if refused.crawl.is_some() => (Some(Reason::Crawler), None),
        Code::FIREWALL_RULE_BLOCKED if refused.by.is_some() => (Some(Reason::SiteRule), None),
        _ => (None, None),
    }
}

/// The rule that speaks for an answer with HTTP status `status` and catalog code `edge_code` (0
/// for the origin's own error): the `response` of the rule that refused (`refused_by`), then
/// the first error rule (the zone's, then the global ones) matching the request and the answer.
pub fn rule_for<'p>(
    policy: &'p CompiledPolicy,
    asked: &Asked<'_>,
    status: u16,
    edge_code: u16,
    refused_by: Option<&str>,
) -> Option<Matched<'p>> {
    if !policy.has_error_rules() {
        return None;
    }
    let (zone, client_ip) = asked.who(policy);
    let response = ResponseFacts {
        code: status,
        edge_code,
    };
    policy
        .error_rule(zone, &asked.facts, client_ip, response, refused_by)
        .map(|(id, custom)| Matched { id, custom })
}

/// Renders `entry` for the request, in the format its `Accept` asks, dressed with `custom` when
/// one speaks for the answer (an error rule, a rule's own response, crawl control's answer)
/// with the request's token values.
pub fn render_for(
    policy: &CompiledPolicy,
    asked: &Asked<'_>,
    ray: RayId,
    entry: &'static CatalogEntry,
    custom: Option<&Custom>,
    retry_after: Option<u32>,
) -> pingora::Result<Answer> {
    answer_for(policy, asked, ray, entry, custom, retry_after, None)
}

/// [`render_for`], for the edge's own refusal `refused` when it is one: its page then tells a
/// person what the edge knows of the cause, unless an error rule says what happened in its own
/// words.
fn answer_for(
    policy: &CompiledPolicy,
    asked: &Asked<'_>,
    ray: RayId,
    entry: &'static CatalogEntry,
    custom: Option<&Custom>,
    retry_after: Option<u32>,
    refused: Option<&Refused<'_>>,
) -> pingora::Result<Answer> {
    let accept = crate::request::facts::accept_of(asked.facts.headers);
    let format = format(accept.as_deref(), custom);
    // Only a page reads who its reader is: the zone's language when it fixes one, else the
    // request's Accept-Language; and the cause.
    let country;
    let visitor = if format == Format::Html {
        let (zone, client) = asked.who(policy);
        let fixed = zone.and_then(|z| policy.zone(z).language);
        let accept_language =
            crate::request::facts::header_list(asked.facts.headers, http::header::ACCEPT_LANGUAGE);
        // Crawl control's message is its detail, and still a crawl refusal.
        let explained =
            refused.filter(|r| r.crawl.is_some() || custom.is_none_or(|c| c.detail.is_none()));
        let (reason, found) = match explained {
            Some(r) => reason(policy, asked, client, entry.code, r),
            None => (None, None),
        };
        country = found;
        Visitor {
            reason: reason.or_else(|| country.as_deref().map(Reason::Country)),
            ..Visitor::for_request(accept_language.as_deref(), fixed)
        }
    } else {
        Visitor::default()
    };
    let values = custom.map(|_| RequestValues::of(policy, asked));
    let dressing = custom
        .zip(values.as_ref())
        .map(|(custom, values)| values.dressing(Cow::Borrowed(custom)));
    // The normalised host is only shown here, so it is worked out here rather than kept (as an
    // allocated copy) by every proxied request.
    let zone = signpost_policy::normalize_host(asked.facts.host);
    Answer::new(
        entry,
        format,
        ray,
        &zone,
        retry_after,
        policy.problem_branding(),
        dressing.as_ref(),
        &visitor,
    )
}

/// The format of an answer for the client's `Accept`: the contract's negotiation, with
/// `text/plain` offered too when the rule that speaks gives `text` (its own plain answer).
pub fn format(accept: Option<&[u8]>, custom: Option<&Custom>) -> Format {
    match custom {
        Some(custom) if custom.text.is_some() => signpost_problem::negotiate_offering_text(accept),
        _ => signpost_problem::negotiate(accept),
    }
}

/// The request's values of `::CLIENT_IP::`, `::GEO::` and `::HOST::`, owned so that a
/// [`Dressing`] can borrow them.
pub struct RequestValues {
    client_ip: String,
    geo: String,
    host: String,
}

impl RequestValues {
    /// The values for the request `asked`, for the client the answer is for.
    fn of(policy: &CompiledPolicy, asked: &Asked<'_>) -> RequestValues {
        let (_, client) = asked.who(policy);
        RequestValues {
            client_ip: client.to_string(),
            geo: match &asked.country {
                Some(country) => country.to_ascii_uppercase(),
                None => policy.country(client).unwrap_or_default(),
            },
            host: asked.facts.host.to_owned(),
        }
    }

    /// The dressing of an answer: `custom` with these values.
    pub fn dressing<'a>(&'a self, custom: Cow<'a, Custom>) -> Dressing<'a> {
        Dressing {
            custom,
            tokens: TokenValues {
                client_ip: &self.client_ip,
                geo: &self.geo,
                host: &self.host,
                ..TokenValues::default()
            },
        }
    }
}

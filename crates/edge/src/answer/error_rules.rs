//! The operator's error rule for an answer the edge is about to make, and the request's values of
//! its tokens. Asked only when an error is being answered, and only when the policy has error
//! rules: a request no error concerns never comes here.

use std::borrow::Cow;

use pingora::proxy::Session;
use signpost_policy::ResponseFacts;
use signpost_problem::{CatalogEntry, Custom, Format, TokenValues};

use crate::answer::{Answer, Dressing};
use crate::ctx::RequestCtx;
use crate::reload::Loaded;
use crate::request::facts::request_host;

/// A matched rule: its id (for the access log) and what it changes.
pub struct Matched<'a> {
    pub id: &'a str,
    pub custom: &'a Custom,
}

/// The rule that speaks for an answer with HTTP status `status` and catalog code `edge_code` (0
/// for the origin's own error): the `response` of the rule that refused, then the first error
/// rule (the zone's, then the global ones) matching the request and the answer.
pub fn find<'a>(
    loaded: &'a Loaded,
    session: &Session,
    ctx: &RequestCtx,
    status: u16,
    edge_code: u16,
) -> Option<Matched<'a>> {
    if !loaded.policy.has_error_rules() {
        return None;
    }
    let host = request_host(session);
    let facts = crate::request::facts::request_facts(session, &ctx.facts, &host);
    let response = ResponseFacts {
        code: status,
        edge_code,
    };
    loaded
        .policy
        .error_rule(
            ctx.zone,
            &facts,
            ctx.client(),
            response,
            ctx.rule_id.as_deref(),
        )
        .map(|(id, custom)| Matched { id, custom })
}

/// The format of an answer for the client's `Accept`: the contract's negotiation, with
/// `text/plain` offered too when the rule that speaks gives `text` (its own plain answer).
pub fn format(accept: Option<&[u8]>, custom: Option<&Custom>) -> Format {
    match custom {
        Some(custom) if custom.text.is_some() => signpost_problem::negotiate_offering_text(accept),
        _ => signpost_problem::negotiate(accept),
    }
}

/// Renders `entry` for the request, in the format its `Accept` asks, dressed with `custom` when
/// one speaks for the answer (an error rule, a rule's own response, crawl control's answer)
/// with the request's token values: how every answer of the edge to a real request is made.
pub fn render(
    loaded: &Loaded,
    session: &Session,
    ctx: &RequestCtx,
    entry: &'static CatalogEntry,
    custom: Option<&Custom>,
    retry_after: Option<u32>,
) -> pingora::Result<Answer> {
    let format = format(crate::request::facts::accept(session).as_deref(), custom);
    let values = custom.map(|_| RequestValues::new(loaded, session, ctx));
    let dressing = custom
        .zip(values.as_ref())
        .map(|(custom, values)| values.dressing(Cow::Borrowed(custom)));
    // The normalised host is only shown here, so it is worked out here rather than kept (as an
    // allocated copy) by every proxied request.
    let host = request_host(session);
    let zone = signpost_policy::normalize_host(&host);
    Answer::new(
        entry,
        format,
        ctx.ray_id,
        &zone,
        retry_after,
        loaded.policy.problem_branding(),
        dressing.as_ref(),
    )
}

/// The request's values of `::CLIENT_IP::`, `::GEO::` and `::HOST::`, owned so that a
/// [`Dressing`] can borrow them.
pub struct RequestValues {
    client_ip: String,
    geo: String,
    host: String,
}

impl RequestValues {
    pub fn new(loaded: &Loaded, session: &Session, ctx: &RequestCtx) -> RequestValues {
        let client = ctx.client();
        RequestValues {
            client_ip: client.to_string(),
            geo: loaded.policy.country(client).unwrap_or_default(),
            host: request_host(session).into_owned(),
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

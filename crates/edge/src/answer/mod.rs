//! The one way a problem becomes a response: the catalog entry rendered in the negotiated format
//! with the operator's branding, under a head that carries the contract's headers. Every answer
//! the edge makes itself goes through [`Answer::new`]: refusals, origin failures, the error test
//! endpoint, requests Pingora could not read, and the origin's errors the edge reshapes; with the
//! operator's error rule when one matched (`answer/error_rules.rs`).

pub(crate) mod error_rules;

use std::borrow::Cow;

use bytes::Bytes;
use pingora::Result;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use signpost_problem::{
    Branding, CatalogEntry, Code, Custom, Format, Problem, TokenValues, Visitor,
};

use crate::request::ray::RayId;

/// A rendered problem, ready to be written.
pub struct Answer {
    pub head: ResponseHeader,
    pub body: Bytes,
    pub code: Code,
    pub format: Format,
}

/// What the operator's error rule changes in an answer, with the request's token values.
pub struct Dressing<'a> {
    pub custom: Cow<'a, Custom>,
    pub tokens: TokenValues<'a>,
}

impl Answer {
    /// Renders `entry` for the request `ray`, as `format` asks. `zone` is the host the client
    /// asked for, normalised; `retry_after` the wait when it is not the catalog's; `dressing`
    /// the operator's error rule, when one matched; `visitor` who reads the page for people (its
    /// language, what the edge knows of the refusal's cause).
    #[expect(
        clippy::too_many_arguments,
        reason = "each is one fact of the answer, named at the call; a struct would only rename them"
    )]
    pub fn new(
        entry: &'static CatalogEntry,
        format: Format,
        ray: RayId,
        zone: &str,
        retry_after: Option<u32>,
        branding: &Branding,
        dressing: Option<&Dressing<'_>>,
        visitor: &Visitor<'_>,
    ) -> Result<Answer> {
        let ray = ray.to_hex();
        let problem = Problem {
            entry,
            ray_id: ray.as_str(),
            timestamp: std::time::SystemTime::now(),
            zone,
            retry_after,
        };
        let no_rule = Custom::default();
        let (custom, tokens) = match dressing {
            Some(d) => (&*d.custom, d.tokens),
            None => (&no_rule, TokenValues::default()),
        };
        let rendered = signpost_problem::render_for_visitor(
            &problem, format, branding, custom, &tokens, visitor,
        );
        let mut head = ResponseHeader::build(rendered.status, Some(8))?;
        if head.status.canonical_reason().is_none() {
            // 52x and 530 have no standard reason phrase: say what they mean on the status line.
            head.set_reason_phrase(Some(&entry.title))?;
        }
        for (name, value) in rendered.headers(ray.as_str()) {
            head.insert_header(name, value)?;
        }
        Ok(Answer {
            head,
            // The format rendered: plain text asked of a rule without `text` is its Markdown.
            format: rendered.format,
            body: rendered.body,
            code: entry.code,
        })
    }

    /// Writes the answer as the whole response (the head alone for HEAD). It carries a body and a
    /// Content-Length, so the client's connection can carry its next request (Pingora's own
    /// `respond_error` closes it). A write that fails is the client's side (it left): a
    /// cancellation, never the edge's error.
    pub async fn write(self, session: &mut Session, head_only: bool) -> Result<()> {
        write_whole(session, self.head, self.body, head_only).await
    }
}

/// Writes `head` and `body` as the whole response (the head alone when `head_only`), for every
/// answer the edge makes itself; a write that fails is the client's side (it left).
pub async fn write_whole(
    session: &mut Session,
    head: ResponseHeader,
    body: Bytes,
    head_only: bool,
) -> Result<()> {
    session
        .write_response_header(Box::new(head), head_only)
        .await
        .map_err(|e| e.into_down())?;
    if !head_only {
        session
            .write_response_body(Some(body), true)
            .await
            .map_err(|e| e.into_down())?;
    }
    Ok(())
}

/// The catalog entry for `code`. Every code the edge raises is in the catalog (a test checks each
/// `Code` constant); a code that were not would still get a well-formed answer, the edge's own
/// 500.
pub fn entry(code: Code) -> &'static CatalogEntry {
    signpost_problem::lookup(code)
        .or_else(|| signpost_problem::lookup(Code::INTERNAL_ERROR))
        .unwrap_or_else(signpost_problem::not_found)
}

/// Where the edge answers `/cdn-cgi/error/<code>` itself, on every host.
const ERROR_PAGE_PREFIX: &str = "/cdn-cgi/error";

/// The catalog entry `/cdn-cgi/error/<code>` asks for (the 404 entry for a bad code), or `None`
/// when the path is not the error test endpoint.
pub(crate) fn error_page(path: &str) -> Option<&'static CatalogEntry> {
    let rest = path.strip_prefix(ERROR_PAGE_PREFIX)?;
    match rest.strip_prefix('/') {
        Some(code) => Some(signpost_problem::lookup_path_code(code)),
        None if rest.is_empty() => Some(signpost_problem::not_found()),
        // `/cdn-cgi/errors` and the like are ordinary paths.
        None => None,
    }
}

//! An answer rendered: the problem's facts after the operator's rule, in the negotiated format,
//! with the headers every problem response carries. The renderers of each format (`html`,
//! `json`, `markdown`) read the facts from `problem`; this module is the one that calls them.

use bytes::Bytes;

use crate::custom::Custom;
use crate::language::Language;
use crate::negotiate::Format;
use crate::people::Visitor;
use crate::problem::{Branding, CACHE_CONTROL, Problem, Prose, RAY_ID_HEADER, View};
use crate::tokens::{Escape, TokenValues, expand};
use crate::{html, json, markdown};

/// A rendered problem response: status, body and what the headers need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// HTTP status.
    pub status: u16,
    /// The format of `body`.
    pub format: Format,
    /// The complete body.
    pub body: Bytes,
    /// The `Retry-After` seconds, `Some` exactly when retryable.
    pub retry_after: Option<u32>,
    /// The language of the edge's own page for people, for `Content-Language`; `None` for the
    /// agents' formats (whose text is the contract's) and for an operator's own page or text.
    pub language: Option<Language>,
    /// Whether `language` followed the request's `Accept-Language`, which `Vary` then names.
    pub language_negotiated: bool,
}

impl Rendered {
    /// The response headers, in order: `Content-Type`, `Content-Length`, `Cache-Control`,
    /// `Vary: Accept` (the body depends on it; `Accept, Accept-Language` for a page whose
    /// language was negotiated), `Content-Language` for the edge's own page,
    /// `X-Content-Type-Options`, for HTML a
    /// `Content-Security-Policy` that allows only the inline style, `Retry-After` when retryable,
    /// and the ray id under [`RAY_ID_HEADER`].
    pub fn headers(&self, ray_id: &str) -> Vec<(&'static str, String)> {
        let mut headers = vec![
            ("content-type", self.format.content_type().to_string()),
            ("content-length", self.body.len().to_string()),
            ("cache-control", CACHE_CONTROL.to_string()),
            (
                "vary",
                if self.language.is_some() && self.language_negotiated {
                    "Accept, Accept-Language"
                } else {
                    "Accept"
                }
                .to_string(),
            ),
        ];
        if let Some(language) = self.language {
            headers.push(("content-language", language.tag().to_string()));
        }
        headers.push(("x-content-type-options", "nosniff".to_string()));
        if self.format == Format::Html {
            headers.push((
                "content-security-policy",
                "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'".to_string(),
            ));
        }
        if let Some(seconds) = self.retry_after {
            headers.push(("retry-after", seconds.to_string()));
        }
        headers.push((RAY_ID_HEADER, ray_id.to_string()));
        headers
    }
}

/// Renders `problem` in `format`. JSON and problem+json share one body.
///
/// Never fails and never panics: everything from the request is escaped for the format.
pub fn render(problem: &Problem<'_>, format: Format, branding: &Branding) -> Rendered {
    render_custom(
        problem,
        format,
        branding,
        &Custom::default(),
        &TokenValues::default(),
    )
}

/// The wait announced when an operator's rule makes retryable an answer that has no wait of its
/// own and gives none.
pub const DEFAULT_RETRY_AFTER: u32 = 60;

/// Renders `problem` in `format` as the operator's rule `custom` says (see [`Custom`]), for an
/// English reader the edge knows nothing more about ([`Visitor::default`]).
///
/// `tokens` gives the request's values of `::CLIENT_IP::`, `::GEO::` and `::HOST::`; the ray id,
/// code, wait and zone are the problem's. Every token value is escaped for where it lands.
pub fn render_custom(
    problem: &Problem<'_>,
    format: Format,
    branding: &Branding,
    custom: &Custom,
    tokens: &TokenValues<'_>,
) -> Rendered {
    render_for_visitor(
        problem,
        format,
        branding,
        custom,
        tokens,
        &Visitor::default(),
    )
}

/// As [`render_custom`], with the page for people written for `visitor`: in its language, with
/// what the edge knows of the refusal's cause. The agents' formats (JSON, Markdown, text) do
/// not depend on `visitor`: their text is the contract's.
pub fn render_for_visitor(
    problem: &Problem<'_>,
    format: Format,
    branding: &Branding,
    custom: &Custom,
    tokens: &TokenValues<'_>,
    visitor: &Visitor<'_>,
) -> Rendered {
    let entry = problem.entry;
    // Plain text is the operator's `text` and nothing else: without one, the closest answer a
    // reader of text gets is the Markdown, labelled as such.
    let format = match format {
        Format::Text if custom.text.is_none() => Format::Markdown,
        format => format,
    };
    let retryable = custom.retryable.unwrap_or(entry.retryable);
    let retry_after = retryable.then(|| {
        custom
            .retry_after
            .or(problem.retry_after)
            .or(entry.retry_after)
            .unwrap_or(DEFAULT_RETRY_AFTER)
    });
    let tokens = TokenValues {
        ray_id: problem.ray_id,
        code: entry.code.get(),
        retry_after,
        zone: problem.zone,
        ..*tokens
    };
    let view = View {
        problem,
        status: custom.status.unwrap_or(entry.status),
        retryable,
        retry_after,
    };
    // The prose is made only for a body that shows it: the operator's own HTML page, Markdown or
    // text replaces it.
    let prose = |escape| Prose::new(entry, custom, &tokens, retry_after, escape);
    let body = match format {
        Format::Json | Format::ProblemJson => {
            json::render(&view, &prose(Escape::None), branding, custom, &tokens)
        }
        Format::Markdown => {
            markdown::render(&view, branding, custom, &tokens, || prose(Escape::Markdown))
        }
        Format::Html => match &custom.html {
            Some(page) => expand(page, &tokens, Escape::Html).into_bytes(),
            None => html::render(&view, &prose(Escape::None), branding, custom, visitor),
        },
        Format::Text => text_body(custom.text.as_deref().unwrap_or_default(), &tokens),
    };
    // The edge's own page is in the visitor's language; an operator's page is its own.
    let language = (format == Format::Html && custom.html.is_none()).then_some(visitor.language);
    Rendered {
        status: view.status,
        format,
        body: Bytes::from(body),
        retry_after,
        language,
        language_negotiated: visitor.negotiated,
    }
}

/// The operator's `text` as the whole `text/plain` body: token values on one line, ending in a
/// line break (a terminal's prompt then starts on its own line).
fn text_body(text: &str, tokens: &TokenValues<'_>) -> Vec<u8> {
    let mut body = expand(text, tokens, Escape::Text);
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body.into_bytes()
}

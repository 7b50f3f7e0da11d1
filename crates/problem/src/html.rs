//! The HTML page for people: self-contained, in the visitor's language, escaped by the template
//! engine. It says what happened and what a visitor can do (`people.rs`), never the agents'
//! guidance, and keeps every fact of the contract: code, title, status, ray id, time, host, wait.

use askama::Template;
use pulldown_cmark::{Options, Parser, html};

use crate::custom::Custom;
use crate::people::{Visitor, Words, book};
use crate::problem::{Branding, DEFAULT_FOOTER, Prose, View};

/// The page. askama escapes every `{{ }}` for HTML; only `guidance_html`, rendered here from the
/// pages' or the operator's trusted Markdown (a request's value reaches it only through a token,
/// escaped as Markdown text), is marked safe.
#[derive(Template)]
#[template(path = "problem.html")]
struct Page<'a> {
    lang: &'static str,
    words: &'static Words,
    /// `Error 1015`.
    code_line: String,
    title: &'a str,
    /// `Error 1015: <title>`, the document's title.
    wire_title: String,
    detail: &'a str,
    /// What the edge knows of the refusal's cause.
    reason: Option<String>,
    guidance_html: String,
    ray_id: &'a str,
    timestamp: String,
    zone: &'a str,
    status: u16,
    /// `7 s`, when retryable.
    retry_after: Option<String>,
    footer: &'a str,
    /// For the edge's 5xx answers: the request's way, you - the edge - the host, and where it
    /// broke. `None` for refusals (4xx), where nothing broke.
    way: Option<Way>,
}

/// Where a failed request's way broke.
struct Way {
    /// The edge itself failed (its own 500s, compute and rewrite errors); else the way to the
    /// host, or the host, did.
    edge_broke: bool,
}

impl Way {
    fn of(status: u16, category: crate::Category) -> Option<Way> {
        use crate::Category::*;
        (status >= 500).then_some(Way {
            edge_broke: matches!(category, Cloudflare | Worker | Snippet | Rewrite),
        })
    }
}

/// `{name}` in `template` replaced by `value`, once each, in order: a value is never scanned
/// for the placeholders that follow.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    'scan: while let Some(at) = rest.find('{') {
        for (name, value) in values {
            if let Some(after) = rest[at..]
                .strip_prefix('{')
                .and_then(|r| r.strip_prefix(name))
                .and_then(|r| r.strip_prefix('}'))
            {
                out.push_str(&rest[..at]);
                out.push_str(value);
                rest = after;
                continue 'scan;
            }
        }
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out
}

pub(crate) fn render(
    view: &View<'_>,
    prose: &Prose,
    branding: &Branding,
    custom: &Custom,
    visitor: &Visitor<'_>,
) -> Vec<u8> {
    let problem = view.problem;
    let entry = problem.entry;
    let book = book(visitor.language);
    let page = book.page(entry);
    let words = &book.words;
    // The operator's text speaks as written; the rest is the page's, in the visitor's language.
    let title = match (&custom.title, &page.title) {
        (Some(_), _) => prose.title(),
        (None, Some(title)) => title.as_str(),
        (None, None) => entry.title.as_str(),
    };
    let detail = match (&custom.detail, &page.detail) {
        (Some(_), _) => &*prose.detail,
        (None, Some(detail)) => detail.as_str(),
        (None, None) => entry.detail.as_str(),
    };
    // The cause is told on the code it explains only.
    let reason = visitor
        .reason
        .filter(|r| r.code() == entry.code.get())
        .and_then(|r| r.sentence(book));
    let guidance = match &custom.what_you_should_do {
        Some(_) => prose.guidance.clone(),
        None => page.todo(view.retry_after),
    };
    let mut guidance_html = String::with_capacity(guidance.len() * 2);
    html::push_html(
        &mut guidance_html,
        Parser::new_ext(&guidance, Options::empty()),
    );
    let code = entry.code.to_string();
    let footer = if branding.footer == DEFAULT_FOOTER {
        &words.footer
    } else {
        &branding.footer
    };
    let page = Page {
        lang: visitor.language.tag(),
        words,
        code_line: fill(&words.error_code, &[("code", &code)]),
        title,
        wire_title: fill(&words.wire_title, &[("code", &code), ("title", title)]),
        detail,
        reason,
        guidance_html,
        ray_id: problem.ray_id,
        timestamp: problem.timestamp_string(),
        zone: problem.zone,
        status: view.status,
        retry_after: view
            .retry_after
            .map(|s| fill(&words.seconds, &[("n", &s.to_string())])),
        footer,
        way: Way::of(view.status, entry.error_category),
    };
    // Rendering to a String only fails if a Display impl fails, which ours do not; fall back
    // to a bare page rather than panic.
    page.render()
        .unwrap_or_else(|_| format!("<!doctype html><title>Error {}</title>", entry.code))
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn fill_replaces_each_placeholder_once() {
        assert_eq!(
            fill(
                "Error {code}: {title}",
                &[("code", "1015"), ("title", "{code}")]
            ),
            "Error 1015: {code}"
        );
        assert_eq!(fill("{n} s", &[("n", "7")]), "7 s");
        assert_eq!(fill("{x} {", &[("n", "7")]), "{x} {");
        assert_eq!(fill("é{n}ü", &[("n", "7")]), "é7ü");
    }
}

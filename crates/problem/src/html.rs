//! The HTML page for people: self-contained, escaped by the template engine.

use askama::Template;
use pulldown_cmark::{Options, Parser, html};

use crate::problem::{Branding, Prose, View};

/// The page. askama escapes every `{{ }}` for HTML; only `guidance_html`, rendered here from
/// the catalog's or the operator's trusted Markdown (a request's value reaches it only through a
/// token, escaped as Markdown text), is marked safe.
#[derive(Template)]
#[template(path = "problem.html")]
struct Page<'a> {
    code: u16,
    title: &'a str,
    wire_title: &'a str,
    detail: &'a str,
    guidance_html: String,
    ray_id: &'a str,
    timestamp: String,
    zone: &'a str,
    status: u16,
    retry_after: Option<u32>,
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

pub(crate) fn render(view: &View<'_>, prose: &Prose, branding: &Branding) -> Vec<u8> {
    let problem = view.problem;
    let entry = problem.entry;
    let guidance = &prose.guidance;
    let mut guidance_html = String::with_capacity(guidance.len() * 2);
    html::push_html(
        &mut guidance_html,
        Parser::new_ext(guidance, Options::empty()),
    );
    let page = Page {
        code: entry.code.get(),
        title: prose.title(),
        wire_title: &prose.wire_title,
        detail: &prose.detail,
        guidance_html,
        ray_id: problem.ray_id,
        timestamp: problem.timestamp_string(),
        zone: problem.zone,
        status: view.status,
        retry_after: view.retry_after,
        footer: &branding.footer,
        way: Way::of(view.status, entry.error_category),
    };
    // Rendering to a String only fails if a Display impl fails, which ours do not; fall back
    // to a bare page rather than panic.
    page.render()
        .unwrap_or_else(|_| format!("<!doctype html><title>Error {}</title>", entry.code))
        .into_bytes()
}

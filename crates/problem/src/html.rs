//! The HTML page for people: self-contained, escaped by the template engine.

use askama::Template;
use pulldown_cmark::{Options, Parser, html};

use crate::problem::{Branding, Problem};

/// The page. askama escapes every `{{ }}` for HTML; only `guidance_html`, rendered here from
/// the catalog's trusted Markdown, is marked safe.
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
}

pub(crate) fn render(problem: &Problem<'_>, branding: &Branding) -> Vec<u8> {
    let entry = problem.entry;
    let guidance = problem.guidance();
    let mut guidance_html = String::with_capacity(guidance.len() * 2);
    html::push_html(
        &mut guidance_html,
        Parser::new_ext(&guidance, Options::empty()),
    );
    let page = Page {
        code: entry.code.get(),
        title: &entry.title,
        wire_title: entry.wire_title(),
        detail: &entry.detail,
        guidance_html,
        ray_id: problem.ray_id,
        timestamp: problem.timestamp_string(),
        zone: problem.zone,
        status: entry.status,
        retry_after: problem.effective_retry_after(),
        footer: &branding.footer,
    };
    // Rendering to a String only fails if a Display impl fails, which ours do not; fall back
    // to a bare page rather than panic.
    page.render()
        .unwrap_or_else(|_| format!("<!doctype html><title>Error {}</title>", entry.code))
        .into_bytes()
}
